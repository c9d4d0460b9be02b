"""Snakemake entry: the decode-power figure (tok/s, W per GPU, J per token vs concurrency).

Input: ``decode`` (results/tables/decode.csv). Outputs: ``html``, ``png``, ``spec``.
"""

from studylib.decode_figures import plot_decode
from studylib.entry import setup_logging

log = setup_logging(snakemake)
log.info("decode figure from %s", snakemake.input.decode)
plot_decode(
    snakemake.input.decode,
    snakemake.output.html,
    snakemake.output.png,
    snakemake.output.spec,
)
