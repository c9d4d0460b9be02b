"""Snakemake entry: every variant's decode summary -> results/tables/decode.csv."""

import pandas as pd
from studylib.entry import setup_logging
from studylib.io import write_frame
from studylib.serving.decode import SUMMARY_COLUMNS

log = setup_logging(snakemake)
frames = [pd.read_csv(p) for p in snakemake.input.summaries]
table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=SUMMARY_COLUMNS)
write_frame(table, snakemake.output[0])
log.info("%d rows", len(table))
