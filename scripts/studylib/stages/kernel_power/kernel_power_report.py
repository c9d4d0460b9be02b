"""The kernel-power report section: the windows table (with each window's class) and the
section's figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ...core.formats import labelled
from ...core.io import read_json
from ...core.report_cells import (
    clean_text_columns,
    embedded_downloads,
    long_text,
    read_or_derive,
    shown_cell,
)
from ...core.table_registry import read_optional
from ...figure_list import in_section
from .kernel_power_answers import group_order
from .kernel_power_figures import CLASS_COLORS
from .kernel_power_schema import KERNEL_POWER_SHOWN
from .window_classes import CLASSES, CLASSIFICATION_RULE, GROUP_RULE, LIMIT_RULE, classify_windows

#: Figures of the kernel-power section, in order (figure_list.py).
POWER_FIGURES = in_section("power")
#: The figure of question 3's answers (figure_list's first-screen figure for question 3).
VERDICT_FIGURE = "power_verdicts"


def _group_order(groups: pd.Series) -> pd.Series:
    """Windows in the order of question 3's groups (idle, decode-sized, ..., experts); those
    in no group last."""
    names = sorted({g for g in groups if g}, key=group_order)
    rank = {g: i for i, g in enumerate(names)}
    return groups.map(lambda g: rank.get(g, len(names)))


def kernel_power_section(
    paths: dict[str, Any], charts: list[dict[str, Any]], out_html
) -> dict[str, Any] | None:
    """The kernel-power section's context, or None when no kernel-power table was given: the
    classified windows (tables/kernel_power_classes.csv, written by the aggregate rule; a
    folder from before it: the windows classified here by the same rule)."""
    path = paths.get("kernel_power")
    if path is None:
        return None
    hardware = paths.get("hardware")
    hardware = read_json(hardware) if hardware is not None and Path(hardware).is_file() else None
    windows = read_or_derive(paths.get("kernel_power_classes"),
                             lambda: classify_windows(read_optional(path), hardware))  # fmt: skip
    if not windows.empty and "limit" not in windows.columns:  # classified before the limit
        windows = classify_windows(windows.drop(columns=["class", "why"], errors="ignore"),
                                   hardware)  # fmt: skip
    columns = labelled(KERNEL_POWER_SHOWN)
    if not windows.empty and "gpu" in windows.columns:
        if pd.to_numeric(windows["gpu"], errors="coerce").nunique() <= 1:
            columns = [c for c in columns if c[0] != "gpu"]
    rows = []
    no_power: list[str] = []
    sources: list[str] = []
    if not windows.empty:
        windows = clean_text_columns(
            windows,
            ("backend", "impl", "op", "dtype", "shape", "mode", "throttle_reasons", "status")
            + ("error", "power_source", "why", "class", "group", "limit", "limit_why"),
        )
        windows = windows.sort_values("group", key=_group_order, kind="stable")
        for rec in windows.to_dict("records"):
            cells = []
            for column, col in columns:
                value = rec.get(column)
                if column == "error":
                    cells.append({"long": long_text(value, 80), "key": str(value or "")})
                else:
                    cells.append(shown_cell(value, col))
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
    charts = sorted((c for c in charts if c["kind"] == "power"),
                    key=lambda c: POWER_FIGURES.index(c["name"]))  # fmt: skip
    return {
        "rule": list(CLASSIFICATION_RULE),
        "limit_rule": list(LIMIT_RULE),
        "group_rule": list(GROUP_RULE),
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
        # Question 3's chart first, beside its answers; the others after the windows table.
        "verdict_chart": next((c for c in charts if c["name"] == VERDICT_FIGURE), None),
        "charts": [c for c in charts if c["name"] != VERDICT_FIGURE],
        "downloads": embedded_downloads([path], out_html),
    }
