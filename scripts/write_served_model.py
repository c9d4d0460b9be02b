# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: a config-only model (config.json + offline tokenizer) for dummy weights."""

from studylib.snakemake_job import setup_logging
from studylib.stages.decode.decode_entry import write_served_model_for_machine

log = setup_logging(snakemake)
facts = write_served_model_for_machine(snakemake.params.geometry, snakemake.wildcards.weights,
                                       snakemake.params.device, snakemake.output[0])  # fmt: skip
log.info("wrote %s", facts)
