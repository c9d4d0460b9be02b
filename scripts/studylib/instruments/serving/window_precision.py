"""How precisely a decode window knows its rate (issue 34): the window's tokens counted per
slice of at most a second, and the 95 % confidence interval of the mean rate over those
slices, relative to it (Student's t). TPOT is C over that rate, so it is known to the same
relative width. The load ends a window once this is within ``decode.tpot_ci_pct``
(decode_load); the summary states it for every window (``tpot_ci_pct``)."""

from __future__ import annotations

import statistics

#: A window's precision is read from its token rate over slices of a tenth of its shortest
#: length, a second at most: the rate's 95 % confidence interval over those slices.
PRECISION_SLICES = 10
MAX_SLICE_S = 1.0


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
                tokens[min(int((t - t0) / width), count - 1)] += 1
    return [(edges[i + 1] - edges[i], tokens[i]) for i in range(count)]
