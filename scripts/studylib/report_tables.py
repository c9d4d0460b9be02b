"""The report's tables: how a cell reads (formats from :data:`tables.SHOWN`, sort keys, long
messages) and the contexts of the sweep table and of the kernel-power and decode sections.
"""

from __future__ import annotations

import base64
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from .core.formats import Column
from .core.table_registry import SHOWN, read_optional, shown
from .decode_figures import TEXT_COLUMNS as DECODE_TEXT
from .decode_figures import graphs_label
from .figure_list import in_section
from .findings.decode import dummy_weights_note, graphs_pairs, invalid_note, tp_pairs
from .findings.decode import power_sources as decode_power_sources
from .findings.windows import CLASSES, CLASSIFICATION_RULE, classify_windows
from .power_figures import CLASS_COLORS

DASH = "—"
LONG_TEXT = 120
#: Tables up to this size are embedded in the page as downloads (data: URIs); larger ones are
#: named as paths.
EMBED_LIMIT = 2 * 1024 * 1024
#: Sweep-table columns shown with 3 significant figures (times: :func:`fmt_sig_us`).
SIG3_COLUMNS = frozenset({"tflops", "gbps"})
#: The sweep table's filters: (column, label), as select boxes above it.
SWEEP_FILTERS = (("backend", "backend"), ("op", "op"), ("dtype", "dtype"), ("status", "status"))

#: Sweep table columns always shown; the others only when they hold data.
ALWAYS_SHOWN = {"backend", "impl", "op", "dtype", "shape", "M", "N", "K", "status", "eager_us"}

#: Figures of the kernel-power and decode sections, in order (figure_list.py); the expert
#: figure (question 4, section "experts") sits in the decode section's own subsection.
POWER_FIGURES = in_section("power")
DECODE_FIGURES = in_section("decode")
#: Decode table columns shown only when the table has them (older tables lack them).
DECODE_OPTIONAL = frozenset(
    {"weights", "cuda_graphs", "hbm_floor_ms", "tpot_over_floor", "idle_w_per_gpu",
     "j_per_token_net", "step_gb", "tok_s_over_c_tpot", "decoding_share", "load_cpu_pct",
     "first_error", "w_gpu_min", "w_gpu_median", "w_gpu_max", "ep"}
)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------------------------


def is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    if isinstance(value, str) and value.strip() == "":
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def dash(value: Any) -> Any:
    """The value, or an em dash when it is missing."""
    return DASH if is_missing(value) else value


def _sweep_column(column: str) -> Column:
    return SHOWN["sweep_table"].get(column) or Column(column, ".4g")


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


def fmt_sig(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant figures, never in exponent notation, thousands
    separated: 0.0123, 1.23, 123, 12,300."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    decimals = digits - 1 - math.floor(math.log10(abs(value)))
    rounded = round(value, decimals)
    # Rounding may carry into one more digit (9.996 -> 10.0): drop one decimal then.
    if math.floor(math.log10(abs(rounded))) > math.floor(math.log10(abs(value))):
        decimals -= 1
    return f"{rounded:,.{max(decimals, 0)}f}"


def fmt_sig_us(value: float) -> str:
    """Microseconds: 3 significant figures, 4 from 1,000 µs on (0.512, 12.3, 456, 1,235)."""
    return fmt_sig(value, 4 if abs(value) >= 999.5 else 3)


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


def long_text(text: Any, limit: int = LONG_TEXT) -> dict[str, Any]:
    """A message split for display: short head, and the full text when it is long."""
    full = "" if is_missing(text) else str(text)
    one_line = " ".join(full.split())
    if len(one_line) <= limit and "\n" not in full.strip():
        return {"short": one_line, "full": None}
    return {"short": one_line[: limit - 1] + "…", "full": full}


def display_path(target: str | os.PathLike, out_html: str | os.PathLike) -> str:
    """``target`` as a reader finds it beside the report: relative to the folder that holds
    the report's folder's parent (``results/tables/sweep.csv`` for
    ``results/report/index.html``), with forward slashes; else its name."""
    target = Path(target).resolve()
    base = Path(out_html).resolve().parent.parent.parent
    try:
        return target.relative_to(base).as_posix()
    except ValueError:
        return target.name


def fmt_size(n_bytes: int) -> str:
    if n_bytes < 1024:
        return f"{n_bytes} B"
    if n_bytes < 1024 * 1024:
        return f"{n_bytes / 1024:.0f} KB"
    return f"{n_bytes / 1024 / 1024:.1f} MB"


MIME = {".csv": "text/csv", ".json": "application/json"}


def embedded_download(
    target: str | os.PathLike, out_html: str | os.PathLike, limit: int = EMBED_LIMIT
) -> dict[str, Any] | None:
    """A table offered from inside the page: ``href`` a data: URI of the file's bytes when
    it is at most ``limit`` bytes, else None (the page names ``path`` instead, since a link
    to a file beside the report breaks when the page is mailed). None when it does not exist.
    """
    path = Path(target)
    if not path.is_file():
        return None
    size = path.stat().st_size
    href = None
    if size <= limit:
        mime = MIME.get(path.suffix.lower(), "text/plain")
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        href = f"data:{mime};charset=utf-8;base64,{data}"
    return {
        "name": path.name,
        "path": display_path(path, out_html),
        "href": href,
        "size": fmt_size(size),
    }


def embedded_downloads(targets: Iterable, out_html) -> list[dict[str, Any]]:
    """:func:`embedded_download` of each target given (None skipped) that exists."""
    out = [embedded_download(t, out_html) for t in targets if t is not None]
    return [d for d in out if d is not None]


def clean_text_columns(df: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    for column in columns:
        if column in df.columns:
            df[column] = df[column].fillna("").astype(str)
    return df


# ---------------------------------------------------------------------------------------------
# The sweep table
# ---------------------------------------------------------------------------------------------


def sweep_table(sweep: pd.DataFrame) -> dict[str, Any]:
    """The sweep table's columns, formatted rows (each with its filter values) and the
    filters' choices: the distinct values of :data:`SWEEP_FILTERS` columns."""
    if sweep.empty:
        return {"columns": [], "rows": [], "filters": [], "n_unsupported": 0}
    columns = [
        (c, col.label)
        for c, col in shown("sweep_table")
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


# ---------------------------------------------------------------------------------------------
# The kernel-power and decode sections
# ---------------------------------------------------------------------------------------------


def _kp_cell(value: Any, col: Column) -> dict[str, Any]:
    if is_missing(value):
        return {"text": "", "key": "", "num": col.fmt is not None}
    if col.fmt is None:
        return {"text": str(value), "key": str(value), "num": False}
    try:
        v = float(value)
    except (TypeError, ValueError):
        return {"text": str(value), "key": str(value), "num": False}
    return {"text": col.text(v), "key": repr(v), "num": True}


def kernel_power_section(
    path: str | os.PathLike | None, charts: list[dict[str, Any]], out_html
) -> dict[str, Any] | None:
    """The kernel-power section's context, or None when no table was given."""
    if path is None:
        return None
    windows = read_optional(path)
    columns = shown("kernel_power_table")
    if not windows.empty and "gpu" in windows.columns:
        if pd.to_numeric(windows["gpu"], errors="coerce").nunique() <= 1:
            columns = [c for c in columns if c[0] != "gpu"]
    rows = []
    no_power: list[str] = []
    sources: list[str] = []
    if not windows.empty:
        windows = clean_text_columns(
            classify_windows(windows),
            ("backend", "impl", "op", "dtype", "shape", "mode", "throttle_reasons", "status")
            + ("error", "power_source", "why", "class"),
        )
        for rec in windows.to_dict("records"):
            cells = []
            for column, col in columns:
                value = rec.get(column)
                if column == "error":
                    cells.append({"long": long_text(value, 80), "key": str(value or "")})
                else:
                    cells.append(_kp_cell(value, col))
            rows.append(
                {"cells": cells, "class": rec["class"], "status": str(rec.get("status", ""))}
            )
        sources = sorted({s or "none" for s in windows["power_source"]})
        if "backend" in windows.columns:
            by_backend = windows.groupby("backend")["power_source"].agg(
                lambda s: {v or "none" for v in s}
            )
            no_power = sorted(b for b, v in by_backend.items() if v == {"none"})
    counts = {}
    for row in rows:
        counts[row["class"]] = counts.get(row["class"], 0) + 1
    return {
        "rule": list(CLASSIFICATION_RULE),
        "columns": [(c, col.label) for c, col in columns],
        "rows": rows,
        "class_counts": [
            (c, counts[c], CLASS_COLORS.get(c, "#ccc"))
            for c in sorted(counts, key=lambda c: CLASSES.index(c) if c in CLASSES else 99)
        ],
        "class_colors": CLASS_COLORS,
        "sources": sources,
        "no_nvml": bool(rows) and sources == ["none"],
        "no_power_backends": no_power if sources != ["none"] else [],
        "charts": sorted(
            (c for c in charts if c["kind"] == "power"),
            key=lambda c: POWER_FIGURES.index(c["name"]),
        ),
        "downloads": embedded_downloads([path], out_html),
    }


def _table(frame: pd.DataFrame, name: str) -> dict[str, Any]:
    """A small table's context: its columns (those present) and formatted cells per row."""
    columns = [(c, col) for c, col in shown(name) if c in frame.columns]
    rows = [[_kp_cell(rec.get(c), col) for c, col in columns] for rec in frame.to_dict("records")]
    return {"columns": [col.label for _, col in columns], "rows": rows}


def decode_section(
    path: str | os.PathLike | None,
    charts: list[dict[str, Any]],
    out_html,
    expert_m_csv: str | os.PathLike | None = None,
    recorder_csv: str | os.PathLike | None = None,
) -> dict[str, Any] | None:
    """The decode-power section's context, or None when no decode table was given.

    ``expert_m_csv`` (per-expert M) and ``recorder_csv`` (what SGLang's expert recorder cost)
    add their downloads and the recorder-cost table."""
    if path is None:
        return None
    table = read_optional(path)
    rows = []
    sources: list[str] = []
    no_power_variants: list[str] = []
    dummy: list[str] = []
    dummy_note = ""
    columns = [c for c in shown("decode_table")
               if c[0] not in DECODE_OPTIONAL or c[0] in table.columns]  # fmt: skip
    if not table.empty:
        table = clean_text_columns(table.copy(), DECODE_TEXT)
        if "concurrency" in table.columns:
            table["_c"] = pd.to_numeric(table["concurrency"], errors="coerce")
            sort = [c for c in ("engine", "variant", "_c") if c in table.columns]
            table = table.sort_values(sort, kind="stable")
        for rec in table.to_dict("records"):
            note = invalid_note(rec)
            cells = []
            for column, col in columns:
                if column == "valid":
                    text = "yes" if not note else note.replace("invalid: ", "no: ", 1)
                    cells.append({"text": text, "key": "1" if not note else "0", "num": False})
                elif column == "cuda_graphs":
                    text = graphs_label(rec.get(column)).removeprefix("CUDA graphs ")
                    cells.append({"text": text, "key": text, "num": False})
                elif column == "first_error":
                    cells.append({"long": long_text(rec.get(column), 80),
                                  "key": str(rec.get(column) or "")})  # fmt: skip
                else:
                    cells.append(_kp_cell(rec.get(column), col))
            rows.append({"cells": cells, "valid": not note, "note": note})
        sources = decode_power_sources(table)
        if "variant" in table.columns and "power_source" in table.columns:
            by_variant = table.groupby("variant")["power_source"].agg(
                lambda s: {v or "none" for v in s}
            )
            no_power_variants = sorted(v for v, src in by_variant.items() if src == {"none"})
        dummy, dummy_note = dummy_weights_note(table)
    pairs = graphs_pairs(table) if not table.empty else pd.DataFrame()
    tp = tp_pairs(table) if not table.empty else pd.DataFrame()
    if len(tp):
        tp["cuda_graphs"] = tp["cuda_graphs"].map(graphs_label).str.removeprefix("CUDA graphs ")
    recorder = read_optional(recorder_csv) if recorder_csv is not None else pd.DataFrame()
    if not recorder.empty and "variant" in recorder.columns:
        recorder = clean_text_columns(recorder, ("variant",))
        recorder["_c"] = pd.to_numeric(recorder.get("concurrency"), errors="coerce")
        recorder = recorder.sort_values(["variant", "_c"], kind="stable")
    ratios = pd.to_numeric(recorder.get("tpot_ratio"), errors="coerce") if len(recorder) else None
    downloads = embedded_downloads([path, expert_m_csv, recorder_csv], out_html)
    return {
        "columns": [(c, col.label) for c, col in columns],
        "rows": rows,
        "n_invalid": sum(1 for r in rows if not r["valid"]),
        "sources": sources,
        "no_power": bool(rows) and sources == ["none"],
        "no_power_variants": no_power_variants if sources != ["none"] else [],
        "dummy_variants": dummy,
        "dummy_note": dummy_note,
        "pairs": _table(pairs, "graphs_pairs") if len(pairs) else None,
        "tp": _table(tp, "tp_pairs") if len(tp) else None,
        "recorder": _table(recorder, "recorder_table") if len(recorder) else None,
        "recorder_span": (
            (f"{ratios.min():.2f}×", f"{ratios.max():.2f}×")
            if ratios is not None and ratios.notna().any()
            else None
        ),
        "recorder_given": recorder_csv is not None,
        "charts": sorted(
            (c for c in charts if c["kind"] == "decode"),
            key=lambda c: DECODE_FIGURES.index(c["name"]),
        ),
        "expert_charts": [c for c in charts if c["kind"] == "experts"],
        "downloads": downloads,
    }
