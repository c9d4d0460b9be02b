"""Snakemake entry: results/peaks.json (see studylib.peaks)."""

from studylib.entry import setup_logging
from studylib.gpu_slots import pin_gpus
from studylib.io import write_json
from studylib.peaks import measure

log = setup_logging(snakemake)
pin_gpus(snakemake)  # before anything initialises CUDA
peaks = measure(snakemake.params.device)
log.info("peaks: %s", peaks)
write_json(snakemake.output[0], peaks)
