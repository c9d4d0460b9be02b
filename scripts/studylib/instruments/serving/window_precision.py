"""How precisely a decode window knows its rate (issue 34): the window's tokens counted per
slice of at most a second, and the 95 % confidence interval of the mean rate over those
slices, relative to it (Student's t). TPOT is C over that rate, so it is known to the same
relative width. The load ends a window once this is within ``decode.tpot_ci_pct``
(decode_load, counting the slices as they close: :class:`RunningSlices`), at a slice's edge,
and the summary states it for every window (``tpot_ci_pct``) from the same slices
(:func:`window_slices`): a window that ended at 1 % says 1 % or better. A full-length window
replays the rule on its own records (:func:`precise_end`): where it would have ended."""

from __future__ import annotations

import bisect
import statistics

#: A window's precision is read from its token rate over slices of a tenth of its shortest
#: length, a second at most: the rate's 95 % confidence interval over those slices.
PRECISION_SLICES = 10
MAX_SLICE_S = 1.0
#: A window ended at a slice's edge lasts ``edge - t0``, which floating point may put a hair
#: under the whole slices it holds: it counts as lasting them within this.
EDGE_TOLERANCE_S = 1e-6


def lasted(seconds: float, shortest_s: float) -> bool:
    """Whether a window of ``seconds`` lasted ``shortest_s`` (within EDGE_TOLERANCE_S)."""
    return seconds >= shortest_s - EDGE_TOLERANCE_S


def overlap_s(spans: list[tuple[float, float]], t0: float, t1: float) -> float:
    """The seconds of (start, length) spans that fall inside [t0, t1]."""
    return sum(max(min(a + length, t1) - max(a, t0), 0.0) for a, length in spans)


def slice_s(seconds: float) -> float:
    """The slice length for a window of at least ``seconds``."""
    return min(MAX_SLICE_S, seconds / PRECISION_SLICES)


def _t975(dof: int) -> float:
    """Student's t, 97.5th percentile (Cornish-Fisher from the normal's, three terms;
    within 0.2 % of the table from 5 degrees of freedom on)."""
    z = 1.959964
    return (z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * dof**3))  # fmt: skip


def rate_precision(slices: list[tuple[float, int]]) -> float | None:
    """Relative half-width of the 95 % confidence interval of the mean token rate over
    slices of (seconds, tokens): the precision of the window's rate, and so of its TPOT (C
    over the rate, for the same relative width). None under three slices or no tokens."""
    rates = [tokens / seconds for seconds, tokens in slices if seconds > 0]
    if len(rates) < 3:
        return None
    mean = statistics.fmean(rates)
    if mean <= 0:
        return None
    return _t975(len(rates) - 1) * statistics.stdev(rates) / len(rates) ** 0.5 / mean


def slice_of(t: float, t0: float, width: float) -> int:
    """The slice (from 0) that a token at ``t`` falls in, slices of ``width`` from ``t0``."""
    return int((t - t0) / width)


def window_slices(records, t0: float, t1: float, width: float):
    """(seconds, tokens) per slice of ``width`` over [t0, t1] of the requests' tokens
    (``token_times``); a remainder under half a slice joins the last slice (alone it would
    weigh as much as a whole one)."""
    count = max(int((t1 - t0) / width), 1)
    if (t1 - t0) - count * width >= width / 2:
        count += 1
    edges = [t0 + i * width for i in range(count)] + [t1]
    tokens = [0] * count
    for r in records:
        for t in r.token_times:
            if t0 <= t <= t1:
                tokens[min(slice_of(t, t0, width), count - 1)] += 1
    return [(edges[i + 1] - edges[i], tokens[i]) for i in range(count)]


def precise_enough(slices: list[tuple[float, int]], seconds: float, shortest_s: float,
                   precision: float) -> bool:  # fmt: skip
    """The rule that ends a window: ``seconds`` into it, with these slices closed, it has
    lasted ``shortest_s`` and its rate is known to ``precision`` (0: never)."""
    if precision <= 0 or not lasted(seconds, shortest_s):
        return False
    known = rate_precision(slices)
    return known is not None and known <= precision


def precise_end(records, t0: float, t1: float, precision: float, shortest_s: float,
                longest_s: float) -> float:  # fmt: skip
    """Where the load's rule (decode_load: slices of ``slice_s(shortest_s)`` judged as each
    closes, :func:`precise_enough`) would have ended a window that started at ``t0``, read
    from the records of a window that ran on to ``t1``: the first slice edge where the rule
    holds, else ``t0 + longest_s``, and never past ``t1``."""
    deadline = min(t0 + longest_s, t1)
    if precision <= 0:
        return deadline
    running = RunningSlices(t0, slice_s(shortest_s))
    while (edge := running.edge(len(running.slices) + 1)) <= deadline:
        running.close(records)
        if precise_enough(running.slices, edge - t0, shortest_s, precision):
            return edge
    return deadline


class RunningSlices:
    """:func:`window_slices` of a window still running, a slice added as each closes: after
    ``close(records)`` has closed k slices they are those of ``window_slices(records, t0,
    edge(k), width)``. Each call reads only the tokens that arrived since the last (a pointer
    per request), so the load's loop does not rescan a window's tokens every second."""

    def __init__(self, t0: float, width: float):
        self.t0, self.width = t0, width
        self.slices: list[tuple[float, int]] = []
        self._read: dict[int, int] = {}  # id(record) -> its tokens already counted

    def edge(self, k: int) -> float:
        """The end of slice k - 1 (edge(0) is the window's start)."""
        return self.t0 + k * self.width

    def close(self, records) -> None:
        """Close the next slice (its edge has passed: every token before it has arrived)."""
        k = len(self.slices)
        tokens = 0
        for r in records:
            times = r.token_times
            start = self._read.get(id(r))
            if start is None:  # a request first seen: its tokens before the window do not count
                start = bisect.bisect_left(times, self.t0)
            end = start
            while end < len(times) and slice_of(times[end], self.t0, self.width) <= k:
                end += 1
            tokens += end - start
            self._read[id(r)] = end
        self.slices.append((self.edge(k + 1) - self.edge(k), tokens))
