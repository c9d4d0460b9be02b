"""The thresholds of the sweep's judgements: which M is decode- or prefill-sized, the expert
shape, and when eager time is flat, launch-bound or near the floor (questions 1 and 2; the
kernel-power answers read the size classes too)."""

from __future__ import annotations

#: M ≤ this is decode-sized (tokens per expert during decode).
DECODE_MAX_M = 64
#: M ≥ this is prefill-sized.
PREFILL_MIN_M = 4096
#: The representative decode-sized M (the seed's 512 × 8 / 256).
DECODE_M = 16
#: The expert shape's name and geometry: the expert's down projection (expert 2048 -> hidden
#: 6144), the seed's decode GEMM; ``expert_up`` is its name in results made before 2026-12-01.
EXPERT_SHAPE = "down"
EXPERT_SHAPE_BEFORE = "expert_up"
EXPERT_NK = (6144, 2048)
#: Eager time is "flat" while it stays within this factor of its smallest-M value (a break
#: needs two consecutive sizes beyond it by more than their noise).
FLAT_FACTOR = 1.5
#: Launch cost at least this fraction of eager time: launch-bound.
LAUNCH_BOUND_SHARE = 0.5
#: Cold time within this factor of the roofline floor: bound by the floor's resource.
NEAR_FLOOR = 2.0

#: The size classes a ranking is answered per, in order (:func:`size_class`).
SIZE_CLASSES = ("decode-sized", "middle", "prefill-sized")


def size_class(m: float) -> str:
    """``decode-sized`` (M ≤ :data:`DECODE_MAX_M`), ``prefill-sized`` (M ≥
    :data:`PREFILL_MIN_M`) or ``middle``."""
    if m <= DECODE_MAX_M:
        return SIZE_CLASSES[0]
    if m >= PREFILL_MIN_M:
        return SIZE_CLASSES[2]
    return SIZE_CLASSES[1]
