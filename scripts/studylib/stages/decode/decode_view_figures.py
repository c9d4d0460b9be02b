"""Two more views of the decode table (question 5's section): TPOT against the step's HBM
floor with ITL and TTFT (``decode_latency``), and J/token against tok/s through each
variant's concurrencies (``decode_frontier``). Same colours, dashes, invalid points and
helpers as question 5's figure (:mod:`.decode_figures`); two panels a row."""

from __future__ import annotations

import altair as alt
import pandas as pd

from ...core.charts import has_data, log_ticks, no_data_chart
from .decode_figures import (
    HEIGHT,
    INVALID,
    PAIRING,
    WIDTH,
    c_axis,
    chart_frame,
    dash,
    has_power,
    head,
    panel,
    prepare,
    variant_color,
)
from .decode_judgements import power_sources

LATENCY_TITLE = "Decode: TPOT against the step's HBM floor, inter-token latency and TTFT"
FRONTIER_TITLE = "Decode: energy per output token against throughput, through each concurrency"


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
    if decode is None or decode.empty or "concurrency" not in decode.columns:
        return no_data_chart(LATENCY_TITLE, "no decode runs")
    data = prepare(decode)
    if data.empty or not has_data(data, "tpot_ms"):
        return no_data_chart(LATENCY_TITLE, "no decode runs with a TPOT")
    floor = has_data(data, "hbm_floor_ms") and has_data(data, "tpot_over_floor")
    subtitle = [head(data)]
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
    if not data["valid"].all():
        subtitle.append(INVALID)
    strict, tooltip, scale = chart_frame(data, [c for c, _ in panels], has_power(data))
    if floor:
        strict["hbm_floor_ms"] = pd.to_numeric(data["hbm_floor_ms"], errors="coerce").to_numpy()
    charts = []
    for column, title in panels:
        extra = []
        if column == "tpot_ms" and floor:
            extra = [_floor_layer]
        elif column == "tpot_over_floor":
            extra = [_one_layer]
        charts.append(panel(strict, column, title, c_axis(data), scale, tooltip, extra,
                            log_y=True if column == "tpot_over_floor" else None))  # fmt: skip
    return alt.vconcat(alt.hconcat(*charts[:2]), alt.hconcat(*charts[2:])).properties(
        title=alt.TitleParams(LATENCY_TITLE, subtitle=subtitle, anchor="start")
    )


def _frontier_panel(strict: pd.DataFrame, column: str, title: str, scale: alt.Scale,
                    tooltip: list) -> alt.LayerChart:  # fmt: skip
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
    ok = f"isValid(datum.{column}) && isValid(datum.output_tok_s) && datum.output_tok_s > 0"
    if log_y:
        ok += f" && datum.{column} > 0"
    base = alt.Chart(strict).encode(x=x, y=y, color=variant_color(scale)).transform_filter(ok)
    # C grows along each line (its points' size too); its value is in the tooltip: a text
    # label per point overlapped the next variant's wherever two variants ran alike.
    # The legend names the Cs that ran, not the scale's round values (it showed 4, never run).
    ran = sorted({int(c) for c in pd.to_numeric(strict["concurrency"], errors="coerce").dropna()})
    size = alt.Size("concurrency:Q", scale=alt.Scale(type="log", base=2, range=[25, 160]),
                    legend=alt.Legend(orient="bottom", title="concurrency C",
                                      values=ran))  # fmt: skip
    return alt.layer(
        base.mark_line(strokeWidth=1.8)
        .encode(order="concurrency:Q", detail="variant:N", **dash(strict))
        .transform_filter("datum.valid"),
        base.mark_point(filled=True).encode(size=size, tooltip=tooltip)
        .transform_filter("datum.valid"),
        base.mark_point(filled=False, opacity=0.55, strokeWidth=1.6)
        .encode(size=size, tooltip=tooltip).transform_filter("!datum.valid"),
    ).properties(width=WIDTH, height=HEIGHT + 60)  # fmt: skip


def decode_frontier_chart(decode: pd.DataFrame | None) -> alt.TopLevelMixin:
    """J/token against tok/s, one line per variant through its concurrencies (point size:
    C); a second panel with J/token net of the idle draw where the table has it. Lower right
    is better: more tokens per second for fewer joules each."""
    if decode is None or decode.empty or "concurrency" not in decode.columns:
        return no_data_chart(FRONTIER_TITLE, "no decode runs")
    data = prepare(decode)
    if data.empty:
        return no_data_chart(FRONTIER_TITLE, "no decode runs")
    if not (has_power(data) and has_data(data, "j_per_token")):
        sources = ", ".join(power_sources(data))
        return no_data_chart(FRONTIER_TITLE, f"no power measured on this machine (power_source "
                                              f"{sources}): no J/token to draw")  # fmt: skip
    panels = [("j_per_token", "energy per output token (J)")]
    if has_data(data, "j_per_token_net"):
        panels.append(("j_per_token_net", "J per output token, net of the idle draw"))
    strict, tooltip, scale = chart_frame(data, ["output_tok_s", *[c for c, _ in panels]], True)
    subtitle = [head(data), "lower right is better: more tokens/s for fewer joules each; "
                "point size: concurrency C (tooltip: its value)"]  # fmt: skip
    if (data["graphs"] != "").any():
        subtitle.append(PAIRING)
    if not data["valid"].all():
        subtitle.append("hollow, faded points: invalid runs, not results (no line through them)")
    charts = [_frontier_panel(strict, c, t, scale, tooltip) for c, t in panels]
    return alt.hconcat(*charts).properties(
        title=alt.TitleParams(FRONTIER_TITLE, subtitle=subtitle, anchor="start")
    )
