# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: a cross-backend figure of the sweep table (efficiency, launch overhead)."""

from studylib.snakemake_job import setup_logging
from studylib.stages.sweep.sweep_table_figures import plot_table_figure

log = setup_logging(snakemake)
plot_table_figure(
    snakemake.wildcards.figure,
    snakemake.input.sweep,
    snakemake.output.html,
    snakemake.output.png,
    snakemake.output.spec,
)
