"""Figures of the sweep table across backends: the support matrix, achieved efficiency and
launch overhead (registered in figure_list.py)."""

from __future__ import annotations

import json
from typing import Any

import altair as alt
import pandas as pd

from ...core.charts import (
    M_LABEL_EXPR,
    backend_color,
    first_text,
    has_data,
    impl_scale,
    no_data_chart,
    series_label,
    shorten,
    status_scale,
    strict_frame,
)
from .sweep_figures import FADED, PICK_PARAM, TOOLTIP_EXTRA, _panels, _text, dtype_order

# ---------------------------------------------------------------------------------------------
# Support matrix
# ---------------------------------------------------------------------------------------------


def support_chart(support: pd.DataFrame) -> alt.TopLevelMixin:
    """Heat-map of backend · impl × op · dtype, coloured by status, reason in the tooltip."""
    support_df = support
    title = "Support matrix: which backend runs which op and dtype"
    if support_df.empty:
        return no_data_chart(title, "no support data (no sweep rows)")
    df = support_df.copy()
    for column in ("backend", "impl", "op", "dtype", "status", "reason"):
        if column not in df.columns:
            df[column] = ""
        df[column] = df[column].fillna("").astype(str)
    for column in ("points", "ok", "unsupported", "error", "mismatch"):
        if column not in df.columns:
            df[column] = 0
        df[column] = pd.to_numeric(df[column], errors="coerce").fillna(0).astype(int)
    df["row"] = df["backend"] + " · " + df["impl"]
    df["col"] = df["op"] + " · " + df["dtype"]
    df["reason_short"] = df["reason"].map(lambda r: shorten(r, 300) if r else "—")
    df["label"] = df["ok"].astype(str) + "/" + df["points"].astype(str)
    df = df[
        ["backend", "impl", "op", "dtype", "row", "col", "status", "reason_short", "label"]
        + ["points", "ok", "unsupported", "error", "mismatch"]
    ]
    rows = df[["backend", "impl", "row"]].drop_duplicates().sort_values(["backend", "impl"])["row"]
    cols = df[["op", "dtype", "col"]].drop_duplicates().sort_values(["op", "dtype"])["col"]
    # Colour each y label by its backend.
    label_expr = "".join(
        f"indexof(datum.value, {json.dumps(b + ' ·')}) == 0 ? {json.dumps(backend_color(b))} : "
        for b in sorted(set(df["backend"]))
    )
    label_color = alt.ExprRef(expr=label_expr + '"#333"')
    x = alt.X("col:N", sort=list(cols), title="op · dtype", axis=alt.Axis(labelAngle=-30))
    y = alt.Y(
        "row:N",
        sort=list(rows),
        title="backend · impl",
        axis=alt.Axis(labelColor=label_color, labelFontWeight="bold", labelLimit=300),
    )
    tooltip = [
        alt.Tooltip("backend:N"),
        alt.Tooltip("impl:N"),
        alt.Tooltip("op:N"),
        alt.Tooltip("dtype:N"),
        alt.Tooltip("status:N"),
        alt.Tooltip("points:Q"),
        alt.Tooltip("ok:Q"),
        alt.Tooltip("unsupported:Q"),
        alt.Tooltip("error:Q"),
        alt.Tooltip("mismatch:Q"),
        alt.Tooltip("reason_short:N", title="reason"),
    ]
    base = alt.Chart(df).encode(x=x, y=y)
    rect = base.mark_rect(stroke="white", strokeWidth=2).encode(
        color=alt.Color("status:N", scale=status_scale(), title="status"),
        tooltip=tooltip,
    )
    text = base.mark_text(fontSize=10, color="black").encode(text="label:N", tooltip=tooltip)
    # Columns narrow enough that a GPU grid's 16 op · dtype pairs fit a 1400-px page.
    return (rect + text).properties(
        width=max(160, min(90, 1040 // max(len(cols), 1)) * len(cols)),
        height=max(60, 28 * len(rows)),
        title=alt.TitleParams(title, subtitle=["cell text: ok points / points"], anchor="start"),
    )


# ---------------------------------------------------------------------------------------------
# Cross-backend figures: achieved throughput, efficiency, launch overhead
# ---------------------------------------------------------------------------------------------


def _timed_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Successful rows with their backend · impl (``pair``, the colour), a label per (backend,
    impl, op, dtype) series (one line) and per shape."""
    if df.empty or "status" not in df.columns:
        return pd.DataFrame()
    good = df[df["status"].astype(str).isin(["ok", "mismatch"])].copy()
    if good.empty:
        return good
    for column in ("backend", "impl", "op", "dtype", "shape"):
        good[column] = _text(good, column)
    good["pair"] = [series_label(b, i) for b, i in zip(good["backend"], good["impl"], strict=True)]
    good["series"] = good["pair"] + " · " + good["op"] + " · " + good["dtype"]
    # A panel per shape as in the latency figures (a fused-MoE layer per top_k and routing).
    panels = _panels(good)
    good["shape_label"] = panels["panel"]
    good["panel_order"] = panels["panel_order"]
    return good


def _panel_sort(data: pd.DataFrame) -> list[str]:
    meta = data.drop_duplicates("shape_label")
    ranks = dict(zip(meta["shape_label"], meta["panel_order"], strict=True))
    return sorted(ranks, key=ranks.get)


def _by_backend_lines(
    data: pd.DataFrame,
    y: str,
    y_title: str,
    log_y: bool,
    title: str,
    subtitle: list[str],
    pick: alt.Parameter | None = None,
) -> alt.TopLevelMixin:
    """One line per backend · impl · op · dtype against M, a panel per shape, coloured by
    backend · impl (:func:`charts.impl_scale`); a click on the legend fades the other pairs."""
    pairs = data[["backend", "impl"]].drop_duplicates().sort_values(["backend", "impl"])
    dtypes = sorted(set(data["dtype"]), key=dtype_order)
    pick = pick or alt.selection_point(name=PICK_PARAM, fields=["pair"], bind="legend")
    tooltip = [
        alt.Tooltip("series:N", title="backend · impl · op · dtype"),
        alt.Tooltip("shape_label:N", title="shape"),
        alt.Tooltip("M:Q", format="d"),
        alt.Tooltip(f"{y}:Q", title=y_title, format=".4g"),
    ]
    extra = []
    for column, label, fmt in TOOLTIP_EXTRA:
        if column not in (y, "throttle") and column in data.columns and has_data(data, column):
            tooltip.append(alt.Tooltip(f"{column}:Q", title=label, format=fmt))
            extra.append(column)
    order = _panel_sort(data)
    # Only the columns drawn, NaN as null: Vega-Lite specs must be strict JSON.
    data = strict_frame(data, ["pair", "series", "dtype", "shape_label", "M", y, *extra])
    encoding: dict[str, Any] = {}
    if len(dtypes) > 1:
        encoding["shape"] = alt.Shape(
            "dtype:N", scale=alt.Scale(domain=dtypes), legend=alt.Legend(orient="bottom")
        )
    chart = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=22, filled=True), strokeWidth=1.4)
        .encode(
            x=alt.X(
                "M:Q",
                scale=alt.Scale(type="log", base=2, nice=False),
                axis=alt.Axis(labelExpr=M_LABEL_EXPR, labelOverlap=True),
                title="M (tokens)",
            ),
            y=alt.Y(f"{y}:Q", scale=alt.Scale(type="log" if log_y else "linear"), title=y_title),
            color=alt.Color(
                "pair:N",
                scale=impl_scale(zip(pairs["backend"], pairs["impl"], strict=True)),
                legend=alt.Legend(
                    orient="bottom", title="backend · impl (click to highlight)", columns=4
                ),
            ),
            opacity=alt.condition(pick, alt.value(1.0), alt.value(FADED)),
            detail="series:N",
            tooltip=tooltip,
            **encoding,
        )
        .add_params(pick)
        .properties(width=260, height=200)
    )
    facet = alt.Facet("shape_label:N", title=None, sort=order)
    return chart.facet(facet=facet, columns=3).properties(
        title=alt.TitleParams(title, subtitle=subtitle, anchor="start")
    )


def efficiency_chart(sweep: pd.DataFrame) -> alt.TopLevelMixin:
    """Achieved TFLOP/s and roofline efficiency against M, every backend · impl, by shape."""
    df = sweep
    good = _timed_rows(df)
    title = "Achieved TFLOP/s and efficiency (roofline floor / kernel time)"
    if good.empty or not has_data(good, "tflops"):
        return no_data_chart(title, "no successful timed points")
    device = first_text(df, "device_name", "")
    tflops = _by_backend_lines(
        good, "tflops", "TFLOP/s", True, title, [f"{device}; kernel time = graph replay"]
    )
    if not has_data(good, "efficiency"):
        return tflops
    eff = _by_backend_lines(
        good,
        "efficiency",
        "efficiency",
        False,
        "Efficiency: floor_us / measured (1 = at this GPU's measured ceiling)",
        ["floor = max(FLOPs / peak of the dtype, bytes / copy bandwidth)"],
        # The second view's own selection: one legend, two selections would fight over it.
        pick=alt.selection_point(name=PICK_PARAM + "_eff", fields=["pair"], bind="legend"),
    )
    return alt.vconcat(tflops, eff).resolve_scale(color="independent")


def launch_overhead_chart(sweep: pd.DataFrame) -> alt.TopLevelMixin:
    """eager − graph (µs) against M: what each call costs beyond the kernel itself."""
    df = sweep
    good = _timed_rows(df)
    title = "Launch overhead: eager − graph-replayed time per call"
    if good.empty or not has_data(good, "launch_overhead_us"):
        return no_data_chart(title, "no point has both eager and graph times (graph needs CUDA)")
    good = good[pd.to_numeric(good["launch_overhead_us"], errors="coerce").notna()]
    return _by_backend_lines(
        good,
        "launch_overhead_us",
        "launch overhead (µs)",
        False,
        title,
        [f"{first_text(df, 'device_name', '')}: CPU-side cost of one Python call, kernel excluded"],
    )
