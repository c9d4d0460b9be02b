# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: support-matrix heat-map (HTML, PNG, Vega-Lite JSON)."""

from studylib.snakemake_job import setup_logging
from studylib.stages.sweep.sweep_table_figures import plot_support

log = setup_logging(snakemake)  # noqa: F821
log.info("support figure from %s", snakemake.input.support)  # noqa: F821
plot_support(
    snakemake.input.support,  # noqa: F821
    out_html=snakemake.output.html,  # noqa: F821
    out_png=snakemake.output.png,  # noqa: F821
    out_spec=snakemake.output.spec,  # noqa: F821
)
