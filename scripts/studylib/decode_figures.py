"""Decode-power figure: throughput, power and energy per output token against concurrency.

Input is the decode table (results/tables/decode.csv, one row per server variant and
concurrency). Invalid rows (steady window shorter than the configured minimum, request errors
or completions of the wrong length) are drawn hollow and faded, never as results; a machine
without a power source gets throughput and latency panels and says that no power was measured.
"""

from __future__ import annotations

import math
import os
from typing import Any

import altair as alt
import pandas as pd

from .figures import _has_data, _no_data_chart, log_ticks, read_table, save_chart, strict_frame

TITLE = "Decode: throughput, power and energy per output token vs concurrency"
#: Palette of the variants, assigned in sorted order of their names (same in every panel).
VARIANT_PALETTE: tuple[str, ...] = (
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#72b7b2",
    "#b279a2",
    "#eeca3b",
    "#9d755d",
    "#ff9da6",
    "#bab0ac",
)
SHORT_STEADY = "steady window shorter than the minimum"
#: Columns that hold measured power; all missing means no power was measured.
POWER_COLUMNS: tuple[str, ...] = ("avg_w_per_gpu", "avg_w_total", "pct_limit", "j_per_token")
TEXT_COLUMNS: tuple[str, ...] = ("engine", "variant", "power_source", "throttle_reasons")

#: Panels: column -> axis title.
POWER_PANELS: tuple[tuple[str, str], ...] = (
    ("output_tok_s", "output tokens/s"),
    ("avg_w_per_gpu", "average power per GPU (W)"),
    ("j_per_token", "energy per output token (J)"),
)
LATENCY_PANELS: tuple[tuple[str, str], ...] = (
    ("output_tok_s", "output tokens/s"),
    ("tpot_ms", "time per output token, TPOT (ms)"),
    ("itl_p50_ms", "inter-token latency p50 (ms)"),
)
#: Tooltip rows: column -> (title, format); "" for text.
TOOLTIP: tuple[tuple[str, str, str], ...] = (
    ("engine", "engine", ""),
    ("variant", "variant", ""),
    ("concurrency", "concurrency", "d"),
    ("gpus", "GPUs", "d"),
    ("validity", "validity", ""),
    ("steady_s", "steady window (s)", ".1f"),
    ("requests", "requests", "d"),
    ("output_tok_s", "output tok/s", ",.1f"),
    ("tpot_ms", "TPOT (ms)", ".2f"),
    ("itl_p50_ms", "ITL p50 (ms)", ".2f"),
    ("itl_p99_ms", "ITL p99 (ms)", ".2f"),
    ("ttft_p50_ms", "TTFT p50 (ms)", ".1f"),
    ("power_source", "power source", ""),
    ("avg_w_per_gpu", "avg W per GPU", ".1f"),
    ("avg_w_total", "avg W total", ".1f"),
    ("pct_limit", "% of power limit", ".1f"),
    ("j_per_token", "J per output token", ".4g"),
    ("energy_gap_pct", "counter vs samples gap (%)", "+.1f"),
    ("sm_clock_mhz", "SM clock (MHz)", ".0f"),
    ("throttle_reasons", "clocks-event reasons", ""),
    ("sm_util", "SM util (%)", ".0f"),
    ("tensor_util", "tensor util (%)", ".0f"),
    ("dram_util", "DRAM util (%)", ".0f"),
)


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value).strip()


def _bool(value: Any) -> bool:
    """A ``valid`` cell as a bool: True/False, 1/0, "true"/"false"; missing is False."""
    if isinstance(value, bool):
        return value
    text = _text(value).lower()
    return text in ("true", "1", "1.0", "yes")


def _count(value: Any) -> int:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return 0
    return 0 if math.isnan(f) else int(f)


def invalid_note(row: Any) -> str:
    """Why a row is invalid ("" when it is valid): the tooltip's and table's note."""
    get = row.get if hasattr(row, "get") else (lambda k, d=None: getattr(row, k, d))
    if _bool(get("valid", False)):
        return ""
    causes = []
    errors, wrong = _count(get("errors")), _count(get("wrong_length"))
    if errors:
        causes.append(f"{errors} request error{'s' if errors != 1 else ''}")
    if wrong:
        causes.append(f"{wrong} completion{'s' if wrong != 1 else ''} of the wrong length")
    steady = pd.to_numeric(pd.Series([get("steady_s")]), errors="coerce").iloc[0]
    if not causes or math.isnan(steady) or steady <= 0:
        causes.insert(0, SHORT_STEADY)
    return "invalid: " + "; ".join(causes)


def variant_scale(variants: list[str]) -> alt.Scale:
    """Fixed colour per variant (sorted names → palette), shared by every panel."""
    names = sorted(dict.fromkeys(variants))
    colors = [VARIANT_PALETTE[i % len(VARIANT_PALETTE)] for i in range(len(names))]
    return alt.Scale(domain=names, range=colors)


def has_power(df: pd.DataFrame) -> bool:
    """Whether any row carries a power measurement."""
    return any(_has_data(df, c) for c in POWER_COLUMNS)


def power_sources(df: pd.DataFrame) -> list[str]:
    if df.empty or "power_source" not in df.columns:
        return ["none"]
    return sorted({_text(v) or "none" for v in df["power_source"]})


def prepare(df: pd.DataFrame) -> pd.DataFrame:
    """The decode table with clean text, ``valid`` as bool and a ``validity`` note per row."""
    out = df.copy().reset_index(drop=True)
    for column in TEXT_COLUMNS:
        if column not in out.columns:
            out[column] = ""
        out[column] = out[column].map(_text)
    out["power_source"] = out["power_source"].replace("", "none")
    out["valid"] = [_bool(v) for v in out.get("valid", pd.Series(False, index=out.index))]
    notes = [invalid_note(rec) for rec in out.to_dict("records")]
    out["validity"] = [n or "valid" for n in notes]
    out["concurrency"] = pd.to_numeric(out.get("concurrency"), errors="coerce")
    out = out[out["concurrency"] > 0]
    return out.sort_values(["variant", "concurrency"]).reset_index(drop=True)


def _panel(
    data: pd.DataFrame,
    column: str,
    title: str,
    x: alt.X,
    color_scale: alt.Scale,
    tooltip: list[alt.Tooltip],
) -> alt.LayerChart:
    values = pd.to_numeric(data[column], errors="coerce")
    positive = values[values > 0]
    # A log axis when the values span more than 20× (and are all positive).
    log_y = bool(
        not positive.empty
        and len(positive) == values.notna().sum()
        and positive.max() / positive.min() > 20
    )
    y = alt.Y(
        f"{column}:Q",
        title=title,
        scale=alt.Scale(type="log") if log_y else alt.Scale(zero=True),
        axis=alt.Axis(values=log_ticks(positive), grid=True) if log_y else alt.Axis(),
    )
    color = alt.Color(
        "variant:N",
        scale=color_scale,
        legend=alt.Legend(orient="bottom", title="server variant", labelLimit=400),
    )
    base = alt.Chart(data).encode(x=x, y=y, color=color)
    line = (
        base.mark_line(strokeWidth=1.8)
        .encode(detail="variant:N")
        .transform_filter(f"datum.valid && isValid(datum.{column})")
    )
    valid = (
        base.mark_point(size=60, filled=True, opacity=1)
        .encode(tooltip=tooltip)
        .transform_filter(f"datum.valid && isValid(datum.{column})")
    )
    invalid = (
        base.mark_point(size=80, filled=False, opacity=0.55, strokeWidth=1.6)
        .encode(tooltip=tooltip)
        .transform_filter(f"!datum.valid && isValid(datum.{column})")
    )
    layers = [line, valid, invalid]
    if column == "avg_w_per_gpu" and "pct_limit" in data.columns:
        # How far below the limit: each valid point labelled with its % of the power limit,
        # and the limit itself as a dashed line (W per GPU × 100 / % of limit).
        has_pct = "datum.valid && isValid(datum.avg_w_per_gpu) && datum.pct_limit > 0"
        layers.append(
            base.mark_text(align="left", dx=7, dy=-7, fontSize=10)
            .encode(text=alt.Text("pct_label:N"))
            .transform_filter(has_pct)
            .transform_calculate(pct_label="format(datum.pct_limit, '.0f') + ' %'")
        )
        layers.append(
            alt.Chart(data)
            .transform_filter(has_pct)
            .transform_calculate(limit_w="datum.avg_w_per_gpu * 100 / datum.pct_limit")
            .transform_aggregate(limit_w="max(limit_w)")
            .mark_rule(strokeDash=[5, 4], color="#b22222")
            .encode(y=alt.Y("limit_w:Q"))
        )
    return alt.layer(*layers).properties(width=300, height=230)


# ---------------------------------------------------------------------------------------------
# The figure
# ---------------------------------------------------------------------------------------------


def decode_chart(df: pd.DataFrame | None) -> alt.TopLevelMixin:
    """Per variant against concurrency (log2): tok/s, W per GPU and J per output token.

    Without any power measurement the panels are tok/s, TPOT and ITL p50 instead. Invalid
    rows are hollow and faded with the reason in the tooltip; an empty table gives a small
    chart saying "no decode runs".
    """
    if df is None or df.empty or "concurrency" not in df.columns:
        return _no_data_chart(TITLE, "no decode runs")
    data = prepare(df)
    if data.empty:
        return _no_data_chart(TITLE, "no decode runs")

    powered = has_power(data)
    panels = POWER_PANELS if powered else LATENCY_PANELS
    sources = power_sources(data)
    subtitle: list[str] = []
    engines = sorted({e for e in data["engine"] if e})
    n_valid = int(data["valid"].sum())
    head = f"{len(data)} runs of {data['variant'].nunique()} variants"
    if engines:
        head += f" ({', '.join(engines)})"
    head += f"; {n_valid} valid"
    subtitle.append(head)
    if powered:
        subtitle.append(
            "power and energy over each steady window; labels: % of the power limit (dashed); "
            "tooltip: clocks, reasons, utilisation"
        )
        if "rapl" in sources:
            subtitle.append("rapl: CPU package power, not a GPU's")
    else:
        subtitle.append(f"no power measured on this machine (power_source {', '.join(sources)})")
    if n_valid < len(data):
        subtitle.append("hollow, faded points: invalid runs (reason in the tooltip), not results")
    if n_valid == 0:
        subtitle.append("no valid run: every row is invalid")
    first = panels[0][0]
    drawn = pd.to_numeric(data[first], errors="coerce") if first in data.columns else None
    undrawn = data if drawn is None else data[drawn.isna()]
    if not undrawn.empty:
        names = [
            f"{v} C={int(c)}"
            for v, c in zip(undrawn["variant"], undrawn["concurrency"], strict=True)
        ]
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        subtitle.append(f"not drawn (no steady window measured): {shown}")

    tooltip_cols = [
        (c, t, f)
        for c, t, f in TOOLTIP
        if c in data.columns and (f == "" or _has_data(data, c) or c == "concurrency")
    ]
    if not powered:
        tooltip_cols = [t for t in tooltip_cols if t[0] not in POWER_COLUMNS]
    plot_cols = [c for c, _ in panels]
    columns = ["valid", *dict.fromkeys([c for c, _, _ in tooltip_cols] + plot_cols)]
    for column in plot_cols:
        if column not in data.columns:
            data[column] = math.nan
    strict = strict_frame(data, [c for c in columns if c != "valid"])
    strict.insert(0, "valid", data["valid"].astype(bool).to_numpy())
    tooltip = [
        alt.Tooltip(f"{c}:{'N' if f == '' else 'Q'}", title=t, format=f or alt.Undefined)
        for c, t, f in tooltip_cols
    ]
    concurrencies = sorted({int(c) for c in data["concurrency"]})
    x = alt.X(
        "concurrency:Q",
        title="concurrency (requests in flight)",
        scale=alt.Scale(type="log", base=2, nice=False, padding=12),
        axis=alt.Axis(values=concurrencies, format="d", labelOverlap=True),
    )
    scale = variant_scale(list(data["variant"]))
    charts = [_panel(strict, c, t, x, scale, tooltip) for c, t in panels]
    return alt.hconcat(*charts).properties(
        title=alt.TitleParams(TITLE, subtitle=subtitle, anchor="start")
    )


# ---------------------------------------------------------------------------------------------
# Entry point (called by scripts/plot_decode.py)
# ---------------------------------------------------------------------------------------------


def read_decode(path: str | os.PathLike | None) -> pd.DataFrame:
    """The decode table, or an empty frame when the file is absent or empty."""
    if path is None or not os.path.exists(path) or os.path.getsize(path) == 0:
        return pd.DataFrame()
    try:
        return read_table(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def plot_decode(
    decode_csv: str | os.PathLike,
    out_html: str | os.PathLike,
    out_png: str | os.PathLike,
    out_spec: str | os.PathLike,
) -> dict[str, Any]:
    """Save the decode figure of ``decode_csv`` as offline HTML, PNG and Vega-Lite JSON."""
    return save_chart(decode_chart(read_decode(decode_csv)), out_html, out_png, out_spec)
