"""Kernel-power figures: the power timeline and power against utilisation, each window
coloured by its class (``window_classes`` classifies them).

Inputs are the kernel-power tables (one row per window and GPU) and the sampler's timelines
(one row per NVML sample). Nothing is invented: a window with no power samples says so, and
a window without GPM utilisation is not called launch-, memory- or compute-bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import altair as alt
import pandas as pd

from ...core.charts import (
    backend_color,
    backend_scale,
    has_data,
    no_data_chart,
    no_data_panel,
)
from ...core.charts import strict_frame as _strict
from ...core.finding_records import text_of
from ...core.formats import tooltips
from .kernel_power_answers import IDLE, THROTTLED, UNDER_USE, power_groups, watts_text
from .kernel_power_schema import KERNEL_POWER_SHOWN, TIMELINE_SHOWN
from .window_classes import (
    FULL_CLOCK,
    POWER_CAPPED,
    SLOWED,
    THERMAL,
    UNDECIDED,
    classify_windows,
)

CLASS_COLORS: dict[str, str] = {
    "idle": "#bab0ac",
    "power-capped": "#e45756",
    "thermally throttled": "#d62728",
    "hw slowdown": "#9d2b2b",
    "launch-bound": "#f58518",
    "under-filled": "#eeca3b",
    "memory-bound": "#4c78a8",
    "compute-bound": "#54a24b",
    "unclassified": "#9d755d",
    "no data": "#dddddd",
}

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

MODE_COLORS: dict[str, str] = {
    "idle": "#bab0ac", "eager": "#f2cf5b", "graph": "#b279a2", "cold": "#72b7b2",
}  # fmt: skip
MODE_SHAPES: dict[str, str] = {
    "idle": "square", "eager": "circle", "graph": "triangle-up", "cold": "diamond",
}  # fmt: skip
#: Samples drawn per (backend, GPU) line at most; longer timelines are thinned evenly.
MAX_LINE_POINTS = 2000


def _mode_scale(modes: Iterable[str]) -> alt.Scale:
    names = [m for m in MODE_COLORS if m in set(modes)] or list(MODE_COLORS)
    return alt.Scale(domain=names, range=[MODE_COLORS[m] for m in names])


def _sources(windows: pd.DataFrame, backend: str | None = None) -> str:
    if windows.empty or "power_source" not in windows.columns:
        return "none"
    df = windows if backend is None else windows[windows["backend"].astype(str) == backend]
    values = sorted({text_of(v) for v in df["power_source"]} - {""})
    return ", ".join(values) or "none"


def _tooltip(columns: list[tuple[str, str, str]], df: pd.DataFrame) -> list[alt.Tooltip]:
    out = []
    for column, title, fmt in columns:
        if column not in df.columns:
            continue
        kind = "N" if fmt == "" else "Q"
        out.append(alt.Tooltip(f"{column}:{kind}", title=title, format=fmt or alt.Undefined))
    return out


def _has_power(windows: pd.DataFrame) -> int:
    if windows.empty or "avg_w" not in windows.columns:
        return 0
    return int(pd.to_numeric(windows["avg_w"], errors="coerce").notna().sum())


def _prepare_windows(windows: pd.DataFrame) -> pd.DataFrame:
    # Classified by the aggregate rule (kernel_power_classes.csv); a bare table here.
    df = windows.copy() if "class" in windows.columns else classify_windows(windows)
    for column in ("backend", "window", "mode", "label", "throttle_reasons", "power_source"):
        if column not in df.columns:
            df[column] = ""
        df[column] = df[column].map(text_of)
    return df


# ---------------------------------------------------------------------------------------------
# Power timeline
# ---------------------------------------------------------------------------------------------

WINDOW_TOOLTIP = tooltips(KERNEL_POWER_SHOWN, ("window", "mode", "seconds", "avg_w", "pct_limit",
                                              "sm_clock_mhz", "throttle_reasons", "tensor_util",
                                              "class"))  # fmt: skip
VERDICT_TOOLTIP = tooltips(KERNEL_POWER_SHOWN, ("window", "avg_w", "pct_limit", "sm_clock_mhz",
                                               "max_sm_clock_mhz", "throttle_reasons", "limit",
                                               "limit_why"))  # fmt: skip
SAMPLE_TOOLTIP = tooltips(
    TIMELINE_SHOWN, ("t_rel", "power_w", "sm_clock_mhz", "temp_c", "reasons_names")
)


def _gpu_layers(
    samples: pd.DataFrame,
    bands: pd.DataFrame,
    limit_w: float,
    color: str,
    x_domain: list[float],
    modes: list[str],
) -> alt.LayerChart:
    """One GPU's layers, each with its own data: window bands, power line, limit rule."""
    x_title = "time since the job's first sample (s)"
    y_title = "power (W)"
    x_scale = alt.Scale(domain=x_domain, nice=False)
    layers: list[alt.Chart] = []
    if not bands.empty:
        data = _strict(bands, ["w_start", "w_end", *[c for c, _, _ in WINDOW_TOOLTIP]])
        layers.append(
            alt.Chart(data)
            .mark_rect(opacity=0.28)
            .encode(
                x=alt.X("w_start:Q", title=x_title, scale=x_scale),
                x2="w_end:Q",
                color=alt.Color(
                    "mode:N",
                    title="window mode",
                    scale=_mode_scale(modes),
                    legend=alt.Legend(orient="bottom"),
                ),
                tooltip=_tooltip(WINDOW_TOOLTIP, data),
            )
        )
    line = _strict(samples, [c for c, _, _ in SAMPLE_TOOLTIP])
    line = line[line["power_w"].notna()]
    layers.append(
        alt.Chart(line)
        .mark_line(color=color, strokeWidth=1.2)
        .encode(
            x=alt.X("t_rel:Q", title=x_title, scale=x_scale),
            y=alt.Y("power_w:Q", title=y_title, scale=alt.Scale(zero=True)),
            tooltip=_tooltip(SAMPLE_TOOLTIP, line),
        )
    )
    if not math.isnan(limit_w):
        layers.append(
            alt.Chart(pd.DataFrame({"limit_w": [limit_w]}))
            .mark_rule(color="#d62728", strokeDash=[6, 3], strokeWidth=1.4)
            .encode(
                y=alt.Y("limit_w:Q", title=y_title),
                tooltip=[alt.Tooltip("limit_w:Q", title="power limit (W)", format=".0f")],
            )
        )
    return alt.layer(*layers)


def _backend_timeline(
    backend: str, samples: pd.DataFrame, windows: pd.DataFrame
) -> alt.TopLevelMixin:
    """One backend's panel: power line, limit rule, window bands; one row per GPU."""
    color = backend_color(backend)
    samples = samples.copy()
    samples["t"] = pd.to_numeric(samples["t"], errors="coerce")
    if has_data(samples, "t_rel"):
        samples["t_rel"] = pd.to_numeric(samples["t_rel"], errors="coerce")
        t0 = float((samples["t"] - samples["t_rel"]).median())
    else:
        t0 = float(samples["t"].min())
    samples["t_rel"] = (samples["t"] - t0).round(3)
    notes = []
    if has_data(samples, "power_w"):
        samples["power_w"] = pd.to_numeric(samples["power_w"], errors="coerce")
        notes.append("line: instant power (NVML)")
    elif has_data(samples, "power_avg_w"):
        samples["power_w"] = pd.to_numeric(samples["power_avg_w"], errors="coerce")
        notes.append("line: NVML 1-s average power (instant power unavailable)")
    else:
        samples["power_w"] = math.nan
        notes.append("the samples hold no power readings")
    samples["power_w"] = samples["power_w"].round(1)
    gpu = samples["gpu"] if "gpu" in samples.columns else pd.Series(0, index=samples.index)
    samples["gpu"] = pd.to_numeric(gpu, errors="coerce").fillna(0).astype(int)
    gpus = sorted(set(samples["gpu"]))

    bands = pd.DataFrame(columns=["gpu", "w_start", "w_end", "mode"])
    if not windows.empty and {"t_start", "t_end", "gpu"} <= set(windows.columns):
        bands = windows.copy()
        bands["w_start"] = (pd.to_numeric(bands["t_start"], errors="coerce") - t0).round(3)
        bands["w_end"] = (pd.to_numeric(bands["t_end"], errors="coerce") - t0).round(3)
        bands["gpu"] = pd.to_numeric(bands["gpu"], errors="coerce")
        bands = bands[bands[["w_start", "w_end", "gpu"]].notna().all(axis=1)]
        bands = bands[bands["gpu"].isin(gpus)]
    if not bands.empty:
        notes.append("bands: measurement windows, coloured by mode")

    def limit_of(g: int) -> float:
        for frame in (samples, windows):
            if "power_limit_w" in frame.columns and "gpu" in frame.columns:
                mine = pd.to_numeric(frame["gpu"], errors="coerce") == g
                value = pd.to_numeric(frame.loc[mine, "power_limit_w"], errors="coerce").median()
                if not math.isnan(value):
                    return float(value)
        return math.nan

    limits = {g: limit_of(g) for g in gpus}
    if any(not math.isnan(v) for v in limits.values()):
        notes.append("dashed: power limit")

    names: dict[int, str] = {}
    for frame in (samples, windows):
        if not names and {"gpu_name", "gpu"} <= set(frame.columns):
            named = frame[["gpu", "gpu_name"]].copy()
            named["gpu"] = pd.to_numeric(named["gpu"], errors="coerce")
            named = named.dropna()
            names = {int(g): str(n) for g, n in named.groupby("gpu")["gpu_name"].first().items()}
    ends = [samples["t_rel"].max()] + ([bands["w_end"].max()] if not bands.empty else [])
    x_domain = [min(0.0, float(samples["t_rel"].min())), float(max(ends))]
    modes = sorted(set(bands["mode"])) if not bands.empty else []

    panels = []
    for g in gpus:
        group = samples[samples["gpu"] == g].sort_values("t_rel")
        step = max(1, math.ceil(len(group) / MAX_LINE_POINTS))
        if step > 1:
            notes.append(f"GPU {g}: 1 in {step} of {len(group)} samples drawn")
        layer = _gpu_layers(
            group.iloc[::step], bands[bands["gpu"] == g], limits[g], color, x_domain, modes
        )
        label = f"GPU {g}" + (f" · {names[g]}" if names.get(g) else "")
        height = 200 if len(gpus) == 1 else 140
        panels.append(layer.properties(width=720, height=height, title=label))
    gpu_names = ", ".join(sorted(set(names.values())))
    title = alt.TitleParams(
        f"{backend}: power during the kernel loops" + (f" on {gpu_names}" if gpu_names else ""),
        subtitle=["; ".join(notes)],
        color=color,
        anchor="start",
    )
    if len(panels) == 1:
        return panels[0].properties(title=title)
    return alt.vconcat(*panels).properties(title=title)


def power_timeline_chart(timeline: pd.DataFrame, windows: pd.DataFrame) -> alt.TopLevelMixin:
    """Per backend: instant power against time, the power limit, and the windows as bands."""
    timeline = timeline if timeline is not None else pd.DataFrame()
    windows = _prepare_windows(windows if windows is not None else pd.DataFrame())
    has_samples = not timeline.empty and {"backend", "t"} <= set(timeline.columns)
    if has_samples:
        timeline = timeline.copy()
        timeline["backend"] = timeline["backend"].map(text_of)
    backends = sorted(
        set(timeline["backend"] if has_samples else []) | set(windows.get("backend", []))
    )
    title = "Kernel power timeline"
    if not backends:
        return no_data_chart(title, f"no power samples: {_sources(windows)} (no windows)")
    panels, missing = [], []
    for backend in backends:
        samples = timeline[timeline["backend"] == backend] if has_samples else pd.DataFrame()
        mine = windows[windows["backend"] == backend] if not windows.empty else windows
        if samples.empty or "t" not in samples.columns or not _has_readings(samples):
            why = "no power samples" if samples.empty else "no power readings in the samples"
            missing.append(backend)
            panels.append(
                no_data_panel(
                    f"{backend}: {why}: {_sources(windows, backend)}",
                    f"{len(mine)} windows recorded, "
                    f"{_has_power(mine)} with an average power reading",
                    color=backend_color(backend),
                )
            )
        else:
            panels.append(_backend_timeline(backend, samples, mine))
    if len(missing) == len(backends):
        return no_data_chart(
            title,
            f"no power samples ({', '.join(backends)}; power source: {_sources(windows)}); "
            f"{len(windows)} windows recorded, {_has_power(windows)} with an average power "
            "reading",
        )
    if len(panels) == 1:
        return panels[0]
    return alt.vconcat(*panels).resolve_scale(color="independent")


def _has_readings(samples: pd.DataFrame) -> bool:
    """Whether a backend's timeline holds any power reading (instant or 1-s average)."""
    return has_data(samples, "power_w") or has_data(samples, "power_avg_w")


# ---------------------------------------------------------------------------------------------
# Power against utilisation
# ---------------------------------------------------------------------------------------------


def power_vs_util_chart(windows: pd.DataFrame) -> alt.TopLevelMixin:
    """Average power of each window against its tensor-pipe utilisation (or SM clock)."""
    title = "Power vs tensor-pipe utilisation, per window and GPU"
    df = _prepare_windows(windows if windows is not None else pd.DataFrame())
    if df.empty or not has_data(df, "avg_w"):
        return no_data_chart(
            title, f"no power was measured (power source: {_sources(df)}); nothing to plot"
        )
    df["avg_w"] = pd.to_numeric(df["avg_w"], errors="coerce")
    df = df[df["avg_w"].notna()].copy()
    if has_data(df, "tensor_util"):
        x_field, x_title = "tensor_util", "tensor-pipe utilisation (GPM, %)"
        subtitle = [
            "far below the limit with low tensor utilisation: the GPU is under-used; "
            "throttling shows in the clocks-event reasons (class in the tooltip)",
        ]
        x_scale = alt.Scale(domain=[0, 100])
    elif has_data(df, "sm_clock_mhz"):
        x_field, x_title = "sm_clock_mhz", "median SM clock (MHz)"
        subtitle = [
            "GPM utilisation was unavailable on this GPU/driver (needs Hopper or newer): "
            "x is the median SM clock instead",
        ]
        x_scale = alt.Scale(zero=False)
    else:
        return no_data_chart(
            title,
            f"power measured ({_sources(df)}) but neither GPM utilisation nor SM clocks were",
        )
    df[x_field] = pd.to_numeric(df[x_field], errors="coerce")
    dropped = int(df[x_field].isna().sum())
    df = df[df[x_field].notna()]
    if dropped:
        subtitle.append(f"{dropped} windows without {x_title.split(' (')[0]} not shown")
    limits = sorted(
        {float(v) for v in pd.to_numeric(df.get("power_limit_w"), errors="coerce").dropna()}
        if "power_limit_w" in df.columns
        else set()
    )
    if limits:
        subtitle.append("dashed: power limit")
    tooltip_cols = tooltips(KERNEL_POWER_SHOWN, ("window", "backend", "gpu", "M", "mode", "avg_w",
                                                "tensor_util", "sm_clock_mhz", "dram_util",
                                                "pct_limit", "class", "why"))  # fmt: skip
    tooltip_cols = [
        t
        for t in tooltip_cols
        if t[0] in df.columns and (t[2] == "" or t[0] == x_field or has_data(df, t[0]))
    ]
    data = _strict(df, [c for c, _, _ in tooltip_cols] + [x_field, "avg_w"])
    backends = sorted({str(b) for b in df["backend"]})
    points = (
        alt.Chart(data)
        .mark_point(size=70, filled=True, opacity=0.85)
        .encode(
            x=alt.X(f"{x_field}:Q", title=x_title, scale=x_scale),
            y=alt.Y("avg_w:Q", title="average power (W)", scale=alt.Scale(zero=True)),
            color=alt.Color(
                "backend:N", scale=backend_scale(backends), legend=alt.Legend(orient="bottom")
            ),
            shape=alt.Shape(
                "mode:N",
                scale=alt.Scale(
                    domain=list(MODE_SHAPES), range=[MODE_SHAPES[m] for m in MODE_SHAPES]
                ),
                legend=alt.Legend(orient="bottom", title="window mode"),
            ),
            tooltip=_tooltip(tooltip_cols, data),
        )
    )
    layers: list[alt.Chart] = [points]
    if limits:
        layers.append(
            alt.Chart(pd.DataFrame({"limit_w": limits}))
            .mark_rule(color="#d62728", strokeDash=[6, 3])
            .encode(
                y="limit_w:Q",
                tooltip=[alt.Tooltip("limit_w:Q", title="power limit (W)", format=".0f")],
            )
        )
    return alt.layer(*layers).properties(
        width=520,
        height=320,
        title=alt.TitleParams(title, subtitle=subtitle, anchor="start"),
    )


# ---------------------------------------------------------------------------------------------
# Each group's watts against the power limit, coloured by its verdict (question 3)
# ---------------------------------------------------------------------------------------------

VERDICT_COLORS: dict[str, str] = {
    UNDER_USE: "#4c78a8", POWER_CAPPED: "#e45756", THERMAL: "#b22222", SLOWED: "#9d2b2b",
    THROTTLED: "#c0392b", UNDECIDED: "#bab0ac", IDLE: "#8c8c8c",
}  # fmt: skip
LIMIT_SHAPES: dict[str, str] = {
    FULL_CLOCK: "circle", POWER_CAPPED: "triangle-down", THERMAL: "triangle-down",
    SLOWED: "triangle-down", UNDECIDED: "square", IDLE: "diamond",
}  # fmt: skip
#: Pixels per group row.
ROW_HEIGHT = 24


def power_verdicts_chart(windows: pd.DataFrame) -> alt.TopLevelMixin:
    """Per group of loops (question 3's subjects, its order): the range of the windows' average
    power as a bar coloured by the group's verdict, each window as a mark shaped by its limit,
    and the power limit as a dashed rule. ``windows``: the classified windows
    (kernel_power_classes.csv)."""
    title = "Power per group of kernel loops against the limit"
    df = windows if windows is not None else pd.DataFrame()
    if df.empty or not has_data(df, "avg_w"):
        return no_data_chart(title, f"no power was measured (power source: {_sources(df)})")
    groups = power_groups(df)
    if not groups:
        return no_data_chart(title, "no window with power belongs to a group of loops")
    bars, marks = [], []
    for group in groups:
        w = pd.to_numeric(group.rows["avg_w"], errors="coerce")
        bars.append({"group": group.subject, "verdict": group.verdict, "w_zero": 0.0,
                     "w_min": w.min(),
                     "w_max": w.max(), "windows": group.windows,
                     "value": watts_text(group.rows)})  # fmt: skip
        for rec in group.rows.to_dict("records"):
            limit = IDLE if group.verdict == IDLE else text_of(rec.get("limit")) or UNDECIDED
            marks.append({**rec, "group": group.subject, "limit": limit})
    order = [g.subject for g in groups]
    bar_data = pd.DataFrame(bars)
    mark_data = _strict(pd.DataFrame(marks), ["group", *(c for c, _, _ in VERDICT_TOOLTIP)])
    limits = sorted({float(v) for v in pd.to_numeric(df.get("power_limit_w"),
                                                     errors="coerce").dropna()})  # fmt: skip
    top = max([*limits, float(pd.to_numeric(df["avg_w"], errors="coerce").max())]) * 1.05
    x = alt.X("w_zero:Q", title="average power per window (W)", scale=alt.Scale(domain=[0, top]))
    y = alt.Y("group:N", sort=order, title=None, axis=alt.Axis(labelLimit=360))
    verdicts = [v for v in VERDICT_COLORS if v in set(bar_data["verdict"])]
    shapes = [s for s in LIMIT_SHAPES if s in set(mark_data["limit"].fillna(""))]
    layers = [
        alt.Chart(bar_data).mark_bar(height=14, opacity=0.55).encode(
            x=x, x2="w_max:Q", y=y,
            color=alt.Color("verdict:N", title="group verdict",
                            scale=alt.Scale(domain=verdicts,
                                            range=[VERDICT_COLORS[v] for v in verdicts]),
                            legend=alt.Legend(orient="bottom")),
            tooltip=[alt.Tooltip("group:N"), alt.Tooltip("verdict:N"),
                     alt.Tooltip("value:N", title="power (range)"),
                     alt.Tooltip("windows:Q", title="windows")],
        ),
        alt.Chart(mark_data).mark_point(size=60, filled=True, color="#333", opacity=0.9).encode(
            x="avg_w:Q", y=alt.Y("group:N", sort=order),
            shape=alt.Shape("limit:N", title="window limit",
                            scale=alt.Scale(domain=shapes, range=[LIMIT_SHAPES[s] for s in shapes]),
                            legend=alt.Legend(orient="bottom")),
            tooltip=_tooltip(VERDICT_TOOLTIP, mark_data),
        ),
    ]  # fmt: skip
    subtitle = ("bar: up to the group's highest draw, coloured by its verdict (Q3); marks: each "
                "window, shaped by its limit")  # fmt: skip
    if limits:
        subtitle += f"; dashed: power limit ({', '.join(f'{v:.0f} W' for v in limits)})"
        layers.append(
            alt.Chart(pd.DataFrame({"limit_w": limits}))
            .mark_rule(color="#d62728", strokeDash=[6, 3], strokeWidth=1.4)
            .encode(x="limit_w:Q",
                    tooltip=[alt.Tooltip("limit_w:Q", title="power limit (W)", format=".0f")])
        )  # fmt: skip
    return alt.layer(*layers).properties(
        width=560, height=ROW_HEIGHT * len(groups),
        title=alt.TitleParams(title, subtitle=[subtitle], anchor="start"),
    )  # fmt: skip
