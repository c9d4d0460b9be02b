"""Question 5's figure (``decode``, on the report's first screen): per server variant against
concurrency C, TPOT and energy per output token, CUDA graphs on over off (TPOT and J/token),
and power per GPU with the power limit. The latency and frontier views are in
:mod:`.decode_view_figures`; the helpers here (the prepared table, the C axis, a panel) serve
both.

Input: the decode table (results/tables/decode.csv, one row per variant and C). Invalid rows
(steady window shorter than the minimum, request errors, completions of the wrong length, a
client that fell behind the scheduler) are drawn hollow and faded, never as results, and no
line runs through them. Every variant keeps one colour in every decode chart
(:mod:`.decode_colors`); CUDA graphs off is dashed. Nothing is labelled on the points (the
tooltips carry every value), so no label overlaps another.
"""

from __future__ import annotations

import math
from typing import Any

import altair as alt
import pandas as pd

from ...core.charts import has_data, log_ticks, no_data_chart, strict_frame
from ...core.finding_records import text_of
from ...core.table_registry import tips
from . import decode_tables  # noqa: F401 - registers the columns the tooltips show
from .decode_colors import variant_scale
from .decode_judgements import (
    graphs_flag,
    graphs_pairs,
    invalid_note,
    power_sources,
    start_failure,
    valid_flag,
)

TITLE = "Decode: TPOT, energy per token and power against concurrency, CUDA graphs on and off"
GRAPHS_ON, GRAPHS_OFF = "CUDA graphs on", "CUDA graphs off"
#: strokeDash per graphs label: solid on, dashed off.
GRAPHS_DASH = {GRAPHS_ON: [1, 0], GRAPHS_OFF: [6, 3]}
#: Columns that hold measured power; all missing means no power was measured.
POWER_COLUMNS: tuple[str, ...] = ("avg_w_per_gpu", "avg_w_total", "pct_limit", "j_per_token")
TEXT_COLUMNS: tuple[str, ...] = ("engine", "variant", "power_source", "throttle_reasons",
                                 "weights", "first_error")  # fmt: skip
#: Panel size (two a row: the figure stays within a 1400-px page).
WIDTH, HEIGHT = 330, 190
LIMIT_COLOR = "#b22222"

#: Tooltip rows, in order (titles and formats: tables.SHOWN["decode_table"]).
TOOLTIP: tuple[str, ...] = (
    "engine", "variant", "weights", "graphs", "concurrency", "gpus", "validity", "steady_s",
    "requests", "output_tok_s", "tpot_ms", "itl_p50_ms", "itl_p99_ms", "ttft_p50_ms",
    "hbm_floor_ms", "tpot_over_floor", "power_source", "avg_w_per_gpu", "avg_w_total",
    "pct_limit", "j_per_token", "j_per_token_net", "idle_w_per_gpu", "energy_gap_pct",
    "sm_clock_mhz", "throttle_reasons", "sm_util", "tensor_util", "dram_util",
)  # fmt: skip
#: Text columns shown in the tooltip only when some row has them (newer tables).
OPTIONAL_TEXT = ("weights", "graphs", "first_error")


# ---------------------------------------------------------------------------------------------
# Helpers shared with the latency and frontier views
# ---------------------------------------------------------------------------------------------


def graphs_label(value: Any) -> str:
    """A ``cuda_graphs`` cell as "CUDA graphs on" / "CUDA graphs off" ("" when unknown)."""
    return {True: GRAPHS_ON, False: GRAPHS_OFF}.get(graphs_flag(value), "")


def dash(data: pd.DataFrame) -> dict[str, Any]:
    """strokeDash by CUDA graphs (solid on, dashed off) when the table says which ran."""
    if "graphs" not in data.columns or not (data["graphs"].fillna("") != "").any():
        return {}
    present = [g for g in GRAPHS_DASH if g in set(data["graphs"])]
    return {
        "strokeDash": alt.StrokeDash(
            "graphs:N",
            scale=alt.Scale(domain=present, range=[GRAPHS_DASH[g] for g in present]),
            legend=alt.Legend(orient="bottom", title="CUDA graphs"),
        )
    }


def has_power(df: pd.DataFrame) -> bool:
    """Whether any row carries a power measurement."""
    return any(has_data(df, c) for c in POWER_COLUMNS)


def prepare(df: pd.DataFrame) -> pd.DataFrame:
    """The decode table with clean text, ``valid`` as bool and a ``validity`` note per row."""
    out = df.copy().reset_index(drop=True)
    for column in TEXT_COLUMNS:
        if column not in out.columns:
            out[column] = ""
        out[column] = out[column].map(text_of)
    out["power_source"] = out["power_source"].replace("", "none")
    out["valid"] = [valid_flag(v) for v in out.get("valid", pd.Series(False, index=out.index))]
    graphs = out["cuda_graphs"] if "cuda_graphs" in out.columns else pd.Series("", index=out.index)
    out["graphs"] = [graphs_label(v) for v in graphs]
    notes = [invalid_note(rec) for rec in out.to_dict("records")]
    out["validity"] = [n or "valid" for n in notes]
    out["concurrency"] = pd.to_numeric(out.get("concurrency"), errors="coerce")
    out = out[out["concurrency"] > 0]
    return out.sort_values(["variant", "concurrency"]).reset_index(drop=True)


def variant_color(scale: alt.Scale, title: str = "server variant") -> alt.Color:
    """The colour channel of every decode panel: the variant, in its fixed colour."""
    legend = alt.Legend(orient="bottom", title=title, labelLimit=400, columns=4)
    return alt.Color("variant:N", scale=scale, legend=legend)


def y_axis(values: pd.Series, column: str, title: str, log_y: bool | None = None) -> alt.Y:
    """A y axis, logarithmic where the positive values span more than 20× (or ``log_y``)."""
    values = pd.to_numeric(values, errors="coerce")
    positive = values[values > 0]
    if log_y is None:
        log_y = bool(not positive.empty and len(positive) == values.notna().sum()
                     and positive.max() / positive.min() > 20)  # fmt: skip
    return alt.Y(
        f"{column}:Q",
        title=title,
        scale=alt.Scale(type="log") if log_y else alt.Scale(zero=True),
        axis=alt.Axis(values=log_ticks(positive), grid=True) if log_y else alt.Axis(),
    )


def panel(data: pd.DataFrame, column: str, title: str, x: alt.X, scale: alt.Scale,
          tooltip: list[alt.Tooltip], extra: list | None = None,
          log_y: bool | None = None) -> alt.LayerChart:  # fmt: skip
    """One measure per variant against ``x``: a line through the valid points, filled valid
    points, hollow faded invalid ones; ``extra`` layers are ``f(base, y)``."""
    y = y_axis(data[column], column, title, log_y)
    base = alt.Chart(data).encode(x=x, y=y, color=variant_color(scale))
    ok = f"isValid(datum.{column})"
    line = (base.mark_line(strokeWidth=1.8).encode(detail="variant:N", **dash(data))
            .transform_filter(f"datum.valid && {ok}"))  # fmt: skip
    valid = (base.mark_point(size=55, filled=True, opacity=1).encode(tooltip=tooltip)
             .transform_filter(f"datum.valid && {ok}"))  # fmt: skip
    invalid = (base.mark_point(size=75, filled=False, opacity=0.55, strokeWidth=1.6)
               .encode(tooltip=tooltip).transform_filter(f"!datum.valid && {ok}"))  # fmt: skip
    layers = [line, valid, invalid, *(layer(base, y) for layer in extra or [])]
    return alt.layer(*layers).properties(width=WIDTH, height=HEIGHT)


def chart_frame(data: pd.DataFrame, plot_cols: list[str],
                powered: bool) -> tuple[pd.DataFrame, list[alt.Tooltip], alt.Scale]:  # fmt: skip
    """The strict (JSON-safe) frame of the prepared table, its tooltip and colour scale."""
    tooltip_cols = [
        (c, t, f)
        for c, t, f in tips("decode_table", TOOLTIP)
        if c in data.columns
        and (f == "" or has_data(data, c) or c == "concurrency")
        and (c not in OPTIONAL_TEXT or (data[c].fillna("") != "").any())
    ]
    if not powered:
        tooltip_cols = [t for t in tooltip_cols if t[0] not in POWER_COLUMNS]
    columns = ["valid", *dict.fromkeys([c for c, _, _ in tooltip_cols] + plot_cols)]
    for column in plot_cols:
        if column not in data.columns:
            data[column] = math.nan
    strict = strict_frame(data, [c for c in columns if c != "valid"] + ["graphs"])
    strict["graphs"] = data["graphs"].to_numpy()
    strict.insert(0, "valid", data["valid"].astype(bool).to_numpy())
    tooltip = [
        alt.Tooltip(f"{c}:{'N' if f == '' else 'Q'}", title=t, format=f or alt.Undefined)
        for c, t, f in tooltip_cols
    ]
    return strict, tooltip, variant_scale(data["variant"])


def c_axis(data: pd.DataFrame, title: str = "concurrency C (requests in flight)") -> alt.X:
    concurrencies = sorted({int(c) for c in data["concurrency"]})
    return alt.X(
        "concurrency:Q",
        title=title,
        scale=alt.Scale(type="log", base=2, nice=False, padding=12),
        axis=alt.Axis(values=concurrencies, format="d", labelOverlap=True),
    )


def head(data: pd.DataFrame) -> str:
    engines = sorted({e for e in data["engine"] if e})
    text = f"{len(data)} runs of {data['variant'].nunique()} variants"
    if engines:
        text += f" ({', '.join(engines)})"
    text += f"; {int(data['valid'].sum())} valid"
    if "sglang" in engines:
        text += "; SGLang variants serve dummy (random) weights"
    return text


PAIRING = "one colour per variant in every decode chart; solid: CUDA graphs on, dashed: off"
INVALID = "hollow, faded points: invalid runs (reason in the tooltip), not results"


# ---------------------------------------------------------------------------------------------
# The first-screen figure
# ---------------------------------------------------------------------------------------------


def ratio_frame(decode: pd.DataFrame) -> pd.DataFrame:
    """CUDA graphs on over off per pair and C (valid windows only: decode_judgements'
    graphs_pairs), TPOT and J/token in long form, coloured by the graphs-on variant."""
    pairs = graphs_pairs(decode)
    rows = []
    for rec in pairs.to_dict("records"):
        for measure, column in (("TPOT", "tpot_ratio"), ("J/token", "j_ratio")):
            ratio = pd.to_numeric(pd.Series([rec[column]]), errors="coerce").iloc[0]
            if ratio > 0:
                rows.append({"variant": rec["variant_on"], "off": rec["variant_off"],
                             "concurrency": int(rec["concurrency"]), "measure": measure,
                             "ratio": float(ratio)})  # fmt: skip
    return pd.DataFrame(rows, columns=["variant", "off", "concurrency", "measure", "ratio"])


def _ratio_panel(ratios: pd.DataFrame, x: alt.X, scale: alt.Scale) -> alt.LayerChart:
    """On ÷ off per pair against C: TPOT solid with circles, J/token dotted with squares;
    1 = no change. (Not a dash encoding: the figure's dashes say CUDA graphs off.)"""
    y = y_axis(ratios["ratio"], "ratio", "CUDA graphs on ÷ off (below 1: graphs lower it)",
               log_y=True)  # fmt: skip
    measures = [m for m in ("TPOT", "J/token") if m in set(ratios["measure"])]
    shapes = {"TPOT": "circle", "J/token": "square"}
    base = alt.Chart(strict_frame(ratios, list(ratios.columns))).encode(
        x=x, y=y, color=variant_color(scale),
        tooltip=[alt.Tooltip("variant:N", title="graphs on"),
                 alt.Tooltip("off:N", title="graphs off"),
                 alt.Tooltip("concurrency:Q", format="d"), alt.Tooltip("measure:N"),
                 alt.Tooltip("ratio:Q", title="on ÷ off", format=".2f")],
    )  # fmt: skip
    shape = alt.Shape("measure:N", scale=alt.Scale(domain=measures,
                                                   range=[shapes[m] for m in measures]),
                      legend=alt.Legend(orient="bottom", title="on ÷ off of"))  # fmt: skip
    one = alt.Chart(pd.DataFrame({"one": [1.0]})).mark_rule(color="#555", strokeDash=[2, 2])
    return alt.layer(
        base.mark_line(strokeWidth=1.8).encode(detail="variant:N")
        .transform_filter("datum.measure == 'TPOT'"),
        base.mark_line(strokeWidth=1.4, strokeDash=[2, 2]).encode(detail="variant:N")
        .transform_filter("datum.measure == 'J/token'"),
        base.mark_point(size=50, filled=True, opacity=1).encode(shape=shape),
        one.encode(y="one:Q"),
    ).properties(width=WIDTH, height=HEIGHT)  # fmt: skip


def _limit_layer(base: alt.Chart, y: alt.Y) -> alt.LayerChart:
    """The power limit (W per GPU × 100 / % of the limit: one value per GPU kind) as a dashed
    rule, labelled once at its right end."""
    has_pct = "datum.valid && isValid(datum.avg_w_per_gpu) && datum.pct_limit > 0"
    limit = (
        base.transform_filter(has_pct)
        .transform_calculate(limit_w="datum.avg_w_per_gpu * 100 / datum.pct_limit")
        .transform_aggregate(limit_w="max(limit_w)")
    )
    rule = limit.mark_rule(strokeDash=[5, 4], color=LIMIT_COLOR).encode(
        y=alt.Y("limit_w:Q"), x=alt.value(0), x2=alt.value(WIDTH), color=alt.value(LIMIT_COLOR)
    )
    label = (limit.transform_calculate(text="'power limit ' + format(datum.limit_w, '.0f') + ' W'")
             .mark_text(align="right", dy=-6, fontSize=10, color=LIMIT_COLOR)
             .encode(y=alt.Y("limit_w:Q"), x=alt.value(WIDTH), text="text:N",
                     color=alt.value(LIMIT_COLOR)))  # fmt: skip
    return alt.layer(rule, label)


def decode_chart(decode: pd.DataFrame | None) -> alt.TopLevelMixin:
    """Per variant against C (log2): TPOT, J per output token, CUDA graphs on ÷ off (TPOT and
    J/token per pair) and W per GPU with the power limit; two panels a row. Without any power
    measurement: TPOT, on ÷ off of TPOT and tok/s. An empty table gives a small chart saying
    "no decode runs"."""
    if decode is None or decode.empty or "concurrency" not in decode.columns:
        return no_data_chart(TITLE, "no decode runs")
    data = prepare(decode)
    if data.empty:
        return no_data_chart(TITLE, "no decode runs")
    powered = has_power(data)
    ratios = ratio_frame(decode)
    if not powered:
        ratios = ratios[ratios["measure"] == "TPOT"]
    subtitle = [head(data)]
    if (data["graphs"] != "").any():
        subtitle.append(PAIRING)
    if powered:
        subtitle.append("power and energy over each steady window; tooltip: clocks, reasons, "
                        "utilisation")  # fmt: skip
        if "rapl" in power_sources(data):
            subtitle.append("rapl: CPU package power, not a GPU's")
    else:
        subtitle.append("no power measured on this machine (power_source "
                        f"{', '.join(power_sources(data))})")  # fmt: skip
    if not data["valid"].all():
        subtitle.append(INVALID if data["valid"].any() else "no valid run: every row is invalid")
    undrawn = data[pd.to_numeric(data.get("tpot_ms"), errors="coerce").isna()] \
        if "tpot_ms" in data.columns else data  # fmt: skip
    if not undrawn.empty:
        names = []
        for variant, rows in undrawn.groupby("variant", sort=False):
            if start_failure(rows) and len(rows) == (data["variant"] == variant).sum():
                names.append(f"{variant} (its server did not start)")  # once, not per C
            else:
                names += [f"{variant} C={int(c)}" for c in rows["concurrency"]]
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        subtitle.append(f"not drawn (no steady window measured): {shown}")
    columns = ["tpot_ms", *(["j_per_token", "avg_w_per_gpu"] if powered else ["output_tok_s"])]
    strict, tooltip, scale = chart_frame(data, columns, powered)
    x = c_axis(data)
    tpot = panel(strict, "tpot_ms", "TPOT (ms)", x, scale, tooltip)
    ratio = (_ratio_panel(ratios, x, scale) if len(ratios) else
             no_data_panel_for("no variant ran with CUDA graphs both on and off"))  # fmt: skip
    if powered:
        energy = panel(strict, "j_per_token", "energy per output token (J)", x, scale, tooltip)
        extra = [_limit_layer] if "pct_limit" in strict.columns else []
        watts = panel(strict, "avg_w_per_gpu", "average power per GPU (W)", x, scale, tooltip,
                      extra, log_y=False)  # fmt: skip
        rows = [alt.hconcat(tpot, energy), alt.hconcat(ratio, watts)]
    else:
        tok = panel(strict, "output_tok_s", "output tokens/s", x, scale, tooltip)
        rows = [alt.hconcat(tpot, tok), alt.hconcat(ratio)]
    return (
        alt.vconcat(*rows)
        .resolve_scale(color="shared")
        .properties(title=alt.TitleParams(TITLE, subtitle=subtitle, anchor="start"))
    )


def no_data_panel_for(reason: str) -> alt.Chart:
    """A panel of the figure that has nothing to draw, saying why (its size kept)."""
    return (alt.Chart(pd.DataFrame({"text": [reason]})).mark_text(color="#777", fontSize=12)
            .encode(text="text:N").properties(width=WIDTH, height=HEIGHT,
                                              title="CUDA graphs on ÷ off"))  # fmt: skip
