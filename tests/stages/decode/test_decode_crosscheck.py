"""SGLang's bench_serving as the decode load's independent check
(instruments/serving/bench_serving.py, stages/decode/decode_crosscheck.py), and a guard on what
the load itself costs per chunk."""

import gzip
import json
import sys
import time
import types
from pathlib import Path

import pandas as pd
import pytest
from helpers import ROOT
from studylib.instruments.serving import bench_serving as crosscheck
from studylib.instruments.serving.bench_serving import (
    bench_prompts,
    bench_serving_argv,
    bench_timeout_s,
    read_bench_result,
    run_bench_serving,
)
from studylib.instruments.serving.bench_steady import (
    bench_requests,
    bench_steady,
    bench_steady_span,
    first_wave_admitted,
)
from studylib.instruments.serving.decode_load import LoadSpec
from studylib.instruments.serving.load_stagger import (
    first_length,
    first_requests_ended,
    staggered_length,
)
from studylib.stages.decode import decode_crosscheck
from studylib.stages.decode.decode_crosscheck import ratios
from studylib.stages.decode.decode_noise import (
    crosscheck_sentence,
    engine_moved,
    noise_of,
    noise_table,
)
from studylib.stages.decode.decode_schema import CROSSCHECK_COLUMNS
from test_decode_load import load_against_standin


def test_prompts_are_whole_waves_lasting_about_the_window_and_at_least_two():
    # C = 1 at 1.44 ms per token: a request lasts 1.47 s, so 11 of them for 15 s.
    assert bench_prompts(1, 15, 1024, 1.44) == 11
    # C = 512 at 31 ms: one wave already lasts 32 s; two, so its start burst is not all.
    assert bench_prompts(512, 15, 1024, 31.0) == 2 * 512
    assert bench_prompts(16, 15, 1024, None) == 2 * 16  # no TPOT: two waves
    assert bench_prompts(1, 1e6, 1024, 0.01) == 64  # at most MAX_WAVES waves
    # Staggered, one wave more: the staggered first wave comes before the steady part.
    assert bench_prompts(1, 15, 1024, 1.44, staggered=True) == 12
    assert bench_prompts(512, 15, 1024, 31.0, staggered=True) == 3 * 512
    assert bench_prompts(16, 15, 1024, None, staggered=True) == 3 * 16
    assert (crosscheck.MIN_WAVES, crosscheck.MAX_WAVES) == (2, 64)


def test_the_timeout_allows_every_wave_twice_over():
    # Two waves of 1,024 tokens at 31 ms: 63.5 s expected, so 127 s and the start's margin.
    assert bench_timeout_s(1024, 512, 1024, 31.0) == pytest.approx(
        2 * 2 * 1024 * 0.031 + crosscheck.TIMEOUT_MARGIN_S
    )
    # No TPOT known: 100 ms per token.
    assert bench_timeout_s(32, 16, 100, None) == pytest.approx(40 + crosscheck.TIMEOUT_MARGIN_S)


def test_argv_asks_for_random_ids_of_the_study_lengths(tmp_path):
    argv = bench_serving_argv("py", "127.0.0.1", 30000, "/m", 64, 128, 1024, 128, 64,
                              tmp_path / "out.jsonl")  # fmt: skip
    assert argv[:2] == ["py", crosscheck.__file__]

    def value(flag):
        return argv[argv.index(flag) + 1]

    flags = ("--dataset-name", "--random-input-len", "--random-output-len",
             "--random-range-ratio", "--max-concurrency", "--num-prompts")  # fmt: skip
    assert [value(f) for f in flags] == ["random-ids", "128", "1024", "1.0", "64", "128"]
    assert "--tokenize-prompt" in argv and "--disable-ignore-eos" not in argv
    assert "--output-details" in argv  # the per-request arrays the steady TPOT reads
    assert value("--backend") == "sglang"  # SGLang's native /generate, token-id prompts


def test_the_openai_backend_posts_where_the_study_s_load_does(tmp_path):
    # At C = 1,024 FP8 the engine ran 11 % slower under the study's load (/v1/completions)
    # than under bench_serving's native one: sglang-oai posts to the study's endpoint. SGLang
    # 0.5.16 takes token-id prompts on its native backend only.
    argv = bench_serving_argv("py", "h", 1, "/m", 64, 128, 1024, 128, 64, tmp_path / "o.jsonl",
                              backend="sglang-oai")  # fmt: skip
    assert argv[argv.index("--backend") + 1] == "sglang-oai"
    assert "--tokenize-prompt" not in argv and "--output-details" in argv
    with pytest.raises(ValueError, match="one of sglang, sglang-oai"):
        bench_serving_argv("py", "h", 1, "/m", 64, 128, 1024, 128, 64, "o", backend="vllm")


def fake_bench_details(concurrency: int, requests: int, output_len: int,
                       first_lens: list[int] | None = None) -> dict:  # fmt: skip
    """bench_serving's --output-details of a fake engine (no clock: a step counter): C slots,
    each refilled at once by the next request; a step prefills one waiting request (100 ms,
    its first token) or else decodes one token of every running one (10 ms). Each step a
    microsecond longer than the last, so no two gaps are equal (bench_serving's float gaps).
    ``first_lens``: the first requests' output lengths (a staggered first wave)."""
    lens = [(first_lens or [])[i] if i < len(first_lens or []) else output_len
            for i in range(requests)]  # fmt: skip
    t, step, sent = 0.0, 0, 0
    waiting, running, times = [], [], {}
    while sent < min(concurrency, requests):
        waiting.append(sent)
        sent += 1
    while waiting or running:
        step += 1
        if waiting:
            t += 0.1 + 1e-6 * step
            index = waiting.pop(0)
            times[index] = [t]
            running.append(index)
            continue
        t += 0.01 + 1e-6 * step
        for index in list(running):
            times[index].append(t)
            if len(times[index]) == lens[index]:
                running.remove(index)
                if sent < requests:
                    waiting.append(sent)
                    sent += 1
    starts = {}  # as bench_serving would have started them: at a slot's free time
    free = [0.0] * concurrency
    for index in range(requests):
        free.sort()
        starts[index] = free.pop(0)
        free.append(times[index][-1])
    return {
        "ttfts": [times[i][0] - starts[i] for i in range(requests)],
        "itls": [[b - a for a, b in zip(times[i], times[i][1:], strict=False)]
                 for i in range(requests)],
        "output_lens": lens,
        "errors": [""] * requests,
    }  # fmt: skip


def bench_steady_tpot_ms(
    details: dict,
    concurrency: int,
    output_len: int,
    steady_s: float | None = None,
    staggered: bool = False,
) -> float | None:
    """bench_steady's TPOT alone (its run's end on the caller's clock does not move it)."""
    found = bench_steady(details, concurrency, output_len, 0.0, steady_s, staggered)
    return None if found is None else found["tpot_ms"]


def plain_median_tpot_ms(details: dict) -> float:
    """bench_serving's own median TPOT: (latency - TTFT) / (output tokens - 1) per request."""
    tpots = [sum(gaps) / (n - 1) for gaps, n in zip(details["itls"], details["output_lens"],
                                                    strict=True)]  # fmt: skip
    return 1e3 * float(pd.Series(tpots).median())


def test_steady_tpot_leaves_the_start_burst_out_as_the_studys_own_does():
    # Two waves of C = 4 requests of 50 tokens: each wave starts with 4 prefills of 100 ms, in
    # which the requests already streaming wait. bench_serving's median TPOT holds them.
    details = fake_bench_details(4, 8, 50)
    assert plain_median_tpot_ms(details) == pytest.approx(13.0, abs=0.2)
    # Over a window as long as the study's (0.3 s) after the first wave's admission: decode
    # steps only, 10 ms each, as the study's window at high C holds.
    assert bench_steady_tpot_ms(details, 4, 50, steady_s=0.3) == pytest.approx(10.0, abs=0.1)


def test_a_staggered_first_wave_is_left_out_as_the_studys_own_window_leaves_it():
    # C = 4, 40 tokens, first requests of 4/18/21/35 (the study's stagger): the requests then
    # end one after another and each replacement's prefill (100 ms) stalls decode alone.
    first = [staggered_length(40, 4, i) for i in range(4)]
    assert first == [4, 18, 21, 35]
    assert first == [first_length(LoadSpec(concurrency=4, input_len=1, output_len=40,
                                           duration_s=1.0, stagger=True), i)
                     for i in range(4)]  # fmt: skip
    details = fake_bench_details(4, 12, 40, first)
    records, _ = bench_requests(details, 4)
    ended = first_requests_ended(records, 4)
    assert ended == pytest.approx(max(r.end for r in records[:4]))
    assert ended > first_wave_admitted(records, 4) + 0.3  # the first wave lasts 40 steps
    steady = bench_steady_tpot_ms(details, 4, 40, steady_s=1.0, staggered=True)
    # In the steady part a client's request ends every 10 steps, and its replacement's
    # prefill (100 ms) stalls the others alone: a request's 39 gaps of 10 ms hold the other
    # three clients' prefills, 17.7 ms per token, not the 10 of a lockstep wave's middle.
    assert steady == pytest.approx((39 * 10 + 3 * 100) / 39, rel=0.02)
    assert bench_steady_tpot_ms(details, 4, 40, steady_s=1.0) < steady
    # Not every first request ended (a run cut short): no staggered window.
    short = {k: v[:3] for k, v in details.items()}
    assert first_requests_ended(bench_requests(short, 4)[0], 4) is None
    assert bench_steady_tpot_ms(short, 4, 40, staggered=True) is None


def pass_with_bench(tmp_path, monkeypatch, fake_run, stagger: bool):
    """A server pass of the decode stage, as crosscheck_at reads it, whose bench_serving runs
    are ``fake_run`` (the drain and the server's log stubbed)."""
    monkeypatch.setattr(decode_crosscheck, "run_bench_serving", fake_run)
    monkeypatch.setattr(decode_crosscheck, "drain_server", lambda pas: None)
    monkeypatch.setattr(decode_crosscheck, "server_window_of",
                        lambda *a: {"server_tok_s_median": None})  # fmt: skip
    plan = {"engine": "sglang", "model": "/m", "input_len": 128, "output_len": 1024,
            "min_steady_s": 30, "stagger": stagger}  # fmt: skip
    server = types.SimpleNamespace(alive=lambda: True, log_path=tmp_path / "server.log")
    return types.SimpleNamespace(plan=plan, server=server, host="127.0.0.1", port=30000)


def test_the_cross_check_staggers_bench_serving_as_the_load_was(tmp_path, monkeypatch):
    seen = {}

    def fake_run(argv, result_file, timeout_s, log_path):
        seen["argv"] = argv
        return {"t0": 0.0, "t1": 1.0, "details": {}, "bench_tpot_ms": 20.0, "bench_error": ""}

    row = {"tpot_ms": 20.0, "steady_s": 12.0}
    pas = pass_with_bench(tmp_path, monkeypatch, fake_run, stagger=True)
    out = decode_crosscheck.crosscheck_at(pas, 4, row, tmp_path)
    argv = seen["argv"]
    at = argv.index(crosscheck.FIRST_LENS_FLAG)
    assert argv[at + 1] == "98,452,549,903" and out["bench_staggered"] is True
    assert out["bench_prompts"] == 3 * 4  # two waves for the window, the staggered one first
    # Lockstep: no lengths, no extra wave.
    pas = pass_with_bench(tmp_path, monkeypatch, fake_run, stagger=False)
    out = decode_crosscheck.crosscheck_at(pas, 4, row, tmp_path)
    assert crosscheck.FIRST_LENS_FLAG not in seen["argv"]
    assert out["bench_staggered"] is False and out["bench_prompts"] == 2 * 4
    assert seen["argv"][seen["argv"].index("--backend") + 1] == "sglang"
    # The plan's backend (decode.crosscheck_backend) is the one bench_serving runs with.
    pas.plan["crosscheck_backend"] = "sglang-oai"
    decode_crosscheck.crosscheck_at(pas, 4, row, tmp_path)
    assert seen["argv"][seen["argv"].index("--backend") + 1] == "sglang-oai"


def test_the_engine_is_compared_over_the_span_each_tpot_covers(tmp_path, monkeypatch):
    # bench_serving's steady TPOT covers one window of its run; the scheduler's rate beside
    # it is read over that window (put on the job's clock by the run's end), as well as over
    # the whole run.
    details = fake_bench_details(4, 12, 50)

    def fake_run(argv, result_file, timeout_s, log_path):
        return {"t0": 90.0, "t1": 100.0, "details": details, "bench_tpot_ms": 13.0,
                "bench_error": ""}  # fmt: skip

    pas = pass_with_bench(tmp_path, monkeypatch, fake_run, stagger=False)
    asked = []

    def fake_window(log_path, t0, t1, min_running=0, max_running=None):
        asked.append((t0, t1))
        # The engine ran at 60 tok/s over the whole run, at 94 over the steady window.
        return {"server_tok_s_median": 60.0 if (t0, t1) == (90.0, 100.0) else 94.0}

    monkeypatch.setattr(decode_crosscheck, "server_window_of", fake_window)
    row = {"tpot_ms": 10.0, "steady_s": 0.3, "server_tok_s_median": 100.0}
    out = decode_crosscheck.crosscheck_at(pas, 4, row, tmp_path)
    records, w0, w1 = bench_steady_span(details, 4, 0.3)
    last = max(r.end for r in records)
    found = bench_steady(details, 4, 50, 100.0, 0.3)
    assert found["tpot_ms"] == bench_steady_tpot_ms(details, 4, 50, 0.3)
    steady = found["span"]
    assert steady == pytest.approx((100.0 - last + w0, 100.0 - last + w1))
    assert w1 - w0 == pytest.approx(0.3) and 90.0 < steady[0] < steady[1] < 100.0
    assert sorted(asked) == sorted([steady, (90.0, 100.0)])
    assert out["bench_server_tok_s_steady"] == 94.0 and out["bench_server_tok_s_median"] == 60.0
    assert out["engine_ratio_steady"] == pytest.approx(0.94)
    assert out["engine_ratio"] == pytest.approx(0.60)
    # Without details there is no steady window, and no rate over it.
    assert bench_steady({}, 4, 50, 100.0) is None


def test_a_run_the_shared_runner_left_unanswered_runs_again_on_its_own(tmp_path, monkeypatch):
    # The job's runner answers for its runs; where it ended without answering (not a
    # bench_serving exit of its own), the run goes again in a process of its own.
    ran = []

    def fake_run(argv, result_file, timeout_s, log_path):
        ran.append("own process")
        return {"t0": 0.0, "t1": 1.0, "details": {}, "bench_tpot_ms": 20.0, "bench_error": ""}

    class Runner:
        def __init__(self, died):
            self.died = died

        def run(self, argv, result_file, timeout_s):
            ran.append("runner")
            error = "bench_serving exit 1: Segmentation fault" if self.died else ""
            return {"t0": 0.0, "t1": 1.0, "details": {}, "bench_tpot_ms": 21.0,
                    "bench_error": error, "runner_died": self.died}  # fmt: skip

    pas = pass_with_bench(tmp_path, monkeypatch, fake_run, stagger=False)
    row = {"tpot_ms": 20.0, "steady_s": 12.0}
    out = decode_crosscheck.crosscheck_at(pas, 4, row, tmp_path, Runner(died=False))
    assert ran == ["runner"] and out["bench_tpot_ms"] == 21.0 and "runner_died" not in out
    ran.clear()
    out = decode_crosscheck.crosscheck_at(pas, 4, row, tmp_path, Runner(died=True))
    assert ran == ["runner", "own process"] and out["bench_tpot_ms"] == 20.0
    assert out["bench_error"] == ""


def test_the_runner_gives_bench_serving_the_first_output_lengths(monkeypatch):
    argv = bench_serving_argv("py", "h", 1, "/m", 3, 128, 1024, 9, 3, "out.jsonl", [341, 683, 1024])
    rest, lengths = crosscheck.split_first_lens(argv[2:])
    assert lengths == [341, 683, 1024] and crosscheck.FIRST_LENS_FLAG not in rest
    assert rest[:2] == ["--backend", "sglang"]
    assert crosscheck.split_first_lens(["--backend", "sglang"]) == (["--backend", "sglang"], [])
    for bad, why in ((["--study-first-output-lens"], "needs comma-separated"),
                     (["--study-first-output-lens", "1,x"], "not whole numbers"),
                     (["--study-first-output-lens", "0,5"], "below 1")):  # fmt: skip
        with pytest.raises(SystemExit, match=why):
            crosscheck.split_first_lens(bad)

    def rows_of(n):
        return [types.SimpleNamespace(output_len=1024) for _ in range(n)]

    got = crosscheck.with_first_lengths(lambda *a, **k: rows_of(5), [341, 683, 1024])(None)
    assert [r.output_len for r in got] == [341, 683, 1024, 1024, 1024]
    with pytest.raises(ValueError, match="2 prompts for 3 staggered"):
        crosscheck.with_first_lengths(lambda *a, **k: rows_of(2), [1, 2, 3])()
    # Run as bench_serving's runner: its module's get_dataset is the one patched.
    seen = {}
    module = types.SimpleNamespace(get_dataset=lambda *a, **k: rows_of(4))
    module.cli_main = lambda: seen.update(argv=list(sys.argv),
                                          rows=module.get_dataset())  # fmt: skip
    monkeypatch.setattr(crosscheck.importlib, "import_module", lambda name: module)
    monkeypatch.setattr(sys, "path", list(sys.path))
    crosscheck.main(["--backend", "sglang", crosscheck.FIRST_LENS_FLAG, "5,10"])
    assert seen["argv"] == ["sglang.benchmark.serving", "--backend", "sglang"]
    assert [r.output_len for r in seen["rows"]] == [5, 10, 1024, 1024]


def test_a_straggler_of_the_first_wave_does_not_hold_the_window_back():
    # At C = 512 on the H200 (2026-12-02) one request of bench_serving's first wave got its
    # first token 35 s late, as the wave ended: waiting for it put the window into the second
    # wave's start burst (35.06 ms against the study's 32.90). bench_serving's own results:
    path = ROOT / "examples/h200-2026-12-02-paired/decode/sglang-bf16-graphs/crosscheck"
    details = json.loads(gzip.open(path / "bench_c512.jsonl.gz", "rt").read().splitlines()[-1])
    records, _ = bench_requests(details, 512)
    first_tokens = sorted(r.first_token for r in records[:512])
    assert first_tokens[-1] > 30 and first_tokens[-2] < 3  # one straggler
    assert first_wave_admitted(records, 512) < 3
    assert bench_steady_tpot_ms(details, 512, 1024, steady_s=15.0) == pytest.approx(33.01, abs=0.05)


def test_requests_are_rebuilt_on_one_clock_from_the_slots():
    details = fake_bench_details(2, 4, 5)
    records, active = bench_requests(details, 2)
    # The first wave starts at 0; the next requests as a slot frees, at its last token.
    assert [r.start for r in records[:2]] == [0.0, 0.0]
    assert records[2].start == pytest.approx(records[0].end)
    assert all(len(r.token_times) == 5 for r in records)
    # Both slots in flight until the last request of each ends.
    assert [n for _, n in active] == [2, 1, 0]
    # A chunk of two tokens (bench_serving halves its gap over them): both at the chunk.
    one = {"ttfts": [0.1], "itls": [[0.02, 0.005, 0.005]], "output_lens": [4], "errors": [""]}
    (record,), _ = bench_requests(one, 1)
    assert record.token_times == pytest.approx([0.1, 0.12, 0.13, 0.13])


def per_chunk_details(details: dict, tokens_per_chunk: int) -> dict:
    """The same requests as bench_serving's OpenAI backend records them: the first token
    alone, then one gap per chunk of ``tokens_per_chunk`` tokens (SGLang's --stream-interval),
    the run's ``backend`` saying so."""
    itls = [[sum(gaps[i:i + tokens_per_chunk]) for i in range(0, len(gaps), tokens_per_chunk)]
            for gaps in details["itls"]]  # fmt: skip
    return {**details, "itls": itls, "backend": "sglang-oai"}


def test_gaps_one_per_chunk_are_spread_over_the_chunk_s_tokens():
    # bench_serving's OpenAI backend appends one gap per streamed chunk: with SGLang's
    # --stream-interval 8 its median ITL on an H100 (C = 1,024, FP8) was 185 ms against a TPOT
    # of 27 ms, and read as one token a gap, its steady TPOT 236 ms (the first chunk credited
    # with every token the gaps did not account for).
    details = fake_bench_details(4, 12, 200)
    chunked = per_chunk_details(details, 8)
    per_token = bench_steady_tpot_ms(details, 4, 200, steady_s=1.0)
    assert per_token == pytest.approx(10.0, abs=0.1)
    as_tokens = bench_steady({**chunked, "backend": "sglang"}, 4, 200, 0.0, 1.0)["tpot_ms"]
    assert as_tokens > 2 * per_token
    as_chunks = bench_steady(chunked, 4, 200, 0.0, 1.0)["tpot_ms"]
    assert as_chunks == pytest.approx(per_token, rel=0.03)
    (record,), _ = bench_requests({"ttfts": [0.1], "itls": [[0.08, 0.05]], "output_lens": [14],
                                   "errors": [""], "backend": "sglang-oai"}, 1)  # fmt: skip
    # The first token alone, then 13 spread over the two chunks: 6 and 7, each at its chunk.
    assert record.token_times == pytest.approx([0.1] + [0.18] * 6 + [0.23] * 7)


def test_the_openai_backend_s_row_reads_its_gaps_per_chunk(tmp_path, monkeypatch):
    # Through the cross-check's own run: with decode.crosscheck_backend sglang-oai, the steady
    # TPOT is the chunks' (not 2x off) and no per-chunk ITL stands beside the study's. The
    # fake run writes a result line as bench_serving does (its backend, its chunks' gaps, a
    # median ITL of 80 ms) and reads it back as a real run would.
    chunked = per_chunk_details(fake_bench_details(4, 12, 200), 8)

    def fake_run(argv, result_file, timeout_s, log_path):
        line = {**chunked, "backend": argv[argv.index("--backend") + 1],
                "median_tpot_ms": 12.0, "median_itl_ms": 80.0}  # fmt: skip
        Path(result_file).write_text(json.dumps(line) + "\n")
        return crosscheck._run_result(0, 0.0, 10.0, Path(result_file), timeout_s, log_path)

    monkeypatch.setattr(decode_crosscheck, "server_window_of",
                        lambda *a, **k: {"server_tok_s_median": 100.0})  # fmt: skip
    pas = pass_with_bench(tmp_path, monkeypatch, fake_run, stagger=False)
    row = {"tpot_ms": 10.0, "steady_s": 1.0, "server_tok_s_median": 100.0}
    native = decode_crosscheck.crosscheck_at(pas, 4, row, tmp_path)
    assert native["bench_itl_ms"] == 80.0 and native["bench_tpot_steady_ms"] > 20.0
    assert native["bench_backend"] == "sglang" and "/v1" not in crosscheck_sentence(native)
    pas.plan["crosscheck_backend"] = "sglang-oai"
    oai = decode_crosscheck.crosscheck_at(pas, 4, row, tmp_path)
    assert oai["bench_tpot_steady_ms"] == pytest.approx(10.0, rel=0.03)
    assert oai["bench_itl_ms"] is None and pd.isna(oai["itl_ratio"])
    # The row and its sentence say which endpoint bench_serving's requests went to.
    assert oai["bench_backend"] == "sglang-oai"
    assert "(its requests on /v1/completions)" in crosscheck_sentence(oai)


def test_a_failed_request_or_missing_details_give_no_steady_tpot_from_them():
    assert bench_steady_tpot_ms({}, 4, 50) is None  # a result line without --output-details
    details = fake_bench_details(2, 4, 20)
    details["ttfts"][3], details["itls"][3] = 0.0, []
    details["errors"][3] = "connection reset"
    records, _ = bench_requests(details, 2)
    assert records[3].error and records[3].first_token is None
    assert bench_steady_tpot_ms(details, 2, 20) == pytest.approx(10.0, abs=0.5)


def test_a_run_gives_its_numbers_or_one_error(tmp_path):
    out = tmp_path / "out.jsonl"
    result = {"median_tpot_ms": 1.44, "output_throughput": 678.5, "median_ttft_ms": 24.7,
              "median_itl_ms": 1.42, "completed": 10, "duration": 15.1}  # fmt: skip
    write = f"import json; open({str(out)!r}, 'a').write(json.dumps({result!r}) + '\\n')"
    got = run_bench_serving([sys.executable, "-c", write], out, 30, tmp_path / "log")
    assert got["bench_tpot_ms"] == 1.44 and got["bench_itl_ms"] == 1.42
    assert got["bench_error"] == "" and got["t1"] >= got["t0"]
    assert got["details"] == {}  # a result line without --output-details
    # With them: the per-request timings come back, the generated texts leave the file.
    result |= {"ttfts": [0.02], "itls": [[0.0014]], "generated_texts": ["many tokens"]}
    write = f"import json; open({str(out)!r}, 'a').write(json.dumps({result!r}) + '\\n')"
    got = run_bench_serving([sys.executable, "-c", write], out, 30, tmp_path / "log")
    assert got["details"] == {"ttfts": [0.02], "itls": [[0.0014]]}
    assert "generated_texts" not in read_bench_result(out) and "itls" in read_bench_result(out)
    fail = [sys.executable, "-c", "import sys; print('no server at 127.0.0.1:1'); sys.exit(3)"]
    got = run_bench_serving(fail, out, 30, tmp_path / "log")
    assert got["bench_error"] == "bench_serving exit 3: no server at 127.0.0.1:1"
    slow = [sys.executable, "-c", "import time; time.sleep(30)"]
    got = run_bench_serving(slow, out, 0.5, tmp_path / "log")
    assert got["bench_error"].startswith("bench_serving timed out after 0 s")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="wrote no result"):
        read_bench_result(tmp_path / "empty.jsonl")


def test_ratios_name_what_differs():
    row = {"tpot_ms": 1.516, "bench_tpot_ms": 1.437, "bench_itl_ms": 1.422,
           "server_tok_s_median": 663.3, "bench_server_tok_s_median": 701.9,
           "output_tok_s": 630.9, "bench_output_tok_s": 678.5}  # fmt: skip
    got = ratios(row)
    assert got["tpot_ratio"] == pytest.approx(1.055, abs=1e-3)
    assert got["tpot_ratio_steady"] is None  # no steady TPOT recorded
    assert ratios({**row, "bench_tpot_steady_ms": 1.5})["tpot_ratio_steady"] == pytest.approx(
        1.516 / 1.5
    )
    # The scheduler itself ran 5.8 % faster during bench_serving: the engine's own speed.
    assert got["engine_ratio"] == pytest.approx(1.058, abs=1e-3)
    assert ratios({"tpot_ms": 1.0})["tpot_ratio"] is None
    assert set(got) <= set(CROSSCHECK_COLUMNS)


def test_the_verdict_says_when_the_engine_moved_not_the_load():
    # bf16 graphs at C = 1 on the H200: 5.5 % apart, the scheduler itself 5.8 % faster.
    c1 = {"concurrency": 1, "tpot_ratio": 1.055, "engine_ratio": 1.058}
    assert engine_moved(c1)
    assert crosscheck_sentence(c1) == (
        "At C = 1 the study's TPOT is 1.055× bench_serving's TPOT, about the engine's own "
        "change of speed between the two runs (its scheduler 1.058× as fast during "
        "bench_serving): the engine itself ran at another speed.")  # fmt: skip
    # The steady ratio judges where recorded: 0.960 plain, 1.004 like for like.
    c512 = {"concurrency": 512, "tpot_ratio": 0.960, "tpot_ratio_steady": 1.004,
            "engine_ratio": 0.999}  # fmt: skip
    assert not engine_moved(c512)
    assert "1.004× bench_serving's steady TPOT: the two clients agree within the 3.0 % noise" in (
        crosscheck_sentence(c512)
    )
    # Apart beyond the noise, and the engine moved the other way: the load, not the engine.
    apart = {"concurrency": 16, "tpot_ratio_steady": 0.92, "engine_ratio": 1.259}
    assert not engine_moved(apart)
    assert "beyond the 3.0 % noise and not by the engine's change of speed" in (
        crosscheck_sentence(apart)
    )
    # Apart, the engine faster during bench_serving by more than the noise but not by the
    # whole gap: it accounts for part of it, and the rest is said.
    part = {"concurrency": 16, "tpot_ratio_steady": 1.25, "engine_ratio_steady": 1.10}
    assert not engine_moved(part)
    assert crosscheck_sentence(part).endswith(
        "beyond the 3.0 % noise (its scheduler 1.100× as fast during bench_serving); over the "
        "engine's own change of speed, 1.136×, still beyond it: the engine itself ran at other "
        "speeds under the two clients, and over its speed the two clients still differ."
    )
    # bf16 without graphs at C = 16 on the H200 (session 21): the engine fell from about 1.5k
    # to 1.0k tok/s for 30 s, from 7 s before the study's window ended into bench_serving's
    # run. Over that whole run the scheduler read 0.771x, over bench_serving's steady window
    # (the span its steady TPOT covers) 0.941x: the engine's own speed, not the client.
    c16 = {"concurrency": 16, "tpot_ratio": 0.802, "tpot_ratio_steady": 0.948,
           "engine_ratio": 0.771, "engine_ratio_steady": 0.941}  # fmt: skip
    assert engine_moved(c16)
    assert "its scheduler 0.941× as fast during bench_serving" in crosscheck_sentence(c16)
    assert not engine_moved({**c16, "engine_ratio_steady": None})  # whole-run rate alone
    # bf16 graphs at C = 512 by the plain median: 4.0 % apart, the scheduler 2.7 % slower:
    # within the noise itself, so it explains nothing (the wave's start burst did it).
    assert not engine_moved({"concurrency": 512, "tpot_ratio": 0.960, "engine_ratio": 0.973})
    # No scheduler rate: nothing said of the engine.
    assert not engine_moved({"concurrency": 1, "tpot_ratio": 1.055})


def test_the_noise_names_the_engine_where_it_moved():
    decode = pd.DataFrame(
        [
            {
                "engine": "sglang",
                "variant": "bf16",
                "concurrency": c,
                "output_tok_s": 100.0,
                "server_tok_s": 100.0,
            }
            for c in (1, 512)
        ]
    )
    check = pd.DataFrame([{"engine": "sglang", "variant": "bf16", "concurrency": 1,
                           "tpot_ratio": 1.055, "engine_ratio": 1.058, "bench_error": ""},
                          {"engine": "sglang", "variant": "bf16", "concurrency": 512,
                           "tpot_ratio": 0.960, "tpot_ratio_steady": 0.995,
                           "engine_ratio": 0.973, "bench_error": ""}])  # fmt: skip
    noise = noise_table(decode, check)
    at1 = noise_of(noise, "bf16", 1)
    assert at1.share == pytest.approx(0.055)
    assert at1.source == ("bench_serving's TPOT at C = 1: the engine itself ran at another "
                          "speed (scheduler 1.058× during bench_serving)")  # fmt: skip
    # C = 512: the steady ratio (0.5 %) is within the floor, so the floor is the noise.
    assert noise_of(noise, "bf16", 512).share == pytest.approx(0.03)


def test_runner_stands_in_for_a_missing_datasets(monkeypatch):
    seen = {}

    def cli_main():
        seen["argv"] = list(sys.argv)
        with pytest.raises(RuntimeError, match="random-ids dataset only"):
            sys.modules["datasets"].load_dataset("MMMU/MMMU")

    monkeypatch.setattr(crosscheck.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(crosscheck.importlib, "import_module",
                        lambda name: types.SimpleNamespace(cli_main=cli_main))  # fmt: skip
    monkeypatch.delitem(sys.modules, "datasets", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    crosscheck.main(["--backend", "sglang"])
    assert seen["argv"] == ["sglang.benchmark.serving", "--backend", "sglang"]


def _reference_cost_per_chunk(chunk: bytes, repeats: int = 20000) -> float:
    """CPU seconds of the least any client does per chunk: decode, strip, parse (the best
    of three rounds: a round another process interrupted reads high)."""
    best = None
    for _ in range(3):
        t0 = time.thread_time()
        for _ in range(repeats):
            line = chunk.decode("utf-8").strip()
            json.loads(line[5:])
        cost = (time.thread_time() - t0) / repeats
        best = cost if best is None else min(best, cost)
    return best


def test_the_loads_own_cost_per_chunk_stays_bounded(tmp_path):
    # The regression guard of the decode load: against the stand-in streaming as fast as it
    # can (no delay per token), the load's CPU per chunk over the bare parse of such a
    # chunk, both measured in this run (a ratio: the machine's speed cancels). Measured
    # 2026-12-02 on the 2-core EPYC, shared with other jobs: 6.7-12.2 (23-25 us per chunk
    # against 2.0-3.4 us); a client that does twice its work per chunk comes near the bound.
    # The least of up to three loads: one read 28.7x (78.8 us per chunk) beside a second test
    # run (the stand-in then streams smaller bursts); a costlier client reads high in all.
    spec = LoadSpec(concurrency=16, duration_s=1.5, input_len=4, output_len=64,
                    vocab_size=500, timeout_s=60)  # fmt: skip
    chunk = (b'data: {"choices": [{"text": "x", "index": 0, "finish_reason": null}], '
             b'"usage": {"completion_tokens": 17}}\n')  # fmt: skip
    ratios = []
    for attempt in range(3):
        (folder := tmp_path / str(attempt)).mkdir()
        load = load_against_standin(folder, spec, "--token-delay", "0")
        chunks = sum(len(r.chunks()) for r in load.records)
        assert not any(r.error for r in load.records) and chunks > 1000, chunks
        per_chunk = load.cpu_s / chunks
        ratios.append((per_chunk / _reference_cost_per_chunk(chunk), per_chunk))
        if ratios[-1][0] < LOAD_COST_BOUND:
            break
    ratio, per_chunk = min(ratios)
    assert ratio < LOAD_COST_BOUND, f"{per_chunk * 1e6:.1f} us per chunk: {ratio:.1f}x a parse"


#: The load's CPU per chunk, at most this many times a bare parse of one.
LOAD_COST_BOUND = 25
