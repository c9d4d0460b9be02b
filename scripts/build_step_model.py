# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: the step model (results/tables/step_model.csv) from the sweep table, the
decode table, the kernel-power table and each variant's profiled breakdown, for the served
model's geometry (``params.geometry``): see studylib.stages.step_model.step_model_build."""

from studylib import quiet_interrupt  # noqa: F401 - first: Ctrl-C ends the job quietly

# isort: split

import pandas as pd
from studylib.core.io import write_frame
from studylib.core.table_registry import read_optional
from studylib.snakemake_job import setup_logging
from studylib.stages.step_model.step_model_build import step_model

log = setup_logging(snakemake)
inp, out = snakemake.input, snakemake.output
breakdowns = [read_optional(p) for p in inp.get("breakdowns", [])]
breakdowns = [b for b in breakdowns if not b.empty]
table = step_model(
    read_optional(inp.sweep),
    read_optional(inp.decode),
    snakemake.params.geometry,
    windows=read_optional(inp.kernel_power),
    breakdown=pd.concat(breakdowns, ignore_index=True) if breakdowns else None,
    mode=snakemake.params.mode,
)
write_frame(table, out.table, "step_model")
missing = sorted({m for m in table.get("missing", pd.Series(dtype=str)).dropna() if m})
log.info("%d step-model rows; kernels the sweep lacks: %s", len(table), missing or "none")
