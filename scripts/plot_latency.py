# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: latency-vs-M figure of one backend's sweep (HTML, PNG, Vega-Lite JSON)."""

from studylib.snakemake_job import setup_logging
from studylib.stages.sweep.sweep_figures import plot_latency

log = setup_logging(snakemake)  # noqa: F821
log.info("latency figure from %s", snakemake.input.sweep)  # noqa: F821
plot_latency(
    snakemake.input.sweep,  # noqa: F821
    out_html=snakemake.output.html,  # noqa: F821
    out_png=snakemake.output.png,  # noqa: F821
    out_spec=snakemake.output.spec,  # noqa: F821
    backend=snakemake.wildcards.get("backend"),  # noqa: F821
    peaks_json=snakemake.input.get("peaks"),  # noqa: F821
)
