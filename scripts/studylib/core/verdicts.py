"""The one rule every verdict of the study follows: a difference counts only when it is larger
than the measurement's own spread.

A ranking ("fastest"), a comparison ("CUDA graphs cut TPOT"), a judgement against a threshold
("memory-bound", "launch-bound", "flat", "throttled", "explained") all reduce to a margin (how
far apart, as a share) set against a noise (how far the same measurement moves by itself, as a
share): the larger of the spreads of both sides (IQR over median, the run-to-run change where
two runs of the same point exist) and :data:`NOISE_FLOOR`. A margin not above its noise is no
verdict: a ranking is a tie, a judgement is undecided.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field


def _finite(x) -> float:
    try:
        value = float(x)
    except (TypeError, ValueError):
        return float("nan")
    return value if math.isfinite(value) else float("nan")


#: The least spread any decision assumes (a share): two medians closer than this are a tie
#: even when both measurements were tight (clocks, allocation and placement move a point by
#: a few per cent between processes on one machine).
NOISE_FLOOR = 0.03


def spread(iqr, median) -> float:
    """A measurement's own spread as a share of its value (IQR over median); NaN if unknown."""
    iqr, median = _finite(iqr), _finite(median)
    if math.isnan(iqr) or math.isnan(median) or median <= 0:
        return float("nan")
    return max(iqr, 0.0) / median


def run_to_run(a, b) -> float:
    """How far one measurement moved between two runs, as a share of the smaller: |a/b − 1|
    taken the larger way round (a ±15 % change is 0.15 whichever run is first)."""
    a, b = _finite(a), _finite(b)
    if math.isnan(a) or math.isnan(b) or a <= 0 or b <= 0:
        return float("nan")
    return max(a, b) / min(a, b) - 1


def decision_noise(*shares) -> float:
    """The noise a decision uses: the largest of the known spreads of the sides it compares,
    and never below :data:`NOISE_FLOOR`."""
    known = [s for s in map(_finite, shares) if not math.isnan(s)]
    return max([NOISE_FLOOR, *known])


def beyond(margin, noise) -> bool:
    """True when ``margin`` (a share) is larger than ``noise`` (a share): a verdict holds."""
    margin, noise = _finite(margin), _finite(noise)
    return not math.isnan(margin) and not math.isnan(noise) and margin > noise


def gap(slow, fast) -> float:
    """How much slower ``slow`` is than ``fast``, as a share of ``fast`` (``slow/fast − 1``)."""
    slow, fast = _finite(slow), _finite(fast)
    if math.isnan(slow) or math.isnan(fast) or fast <= 0:
        return float("nan")
    return slow / fast - 1


def against_threshold(value, threshold, noise, above: bool = True) -> tuple[str, float]:
    """A judgement of ``value`` against ``threshold``: ("yes" | "no" | "undecided", margin),
    with the margin as a share of the threshold; "undecided" when the value is within
    ``noise`` (a share of the value) of the threshold. ``above``: "yes" means value above it."""
    value, threshold = _finite(value), _finite(threshold)
    if math.isnan(value) or math.isnan(threshold) or threshold == 0:
        return "undecided", float("nan")
    margin = abs(value - threshold) / abs(threshold)
    if not beyond(margin, noise):
        return "undecided", margin
    return ("yes" if (value > threshold) == above else "no"), margin


@dataclass(frozen=True)
class Contender:
    """One side of a ranking: who, its time (lower is better) and its own spread (a share)."""

    who: str
    value: float
    noise: float = float("nan")
    row: object = None


@dataclass(frozen=True)
class Ranking:
    """The outcome of :func:`rank`: who is fastest (alone or tied), the runner-up outside the
    tie, and the margin to it against the noise the decision used."""

    tied: tuple[str, ...]
    best: Contender
    runner_up: Contender | None
    #: The runner-up's gap over the fastest (a share), NaN when there is none: beyond ``noise``
    #: by construction.
    margin: float
    #: The noise the runner-up decision used (a share): the fastest's and the runner-up's.
    noise: float
    #: Every contender, fastest first.
    order: tuple[Contender, ...] = field(default=())

    @property
    def status(self) -> str:
        return "tie" if len(self.tied) > 1 else "answered"


def rank(contenders: Iterable[Contender]) -> Ranking | None:
    """Rank ``contenders`` by value (lower first). Every contender whose gap over the fastest is
    not beyond :func:`decision_noise` of the two is tied with it, and so is every contender
    faster than a tied one (a noisy slow contender's tie must not leave a steadier, faster one
    outside it as "runner-up"); the runner-up is the fastest of the rest. None when no
    contender has a positive value."""
    order = sorted((c for c in contenders if _finite(c.value) > 0), key=lambda c: c.value)
    if not order:
        return None
    best = order[0]
    within = [not beyond(gap(c.value, best.value), decision_noise(best.noise, c.noise))
              for c in order]  # fmt: skip
    last = max(i for i, w in enumerate(within) if w)
    tied, rest = order[: last + 1], order[last + 1 :]
    names = tuple(dict.fromkeys(c.who for c in tied))
    runner = next((c for c in rest if c.who not in names), None)
    if runner is None:
        return Ranking(names, best, None, float("nan"), decision_noise(best.noise), tuple(order))
    # The runner-up's margin is the one the rule decided on: its gap over the fastest, against
    # the noise of the two (ties are not transitive: a tied contender may sit nearer to it).
    noise = decision_noise(best.noise, runner.noise)
    return Ranking(names, best, runner, gap(runner.value, best.value), noise, tuple(order))


@dataclass(frozen=True)
class Stretch:
    """Consecutive sizes summarised as one verdict (see :func:`stretches`)."""

    keys: tuple
    #: Fastest or tied at every size of the stretch.
    always: tuple[str, ...]
    #: Tied for fastest at some sizes only: who -> the sizes.
    sometimes: dict[str, tuple]
    rankings: tuple[Ranking, ...]

    @property
    def status(self) -> str:
        return "answered" if len(self.always) == 1 and not self.sometimes else "tie"


def stretches(ranked: Iterable[tuple[Hashable, Ranking]],
              order: Callable[[str], float] | None = None) -> list[Stretch]:  # fmt: skip
    """Consecutive (key, ranking) pairs, in the order given, merged while some contender is
    fastest or tied at every one of them: the verdict of a range of sizes never rests on one
    size, and a range whose winners change is split where they change. ``order`` sorts the
    names within a stretch (default: by name)."""
    out: list[Stretch] = []
    keys: list = []
    always: set[str] = set()
    runs: list[tuple[Hashable, Ranking]] = []

    def close() -> None:
        if not runs:
            return
        sometimes: dict[str, list] = {}
        for key, r in runs:
            for who in r.tied:
                if who not in always:
                    sometimes.setdefault(who, []).append(key)
        sort = order or (lambda name: name)
        out.append(Stretch(tuple(keys), tuple(sorted(always, key=sort)),
                           {w: tuple(k) for w, k in sorted(sometimes.items(),
                                                           key=lambda kv: sort(kv[0]))},
                           tuple(r for _, r in runs)))  # fmt: skip

    for key, ranking in ranked:
        tied = set(ranking.tied)
        if runs and always & tied:
            always &= tied
        else:
            close()
            keys, always, runs = [], set(tied), []
        keys.append(key)
        runs.append((key, ranking))
    close()
    return out


def within_tolerance(error, tolerance, noise) -> tuple[str, float]:
    """A prediction judged against its tolerance: ("within" | "outside" | "undecided",
    margin). ``error`` (the prediction's relative error, any sign), ``tolerance`` and
    ``noise`` are shares of the same measured value; the margin is how far ``|error|`` lies
    from the tolerance. "undecided" when that margin is not beyond the noise: an error at the
    edge of its tolerance decides nothing either way."""
    error, tolerance = _finite(error), _finite(tolerance)
    if math.isnan(error) or math.isnan(tolerance):
        return "undecided", float("nan")
    margin = abs(abs(error) - tolerance)
    if not beyond(margin, noise):
        return "undecided", margin
    return ("within" if abs(error) < tolerance else "outside"), margin
