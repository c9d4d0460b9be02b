"""The step-model figure (``step_model``): per one-GPU decode variant and concurrency, the
predicted step (balanced and recorded routing) beside the measured one, stacked by component,
and J/token predicted against measured. Input: results/tables/step_model.csv
(:mod:`studylib.stages.step_model.step_model_build`)."""

from __future__ import annotations

import altair as alt
import pandas as pd

from ...core.charts import no_data_chart, strict_frame
from ..decode.decode_colors import variant_scale
from .step_model_build import MODEL_COMPONENTS, PROFILE_STEP_TOLERANCE, measured_parts

STEP_TITLE = "Decode: where a step's time goes, predicted from the kernel tables and measured"
#: Bars per C, left to right.
BARS = ("predicted, balanced", "predicted, recorded", "measured")
NOT_PROFILED = "TPOT (no usable profile)"
COMPONENT_COLORS = {"moe": "#4c78a8", "attention": "#f58518", "dense": "#54a24b",
                    "other": "#b0b0b0", NOT_PROFILED: "#e0e0e0"}  # fmt: skip


def step_frames(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(bars, energy): one row per (variant, C, bar, component) in ms, with that step's TPOT;
    one per (variant, C, source) of J/token."""
    bars, energy, tpots = [], [], {}
    for (variant, c), g in table.groupby(["variant", "concurrency"], sort=True):
        for routing in ("balanced", "recorded"):
            r = g[g["routing"] == routing]
            for _, row in r.iterrows():
                bars.append({"variant": variant, "concurrency": int(c),
                             "bar": f"predicted, {routing}", "component": row["component"],
                             "ms": row["predicted_us"] / 1e3})  # fmt: skip
            if len(r):
                energy.append({"variant": variant, "concurrency": int(c),
                               "source": f"predicted, {routing}",
                               "j_per_token": r["predicted_j_per_token"].iloc[0]})  # fmt: skip
        first = g[g["routing"] == g["routing"].iloc[0]]
        tpot_ms = first["tpot_us"].iloc[0] / 1e3
        # The profiler's parts under the step model's rule: none exceeds the step (a profile
        # longer than TPOT keeps its kernels, its idle is what TPOT leaves).
        parts = measured_parts(first)
        for component, us in (parts or {NOT_PROFILED: tpot_ms * 1e3}).items():
            bars.append({"variant": variant, "concurrency": int(c), "bar": "measured",
                         "component": component, "ms": us / 1e3})  # fmt: skip
        energy.append({"variant": variant, "concurrency": int(c), "source": "measured",
                       "j_per_token": first["j_per_token"].iloc[0]})  # fmt: skip
        tpots[(variant, int(c))] = tpot_ms
    bars = pd.DataFrame(bars)
    if not bars.empty:
        bars["tpot_ms"] = [tpots[k] for k in zip(bars["variant"], bars["concurrency"], strict=True)]
        bars = bars[pd.to_numeric(bars["ms"], errors="coerce").notna()]
        order = {name: i for i, name in enumerate((*MODEL_COMPONENTS, NOT_PROFILED))}
        bars["order"] = bars["component"].map(order)
    return bars, pd.DataFrame(energy)


def step_chart(step_model: pd.DataFrame | None) -> alt.TopLevelMixin:
    """The step-model figure of the step-model table."""
    table = step_model
    if table is None or table.empty or "predicted_us" not in table.columns:
        return no_data_chart(STEP_TITLE, "no one-GPU SGLang decode variant with the kernels "
                                         "the model needs in the sweep")  # fmt: skip
    bars, energy = step_frames(table)
    if bars.empty:
        return no_data_chart(STEP_TITLE, "the sweep lacks kernels of every step (see the "
                                         "step-model table's missing column)")  # fmt: skip
    bars = strict_frame(bars, list(bars.columns))
    components = [c for c in (*MODEL_COMPONENTS, NOT_PROFILED) if c in set(bars["component"])]
    color = alt.Color("component:N", title="component", sort=components,
                      scale=alt.Scale(domain=components,
                                      range=[COMPONENT_COLORS[c] for c in components]))  # fmt: skip
    bar = alt.Chart().mark_bar().encode(
        x=alt.X("bar:N", sort=list(BARS), title=None, axis=alt.Axis(labelAngle=-40)),
        y=alt.Y("sum(ms):Q", title="step time (ms)"),
        color=color,
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("variant:N"), alt.Tooltip("concurrency:Q", format="d"),
                 alt.Tooltip("bar:N"), alt.Tooltip("component:N"),
                 alt.Tooltip("ms:Q", format=".3f"), alt.Tooltip("tpot_ms:Q", title="TPOT ms",
                                                                format=".3f")],
    )  # fmt: skip
    # TPOT, the step the server measured, across each cell: the bars stand against it.
    tpot = alt.Chart().mark_rule(color="black", strokeDash=[4, 2], strokeWidth=1.5).encode(
        y="max(tpot_ms):Q", tooltip=[alt.Tooltip("max(tpot_ms):Q", title="TPOT ms",
                                                 format=".3f")])  # fmt: skip
    stacked = (
        alt.layer(bar, tpot, data=bars)
        .properties(width=110, height=170)
        .facet(column=alt.Column("concurrency:O", title="concurrency C"),
               row=alt.Row("variant:N", title=None))
        .resolve_scale(y="independent")
    )  # fmt: skip
    charts = [stacked]
    energy = energy[pd.to_numeric(energy.get("j_per_token"), errors="coerce").notna()]
    if not energy.empty:
        energy = strict_frame(energy, list(energy.columns))
        charts.append(
            alt.Chart(energy)
            .mark_line(point=True)
            .encode(
                x=alt.X("concurrency:Q", title="concurrency C",
                        scale=alt.Scale(type="log", base=2),
                        axis=alt.Axis(values=sorted(set(energy["concurrency"])), format="d")),
                y=alt.Y("j_per_token:Q", title="J per token", scale=alt.Scale(type="log")),
                # A colour per variant; measured solid, predictions dashed (the legend
                # draws the dashes, not dots, so the two can be told apart).
                color=alt.Color("variant:N", title="variant",
                                scale=variant_scale(energy["variant"])),
                strokeDash=alt.StrokeDash("source:N", title=None,
                                          legend=alt.Legend(symbolType="stroke",
                                                            symbolStrokeWidth=2, symbolSize=400,
                                                            symbolFillColor="black")),
                tooltip=[alt.Tooltip("variant:N"), alt.Tooltip("source:N"),
                         alt.Tooltip("concurrency:Q", format="d"),
                         alt.Tooltip("j_per_token:Q", format=".4f")],
            )
            .properties(width=420, height=220, title="energy per token: predicted and measured")
        )  # fmt: skip
    subtitle = [
        "predicted: the sweep's HBM-cold kernel times (SGLang's Triton fused MoE and decode "
        "attention, the dense projections, lm_head)",
        "over the model's layers; other: with CUDA graphs off, the host's time beyond the "
        "kernels (their least eager times)",
        "measured: SGLang's profiler over steady steps at batch C (other: unmodelled kernels, "
        "communication, idle gaps;",
        f"where the profiled step ran more than {100 * PROFILE_STEP_TOLERANCE:.0f} % longer than "
        "TPOT, TPOT less the profiled kernels), or TPOT alone where no profile ran; black "
        "dashed: TPOT",
    ]
    # Components and sources are different legends.
    return (
        alt.vconcat(*charts)
        .resolve_scale(color="independent", strokeDash="independent")
        .properties(title=alt.TitleParams(STEP_TITLE, subtitle=subtitle, anchor="start"))
    )
