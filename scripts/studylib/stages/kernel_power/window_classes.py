"""The class of each kernel-power window: what bounds the kernel, or its clock, in it; whether
a power or thermal limit held the clock down (``limit``); and the group of loops question 3
answers it in (``group``).

One rule for the report's kernel-power table (``class``, ``limit``, ``group`` and ``why`` per
window, the rule's text printed beside it), question 3's answers (each group's verdict reads
its windows' ``limit``) and the figures. Nothing is invented: a window with no power samples
says so, one without GPM utilisation is not called launch-, memory- or compute-bound, and one
without a maximum SM clock to hold its clock against is not called throttled.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ...core.finding_records import _dtype_name, field_getter, num_of, text_of
from ...core.verdicts import NOISE_FLOOR, against_threshold, decision_noise
from ...instruments.nvml import reason_names
from ..sweep.sweep_thresholds import DECODE_MAX_M, PREFILL_MIN_M

#: Utilisation (GPM, %) at or above which a pipe counts as the busy one.
UTIL_BUSY_PCT = 50.0
#: SM utilisation (%) under which kernels that run back to back leave SMs idle.
UNDERFILLED_SM_PCT = 80.0
THERMAL_REASONS = ("hw_thermal_slowdown", "sw_thermal_slowdown")
#: Clocks-event reasons that say the power limit held the clock down.
POWER_CAP_REASONS = ("sw_power_cap", "hw_power_brake_slowdown")
#: NVML's hardware slowdown (power brake or temperature, the driver does not say which).
SLOWDOWN_REASONS = ("hw_slowdown",)
#: Every reason that is a limit.
LIMIT_REASONS = (*POWER_CAP_REASONS, *THERMAL_REASONS, *SLOWDOWN_REASONS)
#: Modes whose loop replays one CUDA graph (cold: rotating weight sets inside the graph):
#: the CPU launches nothing between kernels, so a low SM utilisation is never launch cost.
GRAPH_MODES = ("graph", "cold")
GPM_COLUMNS = ("sm_util", "tensor_util", "dram_util")
#: How far a window's median SM clock may sit below the GPU's maximum and still count as the
#: maximum: one median per window has no spread of its own, so the study's floor.
CLOCK_NOISE = decision_noise()
CLOCK_NOISE_FROM = f"{100 * NOISE_FLOOR:.0f} % floor (one median SM clock per window)"

# A window's limit: was its clock held down by a power or thermal limit?
FULL_CLOCK = "full clock"
POWER_CAPPED = "power-capped"
THERMAL = "thermally throttled"
SLOWED = "hw slowdown"
UNDECIDED = "undecided"
#: Limits that hold the clock down (each needs its reason AND a clock below the maximum).
HELD_DOWN = (POWER_CAPPED, THERMAL, SLOWED)
LIMITS = (FULL_CLOCK, *HELD_DOWN, UNDECIDED)

CLASSES: tuple[str, ...] = (
    "idle",
    POWER_CAPPED,
    THERMAL,
    SLOWED,
    "launch-bound",
    "under-filled",
    "memory-bound",
    "compute-bound",
    "unclassified",
    "no data",
)

#: The limit rule (column ``limit``): a clock drop counts only beyond its noise.
LIMIT_RULE: tuple[str, ...] = (
    "an idle window, or one without power → no limit judgement",
    "no maximum SM clock (hardware.json) or no clock reading → undecided",
    f"reasons include {' or '.join(THERMAL_REASONS)} and the SM clock is below its maximum "
    f"by more than {100 * CLOCK_NOISE:.0f} % → {THERMAL}",
    f"reasons include {' or '.join(POWER_CAP_REASONS)}, clock below its maximum by more than "
    f"{100 * CLOCK_NOISE:.0f} % → {POWER_CAPPED}",
    f"reasons include {' or '.join(SLOWDOWN_REASONS)}, clock below by more than "
    f"{100 * CLOCK_NOISE:.0f} % → {SLOWED}",
    f"no limit reason and the clock within {100 * CLOCK_NOISE:.0f} % of its maximum → {FULL_CLOCK}",
    "a limit reason with the clock at its maximum (within the noise), or the clock below it "
    f"without a limit reason → {UNDECIDED}",
)

#: The class rule, in the order it is applied; the first condition that holds names the class.
CLASSIFICATION_RULE: tuple[str, ...] = (
    "status not ok (the loop did not run), or no power source (no NVML) → no data",
    "an idle window (no kernel running) → idle",
    f"the limit (rule beside) is {THERMAL}, {POWER_CAPPED} or {SLOWED} → that limit",
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

# The groups of loops question 3 answers (column ``group``).
IDLE_GROUP = "idle"
DECODE_GROUP = f"decode-sized GEMMs · M ≤ {DECODE_MAX_M}"
MID_GROUP = f"mid-sized GEMMs · M {DECODE_MAX_M + 1}–{PREFILL_MIN_M - 1}"
PREFILL_GROUP = f"prefill-sized GEMMs · M ≥ {PREFILL_MIN_M}"
EXPERT_GROUP = "expert loops"
GROUP_RULE: tuple[str, ...] = (
    "idle windows → idle",
    f"single GEMMs (no G) at M ≤ {DECODE_MAX_M} → {DECODE_GROUP} · <mode>",
    f"single GEMMs at M ≥ {PREFILL_MIN_M} → {PREFILL_GROUP}; between → {MID_GROUP}",
    f"loops over G experts (grouped GEMMs, whole MoE layers) → {EXPERT_GROUP} · <dtype> · "
    f"M ≤ {DECODE_MAX_M} or M > {DECODE_MAX_M} (tokens)",
    "a window that did not run or has no power → no group",
)


def _pct(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.0f}%"


def _watts(value: Any) -> str:
    w = num_of(value)
    return "no power reading" if math.isnan(w) else f"{w:.0f} W"


def limit_reasons(cell: Any) -> list[str]:
    """The power or thermal limits among a ``throttle_reasons`` cell's reasons."""
    return [r for r in reason_names(cell) if r in LIMIT_REASONS]


def max_sm_clocks(hardware: dict | None) -> dict[int, float]:
    """GPU index -> its maximum SM clock (MHz) from hardware.json's GPUs (NVML's list where
    the torch one lacks it)."""
    out: dict[int, float] = {}
    for key in ("nvml_gpus", "gpus"):
        for position, gpu in enumerate((hardware or {}).get(key) or []):
            index = num_of(gpu.get("index", position))
            mhz = num_of(gpu.get("max_sm_clock_mhz"))
            if not math.isnan(index) and mhz > 0:
                out[int(index)] = mhz
    return out


def _max_clock_of(gpu: Any, clocks: dict[int, float]) -> float:
    """A window's GPU's maximum SM clock; one value for every GPU where all share it."""
    if len(set(clocks.values())) == 1:
        return next(iter(clocks.values()))
    g = num_of(gpu)
    return clocks.get(int(g), float("nan")) if not math.isnan(g) else float("nan")


def _measured(get) -> tuple[bool, str]:
    """Whether a window has a power reading to judge, and why not."""
    status = text_of(get("status", "ok")) or "ok"
    if status != "ok":
        error = text_of(get("error", ""))
        return False, f"status {status}" + (f": {error[:120]}" if error else "")
    if (text_of(get("power_source", "")) or "none") == "none":
        return False, "no NVML on this machine: no power was measured"
    return True, ""


def _is_idle(get) -> bool:
    return text_of(get("label", "")) == "idle" or text_of(get("mode", "")) == "idle"


def window_limit(row: Any) -> tuple[str, str]:
    """``(limit, why)`` of one window row (see :data:`LIMIT_RULE`); ``("", why)`` for an idle
    window or one without power. The row's ``max_sm_clock_mhz`` is its GPU's maximum."""
    get = field_getter(row)
    measured, why = _measured(get)
    if not measured or _is_idle(get):
        return "", why
    reasons = limit_reasons(get("throttle_reasons", ""))
    clock, top = num_of(get("sm_clock_mhz")), num_of(get("max_sm_clock_mhz"))
    named = f" ({', '.join(reasons)})" if reasons else ""
    if math.isnan(clock) or math.isnan(top) or top <= 0:
        missing = "no SM clock reading" if math.isnan(clock) else "no maximum SM clock recorded"
        return UNDECIDED, f"{missing}: the clock cannot be held against its maximum{named}"
    below, drop = against_threshold(clock, top, CLOCK_NOISE, above=False)
    held = below == "yes"
    at = f"SM {clock:.0f} of {top:.0f} MHz"
    if reasons and held:
        kind = (THERMAL if set(reasons) & set(THERMAL_REASONS) else
                POWER_CAPPED if set(reasons) & set(POWER_CAP_REASONS) else SLOWED)  # fmt: skip
        return kind, f"{', '.join(reasons)}; {at}: {100 * drop:.0f} % below"
    if reasons:
        return UNDECIDED, (f"{', '.join(reasons)} reported, but {at} is within "
                           f"{100 * CLOCK_NOISE:.0f} % of the maximum")  # fmt: skip
    if held:
        return UNDECIDED, f"{at}, {100 * drop:.0f} % below, with no limit reason reported"
    return FULL_CLOCK, f"no limit reason; {at}"


def window_group(row: Any) -> str:
    """The group of loops question 3 answers a window in (see :data:`GROUP_RULE`)."""
    get = field_getter(row)
    measured, _ = _measured(get)
    if not measured or math.isnan(num_of(get("avg_w"))):
        return ""
    if _is_idle(get):
        return IDLE_GROUP
    m = num_of(get("M"))
    if math.isnan(m):
        return ""
    if not math.isnan(num_of(get("G"))):
        size = f"M ≤ {DECODE_MAX_M}" if m <= DECODE_MAX_M else f"M > {DECODE_MAX_M}"
        return f"{EXPERT_GROUP} · {_dtype_name(text_of(get('dtype')))} · {size}"
    if m <= DECODE_MAX_M:
        return f"{DECODE_GROUP} · {text_of(get('mode'))}"
    return PREFILL_GROUP if m >= PREFILL_MIN_M else MID_GROUP


def classify_window(row: Any) -> tuple[str, str]:
    """``(class, why)`` of one window row (a mapping or a pandas Series); see the rule."""
    get = field_getter(row)
    measured, why = _measured(get)
    if not measured:
        return "no data", why
    source = text_of(get("power_source", ""))
    if _is_idle(get):
        return "idle", f"idle baseline ({_watts(get('avg_w'))})"
    limit, limit_why = window_limit(row)
    if limit in HELD_DOWN:
        temp = num_of(get("temp_c_max"))
        hot = f", max {temp:.0f} °C" if limit == THERMAL and not math.isnan(temp) else ""
        return limit, f"{limit_why}{hot}; {_pct(num_of(get('pct_limit')))} of the power limit"
    sm, tensor, dram = (num_of(get(c)) for c in GPM_COLUMNS)
    mode = text_of(get("mode", ""))
    if all(math.isnan(v) for v in (sm, tensor, dram)):
        where = f"{_watts(get('avg_w'))}, {_pct(num_of(get('pct_limit')))} of the limit"
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


#: The columns :func:`classify_windows` adds.
CLASS_COLUMNS = ("max_sm_clock_mhz", "group", "limit", "limit_why", "class", "why")


def classify_windows(df: pd.DataFrame | None, hardware: dict | None = None) -> pd.DataFrame:
    """A copy of ``df`` with :data:`CLASS_COLUMNS`: each window's GPU's maximum SM clock
    (``hardware``'s, where the table has none), its group, limit and class with why."""
    out = (df if df is not None else pd.DataFrame()).copy()
    if out.empty:
        for column in CLASS_COLUMNS:
            out[column] = pd.Series(dtype=float if column == "max_sm_clock_mhz" else str)
        return out
    clocks = max_sm_clocks(hardware)
    gpus = out["gpu"] if "gpu" in out.columns else pd.Series(float("nan"), index=out.index)
    filled = pd.Series([_max_clock_of(g, clocks) for g in gpus], index=out.index, dtype=float)
    if "max_sm_clock_mhz" in out.columns:  # a table that carries its own maximum keeps it
        filled = pd.to_numeric(out["max_sm_clock_mhz"], errors="coerce").fillna(filled)
    out["max_sm_clock_mhz"] = filled
    records = out.to_dict("records")
    out["group"] = [window_group(rec) for rec in records]
    limits = [window_limit(rec) for rec in records]
    out["limit"] = [limit for limit, _ in limits]
    out["limit_why"] = [why for _, why in limits]
    results = [classify_window(rec) for rec in records]
    out["class"] = [c for c, _ in results]
    out["why"] = [w for _, w in results]
    return out
