"""A steady state without waves (issue 34). A closed-loop load whose C requests start together
and share one output length keeps them in lockstep: every output_len steps all C end at once
and C replacements prefill together, stalling decode (on the H200, bf16 at C = 256, a 1-s
slice of the window got 4.1k tokens where the others got 12.5-13.3k). A window then measures
how many of those stalls it happened to hold, and its rate's interval stays wide. Staggered,
client i's first request asks for about output_len x (i + 1) / C tokens
(:func:`staggered_length`), so the clients' requests end one after another, C per output_len
steps, as a server's requests do in its steady state; every later request has the full
length. The window starts once each first request has ended (every client then streams a
full-length request, at ages spread over the output length) and the warm-up time has passed.

Pre-aged (``preaged``), client i's first request also carries the context its age would have
given it: a prompt of input_len + output_len - its length (:func:`first_prompt_len`). From
its prefill on, the clients' contexts are spread over input_len ... input_len + output_len as
in the steady state, so the window need not wait output_len steps for the first requests to
end (at C = 512 on the H200, 1,024 steps of 18-39 ms: 18-40 s of warm-up at every C): it
starts once every first request has streamed (the prefill burst over) and warmup_s has passed.
"""

from __future__ import annotations

#: The golden ratio's fractional part: the offsets frac(k x GOLDEN), k = 1, 2, ... spread
#: evenly over [0, 1) however many are taken.
GOLDEN = 0.6180339887498949


def staggered_length(output_len: int, concurrency: int, index: int) -> int:
    """Client ``index``'s first output length: output_len x (index + 1 - frac((index + 1) x
    GOLDEN)) / C, at least 1: one request ends in each of the C slots of output_len / C
    steps, at an offset within its slot that the golden ratio spreads. Not at the slot's end:
    a server streams each request's tokens in chunks of its stream interval (SGLang's
    ``--stream-interval 8``: a chunk at the request's tokens 1, 9, 17, ...), so a request's
    chunk steps are fixed by the step it started on, and a replacement starts as its
    predecessor ends. With every first length a multiple of the interval (1,024 x k / 64 at
    C = 64) all clients streamed on the same steps: on the H200 (bf16 graphs, 2026-12-03) the
    chunks at C = 64 came in two bursts of about 32 requests every 8 steps, 1-s slices of
    the window counted 6 or 7 bursts, and the window's rate was known to +-2.1 % where the
    same tokens spread evenly over their chunks gave +-0.4 %."""
    share = index + 1 - (index + 1) * GOLDEN % 1.0
    return max(1, round(output_len * share / concurrency))


def first_length(spec, index: int) -> int | None:
    """The output length of request ``index`` where the load staggers its first requests
    (one per client: indices below C); None: the spec's output_len."""
    if not spec.stagger or index >= spec.concurrency:
        return None
    return staggered_length(spec.output_len, spec.concurrency, index)


def first_prompt_len(spec, index: int) -> int:
    """Request ``index``'s prompt length: pre-aged first requests (one per client) carry the
    context of the tokens their shorter length leaves out, input_len + output_len - length;
    every other request, input_len."""
    length = first_length(spec, index) if spec.preaged else None
    return spec.input_len if length is None else spec.input_len + spec.output_len - length


def first_requests_ended(records, concurrency: int) -> float | None:
    """When each of the first C requests (one per client) had ended: a staggered load's
    steady state begins there. None while one of them has not (or fewer than C were sent)."""
    first = [r.end for r in records if r.index < concurrency]
    if len(first) < concurrency or any(t is None for t in first):
        return None
    return max(first)


def warmed_up_at(records, spec, admitted: float | None, t_begin: float) -> float | None:
    """When a timed load's warm-up is over: its first C requests admitted (``admitted``),
    ``warmup_s`` after the load's start (``t_begin``), and, staggering without pre-aged first
    requests, each of its first C requests ended. None while one of them is not (a time in
    the future: wait for it)."""
    if admitted is None:
        return None
    times = [admitted, t_begin + spec.warmup_s]
    if spec.stagger and not spec.preaged:
        ended = first_requests_ended(records, spec.concurrency)
        if ended is None:
            return None
        times.append(ended)
    return max(times)


def kept_clients(remaining: dict[int, int], concurrency: int) -> set[int]:
    """Carried levels (issue 34): the ``concurrency`` clients a load keeps when it steps down
    from ``len(remaining)``, given each client's tokens left to its current request's end
    (``remaining``). Ranked by that, the middle client of each of ``concurrency`` equal groups:
    the kept requests end evenly spread over the output length, as a staggered load's steady
    state has them, so the next level's window needs no warm-up of output_len steps."""
    if not 1 <= concurrency <= len(remaining):
        raise ValueError(f"keep {concurrency} of {len(remaining)} clients")
    ranked = sorted(remaining, key=lambda client: (remaining[client], client))
    n = len(ranked)
    return {ranked[int((j + 0.5) * n / concurrency)] for j in range(concurrency)}
