# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: every variant's decode results -> results/tables/decode.csv (with the
step's HBM floor), expert_m.csv (per-expert M per variant, layer and C) and
decode_recorder.csv (what SGLang's expert recorder cost), decode_crosscheck.csv (SGLang's
bench_serving beside the study's load), and the pairs derived from the decode table:
decode_graphs_pairs.csv (CUDA graphs on against off) and decode_tp_pairs.csv (TP against one
GPU)."""

from studylib import quiet_interrupt  # noqa: F401 - first: Ctrl-C ends the job quietly

# isort: split

from pathlib import Path

import pandas as pd
from studylib.core.io import read_json, write_frame
from studylib.core.table_registry import check_plans
from studylib.snakemake_job import setup_logging
from studylib.stages.decode.decode_aggregate import decode_table, with_variant
from studylib.stages.decode.decode_judgements import graphs_pairs, tp_pairs
from studylib.stages.decode.decode_schema import CROSSCHECK_COLUMNS, RECORDER_COLUMNS
from studylib.stages.decode.expert_m import EXPERT_M_COLUMNS

log = setup_logging(snakemake)
check_plans("decode_summary", snakemake.params.plans)  # each variant's run of this run's plan
inp, out = snakemake.input, snakemake.output
table = decode_table([pd.read_csv(p) for p in inp.summaries], read_json(inp.peaks))


def write(frame, path):
    write_frame(frame, path, "aggregate_decode")


def by_variant(paths):
    return {Path(p).parent.name: pd.read_csv(p) for p in paths}


write(table, out.decode)
write(with_variant(by_variant(inp.expert_m), EXPERT_M_COLUMNS), out.expert_m)
write(with_variant(by_variant(inp.recorder), RECORDER_COLUMNS), out.recorder)
write(with_variant(by_variant(inp.crosscheck), CROSSCHECK_COLUMNS), out.crosscheck)
# Derived once, here: the report reads these pairs rather than pairing again.
write(graphs_pairs(table), out.graphs_pairs)
write(tp_pairs(table), out.tp_pairs)
log.info("%d decode rows", len(table))
