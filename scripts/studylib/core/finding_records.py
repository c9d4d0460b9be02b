"""Shared pieces the answers are written with: readers of table cells (a number or text
from any cell, a frame's numeric columns), number and text formats for their sentences, and
the machine's description (each stage's thresholds are in its stage; the verdicts' rule is
:mod:`.verdicts`, the answer rows :mod:`.answer_records`)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

import pandas as pd

from .formats import fmt_us as fmt_us  # the one fmt_us; answer modules import it from here

DTYPE_NAMES = {"bf16": "BF16", "fp16": "FP16", "fp32": "FP32", "fp8_e4m3": "FP8", "nvfp4": "FP4"}
FP4_DTYPES = ("nvfp4",)


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


def field_getter(row: Any):
    """``get(key, default=None)`` over a row: a mapping, a pandas Series or a named tuple."""
    return row.get if hasattr(row, "get") else (lambda k, d=None: getattr(row, k, d))


def num_of(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return float("nan")
    return out


def _ok(value: Any) -> bool:
    return not math.isnan(num_of(value))


def text_of(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if value is pd.NA or value is pd.NaT:
        return ""
    return str(value).strip()


def fmt_ratio(r: float) -> str:
    return f"{r:.2f}×" if r < 10 else f"{r:.0f}×"


def fmt_w(w: float) -> str:
    return f"{w:.0f} W"


def fmt_m(m: float) -> str:
    if 0 < m < 1:  # decode at small C: a fraction of a token per expert and step
        return f"{m:.2g}"
    return f"{m:.0f}" if float(m).is_integer() or m >= 10 else f"{m:.1f}"


def _span(lo: float, hi: float, fmt, unit: str = "") -> str:
    """ "a–b unit"; the unit is written once when both ends share it ("6.4–7.8 µs")."""
    a, b = fmt(lo), fmt(hi)
    if a == b:
        return f"{a}{unit}"
    unit_a, unit_b = re.search(r"[^\d.]*$", a).group(), re.search(r"[^\d.]*$", b).group()
    if unit_a and unit_a == unit_b:
        a = a[: -len(unit_a)]
    return f"{a}–{b}{unit}"


def _plain(x: float) -> str:
    return f"{x:.0f}"


def _dtype_name(dtype: str) -> str:
    return DTYPE_NAMES.get(dtype, dtype)


def _impl_label(row: Any) -> str:
    backend, impl, op = (text_of(row.get(c)) for c in ("backend", "impl", "op"))
    who = f"{backend}·{impl}" if impl else backend
    return f"{who} {op}" if op else who


def _m_list(ms: Iterable[float], grid: Iterable[float] | None = None) -> str:
    """The sizes as "M = a", or "M a–b"; with ``grid`` (the sizes measured), a set with gaps
    in it is written as its runs, "M 1, 16–256", so no range claims a size it skipped."""
    values = sorted({int(m) for m in ms})
    if not values:
        return ""
    if len(values) == 1:
        return f"M = {values[0]}"
    if grid is None:
        return f"M {values[0]}–{values[-1]}"
    where = {m: i for i, m in enumerate(sorted({int(g) for g in grid} | set(values)))}
    runs: list[list[int]] = []
    for m in values:
        if runs and where[m] == where[runs[-1][-1]] + 1:
            runs[-1].append(m)
        else:
            runs.append([m])
    return "M " + ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


def _has(frame: pd.DataFrame | None, *columns: str) -> bool:
    return frame is not None and not frame.empty and all(c in frame.columns for c in columns)


def _numeric(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    frame = frame.copy()
    for c in columns:
        if c in frame.columns:
            frame[c] = pd.to_numeric(frame[c], errors="coerce")
    return frame


# ---------------------------------------------------------------------------------------------
# Hardware
# ---------------------------------------------------------------------------------------------


def _gpus(hardware: dict | None) -> list[dict]:
    return list((hardware or {}).get("gpus") or [])


def _gpu(hardware: dict | None) -> dict:
    gpus = _gpus(hardware)
    return gpus[0] if gpus else {}


def _is_cpu(hardware: dict | None, peaks: dict | None = None) -> bool:
    device = text_of((hardware or {}).get("device")) or text_of((peaks or {}).get("device"))
    return device == "cpu" or (hardware is not None and not _gpus(hardware))


def _sm_arch(cc: Any) -> str:
    text = text_of(cc)
    m = re.fullmatch(r"(\d+)\.(\d+)", text)
    return f"sm_{m.group(1)}{m.group(2)}" if m else ""


def describe_machine(hardware: dict | None, peaks: dict | None = None) -> str:
    """ "1× NVIDIA H200 (sm_90, 700 W limit, 132 SMs)" or "no GPU (CPU: …, 2 cores)"."""
    gpus = _gpus(hardware)
    if gpus:
        gpu = gpus[0]
        bits = []
        arch = _sm_arch(gpu.get("compute_capability"))
        if arch:
            bits.append(f"{arch}, compute capability {gpu['compute_capability']}")
        if _ok(gpu.get("power_limit_w")):
            bits.append(f"{fmt_w(num_of(gpu['power_limit_w']))} power limit")
        if _ok(gpu.get("sm_count")):
            bits.append(f"{int(num_of(gpu['sm_count']))} SMs")
        name = text_of(gpu.get("name")) or "GPU"
        return f"{len(gpus)}× {name}" + (f" ({', '.join(bits)})" if bits else "")
    host = (hardware or {}).get("host") or {}
    cpu = text_of(host.get("cpu_model")) or text_of((peaks or {}).get("device_name")) or "CPU"
    cores = host.get("cpu_count")
    return f"no GPU (CPU: {cpu}" + (f", {cores} cores)" if cores else ")")
