"""The class of each kernel-power window: what bounds the kernel, or its clock, in it.

One rule for the report's kernel-power table (a ``class`` and ``why`` per window, the rule's
text printed beside it) and for question 3's findings (which windows were power-capped or
thermally throttled). Nothing is invented: a window with no power samples says so, and one
without GPM utilisation is not called launch-, memory- or compute-bound.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ...core.finding_records import field_getter, num_of, text_of
from ...instruments.nvml import reason_names

#: Utilisation (GPM, %) at or above which a pipe counts as the busy one.
UTIL_BUSY_PCT = 50.0
#: SM utilisation (%) under which kernels that run back to back leave SMs idle.
UNDERFILLED_SM_PCT = 80.0
THERMAL_REASONS = ("hw_thermal_slowdown", "sw_thermal_slowdown")
#: Clocks-event reasons that say the power limit held the clock down.
POWER_CAP_REASONS = ("sw_power_cap", "hw_power_brake_slowdown")
#: Every reason that is a limit (hw_slowdown: NVML's hardware slowdown, power or thermal).
LIMIT_REASONS = (*POWER_CAP_REASONS, *THERMAL_REASONS, "hw_slowdown")
#: Modes whose loop replays one CUDA graph (cold: rotating weight sets inside the graph):
#: the CPU launches nothing between kernels, so a low SM utilisation is never launch cost.
GRAPH_MODES = ("graph", "cold")
GPM_COLUMNS = ("sm_util", "tensor_util", "dram_util")

CLASSES: tuple[str, ...] = (
    "idle",
    "power-capped",
    "thermally throttled",
    "launch-bound",
    "under-filled",
    "memory-bound",
    "compute-bound",
    "unclassified",
    "no data",
)

#: The rule, in the order it is applied; the first condition that holds names the class.
CLASSIFICATION_RULE: tuple[str, ...] = (
    "status not ok (the loop did not run), or no power source (no NVML) → no data",
    "an idle window (no kernel running) → idle",
    f"clocks-event reasons include {' or '.join(THERMAL_REASONS)} → thermally throttled",
    f"reasons include {' or '.join(POWER_CAP_REASONS)} (a power cap held the clock) → power-capped",
    "no GPM utilisation (SM, tensor, DRAM all unknown) → unclassified: power alone cannot "
    "tell what bounds the kernel",
    f"tensor-pipe utilisation ≥ {UTIL_BUSY_PCT:.0f} % → compute-bound",
    f"DRAM bandwidth utilisation ≥ {UTIL_BUSY_PCT:.0f} % → memory-bound",
    f"SM utilisation < {UTIL_BUSY_PCT:.0f} % in an eager window (the GPU idles between "
    f"kernels the CPU launches) → launch-bound; a {' or '.join(GRAPH_MODES)} window replays "
    "a CUDA graph and is never launch-bound",
    f"SM utilisation < {UNDERFILLED_SM_PCT:.0f} % with tensor and DRAM below "
    f"{UTIL_BUSY_PCT:.0f} % (kernels run back to back but their grid leaves SMs idle, as "
    "decode-sized GEMMs do) → under-filled",
    "anything else → unclassified",
)


def _pct(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.0f}%"


def _watts(value: Any) -> str:
    w = num_of(value)
    return "no power reading" if math.isnan(w) else f"{w:.0f} W"


def limit_reasons(cell: Any) -> list[str]:
    """The power or thermal limits among a ``throttle_reasons`` cell's reasons."""
    return [r for r in reason_names(cell) if r in LIMIT_REASONS]


def classify_window(row: Any) -> tuple[str, str]:
    """``(class, why)`` of one window row (a mapping or a pandas Series); see the rule."""
    get = field_getter(row)
    status = text_of(get("status", "ok")) or "ok"
    if status != "ok":
        error = text_of(get("error", ""))
        return "no data", f"status {status}" + (f": {error[:120]}" if error else "")
    source = text_of(get("power_source", "")) or "none"
    if source == "none":
        return "no data", "no NVML on this machine: no power was measured"
    label, mode = text_of(get("label", "")), text_of(get("mode", ""))
    if label == "idle" or mode == "idle":
        return "idle", f"idle baseline ({_watts(get('avg_w'))})"
    reasons = reason_names(get("throttle_reasons", ""))
    thermal = [r for r in reasons if r in THERMAL_REASONS]
    if thermal:
        temp = num_of(get("temp_c_max"))
        extra = f", max {temp:.0f} °C" if not math.isnan(temp) else ""
        return "thermally throttled", f"reasons: {', '.join(thermal)}{extra}"
    power = [r for r in reasons if r in POWER_CAP_REASONS]
    pct_limit = num_of(get("pct_limit"))
    if power:
        return "power-capped", f"{', '.join(power)} at {_pct(pct_limit)} of the limit"
    sm, tensor, dram = (num_of(get(c)) for c in GPM_COLUMNS)
    if all(math.isnan(v) for v in (sm, tensor, dram)):
        where = f"{_watts(get('avg_w'))}, {_pct(pct_limit)} of the limit"
        return "unclassified", f"no GPM utilisation ({source}): power only, {where}"
    if not math.isnan(tensor) and tensor >= UTIL_BUSY_PCT:
        return "compute-bound", f"tensor {tensor:.0f}% ≥ {UTIL_BUSY_PCT:.0f}%"
    if not math.isnan(dram) and dram >= UTIL_BUSY_PCT:
        return "memory-bound", f"DRAM {dram:.0f}% ≥ {UTIL_BUSY_PCT:.0f}% (tensor {_pct(tensor)})"
    graph = mode in GRAPH_MODES
    if not math.isnan(sm) and sm < UTIL_BUSY_PCT and not graph:
        return (
            "launch-bound",
            f"SM util {sm:.0f}% < {UTIL_BUSY_PCT:.0f}%: idle between kernels "
            f"(tensor {_pct(tensor)}, DRAM {_pct(dram)})",
        )
    if not math.isnan(sm) and sm < UNDERFILLED_SM_PCT:
        replay = f" ({mode}: a CUDA graph replay, no launch gaps)" if graph else ""
        return (
            "under-filled",
            f"SM util {sm:.0f}% < {UNDERFILLED_SM_PCT:.0f}% with tensor {_pct(tensor)} and "
            f"DRAM {_pct(dram)} < {UTIL_BUSY_PCT:.0f}%: too few blocks to fill the GPU{replay}",
        )
    return (
        "unclassified",
        f"tensor {_pct(tensor)} and DRAM {_pct(dram)} < {UTIL_BUSY_PCT:.0f}% "
        f"with SM util {_pct(sm)}",
    )


def classify_windows(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` with the columns ``class`` and ``why`` (see :data:`CLASSIFICATION_RULE`)."""
    out = df.copy()
    if out.empty:
        out["class"] = pd.Series(dtype=str)
        out["why"] = pd.Series(dtype=str)
        return out
    results = [classify_window(rec) for rec in out.to_dict("records")]
    out["class"] = [c for c, _ in results]
    out["why"] = [w for _, w in results]
    return out
