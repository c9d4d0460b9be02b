# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: one backend's sustained kernel loops under the power sampler."""

import sys

from studylib.instruments.gpu_slots import pin_gpus
from studylib.snakemake_job import setup_logging
from studylib.stages.kernel_power.kernel_power_run import run_kernel_power

log = setup_logging(snakemake)
pin_gpus(snakemake)  # hold the device first (gpu_slots), before CUDA or the journal
windows = run_kernel_power(
    snakemake.params.plan, snakemake.output.windows, snakemake.output.timeline, sys.stderr
)
log.info("%d window rows: %s", len(windows), windows["status"].value_counts().to_dict())
