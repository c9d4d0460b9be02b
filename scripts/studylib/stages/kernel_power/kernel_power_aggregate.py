"""Every backend's kernel-power windows -> results/tables/kernel_power.csv."""

from __future__ import annotations

import pandas as pd

from ...core.io import write_frame
from ...core.table_registry import read_table
from .kernel_power_schema import WINDOW_TABLE

WINDOW_COLUMNS = list(WINDOW_TABLE.columns)


def aggregate_kernel_power(paths, out_csv) -> pd.DataFrame:
    frames = [read_table("kernel_power", p) for p in paths]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=WINDOW_COLUMNS)
    write_frame(table, out_csv)
    return table
