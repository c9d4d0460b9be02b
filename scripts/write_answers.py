# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: every question of the study decided once -> results/tables/answers.csv."""

from studylib.snakemake_job import setup_logging
from studylib.study_answers import write_answers
from studylib.study_tables import StudyTables

log = setup_logging(snakemake)  # noqa: F821
answers = write_answers(StudyTables.read(snakemake.input), snakemake.output.answers)  # noqa: F821
log.info("%d answers written", len(answers))
