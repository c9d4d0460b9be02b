"""The decode load generator against the stand-in server."""

import _thread
import gc
import logging
import random
import signal
import threading
import time

import pytest
from studylib.instruments.serving import decode_load, window_precision
from studylib.instruments.serving.decode_load import (
    LoadControl,
    LoadSpec,
    RequestRecord,
    load_window,
    random_prompts,
    run_load,
    steady_window,
)
from studylib.instruments.serving.load_stagger import staggered_length
from studylib.instruments.serving.load_summary import decode_token_counter, summarize_load
from studylib.instruments.serving.window_precision import (
    RunningSlices,
    _t975,
    lasted,
    precise_end,
    rate_precision,
    slice_s,
    window_slices,
)
from test_serving import standin


def load_against_standin(tmp_path, spec: LoadSpec, *flags: str, ignore_eos: bool = True):
    """Start the stand-in server with ``flags``, run ``spec`` against it, stop it."""
    server, port = standin(tmp_path, *flags)
    with server:
        server.wait_ready()
        extras = {"ignore_eos": True} if ignore_eos else {}
        return run_load(f"http://127.0.0.1:{port}", "standin", spec, extras)


def test_prompts_are_random_reproducible_and_sized():
    spec = LoadSpec(concurrency=2, num_prompts=5, input_len=7, output_len=3, vocab_size=1000)
    a, b = random_prompts(spec, 5), random_prompts(spec, 5)
    assert a == b and len(a) == 5 and all(len(p) == 7 for p in a)
    assert len({tuple(p) for p in a}) == 5
    assert all(100 <= t < 1000 for p in a for t in p)


def test_steady_window():
    active = [(0, 0), (1, 4), (2, 8), (3, 10), (8, 7), (9, 10), (10, 3), (11, 0)]
    assert steady_window(active, 10) == (3, 8)  # 8.5 needed: 10 from t=3 until 7 at t=8
    assert steady_window([(0, 0), (1, 1)], 10) is None


def test_load_against_standin(tmp_path):
    spec = LoadSpec(concurrency=4, num_prompts=16, input_len=8, output_len=20, vocab_size=500)
    load = load_against_standin(tmp_path, spec, "--token-delay", "0.005")
    records, active = load.records, load.active
    assert len(records) == 16 and not any(r.error for r in records)
    assert all(r.completion_tokens == 20 and len(r.token_times) == 20 for r in records)
    assert max(count for _, count in active) == 4
    window = steady_window(active, 4)
    assert window is not None
    summary = summarize_load(records, spec, *window)
    assert summary["wrong_length"] == 0 and summary["errors"] == 0
    # Tokens 5 ms apart at the server (a floor, not a speed): the client saw them arrive apart.
    assert summary["itl_p50_ms"] > 0
    assert summary["output_tok_s"] > 0 and summary["ttft_p50_ms"] > 0


@pytest.mark.parametrize("usage_stats", [True, False])
def test_tokens_sent_together_in_one_chunk_count_as_tokens(tmp_path, usage_stats):
    # The stand-in sends 3 tokens per chunk. With the tokens so far in every chunk (SGLang's
    # continuous_usage_stats) each counts, arriving at its chunk's time; a server that does
    # not say is counted by chunks (4 of the 12 tokens), its last chunk's total no count.
    flags = ["--tokens-per-chunk", "3"] + ([] if usage_stats else ["--no-usage-stats"])
    spec = LoadSpec(concurrency=2, num_prompts=4, input_len=4, output_len=12, vocab_size=500)
    load = load_against_standin(tmp_path, spec, "--token-delay", "0.002", *flags)
    assert not any(r.error for r in load.records)
    assert all(r.completion_tokens == 12 for r in load.records)
    for r in load.records:
        assert len(set(r.token_times)) == 4  # four chunks
        assert len(r.token_times) == (12 if usage_stats else 4)
        assert r.first_token == r.token_times[0]


def test_eos_not_ignored_is_detected(tmp_path):
    spec = LoadSpec(concurrency=2, num_prompts=4, input_len=4, output_len=10, vocab_size=500)
    records = load_against_standin(tmp_path, spec, "--eos-after", "3", ignore_eos=False).records
    summary = summarize_load(records, spec, records[0].start, records[-1].end)
    assert summary["wrong_length"] == 4  # stopped at EOS: 3 tokens, not 10


def test_server_crash_during_load_is_recorded(tmp_path):
    spec = LoadSpec(concurrency=2, num_prompts=8, input_len=4, output_len=5, vocab_size=500,
                    timeout_s=5)  # fmt: skip
    records = load_against_standin(tmp_path, spec, "--crash-after-requests", "3").records
    # Three answered, the fourth killed the server; the other client's request failed with it
    # or was the last sent: no new request follows a failure.
    assert sum(1 for r in records if not r.error) == 3
    assert 1 <= sum(1 for r in records if r.error) <= 2 and len(records) < 8


def test_timed_load_keeps_c_in_flight_for_the_duration_whatever_the_speed(tmp_path):
    # A slow server (50 ms per token: one request outlasts the duration) and a fast one: the
    # steady window lasts at least the configured time in both, by construction.
    for delay in ("0.05", "0.001"):
        spec = LoadSpec(concurrency=3, duration_s=0.6, input_len=4, output_len=20,
                        vocab_size=500)  # fmt: skip
        load = load_against_standin(tmp_path, spec, "--token-delay", delay)
        assert not any(r.error for r in load.records)
        complete = [r for r in load.records if not r.cut]
        assert all(r.completion_tokens == 20 for r in complete)
        window = steady_window(load.active, 3)
        assert window[1] - window[0] >= 0.6
        assert max(count for _, count in load.active) == 3
        # At the deadline the requests still streaming are cancelled: at most one per client
        # (none where a request ended right then); no failed request, none left over.
        cut = sum(r.cut for r in load.records)
        assert cut <= 3 and len(load.records) == len(complete) + cut and load.cpu_s > 0
        if delay == "0.05":  # 1 s per request: none can finish within 0.6 s, all are cut
            assert complete == [] and cut == 3


def test_timed_load_at_c256_against_the_standin(tmp_path):
    # Behaviour only (the CPU and tok/s targets are measured by tools/load_benchmark.py and on
    # the GPU): 256 streams in flight at once, every one complete, the window as long as asked.
    spec = LoadSpec(concurrency=256, duration_s=1.0, input_len=4, output_len=8,
                    vocab_size=500, timeout_s=120)  # fmt: skip
    load = load_against_standin(tmp_path, spec, "--token-delay", "0.02")
    assert not any(r.error for r in load.records), [r.error for r in load.records][:3]
    assert max(count for _, count in load.active) == 256
    window = steady_window(load.active, 256)
    assert window[1] - window[0] >= 1.0
    summary = summarize_load(load.records, spec, *window)
    assert summary["wrong_length"] == 0 and summary["tok_s_over_c_tpot"] > 0
    assert load.cpu_pct is not None


def test_steady_window_starts_after_the_admission():
    active = [(0, 0), (1, 4), (10, 0)]
    assert steady_window(active, 4, after=3.0) == (3.0, 10)
    assert steady_window(active, 4, after=0.5) == (1, 10)  # admitted before C in flight
    assert steady_window(active, 4, after=None) == (1, 10)


def test_the_window_of_a_timed_load_starts_once_its_first_c_requests_stream(tmp_path):
    # Each prefill holds the stand-in's engine 0.15 s, so the four requests' admission takes
    # at least 0.45 s after the first is in flight: longer than the 0.3-s duration. The
    # deadline counts from the admission, so the window after it still lasts 0.3 s.
    spec = LoadSpec(concurrency=4, duration_s=0.3, input_len=4, output_len=400,
                    vocab_size=500)  # fmt: skip
    load = load_against_standin(tmp_path, spec, "--token-delay", "0.005", "--prefill-delay", "0.15")
    assert not any(r.error for r in load.records)
    first = [r for r in load.records if r.index < 4]
    assert load.admitted == max(r.first_token for r in first)
    assert load.admitted - min(r.start for r in first) >= 0.45
    window = steady_window(load.active, 4, after=load.admitted)
    assert window[0] == load.admitted and window[1] - window[0] >= 0.3


def test_tpot_counts_only_the_tokens_in_the_window():
    # A stream stalled 5 s by other requests' prefills before the window, then 1 s per
    # token in it: TPOT is the window's 1 s, not (8 - 0) / 4 = 2 s over all its tokens.
    from studylib.instruments.serving.decode_load import RequestRecord

    spec = LoadSpec(concurrency=1, duration_s=4, input_len=4, output_len=200)
    record = RequestRecord(index=0, start=0.0, first_token=0.0,
                           token_times=[0.0, 5.0, 6.0, 7.0, 8.0], end=8.5, cut=True)  # fmt: skip
    summary = summarize_load([record], spec, 5.5, 9.5)
    assert summary["tpot_ms"] == pytest.approx(1000)
    assert summary["output_tokens_steady"] == 3


def test_a_load_needs_a_duration_or_a_count():
    with pytest.raises(ValueError, match="duration_s > 0 or num_prompts"):
        LoadSpec(concurrency=2, input_len=4, output_len=4)


def test_a_window_too_short_for_a_token_grows_until_every_stream_had_one(tmp_path):
    # 0.4 s per token against a 0.1 s window: the load holds C in flight until the window has
    # C tokens, so the throughput it reports is never an empty window's zero.
    spec = LoadSpec(concurrency=2, duration_s=0.1, input_len=4, output_len=3, vocab_size=500)
    load = load_against_standin(tmp_path, spec, "--token-delay", "0.4")
    window = steady_window(load.active, 2)
    summary = summarize_load(load.records, spec, *window)
    assert summary["output_tokens_steady"] >= 2 and summary["output_tok_s"] > 0
    assert summary["steady_s"] >= 0.4 and summary["errors"] == 0


def _record(index, start, first, tpot, tokens, end=None, cut=False):
    from studylib.instruments.serving.decode_load import RequestRecord

    times = [first + i * tpot for i in range(tokens)]
    return RequestRecord(index=index, start=start, first_token=first, token_times=times,
                         end=end if end is not None else times[-1], completion_tokens=tokens,
                         cut=cut)  # fmt: skip


def test_decoding_share_explains_tok_s_below_c_over_tpot():
    # Two streams over [0, 10] at TPOT 0.1 s: one decodes throughout (cut at the end), the
    # other waits 5 s for its first token (a queued prefill). tok/s is 0.75 of C / TPOT:
    # exactly the share of the window the streams spent decoding.
    spec = LoadSpec(concurrency=2, duration_s=10, input_len=4, output_len=200)
    records = [_record(0, 0.0, 0.0, 0.1, 100, end=10.0, cut=True),
               _record(1, 0.0, 5.0, 0.1, 50, end=10.0, cut=True)]  # fmt: skip
    summary = summarize_load(records, spec, 0.0, 10.0)
    assert summary["tpot_ms"] == pytest.approx(100)  # from the cut requests: none finished
    assert summary["output_tok_s"] == pytest.approx(15.0, rel=0.02)
    assert summary["tok_s_over_c_tpot"] == pytest.approx(0.75, rel=0.02)
    assert summary["decoding_share"] == pytest.approx(0.75)


def test_tokens_of_one_chunk_share_its_gap():
    # A server streaming every 3 steps: 3 tokens per chunk, 30 ms apart. Each token's gap is
    # 10 ms (not one 30-ms gap and two zeros); the first chunk's other tokens have none.
    from studylib.instruments.serving.decode_load import RequestRecord

    r = RequestRecord(index=0, start=0.0, first_token=0.1,
                      token_times=[0.1, 0.1, 0.1, 0.13, 0.13, 0.13, 0.16, 0.16, 0.16])  # fmt: skip
    assert r.chunks() == [(0.1, 3), (0.13, 3), (0.16, 3)]
    assert r.itl_s() == pytest.approx([0.01] * 6)


def test_tpot_counts_the_tokens_after_the_first_chunk():
    # 4 tokens per 40-ms chunk over 2 s: TPOT 10 ms exactly, where (last - first) /
    # (tokens - 1) would read 9.9 ms (the first chunk's 4 tokens took no time in the window).
    from studylib.instruments.serving.decode_load import RequestRecord

    times = [0.04 * k for k in range(51) for _ in range(4)]
    r = RequestRecord(index=0, start=0.0, first_token=0.0, token_times=times, end=2.0,
                      completion_tokens=len(times))  # fmt: skip
    spec = LoadSpec(concurrency=1, duration_s=2.0, input_len=4, output_len=len(times))
    summary = summarize_load([r], spec, 0.0, 2.0)
    assert summary["tpot_ms"] == pytest.approx(10.0)
    assert summary["itl_p50_ms"] == pytest.approx(10.0)


def test_a_load_interrupted_in_the_main_thread_ends_at_once(tmp_path):
    # A decode job stopped by a signal (its Snakemake gone: serving.guard turns SIGTERM into
    # SystemExit in the main thread) leaves asyncio.run, which cancels every task: a client
    # must end then, not take its cancelled request for a cut one and send the next (the
    # server still up, the job hung in its teardown for minutes, measured 2026-12-02).
    control = LoadControl()
    spec = LoadSpec(concurrency=2, num_prompts=1000, input_len=4, output_len=1200,
                    vocab_size=500)  # fmt: skip

    def interrupt_once_streaming():
        if control.streaming.wait(timeout=120):
            _thread.interrupt_main()

    server, port = standin(tmp_path, "--token-delay", "0.05")  # 60 s per request
    with server:
        server.wait_ready()
        threading.Thread(target=interrupt_once_streaming, daemon=True).start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            run_load(f"http://127.0.0.1:{port}", "standin", spec, {"ignore_eos": True},
                     control=control)  # fmt: skip
    # Swallowed, the load would go on for 1000 prompts of 60 s each: it ends before its first
    # request would have (a bound a minute wide, not a speed).
    assert control.streaming.is_set() and time.monotonic() - started < 60


def test_the_precision_of_a_windows_rate():
    # Student's t within 0.2 % of the table from 5 degrees of freedom; the interval's
    # half-width over the mean: rates 90 and 110 alternating over ten slices are known to
    # 2.262 x 10.54 / sqrt(10) = 7.5 %; one rate throughout is exact; two slices say nothing.
    for dof, table in ((5, 2.571), (9, 2.262), (29, 2.045), (100, 1.984)):
        assert _t975(dof) == pytest.approx(table, rel=2e-3)
    assert rate_precision([(1.0, 90), (1.0, 110)] * 5) == pytest.approx(0.0754, abs=5e-4)
    assert rate_precision([(0.5, 50)] * 10) == 0.0
    assert rate_precision([(1.0, 100)] * 2) is None and rate_precision([(1.0, 0)] * 5) is None


def test_window_slices_count_each_token_once():
    # Tokens every 0.05 s, mid-way between slice edges, over [0, 1.02]: ten slices of 0.1 s
    # (the last 0.12 s: a remainder under half a slice joins it), two tokens each; tokens
    # outside the window left out.
    record = RequestRecord(index=0, start=0.0)
    record.token_times = [0.025 + 0.05 * i for i in range(-2, 25)]
    slices = window_slices([record], 0.0, 1.02, 0.1)
    assert [n for _, n in slices] == [2] * 10  # 0.025 ... 0.975
    assert slices[-1][0] == pytest.approx(0.12) and slices[0][0] == pytest.approx(0.1)
    assert len(window_slices([record], 0.0, 1.06, 0.1)) == 11  # 0.06 s left: a slice of its own


def test_running_slices_are_the_summarys_slices():
    # Requests starting before and during the window, tokens at uneven times, some before
    # the window's start: after each close, the running slices are window_slices up to that
    # edge, token for token; a request first seen late counts only its tokens in the window.
    rng = random.Random(7)
    records = []
    for i in range(12):
        start = rng.uniform(-1.0, 2.0)
        record = RequestRecord(index=i, start=start)
        t, times = start, []
        for _ in range(rng.randint(5, 120)):
            t += rng.choice([0.0, rng.uniform(0.001, 0.05)])  # chunks share a time
            times.append(t)
        record.token_times = times
        records.append(record)
    t0, width = 0.123, 0.1
    running = RunningSlices(t0, width)
    for k in range(1, 25):
        seen = [r for r in records if r.start < running.edge(k)]  # a request not yet sent
        running.close(seen)
        expected = window_slices(records, t0, running.edge(k), width)
        assert [n for _, n in running.slices] == [n for _, n in expected]
        assert [s for s, _ in running.slices] == pytest.approx([s for s, _ in expected])


def _steady_records(rates: list[int], t0: float = 100.0) -> list[RequestRecord]:
    """One request per second of ``rates``: its tokens spread evenly over that second."""
    records = []
    for i, rate in enumerate(rates):
        record = RequestRecord(index=i, start=t0 + i - 0.5)
        record.token_times = [t0 + i + (k + 0.5) / rate for k in range(rate)]
        records.append(record)
    return records


def test_the_rule_replayed_on_a_longer_window():
    # A full-length window of 30 one-second slices, replayed under the default's rule (1 %,
    # 10 s at least, 20 s at most): a steady rate ends it at its shortest length; a rate
    # alternating 90/110 is known to 1 % nowhere within 20 s (7.5 % over ten slices, 4.7 %
    # over twenty); a rate settling over its first five slices (950 ... 990, then 1000)
    # ends it at the first edge where the interval is within 1 % (15 s). Fixed windows
    # (precision 0) end at the longest; a window shorter than the longest, at its own end.
    steady = _steady_records([1000] * 30)
    assert precise_end(steady, 100.0, 130.0, 0.01, 10, 20) == pytest.approx(110.0)
    noisy = _steady_records([90, 110] * 15)
    assert precise_end(noisy, 100.0, 130.0, 0.01, 10, 20) == pytest.approx(120.0)
    settling = _steady_records([950, 960, 970, 980, 990] + [1000] * 25)
    end = precise_end(settling, 100.0, 130.0, 0.01, 10, 20)
    assert end == pytest.approx(115.0)
    assert rate_precision(window_slices(settling, 100.0, end, 1.0)) <= 0.01
    assert rate_precision(window_slices(settling, 100.0, end - 1, 1.0)) > 0.01
    assert precise_end(steady, 100.0, 130.0, 0.0, 10, 20) == pytest.approx(120.0)
    assert precise_end(noisy, 100.0, 115.5, 0.01, 10, 20) == pytest.approx(115.5)


def test_a_load_ending_at_a_precision_needs_a_shortest_window():
    with pytest.raises(ValueError, match="shortest_s"):
        LoadSpec(concurrency=1, duration_s=2, input_len=4, output_len=8, precision=0.01)
    with pytest.raises(ValueError, match="shortest_s"):
        LoadSpec(concurrency=1, duration_s=2, input_len=4, output_len=8, precision=0.01,
                 shortest_s=3)  # fmt: skip


def test_a_precise_window_ends_after_its_shortest_length(tmp_path, monkeypatch):
    # A steady stand-in, a window of at most 30 s asked for 50 % (any steady rate meets it):
    # it ends once its shortest length (1 s) is past, not at 30 s, and says how precise it was.
    spec = LoadSpec(concurrency=4, duration_s=30, input_len=4, output_len=200,
                    vocab_size=500, precision=0.5, shortest_s=1.0)  # fmt: skip
    judged = []

    def precision(slices):
        judged.append(list(slices))
        return rate_precision(slices)

    monkeypatch.setattr(window_precision, "rate_precision", precision)
    load = load_against_standin(tmp_path, spec, "--token-delay", "0.005")
    assert not any(r.error for r in load.records)
    s0, s1 = load_window(load, 4)
    # it ended at a slice's edge: 1 s after its start within floating point (window_precision)
    assert load.window_end == s1 and lasted(s1 - s0, 1.0) and s1 - s0 < 10
    summary = summarize_load(load.records, spec, s0, s1)
    assert 0 <= summary["tpot_ci_pct"] <= 50
    # One slicing: the slices the rule ended the window on are the summary's, so the table's
    # precision is the one the rule judged (session 19: 1.02 % in the table, 1 % live).
    summarized = window_slices(load.records, s0, s1, slice_s(spec.shortest_s))
    assert [n for _, n in judged[-1]] == [n for _, n in summarized]
    # Replayed on the same records as if the window had run on (a full-length run's check
    # of a shortened one), the rule ends it where the load did.
    last = max(t for r in load.records for t in r.token_times)
    assert precise_end(load.records, s0, last + 5, spec.precision, spec.shortest_s,
                       spec.duration_s) == s1  # fmt: skip


def test_a_window_never_precise_enough_runs_its_longest(tmp_path, monkeypatch):
    # The rate never known to the precision asked: the window lasts min_steady_s (duration_s).
    seen = []
    monkeypatch.setattr(window_precision, "rate_precision",
                        lambda s: seen.append(len(s)) or 0.2)  # fmt: skip
    spec = LoadSpec(concurrency=2, duration_s=1.5, input_len=4, output_len=400,
                    vocab_size=500, precision=0.01, shortest_s=0.5)  # fmt: skip
    load = load_against_standin(tmp_path, spec, "--token-delay", "0.005")
    s0, s1 = steady_window(load.active, 2, after=load.admitted)
    assert s1 - s0 >= 1.5
    # judged from the shortest length on, each slice (0.05 s) once: 10 slices onwards
    assert seen and seen[0] >= 10 and seen == sorted(seen)


def test_a_job_stopped_during_the_load_ends_it_cleanly(tmp_path, caplog):
    # A decode job's SIGTERM (its Snakemake gone) becomes SystemExit from the job's handler.
    # Raised inside the loop, it ended a request's task and the clients awaiting it, and
    # asyncio.run's shutdown logged each with its traceback into the job's log (CI, decode
    # under SIGHUP). The load now ends cancelled, the job's own handler then raises its
    # SystemExit outside the loop, and asyncio has nothing to say.
    def job_handler(signum, frame):
        raise SystemExit(128 + signum)

    control = LoadControl(after_tokens=50)
    spec = LoadSpec(concurrency=16, num_prompts=1000, input_len=4, output_len=100_000,
                    vocab_size=500)  # fmt: skip

    def terminate_once_streaming():  # as serving.guard signals the main thread
        if control.streaming.wait(timeout=120):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, job_handler)
    # 16 streams of a token per ms: the loop is busy in the requests' code when it lands
    server, port = standin(tmp_path, "--token-delay", "0.001")
    try:
        with server, caplog.at_level(logging.DEBUG, logger="asyncio"):
            server.wait_ready()
            threading.Thread(target=terminate_once_streaming, daemon=True).start()
            started = time.monotonic()
            with pytest.raises(SystemExit) as stopped:
                run_load(f"http://127.0.0.1:{port}", "standin", spec, {"ignore_eos": True},
                         control=control)  # fmt: skip
            gc.collect()  # a task left pending or failed is logged as it is collected
    finally:
        handler_after = signal.signal(signal.SIGTERM, previous)
    assert stopped.value.code == 128 + signal.SIGTERM and time.monotonic() - started < 60
    assert handler_after is job_handler  # the job's handler is back after the load
    logged = [r.getMessage()[:200] for r in caplog.records if r.name == "asyncio"]
    assert [m for m in logged if "Using selector" not in m] == []


def test_a_staggered_load_ends_its_first_requests_one_after_another(tmp_path):
    # Client i's first request ends in the i-th tenth-of-40 slot, at a golden-ratio offset
    # (4, 18, 21, 35 tokens: load_stagger.staggered_length), every later one asks for 40: the
    # requests end one after another instead of all four every 40 tokens, and their chunks do
    # not share steps. The window starts once each first request has ended and warmup_s has
    # passed.
    spec = LoadSpec(concurrency=4, duration_s=0.3, input_len=4, output_len=40, vocab_size=500,
                    stagger=True, warmup_s=0.4)  # fmt: skip
    load = load_against_standin(tmp_path, spec, "--token-delay", "0.005")
    assert not any(r.error for r in load.records)
    first = [r for r in load.records if r.index < 4]
    assert [r.completion_tokens for r in first] == [4, 18, 21, 35]
    assert [r.max_tokens for r in first] == [4, 18, 21, 35]
    later = [r for r in load.records if r.index >= 4]
    assert later and all(r.max_tokens is None for r in later)
    assert all(r.completion_tokens == 40 for r in later if not r.cut)
    assert load.admitted >= max(r.end for r in first)
    assert load.admitted >= load.active[0][0] + 0.4
    s0, s1 = steady_window(load.active, 4, after=load.admitted)
    assert s0 == load.admitted and s1 - s0 >= 0.3
    summary = summarize_load(load.records, spec, s0, s1)
    assert summary["wrong_length"] == 0  # each request checked against its own length


def test_a_preaged_load_starts_its_window_before_its_first_requests_end(tmp_path):
    # The same load pre-aged: client i's first prompt holds the context its age would have
    # given it (4 + 40 - 4, 4 + 40 - 18, ... tokens), every later prompt 4, and the window
    # starts once every first request has streamed and warmup_s has passed, while the
    # longer first requests still stream.
    spec = LoadSpec(concurrency=4, duration_s=0.3, input_len=4, output_len=40, vocab_size=500,
                    stagger=True, preaged=True, warmup_s=0.05)  # fmt: skip
    assert [len(p) for p in random_prompts(spec, 6)] == [40, 26, 23, 9, 4, 4]
    load = load_against_standin(tmp_path, spec, "--token-delay", "0.01")
    assert not any(r.error for r in load.records)
    first = [r for r in load.records if r.index < 4]
    assert [r.max_tokens for r in first] == [4, 18, 21, 35]
    assert all(r.completion_tokens == r.max_tokens for r in first if not r.cut)
    assert load.admitted >= max(r.first_token for r in first)
    assert load.admitted >= load.active[0][0] + 0.05
    assert load.admitted < max(r.end for r in first)  # 35 tokens of 10 ms: not waited for
    s0, s1 = steady_window(load.active, 4, after=load.admitted)
    assert s0 == load.admitted and s1 - s0 >= 0.3
    assert summarize_load(load.records, spec, s0, s1)["wrong_length"] == 0
    with pytest.raises(ValueError, match="pre-aged first requests need a staggered load"):
        LoadSpec(concurrency=4, duration_s=1, input_len=4, output_len=40, preaged=True)


def test_a_staggered_first_request_that_comes_back_short_is_a_wrong_length():
    spec = LoadSpec(concurrency=2, duration_s=1, input_len=4, output_len=10, stagger=True)
    records = [RequestRecord(index=0, start=0.0, first_token=0.1, token_times=[0.1, 0.2],
                             end=0.3, completion_tokens=2, max_tokens=5),
               RequestRecord(index=1, start=0.0, first_token=0.1, token_times=[0.1, 0.2],
                             end=0.3, completion_tokens=10, max_tokens=10)]  # fmt: skip
    assert summarize_load(records, spec, 0.0, 1.0)["wrong_length"] == 1


@pytest.mark.parametrize("concurrency", [1, 16, 64, 256, 512, 1024])
def test_staggered_first_requests_end_once_per_slot_on_spread_chunk_steps(concurrency):
    # One first request ends in each of the C slots of output_len / C steps, and their
    # lengths' residues modulo a stream interval of 8 are spread evenly, so the clients'
    # chunks fall on different steps (on the H200 at C = 64 with multiples of 8 they came in
    # two bursts: load_stagger.staggered_length).
    lengths = [staggered_length(1024, concurrency, i) for i in range(concurrency)]
    slot = 1024 / concurrency
    assert all(i * slot - 1 <= n <= (i + 1) * slot for i, n in enumerate(lengths))
    assert 1 <= min(lengths) and max(lengths) <= 1024
    if concurrency >= 16:
        counts = [sum(1 for n in lengths if n % 8 == r) for r in range(8)]
        assert max(counts) - min(counts) <= max(2, concurrency // 64), counts


def test_a_server_that_admits_fewer_than_c_is_not_waited_for(tmp_path):
    """A server that keeps one of C requests queued (SGLang held one of 512 profile requests
    for 35 s on the H200): with settle_s, the load is streaming once no more first tokens
    come, and says how many are waiting; without it, it waits for the queued one."""
    spec = LoadSpec(concurrency=4, num_prompts=1000, input_len=4, output_len=100_000,
                    vocab_size=500)  # fmt: skip
    server, port = standin(tmp_path, "--token-delay", "0.01", "--max-running", "3")
    seen = {}
    with server:
        server.wait_ready()
        for settle_s in (None, 0.3):
            control = LoadControl(after_tokens=1, settle_s=settle_s)
            thread = threading.Thread(
                target=run_load,
                args=(f"http://127.0.0.1:{port}", "standin", spec),
                kwargs={"extras": {"ignore_eos": True}, "control": control},
                daemon=True,
            )
            thread.start()
            # The queued request streams only once one of the three ends: never, here.
            seen[settle_s] = control.streaming.wait(timeout=3.0 if settle_s is None else 60)
            seen[f"waiting {settle_s}"] = control.waiting
            control.stop.set()
            thread.join(timeout=30)
            assert not thread.is_alive()
    assert seen == {None: False, "waiting None": 0, 0.3: True, "waiting 0.3": 1}


def test_decode_token_counter_leaves_each_requests_first_token_out():
    # The scheduler's decode lines count decode steps' tokens; a request's first is its
    # prefill's. Spans are half-open, so adjacent ones count each token once.
    a = RequestRecord(index=0, start=0.0, first_token=0.5, token_times=[0.5, 1.0, 1.0, 2.0])
    b = RequestRecord(index=1, start=1.0, first_token=1.5, token_times=[1.5, 1.5, 3.0])
    count = decode_token_counter([a, b])
    assert count(0.0, 10.0) == 5  # 3 of a's, 2 of b's (b's second came in its first chunk)
    assert count(1.0, 2.0) + count(2.0, 3.0) == count(1.0, 3.0) == 4
    assert count(0.0, 0.9) == 0  # a's first token only


def test_the_load_records_its_own_stalls(tmp_path, monkeypatch):
    # A blocked event loop holds every stream's chunks back: the load's heartbeat names the
    # stall (here the prompt of request 6 takes 0.3 s to make, on the loop's thread).
    real = decode_load.prompt_ids

    def slow_prompt(spec, index):
        if index == 6:
            time.sleep(0.3)
        return real(spec, index)

    monkeypatch.setattr(decode_load, "prompt_ids", slow_prompt)
    spec = LoadSpec(concurrency=2, num_prompts=10, input_len=4, output_len=10, vocab_size=500)
    load = load_against_standin(tmp_path, spec, "--token-delay", "0.005")
    assert max(late for _, late in load.stalls) >= 0.25
    (due, late), *_ = [s for s in load.stalls if s[1] >= 0.25]
    summary = summarize_load(load.records, spec, due - 1.0, due + late + 1.0, load.stalls)
    assert summary["load_stall_s"] >= late
    # Only what falls inside the window counts; without stalls given, nothing is said.
    assert summarize_load(load.records, spec, due + late / 2, due + late + 1.0,
                          [(due, late)])["load_stall_s"] == pytest.approx(late / 2)  # fmt: skip
    assert summarize_load(load.records, spec, due - 1.0, due + late + 1.0)["load_stall_s"] is None
