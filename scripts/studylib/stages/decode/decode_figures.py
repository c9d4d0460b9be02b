"""Decode figures: throughput, power and energy per output token against concurrency
(``decode``), TPOT against the step's HBM floor with ITL and TTFT (``decode_latency``), J/token
against tok/s through each variant's concurrencies (``decode_frontier``), and the per-expert M
of SGLang's expert recorder against balanced routing (``experts``).

Inputs are the decode table (results/tables/decode.csv, one row per server variant and
concurrency) and the expert table (results/tables/expert_m.csv). Invalid rows (steady window
shorter than the configured minimum, request errors or completions of the wrong length) are
drawn hollow and faded, never as results; a machine without a power source gets throughput and
latency panels and says that no power was measured. Variants that differ only in CUDA graphs
share a hue (dark and solid: graphs on; light and dashed: graphs off), so the pair for the same
weights compares directly.
"""

from __future__ import annotations

import math
from typing import Any

import altair as alt
import pandas as pd

from ...core.charts import has_data, log_ticks, no_data_chart, strict_frame
from ...core.finding_records import text_of
from ...core.table_registry import tips
from .decode_judgements import graphs_flag, invalid_note, power_sources, valid_flag

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
#: Pairs of (graphs on, graphs off) colours, one pair per engine and weights.
PAIRED_PALETTE: tuple[tuple[str, str], ...] = (
    ("#1f5fa8", "#8fbbe6"),
    ("#d45500", "#f7b27a"),
    ("#2a8a3e", "#9ad39a"),
    ("#6a51a3", "#bcb1dc"),
    ("#8c564b", "#d0aaa2"),
    ("#555555", "#b5b5b5"),
)
GRAPHS_ON, GRAPHS_OFF = "CUDA graphs on", "CUDA graphs off"
#: strokeDash per graphs label: solid on, dashed off.
GRAPHS_DASH = {GRAPHS_ON: [1, 0], GRAPHS_OFF: [6, 3]}
#: Columns that hold measured power; all missing means no power was measured.
POWER_COLUMNS: tuple[str, ...] = ("avg_w_per_gpu", "avg_w_total", "pct_limit", "j_per_token")
TEXT_COLUMNS: tuple[str, ...] = ("engine", "variant", "power_source", "throttle_reasons",
                                 "weights", "first_error")  # fmt: skip

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
#: Tooltip rows, in order (titles and formats: tables.SHOWN["decode_table"]).
TOOLTIP: tuple[str, ...] = (
    "engine", "variant", "weights", "graphs", "concurrency", "gpus", "validity", "steady_s",
    "requests", "output_tok_s", "tpot_ms", "itl_p50_ms", "itl_p99_ms", "ttft_p50_ms",
    "hbm_floor_ms", "tpot_over_floor", "power_source", "avg_w_per_gpu", "avg_w_total",
    "pct_limit", "j_per_token", "j_per_token_net", "idle_w_per_gpu", "energy_gap_pct",
    "sm_clock_mhz", "throttle_reasons", "sm_util", "tensor_util", "dram_util",
)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def graphs_label(value: Any) -> str:
    """A ``cuda_graphs`` cell as "CUDA graphs on" / "CUDA graphs off" ("" when unknown)."""
    return {True: GRAPHS_ON, False: GRAPHS_OFF}.get(graphs_flag(value), "")


def variant_scale(variants: list[str], data: pd.DataFrame | None = None) -> alt.Scale:
    """Fixed colour per variant, shared by every panel and figure.

    With ``weights`` and ``graphs`` (from :func:`prepare`) in ``data``, the variants of one
    engine, weights and GPU count share a hue, graphs on dark and off light, in the order (engine,
    weights, on before off); otherwise sorted names → palette.
    """
    names = sorted(dict.fromkeys(variants))
    if data is not None and {"weights", "graphs"} <= set(data.columns):
        meta = data.drop_duplicates("variant").set_index("variant")
        if (meta["graphs"] != "").any():
            groups: dict[tuple[str, str, str], list[str]] = {}
            for v in names:
                engine = text_of(meta.loc[v, "engine"]) if "engine" in meta.columns else ""
                weights = text_of(meta.loc[v, "weights"])
                # One hue per engine, weights and GPU count: TP2 is not TP1's twin.
                gpus = text_of(meta.loc[v, "gpus"]) if "gpus" in meta.columns else ""
                key = (engine, weights, gpus) if weights or meta.loc[v, "graphs"] else ("", v, "")
                groups.setdefault(key, []).append(v)
            domain, colors = [], []
            for i, key in enumerate(sorted(groups)):
                dark, light = PAIRED_PALETTE[i % len(PAIRED_PALETTE)]
                order = {GRAPHS_ON: 0, "": 1, GRAPHS_OFF: 2}
                for v in sorted(groups[key], key=lambda v: (order[meta.loc[v, "graphs"]], v)):
                    domain.append(v)
                    colors.append(light if meta.loc[v, "graphs"] == GRAPHS_OFF else dark)
            return alt.Scale(domain=domain, range=colors)
    colors = [VARIANT_PALETTE[i % len(VARIANT_PALETTE)] for i in range(len(names))]
    return alt.Scale(domain=names, range=colors)


def _dash(data: pd.DataFrame) -> dict[str, Any]:
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


def _panel(
    data: pd.DataFrame,
    column: str,
    title: str,
    x: alt.X,
    color_scale: alt.Scale,
    tooltip: list[alt.Tooltip],
    extra: list | None = None,
    log_y: bool | None = None,
) -> alt.LayerChart:
    values = pd.to_numeric(data[column], errors="coerce")
    positive = values[values > 0]
    # A log axis when the values span more than 20× (and are all positive).
    if log_y is None:
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
        .encode(detail="variant:N", **_dash(data))
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
    layers = [line, valid, invalid, *(layer(base, y) for layer in extra or [])]
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


def decode_chart(decode: pd.DataFrame | None) -> alt.TopLevelMixin:
    """Per variant against concurrency (log2): tok/s, W per GPU and J per output token, from
    the decode table.

    Without any power measurement the panels are tok/s, TPOT and ITL p50 instead. Invalid
    rows are hollow and faded with the reason in the tooltip; an empty table gives a small
    chart saying "no decode runs".
    """
    df = decode
    if df is None or df.empty or "concurrency" not in df.columns:
        return no_data_chart(TITLE, "no decode runs")
    data = prepare(df)
    if data.empty:
        return no_data_chart(TITLE, "no decode runs")

    powered = has_power(data)
    panels = POWER_PANELS if powered else LATENCY_PANELS
    sources = power_sources(data)
    n_valid = int(data["valid"].sum())
    subtitle: list[str] = [_head(data)]
    if (data["graphs"] != "").any():
        subtitle.append(PAIRING)
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

    strict, tooltip, scale = _chart_frame(data, [c for c, _ in panels], powered)
    charts = [_panel(strict, c, t, _c_axis(data), scale, tooltip) for c, t in panels]
    return alt.hconcat(*charts).properties(
        title=alt.TitleParams(TITLE, subtitle=subtitle, anchor="start")
    )


#: Text columns shown in the tooltip only when some row has them (newer tables).
OPTIONAL_TEXT = ("weights", "graphs", "first_error")


def _chart_frame(
    data: pd.DataFrame, plot_cols: list[str], powered: bool
) -> tuple[pd.DataFrame, list[alt.Tooltip], alt.Scale]:
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
    extra = ["graphs", "label"] if "label" in data.columns else ["graphs"]
    strict = strict_frame(data, [c for c in columns if c != "valid"] + extra)
    strict["graphs"] = data["graphs"].to_numpy()
    strict.insert(0, "valid", data["valid"].astype(bool).to_numpy())
    tooltip = [
        alt.Tooltip(f"{c}:{'N' if f == '' else 'Q'}", title=t, format=f or alt.Undefined)
        for c, t, f in tooltip_cols
    ]
    return strict, tooltip, variant_scale(list(data["variant"]), data)


def _c_axis(data: pd.DataFrame) -> alt.X:
    concurrencies = sorted({int(c) for c in data["concurrency"]})
    return alt.X(
        "concurrency:Q",
        title="concurrency (requests in flight)",
        scale=alt.Scale(type="log", base=2, nice=False, padding=12),
        axis=alt.Axis(values=concurrencies, format="d", labelOverlap=True),
    )


def _head(data: pd.DataFrame) -> str:
    engines = sorted({e for e in data["engine"] if e})
    head = f"{len(data)} runs of {data['variant'].nunique()} variants"
    if engines:
        head += f" ({', '.join(engines)})"
    head += f"; {int(data['valid'].sum())} valid"
    if "sglang" in engines:
        head += "; SGLang variants serve dummy (random) weights"
    return head


PAIRING = "same hue: same weights and GPU count; dark, solid: CUDA graphs on; light, dashed: off"


# ---------------------------------------------------------------------------------------------
# TPOT against the HBM floor, ITL and TTFT
# ---------------------------------------------------------------------------------------------

LATENCY_TITLE = "Decode: TPOT against the step's HBM floor, inter-token latency and TTFT"


def _floor_layer(base: alt.Chart, y: alt.Y) -> alt.Chart:
    """The HBM floor of a step as a thin dotted line in the variant's colour."""
    return (
        base.mark_line(strokeWidth=1.2, strokeDash=[2, 2], opacity=0.9)
        .encode(y=alt.Y("hbm_floor_ms:Q"), detail="variant:N")
        .transform_filter("datum.valid && isValid(datum.hbm_floor_ms)")
    )


def _one_layer(base: alt.Chart, y: alt.Y) -> alt.Chart:
    return (
        alt.Chart(pd.DataFrame({"one": [1.0]}))
        .mark_rule(strokeDash=[5, 4], color="#b22222")
        .encode(y="one:Q")
    )


def decode_latency_chart(decode: pd.DataFrame | None) -> alt.TopLevelMixin:
    """Per variant against concurrency: TPOT with the step's HBM floor (dotted), TPOT over
    that floor (1 = the floor, dashed), ITL p99 and TTFT p50. Without a floor: TPOT, ITL p50,
    ITL p99 and TTFT p50."""
    df = decode
    if df is None or df.empty or "concurrency" not in df.columns:
        return no_data_chart(LATENCY_TITLE, "no decode runs")
    data = prepare(df)
    if data.empty or not has_data(data, "tpot_ms"):
        return no_data_chart(LATENCY_TITLE, "no decode runs with a TPOT")
    floor = has_data(data, "hbm_floor_ms") and has_data(data, "tpot_over_floor")
    subtitle = [_head(data)]
    if floor:
        panels = [("tpot_ms", "TPOT (ms); dotted: HBM floor of a step"),
                  ("tpot_over_floor", "TPOT ÷ HBM floor (1 = at the floor)"),
                  ("itl_p99_ms", "inter-token latency p99 (ms)"),
                  ("ttft_p50_ms", "time to first token p50 (ms)")]  # fmt: skip
        subtitle.append("HBM floor: bytes a decode step must read (weights of the experts the "
                        "routing touches, attention, lm_head, KV cache) over the measured copy "
                        "bandwidth")  # fmt: skip
    else:
        panels = [("tpot_ms", "TPOT (ms)"), ("itl_p50_ms", "inter-token latency p50 (ms)"),
                  ("itl_p99_ms", "inter-token latency p99 (ms)"),
                  ("ttft_p50_ms", "time to first token p50 (ms)")]  # fmt: skip
        subtitle.append("no HBM floor in this table (no step_gb or measured copy bandwidth)")
    if (data["graphs"] != "").any():
        subtitle.append(PAIRING)
    strict, tooltip, scale = _chart_frame(data, [c for c, _ in panels], has_power(data))
    if floor:
        strict["hbm_floor_ms"] = pd.to_numeric(data["hbm_floor_ms"], errors="coerce").to_numpy()
    charts = []
    for column, title in panels:
        extra = []
        if column == "tpot_ms" and floor:
            extra = [_floor_layer]
        elif column == "tpot_over_floor":
            extra = [_one_layer]
        panel = _panel(strict, column, title, _c_axis(data), scale, tooltip, extra,
                       log_y=True if column == "tpot_over_floor" else None)  # fmt: skip
        charts.append(panel.properties(width=250, height=220))
    return alt.hconcat(*charts).properties(
        title=alt.TitleParams(LATENCY_TITLE, subtitle=subtitle, anchor="start")
    )


# ---------------------------------------------------------------------------------------------
# J/token against tok/s
# ---------------------------------------------------------------------------------------------

FRONTIER_TITLE = "Decode: energy per output token against throughput, through each concurrency"


def _frontier_panel(
    strict: pd.DataFrame, column: str, title: str, scale: alt.Scale, tooltip: list
) -> alt.LayerChart:
    values = pd.to_numeric(strict[column], errors="coerce")
    tok = pd.to_numeric(strict["output_tok_s"], errors="coerce")
    log_y = bool((values.dropna() > 0).all() and values.notna().any())
    x = alt.X("output_tok_s:Q", title="output tokens/s", scale=alt.Scale(type="log"),
              axis=alt.Axis(values=log_ticks(tok), grid=True))  # fmt: skip
    y = alt.Y(
        f"{column}:Q",
        title=title,
        scale=alt.Scale(type="log") if log_y else alt.Scale(zero=True),
        axis=alt.Axis(values=log_ticks(values), grid=True) if log_y else alt.Axis(),
    )
    legend = alt.Legend(orient="bottom", title="server variant", labelLimit=400)
    color = alt.Color("variant:N", scale=scale, legend=legend)
    ok = f"isValid(datum.{column}) && isValid(datum.output_tok_s) && datum.output_tok_s > 0"
    if log_y:
        ok += f" && datum.{column} > 0"
    base = alt.Chart(strict).encode(x=x, y=y, color=color).transform_filter(ok)
    return alt.layer(
        base.mark_line(strokeWidth=1.8)
        .encode(order="concurrency:Q", detail="variant:N", **_dash(strict))
        .transform_filter("datum.valid"),
        base.mark_point(size=60, filled=True).encode(tooltip=tooltip)
        .transform_filter("datum.valid"),
        base.mark_point(size=80, filled=False, opacity=0.55, strokeWidth=1.6)
        .encode(tooltip=tooltip).transform_filter("!datum.valid"),
        base.mark_text(align="left", dx=6, dy=-7, fontSize=9).encode(text="label:N")
        .transform_filter("datum.valid"),
    ).properties(width=520, height=360)  # fmt: skip


def decode_frontier_chart(decode: pd.DataFrame | None) -> alt.TopLevelMixin:
    """J/token against tok/s, one line per variant through its concurrencies (points labelled
    with C); a second panel with J/token net of the idle draw where the table has it. Lower
    right is better: more tokens per second for fewer joules each."""
    df = decode
    if df is None or df.empty or "concurrency" not in df.columns:
        return no_data_chart(FRONTIER_TITLE, "no decode runs")
    data = prepare(df)
    if data.empty:
        return no_data_chart(FRONTIER_TITLE, "no decode runs")
    if not (has_power(data) and has_data(data, "j_per_token")):
        sources = ", ".join(power_sources(data))
        return no_data_chart(FRONTIER_TITLE, f"no power measured on this machine (power_source "
                                              f"{sources}): no J/token to draw")  # fmt: skip
    data["label"] = ["C=" + str(int(c)) for c in data["concurrency"]]
    panels = [("j_per_token", "energy per output token (J)")]
    if has_data(data, "j_per_token_net"):
        panels.append(("j_per_token_net", "J per output token, net of the idle draw"))
    strict, tooltip, scale = _chart_frame(data, ["output_tok_s", *[c for c, _ in panels]], True)
    subtitle = [_head(data), "lower right is better: more tokens/s for fewer joules each; "
                "labels: concurrency C"]  # fmt: skip
    if (data["graphs"] != "").any():
        subtitle.append(PAIRING)
    if not data["valid"].all():
        subtitle.append("hollow, faded points: invalid runs, not results (no line through them)")
    charts = [_frontier_panel(strict, c, t, scale, tooltip) for c, t in panels]
    return alt.hconcat(*charts).properties(
        title=alt.TitleParams(FRONTIER_TITLE, subtitle=subtitle, anchor="start")
    )
