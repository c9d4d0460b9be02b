"""The decode load generator against the stand-in server."""

import pytest
from studylib.serving.load import (
    LoadSpec,
    random_prompts,
    run_load,
    steady_window,
    summarize_load,
)
from test_serving import standin


def test_prompts_are_random_reproducible_and_sized():
    spec = LoadSpec(concurrency=2, num_prompts=5, input_len=7, output_len=3, vocab_size=1000)
    a, b = random_prompts(spec), random_prompts(spec)
    assert a == b and len(a) == 5 and all(len(p) == 7 for p in a)
    assert len({tuple(p) for p in a}) == 5
    assert all(100 <= t < 1000 for p in a for t in p)


def test_steady_window():
    active = [(0, 0), (1, 4), (2, 8), (3, 10), (8, 7), (9, 10), (10, 3), (11, 0)]
    assert steady_window(active, 10) == (3, 8)  # 8.5 needed: 10 from t=3 until 7 at t=8
    assert steady_window([(0, 0), (1, 1)], 10) is None


def test_load_against_standin(tmp_path):
    server, port = standin(tmp_path, "--token-delay", "0.005")
    spec = LoadSpec(concurrency=4, num_prompts=16, input_len=8, output_len=20, vocab_size=500)
    with server:
        server.wait_ready()
        records, active = run_load(f"http://127.0.0.1:{port}", "standin", spec,
                                   {"ignore_eos": True})  # fmt: skip
    assert len(records) == 16 and not any(r.error for r in records)
    assert all(r.completion_tokens == 20 and len(r.token_times) == 20 for r in records)
    assert max(count for _, count in active) == 4
    window = steady_window(active, 4)
    assert window is not None
    summary = summarize_load(records, spec, *window)
    assert summary["wrong_length"] == 0 and summary["errors"] == 0
    assert summary["itl_p50_ms"] == pytest.approx(5, rel=0.8)
    assert summary["output_tok_s"] > 0 and summary["ttft_p50_ms"] > 0


def test_eos_not_ignored_is_detected(tmp_path):
    server, port = standin(tmp_path, "--eos-after", "3")
    spec = LoadSpec(concurrency=2, num_prompts=4, input_len=4, output_len=10, vocab_size=500)
    with server:
        server.wait_ready()
        records, active = run_load(f"http://127.0.0.1:{port}", "standin", spec, {})
    summary = summarize_load(records, spec, records[0].start, records[-1].end)
    assert summary["wrong_length"] == 4  # stopped at EOS: 3 tokens, not 10


def test_server_crash_during_load_is_recorded(tmp_path):
    server, port = standin(tmp_path, "--crash-after-requests", "3")
    spec = LoadSpec(concurrency=2, num_prompts=8, input_len=4, output_len=5, vocab_size=500,
                    timeout_s=5)  # fmt: skip
    with server:
        server.wait_ready()
        records, _ = run_load(f"http://127.0.0.1:{port}", "standin", spec, {"ignore_eos": True})
    assert len(records) == 8
    assert sum(1 for r in records if r.error) >= 5
