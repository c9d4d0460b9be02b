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
from datetime import datetime
from pathlib import Path

#: Columns this module adds to a decode summary row.
COLUMNS = [
    "server_tok_s",
    "server_tok_s_median",
    "server_running_min",
    "server_running_median",
    "server_lines",
    "server_drift",
]

#: The fewest lines of one rank a window's drift is read from (two thirds of at least two).
DRIFT_MIN_LINES = 6

_LINE = re.compile(
    r"^\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?P<ranks>[^\]]*)\] Decode batch"
    r".*?#running-req: (?P<running>\d+)"
    r".*?gen throughput \(token/s\): (?P<tok_s>[\d.]+)"
)


def decode_lines(text: str) -> list[tuple[float, str, int, float]]:
    """(wall time, rank tag, running requests, generated tokens/s) per decode log line; the
    stamp is the server host's local time at one-second resolution."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m is None:
            continue
        stamp = datetime.strptime(m["stamp"], "%Y-%m-%d %H:%M:%S").timestamp()
        out.append((stamp, m["ranks"].strip(), int(m["running"]), float(m["tok_s"])))
    return out


def wall_of(monotonic_t: float) -> float:
    """A ``time.monotonic()`` instant of this process as wall time (the log's clock)."""
    return monotonic_t + (time.time() - time.monotonic())


def server_window(text: str, wall0: float, wall1: float, min_running: int = 0,
                  max_running: int | None = None) -> dict:  # fmt: skip
    """The scheduler's tokens/s and fewest and median running requests over the decode lines logged
    inside [wall0, wall1]. A stamp is a whole second: a line stamped s was written in
    [s, s + 1) and counts steps before it, so lines are taken from one second after the
    window's start to one second before its end (the next pass may log in the same second).
    Data-parallel ranks log each for itself: their rates add. ``min_running``: only lines
    with at least that many requests running (a run's steady part, not its ramps), and
    ``max_running`` at most that many (not another load's leftovers). Nothing
    logged there: the columns are None."""
    lines = [x for x in decode_lines(text)
             if wall0 + 1 <= x[0] <= wall1 - 1 and x[2] >= min_running
             and (max_running is None or x[2] <= max_running)]  # fmt: skip
    empty = dict.fromkeys(COLUMNS)
    if not lines:
        return {**empty, "server_lines": 0}
    ranks = sorted({rank for _, rank, _, _ in lines})
    tok_s = sum(statistics.fmean(x[3] for x in lines if x[1] == r) for r in ranks)
    # The median line: robust to the few lines a wave's start or end writes (prefills, the
    # last stragglers), so two runs' engine speeds compare (the cross-check's engine_ratio).
    tok_s_median = sum(statistics.median(x[3] for x in lines if x[1] == r) for r in ranks)
    running = sum(min(x[2] for x in lines if x[1] == r) for r in ranks)
    median = sum(statistics.median(x[2] for x in lines if x[1] == r) for r in ranks)
    return {"server_tok_s": tok_s, "server_tok_s_median": tok_s_median,
            "server_running_min": running, "server_running_median": median,
            "server_lines": len(lines), "server_drift": drift(lines, ranks)}  # fmt: skip


def drift(lines: list[tuple[float, str, int, float]], ranks: list[str]) -> float | None:
    """The scheduler's median rate over the window's last third of lines over that of its
    first third (ranks added): 1 for an engine at one speed. On the H200 a C = 1 window
    right after a server start read 1.37 (the engine warming up); in a
    window of requests all started together the rate falls as their contexts grow. None
    with fewer than DRIFT_MIN_LINES lines of a rank."""
    first = last = 0.0
    for rank in ranks:
        rates = [x[3] for x in sorted(lines) if x[1] == rank]
        if len(rates) < DRIFT_MIN_LINES:
            return None
        third = len(rates) // 3
        first += statistics.median(rates[:third])
        last += statistics.median(rates[-third:])
    return last / first if first else None


def server_window_of(log_path: str | Path, t0: float, t1: float, min_running: int = 0,
                     max_running: int | None = None) -> dict:  # fmt: skip
    """:func:`server_window` over a log file for a window on this process's monotonic clock."""
    path = Path(log_path)
    if not path.is_file():
        return dict.fromkeys(COLUMNS)
    text = path.read_text(encoding="utf-8", errors="replace")
    return server_window(text, wall_of(t0), wall_of(t1), min_running, max_running)
