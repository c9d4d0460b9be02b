# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: the step-model figure (``step_model``) from results/tables/step_model.csv.
Outputs: ``html``, ``png``, ``spec``."""

from studylib.core.charts import save_chart
from studylib.core.table_registry import read_optional
from studylib.snakemake_job import setup_logging
from studylib.stages.step_model.step_model_figure import step_chart

log = setup_logging(snakemake)
log.info("step-model figure from %s", snakemake.input.table)
save_chart(step_chart(read_optional(snakemake.input.table)), snakemake.output.html,
           snakemake.output.png, snakemake.output.spec)  # fmt: skip
