# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: one server variant's decode-power run -> results/decode/{variant}/."""

from pathlib import Path

from studylib.instruments.gpu_slots import pin_gpus, slot_index
from studylib.instruments.serving.guard import protect_job
from studylib.snakemake_job import setup_logging
from studylib.stages.decode.decode_entry import run_decode_job

protect_job()  # die with Snakemake; SIGTERM / SIGHUP / Ctrl-C stop the server cleanly
log = setup_logging(snakemake)
pin_gpus(snakemake)  # hold the device first (gpu_slots), before CUDA or any output
run_decode_job(snakemake.params.plan, snakemake.input.get("model"),
               Path(snakemake.output.summary).parent, port_offset=slot_index())  # fmt: skip
