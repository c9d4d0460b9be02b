"""A load's event loop that a job's stop signal ends cleanly (decode_load.run_load).

A stop signal (SIGTERM, SIGHUP, SIGINT; serving.guard turns them into SystemExit in the main
thread) that lands while the loop runs cancels the load, and reaches the job's own handler
only once the loop has closed. Raised inside the loop, the job's SystemExit ended whichever
request's task ran then, then each client awaiting it, and asyncio.run's shutdown logged them
all with their tracebacks into the job's log (CI: decode stopped by SIGHUP). Raised inside
asyncio.run's own teardown, it can stop ``loop.close()`` half way (its self-pipe closed, the
loop not marked closed): at exit the loop's ``__del__`` closes it again and logs "ValueError:
Invalid file descriptor: -1" (CI, 2026-12-04: Snakemake killed by SIGHUP, the job given SIGTERM
twice, by PR_SET_PDEATHSIG and by the thread watching Snakemake). So from the loop's start to
its close a stop signal is only remembered, and delivered after.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading

from .guard import STOP_SIGNALS as JOB_STOP_SIGNALS

#: Signals that stop a job: serving.guard's, and Ctrl-C.
STOP_SIGNALS = (*JOB_STOP_SIGNALS, signal.SIGINT)


@contextlib.contextmanager
def _blocked(signals: list[int]):
    """``signals`` held pending while handlers change hands (none lost, none to a default)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def run_stoppable(load):
    """Run the coroutine ``load`` in a new loop and return its result. A stop signal from the
    loop's start to its close cancels the load (while it runs) or is remembered (before and
    after), and is then delivered to the handler that was there before: SystemExit or
    KeyboardInterrupt from the job's, else this raises CancelledError. Only in the main
    thread (signals reach no other); a signal ignored stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(load)
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    caught = [sig for sig, handler in previous.items() if handler is not signal.SIG_IGN]
    received: list[int] = []

    def remember(sig: int, _frame) -> None:
        if not received:
            received.append(sig)

    async def stoppable():
        loop, main = asyncio.get_running_loop(), asyncio.current_task()

        def stop(sig: int) -> None:
            if not received:
                received.append(sig)
                main.cancel()

        with _blocked(caught):
            for sig in caught:
                loop.add_signal_handler(sig, stop, sig)
        try:
            if received:  # it came while the loop started
                load.close()
                raise asyncio.CancelledError
            return await load
        finally:
            # The loop's removal leaves the default action: remember until it has closed.
            with _blocked(caught):
                for sig in caught:
                    loop.remove_signal_handler(sig)
                    signal.signal(sig, remember)

    with _blocked(caught):
        for sig in caught:
            signal.signal(sig, remember)
    result = None
    try:
        result = asyncio.run(stoppable())
    except asyncio.CancelledError:
        if not received:
            raise
    finally:
        with _blocked(caught):
            for sig in caught:
                signal.signal(sig, previous[sig])
    if received:
        signal.raise_signal(received[0])  # the job's handler: SystemExit, KeyboardInterrupt
        raise asyncio.CancelledError(f"load stopped by {signal.Signals(received[0]).name}")
    return result
