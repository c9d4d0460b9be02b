# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: results/peaks.json (see studylib.instruments.peaks)."""

from pathlib import Path

from studylib.core.io import write_json
from studylib.core.journal import Journal
from studylib.instruments.gpu_slots import pin_gpus
from studylib.instruments.peaks import measure
from studylib.snakemake_job import setup_logging

log = setup_logging(snakemake)
pin_gpus(snakemake)  # hold the device first (gpu_slots), before CUDA or any output
out = Path(snakemake.output[0])
# Each ceiling measured is kept as it ends: a stopped job resumes with the ones it had.
plan = {"device": snakemake.params.device, "versions": snakemake.params.versions}
journal = Journal(out.parent / f".{out.stem}.work", plan, {})
peaks = measure(snakemake.params.device, journal)
log.info("peaks: %s", peaks)
write_json(out, peaks)
journal.finish()
