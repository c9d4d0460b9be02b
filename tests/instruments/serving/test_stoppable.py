"""A load's loop and the job's stop signals (instruments/serving/stoppable.py): a signal
from the loop's start to its close reaches the job's handler only once the loop has closed."""

import asyncio
import gc
import os
import signal
import sys

import pytest
from studylib.instruments.serving.stoppable import run_stoppable


@pytest.fixture
def job_handler():
    """The job's SIGTERM handler (serving.guard's turns it into SystemExit), recording
    whether a loop was running where it ran; the previous one back afterwards."""
    seen = []

    def handler(signum, _frame):
        seen.append(asyncio._get_running_loop())
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    yield seen
    signal.signal(signal.SIGTERM, previous)


def test_a_stop_signal_in_the_loops_teardown_waits_until_it_has_closed(job_handler):
    # CI (2026-12-04): the job got SIGTERM twice (PR_SET_PDEATHSIG and the thread watching
    # Snakemake); the second landed in asyncio.run's teardown, the job's SystemExit stopped
    # loop.close() half way, and at exit the loop's __del__ logged "ValueError: Invalid file
    # descriptor: -1". Here the signal comes from an async generator that asyncio.run closes
    # in its teardown (shutdown_asyncgens).
    async def generator():
        try:
            yield 1
        finally:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(0.01)

    async def load():
        await generator().__anext__()  # left open: the teardown closes it
        return "done"

    unraisable = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        with pytest.raises(SystemExit) as stopped:
            run_stoppable(load())
        gc.collect()  # a loop left half closed would log from its __del__ here
    finally:
        sys.unraisablehook = hook
    assert stopped.value.code == 128 + signal.SIGTERM
    assert job_handler == [None]  # once, with no loop running: after it closed
    assert unraisable == []


def test_a_load_that_ends_without_a_signal_returns_its_result(job_handler):
    async def load():
        await asyncio.sleep(0)
        return 42

    assert run_stoppable(load()) == 42
    assert job_handler == [] and signal.getsignal(signal.SIGTERM).__name__ == "handler"
