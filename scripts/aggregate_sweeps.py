# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: every sweep -> results/tables/sweep.csv and support.csv."""

from studylib import quiet_interrupt  # noqa: F401 - first: Ctrl-C ends the job quietly

# isort: split

from studylib.core.table_registry import check_plans
from studylib.snakemake_job import setup_logging
from studylib.stages.sweep.sweep_aggregate import aggregate

log = setup_logging(snakemake)  # noqa: F821
check_plans("sweep", snakemake.params.plans)  # each sweep of this run's plan for its backend
sweep = aggregate(
    snakemake.input.sweeps,  # noqa: F821
    snakemake.input.peaks,  # noqa: F821
    snakemake.output.sweep,  # noqa: F821
    snakemake.output.support,  # noqa: F821
)
log.info("%d rows", len(sweep))
