"""The main pass's levels as one load's carried levels (decode.carried_levels, issue 34)."""

import json

import pandas as pd
from studylib.stages.decode.decode_run import run_decode
from studylib.stages.decode.decode_server import carried_levels
from test_decode_run import _standin_sglang
from test_serving import free_port


def _plan(*args: str, **extra) -> dict:
    return {
        "engine": "sglang", "variant": "carried", "model": "standin", "model_kind": "dummy",
        "args": ["--token-delay", "0.002", *args], "host": "127.0.0.1", "port": free_port(),
        "concurrency": [1, 4, 8], "input_len": 8, "output_len": 24, "min_steady_s": 0.4,
        "idle_s": 0.1, "ready_timeout_s": 30, "sample_hz": 20, "vocab_size": 1000,
        "weights": "bf16", "stagger": True, "warmup_s": 0.2, "warmup_later_s": 0,
        "carried_levels": True, **extra,
    }  # fmt: skip


def test_the_levels_run_from_the_highest_down_as_one_load(tmp_path, monkeypatch):
    # The stand-in holds a cancelled request 0.3 s more, as SGLang does until it notices the
    # closed connection: each carried window starts once the server holds only its own.
    _standin_sglang(monkeypatch)
    summary = run_decode(_plan("--linger-cancelled", "0.3"), tmp_path / "out")
    assert summary["concurrency"].tolist() == [1, 4, 8]  # the plan's order
    assert summary["load"].tolist() == ["carried", "carried", "staggered"]
    assert summary["valid"].all() and (summary["errors"] == 0).all()
    assert (summary["wrong_length"] == 0).all() and (summary["steady_s"] >= 0.4).all()
    out = tmp_path / "out"
    run = json.loads((out / "run.json").read_text())
    assert run["load"]["carried"] is True
    # One load: each request listed once, under the level it started in, and each level's
    # requests sent by the clients the step down kept, a subset of the level's before.
    requests = pd.read_parquet(out / "requests.parquet")
    assert requests["index"].is_unique and set(requests["concurrency"]) == {1, 4, 8}
    assert requests["start"].is_monotonic_increasing
    firsts = requests.groupby("concurrency")["start"].min()
    assert firsts[8] < firsts[4] < firsts[1]  # highest first
    clients = requests.groupby("concurrency")["client"].agg(set)
    assert clients[8] == set(range(8))
    assert clients[1] <= clients[4] < clients[8] and len(clients[4]) <= 4
    assert len(clients[1]) == 1


def test_a_load_that_fails_leaves_rows_saying_where_it_stopped(tmp_path, monkeypatch):
    # The server dies after 10 requests: inside the first level's staggered warm-up (8 first
    # requests, their replacements), so no later level is reached.
    _standin_sglang(monkeypatch)
    summary = run_decode(_plan("--crash-after-requests", "10"), tmp_path / "out")
    assert not summary["valid"].any()
    rows = summary.set_index("concurrency")
    for c in (4, 1):
        assert rows.loc[c, "first_error"].startswith(f"the carried load ended before C = {c}: ")


def test_a_cross_checked_pass_runs_each_level_alone():
    assert carried_levels({"carried_levels": False}, {"enabled": False}) is False
    assert carried_levels({"carried_levels": True}, {"enabled": False}) is True
    why = carried_levels({"carried_levels": True}, None)  # the cross-check runs
    assert why.startswith("not carried: the cross-check runs bench_serving")
