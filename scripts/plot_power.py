# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: a kernel-power figure (``timeline`` or ``power_vs_util``).

Inputs: ``windows`` (results/tables/kernel_power.csv) and, for the timeline, ``timelines``
(the per-backend ``*_timeline.parquet`` files, concatenated). Outputs: ``html``, ``png``,
``spec``. The figure comes from ``wildcards.kind``, else ``params.kind``.
"""

from studylib.snakemake_job import setup_logging
from studylib.stages.kernel_power.kernel_power_figures import plot_power

log = setup_logging(snakemake)
kind = snakemake.wildcards.get("kind") or snakemake.params.get("kind")
timelines = snakemake.input.get("timelines", [])
timelines = [timelines] if isinstance(timelines, str) else list(timelines or [])
log.info("kernel-power figure %s from %d timelines", kind, len(timelines))
plot_power(
    snakemake.input.windows,
    timelines,
    snakemake.output.html,
    snakemake.output.png,
    snakemake.output.spec,
    kind,
)
