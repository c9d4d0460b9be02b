# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: one backend's sweep -> results/sweeps/{backend}.parquet."""

import sys

from studylib.instruments.gpu_slots import pin_gpus
from studylib.snakemake_job import setup_logging
from studylib.stages.sweep.sweep_run import run_sweep

log = setup_logging(snakemake)  # noqa: F821
pin_gpus(snakemake)  # hold the device first (gpu_slots), before CUDA or the journal
frame = run_sweep(snakemake.params.plan, snakemake.output[0], log_stream=sys.stderr)  # noqa: F821
log.info("statuses: %s", frame["status"].value_counts().to_dict())
