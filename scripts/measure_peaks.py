# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: results/peaks.json (see studylib.instruments.peaks)."""

from studylib.core.io import write_json
from studylib.instruments.gpu_slots import pin_gpus
from studylib.instruments.peaks import measure
from studylib.snakemake_job import setup_logging

log = setup_logging(snakemake)
pin_gpus(snakemake)  # hold the device first (gpu_slots), before CUDA or any output
peaks = measure(snakemake.params.device)
log.info("peaks: %s", peaks)
write_json(snakemake.output[0], peaks)
