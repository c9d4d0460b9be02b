"""Glue for entry scripts run by Snakemake's ``script:`` directive."""

from __future__ import annotations

import logging
import sys

from .core.table_registry import DamagedFile
from .instruments.serving.launcher import ServerFailed
from .study_tables import check_inputs


def setup_logging(smk) -> logging.Logger:
    """Send this job's stdout, stderr and logging to the rule's ``log:`` file, and check the
    job's inputs that are study tables before it starts (core/table_registry.py; every
    stage's tables are registered by study_tables): a damaged one stops the job with one line
    naming the file and what is wrong, not a traceback; so does a server that fails."""
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
    log = logging.getLogger(f"study.{smk.rule}")
    sys.excepthook = _one_line_for_damaged_files(sys.excepthook, log)
    try:
        check_inputs(smk.input)
    except DamagedFile as exc:
        log.error(DAMAGED, exc)
        sys.exit(1)
    return log


# Every study file is an output of the workflow: deleting it has a plain run rebuild it.
DAMAGED = "damaged input: %s (delete it and run again to rebuild it)"


def _one_line_for_damaged_files(default, log):
    """Failures the user can act on without the code, as their message (a damaged input, a
    server that would not start or stopped): no traceback."""

    def hook(kind, value, tb):
        if isinstance(value, DamagedFile):
            log.error(DAMAGED, value)
        elif isinstance(value, ServerFailed):
            log.error("%s", value)
        else:
            default(kind, value, tb)

    return hook
