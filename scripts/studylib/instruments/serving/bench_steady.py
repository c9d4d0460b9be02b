"""bench_serving's TPOT over its steady part, computed as the study computes its own.

bench_serving (:mod:`.bench_serving`) reports a median TPOT per request over its whole run. At
high C its first wave of C requests starts at once, and every request's TPOT then holds the
other requests' prefills; the study's TPOT leaves its own load's admission out
(:mod:`.decode_load`'s ``steady_window``, :mod:`.load_summary`'s ``summarize_load``). From
bench_serving's per-request details (``--output-details``: ``ttfts``, ``itls``,
``output_lens``, ``errors``, in the order sent; SGLang 0.5.16,
python/sglang/benchmark/serving.py, ``result_details``) its requests are rebuilt on one clock
and measured by the study's own code.
"""

from __future__ import annotations

import heapq
import math

from .bench_serving import PER_CHUNK_GAPS
from .decode_load import (
    STEADY_FRACTION,
    LoadSpec,
    RequestRecord,
    admitted_at,
    steady_window,
)
from .load_stagger import first_requests_ended
from .load_summary import summarize_load


def _gap_runs(itls: list[float]) -> list[tuple[float, int]]:
    """(gap, tokens) per chunk after the first: bench_serving's native backend splits a
    chunk's gap evenly over its tokens, so one chunk is a run of equal gaps."""
    runs: list[tuple[float, int]] = []
    for gap in itls:
        if runs and runs[-1][0] == gap:
            runs[-1] = (gap, runs[-1][1] + 1)
        else:
            runs.append((gap, 1))
    return [(gap * n, n) for gap, n in runs]


def _chunk_runs(itls: list[float], tokens: int) -> list[tuple[float, int]]:
    """(gap, tokens) per chunk after the first where each gap is one chunk's (bench_serving's
    OpenAI backends: one gap per streamed text chunk, whatever it holds; with SGLang's
    ``--stream-interval 8`` about 8 tokens). The chunks' own sizes are not in the details:
    the tokens after the first are spread over them evenly (whole tokens, the sum kept)."""
    rest, n = max(0, tokens - 1), len(itls)
    cuts = [round(rest * k / n) for k in range(n + 1)]
    return [(gap, cuts[k + 1] - cuts[k]) for k, gap in enumerate(itls)]


def bench_requests(details: dict, concurrency: int) -> tuple[list[RequestRecord], list]:
    """bench_serving's requests on one clock (0: the run's start), with the in-flight count
    over time, as the study's load records its own (decode_load.RequestRecord, ``active``).

    Its details give each request's TTFT, inter-token gaps, output length and error, in the
    order sent, but no start time: a request starts when one of the C slots of its
    ``--max-concurrency`` semaphore frees (FIFO, requests in order; the first C at 0) and
    ends at its last chunk. So, unlike the study's own records: a request's end leaves out
    bench_serving's closing ``[DONE]`` and the next request's start its connection set-up
    (both small against a chunk); a chunk is a run of equal gaps (two chunks with the very
    same gap read as one); a failed request ends at its last token. Where the run's
    ``backend`` keeps one gap per chunk (bench_serving.PER_CHUNK_GAPS: its OpenAI ones), each
    gap is one chunk's (:func:`_chunk_runs`)."""
    ttfts, itls = details.get("ttfts") or [], details.get("itls") or []
    per_chunk = details.get("backend") in PER_CHUNK_GAPS
    lens = details.get("output_lens") or [0] * len(ttfts)
    errors = details.get("errors") or [""] * len(ttfts)
    free = [0.0] * min(concurrency, len(ttfts))  # when each slot is next free
    records = []
    for index, (ttft, gaps, tokens, error) in enumerate(zip(ttfts, itls, lens, errors,
                                                            strict=False)):  # fmt: skip
        start = heapq.heappop(free)
        record = RequestRecord(index=index, start=start, completion_tokens=tokens or None,
                               error=error or "")  # fmt: skip
        if ttft:  # bench_serving leaves 0 where no token came
            t = record.first_token = start + ttft
            runs = (_chunk_runs(gaps, tokens or 0) if per_chunk and gaps
                    else _gap_runs(gaps or []))  # fmt: skip
            # The first chunk's tokens: those the gaps after it do not account for.
            record.token_times = [t] * max(1, (tokens or 0) - sum(n for _, n in runs))
            for gap, n in runs:
                t += gap
                record.token_times += [t] * n
        record.end = record.token_times[-1] if record.token_times else start
        heapq.heappush(free, record.end)
        records.append(record)
    # A slot is in flight from its first request to its last (the next starts as one ends):
    # the count falls only as each slot's last request ends.
    active = [(0.0, len(free))]
    for k, end in enumerate(sorted(free), 1):
        active.append((end, len(free) - k))
    return records, active


def first_wave_admitted(records: list[RequestRecord], concurrency: int) -> float | None:
    """When STEADY_FRACTION x C of the first C requests had their first token. The study's
    window waits for all C (``admitted_at``); bench_serving's first wave can hold a
    straggler that waits for a whole request: at C = 512 = the server's
    ``--max-running-requests`` on the H200 (2026-12-02) one of its first 512 requests got
    its first token after 35 s, as the first wave ended (a slot held by another request when
    the wave started), and waiting for it would put the window in the second wave's start
    burst. Requests that ended without a token count as admitted when they ended."""
    first = sorted(r.first_token if r.first_token is not None else r.end
                   for r in records if r.index < concurrency)  # fmt: skip
    needed = max(1, math.ceil(STEADY_FRACTION * concurrency))
    if len(first) < concurrency or any(t is None for t in first[:needed]):
        return admitted_at(records, concurrency)
    return first[needed - 1]


#: bench_serving's requests and its steady window's start and end on their clock.
SteadySpan = tuple[list[RequestRecord], float, float]


def bench_steady_span(details: dict, concurrency: int, steady_s: float | None = None,
                      staggered: bool = False) -> SteadySpan | None:  # fmt: skip
    """bench_serving's requests (:func:`bench_requests`) and its steady window on their clock
    (0: the run's start): the span from the first wave's admission
    (:func:`first_wave_admitted`; ``staggered``, its end, the study's own rule:
    :func:`.load_stagger.first_requests_ended`) with at least STEADY_FRACTION x C in flight,
    cut to the study's window length ``steady_s`` where given (at high C the study's lockstep
    window holds no replacement's prefill when a request outlasts it; this one then holds
    none either). None when the details are missing or no window is found."""
    if not details.get("ttfts") or not details.get("itls"):
        return None
    records, active = bench_requests(details, concurrency)
    after = first_wave_admitted(records, concurrency)
    if staggered:
        ended = first_requests_ended(records, concurrency)
        if after is None or ended is None:
            return None
        after = max(after, ended)
    window = steady_window(active, concurrency, after=after)
    if window is None:
        return None
    t0, t1 = window
    if steady_s and steady_s > 0:
        t1 = min(t1, t0 + steady_s)
    return records, t0, t1


def bench_steady(details: dict, concurrency: int, output_len: int, run_end: float,
                 steady_s: float | None = None,
                 staggered: bool = False) -> dict | None:  # fmt: skip
    """bench_serving's TPOT as the study computes its own (load_summary.summarize_load: the
    median over requests of their tokens' pace inside the steady window,
    :func:`bench_steady_span`; ``tpot_ms``) and that window on the caller's clock (``span``),
    from one rebuild of the requests, given when the run ended there (``run_end``):
    bench_serving's clock has no absolute time, so its last request's end is put at
    ``run_end``. That end comes after bench_serving wrote its result (and, run in its own
    process, after the interpreter exited): the window lands up to about a second late,
    which a server log read in whole seconds (server_log) leaves within its own trimming.
    None where :func:`bench_steady_span` is; ``span`` None where no request ended."""
    found = bench_steady_span(details, concurrency, steady_s, staggered)
    if found is None:
        return None
    records, t0, t1 = found
    last = max((r.end for r in records if r.end is not None), default=None)
    span = None if last is None else (run_end - last + t0, run_end - last + t1)
    spec = LoadSpec(concurrency=concurrency, input_len=1, output_len=output_len,
                    num_prompts=len(records))  # fmt: skip
    return {"tpot_ms": summarize_load(records, spec, t0, t1)["tpot_ms"], "span": span}
