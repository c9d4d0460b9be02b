"""Timing written once for every backend: eager, graph-replayed and cold (HBM) modes.

eager  one launch per sample between device events: what a Python caller sees, launch
       cost included.
graph  ``calls`` launches captured in one CUDA graph and replayed: kernel time without the
       CPU's launch cost (time per replay / calls).
cold   like graph, but the captured calls rotate through input sets totalling several times
       the L2 size, so the weights stream from HBM every call, as they do in decode.

A replay has a fixed cost of its own (launching the graph: a few µs, measured with an empty
graph). ``graph_calls`` sizes every replay from the kernel's own time so that the replay lasts
at least ``REPLAY_TARGET_US`` and that cost is spread the same way for every implementation:
a fixed call count would spread it over 10 calls of a slow kernel and 200 of a fast one, which
is enough to decide a ranking at decode sizes where margins are 5-10 %.

Every mode samples under one stopping rule: at least ``min_samples``; then stop at
``max_samples`` or ``max_time_s``, or once ``min_time_s`` has passed and the median's relative
standard error is under ``rel_noise``, or, for samples whose own spread (IQR over median) is
wider than the rankings' noise floor, under ``rel_noise`` x spread / floor (:func:`needed_stderr`).
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from ..core.verdicts import NOISE_FLOOR


@dataclass(frozen=True)
class StopRule:
    min_samples: int = 10
    max_samples: int = 2000
    min_time_s: float = 0.05
    max_time_s: float = 1.0
    rel_noise: float = 0.01

    @classmethod
    def from_config(cls, timing: dict, device: str) -> StopRule:
        return cls(
            min_samples=timing["min_samples"],
            max_samples=timing["max_samples"],
            min_time_s=timing["min_time_s"],
            max_time_s=timing["max_time_s"][device],
            rel_noise=timing["rel_noise"],
        )


def _spread(samples: list[float]) -> float:
    """IQR over median; inf under four samples or a median not above 0."""
    if len(samples) < 4:
        return math.inf
    q1, _, q3 = statistics.quantiles(samples, n=4)
    med = statistics.median(samples)
    return (q3 - q1) / med if med > 0 else math.inf


def rel_stderr_of(spread: float, n: float) -> float:
    """Relative standard error of a median of ``n`` samples whose IQR over median is
    ``spread`` (robust to outliers)."""
    sigma = spread / 1.349  # IQR of a normal distribution is 1.349 sigma
    # stderr of a median is ~1.2533 sigma/sqrt(n)
    return 1.2533 * sigma / math.sqrt(n)


def median_rel_stderr(samples: list[float], spread: float | None = None) -> float:
    """Relative standard error of the median, from the IQR (robust to outliers)."""
    spread = _spread(samples) if spread is None else spread
    return rel_stderr_of(spread, len(samples)) if samples else math.inf


#: A normal 95 % interval's half-width in standard errors.
Z95 = 1.96


def median_ci_pct(iqr, median, samples) -> float:
    """The 95 % interval of a point's median as a percent of it, half-width, from what its
    row keeps (IQR, median, samples: :func:`median_rel_stderr`'s estimate): the precision the
    stopping rule reached. NaN where any is missing, under four samples or a median not
    above 0."""
    try:
        iqr, median, samples = float(iqr), float(median), float(samples)
    except (TypeError, ValueError):
        return math.nan
    if not all(map(math.isfinite, (iqr, median, samples))) or median <= 0 or samples < 4:
        return math.nan
    return 100 * Z95 * rel_stderr_of(iqr / median, samples)


def needed_stderr(spread: float, rel_noise: float) -> float:
    """The median's relative standard error a point needs: ``rel_noise``, or, where its
    samples' own spread is wider than the rankings' noise floor, ``rel_noise`` x spread /
    floor. A verdict never resolves below the spread of the points it compares
    (core.verdicts.decision_noise), so a median known finer than a third of it (rel_noise
    1 % of the 3 % floor) buys nothing: on the H200 (2026-12-01) eager points of 5-13 %
    spread sampled up to 2,000 calls each, 424,000 (about 86 s) over three backends' sweeps,
    where this rule stops most at min_time_s (about 217,000 calls, 34 s, from their spreads)."""
    return rel_noise * max(1.0, spread / NOISE_FLOOR) if math.isfinite(spread) else 0.0


def sample_until(take: Callable[[], float], rule: StopRule) -> list[float]:
    """Call ``take`` (returns one sample, µs) until ``rule`` says stop."""
    samples: list[float] = []
    start = time.monotonic()
    while True:
        samples.append(take())
        elapsed = time.monotonic() - start
        n = len(samples)
        if n >= rule.max_samples:
            return samples
        if n < rule.min_samples:
            continue  # min_samples is a floor even past max_time_s
        if elapsed >= rule.max_time_s:
            return samples
        if elapsed >= rule.min_time_s:
            # Checking every sample costs O(n log n); every 8th keeps it cheap.
            if n % 8 == 0:
                spread = _spread(samples)
                if median_rel_stderr(samples, spread) <= needed_stderr(spread, rule.rel_noise):
                    return samples


#: A replay lasts at least this long (the fixed cost of a replay is then ~0.3 % of it).
REPLAY_TARGET_US = 1000.0
#: Calls captured to estimate a kernel's time before sizing the real graph.
PROBE_CALLS = 4
#: Back-to-back replays behind one lead replay: per probe, and per batch of samples.
TIMED_REPLAYS = 2
REPLAY_BATCH = 8
#: At most this many calls per replay (a 1 µs kernel reaches the target well before it).
MAX_GRAPH_CALLS = 2000


#: A replay's fixed cost stays under this share of it.
FIXED_COST_SHARE = 0.01


def replay_target_us(fixed_us: float = 0.0) -> float:
    """How long a replay must last: ``REPLAY_TARGET_US``, or longer when the fixed cost
    would otherwise exceed ``FIXED_COST_SHARE`` of it."""
    return max(REPLAY_TARGET_US, fixed_us / FIXED_COST_SHARE)


def graph_calls(us_per_call: float, target_us: float = REPLAY_TARGET_US) -> int:
    """Calls per replay so that one replay lasts at least ``target_us``."""
    if not us_per_call > 0:
        return MAX_GRAPH_CALLS
    return int(min(max(math.ceil(target_us / us_per_call), 1), MAX_GRAPH_CALLS))


def cold_rounds(us_per_set_sweep: float, target_us: float = REPLAY_TARGET_US) -> int:
    """Passes over every input set per cold replay, so that it lasts at least ``target_us``
    (one pass already streams several L2s of weights; more passes only lengthen it)."""
    return graph_calls(us_per_set_sweep, target_us)


#: A sustained loop (kernel power) keeps at most this much device work queued ahead of its
#: host: enough that the device never waits for it, little enough that the window ends when
#: its seconds do. Unbounded, the launch queue (about a thousand launches deep) held 1.3-6.3 s
#: of graph replays when the host's clock said stop: 4-s windows ran 4.05-11.0 s on the H200
#: (2026-12-04, 61 s over the default's 29 windows).
LAUNCH_LEAD_S = 0.02
#: How much device work one device event marks (events are not free on a launch-bound loop).
MARK_S = 0.002


class LaunchLead:
    """Keeps a back-to-back loop's device work at most about ``lead_s`` ahead of its host: an
    event recorded every ``stride`` steps (about ``mark_s`` of work), and once more than
    ``ahead`` are pending, the host waits for the oldest. ``make_event``: the device's event
    factory (``torch.cuda.Event``); None for a device that runs each step synchronously."""

    def __init__(self, step_s: float, make_event=None, lead_s: float = LAUNCH_LEAD_S,
                 mark_s: float = MARK_S) -> None:  # fmt: skip
        step_s = max(float(step_s), 1e-9)
        self.stride = max(1, math.ceil(mark_s / step_s))
        self.ahead = max(2, math.ceil(lead_s / (self.stride * step_s)))
        self.make_event = make_event
        self.pending: list = []
        self.steps = 0

    def after_step(self) -> None:
        self.steps += 1
        if self.make_event is None or self.steps % self.stride:
            return
        event = self.make_event()
        event.record()
        self.pending.append(event)
        if len(self.pending) > self.ahead:
            self.pending.pop(0).synchronize()


def summarize(samples: list[float], prefix: str) -> dict:
    if not samples:
        return {}
    if len(samples) >= 4:
        q1, med, q3 = statistics.quantiles(samples, n=4)
        med = statistics.median(samples)
    else:
        q1 = q3 = med = statistics.median(samples)
    return {
        f"{prefix}_us": med,
        f"{prefix}_iqr_us": q3 - q1,
        f"{prefix}_samples": len(samples),
    }


class CpuTimer:
    """Monotonic host clock; CPU kernels are synchronous, so it brackets the whole call."""

    def eager(self, fn: Callable[[], object]) -> float:
        t0 = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - t0) / 1e3


class CudaTimer:
    """Device events on the current stream."""

    def __init__(self):
        import torch

        self.torch = torch
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def eager(self, fn: Callable[[], object]) -> float:
        # The GPU is idle when `start` is recorded, so the span includes the CPU's launch.
        self.torch.cuda.synchronize()
        self.start.record()
        fn()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e3

    def capture(self, fn: Callable[[], object], calls: int):
        """A CUDA graph of ``calls`` back-to-back calls of ``fn`` (captured on a side stream)."""
        torch = self.torch
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm-up on the capture stream, as torch's docs require
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        torch.cuda.synchronize()
        return graph

    def replays(self, graph, calls: int, count: int) -> list[float]:
        """µs per call of each of ``count`` back-to-back replays of ``graph``, one event
        between two replays, after an untimed lead replay: the CPU queues the timed replays
        while the lead runs, so no sample holds launch latency (a graph's launch, which
        grows with its node count, cost about 0.3 µs per call of a 5 µs kernel when each
        replay started from an idle GPU) and the GPU runs back to back, as in a server's
        step and the power loops."""
        torch = self.torch
        events = [torch.cuda.Event(enable_timing=True) for _ in range(count + 1)]
        torch.cuda.synchronize()
        graph.replay()
        events[0].record()
        for event in events[1:]:
            graph.replay()
            event.record()
        events[-1].synchronize()
        return [a.elapsed_time(b) * 1e3 / calls for a, b in zip(events, events[1:], strict=False)]

    def replay(self, graph, calls: int, replays: int = TIMED_REPLAYS) -> float:
        """µs per call over ``replays`` back-to-back replays (see :meth:`replays`)."""
        return statistics.fmean(self.replays(graph, calls, replays))

    def replay_sampler(self, graph, calls: int, batch: int = REPLAY_BATCH):
        """A ``take`` for :func:`sample_until`: one replay per sample, timed back to back
        in batches of ``batch`` (one lead replay and one synchronise per batch)."""
        queued: list[float] = []

        def take() -> float:
            if not queued:
                queued.extend(reversed(self.replays(graph, calls, batch)))
            return queued.pop()

        return take

    def replay_isolated(self, graph, calls: int) -> float:
        """µs per call of one replay started on an idle GPU (launch latency included): the
        timing before back-to-back replays, kept for the timer test's diagnosis."""
        self.torch.cuda.synchronize()
        self.start.record()
        graph.replay()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e3 / calls

    def probe(self, fn: Callable[[], object], fixed_us: float = 0.0, calls: int = PROBE_CALLS,
              replays: int = 5) -> float:  # fmt: skip
        """µs per call of ``fn`` from a small graph (the fastest of a few replays, less the
        replay's fixed cost): the kernel's time without launch cost, to size the real graph."""
        graph = self.capture(fn, calls)
        try:
            total = min(self.replay(graph, 1) for _ in range(replays))
        finally:
            del graph
        return max(total - fixed_us, total / 2) / calls

    def fixed_cost(self, replays: int = 50) -> float:
        """µs per replay of an empty graph replayed back to back (timed as :meth:`replay`
        times): the fixed cost every replay pays."""

        torch = self.torch
        graph = torch.cuda.CUDAGraph()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch warns that the graph is empty: meant
                with torch.cuda.graph(graph):
                    pass
            self.replay(graph, 1)
        except RuntimeError:  # a runtime that refuses empty graphs: the smallest kernel
            scratch = torch.empty(1, device="cuda")
            graph = self.capture(scratch.zero_, 1)
        try:
            return statistics.median(self.replays(graph, 1, replays))
        finally:
            del graph


def timer_for(device: str):
    return CudaTimer() if device == "cuda" else CpuTimer()
