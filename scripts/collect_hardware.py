# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: results/hardware.json (see studylib.instruments.hardware)."""

from studylib.core.io import write_json
from studylib.instruments.hardware import collect
from studylib.snakemake_job import setup_logging

log = setup_logging(snakemake)  # noqa: F821
facts = collect(snakemake.params.repo)  # noqa: F821
log.info("device %s, %d GPU(s)", facts["device"], len(facts["gpus"]))
write_json(snakemake.output[0], facts)  # noqa: F821
