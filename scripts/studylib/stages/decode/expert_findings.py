"""Question 4's findings (the sentences of ``compute_findings``, kept until every question
answers through ``study_answers.STAGE_ANSWERS``; the report reads :mod:`.expert_answers`)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ...core.finding_records import (
    Findings,
    _has,
    _numeric,
    _ok,
    _rspan,
    _share,
    fmt_m,
    fmt_ratio,
    num_of,
    text_of,
)
from .decode_judgements import DUMMY_ENGINES
from .expert_m import rank_loads

#: An expert with M above this multiple of the balanced M counts as hot.
HOT_FACTOR = 2.0


# ---------------------------------------------------------------------------------------------
# Question 4: per-expert M during decode
# ---------------------------------------------------------------------------------------------


def q4_experts(expert_m: pd.DataFrame | None, decode: pd.DataFrame | None = None) -> Findings:
    out = Findings()
    if not _has(expert_m, "m"):
        why = "no SGLang expert-distribution record"
        engines = set()
        if _has(decode, "engine"):
            engines = {text_of(e) for e in decode["engine"]}
        if engines and "sglang" not in engines:
            why += (f": decode ran through {', '.join(sorted(engines))}, which has no expert "
                    "recorder (SGLang only)")  # fmt: skip
        else:
            why += ": no rows in tables/expert_m.csv (SGLang decode not run here, "
            why += "or its recorder not enabled)"
        # Expected where the engine that ran has no recorder; else the recorder was missed.
        out.miss(4, why + "; per-expert M not compared with the balanced assumption",
                 expected=bool(engines) and "sglang" not in engines)  # fmt: skip
        return out
    df = _numeric(expert_m, "m", "balanced_m", "concurrency", "tokens")
    if "variant" not in df.columns:
        df["variant"] = ""
    df["variant"] = df["variant"].map(text_of)
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
        balanced = num_of(g["balanced_m"].dropna().iloc[0]) if g["balanced_m"].notna().any() \
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
    d["variant"] = d["variant"].map(text_of)
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
    engines = {text_of(v): text_of(e) for v, e in zip(decode["variant"], decode["engine"],
                                                  strict=True)}  # fmt: skip
    routing = {}
    if "routing" in decode.columns:
        routing = {text_of(v): text_of(r) for v, r in zip(decode["variant"], decode["routing"],
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
