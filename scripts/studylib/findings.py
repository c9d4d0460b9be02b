"""The report's opening sentences, computed from the study's tables.

Every number a finding states is computed here from the data (never typed by hand) and kept
in the finding's ``numbers`` dict for tests. Each input is optional: a function given ``None``
or a table without the rows it needs returns a :class:`Missing` note saying what could not be
computed and why, never an exception.

Questions (see ``STUDY.md``): 1 fastest backend and failures, 2 launch vs memory vs math at
decode sizes, 3 power / clocks / throttling of kernel loops, 4 per-expert M during decode,
5 decode throughput and energy per server variant; ``"seed"`` sets the seed write-up's figures
beside this machine's.

Public API: :func:`compute_findings` (all questions), one function per question
(:func:`q1_backends`, :func:`q2_bounds`, :func:`q3_power`, :func:`q4_experts`, :func:`q5_decode`,
:func:`seed_comparison`), and :func:`load_inputs` (reads a results folder into the inputs).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from .nvml import reason_names
from .peaks import PEAK_FOR_DTYPE
from .serving.experts import rank_loads

Question = int | str

#: M ≤ this is decode-sized (tokens per expert during decode).
DECODE_MAX_M = 64
#: M ≥ this is prefill-sized.
PREFILL_MIN_M = 4096
#: The representative decode-sized M (the seed's 512 × 8 / 256).
DECODE_M = 16
#: The expert shape's preferred name and geometry (GLM-5's expert up-projection).
EXPERT_SHAPE = "expert_up"
EXPERT_NK = (6144, 2048)
#: Eager time is "flat" while it stays within this factor of its smallest-M value.
FLAT_FACTOR = 1.5
#: A window with sw_power_cap set at ≥ this % of the limit is power-capped.
POWER_CAP_PCT = 90.0
#: An expert with M above this multiple of the balanced M counts as hot.
HOT_FACTOR = 2.0
#: Launch cost at least this fraction of eager time: launch-bound.
LAUNCH_BOUND_SHARE = 0.5
#: Graph time within this factor of the floor: bound by the floor's resource.
NEAR_FLOOR = 2.0
MAX_MESSAGE = 200

DTYPE_NAMES = {"bf16": "BF16", "fp16": "FP16", "fp32": "FP32", "fp8_e4m3": "FP8", "nvfp4": "FP4"}
FP4_DTYPES = ("nvfp4",)

#: The seed write-up's figures (``seed/fp4-power-pivot.txt``), quoted with their source.
SEED_SOURCE = "seed/fp4-power-pivot.txt, message 876 and the chunk summary it cites"
SEED = {
    "gpu": "NVIDIA RTX PRO 6000 Blackwell",
    "gpus": 8,
    "arch": "sm_120",
    "compute_capability": "12.0",
    "power_limit_w": 600.0,
    "fp4_small_us": (30.0, 42.0),
    "fp4_small_quote": (
        "At those sizes, the FP4 GEMM takes ~30-42 microseconds regardless of problem size"
    ),
    "tokens_per_expert": 16,
    "tokens_per_expert_quote": "512 * 8 / 256 = 16",
    "decode_w": 235.0,
    "decode_w_quote": "GPUs draw only ~235W out of 600W TDP during inference",
    "sgl_fp4_fails_below_m": 256,
    "sgl_fp4_quote": (
        "sgl_kernel.cutlass_scaled_fp4_mm errors on small batch sizes (M<256) and is actually "
        "slower than flashinfer CUTLASS at larger sizes"
    ),
}
SEED["decode_pct"] = 100.0 * SEED["decode_w"] / SEED["power_limit_w"]


@dataclass(frozen=True)
class Finding:
    """One computed sentence (plain text) of question ``question`` and the numbers it states."""

    question: Question
    text: str
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Missing:
    """What could not be computed for ``question``, and why."""

    question: Question
    text: str


@dataclass
class Findings:
    findings: list[Finding] = field(default_factory=list)
    missing: list[Missing] = field(default_factory=list)

    def add(self, question: Question, text: str, **numbers: Any) -> Finding:
        finding = Finding(question, text, numbers)
        self.findings.append(finding)
        return finding

    def miss(self, question: Question, text: str) -> None:
        self.missing.append(Missing(question, text))

    def extend(self, other: Findings) -> Findings:
        self.findings.extend(other.findings)
        self.missing.extend(other.missing)
        return self

    def for_question(self, question: Question) -> tuple[list[Finding], list[Missing]]:
        return (
            [f for f in self.findings if f.question == question],
            [m for m in self.missing if m.question == question],
        )

    def texts(self, question: Question | None = None) -> list[str]:
        return [f.text for f in self.findings if question is None or f.question == question]


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


def _num(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return float("nan")
    return out


def _ok(value: Any) -> bool:
    return not math.isnan(_num(value))


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if value is pd.NA or value is pd.NaT:
        return ""
    return str(value).strip()


def fmt_us(us: float) -> str:
    """Microseconds with sensible precision (in ms from 1 ms on)."""
    if us >= 10000:
        return f"{us / 1000:.1f} ms"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    if us >= 100:
        return f"{us:.0f} µs"
    if us >= 1:
        return f"{us:.1f} µs"
    return f"{us:.2f} µs"


def fmt_ratio(r: float) -> str:
    return f"{r:.2f}×" if r < 10 else f"{r:.0f}×"


def fmt_w(w: float) -> str:
    return f"{w:.0f} W"


def fmt_pct(p: float) -> str:
    return f"{p:.0f} %"


def _share(x: float) -> str:
    """A share as a percentage; "< 1 %" rather than "0 %" when some but few."""
    return "< 1 %" if 0 < 100 * x < 0.5 else fmt_pct(100 * x)


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
    backend, impl, op = (_text(row.get(c)) for c in ("backend", "impl", "op"))
    who = f"{backend}·{impl}" if impl else backend
    return f"{who} {op}" if op else who


def _message(text: Any) -> str:
    msg = " ".join(_text(text).split())
    return msg if len(msg) <= MAX_MESSAGE else msg[: MAX_MESSAGE - 1] + "…"


def _m_list(ms: Iterable[float]) -> str:
    values = sorted({int(m) for m in ms})
    if not values:
        return ""
    if len(values) == 1:
        return f"M = {values[0]}"
    return f"M {values[0]}–{values[-1]}"


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
    device = _text((hardware or {}).get("device")) or _text((peaks or {}).get("device"))
    return device == "cpu" or (hardware is not None and not _gpus(hardware))


def _sm_arch(cc: Any) -> str:
    text = _text(cc)
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
            bits.append(f"{fmt_w(_num(gpu['power_limit_w']))} power limit")
        if _ok(gpu.get("sm_count")):
            bits.append(f"{int(_num(gpu['sm_count']))} SMs")
        name = _text(gpu.get("name")) or "GPU"
        return f"{len(gpus)}× {name}" + (f" ({', '.join(bits)})" if bits else "")
    host = (hardware or {}).get("host") or {}
    cpu = _text(host.get("cpu_model")) or _text((peaks or {}).get("device_name")) or "CPU"
    cores = host.get("cpu_count")
    return f"no GPU (CPU: {cpu}" + (f", {cores} cores)" if cores else ")")


# ---------------------------------------------------------------------------------------------
# Sweep helpers
# ---------------------------------------------------------------------------------------------

SWEEP_NUMERIC = (
    "M", "N", "K", "G", "eager_us", "graph_us", "cold_us", "floor_us", "flops", "bytes",
    "launch_overhead_us", "efficiency", "tflops", "rel_err",
)  # fmt: skip


def _prep_sweep(sweep: pd.DataFrame) -> pd.DataFrame:
    df = _numeric(sweep, *SWEEP_NUMERIC)
    for c in ("backend", "impl", "op", "dtype", "shape", "status", "error", "floor_basis"):
        if c not in df.columns:
            df[c] = ""
        df[c] = df[c].map(_text)
    if "G" not in df.columns:
        df["G"] = float("nan")
    for c in ("eager_us", "graph_us", "cold_us", "floor_us", "flops"):
        if c not in df.columns:
            df[c] = float("nan")
    return df


def pick_expert_shape(sweep: pd.DataFrame) -> str | None:
    """The expert shape: ``expert_up`` when present, else the shape with (N, K) = (6144, 2048),
    else the largest-N shape with K = 2048, else the first shape named ``expert…``, else the
    most common shape (single GEMMs, not grouped rows)."""
    if not _has(sweep, "shape"):
        return None
    df = sweep
    if "G" in df.columns:
        df = df[pd.to_numeric(df["G"], errors="coerce").isna()]
    shapes = [s for s in df["shape"].map(_text).unique() if s]
    if not shapes:
        return None
    if EXPERT_SHAPE in shapes:
        return EXPERT_SHAPE
    if "N" in df.columns and "K" in df.columns:
        geo = _numeric(df, "N", "K")[["shape", "N", "K"]].drop_duplicates()
        exact = geo[(geo["N"] == EXPERT_NK[0]) & (geo["K"] == EXPERT_NK[1])]
        if len(exact):
            return _text(exact["shape"].iloc[0])
        k2048 = geo[geo["K"] == EXPERT_NK[1]].sort_values("N", ascending=False)
        if len(k2048):
            return _text(k2048["shape"].iloc[0])
    named = [s for s in shapes if s.startswith("expert")]
    if named:
        return sorted(named)[0]
    return _text(df["shape"].map(_text).value_counts().index[0])


def _shape_geometry(df: pd.DataFrame, shape: str) -> str:
    rows = df[df["shape"] == shape]
    if rows.empty or not (_has(rows, "N", "K")):
        return shape
    n, k = _num(rows["N"].iloc[0]), _num(rows["K"].iloc[0])
    if math.isnan(n) or math.isnan(k):
        return shape
    return f"{shape} (N = {n:.0f}, K = {k:.0f})"


def _expert_rows(sweep: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """ok single-GEMM rows of the expert shape, and the shape's name."""
    shape = pick_expert_shape(sweep)
    if shape is None:
        return sweep.iloc[0:0], None
    df = sweep[(sweep["shape"] == shape) & sweep["G"].isna() & (sweep["status"] == "ok")]
    return df, shape


def _time_basis(rows: pd.DataFrame) -> str:
    """``graph_us`` when every row has a graph time, else ``eager_us``."""
    if len(rows) and rows["graph_us"].notna().all():
        return "graph_us"
    return "eager_us"


def _mode(column: str) -> str:
    return {"graph_us": "graph", "eager_us": "eager", "cold_us": "cold"}[column]


def _best(rows: pd.DataFrame, column: str) -> pd.Series | None:
    rows = rows[rows[column].notna()]
    if rows.empty:
        return None
    return rows.loc[rows[column].idxmin()]


# ---------------------------------------------------------------------------------------------
# Question 1: fastest backend per size class; failures with their own error
# ---------------------------------------------------------------------------------------------


def q1_backends(sweep: pd.DataFrame | None, peaks: dict | None = None) -> Findings:
    out = Findings()
    if not _has(sweep, "backend", "status"):
        out.miss(1, "no sweep table (results/tables/sweep.csv): the sweep stage has not run")
        return out
    df = _prep_sweep(sweep)
    rows, shape = _expert_rows(df)
    if shape is None or rows.empty:
        out.miss(1, "no sweep point ran (status ok) at the expert shape: no timing to rank")
    else:
        _q1_fastest(out, rows, shape, df)
    _q1_failures(out, df)
    _q1_fp4(out, df, peaks)
    return out


def _q1_fastest(out: Findings, rows: pd.DataFrame, shape: str, df: pd.DataFrame) -> None:
    geometry = _shape_geometry(df, shape)
    classes = (
        ("decode-sized", f"M ≤ {DECODE_MAX_M}", rows["M"] <= DECODE_MAX_M),
        ("prefill-sized", f"M ≥ {PREFILL_MIN_M}", rows["M"] >= PREFILL_MIN_M),
    )
    for dtype in sorted(rows["dtype"].unique(), key=lambda d: list(DTYPE_NAMES).index(d)
                        if d in DTYPE_NAMES else 99):  # fmt: skip
        for cls, cond_text, cond in classes:
            sub = rows[cond & (rows["dtype"] == dtype)].copy()
            if sub.empty:
                out.miss(1, f"{_dtype_name(dtype)} {cls} ({cond_text}): no point ran on {shape}")
                continue
            column = _time_basis(sub)
            sub["who"] = sub.apply(_impl_label, axis=1)
            ms = sorted(sub["M"].unique())
            wins: dict[str, int] = {}
            for m in ms:
                best = _best(sub[sub["M"] == m], column)
                if best is not None:
                    wins[best["who"]] = wins.get(best["who"], 0) + 1
            if not wins:
                continue
            ranked = sorted(wins.items(), key=lambda kv: (-kv[1], kv[0]))
            winner, n_win = ranked[0]
            w_times = sub[sub["who"] == winner][column]
            candidates = sub["who"].nunique()
            times = f"{_mode(column)} {_span(w_times.min(), w_times.max(), fmt_us)}"
            if candidates == 1:
                text = (
                    f"{_dtype_name(dtype)}, {cls} ({cond_text}) on {geometry}: only {winner}"
                    f" ran ({times} over {len(ms)} size{'s' if len(ms) != 1 else ''})"
                )
            else:
                text = (
                    f"{_dtype_name(dtype)}, {cls} ({cond_text}) on {geometry}: fastest is "
                    f"{winner} at {n_win} of {len(ms)} sizes ({times}) among {candidates} "
                    "implementations that ran"
                )
            numbers = {
                "dtype": dtype, "size_class": cls, "basis": _mode(column), "winner": winner,
                "wins": n_win, "sizes": len(ms), "candidates": candidates,
                "winner_min_us": float(w_times.min()), "winner_max_us": float(w_times.max()),
            }  # fmt: skip
            if len(ranked) > 1:
                second, n2 = ranked[1]
                text += f"; {second} wins {n2}"
                numbers.update(runner_up=second, runner_up_wins=n2)
            out.add(1, text + ".", **numbers)


def _q1_failures(out: Findings, df: pd.DataFrame) -> None:
    bad = df[df["status"].isin(["unsupported", "error", "mismatch"])]
    if bad.empty:
        out.add(1, f"Every one of the {len(df)} sweep points ran and matched its reference.",
                points=len(df), failed=0)  # fmt: skip
        return
    # One finding per (status, first message); the combos that share it are listed together.
    groups: dict[tuple[str, str], list[dict]] = {}
    for (backend, impl, op, dtype), g in bad.groupby(["backend", "impl", "op", "dtype"]):
        full = df[(df["backend"] == backend) & (df["impl"] == impl) & (df["op"] == op)
                  & (df["dtype"] == dtype)]  # fmt: skip
        for status, gs in g.groupby("status"):
            message = _message(gs["error"].iloc[0])
            if status == "mismatch" and not message and "rel_err" in gs.columns:
                message = f"relative error up to {gs['rel_err'].max():.3g}"
            ok_ms = full[full["status"] == "ok"]["M"]
            combo = {
                "who": _impl_label(gs.iloc[0]), "dtype": dtype, "count": len(gs),
                "points": len(full), "ms": sorted(gs["M"].dropna().unique()),
                "ok_ms": sorted(ok_ms.dropna().unique()), "ok": len(ok_ms),
                "messages": gs["error"].nunique(),
            }  # fmt: skip
            groups.setdefault((status, message), []).append(combo)
    for (status, message), combos in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        count = sum(c["count"] for c in combos)
        if len(combos) == 1:
            c = combos[0]
            where = _m_list(c["ms"])
            if c["ok_ms"] and c["ms"] and max(c["ms"]) < min(c["ok_ms"]):
                where = f"below M = {int(min(c['ok_ms']))} ({where}; ok from there on)"
            elif c["ok_ms"]:
                where += f" (ok at {len(c['ok_ms'])} other sizes)"
            text = (
                f"{c['who']} ({_dtype_name(c['dtype'])}): {status} at {c['count']} of "
                f"{c['points']} points, {where}"
            )
            numbers = {"who": c["who"], "dtype": c["dtype"], "status": status,
                       "count": c["count"], "points": c["points"],
                       "ok_points": c["ok"]}  # fmt: skip
        else:
            names = ", ".join(f"{c['who']} ({_dtype_name(c['dtype'])})" for c in combos)
            text = f"{status} at {count} points of {len(combos)} implementations: {names}"
            numbers = {"status": status, "count": count, "combos": len(combos),
                       "who": [c["who"] for c in combos]}  # fmt: skip
        if message:
            text += f" — “{message}”"
        extra = max(c["messages"] for c in combos) - 1
        if extra > 0:
            text += f" (+{extra} other message{'s' if extra > 1 else ''})"
        out.add(1, text + ".", message=message, **numbers)


def _q1_fp4(out: Findings, df: pd.DataFrame, peaks: dict | None) -> None:
    fp4 = df[df["dtype"].isin(FP4_DTYPES)]
    if fp4.empty:
        out.miss(1, "no FP4 point in the sweep: FP4 status unknown (not in the configured grid)")
        return
    ok = fp4[fp4["status"] == "ok"]
    statuses = fp4["status"].value_counts()
    peak_err = _message((peaks or {}).get("fp4_error"))
    if ok.empty:
        counts = ", ".join(f"{n} {s}" for s, n in statuses.items())
        text = f"FP4: none of the {len(fp4)} FP4 GEMM points ran here ({counts})"
        if peak_err:
            text += f"; the FP4 peak could not be measured either (“{peak_err}”)"
        out.add(1, text + ".", fp4_points=len(fp4), fp4_ok=0, fp4_peak_error=peak_err)
        return
    impls = sorted(ok.apply(_impl_label, axis=1).unique())
    text = f"FP4: {len(ok)} of {len(fp4)} FP4 points ran, through {', '.join(impls)}"
    peak = _num((peaks or {}).get("fp4_tflops"))
    if _ok(peak):
        text += f"; measured FP4 peak {peak:.0f} TFLOP/s"
    out.add(1, text + ".", fp4_points=len(fp4), fp4_ok=len(ok), fp4_impls=impls,
            fp4_peak_tflops=peak if _ok(peak) else None)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Question 2: launch cost vs HBM vs math at decode sizes
# ---------------------------------------------------------------------------------------------


def q2_bounds(sweep: pd.DataFrame | None, peaks: dict | None = None) -> Findings:
    out = Findings()
    if not _has(sweep, "backend", "status", "M"):
        out.miss(2, "no sweep table (results/tables/sweep.csv): the sweep stage has not run")
        return out
    df = _prep_sweep(sweep)
    rows, shape = _expert_rows(df)
    if shape is None or rows.empty:
        out.miss(2, "no sweep point ran (status ok) at the expert shape")
        return out
    geometry = _shape_geometry(df, shape)
    _q2_decode(out, rows, geometry)
    _q2_prefill(out, rows, geometry, peaks)
    _q2_flat(out, rows, geometry)
    return out


def _decode_m(rows: pd.DataFrame) -> float | None:
    ms = sorted(rows["M"].dropna().unique())
    if not ms:
        return None
    if DECODE_M in ms:
        return float(DECODE_M)
    small = [m for m in ms if m <= DECODE_MAX_M]
    pool = small or ms
    return float(min(pool, key=lambda m: abs(m - DECODE_M)))


def _q2_decode(out: Findings, rows: pd.DataFrame, geometry: str) -> None:
    """At the decode M: the fastest eager call's launch cost (eager − graph) and the fastest
    kernel's graph-replayed (and cold) time against the roofline floor."""
    m = _decode_m(rows)
    if m is None:
        return
    at = rows[rows["M"] == m]
    if not at["graph_us"].notna().any():
        out.miss(2, f"no graph-replayed times at M = {m:.0f} (CUDA graphs need a GPU): launch "
                    "cost cannot be separated from kernel time")  # fmt: skip
    for dtype in [d for d in DTYPE_NAMES if d in set(at["dtype"])]:
        sub = at[at["dtype"] == dtype]
        be, bg = _best(sub, "eager_us"), _best(sub, "graph_us")
        if be is None and bg is None:
            continue
        numbers: dict[str, Any] = {"dtype": dtype, "M": m}
        parts: list[str] = []
        verdicts: list[str] = []
        head = f"At M = {m:.0f} on {geometry}"
        if be is not None:
            who, eager, graph = _impl_label(be), _num(be["eager_us"]), _num(be["graph_us"])
            numbers.update(who=who, eager_us=eager)
            if _ok(graph):
                launch = _num(be.get("launch_overhead_us"))
                if not _ok(launch):
                    launch = eager - graph
                share = launch / eager if eager > 0 else float("nan")
                same = bg is not None and _impl_label(bg) == who
                parts.append(
                    f"the fastest {_dtype_name(dtype)} call ({who}) takes {fmt_us(eager)} eager, "
                    f"of which {fmt_us(launch)} ({fmt_pct(100 * share)}) is launch cost"
                    + ("" if same else f" (graph-replayed {fmt_us(graph)})")
                )
                numbers.update(graph_us=graph, launch_us=launch, launch_share=share)
                verdicts.append("launch-bound when called eagerly" if share >= LAUNCH_BOUND_SHARE
                                else "not launch-bound")  # fmt: skip
            else:
                parts.append(f"the fastest {_dtype_name(dtype)} call ({who}) takes "
                             f"{fmt_us(eager)} eager")  # fmt: skip
        kernel = bg if bg is not None else be
        column = "graph_us" if bg is not None else "eager_us"
        t, floor = _num(kernel[column]), _num(kernel["floor_us"])
        basis = _text(kernel.get("floor_basis")).split(" ")[0] or "roofline"
        if _ok(floor) and floor > 0 and _ok(t):
            ratio = t / floor
            kwho = _impl_label(kernel)
            against = f"{fmt_ratio(ratio)} the {basis} floor of {fmt_us(floor)}"
            if bg is None and parts:
                parts[-1] += f", {against}"
            elif bg is None:
                parts.append(f"the fastest call ({kwho}) takes {fmt_us(t)} eager, {against}")
            else:
                what = (
                    "its kernel"
                    if be is not None and kwho == _impl_label(be)
                    else (f"the fastest kernel ({kwho})")
                )
                parts.append(f"{what} replays in {fmt_us(t)}, {against}")
            numbers.update(kernel_who=kwho, kernel_us=t, floor_us=floor, floor_basis=basis,
                           over_floor=ratio, over_floor_basis=_mode(column))  # fmt: skip
            cold = _num(kernel["cold_us"])
            if _ok(cold):
                parts[-1] += (f" (with weights streamed from memory, cold, {fmt_us(cold)}: "
                              f"{fmt_ratio(cold / floor)})")  # fmt: skip
                numbers.update(cold_us=cold, cold_over_floor=cold / floor)
            if ratio <= NEAR_FLOOR:
                verdicts.append(f"the {'kernel' if bg is not None else 'call'} is {basis}-bound")
            else:
                verdicts.append(f"the {'kernel' if bg is not None else 'call'} runs well above "
                                "its floor (fixed per-kernel overhead)")  # fmt: skip
        text = head + ", " + "; ".join(parts)
        if verdicts:
            text += ": " + "; ".join(verdicts)
        numbers["verdict"] = "; ".join(verdicts)
        out.add(2, text + ".", **numbers)


def _q2_prefill(out: Findings, rows: pd.DataFrame, geometry: str, peaks: dict | None) -> None:
    big = rows[rows["M"] >= PREFILL_MIN_M]
    if big.empty:
        out.miss(2, f"no prefill-sized point (M ≥ {PREFILL_MIN_M}) ran: efficiency at large M "
                    "not computed")  # fmt: skip
        return
    if not peaks:
        out.miss(2, "no peaks.json: efficiency against the measured peak not computed")
        return
    for dtype in [d for d in DTYPE_NAMES if d in set(big["dtype"])]:
        sub = big[big["dtype"] == dtype]
        key = PEAK_FOR_DTYPE.get(dtype, "")
        peak = _num(peaks.get(key))
        if not _ok(peak) or peak <= 0:
            out.miss(2, f"{_dtype_name(dtype)}: no measured peak ({key or 'no peak key'}) to "
                        "compare prefill-sized GEMMs with")  # fmt: skip
            continue
        column = _time_basis(sub)
        pcts: dict[int, float] = {}
        best_at: dict[int, pd.Series] = {}
        for m, g in sub.groupby("M"):
            g = g[g["flops"].notna() & g[column].notna()]
            if g.empty:
                continue
            rate = g["flops"] / (g[column] * 1e6)  # TFLOP/s
            i = rate.idxmax()
            pcts[int(m)] = 100 * rate[i] / peak
            best_at[int(m)] = g.loc[i].copy()
            best_at[int(m)]["rate"] = rate[i]
        if not pcts:
            continue
        top_m = max(pcts)
        b = best_at[top_m]
        text = (
            f"At M = {top_m} on {geometry}, the fastest {_dtype_name(dtype)} GEMM "
            f"({_impl_label(b)}, {_mode(column)} {fmt_us(b[column])}) reaches "
            f"{b['rate']:.0f} TFLOP/s, {fmt_pct(pcts[top_m])} of the measured "
            f"{_dtype_name(dtype)} peak of {peak:.0f} TFLOP/s"
        )
        if len(pcts) > 1:
            text += (f" ({_span(min(pcts.values()), max(pcts.values()), _plain, ' %')} over "
                     f"M {min(pcts)}–{top_m})")  # fmt: skip
        out.add(2, text + ".", dtype=dtype, M=top_m, who=_impl_label(b), tflops=float(b["rate"]),
                peak_tflops=peak, pct_peak=pcts[top_m], pct_by_m=pcts)  # fmt: skip


def _q2_flat(out: Findings, rows: pd.DataFrame, geometry: str) -> None:
    """Per implementation: the largest M up to which eager time stays within FLAT_FACTOR of
    its value at the smallest M."""
    flat: dict[str, dict[str, Any]] = {}
    for _, g in rows.groupby(["backend", "impl", "op", "dtype"]):
        g = g[g["eager_us"].notna()].sort_values("M")
        if len(g) < 2:
            continue
        who = f"{_impl_label(g.iloc[0])} ({_dtype_name(g['dtype'].iloc[0])})"
        base_m, base = float(g["M"].iloc[0]), float(g["eager_us"].iloc[0])
        flat_to, first_out = base_m, None
        for m, t in zip(g["M"].iloc[1:], g["eager_us"].iloc[1:], strict=True):
            if t > FLAT_FACTOR * base:
                first_out = (float(m), float(t))
                break
            flat_to = float(m)
        flat[who] = {"base_m": base_m, "base_us": base, "flat_to_m": flat_to,
                     "first_out": first_out, "max_m": float(g["M"].iloc[-1])}  # fmt: skip
    if not flat:
        return
    parts = []
    for who, f in sorted(flat.items(), key=lambda kv: (kv[1]["flat_to_m"], kv[0])):
        if f["first_out"] is None:
            parts.append(f"{who} flat over the whole range to M = {f['max_m']:.0f} "
                         f"({fmt_us(f['base_us'])} at M = {f['base_m']:.0f})")  # fmt: skip
        else:
            m_out, t_out = f["first_out"]
            parts.append(f"{who} flat to M = {f['flat_to_m']:.0f} ({fmt_us(f['base_us'])} → "
                         f"{fmt_us(t_out)} at M = {m_out:.0f})")  # fmt: skip
    text = (
        f"Eager time on {geometry} stays flat (within {FLAT_FACTOR:g}× of its smallest-M "
        f"value) up to: " + "; ".join(parts)
    )
    out.add(2, text + ".", flat_to_m={k: v["flat_to_m"] for k, v in flat.items()})


# ---------------------------------------------------------------------------------------------
# Question 3: power, clocks and tensor use of kernel loops
# ---------------------------------------------------------------------------------------------

POWER_NUMERIC = ("M", "avg_w", "pct_limit", "power_limit_w", "sm_clock_mhz", "sm_util",
                 "tensor_util", "dram_util", "energy_gap_pct")  # fmt: skip


def _prep_power(kp: pd.DataFrame) -> pd.DataFrame:
    df = _numeric(kp, *POWER_NUMERIC)
    for c in ("backend", "impl", "op", "dtype", "shape", "mode", "label", "status",
              "power_source", "throttle_reasons"):  # fmt: skip
        if c not in df.columns:
            df[c] = ""
        df[c] = df[c].map(_text)
    for c in POWER_NUMERIC:
        if c not in df.columns:
            df[c] = float("nan")
    df.loc[df["status"] == "", "status"] = "ok"
    return df


def _watts_span(rows: pd.DataFrame) -> tuple[str, dict[str, float]]:
    w, p = rows["avg_w"], rows["pct_limit"]
    text = _span(w.min(), w.max(), _plain, " W")
    nums = {"w_min": float(w.min()), "w_max": float(w.max())}
    if p.notna().any():
        text += f" ({_span(p.min(), p.max(), _plain, ' %')} of the limit)"
        nums.update(pct_min=float(p.min()), pct_max=float(p.max()))
    return text, nums


def q3_power(kernel_power: pd.DataFrame | None, hardware: dict | None = None) -> Findings:
    out = Findings()
    if not _has(kernel_power, "mode"):
        why = ("this machine has no GPU" if _is_cpu(hardware) else
               "the kernel-power stage has not run")  # fmt: skip
        out.miss(3, f"no kernel-power table (results/tables/kernel_power.csv): {why}")
        return out
    df = _prep_power(kernel_power)
    sources = sorted(set(df["power_source"]) - {"", "none"})
    measured = df[(df["status"] == "ok") & df["avg_w"].notna()]
    if not sources or measured.empty:
        why = "no GPU" if _is_cpu(hardware) else "no NVML or RAPL reading"
        out.miss(3, f"no power was measured in the kernel loops ({why}: power_source none); "
                    "watts, clocks and throttling are not reported")  # fmt: skip
        return out
    source = ", ".join(sources)
    rapl = sources == ["rapl"]
    what = "CPU package power from RAPL" if rapl else "GPU power from NVML"
    idle = measured[(measured["mode"] == "idle") | (measured["label"] == "idle")]
    loops = measured.drop(idle.index)
    decode = loops[loops["M"] <= DECODE_MAX_M]
    prefill = loops[loops["M"] >= PREFILL_MIN_M]
    d_eager, d_graph = decode[decode["mode"] == "eager"], decode[decode["mode"] == "graph"]
    if not idle.empty:
        text, nums = _watts_span(idle)
        out.add(3, f"Idle, the {'CPU package' if rapl else 'GPU'} draws {text}.", source=source, **{
            f"idle_{k}": v for k, v in nums.items()})  # fmt: skip
    else:
        out.miss(3, "no idle baseline window in the kernel-power table")
    parts = []
    numbers: dict[str, Any] = {"source": source}
    for label, rows, key in (
        (f"decode-sized (M ≤ {DECODE_MAX_M}) eager loops", d_eager, "decode_eager"),
        ("their graph-replayed loops", d_graph, "decode_graph"),
        (f"prefill-sized (M ≥ {PREFILL_MIN_M}) loops", prefill, "prefill"),
    ):
        if rows.empty:
            continue
        text, nums = _watts_span(rows)
        bit = f"{label} draw {text}"
        if rows["tensor_util"].notna().any():
            t = rows["tensor_util"]
            bit += f" with tensor pipes {_span(t.min(), t.max(), _plain, ' %')} busy"
            nums.update(tensor_min=float(t.min()), tensor_max=float(t.max()))
        parts.append(bit)
        numbers.update({f"{key}_{k}": v for k, v in nums.items()})
    if parts:
        out.add(3, f"In the kernel loops ({what}), " + "; ".join(parts) + ".", **numbers)
    if d_eager.empty and d_graph.empty:
        out.miss(3, f"no decode-sized (M ≤ {DECODE_MAX_M}) kernel-power window was measured")
    _q3_throttle(out, loops, decode, hardware)
    _q3_gpu_spread(out, loops)
    gaps = measured["energy_gap_pct"].abs()
    if gaps.notna().any():
        out.add(
            3,
            f"Energy counter and integrated samples agree within {gaps.max():.1f} % "
            f"over {int(gaps.notna().sum())} {_window_unit(measured, 'windows')}.",
            max_gap_pct=float(gaps.max()),
        )
    return out


def _window_unit(rows: pd.DataFrame, noun: str = "loop windows") -> str:
    """``noun``, or what a row is when each loop ran on several GPUs at once."""
    gpus = pd.to_numeric(rows.get("gpu"), errors="coerce").nunique() if "gpu" in rows else 0
    return noun if gpus <= 1 else f"{noun} × GPU ({gpus} GPUs)"


def _q3_gpu_spread(out: Findings, loops: pd.DataFrame) -> None:
    """When each loop ran on several GPUs at once: how far apart the GPUs' watts were."""
    if "gpus_running" not in loops.columns:
        return
    together = loops[pd.to_numeric(loops["gpus_running"], errors="coerce") > 1]
    together = together[together["avg_w"].notna()]
    if together.empty:
        return
    spread = together.groupby("window")["avg_w"].agg(["min", "max", "count"])
    spread = spread[spread["count"] > 1]
    if spread.empty:
        return
    pct = 100 * (spread["max"] - spread["min"]) / spread["max"]
    worst = pct.idxmax()
    gpus = int(spread["count"].max())
    out.add(3, f"Each loop ran on {gpus} GPUs at once (as every GPU of a tensor-parallel server "
               f"runs the same GEMM); their average power differed by a median of "
               f"{pct.median():.1f} % and at most {pct.max():.1f} % ({worst}: "
               f"{spread.loc[worst, 'min']:.0f}–{spread.loc[worst, 'max']:.0f} W).",
            gpus=gpus, spread_median_pct=float(pct.median()),
            spread_max_pct=float(pct.max()))  # fmt: skip


def _q3_throttle(out: Findings, loops: pd.DataFrame, decode: pd.DataFrame,
                 hardware: dict | None) -> None:  # fmt: skip
    max_clock = _num(_gpu(hardware).get("max_sm_clock_mhz"))
    capped = loops[loops["throttle_reasons"].map(lambda r: "sw_power_cap" in reason_names(r))
                   & (loops["pct_limit"] >= POWER_CAP_PCT)]  # fmt: skip
    thermal = loops[
        loops["throttle_reasons"].map(lambda r: any("thermal" in x for x in reason_names(r)))
    ]
    if not capped.empty:
        names = sorted({f"{_impl_label(r)} M = {r['M']:.0f} {r['mode']}"
                        for _, r in capped.iterrows()})  # fmt: skip
        clocks = capped["sm_clock_mhz"]
        text = (f"{len(capped)} of {len(loops)} {_window_unit(loops)} were power-capped "
                f"(sw_power_cap at "
                f"≥ {POWER_CAP_PCT:.0f} % of the limit): {', '.join(names)}; their SM clock fell "
                f"to {_span(clocks.min(), clocks.max(), _plain, ' MHz')}")  # fmt: skip
        if _ok(max_clock):
            text += f" against a maximum of {max_clock:.0f} MHz"
        all_m = capped["M"].dropna()
        out.add(3, text + ".", capped=len(capped), windows=len(loops),
                clock_min=float(clocks.min()), clock_max=float(clocks.max()),
                max_clock=max_clock if _ok(max_clock) else None,
                capped_min_m=float(all_m.min()) if len(all_m) else None)  # fmt: skip
    else:
        out.add(
            3,
            f"None of the {len(loops)} {_window_unit(loops)} was power-capped (sw_power_cap at "
            f"≥ {POWER_CAP_PCT:.0f} % of the limit).",
            capped=0,
            windows=len(loops),
        )
    if not thermal.empty:
        out.add(3, f"{len(thermal)} loop windows report thermal slowdown.", thermal=len(thermal))
    if decode.empty:
        return
    throttled = decode[decode["throttle_reasons"].map(
        lambda r: any(x in ("sw_power_cap", "hw_slowdown", "hw_power_brake_slowdown")
                      or "thermal" in x for x in reason_names(r)))]  # fmt: skip
    clocks = decode["sm_clock_mhz"].dropna()
    if throttled.empty:
        text = ("Low power at decode sizes is under-use, not throttling: no decode-sized window "
                "reports a power or thermal limit")  # fmt: skip
        if len(clocks):
            text += f", and the SM clock holds {_span(clocks.min(), clocks.max(), _plain, ' MHz')}"
            if _ok(max_clock):
                text += f" (maximum {max_clock:.0f} MHz)"
        out.add(3, text + ".", decode_throttled=0,
                decode_clock_min=float(clocks.min()) if len(clocks) else None)  # fmt: skip
    else:
        out.add(3, f"{len(throttled)} of {len(decode)} decode-sized windows report a power or "
                   "thermal limit: low power there is partly throttling.",
                decode_throttled=len(throttled))  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Question 4: per-expert M during decode
# ---------------------------------------------------------------------------------------------


def q4_experts(expert_m: pd.DataFrame | None, decode: pd.DataFrame | None = None) -> Findings:
    out = Findings()
    if not _has(expert_m, "m"):
        why = "no SGLang expert-distribution record"
        engines = set()
        if _has(decode, "engine"):
            engines = {_text(e) for e in decode["engine"]}
        if engines and "sglang" not in engines:
            why += (f": decode ran through {', '.join(sorted(engines))}, which has no expert "
                    "recorder (SGLang only)")  # fmt: skip
        else:
            why += ": no rows in tables/expert_m.csv (SGLang decode not run here, "
            why += "or its recorder not enabled)"
        out.miss(4, why + "; per-expert M not compared with the balanced assumption")
        return out
    df = _numeric(expert_m, "m", "balanced_m", "concurrency", "tokens")
    if "variant" not in df.columns:
        df["variant"] = ""
    df["variant"] = df["variant"].map(_text)
    if "concurrency" not in df.columns:
        df["concurrency"] = float("nan")
    if "balanced_m" not in df.columns:
        df["balanced_m"] = float("nan")
    _q4_random_routing(out, sorted(set(df["variant"]) - {""}), decode)
    trend: dict[str, dict[int, float]] = {}
    for (variant, c), g in df.groupby(["variant", "concurrency"], dropna=False):
        m = g["m"].dropna()
        if m.empty:
            continue
        balanced = _num(g["balanced_m"].dropna().iloc[0]) if g["balanced_m"].notna().any() \
            else float("nan")  # fmt: skip
        layers = g["layer"].nunique() if "layer" in g.columns else 1
        experts = g["expert"].nunique() if "expert" in g.columns else len(m)
        who = f"{variant} at C = {c:.0f}" if variant else f"C = {c:.0f}"
        text = (f"{who}: per-expert M over {layers} layer{'s' if layers != 1 else ''} × "
                f"{experts} experts ranges {fmt_m(m.min())}–{fmt_m(m.max())} "
                f"(median {fmt_m(m.median())})")  # fmt: skip
        numbers: dict[str, Any] = {"variant": variant, "concurrency": float(c), "m_min":
                                   float(m.min()), "m_median": float(m.median()),
                                   "m_max": float(m.max()), "layers": int(layers),
                                   "experts": int(experts)}  # fmt: skip
        if _ok(balanced) and balanced > 0:
            hot = float((m > HOT_FACTOR * balanced).mean())
            idle = float((m == 0).mean())
            text += (f" against a balanced {fmt_m(balanced)}; {_share(hot)} of experts "
                     f"get more than {HOT_FACTOR:g}× the balanced M, {_share(idle)} get "
                     f"none, and the busiest sees {fmt_ratio(m.max() / balanced)} the balanced "
                     "M")  # fmt: skip
            numbers.update(balanced_m=balanced, hot_share=hot, idle_share=idle,
                           max_over_balanced=float(m.max() / balanced))  # fmt: skip
            if _ok(c):
                trend.setdefault(variant, {})[int(c)] = float(m.max() / balanced)
            if layers > 1 and "layer" in g.columns:
                per_layer = g.groupby("layer")["m"].max() / balanced
                text += (f" (per layer, the busiest expert gets "
                         f"{_rspan(per_layer, fmt_ratio)} it)")  # fmt: skip
                numbers["layer_max_over_balanced"] = {
                    int(k) if _ok(k) else k: float(x) for k, x in per_layer.items()}  # fmt: skip
        out.add(4, text + ".", **numbers)
    for variant, by_c in trend.items():
        if len(by_c) < 2:
            continue
        cs = sorted(by_c)
        out.add(4, f"{variant or 'Decode'}: the busiest expert's M over the balanced M goes "
                   + ", ".join(f"{fmt_ratio(by_c[c])} at C = {c}" for c in cs)
                   + (": more tokens in flight even the load out" if by_c[cs[-1]] < by_c[cs[0]]
                      else ": the imbalance does not shrink with C") + ".",
                variant=variant, max_over_balanced=by_c)  # fmt: skip
    _q4_ranks(out, df, decode)
    return out


def _q4_ranks(out: Findings, expert_m: pd.DataFrame, decode: pd.DataFrame | None) -> None:
    """Per GPU rank: with expert parallelism, the share of each layer's routed tokens the
    busiest rank's experts receive against 1 / EP; under tensor parallelism alone, that every
    rank carries every expert's slice (equal loads by construction)."""
    if not _has(decode, "variant", "gpus"):
        return
    d = _numeric(decode, "gpus", *(["ep"] if "ep" in decode.columns else []))
    d["variant"] = d["variant"].map(_text)
    ep = d.groupby("variant")["ep"].max().fillna(1) if "ep" in d.columns else pd.Series(dtype=float)
    gpus = d.groupby("variant")["gpus"].max()
    recorded = sorted(set(expert_m["variant"]) - {""})
    loads = rank_loads(expert_m, {v: int(ep.get(v, 1)) for v in recorded})
    for variant, g in loads.groupby("variant"):
        n = int(g["rank"].max()) + 1
        busiest = g.groupby("concurrency")["over_balanced"].max()
        out.add(4, f"{variant} (expert parallel over {n} GPUs, each holding "
                   f"{int(g['experts'].iloc[0])} experts): the busiest rank's experts receive "
                   + ", ".join(f"{fmt_ratio(x)} the balanced 1/{n} of a layer's routed tokens "
                               f"at C = {c:.0f}" for c, x in busiest.items())
                   + " (per-rank loads from expert ownership: SGLang's recorder sums the "
                   "ranks' counts).",
                variant=variant, ep=n,
                busiest_over_balanced={int(c): float(x) for c, x in busiest.items()})  # fmt: skip
    tp_only = [v for v in recorded if gpus.get(v, 1) > 1 and ep.get(v, 1) <= 1]
    if tp_only:
        out.add(4, f"{', '.join(tp_only)} split every expert over the GPUs (tensor parallel, "
                   "no expert parallelism): each rank computes its slice of every routed "
                   "expert, so the ranks' loads are equal and the histogram above is every "
                   "rank's.", variants=tp_only)  # fmt: skip


def _q4_random_routing(out: Findings, variants: list[str], decode: pd.DataFrame | None) -> None:
    """Say which routing the recorded variants ran where they served dummy weights: SGLang's
    uniform switch (a histogram near balance by construction) or the random router."""
    if not variants or not _has(decode, "variant", "engine"):
        return
    engines = {_text(v): _text(e) for v, e in zip(decode["variant"], decode["engine"],
                                                  strict=True)}  # fmt: skip
    routing = {}
    if "routing" in decode.columns:
        routing = {_text(v): _text(r) for v, r in zip(decode["variant"], decode["routing"],
                                                      strict=True)}  # fmt: skip
    dummy = [v for v in variants if engines.get(v) in DUMMY_ENGINES]
    uniform = [v for v in dummy if routing.get(v) == "uniform"]
    own = [v for v in dummy if v not in uniform]
    if uniform:
        out.add(4, f"{', '.join(uniform)} served dummy weights with uniform routing (SGLang's "
                   "SGLANG_SIMULATE_UNIFORM_EXPERTS): the spread below is that of uniform "
                   "random choice at each concurrency, the balanced case a trained router "
                   "departs from, not a trained model's routing.", variants=uniform,
                routing="uniform")  # fmt: skip
    if own:
        out.add(4, f"{', '.join(own)} served dummy (random) weights, router included: the "
                   "spread below is that of random routing at each concurrency, not of a "
                   "trained model's router.", variants=own, routing="random")  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Question 5: decode throughput and energy per variant
# ---------------------------------------------------------------------------------------------

DECODE_NUMERIC = (
    "concurrency", "gpus", "steady_s", "output_tok_s", "tpot_ms", "tok_s_over_c_tpot",
    "itl_p50_ms", "itl_p99_ms", "ttft_p50_ms", "avg_w_per_gpu", "avg_w_total", "pct_limit",
    "idle_w_per_gpu", "j_per_token", "j_per_token_net", "sm_clock_mhz", "sm_util",
    "tensor_util", "dram_util", "step_gb", "hbm_floor_ms", "tpot_over_floor", "load_cpu_pct",
    "errors", "wrong_length", "decoding_share", "w_gpu_min", "w_gpu_median", "w_gpu_max", "ep",
)  # fmt: skip
DECODE_TEXT = ("engine", "variant", "weights", "power_source", "throttle_reasons", "first_error")
#: Engines with a CUDA-graphs switch (SGLang: --disable-cuda-graph, vLLM: --enforce-eager).
GRAPH_ENGINES = ("sglang", "vllm")
#: Engines whose variants serve dummy (random) weights in this study (``model: dummy``).
DUMMY_ENGINES = ("sglang",)


def dummy_weights_note(table: pd.DataFrame | None) -> tuple[list[str], str]:
    """The variants that serve dummy (random) weights, and the sentence that says so and which
    routing they ran: SGLang's uniform switch, or the random weights' own router (which on
    the H200 read far fewer experts than uniform routing). Tables without ``model_kind``
    (older runs) count every SGLang variant as dummy, as the study served no other."""
    if table is None or table.empty or "variant" not in table.columns:
        return [], ""
    if "model_kind" in table.columns and table["model_kind"].notna().any():
        is_dummy = table["model_kind"].map(_text) == "dummy"
    else:
        is_dummy = (
            table.get("engine", pd.Series("", index=table.index)).map(_text).isin(DUMMY_ENGINES)
        )
    rows = table[is_dummy]
    variants = sorted(set(map(_text, rows["variant"])))
    if not variants:
        return [], ""
    routing = (
        rows["routing"].map(_text) if "routing" in rows.columns else pd.Series("", index=rows.index)
    )
    uniform = sorted(set(map(_text, rows.loc[routing == "uniform", "variant"])))
    own = sorted(set(variants) - set(uniform))
    text = (f"{', '.join(variants)} serve dummy weights (--load-format dummy): the weights "
            "are random, so speed and power are those of the served geometry, not of a "
            "trained model.")  # fmt: skip
    if uniform:
        text += (f" {', '.join(uniform)} route uniformly (SGLang's "
                 "SGLANG_SIMULATE_UNIFORM_EXPERTS: each token to top_k experts from a random "
                 "offset, every expert equally likely).")  # fmt: skip
    if own:
        text += (f" {', '.join(own)} use the random weights' own router, which can send most "
                 "tokens to the same few experts: a step then reads fewer expert weights than "
                 "decode with a trained router does.")  # fmt: skip
    return variants, text


#: The load generator above this % of one CPU core may itself limit the load.
LOAD_CPU_PCT = 80.0
#: tok/s over C / TPOT below this: C was not kept in flight (client or host side).
IN_FLIGHT_MIN = 0.8
#: Reasons that only say the GPU was idle or is at its application clocks: not a limit.
BENIGN_REASONS = ("gpu_idle", "applications_clocks_setting", "none")
UTIL_LABELS = (("sm_util", "SM"), ("tensor_util", "tensor"), ("dram_util", "DRAM"))
#: Columns of :func:`tp_pairs`: one GPU against N at the same engine, weights and graphs.
TP_COLUMNS = [
    "engine", "weights", "cuda_graphs", "concurrency", "variant_1", "variant_n", "gpus_n",
    "tok_s_1", "tok_s_n", "tok_ratio", "tpot_1_ms", "tpot_n_ms", "tpot_ratio", "w_1", "w_n",
    "w_n_min", "w_n_max", "w_total_ratio", "pct_limit_1", "pct_limit_n", "j_1", "j_n",
    "j_ratio", "clock_1_mhz", "clock_n_mhz", "reasons_1", "reasons_n",
]  # fmt: skip
#: Columns of :func:`graphs_pairs`.
PAIR_COLUMNS = [
    "engine", "weights", "gpus", "concurrency", "variant_on", "variant_off", "tpot_on_ms",
    "tpot_off_ms", "tpot_ratio", "w_on", "w_off", "w_ratio", "j_on", "j_off", "j_ratio",
    "j_net_on", "j_net_off", "j_net_ratio", "tok_s_on", "tok_s_off", "tok_ratio",
]  # fmt: skip


def _valid(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return (
        bool(value)
        if value is not None and not (isinstance(value, float) and math.isnan(value))
        else False
    )


def _graphs(value: Any) -> bool | None:
    """A ``cuda_graphs`` cell: True / False, or None where the engine has no such switch."""
    if isinstance(value, bool):
        return value
    text = _text(value).lower()
    if text in ("true", "1", "1.0", "yes", "on"):
        return True
    if text in ("false", "0", "0.0", "no", "off"):
        return False
    return None


def weights_name(weights: Any) -> str:
    text = _text(weights)
    return DTYPE_NAMES.get(text, text.upper())


def regime(weights: Any, graphs: bool | None) -> str:
    """ "BF16 weights, CUDA graphs on" (the parts that are known)."""
    bits = [f"{weights_name(weights)} weights"] if _text(weights) else []
    if graphs is not None:
        bits.append(f"CUDA graphs {'on' if graphs else 'off'}")
    return ", ".join(bits)


def _prep_decode(decode: pd.DataFrame) -> pd.DataFrame:
    df = _numeric(decode, *DECODE_NUMERIC)
    for c in DECODE_NUMERIC:
        if c not in df.columns:
            df[c] = float("nan")
    for c in DECODE_TEXT:
        if c not in df.columns:
            df[c] = ""
        df[c] = df[c].map(_text)
    df["valid"] = df["valid"].map(_valid) if "valid" in df.columns else True
    df["graphs"] = df["cuda_graphs"].map(_graphs) if "cuda_graphs" in df.columns else None
    return df


def _rspan(values: pd.Series, fmt, unit: str = "") -> str:
    values = values.dropna()
    return _span(values.min(), values.max(), fmt, unit)


def _f1(x: float) -> str:
    return f"{x:.1f}"


def _c_list(cs: Iterable[float]) -> str:
    return ", ".join(str(int(c)) for c in sorted(cs))


def q5_decode(decode: pd.DataFrame | None, hardware: dict | None = None) -> Findings:
    out = Findings()
    if not _has(decode, "concurrency"):
        out.miss(5, "no decode table (results/tables/decode.csv): the decode stage has not run")
        return out
    df = _prep_decode(decode)
    if not (df["power_source"].isin(["nvml", "rapl"]) & df["avg_w_per_gpu"].notna()).any():
        why = "no GPU" if _is_cpu(hardware) else "no NVML or RAPL reading"
        out.miss(5, f"no decode power ({why}: power_source none): J/token and watts not "
                    "reported, throughput only")  # fmt: skip
    dummy, note = dummy_weights_note(df)
    if dummy:
        out.add(5, note, variants=dummy, weights="random")
    for variant, g in df.groupby("variant", sort=True):
        _q5_variant(out, variant, g.sort_values("concurrency"))
    if _q5_structured(out, df) == 0:
        _q5_compare(out, df)
    _q5_tp(out, df)
    return out


def _head(variant: str, g: pd.DataFrame) -> str:
    engine = _text(g["engine"].iloc[0])
    gpus = g["gpus"].dropna()
    about = [engine] if engine and engine != variant else []
    rg = regime(g["weights"].iloc[0], g["graphs"].iloc[0])
    if rg:
        about.append(rg)
    if len(gpus):
        about.append(f"{gpus.iloc[0]:.0f} GPU{'s' if gpus.iloc[0] != 1 else ''}")
    return (variant or engine or "decode") + (f" ({', '.join(about)})" if about else "")


def _q5_variant(out: Findings, variant: str, g: pd.DataFrame) -> None:
    """Per concurrency: tok/s, TPOT, J/token (and net of idle), W per GPU and % of the limit."""
    parts, per_c, invalid = [], {}, []
    for _, r in g.iterrows():
        c = int(r["concurrency"])
        if not r["valid"]:
            bits = []
            if _ok(r["steady_s"]):
                bits.append(f"steady {r['steady_s']:.1f} s")
            for col in ("errors", "wrong_length"):
                if _ok(r[col]) and r[col] > 0:
                    bits.append(f"{r[col]:.0f} {col.replace('_', ' ')}")
            if r["first_error"]:
                bits.append(f"first error “{_message(r['first_error'])}”")
            invalid.append(f"C = {c}" + (f" ({', '.join(bits)})" if bits else ""))
            continue
        bit = f"C = {c}: {r['output_tok_s']:.1f} tok/s"
        rec = {"tok_s": float(r["output_tok_s"])}
        if _ok(r["tpot_ms"]):
            bit += f" at TPOT {r['tpot_ms']:.1f} ms"
            rec["tpot_ms"] = float(r["tpot_ms"])
        if _ok(r["j_per_token"]):
            bit += f", {r['j_per_token']:.2f} J/token"
            rec["j_per_token"] = float(r["j_per_token"])
            if _ok(r["j_per_token_net"]):
                bit += f" ({r['j_per_token_net']:.2f} net of idle)"
                rec["j_per_token_net"] = float(r["j_per_token_net"])
        if _ok(r["avg_w_per_gpu"]):
            bit += f", {fmt_w(r['avg_w_per_gpu'])} per GPU"
            rec["w_per_gpu"] = float(r["avg_w_per_gpu"])
            if _ok(r["pct_limit"]):
                bit += f" ({fmt_pct(r['pct_limit'])} of the limit)"
                rec["pct_limit"] = float(r["pct_limit"])
        parts.append(bit)
        per_c[c] = rec
    text = f"{_head(variant, g)}: " + ("; ".join(parts) if parts else "no valid concurrency level")
    if invalid:
        text += f". Invalid (not reported as results): {', '.join(invalid)}"
    more, latency = _q5_latency(g)
    if more:
        text += f". {more}"
    out.add(5, text + ".", variant=variant, engine=_text(g["engine"].iloc[0]),
            weights=_text(g["weights"].iloc[0]), cuda_graphs=_graphs(g["graphs"].iloc[0]),
            per_concurrency=per_c, invalid=len(invalid), latency=latency)  # fmt: skip


def _q5_latency(g: pd.DataFrame) -> tuple[str, dict[str, Any]]:
    """A variant's second sentence, over its valid concurrencies: TPOT against the step's HBM
    floor, ITL p50 / p99, TTFT, SM clock, clocks-event reasons and utilisation, idle W, and how
    well C was held; with its numbers."""
    v = g[g["valid"]]
    if v.empty:
        return "", {}
    cs = v["concurrency"]
    bits: list[str] = []
    numbers: dict[str, Any] = {}
    over = v[v["tpot_over_floor"].notna() & v["hbm_floor_ms"].notna()]
    if v["tpot_ms"].notna().any():
        bit = f"TPOT {_rspan(v['tpot_ms'], _f1, ' ms')}"
        if len(over):
            best = over.loc[over["tpot_over_floor"].idxmin()]
            bit += (f", {_rspan(over['tpot_over_floor'], fmt_ratio)} the step's HBM floor "
                    f"({_rspan(over['hbm_floor_ms'], _f1, ' ms')}: the bytes a step reads over "
                    f"the measured copy bandwidth), nearest at C = {best['concurrency']:.0f} "
                    f"({fmt_ratio(best['tpot_over_floor'])})")  # fmt: skip
            numbers["tpot_over_floor"] = {int(c): float(x) for c, x in
                                          zip(over["concurrency"], over["tpot_over_floor"],
                                              strict=True)}  # fmt: skip
            numbers["hbm_floor_ms"] = {int(c): float(x) for c, x in
                                       zip(over["concurrency"], over["hbm_floor_ms"],
                                           strict=True)}  # fmt: skip
        else:
            bit += " (not set against an HBM floor: no step_gb or measured copy bandwidth in "
            bit += "this table)"
        bits.append(bit)
    lat = []
    for col, label in (("itl_p50_ms", "ITL p50"), ("itl_p99_ms", "ITL p99"),
                       ("ttft_p50_ms", "TTFT p50")):  # fmt: skip
        if v[col].notna().any():
            lat.append(f"{label} {_rspan(v[col], _f1, ' ms')}")
            numbers[col] = {int(c): float(x) for c, x in zip(cs, v[col], strict=True) if _ok(x)}
    if lat:
        bits.append(", ".join(lat).replace(", ITL p99", ", p99"))
    if v["sm_clock_mhz"].notna().any():
        bits.append(f"SM clock {_rspan(v['sm_clock_mhz'], _plain, ' MHz')}")
        numbers.update(clock_min=float(v["sm_clock_mhz"].min()),
                       clock_max=float(v["sm_clock_mhz"].max()))  # fmt: skip
    if v["power_source"].isin(["nvml"]).any():
        reasons: dict[str, list[int]] = {}
        for c, cell in zip(cs, v["throttle_reasons"], strict=True):
            for name in reason_names(cell):
                if name not in BENIGN_REASONS:
                    reasons.setdefault(name, []).append(int(c))
        if reasons:
            bits.append("clocks-event reasons " + ", ".join(
                f"{n} (C = {_c_list(c)})" for n, c in sorted(reasons.items())))  # fmt: skip
        else:
            bits.append("no power, thermal or other clocks-event limit at any C")
        numbers["reasons"] = {n: sorted(c) for n, c in reasons.items()}
    utils = [(col, label) for col, label in UTIL_LABELS if v[col].notna().any()]
    if utils:
        bits.append("utilisation " + ", ".join(
            f"{label} {_rspan(v[col], _plain, ' %')}" for col, label in utils))  # fmt: skip
        numbers.update({f"{col}_max": float(v[col].max()) for col, _ in utils})
    if v["idle_w_per_gpu"].notna().any():
        bits.append(f"idle {_rspan(v['idle_w_per_gpu'], _plain, ' W')} per GPU before the "
                    "server started")  # fmt: skip
        numbers["idle_w_per_gpu"] = float(v["idle_w_per_gpu"].median())
    share = v[v["decoding_share"].notna() & v["tok_s_over_c_tpot"].notna()]
    if len(share):
        decoding = _rspan(share["decoding_share"], fmt_ratio)
        bits.append(f"tok/s {_rspan(share['tok_s_over_c_tpot'], fmt_ratio)} C / TPOT, the "
                    f"streams past their first token for {decoding} of the window (the rest: "
                    "replacement requests waiting for their prefill)")  # fmt: skip
        numbers["tok_s_over_c_tpot"] = {int(c): float(x) for c, x in
                                        zip(share["concurrency"], share["tok_s_over_c_tpot"],
                                            strict=True)}  # fmt: skip
        numbers["decoding_share"] = {int(c): float(x) for c, x in
                                     zip(share["concurrency"], share["decoding_share"],
                                         strict=True)}  # fmt: skip
    held = v[v["tok_s_over_c_tpot"] < IN_FLIGHT_MIN]
    busy = v[v["load_cpu_pct"] >= LOAD_CPU_PCT]
    if len(held):
        bits.append(f"at C = {_c_list(held['concurrency'])} tok/s is only "
                    f"{_rspan(held['tok_s_over_c_tpot'], fmt_ratio)} C / TPOT (C not kept in "
                    "flight)")  # fmt: skip
    if len(busy):
        bits.append(f"the load generator used {_rspan(busy['load_cpu_pct'], _plain, ' %')} of "
                    f"a CPU core at C = {_c_list(busy['concurrency'])} (it may limit the "
                    "load)")  # fmt: skip
    if not bits:
        return "", {}
    where = f"C = {_c_list(cs)}"
    return f"Over {where}: " + "; ".join(bits), numbers


def _by_c(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop_duplicates("concurrency", keep="last").set_index("concurrency")


def _ratio(a: Any, b: Any) -> float:
    a, b = _num(a), _num(b)
    return a / b if _ok(a) and _ok(b) and b > 0 else float("nan")


def graphs_pairs(decode: pd.DataFrame | None) -> pd.DataFrame:
    """Per engine, weights and concurrency: the CUDA-graphs-on variant beside the graphs-off
    one (valid rows only) with the on/off ratios of TPOT, W per GPU, J/token (total and net of
    idle) and tok/s. Empty (with :data:`PAIR_COLUMNS`) when no such pair ran."""
    rows: list[dict[str, Any]] = []
    if _has(decode, "concurrency", "variant", "cuda_graphs"):
        df = _prep_decode(decode)
        df = df[df["valid"] & df["graphs"].notna() & df["output_tok_s"].notna()]
        df = df.assign(gpus=df["gpus"].fillna(1))
        for (engine, weights, gpus), g in df.groupby(["engine", "weights", "gpus"], sort=True):
            on = sorted(set(g.loc[g["graphs"] == True, "variant"]))  # noqa: E712
            off = sorted(set(g.loc[g["graphs"] == False, "variant"]))  # noqa: E712
            if not on or not off:
                continue
            a, b = _by_c(g[g["variant"] == on[0]]), _by_c(g[g["variant"] == off[0]])
            for c in sorted(set(a.index) & set(b.index)):
                x, y = a.loc[c], b.loc[c]
                rows.append({
                    "engine": engine, "weights": weights, "gpus": int(gpus),
                    "concurrency": int(c),
                    "variant_on": on[0], "variant_off": off[0],
                    "tpot_on_ms": x["tpot_ms"], "tpot_off_ms": y["tpot_ms"],
                    "tpot_ratio": _ratio(x["tpot_ms"], y["tpot_ms"]),
                    "w_on": x["avg_w_per_gpu"], "w_off": y["avg_w_per_gpu"],
                    "w_ratio": _ratio(x["avg_w_per_gpu"], y["avg_w_per_gpu"]),
                    "j_on": x["j_per_token"], "j_off": y["j_per_token"],
                    "j_ratio": _ratio(x["j_per_token"], y["j_per_token"]),
                    "j_net_on": x["j_per_token_net"], "j_net_off": y["j_per_token_net"],
                    "j_net_ratio": _ratio(x["j_per_token_net"], y["j_per_token_net"]),
                    "tok_s_on": x["output_tok_s"], "tok_s_off": y["output_tok_s"],
                    "tok_ratio": _ratio(x["output_tok_s"], y["output_tok_s"]),
                })  # fmt: skip
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def tp_pairs(decode: pd.DataFrame | None) -> pd.DataFrame:
    """Per engine, weights, CUDA graphs setting and concurrency: the one-GPU variant beside
    each tensor-parallel one (valid rows only): tok/s, TPOT, W per GPU (and the spread over
    the N GPUs), total watts, % of the limit, J/token, SM clock and clocks-event reasons.
    Empty (with :data:`TP_COLUMNS`) when no such pair ran."""
    rows: list[dict[str, Any]] = []
    if _has(decode, "concurrency", "variant", "gpus"):
        df = _prep_decode(decode)
        df = df[df["valid"] & df["output_tok_s"].notna() & df["gpus"].notna()]
        keys = ["engine", "weights", "graphs"]
        for (engine, weights, graphs), g in df.groupby(keys, sort=True, dropna=False):
            ones = sorted(set(g.loc[g["gpus"] == 1, "variant"]))
            if not ones:
                continue
            a = _by_c(g[g["variant"] == ones[0]])
            for variant in sorted(set(g.loc[g["gpus"] > 1, "variant"])):
                b = _by_c(g[g["variant"] == variant])
                for c in sorted(set(a.index) & set(b.index)):
                    x, y = a.loc[c], b.loc[c]
                    rows.append({
                        "engine": engine, "weights": weights, "cuda_graphs": graphs,
                        "concurrency": int(c), "variant_1": ones[0], "variant_n": variant,
                        "gpus_n": int(y["gpus"]), "tok_s_1": x["output_tok_s"],
                        "tok_s_n": y["output_tok_s"],
                        "tok_ratio": _ratio(y["output_tok_s"], x["output_tok_s"]),
                        "tpot_1_ms": x["tpot_ms"], "tpot_n_ms": y["tpot_ms"],
                        "tpot_ratio": _ratio(y["tpot_ms"], x["tpot_ms"]),
                        "w_1": x["avg_w_per_gpu"], "w_n": y["avg_w_per_gpu"],
                        "w_n_min": y.get("w_gpu_min"), "w_n_max": y.get("w_gpu_max"),
                        "w_total_ratio": _ratio(y["avg_w_total"], x["avg_w_total"]),
                        "pct_limit_1": x["pct_limit"], "pct_limit_n": y["pct_limit"],
                        "j_1": x["j_per_token"], "j_n": y["j_per_token"],
                        "j_ratio": _ratio(y["j_per_token"], x["j_per_token"]),
                        "clock_1_mhz": x["sm_clock_mhz"], "clock_n_mhz": y["sm_clock_mhz"],
                        "reasons_1": _limits(x["throttle_reasons"]),
                        "reasons_n": _limits(y["throttle_reasons"]),
                    })  # fmt: skip
    return pd.DataFrame(rows, columns=TP_COLUMNS)


def _limits(cell: Any) -> str:
    """The clocks-event reasons of a cell that limit clocks (not idle or the set clocks)."""
    return ",".join(n for n in reason_names(cell) if n not in BENIGN_REASONS)


def _q5_tp(out: Findings, df: pd.DataFrame) -> None:
    """One GPU against tensor parallelism, per engine, weights and graphs setting."""
    pairs = tp_pairs(df)
    keys = ["engine", "weights", "cuda_graphs", "variant_n"]
    for (engine, weights, graphs, variant), g in pairs.groupby(keys, sort=True, dropna=False):
        n, one = int(g["gpus_n"].iloc[0]), g["variant_1"].iloc[0]
        bits, per_c = [], {}
        for _, p in g.iterrows():
            c = int(p["concurrency"])
            rec = {k: float(p[k]) for k in ("tok_ratio", "tpot_ratio", "j_ratio", "w_1", "w_n",
                                             "w_n_min", "w_n_max") if _ok(p[k])}  # fmt: skip
            per_c[c] = rec
            bit = [f"tok/s {fmt_ratio(rec['tok_ratio'])}"] if "tok_ratio" in rec else []
            if "tpot_ratio" in rec:
                bit.append(f"TPOT {fmt_ratio(rec['tpot_ratio'])}")
            if "w_n" in rec and "w_1" in rec:
                w = f"{fmt_w(rec['w_n'])} per GPU against {fmt_w(rec['w_1'])}"
                if "w_n_min" in rec and "w_n_max" in rec:
                    w += f" (GPUs {_span(rec['w_n_min'], rec['w_n_max'], _plain, ' W')})"
                bit.append(w)
            if "j_ratio" in rec:
                bit.append(f"J/token {fmt_ratio(rec['j_ratio'])}")
            if p["reasons_n"] or p["reasons_1"]:
                bit.append(f"limits {p['reasons_n'] or 'none'} against {p['reasons_1'] or 'none'}")
            bits.append(f"C = {c}: " + ", ".join(bit))
        text = (f"{n} GPUs against one, {regime(weights, _graphs(graphs)) or engine} "
                f"({variant} / {one}, {n} GPUs ÷ 1): " + "; ".join(bits))  # fmt: skip
        out.add(5, text + ".", engine=engine, weights=weights, cuda_graphs=_graphs(graphs),
                variant_1=one, variant_n=variant, gpus=n, per_concurrency=per_c)  # fmt: skip


def _q5_structured(out: Findings, df: pd.DataFrame) -> int:
    """CUDA graphs on against off per weights, and weights against weights per graphs
    setting. Returns the number of comparisons made (0: fall back to variant against
    variant)."""
    graph_engines = sorted(set(df["engine"]) & set(GRAPH_ENGINES))
    if not graph_engines:
        return 0
    if df["graphs"].isna().all() or not (df["weights"] != "").any():
        return 0  # an older table without cuda_graphs and weights: variant against variant
    made = 0
    pairs = graphs_pairs(df.assign(cuda_graphs=df["graphs"]))
    for (engine, weights, gpus), g in pairs.groupby(["engine", "weights", "gpus"], sort=True):
        per_c: dict[int, dict[str, float]] = {}
        bits = []
        for _, p in g.iterrows():
            c = int(p["concurrency"])
            rec = {k: float(p[k]) for k in ("tpot_ratio", "w_ratio", "j_ratio", "j_net_ratio",
                                             "tok_ratio") if _ok(p[k])}  # fmt: skip
            per_c[c] = rec
            bit = [f"TPOT {fmt_ratio(rec['tpot_ratio'])}"] if "tpot_ratio" in rec else []
            if "w_ratio" in rec:
                bit.append(f"W per GPU {fmt_ratio(rec['w_ratio'])}")
            if "j_ratio" in rec:
                j = f"J/token {fmt_ratio(rec['j_ratio'])}"
                if "j_net_ratio" in rec:
                    j += f" (net of idle {fmt_ratio(rec['j_net_ratio'])})"
                bit.append(j)
            bit.append(f"tok/s {fmt_ratio(rec['tok_ratio'])}" if "tok_ratio" in rec else "")
            bits.append(f"C = {c}: " + ", ".join(b for b in bit if b))
        on, off = g["variant_on"].iloc[0], g["variant_off"].iloc[0]
        where = f" on {gpus} GPUs" if gpus > 1 else ""
        text = (f"CUDA graphs on against off, {weights_name(weights)} weights{where} ({engine}: "
                f"{on} / {off}, on ÷ off): " + "; ".join(bits))  # fmt: skip
        tp = g["tpot_ratio"].dropna()
        if len(tp):
            best = g.loc[tp.idxmin()]
            text += (f". Graphs cut TPOT most at C = {best['concurrency']:.0f} "
                     f"({fmt_ratio(best['tpot_ratio'])})" if best["tpot_ratio"] < 1 else
                     ". Graphs do not shorten TPOT at any shared C")  # fmt: skip
        out.add(5, text + ".", engine=engine, weights=weights, gpus=int(gpus), variant_on=on,
                variant_off=off, per_concurrency=per_c)  # fmt: skip
        made += 1
    if not made:
        out.miss(5, "CUDA graphs on/off not compared: no weights ran with both a graphs-on and "
                    "a graphs-off valid variant at a shared concurrency")  # fmt: skip
    valid = df[df["valid"] & df["output_tok_s"].notna() & (df["weights"] != "")]
    valid = valid.assign(gpus=valid["gpus"].fillna(1))
    by = ["engine", "graphs", "gpus"]
    for (engine, graphs, _gpus), g in valid.groupby(by, sort=True, dropna=False):
        weights = sorted(set(g["weights"]))
        if len(weights) < 2:
            continue
        base = "bf16" if "bf16" in weights else weights[0]
        a_var = sorted(set(g.loc[g["weights"] == base, "variant"]))[0]
        a = _by_c(g[g["variant"] == a_var])
        for other in [w for w in weights if w != base]:
            b_var = sorted(set(g.loc[g["weights"] == other, "variant"]))[0]
            b = _by_c(g[g["variant"] == b_var])
            shared = sorted(set(a.index) & set(b.index))
            if not shared:
                continue
            tok = {int(c): _ratio(b.loc[c, "output_tok_s"], a.loc[c, "output_tok_s"])
                   for c in shared}  # fmt: skip
            text = (f"{weights_name(other)} against {weights_name(base)} weights "
                    f"({regime('', _graphs(graphs)) or engine}; {b_var} / {a_var}): "
                    f"{_span(min(tok.values()), max(tok.values()), fmt_ratio)} the tok/s over "
                    f"C = {_c_list(shared)}")  # fmt: skip
            numbers: dict[str, Any] = {"base": a_var, "other": b_var, "tok_ratio": tok}
            for col, label, key in (("tpot_ms", "the TPOT", "tpot_ratio"),
                                    ("j_per_token", "the J/token", "j_ratio")):  # fmt: skip
                r = {int(c): _ratio(b.loc[c, col], a.loc[c, col]) for c in shared}
                r = {c: x for c, x in r.items() if _ok(x)}
                if r:
                    text += f", {_span(min(r.values()), max(r.values()), fmt_ratio)} {label}"
                    numbers[key] = r
            out.add(5, text + ".", **numbers)
            made += 1
    return made


def _q5_compare(out: Findings, df: pd.DataFrame) -> None:
    """Variants side by side at each concurrency they share (valid rows only)."""
    valid = df[df["valid"] & df["output_tok_s"].notna()]
    variants = sorted(valid["variant"].unique())
    if len(variants) < 2:
        return
    base = variants[0]
    for other in variants[1:]:
        a = valid[valid["variant"] == base].set_index("concurrency")
        b = valid[valid["variant"] == other].set_index("concurrency")
        shared = sorted(set(a.index) & set(b.index))
        if not shared:
            continue
        tok = {int(c): float(b.loc[c, "output_tok_s"] / a.loc[c, "output_tok_s"])
               for c in shared}  # fmt: skip
        text = (
            f"{other} vs {base}: {_span(min(tok.values()), max(tok.values()), fmt_ratio)} "
            f"the throughput over C = {', '.join(str(int(c)) for c in shared)}"
        )
        numbers: dict[str, Any] = {"base": base, "other": other, "tok_ratio": tok}
        both = [c for c in shared if _ok(a.loc[c, "j_per_token"]) and _ok(b.loc[c, "j_per_token"])]
        if both:
            j = {int(c): float(b.loc[c, "j_per_token"] / a.loc[c, "j_per_token"]) for c in both}
            text += f" at {_span(min(j.values()), max(j.values()), fmt_ratio)} the J/token"
            numbers["j_ratio"] = j
        out.add(5, text + ".", **numbers)


# ---------------------------------------------------------------------------------------------
# The seed's figures beside this machine's
# ---------------------------------------------------------------------------------------------


def seed_comparison(
    hardware: dict | None = None,
    peaks: dict | None = None,
    sweep: pd.DataFrame | None = None,
    kernel_power: pd.DataFrame | None = None,
    decode: pd.DataFrame | None = None,
    expert_m: pd.DataFrame | None = None,
) -> Findings:
    out = Findings()
    q = "seed"
    _seed_hardware(out, hardware, peaks)
    rows = shape = None
    df = None
    if _has(sweep, "backend", "status", "M"):
        df = _prep_sweep(sweep)
        rows, shape = _expert_rows(df)
    # 1. decode-sized FP4 GEMMs: 30–42 µs whatever their size.
    lo, hi = SEED["fp4_small_us"]
    seed_txt = (f"The seed measured decode-sized FP4 GEMMs at {lo:.0f}–{hi:.0f} µs whatever their "
                f"size (“{SEED['fp4_small_quote']}”)")  # fmt: skip
    if df is None:
        out.miss(q, "no sweep table: the seed's FP4 GEMM timings have nothing to compare with")
    else:
        fp4 = df[df["dtype"].isin(FP4_DTYPES)]
        fp4_ok = fp4[(fp4["status"] == "ok") & (fp4["M"] <= DECODE_MAX_M)]
        numbers: dict[str, Any] = {"seed_us": [lo, hi], "fp4_points": len(fp4),
                                   "fp4_decode_ok": len(fp4_ok)}  # fmt: skip
        bits = []
        if len(fp4_ok):
            e = fp4_ok["eager_us"].dropna()
            bits.append(f"here decode-sized FP4 GEMMs ran in {_span(e.min(), e.max(), fmt_us)} "
                        "eager")  # fmt: skip
            numbers.update(fp4_eager_min=float(e.min()), fp4_eager_max=float(e.max()))
        elif len(fp4):
            top = fp4["status"].value_counts().index[0]
            msg = _message(fp4[fp4["status"] == top]["error"].iloc[0])
            bits.append(f"here no FP4 GEMM ran ({len(fp4)} points, mostly {top}: “{msg}”)")
        else:
            bits.append("here the sweep has no FP4 point")
        if rows is not None and not rows.empty:
            m = _decode_m(rows)
            at = rows[rows["M"] == m] if m is not None else rows.iloc[0:0]
            for dtype in ("fp8_e4m3", "bf16"):
                sub = at[at["dtype"] == dtype]
                be, bg = _best(sub, "eager_us"), _best(sub, "graph_us")
                if be is None:
                    continue
                bit = (f"the fastest {_dtype_name(dtype)} GEMM at M = {m:.0f} takes "
                       f"{fmt_us(be['eager_us'])} eager ({_impl_label(be)})")  # fmt: skip
                numbers[f"{dtype}_eager_us"] = float(be["eager_us"])
                if bg is not None:
                    if _impl_label(bg) == _impl_label(be):  # one name for both times
                        bit = bit[: -len(f" ({_impl_label(be)})")]
                    bit += f" and {fmt_us(bg['graph_us'])} graph-replayed ({_impl_label(bg)})"
                    numbers[f"{dtype}_graph_us"] = float(bg["graph_us"])
                bits.append(bit)
                dec = rows[(rows["dtype"] == dtype) & (rows["M"] <= DECODE_MAX_M)]
                span = dec.groupby("M")["eager_us"].min()
                if len(span) > 1:
                    bits[-1] += (f", the fastest eager time over M {span.index.min():.0f}–"
                                 f"{span.index.max():.0f} spanning "
                                 f"{_span(span.min(), span.max(), fmt_us)}")  # fmt: skip
                    numbers[f"{dtype}_decode_eager_span"] = [float(span.min()), float(span.max())]
        out.add(
            q, f"{seed_txt}; on {shape or 'the expert shape'} " + "; ".join(bits) + ".", **numbers
        )
    # 2. sgl_kernel FP4.
    _seed_sgl(out, df)
    # 3. power during decode.
    _seed_power(out, hardware, kernel_power, decode)
    # 4. balanced experts.
    if _has(expert_m, "m", "balanced_m"):
        em = _numeric(expert_m, "m", "balanced_m", "concurrency")
        m = em["m"].dropna()
        text = (f"The seed assumed perfect balance ({SEED['tokens_per_expert_quote']} tokens "
                f"per expert); the recorded per-expert M here ranges {fmt_m(m.min())}–"
                f"{fmt_m(m.max())} (median {fmt_m(m.median())})")  # fmt: skip
        numbers = {"seed_m": SEED["tokens_per_expert"], "m_min": float(m.min()),
                   "m_max": float(m.max()), "m_median": float(m.median())}  # fmt: skip
        if "concurrency" in em.columns and em["concurrency"].notna().any():
            top = em[em["concurrency"] == em["concurrency"].max()]
            bal = top["balanced_m"].dropna()
            if len(bal) and bal.iloc[0] > 0 and top["m"].notna().any():
                who = ", ".join(sorted({_text(v) for v in top.get("variant", [])} - {""}))
                ratio = float(top["m"].max() / bal.iloc[0])
                text += (f"; at the largest concurrency, C = {top['concurrency'].iloc[0]:.0f}"
                         + (f" ({who})" if who else "")
                         + f", the balanced M is {fmt_m(bal.iloc[0])} and the busiest expert "
                         f"gets {fmt_ratio(ratio)} it")  # fmt: skip
                numbers.update(
                    top_c=float(top["concurrency"].iloc[0]),
                    top_balanced_m=float(bal.iloc[0]),
                    top_max_over_balanced=ratio,
                )
        if _has(decode, "engine") and set(map(_text, decode["engine"])) & set(DUMMY_ENGINES):
            routing = set(map(_text, decode.get("routing", pd.Series(dtype=object))))
            text += (" (random weights routed uniformly by SGLang's switch: balance by "
                     "construction, not a trained router's)" if routing == {"uniform"} else
                     " (random weights: random routing, not a trained router's)")  # fmt: skip
        out.add(q, text + ".", **numbers)
    else:
        out.miss(q, f"the seed's balanced-routing assumption ({SEED['tokens_per_expert_quote']}) "
                    "is not checked: no expert-distribution record here")  # fmt: skip
    return out


def _seed_hardware(out: Findings, hardware: dict | None, peaks: dict | None) -> None:
    seed_hw = (f"{SEED['gpus']}× {SEED['gpu']} ({SEED['arch']}, "
               f"{fmt_w(SEED['power_limit_w'])} each)")  # fmt: skip
    if hardware is None and peaks is None:
        out.miss("seed", "no hardware.json: this machine's hardware cannot be set beside the "
                         f"seed's {seed_hw}")  # fmt: skip
        return
    here = describe_machine(hardware, peaks)
    gpu = _gpu(hardware)
    numbers: dict[str, Any] = {
        "seed_gpu": SEED["gpu"],
        "seed_arch": SEED["arch"],
        "seed_power_limit_w": SEED["power_limit_w"],
        "here": here,
    }
    text = f"The seed ran on {seed_hw}; this machine has {here}"
    if gpu:
        arch = _sm_arch(gpu.get("compute_capability"))
        limit = _num(gpu.get("power_limit_w"))
        numbers.update(arch=arch, power_limit_w=limit if _ok(limit) else None,
                       gpu=_text(gpu.get("name")))  # fmt: skip
        if arch and arch not in ("sm_100", "sm_103", "sm_110", "sm_120", "sm_121"):
            text += (
                f". FP4 tensor-core GEMMs need sm_100 or sm_120, which {arch} is not: "
                "FP8 and BF16 carry the comparison here"
            )
        if _ok(limit):
            text += (
                f". This GPU's power limit is {fmt_w(limit)} against the seed's "
                f"{fmt_w(SEED['power_limit_w'])} ({fmt_ratio(limit / SEED['power_limit_w'])})"
            )
    else:
        text += ": no GPU timings or watts can be compared, only the pipeline's shape"
    out.add("seed", text + ".", **numbers)


def _seed_sgl(out: Findings, df: pd.DataFrame | None) -> None:
    seed_txt = f"The seed found “{SEED['sgl_fp4_quote']}”"
    if df is None:
        out.miss("seed", "no sweep table: sgl_kernel's FP4 GEMM not compared with the seed")
        return
    sgl = df[(df["backend"] == "sgl_kernel") & (df["op"] == "cutlass_scaled_fp4_mm")]
    if sgl.empty:
        out.miss("seed", "sgl_kernel cutlass_scaled_fp4_mm is not in this sweep's grid")
        return
    ok = sgl[sgl["status"] == "ok"]
    numbers: dict[str, Any] = {
        "points": len(sgl),
        "ok": len(ok),
        "seed_fails_below_m": SEED["sgl_fp4_fails_below_m"],
    }
    if ok.empty:
        top = sgl["status"].value_counts().index[0]
        msg = _message(sgl[sgl["status"] == top]["error"].iloc[0])
        text = (f"{seed_txt}; here it ran at none of its {len(sgl)} points ({top}: “{msg}”), so "
                "neither claim can be checked on this machine")  # fmt: skip
        numbers["status"] = top
    else:
        bad = sgl[sgl["status"] != "ok"]
        text = f"{seed_txt}; here it ran at {len(ok)} of {len(sgl)} points"
        if len(bad):
            text += f" and failed at {_m_list(bad['M'])} ({bad['status'].value_counts().index[0]})"
            numbers["failed_max_m"] = float(bad["M"].max())
        fi = df[(df["backend"] == "flashinfer") & (df["impl"] == "cutlass")
                & (df["op"] == "mm_fp4") & (df["status"] == "ok")]  # fmt: skip
        keys = ["shape", "M", "G"]
        col = "graph_us" if ok["graph_us"].notna().all() and fi["graph_us"].notna().all() \
            else "eager_us"  # fmt: skip
        both = ok.merge(fi, on=[k for k in keys if k in ok.columns], suffixes=("", "_fi"))
        both = both[both[col].notna() & both[f"{col}_fi"].notna()]
        if len(both):
            ratio = both[col] / both[f"{col}_fi"]
            slower = int((ratio > 1).sum())
            text += (f"; against FlashInfer's CUTLASS mm_fp4 it is slower at {slower} of "
                     f"{len(both)} shared points (median {fmt_ratio(ratio.median())} its "
                     f"{_mode(col)} time)")  # fmt: skip
            numbers.update(shared=len(both), slower=slower, median_ratio=float(ratio.median()))
    out.add("seed", text + ".", **numbers)


def _seed_power(out: Findings, hardware: dict | None, kernel_power: pd.DataFrame | None,
                decode: pd.DataFrame | None) -> None:  # fmt: skip
    seed_txt = (f"The seed's GPUs drew about {fmt_w(SEED['decode_w'])} of "
                f"{fmt_w(SEED['power_limit_w'])} ({fmt_pct(SEED['decode_pct'])}) per GPU during "
                f"decode (“{SEED['decode_w_quote']}”)")  # fmt: skip
    bits = []
    numbers: dict[str, Any] = {"seed_w": SEED["decode_w"], "seed_pct": SEED["decode_pct"]}
    if _has(decode, "concurrency"):
        d = _prep_decode(decode)
        d = d[d["valid"] & d["avg_w_per_gpu"].notna()]
        if len(d):
            w, p = d["avg_w_per_gpu"], d["pct_limit"]
            bit = f"real decode here draws {_span(w.min(), w.max(), _plain, ' W')} per GPU"
            if p.notna().any():
                bit += f" ({_span(p.min(), p.max(), _plain, ' %')} of the limit)"
                numbers.update(decode_pct_min=float(p.min()), decode_pct_max=float(p.max()))
            bit += f" over {len(d)} valid runs"
            lo, hi = d.loc[w.idxmin()], d.loc[w.idxmax()]
            if d["variant"].nunique() > 1:
                bit += (f" (lowest {lo['variant']} at C = {lo['concurrency']:.0f}, highest "
                        f"{hi['variant']} at C = {hi['concurrency']:.0f})")  # fmt: skip
            numbers.update(decode_w_min=float(w.min()), decode_w_max=float(w.max()))
            by_regime = {}
            if d["graphs"].notna().any():
                for graphs, g in d[d["graphs"].notna()].groupby("graphs", sort=False):
                    gw, gp = g["avg_w_per_gpu"], g["pct_limit"]
                    name = ("with CUDA graphs off (as the seed ran)" if not graphs
                            else "with CUDA graphs on (as production serves)")  # fmt: skip
                    part = f"{_span(gw.min(), gw.max(), _plain, ' W')}"
                    if gp.notna().any():
                        part += f" ({_span(gp.min(), gp.max(), _plain, ' %')})"
                    by_regime[bool(graphs)] = (name, part)
                    numbers[f"decode_w_graphs_{'on' if graphs else 'off'}"] = [
                        float(gw.min()), float(gw.max())]  # fmt: skip
                bit += ": " + ", ".join(f"{n} {t}" for _, (n, t) in sorted(by_regime.items()))
            bits.append(bit)
    if _has(kernel_power, "mode"):
        kp = _prep_power(kernel_power)
        loops = kp[(kp["status"] == "ok") & kp["avg_w"].notna() & (kp["mode"] == "eager")
                   & (kp["M"] <= DECODE_MAX_M) & (kp["power_source"] != "none")]  # fmt: skip
        if len(loops):
            text, nums = _watts_span(loops)
            bits.append(f"decode-sized (M ≤ {DECODE_MAX_M}) eager GEMM loops draw {text}")
            numbers.update({f"loop_{k}": v for k, v in nums.items()})
    if bits and not numbers.get("decode_w_min"):
        bits.append("no real decode power was measured here")
    if not bits:
        why = "no GPU" if _is_cpu(hardware) else "no decode or kernel-loop power measured"
        out.miss(
            "seed",
            f"the seed's decode power ({fmt_w(SEED['decode_w'])} of "
            f"{fmt_w(SEED['power_limit_w'])}) has no counterpart here ({why})",
        )
        return
    out.add("seed", f"{seed_txt}; " + "; ".join(bits) + ".", **numbers)


# ---------------------------------------------------------------------------------------------
# All questions; reading a results folder
# ---------------------------------------------------------------------------------------------


def compute_findings(
    hardware: dict | None = None,
    peaks: dict | None = None,
    sweep: pd.DataFrame | None = None,
    kernel_power: pd.DataFrame | None = None,
    decode: pd.DataFrame | None = None,
    expert_m: pd.DataFrame | None = None,
) -> Findings:
    """Every question's findings and missing notes, in question order (1–5, then "seed")."""
    out = Findings()
    for part in (
        q1_backends(sweep, peaks),
        q2_bounds(sweep, peaks),
        q3_power(kernel_power, hardware),
        q4_experts(expert_m, decode),
        q5_decode(decode, hardware),
        seed_comparison(hardware, peaks, sweep, kernel_power, decode, expert_m),
    ):
        out.extend(part)
    return out


def _read_csv(path: Path) -> pd.DataFrame | None:
    try:
        return pd.read_csv(path) if path.is_file() else None
    except (OSError, ValueError, pd.errors.ParserError):
        return None


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def load_expert_m(tables: Path | str) -> pd.DataFrame | None:
    """``<tables>/expert_m.csv``: per-expert M per variant, concurrency, layer and expert."""
    frame = _read_csv(Path(tables) / "expert_m.csv")
    return frame if frame is not None and not frame.empty else None


def load_inputs(results: Path | str) -> dict[str, Any]:
    """The keyword arguments of :func:`compute_findings` read from a results folder (``None``
    for whatever is absent or unreadable)."""
    results = Path(results)
    tables = results / "tables"
    return {
        "hardware": _read_json(results / "hardware.json"),
        "peaks": _read_json(results / "peaks.json"),
        "sweep": _read_csv(tables / "sweep.csv"),
        "kernel_power": _read_csv(tables / "kernel_power.csv"),
        "decode": _read_csv(tables / "decode.csv"),
        "expert_m": load_expert_m(tables),
    }
