"""Decode power end to end on the CPU: transformers serve, a local MoE, load, windows."""

import json
import sys

import pandas as pd
import pytest

pytest.importorskip("transformers")
pytest.importorskip("fastapi")

from studylib.serving.decode import SUMMARY_COLUMNS, run_decode  # noqa: E402
from studylib.serving.model import build_moe_model  # noqa: E402
from test_model import TINY  # noqa: E402
from test_serving import STANDIN, free_port  # noqa: E402


def test_transformers_decode_on_cpu(tmp_path, monkeypatch):
    build_moe_model(tmp_path / "model", TINY, seed=0, dtype="float32")
    plan = {
        "engine": "transformers", "variant": "cpu", "model": str(tmp_path / "model"),
        "args": ["--device", "cpu"], "host": "127.0.0.1", "port": free_port(),
        "concurrency": [1, 2], "input_len": 8, "output_len": 8, "prompts_per_concurrency": 3,
        "min_steady_s": 0.05, "idle_s": 0.2, "warmup_requests": 1, "ready_timeout_s": 120,
        "vocab_size": TINY["vocab_size"],
    }  # fmt: skip
    summary = run_decode(plan, tmp_path / "out")
    assert list(summary.columns) == SUMMARY_COLUMNS
    assert summary["concurrency"].tolist() == [1, 2]
    assert (summary["errors"] == 0).all() and (summary["wrong_length"] == 0).all()
    assert (summary["output_tok_s"] > 0).all() and summary["valid"].all()
    assert (summary["power_source"] == "none").all()
    assert summary["avg_w_total"].isna().all()  # no NVML here: no watts, none invented
    requests = pd.read_parquet(tmp_path / "out" / "requests.parquet")
    assert len(requests) == 3 + 6 and (requests["completion_tokens"] == 8).all()
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["teardown"]["left_behind"] is False and run["ready_s"] > 0
    assert "Uvicorn running" in (tmp_path / "out" / "server.log").read_text()


def test_sglang_contract_with_expert_distribution(tmp_path, monkeypatch):
    # The stand-in answers SGLang's contract; run it through the sglang engine's argv prefix.
    import studylib.serving.decode as decode

    real = decode.get_engine("sglang")
    standin = real.__class__(**{**real.__dict__, "launch": (sys.executable, STANDIN)})
    monkeypatch.setattr(decode, "get_engine", lambda name: standin)
    plan = {
        "engine": "sglang", "variant": "graphs-off", "model": "standin", "args": [],
        "host": "127.0.0.1", "port": free_port(), "concurrency": [4], "input_len": 8,
        "output_len": 12, "prompts_per_concurrency": 4, "min_steady_s": 30, "idle_s": 0.1,
        "vocab_size": 1000, "expert_distribution": True,
    }  # fmt: skip
    summary = run_decode(plan, tmp_path / "out")
    row = summary.iloc[0]
    assert row["errors"] == 0 and row["wrong_length"] == 0  # ignore_eos was sent
    assert not row["valid"]  # steady window far shorter than min_steady_s: flagged
    dump = json.loads((tmp_path / "out" / "expert_distribution_c4.json").read_text())
    assert dump == {"logical_count": [[5, 0, 11], [2, 14, 0]]}
    m = pd.read_csv(tmp_path / "out" / "expert_m_c4.csv")
    assert m.groupby("layer")["m"].sum().round(6).tolist() == [32.0, 32.0]  # C=4 x top-8
