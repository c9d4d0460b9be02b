"""The sweep's figures: latency against M per backend, the support matrix, and the
cross-backend views of the sweep table (achieved throughput and efficiency, launch overhead)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import altair as alt
import pandas as pd

from ...core.charts import (
    M_LABEL_EXPR,
    SpecChart,
    backend_color,
    distinct_reasons,
    first_text,
    has_data,
    impl_scale,
    log_ticks_between,
    no_data_chart,
    shape_label,
    strict_frame,
    view_spec,
)
from ...core.formats import tooltips
from .sweep_aggregate import add_roofline
from .sweep_schema import SWEEP_SHOWN

#: Timing modes of a sweep row, in the order of the radio buttons: label -> (median, IQR).
TIMING_MODES: dict[str, tuple[str, str]] = {
    "eager": ("eager_us", "eager_iqr_us"),
    "graph": ("graph_us", "graph_iqr_us"),
    "cold": ("cold_us", "cold_iqr_us"),
}
#: The mode a latency figure opens on (and its PNG shows): the first of these with data.
DEFAULT_MODES: tuple[str, ...] = ("cold", "graph", "eager")
#: Names of the latency figure's parameters: the timing-mode radio and the legend selection.
MODE_PARAM = "timing"
PICK_PARAM = "pick"
#: Opacity of the series not picked in the legend.
FADED = 0.15
FLOOR_COLOR = "#8c8c8c"
FLOOR_DASH = [4, 3]
FLOOR_LABEL = "roofline floor"
#: Shape panels per row of a dtype's section.
PANEL_COLUMNS = 4
PANEL_WIDTH, PANEL_HEIGHT = 210, 150
#: Columns of the long frame that place panels; not chart data.
PANEL_META = ("panel_title", "panel_order")

#: Optional sweep columns shown in tooltips when present: (column, title, format).
TOOLTIP_EXTRA: list[tuple[str, str, str]] = tooltips(SWEEP_SHOWN, (
    "eager_iqr_us", "eager_samples", "graph_us", "cold_us", "floor_us", "launch_overhead_us",
    "tflops", "gbps", "efficiency", "rel_err", "cos_sim", "sm_clock_mhz", "throttle",
))  # fmt: skip
#: The latency figure's tooltip beyond the point and its time: (column, title, format).
LATENCY_TOOLTIP: list[tuple[str, str, str]] = [
    ("iqr_us", "interquartile range (µs)", ".3g"),
    ("eager_us", "eager (µs)", ".4g"),
    *tooltips(SWEEP_SHOWN, ("graph_us", "cold_us", "floor_us", "efficiency",
                          "tflops", "gbps", "rel_err", "cos_sim", "sm_clock_mhz", "throttle")),
]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Latency vs M
# ---------------------------------------------------------------------------------------------


#: Order of the dtype sections: widest first; others after them, by name.
DTYPE_ORDER: tuple[str, ...] = ("fp32", "bf16", "fp16", "fp8_e4m3", "nvfp4")


def dtype_order(dtype: str) -> tuple[int, str]:
    return (DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER), dtype)


def _text(df: pd.DataFrame, column: str) -> pd.Series:
    if column not in df.columns:
        return pd.Series("", index=df.index)
    return df[column].map(lambda v: "" if v is None or v != v else str(v).strip())


def _panels(good: pd.DataFrame) -> pd.DataFrame:
    """``panel`` (one line), ``panel_title`` (its lines) and ``panel_order`` of each row.

    A panel is one shape: the shape label (N×K, G) and, for a fused-MoE layer, whose M counts
    the layer's tokens rather than a GEMM's, its own panel per top_k and routing; a decode
    attention shape (M: the batch) is labelled by its heads and context. Dense shapes come
    first, then grouped ones, then fused layers, then attention, each in the order the sweep
    ran them.
    """
    out = pd.DataFrame(index=good.index)
    fused = _text(good, "op").str.contains("fused_moe")
    attention = [_attention_label(row) for row in good.to_dict("records")]
    # Plain floats (NaN when absent): a parquet's nullable Int64 holds pd.NA, whose truth
    # value raises.
    g = (pd.to_numeric(good["G"], errors="coerce").astype(float) if "G" in good.columns
         else pd.Series(float("nan"), index=good.index))  # fmt: skip
    top_k = pd.to_numeric(good.get("top_k", pd.Series(index=good.index)), errors="coerce")
    top_k = top_k.astype(float)
    routing = _text(good, "routing")
    heads = [
        a[0] if a else shape_label(s, n, k, gg)
        for s, n, k, gg, a in zip(good["shape"], good["N"], good["K"], g, attention, strict=True)
    ]
    tails = []
    for f, t, r, a in zip(fused, top_k, routing, attention, strict=True):
        tail = a[1] if a else ""
        if f:
            tail = "fused MoE layer" + (f", top_k {int(t)}" if t == t else "")
            tail += f", {r} routing" if r else ""
        tails.append(tail)
    out["panel"] = [h + (f" · {t}" if t else "") for h, t in zip(heads, tails, strict=True)]
    out["panel_title"] = [[h, t] if t else [h] for h, t in zip(heads, tails, strict=True)]
    shapes = list(dict.fromkeys(good["shape"]))
    kind = [3 if a else (2 if f else (1 if gg == gg else 0))
            for f, gg, a in zip(fused, g, attention, strict=True)]  # fmt: skip
    out["panel_order"] = [
        (k, shapes.index(s), gg if gg == gg else 0.0, r)
        for k, s, gg, r in zip(kind, good["shape"], pd.to_numeric(g), routing, strict=True)
    ]
    return out


def _attention_label(row: dict) -> tuple[str, str] | None:
    """A decode-attention row's panel head and tail (its geometry columns, from
    plan.expand_points), or None for a GEMM row."""
    values = [pd.to_numeric(row.get(c), errors="coerce") for c in
              ("heads", "kv_heads", "head_dim", "context")]  # fmt: skip
    if any(v is None or v != v for v in values):
        return None
    heads, kv_heads, head_dim, context = (int(v) for v in values)
    return (f"{row.get('shape')} · {heads} q / {kv_heads} KV heads × {head_dim}",
            f"decode attention, context {context}, M = batch")  # fmt: skip


def _good_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows that ran (ok or mismatch), with clean text, a positive M and their panel."""
    if df.empty or "status" not in df.columns:
        return pd.DataFrame()
    good = df[df["status"].astype(str).isin(["ok", "mismatch"])].copy()
    for column in ("backend", "impl", "op", "dtype", "shape"):
        good[column] = _text(good, column)
    for column in ("M", "N", "K"):
        good[column] = pd.to_numeric(good.get(column), errors="coerce")
    good = good[good["M"] > 0]
    if good.empty:
        return good
    return pd.concat([good, _panels(good)], axis=1)


def latency_long(df: pd.DataFrame) -> pd.DataFrame:
    """Successful sweep rows in long form: one row per (point, timing mode) with a time.

    ``latency_us`` and ``iqr_us`` are the mode's median and interquartile range; ``iqr_lo``
    and ``iqr_hi`` the range as bar ends centred on the median.
    """
    good = _good_rows(df)
    modes = [m for m, (c, _) in TIMING_MODES.items() if has_data(good, c)]
    if good.empty or not modes:
        return pd.DataFrame()
    good["series"] = good["impl"] + " · " + good["op"]
    keep = ["backend", "impl", "op", "dtype", "series", "shape", "panel", "panel_title"]
    keep += ["panel_order", "M", "N", "K", "G"]
    keep += ["top_k", "routing", "status"] + [c for c, _, _ in LATENCY_TOOLTIP]
    keep = list(dict.fromkeys(c for c in keep if c in good.columns))
    frames = []
    for mode in modes:
        column, iqr = TIMING_MODES[mode]
        part = good[keep].copy()
        part["mode"] = mode
        part["latency_us"] = pd.to_numeric(good[column], errors="coerce")
        part["iqr_us"] = pd.to_numeric(good[iqr], errors="coerce") if iqr in good else math.nan
        part = part[part["latency_us"] > 0]
        half = part["iqr_us"] / 2
        part["iqr_lo"] = (part["latency_us"] - half).clip(lower=part["latency_us"] * 0.05)
        part["iqr_hi"] = part["latency_us"] + half
        frames.append(part)
    return pd.concat(frames, ignore_index=True).reset_index(drop=True)


def latency_floor(df: pd.DataFrame) -> pd.DataFrame:
    """The roofline floor once per (panel, dtype, M) where some point ran: the lowest
    ``floor_us`` of the panel's ops (ops of one shape and dtype differ only by scale bytes)."""
    columns = ["panel", "shape", "dtype", "M", "floor_us", "floor_basis"]
    good = _good_rows(df)
    if good.empty or not has_data(good, "floor_us"):
        return pd.DataFrame(columns=columns)
    good["floor_us"] = pd.to_numeric(good["floor_us"], errors="coerce")
    good = good[good["floor_us"] > 0]
    if "floor_basis" not in good.columns:
        good["floor_basis"] = ""
    lowest = good.groupby(["panel", "dtype", "M"], sort=False)["floor_us"].idxmin()
    floor = good.loc[lowest.to_numpy(), columns].copy()
    floor["floor_basis"] = _text(floor, "floor_basis")
    return floor.sort_values(["panel", "dtype", "M"]).reset_index(drop=True)


def _m_axis_values(ms: Iterable[float]) -> list[int]:
    values = sorted({int(m) for m in ms if m >= 1 and (int(m) & (int(m) - 1)) == 0})
    if len(values) > 5:  # keep labels readable: powers of four only
        values = [m for m in values if (m.bit_length() - 1) % 2 == 0]
    return values


def _expr_text(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _latency_panel(
    long: pd.DataFrame,
    floor: pd.DataFrame,
    datasets: tuple[str, str],
    panel: str,
    dtype: str,
    title: list[str],
    view: str,
    first_column: bool,
    color: alt.Color,
    tooltip: list[alt.Tooltip],
    mark_mismatch: bool,
) -> dict[str, Any]:
    """One shape and dtype: the picked mode's lines, points and IQR bars, and the floor.

    ``long`` and ``floor`` place the axes; the marks read the named ``datasets`` (long,
    floor) of the top-level spec, so the panels share one copy of each.
    """
    mine = (long["panel"] == panel) & (long["dtype"] == dtype)
    floor_mine = floor[(floor["panel"] == panel) & (floor["dtype"] == dtype)]
    ms = pd.Series([*long.loc[mine, "M"], *floor_mine["M"]], dtype=float)
    ys = [v for c in ("latency_us", "iqr_lo", "iqr_hi") for v in long.loc[mine, c]]
    ys = pd.Series([*ys, *floor_mine["floor_us"]], dtype=float)
    ys = ys[ys > 0]
    # Fixed domains over every mode: switching the mode keeps the axes where they are.
    x = alt.X(
        "M:Q",
        scale=alt.Scale(type="log", base=2, nice=False, domain=[ms.min(), ms.max()]),
        axis=alt.Axis(
            values=_m_axis_values(ms) or alt.Undefined, labelExpr=M_LABEL_EXPR, labelFontSize=10
        ),
        title="M (tokens)" if first_column else None,
    )
    lo, hi = ys.min() / 1.25, ys.max() * 1.25
    y = alt.Y(
        "latency_us:Q",
        scale=alt.Scale(type="log", nice=False, domain=[lo, hi]),
        axis=alt.Axis(values=log_ticks_between(lo, hi) or alt.Undefined, labelFontSize=10),
        title="latency (µs)" if first_column else None,
    )
    where = f"datum.panel == {_expr_text(panel)} && datum.dtype == {_expr_text(dtype)}"
    opacity = alt.value(FADED, condition={"param": PICK_PARAM, "value": 1.0})
    base = (
        alt.Chart(alt.NamedData(name=datasets[0]))
        .transform_filter(where)
        .transform_filter(f"datum.mode == {MODE_PARAM}")
        .encode(x=x, y=y, color=color, opacity=opacity)
    )
    layers: list[alt.Chart] = []
    if not floor_mine.empty:
        layers.append(
            alt.Chart(alt.NamedData(name=datasets[1]))
            .transform_filter(where)
            .transform_calculate(line=_expr_text(FLOOR_LABEL))
            .mark_line(color=FLOOR_COLOR, strokeWidth=1.1)
            .encode(
                x=x,
                y=alt.Y("floor_us:Q"),
                strokeDash=alt.StrokeDash(
                    "line:N",
                    scale=alt.Scale(domain=[FLOOR_LABEL], range=[FLOOR_DASH]),
                    legend=alt.Legend(title=None, orient="top", symbolStrokeColor=FLOOR_COLOR),
                ),
                tooltip=[
                    alt.Tooltip("panel:N", title="shape"),
                    alt.Tooltip("dtype:N"),
                    alt.Tooltip("M:Q", format="d"),
                    alt.Tooltip("floor_us:Q", title="roofline floor (µs)", format=".3g"),
                    alt.Tooltip("floor_basis:N", title="bound by"),
                ],
            )
        )
    # The lines first of the layers coloured by impl: the legend shared by every panel is
    # built from the first, and only the view holding the legend selection makes its clicks
    # select (with the IQR bars first, a click on the legend did nothing).
    layers.append(base.mark_line(strokeWidth=1.6).encode(detail="series:N").properties(name=view))
    if has_data(long.loc[mine], "iqr_us"):
        layers.append(
            base.mark_rule(strokeWidth=1.2)
            .encode(y=alt.Y("iqr_lo:Q"), y2="iqr_hi:Q")
            .transform_filter("isValid(datum.iqr_us)")
        )
    shape = (
        alt.condition("datum.status == 'mismatch'", alt.value("cross"), alt.value("circle"))
        if mark_mismatch
        else alt.value("circle")
    )
    layers.append(base.mark_point(size=26, filled=True).encode(shape=shape, tooltip=tooltip))
    return view_spec(
        alt.layer(*layers).properties(
            width=PANEL_WIDTH,
            height=PANEL_HEIGHT,
            title=alt.TitleParams(title, fontSize=11, fontWeight="normal", anchor="start"),
        )
    )


def _latency_tooltip(long: pd.DataFrame) -> list[alt.Tooltip]:
    tooltip = [
        alt.Tooltip("impl:N"),
        alt.Tooltip("op:N"),
        alt.Tooltip("dtype:N"),
        alt.Tooltip("panel:N", title="shape"),
        alt.Tooltip("M:Q", format="d"),
        alt.Tooltip("mode:N", title="timing mode"),
        alt.Tooltip("latency_us:Q", title="latency (µs)", format=".4g"),
        alt.Tooltip("status:N"),
    ]
    for column, title, fmt in LATENCY_TOOLTIP:
        if column in long.columns and (column == "throttle" or has_data(long, column)):
            kind = "N" if column == "throttle" else "Q"
            tooltip.append(
                alt.Tooltip(f"{column}:{kind}", title=title, format=fmt or alt.Undefined)
            )
    return tooltip


def latency_chart(df: pd.DataFrame, backend: str | None = None) -> alt.TopLevelMixin:
    """Latency (µs, log) against M (log), one section of shape panels per dtype.

    One timing mode at a time (a radio-bound parameter, opening on cold where the data has
    cold times, else graph, else eager), one line per impl · op coloured by impl, and one
    grey dashed roofline floor per panel. Clicking an impl in the legend fades the others.
    """
    backend = backend or first_text(df, "backend", "unknown backend")
    device_name = first_text(df, "device_name") or first_text(df, "device", "unknown device")
    title_text = f"{backend}: GEMM latency vs M on {device_name}"
    long = latency_long(df)
    n_points = len(df)
    if long.empty:
        reasons = distinct_reasons(df, limit=1) or ["no sweep rows"]
        return no_data_chart(
            title_text, "no successful points: " + reasons[0], color=backend_color(backend)
        )
    n_good = int(df["status"].astype(str).isin(["ok", "mismatch"]).sum())
    floor = latency_floor(df)
    modes = [m for m in TIMING_MODES if m in set(long["mode"])]
    default = next(m for m in DEFAULT_MODES if m in modes)

    subtitle = f"{n_good} of {n_points} points ran"
    if n_good < n_points:
        subtitle += " (the others: support matrix)"
    if len(modes) > 1:
        subtitle += f" · {default} times (other timing modes: buttons below the chart)"
    else:
        subtitle += f" · {default} times (the only timing mode measured)"
    if has_data(long, "iqr_us"):
        subtitle += " · bars: interquartile range"
    mark_mismatch = bool((long["status"] == "mismatch").any())
    if mark_mismatch:
        subtitle += " · ×: wrong answer (mismatch)"

    impls = sorted(set(long["impl"]))
    color = alt.Color(
        "impl:N",
        title=f"{backend} impl (click to highlight)",
        scale=impl_scale([(backend, i) for i in impls], label=lambda _b, i: i),
        legend=alt.Legend(orient="top", labelLimit=300, symbolStrokeWidth=3),
    )
    tooltip = _latency_tooltip(long)
    data = strict_frame(long, [c for c in long.columns if c not in PANEL_META])
    floor_data = strict_frame(floor, list(floor.columns))
    names = (f"latency_{backend}", f"floor_{backend}")

    meta = long.drop_duplicates("panel")
    ranks = dict(zip(meta["panel"], meta["panel_order"], strict=True))
    order = sorted(ranks, key=ranks.get)
    titles = dict(zip(meta["panel"], meta["panel_title"], strict=True))
    # The panels are assembled as plain Vega-Lite: altair re-copies a whole concat tree for
    # every selection it lifts (~20 s for torch's 22 panels), and renames the views.
    independent = {"scale": {"x": "independent", "y": "independent"}}
    sections, views = [], []
    for dtype in sorted(set(long["dtype"]), key=dtype_order):
        present = set(long.loc[long["dtype"] == dtype, "panel"])
        panels = []
        for i, panel in enumerate(p for p in order if p in present):
            views.append(f"lines_{len(views)}")
            panels.append(
                _latency_panel(
                    data, floor_data, names, panel, dtype, titles[panel], views[-1],
                    i % PANEL_COLUMNS == 0, color, tooltip, mark_mismatch,
                )
            )  # fmt: skip
        rows = [
            {"hconcat": panels[i : i + PANEL_COLUMNS], "spacing": 14, "resolve": independent}
            for i in range(0, len(panels), PANEL_COLUMNS)
        ]
        title = {"text": dtype, "fontSize": 13, "anchor": "start"}
        sections.append({"title": title, "vconcat": rows, "spacing": 10, "resolve": independent})
    params = [
        {
            "name": PICK_PARAM,
            "select": {"type": "point", "fields": ["impl"]},
            "bind": "legend",
            "views": views,
        },
        {
            "name": MODE_PARAM,
            "value": default,
            "bind": {"input": "radio", "options": modes, "name": "timing mode "},
        },
    ]
    title = {"text": title_text, "subtitle": [subtitle], "anchor": "start"}
    title["color"] = backend_color(backend)
    return SpecChart(
        {
            "$schema": alt.SCHEMA_URL,
            "title": title,
            "params": params,
            "vconcat": sections,
            "spacing": 22,
            "resolve": independent,
            "datasets": {
                names[0]: data.to_dict("records"),
                names[1]: floor_data.to_dict("records"),
            },
        }
    )


# ---------------------------------------------------------------------------------------------
# The registered figure (figure_list.py)
# ---------------------------------------------------------------------------------------------


def latency_figure(
    sweep: pd.DataFrame, peaks: dict | None = None, backend: str | None = None
) -> alt.TopLevelMixin:
    """One backend's latency figure from its sweep, with the roofline of the measured
    ``peaks`` (peaks.json) where given."""
    if peaks is not None:
        sweep = add_roofline(sweep, peaks)
    return latency_chart(sweep, backend=backend)
