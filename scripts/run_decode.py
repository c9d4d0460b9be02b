# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: one server variant's decode-power run -> results/decode/{variant}/."""

from pathlib import Path

from studylib.instruments.gpu_slots import pin_gpus, slot_index
from studylib.instruments.serving.guard import protect_job
from studylib.snakemake_job import setup_logging
from studylib.stages.decode.decode_entry import run_decode_job

protect_job()  # die with Snakemake; SIGTERM / SIGHUP / Ctrl-C stop the server cleanly
log = setup_logging(snakemake)
plan = snakemake.params.plan


def hold_device() -> int:
    """The device (gpu_slots): first, before CUDA or any output, or once a server that starts
    ahead of it has started (decode.prestart, the rule then outside Snakemake's GPU count)."""
    pin_gpus(snakemake, count=int(plan.get("gpus") or 1))
    return slot_index()


run_decode_job(plan, snakemake.input.get("model"), Path(snakemake.output.summary).parent,
               hold_device)  # fmt: skip
