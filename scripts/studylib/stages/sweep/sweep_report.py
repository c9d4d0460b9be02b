"""The sweep's report sections: the sweep table (cells, sort keys, filters, columns shown)
and "Before and after", this run's sweep against a baseline (sweep_compare)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ...core.formats import Column, labelled
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
from .sweep_schema import SWEEP_SHOWN

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
