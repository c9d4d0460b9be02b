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
import json
import random
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .load_stagger import first_length, first_prompt_len, warmed_up_at
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

    def __post_init__(self):
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.duration_s <= 0 and not self.num_prompts:
            raise ValueError("a load needs duration_s > 0 or num_prompts")
        if self.precision > 0 and not 0 < self.shortest_s <= self.duration_s:
            raise ValueError("a window ending at a precision needs 0 < shortest_s <= duration_s")
        if self.preaged and not self.stagger:
            raise ValueError("pre-aged first requests need a staggered load (stagger)")


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


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict]:
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("server closed the connection before answering")
    parts = status_line.decode("latin-1").split(" ", 2)
    status = int(parts[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            return status, headers
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()


async def _body_lines(reader: asyncio.StreamReader, headers: dict):
    """The response body line by line, whether chunked, sized or closed at the end."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        pending = b""
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                break
            pending += await reader.readexactly(size)
            await reader.readexactly(2)  # the chunk's CRLF
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line
        if pending:
            yield pending
        return
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
        for line in body.split(b"\n"):
            yield line
        return
    while line := await reader.readline():
        yield line


async def _stream_completion(parts, model, prompt, spec, extras, record) -> None:
    body = json.dumps({
        "model": model,
        "prompt": prompt,
        "max_tokens": record.max_tokens or spec.output_len,
        "temperature": spec.temperature,
        "stream": True,
        # continuous_usage_stats: every chunk says how many tokens the request has so far, so
        # tokens a server sends together in one chunk count as tokens (SGLang does so when its
        # HTTP side falls behind: 1.3-2.3 tokens per chunk at FP8 C = 256 on the H200).
        **({"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
           if spec.usage_per_chunk else {}),
        **extras,
    }).encode()  # fmt: skip
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    writer = None
    try:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        writer.write(head + body)
        await writer.drain()
        status, headers = await _read_head(reader)
        if status != 200:
            text = b"".join([line async for line in _body_lines(reader, headers)])
            record.error = f"HTTP {status}: {text[:300]!r}"
            return
        counts = None  # whether the server's chunks carry the tokens so far
        async for raw in _body_lines(reader, headers):
            line = raw.decode("utf-8", errors="replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            now = time.monotonic()
            usage = chunk.get("usage") or {}
            so_far = usage.get("completion_tokens")
            if so_far is not None:
                record.completion_tokens = int(so_far)
            if not chunk.get("choices"):
                continue  # the closing usage chunk: no tokens of its own
            if counts is None:  # the first chunk says whether the server counts per chunk
                counts = so_far is not None
            if counts and so_far is not None:  # every token new since the last chunk: now
                new = int(so_far) - len(record.token_times)
            else:  # one token per chunk with text (a total on the last chunk is no count)
                new = 1 if any(c.get("text") for c in chunk["choices"]) else 0
            if new > 0:
                if record.first_token is None:
                    record.first_token = now
                record.token_times.extend([now] * new)
    except (OSError, ValueError, asyncio.IncompleteReadError, IndexError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    finally:
        record.end = time.monotonic()
        if writer is not None:
            writer.close()


async def _timed(func, timeout_s, *args):
    # The coroutine is made inside the task: one cancelled before it starts leaves none
    # behind un-awaited.
    return await asyncio.wait_for(func(*args), timeout_s)


async def _run(base_url, model, spec, extras, make_prompt, control=None) -> LoadResult:
    parts = urlsplit(base_url)
    records: list[RequestRecord] = []
    active: list[tuple[float, int]] = [(time.monotonic(), 0)]
    state = {"in_flight": 0, "issued": 0, "deadline": None, "failed": False, "stop": False}
    full = asyncio.Event()
    streaming: dict[asyncio.Task, RequestRecord] = {}

    def more() -> bool:
        # An error makes the window invalid anyway: stop rather than hammer a dead server.
        if state["failed"]:
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

    async def client() -> None:
        # A client slot counts as in flight from its first request to its last: the next
        # request follows the previous one at once, so the count does not dip in between.
        if not more():
            return
        change(+1)
        try:
            while more():
                index = state["issued"]
                state["issued"] += 1
                record = RequestRecord(index=index, start=time.monotonic(),
                                       max_tokens=first_length(spec, index))  # fmt: skip
                records.append(record)
                task = asyncio.ensure_future(
                    _timed(_stream_completion, spec.timeout_s,
                           parts, model, make_prompt(index), spec, extras, record)
                )  # fmt: skip
                streaming[task] = record
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
        # nothing.
        await full.wait()
        t_full = state["deadline"] - spec.duration_s
        t_start = t_full
        while not state["failed"] and time.monotonic() < t_full + spec.timeout_s:
            admitted = warmed_up_at(records, spec, admitted_at(records, spec.concurrency),
                                    active[0][0])  # fmt: skip
            if admitted is not None:
                t_start = state["window_start"] = admitted
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(max(t_start - time.monotonic(), 0))  # the rest of the warm-up
        state["deadline"] = t_start + spec.duration_s
        if spec.precision > 0:
            await until_precise(t_start)
        await asyncio.sleep(max(state["deadline"] - time.monotonic(), 0))
        while not state["failed"] and time.monotonic() < t_start + spec.timeout_s:
            tokens = sum(1 for r in records for t in r.token_times if t >= t_start)
            if tokens >= spec.concurrency:
                break
            await asyncio.sleep(0.01)
        state["stop"] = True  # no new request from here on
        for task in list(streaming):
            task.cancel()

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
    clients = asyncio.gather(*(client() for _ in range(spec.concurrency)))
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
    return LoadResult(records, active, 0.0, 0.0, start, state.get("window_end"), stalls)


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
) -> LoadResult:
    """Drive the closed-loop load; the records, in-flight counts and the generator's CPU.

    ``prompt_format`` "text" sends each prompt as the text the study's tokenizer maps back
    to its token ids (for servers that take strings only); ``control`` lets another thread
    see when the load streams and end it (:class:`LoadControl`)."""
    if prompt_format == "text":

        def make_prompt(index):
            return prompt_text(prompt_ids(spec, index))
    else:

        def make_prompt(index):
            return prompt_ids(spec, index)

    wall0, cpu0 = time.monotonic(), time.thread_time()
    load = _run(base_url, model, spec, extras or {}, make_prompt, control)
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
    if window is not None and load.window_end is not None and window[0] < load.window_end:
        window = (window[0], min(window[1], load.window_end))
    return window
