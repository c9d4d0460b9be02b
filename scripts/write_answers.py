# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: every question of the study decided once -> results/tables/answers.csv,
and the per-size rankings questions 1 and 2 state -> results/tables/fastest.csv."""

from studylib import quiet_interrupt  # noqa: F401 - first: Ctrl-C ends the job quietly

# isort: split

from studylib.snakemake_job import setup_logging
from studylib.stages.sweep.sweep_ranking import write_fastest
from studylib.study_answers import write_answers
from studylib.study_tables import StudyTables

log = setup_logging(snakemake)  # noqa: F821
tables = StudyTables.read(snakemake.input)  # noqa: F821
answers = write_answers(tables, snakemake.output.answers)  # noqa: F821
fastest = write_fastest(tables.sweep, tables.compare, snakemake.output.fastest)  # noqa: F821
log.info("%d answers, %d rankings per size written", len(answers), len(fastest))
