"""The server's own account of a window, from SGLang's log, beside the client's.

SGLang's scheduler logs every 40 decode steps (``decode_log_interval``) a line such as::

    [2026-12-01 14:26:38] Decode batch, #running-req: 256, #token: 107408, token usage: 0.02,
    cuda graph: True, gen throughput (token/s): 22623.93, #queue-req: 0

(metrics_reporter.py): the tokens the scheduler generated per second over those steps and
the requests it ran. The client can only count what reaches it. When the server's streaming
path (tokenizer process, detokenizer, HTTP) cannot pass on tokens as fast as the scheduler
makes them, the scheduler runs ahead, finishes its requests early and idles until the client
has read them and sends new ones: the window's watts and J/token then describe decode mixed
with idle, and the client's TPOT describes the streaming path, not the GPU. On the H200
(2026-12-01) a 4-layer FP8 model at C = 256 stepped every 11 ms (22,600 tokens/s by this log)
while the client received 12,300 tokens/s; the scheduler had finished its 256 requests 5 s
before the 15-s window ended. ``stages.decode.decode_judgements.delivery_note`` names such a
window, and ``stages.decode.decode_run`` marks it invalid.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from .window_precision import overlap_s

#: Columns this module adds to a decode summary row.
COLUMNS = [
    "server_tok_s",
    "server_tok_s_median",
    "server_running_min",
    "server_running_median",
    "server_lines",
    "server_drift",
    "server_span_s",
    "server_step_ms",
    "delivery_ratio",
    "server_gc_s",
]

#: The fewest lines of one rank a window's drift is read from (two thirds of at least two).
DRIFT_MIN_LINES = 6

#: The server's environment for stamps to the millisecond (srt/utils/common.py
#: configure_logger: ``[2026-12-04 19:18:55.123] ...``): each line's span is then known, not
#: only the second it was written in.
LOG_MS_ENV = {"SGLANG_LOG_MS": "1"}

#: A log line's stamp: the server host's local time, to the second or (SGLANG_LOG_MS) the
#: millisecond, then the process's rank tags.
_STAMP = r"^\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?P<ms>\.\d{3})?(?P<ranks>[^\]]*)\] "
_LINE = re.compile(
    _STAMP + r"Decode batch"
    r".*?#running-req: (?P<running>\d+)"
    r".*?gen throughput \(token/s\): (?P<tok_s>[\d.]+)"
)


def _wall(m: re.Match) -> float:
    """A matched line's stamp as wall time."""
    stamp = datetime.strptime(m["stamp"], "%Y-%m-%d %H:%M:%S").timestamp()
    return stamp + (float(m["ms"]) if m["ms"] else 0.0)


#: SGLang's server arguments as its log prints them at start: a decode line every this many
#: decode steps (``--decode-log-interval``).
_INTERVAL = re.compile(r"\bdecode_log_interval=(?P<steps>\d+)")


def log_interval(text: str) -> int | None:
    """The decode steps between two decode lines of a rank, from the server arguments the log
    printed; None when it printed none."""
    m = _INTERVAL.search(text)
    return int(m["steps"]) if m else None


#: The end of each CUDA-graph capture at start, with SGLang's own seconds for it: 0.5.16
#: captures prefill graphs (its default ``breakable`` backend) then decode graphs,
#: ``Capture target prefill CUDA graph end. elapsed=82.45 s``; older releases one
#: ``Capture cuda graph end. Time elapsed: 9.07 s``.
_CAPTURE = re.compile(
    r"Capture (?:target (?P<phase>\w+) CUDA|cuda) graph end\.\s*"
    r"(?:elapsed=|Time elapsed:\s*)(?P<s>[\d.]+)\s*s"
)


def graph_captures(text: str) -> dict[str, float]:
    """Seconds the server's start spent capturing CUDA graphs, per phase (``decode`` for a
    release that names none), from its log: where a start's time went besides imports and
    the weights."""
    out: dict[str, float] = {}
    for m in _CAPTURE.finditer(text):
        phase = m["phase"] or "decode"
        out[phase] = round(out.get(phase, 0.0) + float(m["s"]), 2)
    return out


#: ``--gc-warning-threshold-secs``: SGLang's tokenizer process (the one that streams every
#: request's tokens to its HTTP connection) logs each garbage collection longer than this
#: (srt/utils/common.py configure_gc_warning), as it ends.
_GC_THRESHOLD = re.compile(r"\bgc_warning_threshold_secs=(?P<s>[\d.]+)")
_GC_LINE = re.compile(
    _STAMP + r"LONG GARBAGE COLLECTION DETECTED \| Generation (?P<gen>\d+) \| "
    r"Duration: (?P<s>[\d.]+)s"
)


def long_collections(text: str) -> list[tuple[float, float]] | None:
    """(when it began, how long) per garbage collection the server logged as long; None when
    it was not asked to log them (no threshold above 0 among its arguments)."""
    m = _GC_THRESHOLD.search(text)
    if m is None or float(m["s"]) <= 0:
        return None
    out = []
    for line in text.splitlines():
        g = _GC_LINE.match(line.strip())
        if g is not None:
            out.append((_wall(g) - float(g["s"]), float(g["s"])))
    return out


def _gc_seconds(text: str, wall0: float, wall1: float) -> float | None:
    """The seconds of the server's long garbage collections inside [wall0, wall1]."""
    collections = long_collections(text)
    return None if collections is None else overlap_s(collections, wall0, wall1)


class DecodeLine(NamedTuple):
    """One decode log line: when it was written (the server host's wall clock), its rank tag,
    the requests running and the tokens/s generated since the rank's line before; ``ms``:
    the stamp has milliseconds (else it is the whole second the line was written in)."""

    wall: float
    rank: str
    running: int
    tok_s: float
    ms: bool = False


def decode_lines(text: str) -> list[DecodeLine]:
    """Every decode log line of a server log, in order."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m is None:
            continue
        out.append(DecodeLine(_wall(m), m["ranks"].strip(), int(m["running"]),
                              float(m["tok_s"]), m["ms"] is not None))  # fmt: skip
    return out


#: The client's side of the comparison: how many tokens it received between two instants of
#: the server's wall clock, the first token of each request aside (its prefill made it; the
#: scheduler's decode lines count decode steps only).
Received = Callable[[float, float], int]


def server_window(text: str, wall0: float, wall1: float, min_running: int = 0,
                  max_running: int | None = None,
                  received: Received | None = None) -> dict:  # fmt: skip
    """The scheduler's account of the window [wall0, wall1] from its decode lines: its
    tokens/s, its median line's, the fewest and median requests it ran, the lines read and
    their drift. Data-parallel ranks log each for itself: their rates add.
    ``min_running``: only lines with at least that many requests running (a run's steady
    part, not its ramps), and ``max_running`` at most that many (not another load's
    leftovers). Nothing logged there: the columns are None.

    With millisecond stamps (:data:`LOG_MS_ENV`) a line covers exactly the time since its
    rank's line before: the lines whose whole span lies inside the window are read, tok/s is
    their tokens over their seconds (``server_span_s``), and ``received`` (the client's count)
    gives ``delivery_ratio``: the tokens the client received over those very spans, over the
    tokens the scheduler generated in them. With whole-second stamps a line stamped s was
    written in [s, s + 1): lines are taken from one second after the window's start to one
    second before its end, tok/s is their mean, and there is no ratio (the spans are not
    known to better than a second of a window of 10-20)."""
    lines = decode_lines(text)
    if lines and all(x.ms for x in lines):
        out = _spans_window(lines, wall0, wall1, min_running, max_running, received,
                            log_interval(text))  # fmt: skip
        return {**out, "server_gc_s": _gc_seconds(text, wall0, wall1)}
    lines = [x for x in lines if wall0 + 1 <= x.wall <= wall1 - 1
             and _running_kept(x, min_running, max_running)]  # fmt: skip
    if not lines:
        return {**dict.fromkeys(COLUMNS), "server_lines": 0}
    ranks = sorted({x.rank for x in lines})
    tok_s = sum(statistics.fmean(x.tok_s for x in lines if x.rank == r) for r in ranks)
    return {**_line_stats(lines, ranks), "server_tok_s": tok_s, "server_span_s": None,
            "server_step_ms": None, "delivery_ratio": None,
            "server_gc_s": _gc_seconds(text, wall0, wall1)}  # fmt: skip


def _running_kept(line: DecodeLine, min_running: int, max_running: int | None) -> bool:
    return line.running >= min_running and (max_running is None or line.running <= max_running)


def _line_stats(lines: list[DecodeLine], ranks: list[str]) -> dict:
    # The median line: robust to the few lines a wave's start or end writes (prefills, the
    # last stragglers), so two runs' engine speeds compare (the cross-check's engine_ratio).
    def per_rank(func, field: str) -> float:
        return sum(func(getattr(x, field) for x in lines if x.rank == r) for r in ranks)

    return {"server_tok_s_median": per_rank(statistics.median, "tok_s"),
            "server_running_min": per_rank(min, "running"),
            "server_running_median": per_rank(statistics.median, "running"),
            "server_lines": len(lines), "server_drift": drift(lines, ranks)}  # fmt: skip


def _spans_window(lines: list[DecodeLine], wall0: float, wall1: float, min_running: int,
                  max_running: int | None, received: Received | None,
                  interval: int | None) -> dict:  # fmt: skip
    """:func:`server_window` over millisecond stamps: whole lines, each over its own span.
    ``server_step_ms``: the first rank's seconds over its decode steps (``interval`` per
    line): the time a request waits for each next token while it decodes, the prefills
    between steps included, whatever the batch (a request's TPOT by the scheduler's clock)."""
    spans: list[tuple[float, DecodeLine]] = []  # (the line's start, the line)
    for rank in sorted({x.rank for x in lines}):
        own = [x for x in lines if x.rank == rank]
        spans += [(before.wall, x) for before, x in zip(own, own[1:], strict=False)
                  if wall0 <= before.wall and x.wall <= wall1 and x.wall > before.wall
                  and _running_kept(x, min_running, max_running)]  # fmt: skip
    if not spans:
        return {**dict.fromkeys(COLUMNS), "server_lines": 0}
    ranks = sorted({x.rank for _, x in spans})
    tok_s = 0.0
    for rank in ranks:
        own = [(start, x) for start, x in spans if x.rank == rank]
        made = sum(x.tok_s * (x.wall - start) for start, x in own)
        tok_s += made / sum(x.wall - start for start, x in own)
    # The first rank's spans are the client's: every rank's tokens made over them (a rank's
    # rate is constant over each of its lines) against what the client received then.
    reference = [(start, x.wall) for start, x in spans if x.rank == ranks[0]]
    ratio = None
    if received is not None:
        made = sum(x.tok_s * max(min(b, x.wall) - max(a, start), 0.0)
                   for a, b in reference for start, x in spans)  # fmt: skip
        ratio = sum(received(a, b) for a, b in reference) / made if made > 0 else None
    span = sum(b - a for a, b in reference)
    step_ms = 1e3 * span / (interval * len(reference)) if interval else None
    return {**_line_stats([x for _, x in spans], ranks), "server_tok_s": tok_s,
            "server_span_s": span, "server_step_ms": step_ms, "delivery_ratio": ratio}  # fmt: skip


def drift(lines: list[DecodeLine], ranks: list[str]) -> float | None:
    """The scheduler's median rate over the window's last third of lines over that of its
    first third (ranks added): 1 for an engine at one speed. On the H200 a C = 1 window
    right after a server start read 1.37 (the engine warming up); in a
    window of requests all started together the rate falls as their contexts grow. None
    with fewer than DRIFT_MIN_LINES lines of a rank."""
    first = last = 0.0
    for rank in ranks:
        rates = [x.tok_s for x in sorted(lines) if x.rank == rank]
        if len(rates) < DRIFT_MIN_LINES:
            return None
        third = len(rates) // 3
        first += statistics.median(rates[:third])
        last += statistics.median(rates[-third:])
    return last / first if first else None


def server_window_of(log_path: str | Path, t0: float, t1: float, min_running: int = 0,
                     max_running: int | None = None,
                     received: Received | None = None) -> dict:  # fmt: skip
    """:func:`server_window` over a log file for a window on this process's monotonic clock;
    ``received`` counts on that clock too."""
    path = Path(log_path)
    if not path.is_file():
        return dict.fromkeys(COLUMNS)
    text = path.read_text(encoding="utf-8", errors="replace")
    offset = time.time() - time.monotonic()  # the log's wall clock less this monotonic one
    counted = None if received is None else (lambda a, b: received(a - offset, b - offset))
    return server_window(text, t0 + offset, t1 + offset, min_running, max_running, counted)
