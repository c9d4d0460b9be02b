"""The per-expert M figure (question 4, ``experts``): SGLang's expert recorder's per-expert
M at each concurrency against balanced routing, and the busiest expert over the balanced M
against what uniform routing gives by chance at the same token count (the noise question 4's
answers use: :func:`.expert_answers.uniform_noise`). Input: the expert table
(results/tables/expert_m.csv). Each variant in its colour of every decode chart.
"""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from ...core.charts import no_data_chart, strict_frame
from ...core.finding_records import text_of
from .decode_colors import variant_scale
from .expert_answers import uniform_noise

EXPERTS_TITLE = "Decode: per-expert M (tokens per expert per step) against balanced routing"
HIST_BINS = 24


def expert_frames(em: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(histogram, ratio): per variant and C, the count of (layer, expert) pairs in each M
    bin with the balanced M; per variant and C, the busiest expert's M over it (each layer's
    in ``per_layer``) and the most uniform routing gives by chance (``uniform_max``)."""
    df = em.copy()
    for c in ("concurrency", "layer", "m", "balanced_m"):
        df[c] = pd.to_numeric(df[c], errors="coerce") if c in df.columns else math.nan
    df["variant"] = df["variant"].map(text_of) if "variant" in df.columns else ""
    df = df[df["m"].notna() & df["concurrency"].notna()]
    hist, ratio = [], []
    for (variant, c), g in df.groupby(["variant", "concurrency"], sort=True):
        balanced = g["balanced_m"].dropna()
        balanced = float(balanced.iloc[0]) if len(balanced) else math.nan
        ends = [float(g["m"].min()), float(g["m"].max())]
        if balanced == balanced:
            ends.append(balanced)
        lo, hi = min(ends), max(ends)
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        step = (hi - lo) / HIST_BINS
        edges = [lo + step * i for i in range(HIST_BINS + 1)]
        counts = pd.cut(g["m"], bins=edges, include_lowest=True).value_counts(sort=False)
        for (lo, hi), n in zip(zip(edges[:-1], edges[1:], strict=True), counts, strict=True):
            hist.append({"variant": variant, "concurrency": int(c), "panel": f"C = {int(c)}",
                         "bin_lo": lo, "bin_hi": hi, "experts": int(n),
                         "balanced_m": balanced})  # fmt: skip
        if not balanced > 0:
            continue
        noise, source = uniform_noise(g, c)
        per_layer = g.groupby("layer", dropna=False)["m"].max() / balanced
        ratio.append({"variant": variant, "concurrency": int(c),
                      "max_m": float(g["m"].max()), "balanced_m": balanced,
                      "max_over_balanced": float(g["m"].max()) / balanced,
                      "per_layer": ", ".join(f"{x:.2f}×" for x in per_layer),
                      "uniform_max": 1 + noise, "noise_from": source})  # fmt: skip
    return pd.DataFrame(hist), pd.DataFrame(ratio)


def experts_chart(expert_m: pd.DataFrame | None) -> alt.TopLevelMixin:
    """Histogram of per-expert M at each concurrency (all layers; red rule: the balanced
    C × top_k / experts), and the busiest expert's M over the balanced M per layer and C."""
    em = expert_m
    if em is None or em.empty or "m" not in em.columns:
        return no_data_chart(EXPERTS_TITLE, "no expert-distribution record (SGLang's recorder "
                                             "did not run here)")  # fmt: skip
    hist, ratio = expert_frames(em)
    if hist.empty:
        return no_data_chart(EXPERTS_TITLE, "no expert-distribution record")
    variants = sorted(set(hist["variant"]))
    cs = sorted(set(hist["concurrency"]))
    panels = [f"C = {c}" for c in cs]
    hist = strict_frame(hist, list(hist.columns))
    ratio = strict_frame(ratio, list(ratio.columns))
    scale = variant_scale(variants)
    color = alt.Color(
        "variant:N", scale=scale, legend=alt.Legend(orient="bottom", title="server variant")
    )
    base = alt.Chart(hist)
    bars = base.mark_bar(opacity=0.85).encode(
        x=alt.X("bin_lo:Q", title="per-expert M (tokens per step)", bin="binned",
                scale=alt.Scale(zero=False)),  # fmt: skip
        x2="bin_hi:Q",
        y=alt.Y("experts:Q", title="experts × layers"),
        color=color,
        tooltip=[alt.Tooltip("variant:N"), alt.Tooltip("concurrency:Q", format="d"),
                 alt.Tooltip("bin_lo:Q", title="M from", format=".3g"),
                 alt.Tooltip("bin_hi:Q", title="M to", format=".3g"),
                 alt.Tooltip("experts:Q", title="experts × layers"),
                 alt.Tooltip("balanced_m:Q", title="balanced M", format=".3g")],
    )  # fmt: skip
    rule = base.mark_rule(color="#b22222", strokeDash=[5, 3], strokeWidth=2).encode(
        x="max(balanced_m):Q"
    )
    if len(variants) > 1:  # a row per variant, a column per C
        facet = {"column": alt.Column("panel:N", sort=panels, title=None),
                 "row": alt.Row("variant:N", title=None)}  # fmt: skip
        width = max(100, min(200, 1000 // max(len(cs), 1) - 40))
    else:  # one variant: the C panels wrap, three a row
        facet = {"facet": alt.Facet("panel:N", sort=panels, title=None), "columns": 3}
        width = 260
    histograms = (
        alt.layer(bars, rule, data=hist)
        .properties(width=width, height=130)
        .facet(**facet)
        .resolve_scale(x="independent", y="independent")
    )
    x = alt.X("concurrency:Q", title="concurrency C",
              scale=alt.Scale(type="log", base=2, nice=False, padding=12),
              axis=alt.Axis(values=cs, format="d"))  # fmt: skip
    tooltip = [alt.Tooltip("variant:N"), alt.Tooltip("concurrency:Q", format="d"),
               alt.Tooltip("max_m:Q", title="busiest M", format=".3g"),
               alt.Tooltip("balanced_m:Q", title="balanced M", format=".3g"),
               alt.Tooltip("max_over_balanced:Q", title="busiest ÷ balanced", format=".2f"),
               alt.Tooltip("per_layer:N", title="per layer"),
               alt.Tooltip("uniform_max:Q", title="uniform routing gives up to", format=".2f"),
               alt.Tooltip("noise_from:N", title="from")]  # fmt: skip
    lines = alt.Chart(ratio).encode(
        x=x,
        y=alt.Y("max_over_balanced:Q", title="busiest expert's M ÷ balanced M",
                scale=alt.Scale(type="log", nice=False, padding=8),
                axis=alt.Axis(tickCount=6)),
        color=color, tooltip=tooltip,
    )  # fmt: skip
    uniform = (
        alt.Chart(ratio)
        .mark_line(color="#888", strokeDash=[4, 3], strokeWidth=1.4)
        .encode(x=x, y="uniform_max:Q", detail="variant:N", tooltip=tooltip)
    )
    one = alt.Chart(pd.DataFrame({"one": [1.0]})).mark_rule(color="#b22222", strokeDash=[5, 3])
    ratio_chart = alt.layer(
        uniform,
        lines.mark_line(strokeWidth=1.8).encode(detail="variant:N"),
        lines.mark_point(filled=True, size=50, opacity=1),
        one.encode(y="one:Q"),
    ).properties(width=420, height=200,
                 title="busiest expert over balanced (grey dashed: the most uniform routing "
                       "gives by chance)")  # fmt: skip
    subtitle = [
        f"{len(variants)} variant{'s' if len(variants) != 1 else ''} "
        f"({', '.join(variants)}), C = {', '.join(map(str, cs))}; M = C × top_k × the "
        "expert's share of its layer's routed tokens",
        "red dashed: balanced routing, C × top_k / experts; SGLang variants serve dummy "
        "(random) weights, so the routing is synthetic (uniform or the random router: Q4 "
        "says which)",
    ]
    return alt.vconcat(histograms, ratio_chart).properties(
        title=alt.TitleParams(EXPERTS_TITLE, subtitle=subtitle, anchor="start")
    )
