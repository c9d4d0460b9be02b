"""Glue for entry scripts run by Snakemake's ``script:`` directive."""

from __future__ import annotations

import logging
import sys

from .core.table_registry import DamagedFile
from .instruments.gpu_slots import DeviceBusy
from .instruments.serving.guard import protect_job
from .instruments.serving.launcher import ServerFailed
from .study_tables import check_inputs

#: How long a job stopped by a signal (its Snakemake gone) may take to tear down before it
#: exits hard: a sweep's or power loop's worker is killed at once, the rest have nothing to
#: stop. A decode job's server takes longer (run_decode.py protects itself first, with more).
JOB_HARD_EXIT_S = 5.0


def setup_logging(smk) -> logging.Logger:
    """Make this job die with its Snakemake (however Snakemake dies: its SIGTERM, SIGHUP or
    Ctrl-C stop the job cleanly, one line in its log; serving/guard.py), send its stdout,
    stderr and logging to the rule's ``log:`` file, and check the job's inputs that are study
    tables before it starts (core/table_registry.py; every stage's tables are registered by
    study_tables): a damaged one stops the job with one line naming the file and what is
    wrong, not a traceback; so does a server that fails, or a device held by another
    Snakemake's job (instruments/gpu_slots.py)."""
    protect_job(JOB_HARD_EXIT_S, doing="stopping")
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
    server that would not start or stopped, a device another Snakemake's job holds): no
    traceback."""

    def hook(kind, value, tb):
        if isinstance(value, DamagedFile):
            log.error(DAMAGED, value)
        elif isinstance(value, (ServerFailed, DeviceBusy)):
            log.error("%s", value)
        else:
            default(kind, value, tb)

    return hook
