"""Every backend's kernel-power windows -> results/tables/kernel_power.csv."""

from __future__ import annotations

import pandas as pd

from ...core.io import write_frame
from ...core.table_registry import read_table
from .kernel_power_schema import WINDOW_TABLE
from .window_classes import classify_windows

WINDOW_COLUMNS = list(WINDOW_TABLE.columns)


def aggregate_kernel_power(paths, out_csv, out_classes_csv=None,
                           hardware: dict | None = None) -> pd.DataFrame:  # fmt: skip
    """Every backend's windows in one table and (``out_classes_csv``) the same windows with
    their group, limit, class and why (window_classes: the one rule the report and question 3
    read; ``hardware``: the GPUs' maximum SM clocks the limit holds each clock against)."""
    frames = [read_table("kernel_power", p) for p in paths]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=WINDOW_COLUMNS)
    write_frame(table, out_csv)
    if out_classes_csv is not None:
        write_frame(classify_windows(table, hardware), out_classes_csv)
    return table
