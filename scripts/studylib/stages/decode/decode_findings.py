"""Question 5's findings (the sentences of ``compute_findings``, kept until every question
answers through ``study_answers.STAGE_ANSWERS``; the report reads :mod:`.decode_answers`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from ...core.finding_records import (
    Findings,
    _has,
    _is_cpu,
    _message,
    _ok,
    _plain,
    _rspan,
    _span,
    fmt_pct,
    fmt_ratio,
    fmt_w,
    text_of,
)
from ...instruments.nvml import reason_names
from .decode_judgements import (
    BENIGN_REASONS,
    GRAPH_ENGINES,
    IN_FLIGHT_MIN,
    LOAD_CPU_PCT,
    UTIL_LABELS,
    by_concurrency,
    dummy_weights_note,
    graphs_flag,
    graphs_pairs,
    prep_decode,
    ratio_of,
    regime,
    tp_pairs,
    weights_name,
)


def _f1(x: float) -> str:
    return f"{x:.1f}"


def _c_list(cs: Iterable[float]) -> str:
    return ", ".join(str(int(c)) for c in sorted(cs))


def q5_decode(decode: pd.DataFrame | None, hardware: dict | None = None) -> Findings:
    out = Findings()
    if not _has(decode, "concurrency"):
        out.miss(5, "no decode table (results/tables/decode.csv): the decode stage has not run")
        return out
    df = prep_decode(decode)
    if not (df["power_source"].isin(["nvml", "rapl"]) & df["avg_w_per_gpu"].notna()).any():
        why = "no GPU" if _is_cpu(hardware) else "no NVML or RAPL reading"
        out.miss(5, f"no decode power ({why}: power_source none): J/token and watts not "
                    "reported, throughput only",
                 expected=True)  # fmt: skip
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
    engine = text_of(g["engine"].iloc[0])
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
    out.add(5, text + ".", variant=variant, engine=text_of(g["engine"].iloc[0]),
            weights=text_of(g["weights"].iloc[0]), cuda_graphs=graphs_flag(g["graphs"].iloc[0]),
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
        text = (f"{n} GPUs against one, {regime(weights, graphs_flag(graphs)) or engine} "
                f"({variant} / {one}, {n} GPUs ÷ 1): " + "; ".join(bits))  # fmt: skip
        out.add(5, text + ".", engine=engine, weights=weights, cuda_graphs=graphs_flag(graphs),
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
        a = by_concurrency(g[g["variant"] == a_var])
        for other in [w for w in weights if w != base]:
            b_var = sorted(set(g.loc[g["weights"] == other, "variant"]))[0]
            b = by_concurrency(g[g["variant"] == b_var])
            shared = sorted(set(a.index) & set(b.index))
            if not shared:
                continue
            tok = {int(c): ratio_of(b.loc[c, "output_tok_s"], a.loc[c, "output_tok_s"])
                   for c in shared}  # fmt: skip
            text = (f"{weights_name(other)} against {weights_name(base)} weights "
                    f"({regime('', graphs_flag(graphs)) or engine}; {b_var} / {a_var}): "
                    f"{_span(min(tok.values()), max(tok.values()), fmt_ratio)} the tok/s over "
                    f"C = {_c_list(shared)}")  # fmt: skip
            numbers: dict[str, Any] = {"base": a_var, "other": b_var, "tok_ratio": tok}
            for col, label, key in (("tpot_ms", "the TPOT", "tpot_ratio"),
                                    ("j_per_token", "the J/token", "j_ratio")):  # fmt: skip
                r = {int(c): ratio_of(b.loc[c, col], a.loc[c, col]) for c in shared}
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
