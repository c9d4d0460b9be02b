"""The server's account of a decode window (SGLang's decode log lines) against the client's."""

from datetime import datetime

import pandas as pd
import pytest
from studylib.instruments.serving.server_log import (
    decode_lines,
    graph_captures,
    long_collections,
    server_window,
)
from studylib.stages.decode.decode_judgements import (
    COUNT_AGREEMENT,
    DELIVERY_TOLERANCE,
    delivery_note,
    engine_account,
    invalid_note,
    stalls_note,
)
from studylib.stages.decode.decode_window import use_engine_account

LOG = """\
[2026-12-01 14:26:33] Decode batch, #running-req: 64, #token: 55681, token usage: 0.01, cuda graph: True, gen throughput (token/s): 6659.47, #queue-req: 0
[2026-12-01 14:26:36] Prefill batch, #new-seq: 56, #new-token: 56, #cached-token: 7112, token usage: 0.01, #running-req: 200, #queue-req: 0
[2026-12-01 14:26:36] Decode batch, #running-req: 256, #token: 66448, token usage: 0.01, cuda graph: True, gen throughput (token/s): 23049.09, #queue-req: 0
[2026-12-01 14:26:38] Decode batch, #running-req: 256, #token: 107408, token usage: 0.02, cuda graph: True, gen throughput (token/s): 22623.93, #queue-req: 0
[2026-12-01 14:26:46] Decode batch, #running-req: 256, #token: 291728, token usage: 0.05, cuda graph: True, gen throughput (token/s): 20874.52, #queue-req: 0
[2026-12-01 14:26:47] Decode batch, #running-req: 8, #token: 9080, token usage: 0.00, cuda graph: True, gen throughput (token/s): 11995.96, #queue-req: 0
[2026-12-01 14:26:51] INFO:     127.0.0.1:51820 - "GET /v1/loads?include=core HTTP/1.1" 200 OK
"""  # noqa: E501 - SGLang's lines as it writes them (H200, 2026-12-01)


def _t(hms: str) -> float:
    return datetime.strptime(f"2026-12-01 {hms}", "%Y-%m-%d %H:%M:%S").timestamp()


def test_decode_lines_are_parsed_and_other_lines_skipped():
    lines = decode_lines(LOG)
    assert len(lines) == 5
    assert lines[1] == (_t("14:26:36"), "", 256, pytest.approx(23049.09), False)


def test_server_window_takes_the_lines_stamped_inside():
    # The window 14:26:35.5-14:26:47.5: lines stamped 14:26:36.5 to 14:26:46.5 (a line
    # counts the steps before it, and may have been written up to a second after its
    # stamp), so the 14:26:36 line (its steps partly before) and the 14:26:47 one (perhaps
    # after the end) are left out.
    got = server_window(LOG, _t("14:26:35") + 0.5, _t("14:26:47") + 0.5)
    assert got == {"server_tok_s": pytest.approx((22623.93 + 20874.52) / 2),
                   "server_tok_s_median": pytest.approx((22623.93 + 20874.52) / 2),
                   "server_running_min": 256, "server_running_median": 256,
                   "server_lines": 2, "server_drift": None, "server_span_s": None,
                   "server_step_ms": None, "delivery_ratio": None,
                   "server_gc_s": None}  # fmt: skip
    # The scheduler ran out of requests inside a longer window: its fewest running say so.
    assert server_window(LOG, _t("14:26:35"), _t("14:26:48"))["server_running_min"] == 8
    # min_running keeps a run's steady lines only (not the straggler line).
    steady = server_window(LOG, _t("14:26:35"), _t("14:26:48"), min_running=218)
    assert steady["server_running_min"] == 256 and steady["server_lines"] == 3
    # max_running leaves out another load's lines (more running than this one's C).
    c64 = server_window(LOG, _t("14:26:30"), _t("14:26:48"), min_running=55, max_running=64)
    assert c64["server_lines"] == 1 and c64["server_tok_s"] == pytest.approx(6659.47)
    # The median line: the straggler line (8 running, 12.0k tok/s) does not pull it down.
    four = server_window(LOG, _t("14:26:35"), _t("14:26:49"))
    assert four["server_tok_s_median"] == pytest.approx((22623.93 + 20874.52) / 2)
    assert four["server_tok_s"] == pytest.approx((23049.09 + 22623.93 + 20874.52 + 11995.96) / 4)


def test_data_parallel_ranks_add_up():
    log = ("[2026-12-01 10:00:02 DP0 TP0] Decode batch, #running-req: 10, gen throughput "
           "(token/s): 100.00, #queue-req: 0\n"
           "[2026-12-01 10:00:02 DP1 TP1] Decode batch, #running-req: 12, gen throughput "
           "(token/s): 120.00, #queue-req: 0\n")  # fmt: skip
    got = server_window(log, _t("10:00:00"), _t("10:00:05"))
    assert got["server_tok_s"] == pytest.approx(220.0) and got["server_running_min"] == 22


def test_delivery_note():
    row = {"concurrency": 256, "server_tok_s": 21362.0, "server_running_min": 256,
           "server_running_median": 256}  # fmt: skip
    assert delivery_note({**row, "output_tok_s": 21362.0 * (1 - DELIVERY_TOLERANCE / 2)}) == ""
    note = delivery_note({**row, "output_tok_s": 12268.0})
    assert note.startswith("the server generated 21,362 tok/s, the client received 12,268")
    assert "a median 100 of C = 256" in delivery_note({**row, "output_tok_s": 21362.0,
                                                       "server_running_median": 100})  # fmt: skip
    # One line at a lockstep wave's turnover (12 running, the replacements in prefill) is
    # not an idle server: the FP8 C = 256 window of 2026-12-02 on the H200.
    assert delivery_note({**row, "output_tok_s": 21362.0, "server_running_min": 12}) == ""
    # Nothing logged (another engine, or an old table without the columns): no verdict.
    assert delivery_note({"concurrency": 256, "output_tok_s": 1.0}) == ""
    assert delivery_note({**row, "server_tok_s": float("nan"), "output_tok_s": 1.0}) == ""
    # A table from before tpot_source reads it as NA: the client's account, judged as before.
    assert delivery_note({**row, "output_tok_s": 12268.0, "tpot_source": pd.NA}).startswith(
        "the server generated 21,362 tok/s"
    )


def test_invalid_note_names_a_delivery_bound_window():
    row = {"valid": False, "steady_s": 15.0, "concurrency": 256, "output_tok_s": 12268.0,
           "server_tok_s": 21362.0, "server_running_min": 256}  # fmt: skip
    assert invalid_note(row) == (
        "invalid: the server generated 21,362 tok/s, the client received 12,268: its "
        "streaming path set the pace"
    )


def test_drift_compares_the_last_third_of_the_lines_with_the_first():
    # SGLang's C = 1 lines after a server start on the H200 (2026-12-02): still speeding up.
    rates = [480, 490, 500, 560, 590, 600, 590, 594, 600]
    log = "".join(f"[2026-12-02 08:01:{10 + i:02d}] Decode batch, #running-req: 1, "
                  f"gen throughput (token/s): {r:.2f}, #queue-req: 0\n"
                  for i, r in enumerate(rates))  # fmt: skip
    got = server_window(log, _t2("08:01:09"), _t2("08:01:20"))
    assert got["server_lines"] == 9 and got["server_drift"] == pytest.approx(594 / 490)
    few = server_window(log, _t2("08:01:09"), _t2("08:01:15"))  # 5 lines: not enough
    assert few["server_lines"] == 5 and few["server_drift"] is None


def _t2(hms: str) -> float:
    return datetime.strptime(f"2026-12-02 {hms}", "%Y-%m-%d %H:%M:%S").timestamp()


def test_a_row_whose_client_count_differs_from_the_engines_is_the_engines_account():
    # bf16, C = 256 on the H200 (2026-12-02): the client counted 3.5 % more tokens than the
    # scheduler made (a backlog of chunks reaching it in bursts) and read TPOT 3.3 % short.
    row = {"concurrency": 256, "output_tok_s": 12820.7, "tpot_ms": 19.99, "server_tok_s": 12387.4,
           "server_tok_s_median": 12387.4, "server_running_median": 256, "server_running_min": 256,
           "j_per_token": 0.0542, "j_per_token_net": 0.04, "tpot_source": "client"}  # fmt: skip
    assert engine_account(row)
    assert not engine_account({**row, "output_tok_s": 12387.4 * 1.02})  # within the noise
    assert not engine_account({**row, "server_tok_s": None})  # nothing logged: the client's
    use_engine_account(row)
    assert row["tpot_source"] == "engine" and row["output_tok_s"] == 12387.4
    assert row["tpot_ms"] == pytest.approx(1e3 * 256 / 12387.4)  # 20.67 ms
    assert (row["client_tpot_ms"], row["client_tok_s"]) == (19.99, 12820.7)
    # The window's joules over the tokens the engine made, not the client's count.
    assert row["j_per_token"] == pytest.approx(0.0542 * 12820.7 / 12387.4)
    assert row["tok_s_over_c_tpot"] == pytest.approx(1.0)
    # The client's shortfall is no delivery verdict on the engine's account; an idle
    # scheduler still is.
    short = {**row, "client_tok_s": 9000.0}
    assert delivery_note(short) == ""
    assert "a median 100 of C = 256" in delivery_note({**short, "server_running_median": 100})


def _ms_log(lines: list[tuple[str, int, float]], rank: str = "") -> str:
    """Decode lines stamped to the millisecond (SGLANG_LOG_MS=1): (h:m:s.mmm, running, tok/s)."""
    return "".join(f"[2026-12-04 {hms}{rank}] Decode batch, #running-req: {running}, #token: 0, "
                   f"token usage: 0.00, cuda graph: True, gen throughput (token/s): {rate:.2f}, "
                   "#queue-req: 0\n" for hms, running, rate in lines)  # fmt: skip


def _t3(hms: str) -> float:
    return datetime.strptime(f"2026-12-04 {hms}", "%Y-%m-%d %H:%M:%S.%f").timestamp()


ARGS_LINE = "[2026-12-04 19:13:53.101] server_args=ServerArgs(decode_log_interval=40, port=1)\n"
MS_LOG = ARGS_LINE + _ms_log(
    [
        ("19:18:50.000", 512, 9000.0),  # after an idle gap: its span began before the window
        ("19:18:52.000", 512, 12000.0),
        ("19:18:53.500", 512, 13000.0),
        ("19:18:55.000", 512, 14000.0),
        ("19:18:55.500", 480, 10000.0),  # straddles the window's end
    ]
)


def test_millisecond_stamps_give_each_line_its_span():
    line = decode_lines(MS_LOG)[1]
    assert line.ms and line.wall == pytest.approx(_t3("19:18:52.000"))
    # The window 19:18:51-19:18:55.2 holds two whole lines, 19:18:52-53.5 and 53.5-55: the
    # 19:18:52 line's span began at :50, before the window, and the :55.5 line's ends after.
    got = server_window(MS_LOG, _t3("19:18:51.000"), _t3("19:18:55.200"))
    made = 13000 * 1.5 + 14000 * 1.5
    assert got["server_lines"] == 2 and got["server_span_s"] == pytest.approx(3.0)
    # Time-weighted: tokens over seconds, not the mean of the lines' rates.
    assert got["server_tok_s"] == pytest.approx(made / 3.0)
    assert got["delivery_ratio"] is None  # no client count given
    # A request's time per token by the scheduler's clock: 3 s over 2 lines of 40 steps.
    assert got["server_step_ms"] == pytest.approx(1e3 * 3.0 / 80)
    assert (
        server_window(MS_LOG.removeprefix(ARGS_LINE), _t3("19:18:51.000"), _t3("19:18:55.200"))[
            "server_step_ms"
        ]
        is None
    )  # no interval logged
    # With the window from :50, the :52 line (2 s at 12,000) is whole too.
    wide = server_window(MS_LOG, _t3("19:18:50.000"), _t3("19:18:55.200"))
    assert wide["server_span_s"] == pytest.approx(5.0)
    assert wide["server_tok_s"] == pytest.approx((24000 + made) / 5.0)


def test_delivery_ratio_counts_the_client_over_the_same_spans():
    asked = []

    def received(a: float, b: float) -> int:
        asked.append((a, b))
        return round(1.02 * 13500 * (b - a))  # the client got 2 % more than made

    got = server_window(MS_LOG, _t3("19:18:51.000"), _t3("19:18:55.200"), received=received)
    assert [(round(a - _t3("19:18:52.000"), 3), round(b - a, 3)) for a, b in asked] == [
        (0.0, 1.5),
        (1.5, 1.5),
    ]
    assert got["delivery_ratio"] == pytest.approx(1.02 * 13500 * 3 / (13000 * 1.5 + 14000 * 1.5))
    # Whole-second stamps: no spans, no ratio (the old mean of lines, one second in).
    coarse = server_window(LOG, _t("14:26:35") + 0.5, _t("14:26:47") + 0.5, received=received)
    assert coarse["delivery_ratio"] is None and coarse["server_span_s"] is None
    assert coarse["server_step_ms"] is None


def test_delivery_ratio_over_data_parallel_ranks():
    # Two ranks, each logging its own lines: every rank's tokens over the first rank's spans.
    log = (_ms_log([("10:00:00.000", 8, 100.0), ("10:00:01.000", 8, 100.0),
                    ("10:00:02.000", 8, 100.0)], " DP0 TP0")
           + _ms_log([("10:00:00.500", 8, 50.0), ("10:00:01.500", 8, 50.0),
                      ("10:00:02.500", 8, 50.0)], " DP1 TP1"))  # fmt: skip
    got = server_window(log, _t3("10:00:00.000"), _t3("10:00:02.600"),
                        received=lambda a, b: round(150 * (b - a)))  # fmt: skip
    assert got["server_tok_s"] == pytest.approx(150.0)
    assert got["server_span_s"] == pytest.approx(2.0)  # rank DP0's two whole lines
    # DP1's lines cover 00.5-02.5: over DP0's 00-02, its 1.5 s of them at 50 tok/s.
    assert got["delivery_ratio"] == pytest.approx(300 / (200 + 75))


def test_engine_account_with_an_exact_count_decides_at_two_per_cent():
    row = {"concurrency": 512, "output_tok_s": 13573.5, "tpot_ms": 37.66,
           "server_tok_s": 13262.0, "server_tok_s_median": 13183.5,
           "server_running_median": 512, "server_running_min": 480}  # fmt: skip
    # bf16 C = 512, 2026-12-04: 2.3 % apart by the mean of lines: within the 3 % noise
    # without an exact count, beyond COUNT_AGREEMENT with one.
    assert not engine_account(row)
    assert engine_account({**row, "delivery_ratio": 1.024})
    assert engine_account({**row, "delivery_ratio": 0.975})
    assert not engine_account({**row, "delivery_ratio": 1.015})
    assert not engine_account({**row, "delivery_ratio": float("nan")})  # falls back
    assert 1 + COUNT_AGREEMENT < 1.024


def test_delivery_note_reads_the_exact_ratio():
    row = {"concurrency": 256, "server_tok_s": 21362.0, "output_tok_s": 21362.0,
           "server_running_median": 256, "delivery_ratio": 0.58}  # fmt: skip
    assert delivery_note(row) == ("the server generated 21,362 tok/s, the client received "
                                  "58.0 % of them over the same log lines: its streaming "
                                  "path set the pace")  # fmt: skip
    assert delivery_note({**row, "delivery_ratio": 0.99}) == ""


def test_the_engines_account_takes_the_schedulers_step_where_it_is_known():
    row = {"concurrency": 512, "output_tok_s": 13573.5, "tpot_ms": 37.66,
           "server_tok_s": 13262.0, "server_tok_s_median": 13043.9, "server_step_ms": 38.6,
           "server_running_median": 512, "j_per_token": 0.05}  # fmt: skip
    use_engine_account(row)
    assert row["tpot_ms"] == 38.6 and row["client_tpot_ms"] == 37.66
    assert row["output_tok_s"] == 13262.0


def test_the_servers_long_garbage_collections_inside_the_window():
    gc_line = ("[2026-12-04 19:18:54.800] LONG GARBAGE COLLECTION DETECTED | Generation 2 | "
               "Duration: 0.7000s | # Objects: gen0=10, gen1=20, gen2=900000 | This may cause "
               "latency jitter. Consider calling the freeze_gc API after sending a few warmup "
               "requests.\n")  # fmt: skip
    args = ARGS_LINE.replace("port=1", "gc_warning_threshold_secs=0.05")
    log = args + MS_LOG.removeprefix(ARGS_LINE) + gc_line
    assert long_collections(log) == [(pytest.approx(_t3("19:18:54.100")), 0.7)]
    got = server_window(log, _t3("19:18:51.000"), _t3("19:18:55.200"))
    assert got["server_gc_s"] == pytest.approx(0.7)
    # Half of it before a window that begins at 19:18:54.45.
    late = server_window(log, _t3("19:18:54.450"), _t3("19:18:59.000"))
    assert late["server_gc_s"] == pytest.approx(0.35)
    # A server not asked to log them: unknown, not none.
    assert server_window(MS_LOG + gc_line, _t3("19:18:51.000"),
                         _t3("19:18:55.200"))["server_gc_s"] is None  # fmt: skip
    assert long_collections(MS_LOG) is None


def test_stalls_note_names_what_held_the_streams_back():
    assert stalls_note({"server_gc_s": 0.7, "load_stall_s": 0.0}) == (
        "streams held back inside the window: the server's long garbage collections 0.70 s"
    )
    assert "the load's own stalls 0.30 s" in stalls_note({"load_stall_s": 0.3})
    assert stalls_note({"server_gc_s": None, "load_stall_s": 0.0}) == ""


def test_the_starts_cuda_graph_captures_by_the_servers_own_seconds():
    # SGLang 0.5.16's lines (the H200's bf16 start, 2026-12-04), a progress bar between them.
    text = (
        "[2026-12-04 19:14:17] Capture target prefill CUDA graph begin. backend=breakable\n"
        "Capturing num tokens (num_tokens=8192 avail_mem=20.59 GB):   2%|\n"
        "[2026-12-04 19:15:39] Capture target prefill CUDA graph end. elapsed=82.45 s, "
        "mem usage=2.65 GB, avail mem=17.94 GB.\n"
        "[2026-12-04 19:15:48] Capture target decode CUDA graph end. elapsed=9.07 s, mem usage"
        "=0.32 GB, avail mem=17.63 GB.\n"
    )
    assert graph_captures(text) == {"prefill": 82.45, "decode": 9.07}
    older = "[2026-11-30 10:00:00] Capture cuda graph end. Time elapsed: 31.20 s. mem usage=1 GB"
    assert graph_captures(older) == {"decode": 31.2}
    assert graph_captures("[2026-12-04 19:15:48] The server is fired up") == {}
