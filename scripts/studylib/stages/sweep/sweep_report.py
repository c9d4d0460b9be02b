"""The sweep's report sections: the sweep table (cells, sort keys, filters, columns shown),
"Fastest per size" (tables/fastest.csv laid out: nothing is ranked here) and "Before and
after", this run's sweep against a baseline (sweep_compare)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ...core.answer_records import fmt_share
from ...core.charts import backend_color
from ...core.formats import Column, fmt_us, labelled
from ...core.report_cells import (
    clean_text_columns,
    dash,
    embedded_downloads,
    fmt_sig,
    fmt_sig_us,
    is_missing,
    long_text,
)
from ...core.table_registry import read_optional
from .sweep_compare import MODES, summary
from .sweep_ranking import (
    GEMM,
    MODE_MEANS,
    RANK_RULE,
    dtype_name,
    dtype_rank,
    fastest_frame,
    rank_sweep,
)
from .sweep_schema import FASTEST, SWEEP_SHOWN
from .sweep_thresholds import EXPERT_SHAPE, EXPERT_SHAPE_BEFORE

#: Sweep-table columns shown with 3 significant figures (times: :func:`fmt_sig_us`).
SIG3_COLUMNS = frozenset({"tflops", "gbps"})


#: The sweep table's filters: (column, label), as select boxes above it.
SWEEP_FILTERS = (("backend", "backend"), ("op", "op"), ("dtype", "dtype"), ("status", "status"))


#: Sweep table columns always shown; the others only when they hold data.
ALWAYS_SHOWN = {"backend", "impl", "op", "dtype", "shape", "M", "N", "K", "status", "eager_us"}


def _sweep_column(column: str) -> Column:
    return SWEEP_SHOWN.get(column) or Column(column, ".4g")


def _parse_cell(column: str, value: Any) -> float | str | None:
    """None when missing; text for text columns and non-numbers; else the number."""
    if is_missing(value):
        return None
    if _sweep_column(column).fmt is None:
        return str(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def fmt_cell(column: str, value: Any) -> str:
    """Readable text for a sweep-table cell ('' when missing)."""
    v = _parse_cell(column, value)
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if column == "efficiency" and v > 2:  # not a fraction: shown plainly
        return f"{v:.2f}"
    if column in SIG3_COLUMNS:
        return fmt_sig(v, 3)
    if _sweep_column(column).fmt == "us":
        return fmt_sig_us(v)
    return _sweep_column(column).text(v)


def sort_key(column: str, value: Any) -> str:
    """Value used by the table's client-side sort (numbers as plain decimals)."""
    v = _parse_cell(column, value)
    if v is None:
        return ""
    return v if isinstance(v, str) else repr(v)


def sweep_table(sweep: pd.DataFrame) -> dict[str, Any]:
    """The sweep table's columns, formatted rows (each with its filter values) and the
    filters' choices: the distinct values of :data:`SWEEP_FILTERS` columns."""
    if sweep.empty:
        return {"columns": [], "rows": [], "filters": [], "n_unsupported": 0}
    columns = [
        (c, col.label)
        for c, col in labelled(SWEEP_SHOWN)
        if c in sweep.columns and (c in ALWAYS_SHOWN or sweep[c].replace("", pd.NA).notna().any())
    ]
    rows = []
    for rec in sweep.to_dict("records"):
        cells = []
        for column, _ in columns:
            value = rec.get(column)
            cell = {"key": sort_key(column, value), "num": _sweep_column(column).fmt is not None}
            if column == "error":
                cell["long"] = long_text(value, 80)
            else:
                cell["text"] = fmt_cell(column, value)
            cells.append(cell)
        rows.append(
            {
                "status": str(rec.get("status", "")),
                "cells": cells,
                "filter": {c: str(dash(rec.get(c, ""))) for c, _ in SWEEP_FILTERS},
            }
        )
    filters = [(c, label, sorted({r["filter"][c] for r in rows})) for c, label in SWEEP_FILTERS]
    return {
        "columns": columns,
        "rows": rows,
        "filters": filters,
        "n_unsupported": sum(1 for r in rows if r["status"] == "unsupported"),
    }


def compare_section(paths: dict[str, Any], charts: list[dict[str, Any]],
                    out_html) -> dict[str, Any] | None:  # fmt: skip
    """The "Before and after" section: the summary per mode, the chart, and the points that
    changed most (all of them in the embedded table download); None without a comparison."""
    path = paths.get("compare")
    if path is None:
        return None

    table = read_optional(path)
    rows, mode = [], None
    if not table.empty:
        table = clean_text_columns(table, ("backend", "impl", "op", "dtype", "shape", "mode",
                                           "verdict"))  # fmt: skip
        mode = next(m for m in MODES if m in set(table["mode"]))
        shown = table[table["mode"] == mode].copy()
        shown["size"] = (shown["speedup"].astype(float)).apply(lambda v: abs(math.log(v)))
        for rec in shown.sort_values("size", ascending=False).head(COMPARE_ROWS).to_dict("records"):
            rows.append({
                "who": f"{rec['backend']} · {rec['impl']}",
                "what": f"{rec['op']} {rec['dtype']} {rec['shape']} (N {rec['N']}, K {rec['K']})",
                "M": int(rec["M"]),
                "baseline": fmt_sig_us(float(rec["baseline_us"])),
                "current": fmt_sig_us(float(rec["current_us"])),
                "speedup": f"{float(rec['speedup']):.3f}×",
                "change": f"{float(rec['change_pct']):+.1f} %",
                "verdict": rec["verdict"],
            })  # fmt: skip
    return {
        "lines": summary(table) if not table.empty else [],
        "mode": mode,
        "rows": rows,
        "points": len(table),
        "chart": next((c for c in charts if c["kind"] == "compare"), None),
        "downloads": embedded_downloads([path], out_html),
    }


#: Rows of the "Before and after" table: the points whose time changed most.
COMPARE_ROWS = 40


# ---------------------------------------------------------------------------------------------
# Fastest per size
# ---------------------------------------------------------------------------------------------


def fastest_rankings(path, sweep: pd.DataFrame) -> pd.DataFrame:
    """tables/fastest.csv (rule answers); where a results folder has none, or one of the
    columns before the rankings per mode, the same ranking run here on its sweep (without a
    comparison: the IQR alone is the noise)."""
    frame = read_optional(path) if path is not None else pd.DataFrame()
    if frame.empty or not set(FASTEST) <= set(frame.columns):
        frame = fastest_frame(rank_sweep(sweep))
    return frame


def short_names(names) -> dict[str, str]:
    """name -> the name without its backend ("flashinfer·cublaslt" -> "cublaslt") where that
    is unique among ``names``; else the name."""
    names = sorted(set(names))
    rest = {n: n.split("·", 1)[-1] for n in names}
    counts = pd.Series(list(rest.values()), dtype=object).value_counts()
    return {n: r if counts[r] == 1 else n for n, r in rest.items()}


def _shape_order(family: str, shape: str) -> tuple:
    return (family != GEMM, shape not in (EXPERT_SHAPE, EXPERT_SHAPE_BEFORE), shape)


def fastest_table(fastest: pd.DataFrame) -> dict[str, Any] | None:
    """The rankings per size laid out for reading: per timing mode and dtype a table of M
    (rows) by shape (columns), each cell the tied fastest by short name (a legend beside) with
    the fastest's time; the runner-up, margin and noise in its tooltip."""
    if fastest is None or fastest.empty:
        return None
    df = clean_text_columns(fastest.copy(), ("family", "dtype", "shape", "mode", "tied",
                                             "fastest", "backend", "runner_up", "noise_from",
                                             "status"))  # fmt: skip
    df["M"] = pd.to_numeric(df["M"], errors="coerce")
    df = df[df["M"].notna()]
    modes = []
    for mode in [m for m in MODES if m in set(df["mode"])]:
        tables = []
        at_mode = df[df["mode"] == mode]
        for dtype in sorted(set(at_mode["dtype"]), key=dtype_rank):
            rows = at_mode[at_mode["dtype"] == dtype]
            everyone = {n for tied in rows["tied"] for n in tied.split(" = ") if n}
            short = short_names(everyone)
            shapes = sorted({(f, s) for f, s in zip(rows["family"], rows["shape"], strict=True)},
                            key=lambda fs: _shape_order(*fs))  # fmt: skip
            cells = {(r["family"], r["shape"], int(r["M"])): r for r in rows.to_dict("records")}
            body = []
            for m in sorted({int(m) for m in rows["M"]}):
                body.append({"M": m, "cells": [_fastest_cell(cells.get((f, s, m)), short)
                                               for f, s in shapes]})  # fmt: skip
            legend = [{"short": short[n], "name": n, "color": backend_color(n.split("·")[0])}
                      for n in sorted(everyone, key=lambda n: short[n])]  # fmt: skip
            tables.append({"dtype": dtype_name(dtype), "shapes": [s for _, s in shapes],
                           "rows": body, "legend": legend})  # fmt: skip
        modes.append({"mode": mode, "means": MODE_MEANS.get(mode, ""), "tables": tables})
    return {"rule": RANK_RULE, "modes": modes}


#: A tied cell's border: a tie names no backend.
TIE_COLOR = "#b0b0b0"


def _fastest_cell(rec: dict | None, short: dict[str, str]) -> dict[str, Any] | None:
    if rec is None:
        return None
    tied = [n for n in rec["tied"].split(" = ") if n]
    title = f"{' = '.join(tied)}: {fmt_us(float(rec['fastest_us']))}"
    if rec.get("runner_up"):
        title += (
            f"; next {rec['runner_up']} {fmt_us(float(rec['runner_up_us']))}, "
            f"{fmt_share(float(rec['margin']))} behind against "
            f"{fmt_share(float(rec['noise']))} noise ({rec['noise_from']})"
        )
    return {
        "names": sorted(short.get(n, n) for n in tied),
        "tie": len(tied) > 1,
        "us": fmt_us(float(rec["fastest_us"])),
        "title": title,
        "color": TIE_COLOR if len(tied) > 1 else backend_color(str(rec.get("backend") or "")),
    }
