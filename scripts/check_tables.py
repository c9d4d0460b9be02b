# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: the report's tables and records checked before it renders (a damaged one
stops the run here, one line naming it, and the old report stays) -> the rows of each, in
results/tables/checked.json."""

from studylib import quiet_interrupt  # noqa: F401 - first: Ctrl-C ends the job quietly

# isort: split

from studylib.core.io import write_json
from studylib.core.table_registry import check_inputs
from studylib.snakemake_job import setup_logging

log = setup_logging(snakemake)  # checks the inputs
checked = check_inputs(snakemake.input)
write_json(snakemake.output[0], checked)
log.info("%d files checked", len(checked))
