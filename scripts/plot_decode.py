# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: one decode figure.

Rules plot_decode (``decode``: tok/s, W per GPU, J per token vs concurrency),
plot_decode_views (``decode_latency``: TPOT against the HBM floor, ITL, TTFT;
``decode_frontier``: J/token against tok/s) and plot_experts (``experts``: per-expert M against
balanced routing). Input: ``decode`` (results/tables/decode.csv) or ``expert_m``
(results/tables/expert_m.csv); ``params.kind`` names the figure (default ``decode``). Outputs:
``html``, ``png``, ``spec``.
"""

from studylib.snakemake_job import setup_logging
from studylib.stages.decode.decode_figures import plot_decode

log = setup_logging(snakemake)
kind = snakemake.params.get("kind") or "decode"
table = snakemake.input.get("expert_m") if kind == "experts" else snakemake.input.decode
log.info("%s figure from %s", kind, table)
plot_decode(table, snakemake.output.html, snakemake.output.png, snakemake.output.spec, kind)
