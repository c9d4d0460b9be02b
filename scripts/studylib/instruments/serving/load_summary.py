"""What a load's records say about its steady window: throughput, TPOT, ITL, TTFT, the
share of the window spent decoding, the rate's precision (window_precision), the load's own
stalls inside it, and the client's decode tokens over any span (what a scheduler's decode
lines count, for the server's own account: server_log)."""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable

from .decode_load import LoadSpec, RequestRecord
from .window_precision import overlap_s, rate_precision, slice_s, window_slices


def decode_token_counter(records: list[RequestRecord]) -> Callable[[float, float], int]:
    """How many tokens the client received in [t0, t1) after each request's first: the count
    a scheduler's decode steps make (the first token is its prefill's)."""
    times = sorted(t for r in records for t in r.token_times[1:])
    return lambda t0, t1: bisect.bisect_left(times, t1) - bisect.bisect_left(times, t0)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summarize_load(records: list[RequestRecord], spec: LoadSpec, t0: float, t1: float,
                   stalls: list[tuple[float, float]] | None = None) -> dict:  # fmt: skip
    """Throughput and latencies of the steady window [t0, t1].

    TPOT: the median over requests with two chunks or more in the window (the cut ones too:
    at a slow step a request may outlast the window) of (last - first) / (tokens after the
    first chunk) over those tokens: a request's tokens before the window (the load's
    admission) are not the steady state's.
    ``decoding_share``: the share of the window's C × seconds that streams spent past their
    first token (the rest: waiting for it, that is queued or in prefill, or between requests).
    ``tok_s_over_c_tpot``: measured tok/s over C / TPOT. Near ``decoding_share`` when the
    streams that decode do so at the TPOT each sees: below 1 by the time replacement
    requests wait for their first token (the server's queue and prefill, not the load).
    ``load_stall_s``: the seconds of the load's own stalls (``stalls``, LoadResult) inside
    the window; None when not given."""
    seconds = t1 - t0
    tokens_in_window = sum(1 for r in records for t in r.token_times if t0 <= t <= t1)
    finished = [r for r in records if not r.error and not r.cut]
    short = [r for r in finished if r.completion_tokens is not None
             and r.completion_tokens != (r.max_tokens or spec.output_len)]  # fmt: skip
    ended = [r for r in finished if r.end is not None and r.end >= t0]  # not the warm-up's
    itl = [x for r in ended for x in r.itl_s()]
    ttft = [r.ttft_s for r in ended if r.ttft_s is not None]
    tpot = []
    for r in records:
        inside = [t for t in r.token_times if t0 <= t <= t1]
        # The tokens that came after the window's first chunk of this request took the span.
        later = sum(1 for t in inside if t > inside[0]) if inside else 0
        if not r.error and later:
            tpot.append((inside[-1] - inside[0]) / later)
    decoding = sum(
        max(min(r.end if r.end is not None else t1, t1) - max(r.first_token, t0), 0.0)
        for r in records
        if r.first_token is not None
    )
    share = decoding / (spec.concurrency * seconds) if seconds > 0 else None
    tok_s = tokens_in_window / seconds if seconds > 0 else None
    tpot_s = statistics.median(tpot) if tpot else None
    over_c = tok_s * tpot_s / spec.concurrency if tok_s and tpot_s else None
    width = slice_s(spec.shortest_s if spec.precision > 0 else seconds)
    precision = rate_precision(window_slices(records, t0, t1, width)) if seconds > 0 else None
    return {
        "requests": len(records),
        "errors": sum(1 for r in records if r.error),
        "cut": sum(1 for r in records if r.cut),
        "first_error": next((r.error for r in records if r.error), ""),
        "wrong_length": len(short),
        "steady_s": seconds,
        "output_tokens_steady": tokens_in_window,
        "output_tok_s": tok_s,
        "tpot_ms": 1e3 * tpot_s if tpot_s else None,
        "tok_s_over_c_tpot": over_c,
        "tpot_ci_pct": 100 * precision if precision is not None else None,
        "decoding_share": share,
        "itl_p50_ms": 1e3 * _pct(itl, 0.5) if itl else None,
        "itl_p99_ms": 1e3 * _pct(itl, 0.99) if itl else None,
        "ttft_p50_ms": 1e3 * _pct(ttft, 0.5) if ttft else None,
        "load_stall_s": None if stalls is None else overlap_s(stalls, t0, t1),
    }
