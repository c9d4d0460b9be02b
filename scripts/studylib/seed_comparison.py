"""The seed write-up's figures set beside this machine's."""

from __future__ import annotations

from typing import Any

import pandas as pd

from .core.finding_records import (
    FP4_DTYPES,
    Findings,
    Question,
    _dtype_name,
    _gpu,
    _has,
    _impl_label,
    _is_cpu,
    _m_list,
    _message,
    _numeric,
    _ok,
    _plain,
    _sm_arch,
    _span,
    describe_machine,
    fmt_m,
    fmt_pct,
    fmt_ratio,
    fmt_us,
    fmt_w,
    num_of,
    text_of,
)
from .stages.decode.decode_judgements import DUMMY_ENGINES, prep_decode
from .stages.kernel_power.kernel_power_answers import _prep_power, _watts_span, split_expert_loops
from .stages.sweep.sweep_answers import _best, _decode_m, _expert_rows, _mode
from .stages.sweep.sweep_ranking import _prep_sweep
from .stages.sweep.sweep_thresholds import DECODE_MAX_M
from .study_tables import StudyTables

#: The seed comparison's place among the report's questions, with its title.
SEED_QUESTIONS: dict[Question, str] = {"seed": "The seed's figures beside this machine"}

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


# ---------------------------------------------------------------------------------------------
# The seed's figures beside this machine's
# ---------------------------------------------------------------------------------------------


def seed_comparison(tables: StudyTables) -> Findings:
    hardware, peaks, sweep = tables.hardware, tables.peaks, tables.sweep
    kernel_power, decode, expert_m = tables.kernel_power, tables.decode, tables.expert_m
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
                    spread = _span(span.min(), span.max(), fmt_us)
                    # One value when the range rounds to a point: "is", not "spanning".
                    verb = "spanning" if "–" in spread else "is"
                    bits[-1] += (f", the fastest eager time over M {span.index.min():.0f}–"
                                 f"{span.index.max():.0f} {verb} {spread}")  # fmt: skip
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
                who = ", ".join(sorted({text_of(v) for v in top.get("variant", [])} - {""}))
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
        if _has(decode, "engine") and set(map(text_of, decode["engine"])) & set(DUMMY_ENGINES):
            routing = set(map(text_of, decode.get("routing", pd.Series(dtype=object))))
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
        limit = num_of(gpu.get("power_limit_w"))
        numbers.update(arch=arch, power_limit_w=limit if _ok(limit) else None,
                       gpu=text_of(gpu.get("name")))  # fmt: skip
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
        d = prep_decode(decode)
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
        single, _ = split_expert_loops(kp)  # question 3's split: MoE layers are not GEMMs here
        loops = single[(single["status"] == "ok") & single["avg_w"].notna()
                       & (single["mode"] == "eager") & (single["M"] <= DECODE_MAX_M)
                       & (single["power_source"] != "none")]  # fmt: skip
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
