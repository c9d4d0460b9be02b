"""Snakemake entry: results/peaks.json (see studylib.peaks)."""

from studylib.entry import setup_logging
from studylib.io import write_json
from studylib.peaks import measure

log = setup_logging(snakemake)
peaks = measure(snakemake.params.device)
log.info("peaks: %s", peaks)
write_json(snakemake.output[0], peaks)
