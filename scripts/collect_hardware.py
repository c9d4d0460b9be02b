"""Snakemake entry: results/hardware.json (see studylib.hardware)."""

from studylib.entry import setup_logging
from studylib.hardware import collect
from studylib.io import write_json

log = setup_logging(snakemake)  # noqa: F821
facts = collect(snakemake.params.repo)  # noqa: F821
log.info("device %s, %d GPU(s)", facts["device"], len(facts["gpus"]))
write_json(snakemake.output[0], facts)  # noqa: F821
