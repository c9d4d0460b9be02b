"""The charts behind questions 1 and 2 on the report's first screen (registered in
figure_list.py): the backends on one axis per dtype, and the fastest time over the roofline
floor in each timing mode. Both draw :func:`sweep_ranking.bests` (the one ranking's fastest);
the verdicts are the answers'."""

from __future__ import annotations

import altair as alt
import pandas as pd

from ...core.charts import M_LABEL_EXPR, backend_scale, no_data_chart, strict_frame
from .sweep_ranking import GRAPHED_MODES, bests, dtype_name, dtype_rank, pick_expert_shape
from .sweep_thresholds import DECODE_MAX_M, NEAR_FLOOR

#: The report's content width at a 1400 px window: a first-screen chart fits in it.
PAGE_WIDTH = 1240
#: Each timing mode's dash (backends chart) and colour (bound chart).
MODE_DASH = {"cold": [1, 0], "graph": [6, 3], "eager": [2, 2]}
MODE_COLORS = {"eager": "#d62728", "graph": "#8c8c8c", "cold": "#1f5fa8"}
M_AXIS = {"title": "M (tokens)", "scale": alt.Scale(type="log", base=2, nice=False)}


def _x() -> alt.X:
    return alt.X("M:Q", axis=alt.Axis(labelExpr=M_LABEL_EXPR, labelOverlap=True), **M_AXIS)


def _facet_width(dtypes: int, legend: int = 170) -> int:
    return max(260, min(560, (PAGE_WIDTH - legend) // max(dtypes, 1) - 60))


def _expert(sweep: pd.DataFrame) -> tuple[str | None, str]:
    shape = pick_expert_shape(sweep)
    if shape is None:
        return None, ""
    rows = sweep[sweep["shape"].astype(str) == shape]
    n = pd.to_numeric(rows.get("N"), errors="coerce").dropna()
    k = pd.to_numeric(rows.get("K"), errors="coerce").dropna()
    geometry = f" (N = {n.iloc[0]:.0f}, K = {k.iloc[0]:.0f})" if len(n) and len(k) else ""
    return shape, shape + geometry


def _modes(sweep: pd.DataFrame) -> tuple[str, ...]:
    """The graphed mode the answers rank (cold, else graph) and eager, those with times."""
    have = {m for m in ("cold", "graph", "eager")
            if pd.to_numeric(sweep.get(f"{m}_us"), errors="coerce").notna().any()}  # fmt: skip
    graphed = next((m for m in GRAPHED_MODES if m in have), None)
    return tuple(m for m in (graphed, "eager") if m and m in have)


def backends_chart(sweep: pd.DataFrame) -> alt.TopLevelMixin:
    """Question 1 at a glance: the best implementation of each backend against M on the
    expert shape, one panel per dtype; colour = backend, dash = timing mode (cold: a server
    with CUDA graphs, eager: one without)."""
    title = "The backends on one axis: each backend's best implementation against M"
    if sweep is None or sweep.empty or "status" not in sweep.columns:
        return no_data_chart(title, "no sweep table")
    shape, geometry = _expert(sweep)
    modes = _modes(sweep)
    data = bests(sweep, shape, modes)
    if data.empty:
        return no_data_chart(title, f"no point ran (status ok) on the expert shape {shape}")
    data["dtype_name"] = data["dtype"].map(dtype_name)
    dtypes = sorted(set(data["dtype"]), key=dtype_rank)
    data = strict_frame(data, ["dtype_name", "backend", "mode", "M", "us", "who"])
    backends = sorted(set(data["backend"]))
    base = alt.Chart().encode(
        x=_x(),
        y=alt.Y("us:Q", title="time per call (µs)", scale=alt.Scale(type="log")),
        color=alt.Color("backend:N", scale=backend_scale(backends),
                        legend=alt.Legend(title="backend", orient="right")),
        detail="mode:N",
    )  # fmt: skip
    # The lines carry the dash (their legend draws it); the points, the tooltips.
    lines = base.mark_line(strokeWidth=1.6).encode(
        strokeDash=alt.StrokeDash("mode:N", sort=list(modes), scale=alt.Scale(
            domain=list(modes), range=[MODE_DASH[m] for m in modes]),
            legend=alt.Legend(title="timing mode", orient="right", symbolType="stroke",
                              symbolStrokeWidth=2, symbolStrokeColor="#444")),
    )  # fmt: skip
    points = base.mark_point(size=18, filled=True, opacity=1).encode(
        tooltip=[alt.Tooltip("dtype_name:N", title="dtype"), "backend:N", "mode:N",
                 alt.Tooltip("M:Q", format="d"), alt.Tooltip("us:Q", format=".4g", title="µs"),
                 alt.Tooltip("who:N", title="lowest time: implementation")],
    )  # fmt: skip
    chart = alt.layer(lines, points, data=data).properties(
        width=_facet_width(len(dtypes)), height=230
    )
    order = [dtype_name(d) for d in dtypes]
    return chart.facet(
        column=alt.Column("dtype_name:N", sort=order, title=None,
                          header=alt.Header(labelFontSize=13, labelFontWeight="bold")),
    ).properties(title=alt.TitleParams(title, anchor="start", subtitle=[
        f"{geometry}; per backend the lowest time of its implementations at each M",
        f"{', '.join(modes)}: {'; '.join(_MODE_WORDS[m] for m in modes)}",
    ]))  # fmt: skip


_MODE_WORDS = {
    "cold": "cold = a server with CUDA graphs, weights from HBM",
    "graph": "graph = CUDA-graph replay (weights may sit in L2)",
    "eager": "eager = one Python call each, launch cost included",
}


def bound_chart(sweep: pd.DataFrame) -> alt.TopLevelMixin:
    """Question 2 at a glance: the fastest time over the roofline floor against M on the
    expert shape, in each timing mode, one panel per dtype: near 1 the floor's resource
    bounds it, far above it something else (launch cost: eager), below 1 the data sat in
    L2 (outside the model)."""
    title = "Time over the roofline floor: the fastest call in each timing mode"
    if sweep is None or sweep.empty or "status" not in sweep.columns:
        return no_data_chart(title, "no sweep table")
    shape, geometry = _expert(sweep)
    data = bests(sweep, shape, ("cold", "graph", "eager"), per_backend=False)
    data = data[pd.to_numeric(data["floor_us"], errors="coerce") > 0].copy()
    if data.empty:
        return no_data_chart(title, f"no timed point with a roofline floor on {shape}")
    data["over_floor"] = data["us"] / data["floor_us"]
    # The floor (1) and the threshold always in view, the floor line clear of the axis.
    domain = [
        min(0.8, 0.9 * data["over_floor"].min()),
        max(1.2 * NEAR_FLOOR, 1.2 * data["over_floor"].max()),
    ]
    data["dtype_name"] = data["dtype"].map(dtype_name)
    dtypes = sorted(set(data["dtype"]), key=dtype_rank)
    modes = [m for m in ("eager", "graph", "cold") if m in set(data["mode"])]
    data = strict_frame(data, ["dtype_name", "mode", "M", "us", "floor_us", "over_floor",
                               "who", "floor_basis"])  # fmt: skip
    lines = (
        alt.Chart()
        .mark_line(point=alt.OverlayMarkDef(size=18, filled=True), strokeWidth=1.6)
        .encode(
            x=_x(),
            y=alt.Y("over_floor:Q", title="time ÷ roofline floor",
                    scale=alt.Scale(type="log", nice=False, domain=domain)),
            color=alt.Color("mode:N", sort=modes, scale=alt.Scale(
                domain=modes, range=[MODE_COLORS[m] for m in modes]),
                legend=alt.Legend(title="timing mode", orient="right")),
            tooltip=[alt.Tooltip("dtype_name:N", title="dtype"), "mode:N",
                     alt.Tooltip("M:Q", format="d"), alt.Tooltip("us:Q", format=".4g",
                     title="µs"), alt.Tooltip("floor_us:Q", format=".3g", title="floor µs"),
                     alt.Tooltip("over_floor:Q", format=".2f", title="÷ floor"),
                     alt.Tooltip("floor_basis:N", title="floor"),
                     alt.Tooltip("who:N", title="lowest time: implementation")],
        )
    )  # fmt: skip
    floor = alt.Chart().mark_rule(color="#555").encode(y=alt.datum(1))
    near = alt.Chart().mark_rule(color="#555", strokeDash=[5, 3]).encode(y=alt.datum(NEAR_FLOOR))
    decode = (
        alt.Chart().mark_rule(color="#999", strokeDash=[1, 3]).encode(x=alt.datum(DECODE_MAX_M))
    )
    order = [dtype_name(d) for d in dtypes]
    return (
        alt.layer(lines, floor, near, decode, data=data)
        .properties(width=_facet_width(len(dtypes), 120), height=230)
        .facet(column=alt.Column("dtype_name:N", sort=order, title=None,
                                 header=alt.Header(labelFontSize=13, labelFontWeight="bold")))
        .properties(title=alt.TitleParams(title, anchor="start", subtitle=[
            f"{geometry}; solid line: the floor (1×), below it the data sat in L2 (outside "
            "the model)",
            f"dashed: {NEAR_FLOOR:g}× the floor (bound by its resource below); dotted: "
            f"M = {DECODE_MAX_M}, the largest decode size",
        ]))
    )  # fmt: skip
