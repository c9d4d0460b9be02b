# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: one figure of the registry (rule ``plot``, ``{figure}``: a name in
studylib/figure_list.py). ``params.draw`` names its drawing function, ``params.roles`` its
input roles (``input.<role>``: a table, or several) and ``params.args`` its constant keywords.
Outputs: ``html``, ``png``, ``spec``."""

from studylib import quiet_interrupt  # noqa: F401 - first: Ctrl-C ends the job quietly

# isort: split

from studylib.figure_drawing import draw_figure
from studylib.snakemake_job import setup_logging

log = setup_logging(snakemake)
inputs = {role: snakemake.input.get(role) for role in snakemake.params.roles}
log.info("figure %s (%s) from %s", snakemake.wildcards.figure, snakemake.params.draw, inputs)
draw_figure(snakemake.params.draw, inputs, snakemake.params.args, snakemake.output.html,
            snakemake.output.png, snakemake.output.spec)  # fmt: skip
