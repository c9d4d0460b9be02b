# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: every backend's kernel-power windows -> results/tables/kernel_power.csv and,
with each window's group, limit and class, kernel_power_classes.csv."""

from studylib import quiet_interrupt  # noqa: F401 - first: Ctrl-C ends the job quietly

# isort: split

from studylib.core.io import read_json
from studylib.core.table_registry import check_plans
from studylib.snakemake_job import setup_logging
from studylib.stages.kernel_power.kernel_power_aggregate import aggregate_kernel_power

log = setup_logging(snakemake)
check_plans("kernel_power", snakemake.params.plans)  # each backend's windows of this run's plan
table = aggregate_kernel_power(snakemake.input.windows, snakemake.output.table,
                               snakemake.output.classes,
                               read_json(snakemake.input.hardware))  # fmt: skip
log.info("%d rows", len(table))
