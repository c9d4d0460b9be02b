"""The sweep's figures: latency against M per backend, the support matrix, and the
cross-backend views of the sweep table (achieved throughput and efficiency, launch overhead)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from .charts import (
    M_LABEL_EXPR,
    backend_color,
    backend_scale,
    distinct_reasons,
    first_text,
    has_data,
    log_ticks,
    no_data_chart,
    save_chart,
    shape_label,
    shorten,
    status_scale,
    strict_frame,
)
from .tables import read_optional, tips

#: Timing modes of a sweep row: column -> (label, stroke dash).
TIMING_MODES: dict[str, tuple[str, list[int]]] = {
    "eager_us": ("eager", [1, 0]),
    "graph_us": ("graph", [8, 3]),
    "cold_us": ("cold", [3, 2]),
    "floor_us": ("roofline floor", [1, 4]),
}

#: Optional sweep columns shown in tooltips when present: (column, title, format).
TOOLTIP_EXTRA: list[tuple[str, str, str]] = tips("sweep_table", (
    "eager_iqr_us", "eager_samples", "graph_us", "cold_us", "floor_us", "launch_overhead_us",
    "tflops", "gbps", "efficiency", "rel_err", "cos_sim", "sm_clock_mhz", "throttle",
))  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Latency vs M
# ---------------------------------------------------------------------------------------------


def latency_long(df: pd.DataFrame) -> pd.DataFrame:
    """Successful sweep rows in long form: one row per (point, timing mode) with data."""
    if df.empty or "status" not in df.columns:
        return pd.DataFrame()
    good = df[df["status"].astype(str).isin(["ok", "mismatch"])].copy()
    modes = [c for c in TIMING_MODES if has_data(good, c)]
    if good.empty or not modes:
        return pd.DataFrame()
    for column in ("impl", "op", "dtype", "shape"):
        if column not in good.columns:
            good[column] = ""
        good[column] = good[column].fillna("").astype(str)
    if "G" not in good.columns:
        good["G"] = float("nan")
    good["series"] = good["impl"] + " · " + good["op"] + " · " + good["dtype"]
    good["shape_label"] = [
        shape_label(s, n, k, g)
        for s, n, k, g in zip(good["shape"], good["N"], good["K"], good["G"], strict=True)
    ]
    keep = ["backend", "series", "impl", "op", "dtype", "shape", "shape_label", "M", "N", "K"]
    keep += ["G", "status"] + [c for c, _, _ in TOOLTIP_EXTRA if c in good.columns]
    keep += [c for c in ("eager_us",) if c not in keep]
    keep = list(dict.fromkeys(c for c in keep if c in good.columns))
    frames = []
    for column in modes:
        part = good[keep].copy()
        part["mode"] = TIMING_MODES[column][0]
        part["latency_us"] = pd.to_numeric(good[column], errors="coerce")
        part = part[part["latency_us"] > 0]
        if column == "eager_us" and "eager_iqr_us" in good.columns:
            half = pd.to_numeric(part["eager_iqr_us"], errors="coerce") / 2
            part["iqr_lo"] = (part["latency_us"] - half).clip(lower=part["latency_us"] * 0.05)
            part["iqr_hi"] = part["latency_us"] + half
        frames.append(part)
    long = pd.concat(frames, ignore_index=True)
    long["M"] = pd.to_numeric(long["M"], errors="coerce")
    return long[long["M"] > 0].reset_index(drop=True)


def latency_chart(df: pd.DataFrame, backend: str | None = None) -> alt.TopLevelMixin:
    """Latency (µs, log) against M (log), per (impl, op, dtype) and timing mode, by shape."""
    backend = backend or first_text(df, "backend", "unknown backend")
    device_name = first_text(df, "device_name") or first_text(df, "device", "unknown device")
    title_text = f"{backend}: GEMM latency vs M on {device_name}"
    long = latency_long(df)
    n_points = len(df)
    n_good = int(df["status"].astype(str).isin(["ok", "mismatch"]).sum()) if n_points else 0

    if long.empty:
        reasons = distinct_reasons(df) or ["no sweep rows"]
        subtitle = ["no successful points: " + reasons[0], *reasons[1:]]
        empty = pd.DataFrame({"M": pd.Series(dtype=float), "latency_us": pd.Series(dtype=float)})
        return (
            alt.Chart(empty)
            .mark_point()
            .encode(
                x=alt.X(
                    "M:Q",
                    scale=alt.Scale(type="log", base=2, domain=[1, 16384]),
                    axis=alt.Axis(labelExpr=M_LABEL_EXPR),
                    title="M (tokens)",
                ),
                y=alt.Y(
                    "latency_us:Q",
                    scale=alt.Scale(type="log", domain=[1, 1000]),
                    title="latency (µs)",
                ),
            )
            .properties(
                width=480,
                height=200,
                title=alt.TitleParams(
                    title_text, subtitle=subtitle, color=backend_color(backend), anchor="start"
                ),
            )
        )

    subtitle = [f"{n_good} of {n_points} points ran"]
    if n_good < n_points:
        failed = df[~df["status"].astype(str).isin(["ok", "mismatch"])]
        subtitle[0] += "; the others: " + "; ".join(distinct_reasons(failed, limit=3))
    modes_present = [m for m, _ in TIMING_MODES.values() if m in set(long["mode"])]
    dashes = [d for m, d in TIMING_MODES.values() if m in modes_present]
    if "eager" in modes_present:
        subtitle.append("eager bars: interquartile range (width centred on the median)")

    tooltip: list[alt.Tooltip] = [
        alt.Tooltip("backend:N"),
        alt.Tooltip("impl:N"),
        alt.Tooltip("op:N"),
        alt.Tooltip("dtype:N"),
        alt.Tooltip("shape:N"),
        alt.Tooltip("M:Q", format="d"),
        alt.Tooltip("N:Q", format="d"),
        alt.Tooltip("K:Q", format="d"),
        alt.Tooltip("mode:N"),
        alt.Tooltip("latency_us:Q", title="latency (µs)", format=".4g"),
        alt.Tooltip("status:N"),
    ]
    if has_data(long, "G"):
        tooltip.insert(8, alt.Tooltip("G:Q", format="d"))
    for column, title, fmt in TOOLTIP_EXTRA:
        if column in long.columns and (column == "throttle" or has_data(long, column)):
            kind = "N" if column == "throttle" else "Q"
            tooltip.append(
                alt.Tooltip(f"{column}:{kind}", title=title, format=fmt or alt.Undefined)
            )

    series = sorted(set(long["series"]))
    m_values = sorted({int(m) for m in long["M"] if m >= 1 and (int(m) & (int(m) - 1)) == 0})
    if len(m_values) > 9:  # keep labels readable: powers of four only
        m_values = [m for m in m_values if (m.bit_length() - 1) % 2 == 0]
    x = alt.X(
        "M:Q",
        scale=alt.Scale(type="log", base=2, nice=False),
        axis=alt.Axis(
            values=m_values or alt.Undefined,
            labelExpr=M_LABEL_EXPR,
            labelOverlap=True,
            labelFontSize=10,
        ),
        title="M (tokens)",
    )
    y = alt.Y(
        "latency_us:Q",
        scale=alt.Scale(type="log"),
        axis=alt.Axis(values=log_ticks(long["latency_us"]) or alt.Undefined),
        title="latency (µs)",
    )
    color = alt.Color(
        "series:N",
        title="impl · op · dtype",
        scale=alt.Scale(domain=series, scheme="tableau10"),
        legend=alt.Legend(orient="bottom", columns=2, labelLimit=400),
    )
    dash = alt.StrokeDash(
        "mode:N",
        title="timing",
        scale=alt.Scale(domain=modes_present, range=dashes),
        legend=alt.Legend(orient="bottom"),
    )
    base = alt.Chart().encode(x=x, y=y, color=color)
    lines = base.mark_line(strokeWidth=1.6).encode(strokeDash=dash, detail="series:N")
    points = base.mark_point(size=28, filled=True).encode(
        shape=alt.Shape(
            "status:N",
            scale=alt.Scale(domain=["ok", "mismatch"], range=["circle", "cross"]),
            legend=alt.Legend(orient="bottom", title="status"),
        ),
        tooltip=tooltip,
    )
    layers: list[alt.Chart] = [lines, points]
    if "iqr_lo" in long.columns and has_data(long, "iqr_lo"):
        bars = (
            alt.Chart()
            .mark_rule(strokeWidth=1, opacity=0.7)
            .encode(x=x, y=alt.Y("iqr_lo:Q"), y2="iqr_hi:Q", color=color)
            .transform_filter("datum.mode == 'eager' && isValid(datum.iqr_lo)")
        )
        layers.insert(0, bars)

    n_shapes = long["shape_label"].nunique()
    return (
        alt.layer(*layers, data=long)
        .properties(width=300, height=220)
        .facet(
            facet=alt.Facet(
                "shape_label:N",
                title=None,
                sort=list(long["shape_label"].unique()),
                header=alt.Header(labelFontSize=12),
            ),
            columns=min(3, n_shapes),
        )
        .resolve_scale(y="shared")
        .properties(
            title=alt.TitleParams(
                title_text, subtitle=subtitle, color=backend_color(backend), anchor="start"
            )
        )
    )


# ---------------------------------------------------------------------------------------------
# Support matrix
# ---------------------------------------------------------------------------------------------


def support_chart(support_df: pd.DataFrame) -> alt.TopLevelMixin:
    """Heat-map of backend · impl × op · dtype, coloured by status, reason in the tooltip."""
    title = "Support matrix: which backend runs which op and dtype"
    if support_df.empty:
        empty = pd.DataFrame({"x": pd.Series(dtype=str), "y": pd.Series(dtype=str)})
        return (
            alt.Chart(empty)
            .mark_rect()
            .encode(x="x:N", y="y:N")
            .properties(title=alt.TitleParams(title, subtitle=["no support data"]))
        )
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
    text = base.mark_text(fontSize=11, color="black").encode(text="label:N", tooltip=tooltip)
    return (rect + text).properties(
        width=max(160, 90 * len(cols)),
        height=max(60, 28 * len(rows)),
        title=alt.TitleParams(title, subtitle=["cell text: ok points / points"], anchor="start"),
    )


# ---------------------------------------------------------------------------------------------
# Entry points (called by scripts/plot_*.py)
# ---------------------------------------------------------------------------------------------


def plot_latency(
    sweep_parquet: str | os.PathLike,
    out_html: str | os.PathLike,
    out_png: str | os.PathLike,
    out_spec: str | os.PathLike,
    backend: str | None = None,
    peaks_json: str | os.PathLike | None = None,
) -> dict[str, Any]:
    df = read_optional(sweep_parquet)
    if peaks_json is not None:
        from .aggregate import add_roofline
        from .io import read_json

        df = add_roofline(df, read_json(peaks_json))
    if backend is None and "backend" not in df.columns:
        backend = Path(sweep_parquet).stem
    return save_chart(latency_chart(df, backend=backend), out_html, out_png, out_spec)


def plot_support(
    support_csv: str | os.PathLike,
    out_html: str | os.PathLike,
    out_png: str | os.PathLike,
    out_spec: str | os.PathLike,
) -> dict[str, Any]:
    df = read_optional(support_csv)
    return save_chart(support_chart(df), out_html, out_png, out_spec)


# ---------------------------------------------------------------------------------------------
# Cross-backend figures: achieved throughput, efficiency, launch overhead
# ---------------------------------------------------------------------------------------------


def _timed_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Successful rows with a label per (backend, impl, op, dtype) series and per shape."""
    good = df[df["status"].astype(str).isin(["ok", "mismatch"])].copy()
    if good.empty:
        return good
    good["series"] = (
        good["backend"].astype(str)
        + " · "
        + good["impl"].astype(str)
        + " · "
        + good["op"].astype(str)
        + " · "
        + good["dtype"].astype(str)
    )
    g = good["G"] if "G" in good.columns else pd.Series(float("nan"), index=good.index)
    good["shape_label"] = [
        shape_label(s, n, k, gg)
        for s, n, k, gg in zip(good["shape"], good["N"], good["K"], g, strict=True)
    ]
    return good


def _by_backend_lines(
    data: pd.DataFrame, y: str, y_title: str, log_y: bool, title: str, subtitle: list[str]
) -> alt.TopLevelMixin:
    backends = sorted(set(data["backend"]))
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
    # Only the columns drawn, NaN as null: Vega-Lite specs must be strict JSON.
    data = strict_frame(data, ["backend", "series", "shape_label", "M", y, *extra])
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
                "backend:N",
                scale=backend_scale(backends),
                legend=alt.Legend(orient="bottom", title="backend"),
            ),
            detail="series:N",
            tooltip=tooltip,
        )
        .properties(width=260, height=200)
    )
    return chart.facet(facet=alt.Facet("shape_label:N", title=None), columns=3).properties(
        title=alt.TitleParams(title, subtitle=subtitle, anchor="start")
    )


def efficiency_chart(df: pd.DataFrame) -> alt.TopLevelMixin:
    """Achieved TFLOP/s and roofline efficiency against M, every backend, by shape."""
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
    )
    return alt.vconcat(tflops, eff)


def launch_overhead_chart(df: pd.DataFrame) -> alt.TopLevelMixin:
    """eager − graph (µs) against M: what each call costs beyond the kernel itself."""
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


def plot_table_figure(kind: str, sweep_csv, out_html, out_png, out_spec) -> dict[str, Any]:
    """A cross-backend figure of the sweep table: ``efficiency`` or ``launch_overhead``."""
    builders = {"efficiency": efficiency_chart, "launch_overhead": launch_overhead_chart}
    return save_chart(builders[kind](read_optional(sweep_csv)), out_html, out_png, out_spec)
