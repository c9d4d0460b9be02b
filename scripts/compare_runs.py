# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: this run's sweep against the configured baseline (compare_baseline)."""

from studylib import quiet_interrupt  # noqa: F401 - first: Ctrl-C ends the job quietly

# isort: split

import sys

from studylib.snakemake_job import setup_logging
from studylib.stages.sweep.sweep_compare import ComparisonRefused, summary, write_comparison

log = setup_logging(snakemake)  # noqa: F821
try:
    table = write_comparison(
        snakemake.params.baseline,  # noqa: F821
        snakemake.input.sweep,  # noqa: F821
        snakemake.output.table,  # noqa: F821
        snakemake.output.spec,  # noqa: F821
    )
except ComparisonRefused as exc:
    log.error("compare: %s", exc)
    sys.exit(1)
for line in summary(table) or ["no point is ok in both runs"]:
    log.info("%s", line)
