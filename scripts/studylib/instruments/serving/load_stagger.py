"""A steady state without waves (issue 34). A closed-loop load whose C requests start together
and share one output length keeps them in lockstep: every output_len steps all C end at once
and C replacements prefill together, stalling decode (on the H200, bf16 at C = 256, a 1-s
slice of the window got 4.1k tokens where the others got 12.5-13.3k). A window then measures
how many of those stalls it happened to hold, and its rate's interval stays wide. Staggered,
client i's first request asks for output_len x (i + 1) / C tokens, so the clients' requests
end one after another, C per output_len steps, as a server's requests do in its steady state;
every later request has the full length. The window starts once each first request has ended
(every client then streams a full-length request, at ages spread over the output length) and
the warm-up time has passed."""

from __future__ import annotations


def staggered_length(output_len: int, concurrency: int, index: int) -> int:
    """Client ``index``'s first output length: output_len x (index + 1) / C, at least 1."""
    return max(1, round(output_len * (index + 1) / concurrency))


def first_length(spec, index: int) -> int | None:
    """The output length of request ``index`` where the load staggers its first requests
    (one per client: indices below C); None: the spec's output_len."""
    if not spec.stagger or index >= spec.concurrency:
        return None
    return staggered_length(spec.output_len, spec.concurrency, index)


def warmed_up_at(records, spec, admitted: float | None, t_begin: float) -> float | None:
    """When a timed load's warm-up is over: its first C requests admitted (``admitted``),
    ``warmup_s`` after the load's start (``t_begin``), and, staggering, each of its first C
    requests ended. None while one of them is not (a time in the future: wait for it)."""
    if admitted is None:
        return None
    times = [admitted, t_begin + spec.warmup_s]
    if spec.stagger:
        first = [r for r in records if r.index < spec.concurrency]
        if len(first) < spec.concurrency or any(r.end is None for r in first):
            return None
        times += [r.end for r in first]
    return max(times)
