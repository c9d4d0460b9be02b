"""Decode power end to end on the CPU: transformers serve, a local MoE, load, windows."""

import json
import re
import sys
import time

import pandas as pd
import pytest

pytest.importorskip("transformers")
pytest.importorskip("fastapi")

from studylib.core.table_registry import read_table  # noqa: E402
from studylib.instruments.serving.served_model import build_moe_model  # noqa: E402
from studylib.instruments.step_components import COMPONENTS  # noqa: E402
from studylib.stages.decode import decode_crosscheck as crosscheck  # noqa: E402
from studylib.stages.decode.decode_judgements import engine_account, invalid_note  # noqa: E402
from studylib.stages.decode.decode_run import run_decode  # noqa: E402
from studylib.stages.decode.decode_schema import BREAKDOWN_COLUMNS, SUMMARY_COLUMNS  # noqa: E402
from studylib.stages.decode.decode_window import combine_power  # noqa: E402
from synthetic_trace import expected_per_step  # noqa: E402
from test_served_model import TINY  # noqa: E402
from test_serving import STANDIN, free_port  # noqa: E402


def test_transformers_decode_on_cpu(tmp_path, monkeypatch):
    build_moe_model(tmp_path / "model", TINY, seed=0, dtype="float32")
    plan = {
        "engine": "transformers", "variant": "cpu", "model": str(tmp_path / "model"),
        "args": ["--device", "cpu"], "host": "127.0.0.1", "port": free_port(),
        "concurrency": [1, 2], "input_len": 8, "output_len": 8, "min_steady_s": 0.3,
        "idle_s": 0.2, "warmup_requests": 1, "ready_timeout_s": 120, "sample_hz": 20,
        "vocab_size": TINY["vocab_size"], "profile_steps": 5,
    }  # fmt: skip
    summary = run_decode(plan, tmp_path / "out")
    assert list(summary.columns) == SUMMARY_COLUMNS
    assert summary["concurrency"].tolist() == [1, 2]
    assert (summary["load"] == "lockstep").all()  # no stagger in the plan
    assert (summary["errors"] == 0).all() and (summary["wrong_length"] == 0).all()
    # The closed loop holds C in flight for min_steady_s whatever the machine's speed, so the
    # window is valid by construction (a fast machine once made a prompt-count load too short).
    assert (summary["steady_s"] >= 0.3).all() and summary["valid"].all()
    assert (summary["output_tok_s"] > 0).all()
    assert (summary["power_source"] == "none").all()
    assert summary["avg_w_total"].isna().all()  # no NVML here: no watts, none invented
    assert summary["cuda_graphs"].isna().all() and summary["load_cpu_pct"].notna().all()
    requests = pd.read_parquet(tmp_path / "out" / "requests.parquet")
    complete = requests[~requests["cut"]]
    assert (complete["completion_tokens"] == 8).all() and (requests["error"] == "").all()
    assert set(requests["concurrency"]) == {1, 2}
    # The requests still streaming at the end of each level were cancelled: at most one per
    # client (none where a request ended right at the deadline).
    cut = requests.groupby("concurrency")["cut"].sum()
    assert cut[1] <= 1 and cut[2] <= 2
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["teardown"]["left_behind"] is False and run["ready_s"] > 0
    assert run["sample_hz"] == 20  # the sampler's rate, as the plan set it
    assert run["gpus"] == []  # no NVML here: no chip to name, none invented
    assert "Uvicorn running" in (tmp_path / "out" / "server.log").read_text()
    assert pd.read_csv(tmp_path / "out" / "expert_m.csv").empty  # no recorder: header only
    # transformers serve has no profiler endpoint: no profile pass, a breakdown of its header.
    breakdown = pd.read_csv(tmp_path / "out" / "breakdown.csv")
    assert breakdown.empty and list(breakdown.columns) == BREAKDOWN_COLUMNS
    assert "no profiler endpoint" in run["profile"]["skipped"]
    assert not (tmp_path / "out" / "profile").exists()


def _standin_sglang(monkeypatch):
    # The stand-in answers SGLang's contract; run it through the sglang engine's argv prefix.
    import studylib.stages.decode.decode_run as decode

    real = decode.get_engine("sglang")
    standin = real.__class__(**{**real.__dict__, "launch": (sys.executable, STANDIN),
                                "gated_launch": (sys.executable, STANDIN)})  # fmt: skip
    monkeypatch.setattr(decode, "get_engine", lambda name: standin)


def test_sglang_contract_with_the_recorder_in_its_own_pass(tmp_path, monkeypatch):
    _standin_sglang(monkeypatch)
    plan = {
        "engine": "sglang", "variant": "graphs-off", "model": "standin", "model_kind": "dummy",
        "args": ["--disable-cuda-graph", "--crash-diagnostics"], "host": "127.0.0.1",
        "port": free_port(), "concurrency": [2, 4], "input_len": 8, "output_len": 12,
        "min_steady_s": 0.3, "expert_distribution_s": 0.2, "idle_s": 0.1,
        "ready_timeout_s": 30, "sample_hz": 20, "vocab_size": 1000,
        "expert_distribution": True, "top_k": 8, "weights": "bf16",
    }  # fmt: skip
    summary = run_decode(plan, tmp_path / "out")
    assert (summary["errors"] == 0).all() and (summary["wrong_length"] == 0).all()  # ignore_eos
    assert summary["valid"].all() and (summary["cuda_graphs"] == False).all()  # noqa: E712
    out = tmp_path / "out"
    # The main pass ran without the recorder; a second server start recorded the experts.
    assert "--expert-distribution-recorder-mode" not in (out / "server.log").read_text()
    recorder_log = (out / "server_recorder.log").read_text()
    assert "--expert-distribution-recorder-mode" in recorder_log
    assert "--expert-distribution-recorder-buffer-size -1" in recorder_log  # every step
    m = pd.read_csv(out / "expert_m.csv")
    assert sorted(set(m["concurrency"])) == [2, 4]
    sums = m.groupby(["concurrency", "layer"])["m"].sum().round(6)
    assert sums.tolist() == [16.0, 16.0, 32.0, 32.0]  # C x top-8 per layer
    recorder = pd.read_csv(out / "recorder.csv")
    assert recorder["concurrency"].tolist() == [2, 4]
    assert (recorder["tpot_ratio"] > 0).all() and (recorder["errors"] == 0).all()
    run = json.loads((out / "run.json").read_text())
    assert run["recorder_teardown"]["left_behind"] is False
    assert run["served_name"] in (out / "server.log").read_text()
    # Each server stopped at once: SGLang's crash diagnostics, which slept 5 s at every stop
    # of the study's (its SIGTERM), are off in the servers' environment.
    assert run["teardown"]["stop_s"] < 3 and run["recorder_teardown"]["stop_s"] < 3
    assert "before crash diagnostics" not in (out / "server.log").read_text()


def test_a_server_that_does_not_start_is_the_variants_result_not_a_lost_run(tmp_path, monkeypatch):
    """A variant whose server exits before it is ready (the bf16 variant's 79 GB of weights on
    an 80-GB H100, 2026-12-06: no memory left for the KV cache) writes its tables, one row a
    concurrency saying why, and keeps the server's log: the job ends, and the aggregate and
    the report of the other variants go on (the job's failure lost both, and the log)."""
    _standin_sglang(monkeypatch)
    plan = {
        "engine": "sglang", "variant": "too-big", "model": "standin", "model_kind": "dummy",
        "args": ["--exit-before-ready", "1"], "host": "127.0.0.1", "port": free_port(),
        "concurrency": [1, 16], "input_len": 8, "output_len": 12, "min_steady_s": 0.3,
        "idle_s": 0.1, "ready_timeout_s": 30, "sample_hz": 20, "vocab_size": 1000,
        "weights": "bf16", "expert_distribution": True, "top_k": 8,
    }  # fmt: skip
    summary = run_decode(plan, tmp_path / "out", model_facts={"weight_bytes": 79115059200})
    assert summary["concurrency"].tolist() == [1, 16] and not summary["valid"].any()
    why = summary["first_error"].iloc[0]
    assert why.startswith("the server did not start: the server exited with code 1")
    assert "out of GPU memory (simulated)" in why and "73.7 GiB" in why
    assert invalid_note(summary.iloc[0]) == "invalid: the server did not start"
    out = tmp_path / "out"
    assert read_table("decode_summary", out / "summary.csv")["first_error"].tolist() == [why, why]
    assert "out of GPU memory" in (out / "server.log").read_text()
    run = json.loads((out / "run.json").read_text())
    assert run["start_error"] == why and run["teardown"]["left_behind"] is False
    assert not (out / "server_recorder.log").exists()  # no second start of the same server
    assert read_table("crosscheck", out / "crosscheck.csv").empty


def test_weights_the_gpu_cannot_hold_start_no_server(tmp_path, monkeypatch):
    """Known before the start (decode_plan.weights_problem): no server launched, no idle
    window; the same rows and outputs as a server that stopped for want of memory."""
    import studylib.stages.decode.decode_run as decode

    _standin_sglang(monkeypatch)
    monkeypatch.setattr(decode, "smallest_gpu_memory_mib", lambda indices: 81_559.0)
    monkeypatch.setattr(decode._Runs, "idle", lambda self, s: pytest.fail("an idle window ran"))
    plan = {
        "engine": "sglang", "variant": "bf16-on-h100", "model": "standin",
        "model_kind": "dummy", "args": ["--mem-fraction-static", "0.85"], "host": "127.0.0.1",
        "port": free_port(), "concurrency": [1, 16], "input_len": 8, "output_len": 12,
        "min_steady_s": 0.3, "idle_s": 5.0, "ready_timeout_s": 30, "sample_hz": 20,
        "vocab_size": 1000, "weights": "bf16",
    }  # fmt: skip
    summary = run_decode(plan, tmp_path / "out", model_facts={"weight_bytes": 79115059200},
                         hold_device=lambda: pytest.fail("it waited for the device"))  # fmt: skip
    assert not summary["valid"].any() and summary["concurrency"].tolist() == [1, 16]
    why = summary["first_error"].iloc[0]
    assert why.startswith("the server did not start: its weights do not fit: 73.7 GiB per GPU")
    assert invalid_note(summary.iloc[1]) == "invalid: the server did not start"
    out = tmp_path / "out"
    assert (out / "server.log").read_text() == f"study: {why}\n"  # no launcher line: none ran
    assert json.loads((out / "run.json").read_text())["start_error"] == why
    for name in ("crosscheck.csv", "recorder.csv", "expert_m.csv", "breakdown.csv"):
        assert (out / name).is_file(), name


def test_what_the_servers_start_compiled_is_in_its_record(tmp_path, monkeypatch):
    """The caches the server's environment names are read before its launch and once it is
    ready: its record names the kernel the start compiled, not the one already there, with
    its seconds by the files' times and the start's graph capture by its own log."""
    _standin_sglang(monkeypatch)
    cache = tmp_path / "triton"
    (cache / "BEFORE").mkdir(parents=True)
    for ext in ("source", "json"):
        (cache / "BEFORE" / f"old_kernel.{ext}").write_text("{}")
    plan = {
        "engine": "sglang", "variant": "compiles", "model": "standin", "model_kind": "dummy",
        "args": ["--compile-at-start"], "env": {"TRITON_CACHE_DIR": str(cache)},
        "host": "127.0.0.1", "port": free_port(), "concurrency": [2], "input_len": 8,
        "output_len": 12, "min_steady_s": 0.3, "idle_s": 0.1, "ready_timeout_s": 30,
        "sample_hz": 20, "vocab_size": 1000, "weights": "bf16",
    }  # fmt: skip
    run_decode(plan, tmp_path / "out")
    builds = json.loads((tmp_path / "out" / "run.json").read_text())["start_builds"]
    # When its files landed, so that a JIT job's module beside the start is told apart.
    landed = builds["caches"]["triton"]["names"]["standin_kernel"].pop("landed_at")
    assert landed == pytest.approx(time.time(), abs=120)
    assert builds["caches"] == {"triton": {"built": {"kernel": 1}, "seconds": 0.5, "names": {
        "standin_kernel": {"count": 1, "seconds": 0.5}}}}  # fmt: skip
    assert builds["seconds"] == 0.5 and builds["captures_s"] == {"decode": 0.5}


def test_a_cross_check_apart_alternates_the_clients_on_the_same_server(tmp_path, monkeypatch):
    # bench_serving (faked: the stand-in speaks no /generate) reads far slower than the
    # study's load: the job alternates the two on the same server, measuring a study window
    # more on the stand-in, and writes the rounds beside the row.
    _standin_sglang(monkeypatch)

    class SlowBench:
        def __init__(self, log_path):
            self.runs = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def run(self, argv, result_file, timeout_s):
            self.runs += 1
            return {"t0": 0.0, "t1": 1.0, "details": {}, "bench_tpot_ms": 1e4,
                    "bench_error": "", "runner_died": False}  # fmt: skip

    monkeypatch.setattr(crosscheck, "BenchWorker", SlowBench)
    plan = {
        "engine": "sglang", "variant": "checked", "model": "standin", "model_kind": "dummy",
        "args": [], "host": "127.0.0.1", "port": free_port(), "concurrency": [2],
        "input_len": 8, "output_len": 12, "min_steady_s": 0.3, "idle_s": 0.1,
        "ready_timeout_s": 30, "sample_hz": 20, "vocab_size": 1000, "weights": "bf16",
        "crosscheck": True, "crosscheck_rounds": 2,
    }  # fmt: skip
    summary = run_decode(plan, tmp_path / "out")
    assert summary["valid"].all()
    check = pd.read_csv(tmp_path / "out" / "crosscheck.csv").iloc[0]
    assert check["rounds"] == 2 and check["bench_tpot_rounds_ms"] == 1e4
    assert check["tpot_ratio_rounds"] < 0.01
    rounds = pd.read_csv(tmp_path / "out" / "crosscheck" / "rounds_c2.csv")
    assert rounds["arm"].tolist() == ["study", "bench", "bench", "study"]
    # The second study window was measured on the stand-in, not copied from the first.
    study = rounds[rounds["arm"] == "study"]
    assert study["tpot_ms"].notna().all() and study["tpot_ms"].iloc[1] > 0
    assert (rounds["error"].fillna("") == "").all()


def test_a_short_window_is_flagged_not_reported(tmp_path, monkeypatch):
    # Errors are the only way to cut the closed loop's window short: a server that crashes
    # mid-load gives rows with valid = false and its error text, never a result.
    _standin_sglang(monkeypatch)
    plan = {
        "engine": "sglang", "variant": "crashing", "model": "standin", "model_kind": "path",
        "args": ["--crash-after-requests", "3"], "host": "127.0.0.1", "port": free_port(),
        "concurrency": [2], "input_len": 4, "output_len": 6, "min_steady_s": 0.5,
        "idle_s": 0.1, "ready_timeout_s": 30, "sample_hz": 20, "vocab_size": 1000,
    }  # fmt: skip
    summary = run_decode(plan, tmp_path / "out")
    row = summary.iloc[0]
    assert not row["valid"] and row["errors"] > 0 and row["first_error"]


def test_a_failed_recorder_pass_keeps_the_main_pass(tmp_path, monkeypatch):
    # On the H200 the recorder pass crashed (a CUDA assert) after the main pass had finished:
    # the main pass's rows stand, the failure is recorded with the server's own text, and a
    # model with shared experts gets the recorder pass unfused.
    _standin_sglang(monkeypatch)
    plan = {
        "engine": "sglang", "variant": "graphs-on", "model": "standin", "model_kind": "dummy",
        "args": ["--crash-when-recording"], "host": "127.0.0.1", "port": free_port(),
        "concurrency": [2], "input_len": 4, "output_len": 6, "min_steady_s": 0.3,
        "expert_distribution_s": 0.2, "idle_s": 0.1, "ready_timeout_s": 30, "sample_hz": 20,
        "vocab_size": 1000, "expert_distribution": True, "weights": "bf16", "routing": "uniform",
        "top_k": 8,
    }  # fmt: skip
    facts = {"experts": 3, "top_k": 2, "shared_experts": 1, "layers": 1, "hidden_size": 64,
             "moe_intermediate_size": 32, "heads": 4, "kv_heads": 2,
             "vocab_size": 1000}  # fmt: skip
    summary = run_decode(plan, tmp_path / "out", model_facts=facts)
    assert summary["valid"].all() and summary["step_gb"].notna().all()
    out = tmp_path / "out"
    recorder = pd.read_csv(out / "recorder.csv")
    assert "idx_dim >= 0" in recorder["error"].iloc[0]
    assert pd.read_csv(out / "expert_m.csv").empty
    run = json.loads((out / "run.json").read_text())
    assert "idx_dim >= 0" in run["recorder_error"]
    assert "--disable-shared-experts-fusion" in (out / "server_recorder.log").read_text()
    assert "--disable-shared-experts-fusion" not in (out / "server.log").read_text()
    assert summary["routing"].tolist() == ["uniform"]
    assert "standin: uniform expert routing" in (out / "server.log").read_text()


def _profile_plan(tmp_path, args, concurrency=(2, 4), **extra) -> dict:
    # A local model folder whose config.json gives the layers (3), as a path model's would.
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 3}))
    return {
        "engine": "sglang", "variant": "graphs-on", "model": str(model), "model_kind": "path",
        "args": list(args), "host": "127.0.0.1", "port": free_port(),
        "concurrency": list(concurrency), "input_len": 4, "output_len": 12,
        "min_steady_s": 0.3, "idle_s": 0.1, "ready_timeout_s": 30, "sample_hz": 20,
        "vocab_size": 1000, "weights": "fp8", "profile_steps": 6, **extra,
    }  # fmt: skip


def test_the_profile_pass_gives_the_measured_breakdown_of_every_rank(tmp_path, monkeypatch):
    """After the steady windows the server profiles 6 steps at each C; the stand-in writes
    a synthetic trace per TP rank (3 layers, 2 ranks), whose kernels breakdown.csv holds."""
    import studylib.stages.decode.decode_profile_pass as profile_pass
    import studylib.stages.decode.decode_run as decode

    _standin_sglang(monkeypatch)
    order = []
    steady, start = decode._one_concurrency, profile_pass.start_profile

    def steady_window(pas, c, *args):
        order.append(("steady", c))
        return steady(pas, c, *args)

    def start_profile(url, folder, *args, **kwargs):
        order.append(("profile", folder.name))
        return start(url, folder, *args, **kwargs)

    monkeypatch.setattr(decode, "_one_concurrency", steady_window)
    monkeypatch.setattr(profile_pass, "start_profile", start_profile)
    # Tokens 50 ms apart: a profile asked for at the first token finds 1 or 2 sent.
    plan = _profile_plan(tmp_path, ["--tp", "2", "--token-delay", "0.05"])
    summary = run_decode(plan, tmp_path / "out")
    assert summary["valid"].all()
    # Every steady window first: no measured window runs in a process already traced.
    assert order == [("steady", 2), ("steady", 4), ("profile", "c2"), ("profile", "c4")]
    out = tmp_path / "out"
    breakdown = read_table("breakdown", out / "breakdown.csv")  # the checked reader
    assert list(breakdown.columns) == BREAKDOWN_COLUMNS
    assert len(breakdown) == 2 * 2 * len(COMPONENTS)  # C x ranks x components
    assert sorted(set(breakdown["concurrency"])) == [2, 4]
    assert sorted(set(breakdown["rank"])) == [0, 1]
    assert (breakdown["steps"] == 6).all()
    assert (breakdown[["engine", "variant", "weights"]].drop_duplicates().values.tolist()
            == [["sglang", "graphs-on", "fp8"]])  # fmt: skip
    assert breakdown["cuda_graphs"].all() and not breakdown["prefill_in_window"].any()
    expected = expected_per_step(layers=3, ranks=2)
    for (c, component), rows in breakdown.groupby(["concurrency", "component"]):
        us, count = expected.get(component, (0.0, 0))
        assert rows["us_per_step"].tolist() == pytest.approx([us, us]), (c, component)
        assert rows["kernels_per_step"].tolist() == pytest.approx([count, count])
    busy = sum(us for us, _ in expected.values())  # the synthetic kernels never overlap
    assert breakdown["busy_us_per_step"].tolist() == pytest.approx([busy] * len(breakdown))
    assert (breakdown["idle_us_per_step"] > 0).all()
    assert breakdown["idle_us_per_step"].tolist() == pytest.approx(
        (breakdown["span_us_per_step"] - breakdown["busy_us_per_step"]).tolist()
    )
    tpot = dict(zip(summary["concurrency"], summary["tpot_ms"], strict=True))
    assert breakdown.groupby("concurrency")["tpot_ms"].first().to_dict() == pytest.approx(tpot)
    # The traces stay, and run.json says where and how big they are.
    run = json.loads((out / "run.json").read_text())
    profile = run["profile"]
    assert profile["errors"] == {} and profile["layers"] == 3 and profile["ranks"] == 2
    files = [t["file"] for t in profile["traces"]]
    assert len(files) == 4 and all((out / f).is_file() for f in files)
    assert all(f.startswith(("profile/c2/decode-c2-", "profile/c4/decode-c4-")) for f in files)
    assert profile["trace_bytes"] == sum((out / f).stat().st_size for f in files) > 0
    log = (out / "server.log").read_text()
    assert "'num_steps': 6" in log and "'activities': ['GPU']" in log
    # The profile runs at the mean KV length without streaming half the output first: each
    # prompt holds the input (4) and half the output (12) less half the steps (6) less the
    # first token, 4 + 3 - 1 = 6 tokens, and the profile starts at the first token.
    profiling = [line for line in log.splitlines() if line.startswith("standin: profiling ")]
    streamed = [int(line.split(" after ")[1].split()[0]) for line in profiling]
    assert len(streamed) == 2 and min(streamed) >= 1, streamed
    assert all(line.endswith("prompts of [6] tokens") for line in profiling), profiling
    # The KV length at the profiled steps' middle: prompt 6 + >= 1 streamed + 6 / 2.
    assert (breakdown["context"] >= 6 + 1 + 3).all()
    assert (breakdown["context"] <= 4 + 12).all()


def test_a_prefill_pass_in_the_profiled_window_is_flagged(tmp_path, monkeypatch):
    _standin_sglang(monkeypatch)
    plan = _profile_plan(tmp_path, ["--profile-prefill"], concurrency=[2])
    run_decode(plan, tmp_path / "out")
    breakdown = pd.read_csv(tmp_path / "out" / "breakdown.csv")
    assert len(breakdown) == len(COMPONENTS) and (breakdown["rank"] == 0).all()
    assert breakdown["prefill_in_window"].all()
    assert breakdown["prefill_us"].tolist() == pytest.approx([3 * 40.0] * len(COMPONENTS))
    assert (breakdown["steps"] == 6).all()


@pytest.mark.parametrize("flag, message", [
    ("--profile-garbage", "not a readable trace (damaged): not gzip data"),
    ("--profile-never", "no trace in"),
])  # fmt: skip
def test_a_failed_profile_is_a_warning_and_the_run_stands(tmp_path, monkeypatch, flag, message):
    # A trace that is no trace fails at once; one never written, at profile_timeout_s (the
    # stand-in never writes it, so the bound's length changes nothing but the test's time).
    _standin_sglang(monkeypatch)
    plan = _profile_plan(tmp_path, [flag], concurrency=[2], profile_timeout_s=2)
    summary = run_decode(plan, tmp_path / "out")
    assert summary["valid"].all() and summary["tpot_ms"].notna().all()
    out = tmp_path / "out"
    breakdown = pd.read_csv(out / "breakdown.csv")
    assert breakdown.empty and list(breakdown.columns) == BREAKDOWN_COLUMNS
    run = json.loads((out / "run.json").read_text())
    assert message in run["profile"]["errors"]["2"]
    assert run["teardown"]["left_behind"] is False
    if flag == "--profile-garbage":  # kept, as every trace file is
        assert [t["bytes"] for t in run["profile"]["traces"]] == [len(b"not a trace")]
    else:  # the unfinished profile was stopped, so a next one could start
        assert "stopped" in (out / "server.log").read_text()


def test_without_a_layer_count_there_is_no_profile(tmp_path, monkeypatch):
    _standin_sglang(monkeypatch)
    plan = _profile_plan(tmp_path, [], concurrency=[1], model="standin")
    run_decode(plan, tmp_path / "out")
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert "layer count is unknown" in run["profile"]["skipped"]
    assert pd.read_csv(tmp_path / "out" / "breakdown.csv").empty
    assert "standin: profiling" not in (tmp_path / "out" / "server.log").read_text()


def test_power_per_gpu_and_its_spread_across_the_jobs_gpus():
    windows = [{"avg_w": w, "power_limit_w": 700.0, "energy_j": 10 * w} for w in (300, 500, 340)]
    row = combine_power(windows, tokens=1000, idle_w_total=300.0, seconds=10.0)
    assert row["gpus"] == 3 and row["avg_w_total"] == 1140 and row["avg_w_per_gpu"] == 380
    assert (row["w_gpu_min"], row["w_gpu_median"], row["w_gpu_max"]) == (300, 340, 500)
    assert row["pct_limit"] == 100 * 1140 / 2100
    assert row["j_per_token_net"] == (11400 - 3000) / 1000
    # A GPU without a reading: no total, so no spread that would hide it.
    row = combine_power([*windows, {"avg_w": None}], tokens=1000, idle_w_total=None, seconds=10.0)
    assert row["avg_w_total"] is None and "w_gpu_max" not in row


def test_each_load_waits_for_the_cancelled_requests_of_the_last_one(tmp_path, monkeypatch):
    """The stand-in keeps a cancelled stream's request for 2 s (as SGLang does until it
    notices the closed connection): every load first waits for the server to hold none, so
    the profile at C = 2, right after the C = 4 window, runs at batch 2, not 2 + 4."""
    _standin_sglang(monkeypatch)
    plan = _profile_plan(tmp_path, ["--linger-cancelled", "2"], output_len=400)
    summary = run_decode(plan, tmp_path / "out")
    assert summary["valid"].all()
    breakdown = pd.read_csv(tmp_path / "out" / "breakdown.csv")
    batch = breakdown.groupby("concurrency")["batch"].max()
    assert (batch <= batch.index).all() and (batch >= 1).all(), batch


def test_a_window_the_server_outran_is_the_engines_account(tmp_path, monkeypatch):
    # The stand-in's log claims its scheduler made far more tokens than the client received
    # while it kept C running (as SGLang's did at C = 256 on the H200, its streaming path the
    # bottleneck): the row's tok/s and TPOT are the engine's own account, the client's beside
    # them, and the window stands (an idle scheduler would still make it invalid).
    _standin_sglang(monkeypatch)
    plan = {
        "engine": "sglang", "variant": "outran", "model": "standin", "model_kind": "dummy",
        "args": ["--decode-log-tok-s", "1000000", "--token-delay", "0.002"],
        "host": "127.0.0.1", "port": free_port(), "concurrency": [2], "input_len": 4,
        "output_len": 400, "min_steady_s": 3.2, "idle_s": 0.1, "ready_timeout_s": 30,
        "sample_hz": 20, "vocab_size": 1000, "weights": "bf16", "routing": "uniform",
    }  # fmt: skip
    summary = run_decode(plan, tmp_path / "out")
    row = summary.iloc[0]
    assert row["server_tok_s"] == pytest.approx(1e6) and row["server_running_min"] == 2
    assert row["server_lines"] >= 1 and row["client_tok_s"] < 1e5
    assert row["tpot_source"] == "engine" and row["output_tok_s"] == pytest.approx(1e6)
    assert row["tpot_ms"] == pytest.approx(1e3 * 2 / 1e6) and row["client_tpot_ms"] > 1
    assert row["valid"] and invalid_note(row.to_dict()) == ""


def test_the_client_and_the_scheduler_count_over_the_same_log_lines(tmp_path, monkeypatch):
    # The stand-in logs, stamped to the millisecond as SGLang does under the engine's
    # SGLANG_LOG_MS, the tokens it streamed since its line before: the client's count over
    # those very spans matches, and the row stays the client's account.
    _standin_sglang(monkeypatch)
    plan = {
        "engine": "sglang", "variant": "counted", "model": "standin", "model_kind": "dummy",
        "args": ["--decode-log-counted", "--token-delay", "0.002"],
        "host": "127.0.0.1", "port": free_port(), "concurrency": [2], "input_len": 4,
        "output_len": 400, "min_steady_s": 2.0, "idle_s": 0.1, "ready_timeout_s": 30,
        "sample_hz": 20, "vocab_size": 1000, "weights": "bf16", "routing": "uniform",
    }  # fmt: skip
    row = run_decode(plan, tmp_path / "out").iloc[0]
    log = (tmp_path / "out" / "server.log").read_text()
    assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] Decode batch", log, re.M)
    assert row["server_lines"] >= 2 and 0.25 * row["server_lines"] <= row["server_span_s"] + 0.1
    # The same tokens, apart from a chunk in flight at each of the spans' two edges.
    assert row["delivery_ratio"] == pytest.approx(1.0, abs=0.1)
    # Whose account the row is follows the rule on the ratio measured: where the client kept
    # up, its own; a loaded machine's client can fall behind the stand-in (CI on two busy
    # cores: 0.977, the load stalled 0.23 s), and the row is then rightly the engine's.
    assert row["tpot_source"] == ("engine" if engine_account(row) else "client")
    assert row["valid"]


def test_a_staggered_load_is_its_own_warm_up(tmp_path, monkeypatch, caplog):
    # The default: no separate warm-up load; each level's first requests are staggered, and
    # the span before the window (their ends, warmup_s) is the level's warm-up.
    _standin_sglang(monkeypatch)
    caplog.set_level("INFO", logger="study")
    plan = {
        "engine": "sglang", "variant": "staggered", "model": "standin", "model_kind": "path",
        "args": ["--token-delay", "0.005"], "host": "127.0.0.1", "port": free_port(),
        "concurrency": [2, 4], "input_len": 4, "output_len": 40, "min_steady_s": 0.3,
        "idle_s": 0.1, "ready_timeout_s": 30, "sample_hz": 20, "vocab_size": 1000,
        "stagger": True, "warmup_s": 1.5, "warmup_later_s": 0.0,
    }  # fmt: skip
    summary = run_decode(plan, tmp_path / "out")
    assert summary["valid"].all() and (summary["wrong_length"] == 0).all()
    assert (summary["load"] == "staggered").all()  # the table says which load it measured
    requests = pd.read_parquet(tmp_path / "out" / "requests.parquet")
    first = requests[requests["index"] < requests["concurrency"]].sort_values(
        ["concurrency", "index"]
    )
    assert first["completion_tokens"].tolist() == [8, 35, 4, 18, 21, 35]
    # One load per level: only the first C requests are short, and none came before them.
    assert (requests.groupby("concurrency")["index"].min() == 0).all()
    said = [r.getMessage() for r in caplog.records if "pass staggered" in r.getMessage()]
    assert len(said) == 2 and "warming up in the load" in said[0]
    # The run record says how the windows reached their steady state.
    facts = json.loads((tmp_path / "out" / "run.json").read_text())
    assert facts["load"] == {"stagger": True, "preaged": False, "warmup_s": 1.5,
                             "warmup_later_s": 0.0, "carried": False}  # fmt: skip
    # warmup_s is the engine's warm-up, before the server's first window only: the first
    # level's replacements still start 1.5 s on (its window comes after the floor), the
    # second's window starts once its own first requests have ended (35 tokens of 5 ms) and
    # lasts 0.3 s, so its last request starts well before 1.5 s.
    starts = requests.groupby("concurrency")["start"]
    span = starts.max() - starts.min()
    assert span[2] >= 1.5 and span[4] < 1.5


def test_a_full_length_window_says_where_the_rule_would_have_ended_it(tmp_path, monkeypatch):
    # full_length_s: every window runs its 2 s, and the plan's rule (50 %, which a steady
    # stand-in meets at once, after 0.5 s, at most 1 s) is replayed on it: each row also
    # states the window the rule would have ended and what that measured, from the same
    # requests. The rule's fixed windows (tpot_ci_pct 0) end at its
    # longest, 1 s.
    _standin_sglang(monkeypatch)
    plan = {
        "engine": "sglang", "variant": "full", "model": "standin", "model_kind": "dummy",
        "args": ["--token-delay", "0.005"], "host": "127.0.0.1", "port": free_port(),
        "concurrency": [2], "input_len": 4, "output_len": 2000, "full_length_s": 2.0,
        "min_steady_s": 1.0, "tpot_ci_pct": 50, "shortest_steady_s": 0.5, "idle_s": 0.1,
        "ready_timeout_s": 30, "sample_hz": 20, "vocab_size": 1000, "weights": "bf16",
        "routing": "uniform",
    }  # fmt: skip
    row = run_decode(plan, tmp_path / "out").iloc[0]
    assert row["valid"] and row["steady_s"] >= 2.0
    # (at 0.5 s on any machine that streams evenly; within the rule's 0.5-1 s on one that
    # stalls the stand-in for slices at a time)
    assert 0.5 - 1e-3 <= row["shortened_steady_s"] <= 1.0 + 1e-3
    if row["shortened_steady_s"] < 1.0 - 1e-3:  # ended by its precision, not its longest
        assert 0 <= row["shortened_tpot_ci_pct"] <= 50
    assert row["shortened_tpot_source"] == "client"
    assert row["shortened_tpot_ms"] == pytest.approx(row["tpot_ms"], rel=0.5)
    assert row["shortened_output_tok_s"] == pytest.approx(row["output_tok_s"], rel=0.5)
    fixed = run_decode({**plan, "tpot_ci_pct": 0, "port": free_port()}, tmp_path / "fixed")
    assert fixed.iloc[0]["shortened_steady_s"] == pytest.approx(1.0, abs=1e-3)
    # A run whose rule ends its windows states no shortened window.
    ruled = run_decode({**plan, "full_length_s": 0, "port": free_port()}, tmp_path / "ruled")
    assert ruled.iloc[0]["steady_s"] < 1.5
    assert ruled[[c for c in ruled.columns if c.startswith("shortened_")]].isna().all().all()
