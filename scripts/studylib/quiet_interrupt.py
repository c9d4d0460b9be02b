"""Ctrl-C in a job of the study: the job stops quietly with exit status 130 (as a shell
reports an interrupt), not with a KeyboardInterrupt traceback that Snakemake prints from its
log (or that reaches the terminal while the job is still importing its libraries).

An entry script imports this first, before its heavy imports: ``from studylib import
quiet_interrupt  # noqa: F401``. What the interrupted job was writing is not lost: every
output is written to a temporary and moved into place (core/io.py), and Snakemake marks the
job's outputs incomplete, so the next plain run makes them again.
"""

from __future__ import annotations

import signal

#: The exit status of a process stopped by Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED = 128 + signal.SIGINT


def _stop(signum, frame):
    raise SystemExit(INTERRUPTED)


signal.signal(signal.SIGINT, _stop)
