"""SGLang's bench_serving as the decode load's independent check
(instruments/serving/bench_serving.py, stages/decode/decode_crosscheck.py), and a guard on what
the load itself costs per chunk."""

import json
import sys
import time
import types

import pytest
from studylib.instruments.serving import bench_serving as crosscheck
from studylib.instruments.serving.bench_serving import (
    bench_prompts,
    bench_serving_argv,
    read_bench_result,
    run_bench_serving,
)
from studylib.instruments.serving.decode_load import LoadSpec
from studylib.stages.decode.decode_crosscheck import ratios
from studylib.stages.decode.decode_schema import CROSSCHECK_COLUMNS
from test_decode_load import load_against_standin


def test_prompts_are_whole_waves_lasting_about_the_window():
    # C = 1 at 1.44 ms per token: a request lasts 1.47 s, so 11 of them for 15 s.
    assert bench_prompts(1, 15, 1024, 1.44) == 11
    # C = 512 at 31 ms: one wave already lasts 32 s.
    assert bench_prompts(512, 15, 1024, 31.0) == 512
    assert bench_prompts(16, 15, 1024, None) == 16  # no TPOT: one wave
    assert bench_prompts(1, 1e6, 1024, 0.01) == 64  # at most MAX_WAVES waves
    assert crosscheck.MAX_WAVES == 64


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


def test_a_run_gives_its_numbers_or_one_error(tmp_path):
    out = tmp_path / "out.jsonl"
    result = {"median_tpot_ms": 1.44, "output_throughput": 678.5, "median_ttft_ms": 24.7,
              "median_itl_ms": 1.42, "completed": 10, "duration": 15.1}  # fmt: skip
    write = f"import json; open({str(out)!r}, 'a').write(json.dumps({result!r}) + '\\n')"
    got = run_bench_serving([sys.executable, "-c", write], out, 30, tmp_path / "log")
    assert got["bench_tpot_ms"] == 1.44 and got["bench_itl_ms"] == 1.42
    assert got["bench_error"] == "" and got["t1"] >= got["t0"]
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
    # The scheduler itself ran 5.8 % faster during bench_serving: the engine, not the load.
    assert got["engine_ratio"] == pytest.approx(1.058, abs=1e-3)
    assert ratios({"tpot_ms": 1.0})["tpot_ratio"] is None
    assert set(got) <= set(CROSSCHECK_COLUMNS)


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
    spec = LoadSpec(concurrency=16, duration_s=1.5, input_len=4, output_len=64,
                    vocab_size=500, timeout_s=60)  # fmt: skip
    load = load_against_standin(tmp_path, spec, "--token-delay", "0")
    assert not any(r.error for r in load.records)
    chunks = sum(len(r.chunks()) for r in load.records)
    chunk = (b'data: {"choices": [{"text": "x", "index": 0, "finish_reason": null}], '
             b'"usage": {"completion_tokens": 17}}\n')  # fmt: skip
    per_chunk = load.cpu_s / chunks
    ratio = per_chunk / _reference_cost_per_chunk(chunk)
    assert chunks > 1000, chunks
    assert ratio < LOAD_COST_BOUND, f"{per_chunk * 1e6:.1f} us per chunk: {ratio:.1f}x a parse"


#: The load's CPU per chunk, at most this many times a bare parse of one.
LOAD_COST_BOUND = 25
