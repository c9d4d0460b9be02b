"""The kernel-power stage's tables: a backend's windows (one row per sustained kernel loop or
idle window), the kernel-power table and a backend's power timeline; their columns with
full kinds, registered in :mod:`studylib.core.table_registry`, and how the report and the
figures show them."""

from __future__ import annotations

from ...core.formats import CLOCKS_SHOWN, ENERGY_GAP_SHOWN, KEY_SHOWN, Column, shown_as_text
from ...core.table_registry import Table, register_shown, register_tables
from ..sweep.sweep_schema import POINT

#: Kernel-power window modes (cold: rotating weight sets replayed in one CUDA graph).
MODES = ("idle", "eager", "graph", "cold")
WINDOWS = {
    **POINT, "mode": "text", "label": "any", "window": "any", "t_start": "num", "t_end": "num",
    "seconds": "num", "gpu": "int", "gpu_name": "any", "power_source": "text",
    "energy_j": "num", "energy_j_samples": "num", "energy_gap_pct": "num", "avg_w": "num",
    "avg_w_samples": "num", "power_limit_w": "num", "pct_limit": "num", "sm_clock_mhz": "num",
    "mem_clock_mhz": "num", "temp_c_max": "num", "throttle_reasons": "any", "sm_util": "num",
    "sm_occupancy": "num", "tensor_util": "num", "dram_util": "num", "gpm_pairs": "num",
    "samples": "num", "calls": "int", "us_per_call": "num", "status": "text", "error": "any",
    "sampler_cpu_pct": "num", "gpus_running": "int", "calls_per_replay": "num",
    "cold_sets": "num",
}  # fmt: skip


WINDOW_TABLE = Table(
    "kernel_power",
    "a backend's kernel-power windows",
    "results/kernel_power/{backend}.parquet",
    WINDOWS,
    {"mode": MODES},
)
KERNEL_POWER_TABLE = Table(
    "kernel_power_table",
    "the kernel-power table",
    "results/tables/kernel_power.csv",
    WINDOWS,
    {"mode": MODES},
)
TIMELINE_TABLE = Table(
    "timeline",
    "a backend's power timeline",
    "results/kernel_power/{backend}_timeline.parquet",
    {"backend": "any"},
)
#: The kernel-power table with each window's GPU's maximum SM clock, its group (question 3),
#: limit, class and why (window_classes.classify_windows).
CLASSES_TABLE = Table(
    "kernel_power_classes",
    "the classified kernel-power windows",
    "results/tables/kernel_power_classes.csv",
    {
        **WINDOWS,
        "max_sm_clock_mhz": "num",
        "group": "any",
        "limit": "any",
        "limit_why": "any",
        "class": "text",
        "why": "any",
    },  # fmt: skip
    {"mode": MODES},
)
register_tables(WINDOW_TABLE, KERNEL_POWER_TABLE, TIMELINE_TABLE, CLASSES_TABLE)  # fmt: skip

KERNEL_POWER_SHOWN = {
    **KEY_SHOWN, "M": Column("M", ".0f", tip_fmt="d"), "gpu": Column("GPU", ".0f", tip_fmt="d"),
    # group, limit and class early: visible without scrolling the wide table sideways
    **shown_as_text("mode", "group", "limit", "class"),
    "seconds": Column("seconds", ".1f"),
    "avg_w": Column("avg W", ".1f"),
    "avg_w_samples": Column("avg W (samples)", ".1f"),
    "energy_gap_pct": ENERGY_GAP_SHOWN,
    "pct_limit": Column("% of limit", ".1f"),
    **CLOCKS_SHOWN, "max_sm_clock_mhz": Column("max SM MHz", ".0f"),
    "limit_why": Column("limit: why"), **shown_as_text("why", "status", "error"),
    "window": Column(None, tip="window"),
}  # fmt: skip
TIMELINE_SHOWN = {
    "t_rel": Column(None, ".2f", tip="t (s)"),
    "power_w": Column(None, ".1f", tip="power (W)"),
    "sm_clock_mhz": CLOCKS_SHOWN["sm_clock_mhz"],
    "temp_c": Column(None, ".0f", tip="temperature (°C)"),
    "reasons_names": Column(None, tip="reasons"),
}
register_shown("kernel_power_table", KERNEL_POWER_SHOWN)
register_shown("timeline", TIMELINE_SHOWN)
