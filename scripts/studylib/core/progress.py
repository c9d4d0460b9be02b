"""Where a long GPU job stands, for its log: ``[i/N]``, what just finished and an ETA."""

from __future__ import annotations

import time
from collections.abc import Callable


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """Counts finished steps of ``total``; the ETA is the mean time of the steps measured so
    far times the steps left (steps answered without measuring, e.g. from a journal, are
    counted with ``skip`` and leave the mean alone)."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic):
        self.total = total
        self.clock = clock
        self.done = 0
        self.timed = 0
        self.spent = 0.0
        self.last = clock()

    def skip(self) -> None:
        self.done += 1
        self.last = self.clock()

    def step(self) -> str:
        """Count one measured step; returns its ``[i/N] … ETA`` prefix."""
        now = self.clock()
        self.done += 1
        self.timed += 1
        self.spent += now - self.last
        self.last = now
        left = self.total - self.done
        eta = f", ETA {duration(left * self.spent / self.timed)}" if left > 0 else ", last"
        return f"[{self.done}/{self.total}{eta}]"
