"""Question 3 from the kernel-power windows: power, clocks and throttling of kernel loops."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ...core.finding_records import (
    Findings,
    Question,
    _dtype_name,
    _gpu,
    _has,
    _impl_label,
    _is_cpu,
    _numeric,
    _ok,
    _plain,
    _span,
    num_of,
    text_of,
)
from ..sweep.sweep_thresholds import DECODE_MAX_M, PREFILL_MIN_M
from .window_classes import POWER_CAP_REASONS, classify_windows, limit_reasons

#: The question the kernel-power loops answer (the report's numbering), with its title.
KERNEL_POWER_QUESTIONS: dict[Question, str] = {
    3: "What do the GPUs draw and how fast do they clock during kernel loops: under-use or "
    "throttling?",
}

# ---------------------------------------------------------------------------------------------
# Question 3: power, clocks and tensor use of kernel loops
# ---------------------------------------------------------------------------------------------

POWER_NUMERIC = ("M", "G", "avg_w", "pct_limit", "power_limit_w", "sm_clock_mhz", "sm_util",
                 "tensor_util", "dram_util", "energy_gap_pct")  # fmt: skip


def _prep_power(kp: pd.DataFrame) -> pd.DataFrame:
    df = _numeric(kp, *POWER_NUMERIC)
    for c in ("backend", "impl", "op", "dtype", "shape", "mode", "label", "status",
              "power_source", "throttle_reasons"):  # fmt: skip
        if c not in df.columns:
            df[c] = ""
        df[c] = df[c].map(text_of)
    for c in POWER_NUMERIC:
        if c not in df.columns:
            df[c] = float("nan")
    df.loc[df["status"] == "", "status"] = "ok"
    return df


def split_expert_loops(loops: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Single-GEMM windows, and those over G experts (grouped GEMMs and whole MoE layers: M
    is another axis there, and every call reads more weights than the L2 holds), apart."""
    return loops[loops["G"].isna()], loops[loops["G"].notna()]


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
        out.miss(3, f"no kernel-power table (results/tables/kernel_power.csv): {why}",
                 expected=_is_cpu(hardware))  # fmt: skip
        return out
    df = _prep_power(kernel_power)
    sources = sorted(set(df["power_source"]) - {"", "none"})
    measured = df[(df["status"] == "ok") & df["avg_w"].notna()]
    if not sources or measured.empty:
        why = "no GPU" if _is_cpu(hardware) else "no NVML or RAPL reading"
        out.miss(3, f"no power was measured in the kernel loops ({why}: power_source none); "
                    "watts, clocks and throttling are not reported",
                 expected=True)  # fmt: skip
        return out
    source = ", ".join(sources)
    rapl = sources == ["rapl"]
    what = "CPU package power from RAPL" if rapl else "GPU power from NVML"
    idle = measured[(measured["mode"] == "idle") | (measured["label"] == "idle")]
    loops = measured.drop(idle.index)
    single, experts = split_expert_loops(loops)
    decode = single[single["M"] <= DECODE_MAX_M]
    prefill = single[single["M"] >= PREFILL_MIN_M]
    d_eager, d_graph = decode[decode["mode"] == "eager"], decode[decode["mode"] == "graph"]
    d_cold = decode[decode["mode"] == "cold"]
    if not idle.empty:
        text, nums = _watts_span(idle)
        out.add(3, f"Idle, the {'CPU package' if rapl else 'GPU'} draws {text}.", source=source, **{
            f"idle_{k}": v for k, v in nums.items()})  # fmt: skip
    else:
        out.miss(3, "no idle baseline window in the kernel-power table")
    parts = []
    numbers: dict[str, Any] = {"source": source}
    # The first decode-sized clause present names the size; the ones after it say "their".
    decode_clauses, lead = [], f"decode-sized (M ≤ {DECODE_MAX_M})"
    for loops_of, rows, key in (
        ("eager loops", d_eager, "decode_eager"),
        ("graph-replayed loops (weights L2-resident where they fit)", d_graph, "decode_graph"),
        ("cold loops (weights streamed from HBM on every call, as in decode)", d_cold,
         "decode_cold"),
    ):  # fmt: skip
        if not rows.empty:
            decode_clauses.append((f"{lead} {loops_of}", rows, key))
            lead = "their"
    for label, rows, key in (
        *decode_clauses,
        (f"prefill-sized (M ≥ {PREFILL_MIN_M}) loops", prefill, "prefill"),
        (f"loops over {'/'.join(f'{g:.0f}' for g in sorted(experts['G'].unique()))} experts "
         "(grouped GEMMs and whole MoE layers)", experts, "experts"),
    ):  # fmt: skip
        if rows.empty:
            continue
        text, nums = _watts_span(rows)
        bit = f"{label} draw {text}"
        busy = []
        for column, pipe in (("tensor_util", "tensor pipes"), ("dram_util", "DRAM")):
            if rows[column].notna().any():
                u = rows[column]
                busy.append(f"{pipe} {_span(u.min(), u.max(), _plain, ' %')}")
                key_name = column.split("_")[0]
                nums.update({f"{key_name}_min": float(u.min()), f"{key_name}_max": float(u.max())})
        if busy:
            bit += f" with {' and '.join(busy)} busy"
        parts.append(bit)
        numbers.update({f"{key}_{k}": v for k, v in nums.items()})
    if parts:
        out.add(3, f"In the kernel loops ({what}), " + "; ".join(parts) + ".", **numbers)
    if decode.empty:
        out.miss(3, f"no decode-sized (M ≤ {DECODE_MAX_M}) kernel-power window was measured")
    _q3_throttle(out, loops, decode, experts, hardware)
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


#: What "power-capped" means in question 3's sentences (the windows' classification rule).
CAPPED = f"a clocks-event reason {' or '.join(POWER_CAP_REASONS)}"


def _q3_throttle(out: Findings, loops: pd.DataFrame, decode: pd.DataFrame,
                 experts: pd.DataFrame, hardware: dict | None) -> None:  # fmt: skip
    max_clock = num_of(_gpu(hardware).get("max_sm_clock_mhz"))
    classes = classify_windows(loops)["class"]
    capped, thermal = loops[classes == "power-capped"], loops[classes == "thermally throttled"]
    if not capped.empty:
        # The dtype is named: a BF16 and an FP8 loop of one op and size are two windows.
        names = sorted({f"{_impl_label(r)} {_dtype_name(r['dtype'])} M = {r['M']:.0f} "
                        f"{r['mode']}" for _, r in capped.iterrows()})  # fmt: skip
        clocks = capped["sm_clock_mhz"]
        text = (f"{len(capped)} of {len(loops)} {_window_unit(loops)} were power-capped "
                f"({CAPPED}): {', '.join(names)}; their SM clock fell "
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
            f"None of the {len(loops)} {_window_unit(loops)} was power-capped ({CAPPED}).",
            capped=0,
            windows=len(loops),
        )
    if not thermal.empty:
        out.add(3, f"{len(thermal)} loop windows report thermal slowdown.", thermal=len(thermal))
    if decode.empty:
        return
    throttled = decode[decode["throttle_reasons"].map(lambda r: bool(limit_reasons(r)))]
    clocks = decode["sm_clock_mhz"].dropna()
    scope = f"decode-sized (M ≤ {DECODE_MAX_M}) single-GEMM"
    if throttled.empty:
        text = (f"Low power in the {scope} loops is under-use, not throttling: none of their "
                f"{len(decode)} windows reports a power or thermal limit")  # fmt: skip
        if len(clocks):
            text += f", and the SM clock holds {_span(clocks.min(), clocks.max(), _plain, ' MHz')}"
            if _ok(max_clock):
                text += f" (maximum {max_clock:.0f} MHz)"
        out.add(3, text + ".", decode_throttled=0, decode_windows=len(decode),
                decode_clock_min=float(clocks.min()) if len(clocks) else None)  # fmt: skip
    else:
        out.add(3, f"{len(throttled)} of {len(decode)} {scope} windows report a power or "
                   "thermal limit: low power there is partly throttling.",
                decode_throttled=len(throttled), decode_windows=len(decode))  # fmt: skip
    # The expert loops at the same token counts are another regime: every call streams more
    # weights than the L2 holds, and the GPU may sit at its power cap.
    small = experts[experts["M"] <= DECODE_MAX_M]
    small_capped = small[classes.reindex(small.index) == "power-capped"]
    if not small_capped.empty:
        out.add(3, f"The loops over experts at M ≤ {DECODE_MAX_M} (grouped GEMMs and whole MoE "
                   f"layers) are not low-power: {len(small_capped)} of {len(small)} ran at the "
                   f"power cap, drawing {_watts_span(small_capped)[0]}.",
                expert_small_capped=len(small_capped), expert_small_windows=len(small))  # fmt: skip
