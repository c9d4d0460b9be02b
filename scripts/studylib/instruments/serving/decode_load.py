"""Decode-heavy closed-loop load at a fixed concurrency, timed on the sampler's clock.

C clients keep C requests in flight: each finished request is replaced at once by a new one
(random token ids of a fixed input length, a fixed output length with EOS ignored,
temperature 0, streamed). A timed load (``duration_s``) keeps this up for that long once all
C requests are first in flight (and until the window holds at least C tokens), so the steady
window lasts the configured time whatever the server's speed, and then cancels the requests
still streaming; a counted load (``num_prompts``) sends that many requests (warm-ups).
Per request: start, time of the first token, every later token's arrival, end, and the
server's completion_tokens (checked against the target). After a failed request no new one
is sent (the window is invalid anyway; a dead server is not hammered). The active-request
count over time gives the steady window: the span where at least 0.85 × C requests are in
flight.

The clients are coroutines on one asyncio loop over plain sockets (stdlib only, so it runs
on any box): at C = 256 one thread parses every streamed token, far below a core, where 256
threads would fight over the GIL. ``run_load`` reports the CPU it used.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .completion_stream import stream_completion
from .load_stagger import first_length, first_prompt_len, kept_clients, warmed_up_at
from .served_model import prompt_text
from .stoppable import run_stoppable
from .window_precision import RunningSlices, precise_enough, slice_s

#: The steady window: the span with at least this share of the target concurrency in flight.
STEADY_FRACTION = 0.85

#: The load watches its own event loop: a wake-up due every HEARTBEAT_S that comes more than
#: STALL_S late is a stall of the load itself (every stream's chunks wait in their sockets
#: meanwhile, and reach the window in a burst after it), kept in LoadResult.stalls.
HEARTBEAT_S = 0.01
STALL_S = 0.05


@dataclass(frozen=True)
class LoadSpec:
    concurrency: int
    input_len: int
    output_len: int
    # Timed load: keep C requests in flight this long after all C are first in flight
    # (0: not timed). Counted load: send this many requests in all (None: not counted).
    duration_s: float = 0.0
    num_prompts: int | None = None
    vocab_size: int = 32000
    seed: int = 0
    temperature: float = 0.0
    timeout_s: float = 600.0
    # Ask the server for its running token count in every chunk (continuous_usage_stats), so
    # a chunk of several tokens counts them all; False: one token per chunk with text.
    usage_per_chunk: bool = True
    # A timed load's window may end early, once its token rate (C over TPOT) is known to
    # within ``precision`` (relative half-width of its 95 % confidence interval, 0.01 = 1 %),
    # but not before ``shortest_s``; duration_s is then the longest. 0: always duration_s.
    precision: float = 0.0
    shortest_s: float = 0.0
    # A timed load's own warm-up: its window starts no sooner than warmup_s after its start,
    # and, staggered, once each client's first (shorter) request has ended (load_stagger).
    warmup_s: float = 0.0
    stagger: bool = False
    # Staggered: first prompts also hold their age's context (load_stagger.first_prompt_len).
    preaged: bool = False
    # Carried levels (issue 34): after its window at ``concurrency`` the load steps down to
    # each of these in turn, keeping an evenly aged subset of its clients (load_stagger.
    # kept_clients) and cancelling the rest's requests. Each level's window starts once every
    # kept client has streamed since the step, the server holds no more than the level's
    # requests (run_load's ``held``) and ``settle_s`` has passed, and ends by the same rule.
    then: tuple[int, ...] = ()
    settle_s: float = 0.0

    def __post_init__(self):
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.duration_s <= 0 and not self.num_prompts:
            raise ValueError("a load needs duration_s > 0 or num_prompts")
        if self.precision > 0 and not 0 < self.shortest_s <= self.duration_s:
            raise ValueError("a window ending at a precision needs 0 < shortest_s <= duration_s")
        if self.preaged and not self.stagger:
            raise ValueError("pre-aged first requests need a staggered load (stagger)")
        levels = (self.concurrency, *self.then)
        steps = zip(levels, levels[1:], strict=False)
        if self.then and (self.duration_s <= 0 or any(not 1 <= b < a for a, b in steps)):
            raise ValueError(f"carried levels step down from {self.concurrency} to at least 1 "
                             f"in a timed load, got {list(self.then)}")  # fmt: skip


@dataclass
class LoadControl:
    """Control of a running load from another thread: ``streaming`` is set once each of the
    first C requests has streamed ``after_tokens`` tokens (or has ended): with 1, once the
    prefill burst of the load's start is over; with more, once their KV cache has grown by
    that much. ``tokens`` is then the fewest tokens any of them had streamed. Setting
    ``stop`` ends the load as a timed load's deadline does (no new request, the streaming
    ones cancelled).

    ``settle_s``: ``streaming`` is also set once no more of the first C requests has reached
    ``after_tokens`` for this long, with at least one there: a server that admits fewer than
    C (SGLang 0.5.16 at --max-running-requests 512 held one of 512 profile requests queued
    for 35 s on the H200, 2026-12-04, until the first ones ended) is not waited for.
    ``waiting`` then counts the requests not there."""

    after_tokens: int = 1
    settle_s: float | None = None
    streaming: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    tokens: int | None = None
    waiting: int = 0


@dataclass
class RequestRecord:
    index: int
    start: float
    first_token: float | None = None
    token_times: list[float] = field(default_factory=list)
    end: float | None = None
    completion_tokens: int | None = None
    error: str = ""
    cut: bool = False  # still streaming when a timed load ended: cancelled, not failed
    max_tokens: int | None = None  # a staggered first request's length; None: output_len
    client: int = -1  # the client (0 ... C - 1) that sent it

    @property
    def ttft_s(self) -> float | None:
        return self.first_token - self.start if self.first_token is not None else None

    def chunks(self) -> list[tuple[float, int]]:
        """(arrival, tokens) per chunk that brought tokens: tokens sharing a time."""
        out: list[tuple[float, int]] = []
        for t in self.token_times:
            if out and out[-1][0] == t:
                out[-1] = (t, out[-1][1] + 1)
            else:
                out.append((t, 1))
        return out

    def itl_s(self) -> list[float]:
        """The gap before each token after the first chunk: a chunk's tokens share the gap
        since the chunk before (a server streaming every n steps sends n tokens at once: n
        gaps of an n-th each, not one gap and n - 1 zeros)."""
        chunks = self.chunks()
        return [(t - prev) / n for (prev, _), (t, n) in zip(chunks, chunks[1:], strict=False)
                for _ in range(n)]  # fmt: skip


@dataclass
class LoadResult:
    records: list[RequestRecord]
    active: list[tuple[float, int]]  # (t, in-flight count) after every change
    cpu_s: float  # CPU time of the load generator's thread
    wall_s: float
    # When each of the first C requests had its first token (or had ended): the load's
    # admission, C prefills at once, is over; a timed load's own warm-up too (LoadSpec).
    # None when it never was.
    admitted: float | None = None
    # Where a window that ended at its precision ended (a slice's edge: the precision rule's
    # last slice); None when it ran its whole length.
    window_end: float | None = None
    # The load's own stalls: (when its event loop was due to wake, how late it woke), for
    # wake-ups more than STALL_S late.
    stalls: list[tuple[float, float]] = field(default_factory=list)
    # Each level's span (a timed load's one, or one per carried level): its concurrency, begin (the
    # load's start or the step down to it), admitted (its window's start, None: never),
    # window_end (where its precision rule ended it, None: at its end), end (the step to the
    # next level, None for the last) and held (the server's requests at its window's start,
    # None: not asked).
    levels: list[dict] = field(default_factory=list)

    @property
    def cpu_pct(self) -> float | None:
        return 100 * self.cpu_s / self.wall_s if self.wall_s > 0 else None


def prompt_ids(spec: LoadSpec, index: int) -> list[int]:
    """Prompt ``index``: fresh random token ids, reproducible from the spec's seed, input_len
    of them (a pre-aged first request's more: load_stagger.first_prompt_len)."""
    rng = random.Random(spec.seed * 1_000_003 + index)
    # Skip the first ids: special tokens (BOS/EOS/PAD) usually live there.
    low = min(100, spec.vocab_size - 1)
    return [rng.randrange(low, spec.vocab_size) for _ in range(first_prompt_len(spec, index))]


def random_prompts(spec: LoadSpec, count: int) -> list[list[int]]:
    return [prompt_ids(spec, i) for i in range(count)]


async def _timed(func, timeout_s, *args):
    # The coroutine is made inside the task: one cancelled before it starts leaves none
    # behind un-awaited.
    return await asyncio.wait_for(func(*args), timeout_s)


async def _run(base_url, model, spec, extras, make_prompt, control=None,
               held=None) -> LoadResult:  # fmt: skip
    parts = urlsplit(base_url)
    records: list[RequestRecord] = []
    active: list[tuple[float, int]] = [(time.monotonic(), 0)]
    state = {"in_flight": 0, "issued": 0, "deadline": None, "failed": False, "stop": False,
             "keep": set(range(spec.concurrency))}  # fmt: skip
    full = asyncio.Event()
    streaming: dict[asyncio.Task, RequestRecord] = {}
    latest: dict[int, tuple[asyncio.Task, RequestRecord]] = {}  # each client's last request
    levels: list[dict] = []

    def more(client_id: int) -> bool:
        # An error makes the window invalid anyway: stop rather than hammer a dead server.
        if state["failed"] or client_id not in state["keep"]:
            return False
        if spec.num_prompts is not None and state["issued"] >= spec.num_prompts:
            return False
        return not state["stop"]  # set when a timed load's window is complete

    def change(delta: int) -> None:
        state["in_flight"] += delta
        now = time.monotonic()
        active.append((now, state["in_flight"]))
        if state["in_flight"] >= spec.concurrency and not full.is_set():
            full.set()
            if spec.duration_s > 0:
                state["deadline"] = now + spec.duration_s

    async def client(client_id: int) -> None:
        # A client slot counts as in flight from its first request to its last: the next
        # request follows the previous one at once, so the count does not dip in between.
        if not more(client_id):
            return
        change(+1)
        try:
            while more(client_id):
                index = state["issued"]
                state["issued"] += 1
                record = RequestRecord(index=index, start=time.monotonic(), client=client_id,
                                       max_tokens=first_length(spec, index))  # fmt: skip
                records.append(record)
                task = asyncio.ensure_future(
                    _timed(stream_completion, spec.timeout_s,
                           parts, model, make_prompt(index), spec, extras, record)
                )  # fmt: skip
                streaming[task] = record
                latest[client_id] = (task, record)
                try:
                    await task
                except TimeoutError:
                    record.error = f"TimeoutError: no end after {spec.timeout_s:g} s"
                    record.end = time.monotonic()
                except asyncio.CancelledError:
                    record.cut, record.end = True, time.monotonic()
                    if asyncio.current_task().cancelling():
                        # this client itself is cancelled (the job is stopping: asyncio.run
                        # cancels every task on its way out), not only its request: end
                        raise
                finally:
                    streaming.pop(task, None)
                state["failed"] = state["failed"] or bool(record.error)
        finally:
            change(-1)

    async def end_at_deadline() -> None:
        # A timed load ends duration_s after its admission (the first C requests' prefills,
        # all at once, which the steady window leaves out: 0.9-1.5 s at C = 256 on the H200),
        # so that the window after it still lasts duration_s. Requests still streaming then
        # are cancelled (the server aborts them on disconnect) rather than drained, which at
        # C = 256 and a few hundred tokens would add seconds of ramp-down to every level.
        # The window first holds until it has at least C tokens: on a machine too slow for
        # one token per stream in min_steady_s, the window grows rather than measuring
        # nothing. With carried levels (spec.then) the load then steps down and measures
        # the next level's window on the same streams.
        await full.wait()
        t_full = state["deadline"] - spec.duration_s
        t_start, begin, level, count = t_full, active[0][0], None, None
        while not state["failed"] and time.monotonic() < t_full + spec.timeout_s:
            admitted = warmed_up_at(records, spec, admitted_at(records, spec.concurrency),
                                    active[0][0])  # fmt: skip
            if admitted is not None:
                t_start = state["window_start"] = admitted
                break
            await asyncio.sleep(0.01)
        for c in (spec.concurrency, *spec.then):
            if level is not None:  # step down: this level's window starts once it settles
                begin = level["end"] = time.monotonic()
                step_down(c)
                t_start, count = await settled(c, begin)
            level = {"concurrency": c, "begin": begin, "admitted": t_start,
                     "window_end": None, "end": None, "held": count}  # fmt: skip
            levels.append(level)
            if state["failed"]:
                break
            await window(c, t_start)
            level["window_end"] = state.pop("window_end", None)
        state["stop"] = True  # no new request from here on
        for task in list(streaming):
            task.cancel()

    async def window(c: int, t_start: float) -> None:
        await asyncio.sleep(max(t_start - time.monotonic(), 0))  # the rest of the warm-up
        state["deadline"] = t_start + spec.duration_s
        if spec.precision > 0:
            await until_precise(t_start)
        await asyncio.sleep(max(state["deadline"] - time.monotonic(), 0))
        while not state["failed"] and time.monotonic() < t_start + spec.timeout_s:
            tokens = sum(1 for r in records for t in r.token_times if t >= t_start)
            if tokens >= c:
                break
            await asyncio.sleep(0.01)

    def step_down(c: int) -> None:
        # Keep c clients whose requests end evenly spread; cancel the others' requests.
        remaining = {}
        for client_id in state["keep"]:
            task, record = latest[client_id]
            left = (record.max_tokens or spec.output_len) - len(record.token_times)
            remaining[client_id] = left if not task.done() else spec.output_len
        state["keep"] = kept_clients(remaining, c)
        for client_id in set(remaining) - state["keep"]:
            latest[client_id][0].cancel()

    async def settled(c: int, since: float) -> tuple[float, int | None]:
        # Every kept client streamed since the step (the server stepped without the dropped
        # requests' streams), and the server holds no more than c requests (SGLang drops a
        # cancelled request only once it notices the closed connection): the window's start,
        # at least settle_s after the step, and the server's count then.
        count = None
        while not state["failed"] and time.monotonic() < since + spec.timeout_s:
            streamed = all(latest[k][1].token_times and latest[k][1].token_times[-1] > since
                           for k in state["keep"])  # fmt: skip
            if streamed:
                count = None if held is None else await asyncio.to_thread(held)
                if count is None or count <= c:
                    break
            await asyncio.sleep(0.05 if streamed else 0.01)
        return max(time.monotonic(), since + spec.settle_s), count

    async def until_precise(t_start: float) -> None:
        # The window's slices as they close (the summary's own, window_precision): from
        # shortest_s on, the window ends at the first slice edge where the rate's interval
        # is within the precision, and the summary reads it up to that edge; else at its
        # deadline.
        running = RunningSlices(t_start, slice_s(spec.shortest_s))
        while not state["failed"]:
            edge = running.edge(len(running.slices) + 1)
            if edge > state["deadline"]:
                return
            while time.monotonic() < edge:
                await asyncio.sleep(edge - time.monotonic())
            running.close(records)
            if precise_enough(running.slices, edge - t_start, spec.shortest_s, spec.precision):
                state["deadline"] = state["window_end"] = edge
                return

    async def watch() -> None:
        # Polled: the other thread's events cannot wake this loop.
        first = records[: spec.concurrency]
        there, since = 0, time.monotonic()
        while not control.stop.is_set():
            if not control.streaming.is_set():
                first = first if len(first) == spec.concurrency else records[: spec.concurrency]
                arrived = [
                    r
                    for r in first
                    if len(r.token_times) >= control.after_tokens or r.end is not None
                ]
                if len(arrived) != there:
                    there, since = len(arrived), time.monotonic()
                settled = (control.settle_s is not None and arrived
                           and time.monotonic() - since >= control.settle_s)  # fmt: skip
                if len(arrived) == spec.concurrency or settled:
                    control.tokens = min(len(r.token_times) for r in arrived)
                    control.waiting = spec.concurrency - len(arrived)
                    control.streaming.set()
            await asyncio.sleep(0.01)
        state["stop"] = True
        for task in list(streaming):
            task.cancel()

    async def heartbeat() -> None:
        while True:
            due = time.monotonic() + HEARTBEAT_S
            await asyncio.sleep(HEARTBEAT_S)
            late = time.monotonic() - due
            if late > STALL_S:
                stalls.append((due, late))

    stalls: list[tuple[float, float]] = []
    clients = asyncio.gather(*(client(k) for k in range(spec.concurrency)))
    helpers = [asyncio.ensure_future(heartbeat())]
    if spec.duration_s > 0:
        helpers.append(asyncio.ensure_future(end_at_deadline()))
    if control is not None:
        helpers.append(asyncio.ensure_future(watch()))
    await clients
    for helper in helpers:
        helper.cancel()
    records.sort(key=lambda r: r.index)
    start = state.get("window_start") or admitted_at(records, spec.concurrency)
    first_end = levels[0]["window_end"] if levels else state.get("window_end")
    return LoadResult(records, active, 0.0, 0.0, start, first_end, stalls, levels)


def admitted_at(records: list[RequestRecord], concurrency: int) -> float | None:
    """When each of the first ``concurrency`` requests (by index) had its first token or had
    ended, or None while one has neither."""
    first = [r for r in records if r.index < concurrency]
    if len(first) < concurrency:
        return None
    times = [r.first_token if r.first_token is not None else r.end for r in first]
    return None if any(t is None for t in times) else max(times)


def run_load(
    base_url: str,
    model: str,
    spec: LoadSpec,
    extras: dict | None = None,
    prompt_format: str = "ids",
    control: LoadControl | None = None,
    held: Callable[[], int | None] | None = None,
) -> LoadResult:
    """Drive the closed-loop load; the records, in-flight counts and the generator's CPU.

    ``prompt_format`` "text" sends each prompt as the text the study's tokenizer maps back
    to its token ids (for servers that take strings only); ``control`` lets another thread
    see when the load streams and end it (:class:`LoadControl`); ``held`` asks the server how
    many requests it holds (None: it does not say), which a carried level waits to fall to
    its concurrency (LoadSpec.then)."""
    if prompt_format == "text":

        def make_prompt(index):
            return prompt_text(prompt_ids(spec, index))
    else:

        def make_prompt(index):
            return prompt_ids(spec, index)

    wall0, cpu0 = time.monotonic(), time.thread_time()
    load = _run(base_url, model, spec, extras or {}, make_prompt, control, held)
    result = run_stoppable(load)
    result.cpu_s = time.thread_time() - cpu0
    result.wall_s = time.monotonic() - wall0
    return result


def steady_window(active: list[tuple[float, int]], concurrency: int,
                  fraction: float = STEADY_FRACTION,
                  after: float | None = None):  # fmt: skip
    """The longest span with at least fraction × concurrency requests in flight, from
    ``after`` on (the load's admission) when given, or None."""
    if after is not None:
        before = [count for t, count in active if t <= after]
        active = [(after, before[-1] if before else 0)] + [(t, n) for t, n in active if t > after]
    threshold = fraction * concurrency
    best, start = None, None
    for t, count in active:
        if count >= threshold and start is None:
            start = t
        elif count < threshold and start is not None:
            if best is None or t - start > best[1] - best[0]:
                best = (start, t)
            start = None
    if start is not None:
        t = active[-1][0]
        if best is None or t - start > best[1] - best[0]:
            best = (start, t)
    return best


def load_window(load: LoadResult, concurrency: int, fraction: float = STEADY_FRACTION):
    """A timed load's steady window (:func:`steady_window` from its admission), ended where
    its precision rule ended it (``window_end``): the slices the rule judged are the
    summary's (window_precision)."""
    window = steady_window(load.active, concurrency, fraction, after=load.admitted)
    return _ended_at(window, load.window_end)


def _ended_at(window, end: float | None):
    """``window`` cut at ``end``, where a precision rule ended it (None: not cut)."""
    if window is not None and end is not None and window[0] < end:
        window = (window[0], min(window[1], end))
    return window


def level_window(load: LoadResult, index: int, fraction: float = STEADY_FRACTION):
    """The steady window of a carried load's level ``index`` (LoadResult.levels), as
    :func:`load_window` finds a load's, within the level's span; None where the load never
    reached that level's window."""
    if index >= len(load.levels) or load.levels[index]["admitted"] is None:
        return None
    level = load.levels[index]
    end = level["end"] if level["end"] is not None else float("inf")
    active = [(t, n) for t, n in load.active if t <= end]
    if level["end"] is not None:
        active.append((end, 0))  # the step down ends the level's window
    window = steady_window(active, level["concurrency"], fraction, after=level["admitted"])
    return _ended_at(window, level["window_end"])
