# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: the local random MoE model served by the transformers engine."""

from studylib.instruments.gpu_slots import pin_gpus
from studylib.snakemake_job import setup_logging
from studylib.stages.decode.decode_entry import build_model_for_machine

log = setup_logging(snakemake)
pin_gpus(snakemake)  # the seed geometry is built on a GPU, before anything initialises CUDA
facts = build_model_for_machine(snakemake.params.geometry, snakemake.params.device,
                                snakemake.output[0])  # fmt: skip
log.info("built %s", facts)
