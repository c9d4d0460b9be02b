"""Glue for entry scripts run by Snakemake's ``script:`` directive."""

from __future__ import annotations

import logging
import sys


def setup_logging(smk) -> logging.Logger:
    """Send this job's stdout, stderr and logging to the rule's ``log:`` file."""
    if smk.log:
        handle = open(smk.log[0], "a", buffering=1, encoding="utf-8")
        sys.stdout = handle
        sys.stderr = handle
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    return logging.getLogger(f"study.{smk.rule}")
