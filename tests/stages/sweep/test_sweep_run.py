"""The sweep runner on the CPU: real torch points, and injected faults in the worker."""

import json

import pandas as pd
import pytest
from helpers import ROOT, TINY_ATTENTION, tiny_config
from snakemake.utils import validate
from studylib.stages.sweep.sweep_plan import sweep_plan
from studylib.stages.sweep.sweep_run import COLUMNS, run_sweep


def plan_for(backend="torch", **timing):
    config = tiny_config()
    validate(config, str(ROOT / "config" / "schema.yaml"), set_default=True)
    config["device"] = "cpu"
    config["timing"].update(timing)
    plan = sweep_plan(config, backend)
    return plan


@pytest.fixture
def log_file(tmp_path):
    with open(tmp_path / "sweep.log", "w") as f:
        yield f


def test_torch_cpu_sweep_rows_are_valid(tmp_path, log_file):
    out = tmp_path / "torch.parquet"
    frame = run_sweep(plan_for(), out, log_stream=log_file)
    assert list(frame.columns[: len(COLUMNS)]) == COLUMNS
    cuda_only = frame[~frame.op.isin(["matmul", "decode_attention"])]
    assert (cuda_only["status"] == "unsupported").all()
    assert (cuda_only["error"] == "no CUDA device").all()
    frame = frame[frame.op == "matmul"]
    assert len(frame) == 2 * 2 * 2  # two shapes x two dtypes (bf16, fp32 on cpu) x two M
    assert (frame["status"] == "ok").all(), frame[["status", "error"]]
    assert (frame["eager_us"] > 0).all()
    assert (frame["eager_samples"] >= 5).all()
    assert (frame["cos_sim"] > 0.99).all()
    assert (frame.loc[frame.dtype == "fp32", "rel_err"] < 1e-5).all()
    assert (frame["device"] == "cpu").all()
    assert frame["flops"].tolist() == (2.0 * frame.M * frame.N * frame.K).tolist()
    # Where each point's time went: preparing, the first call, the check, all inside it.
    assert (frame["prepare_s"] > 0).all() and (frame["check_s"] > 0).all()
    parts = frame.prepare_s + frame.first_call_ms / 1e3 + frame.check_s
    assert (parts < frame["point_s"]).all()
    assert pd.read_parquet(out)[lambda d: d.op == "matmul"].equals(frame)
    assert not (tmp_path / ".torch.work").exists()


def test_torch_decode_attention_runs_through_the_harness_on_cpu(tmp_path, log_file):
    """The SDPA op at the CPU's decode concurrencies (B = 1, 4) over the tiny attention shape,
    measured and checked against the fp64 reference by the worker, as every point is."""
    frame = run_sweep(plan_for(), tmp_path / "torch.parquet", log_stream=log_file)
    rows = frame[frame.op == "decode_attention"].reset_index(drop=True)
    geo = TINY_ATTENTION
    assert rows["M"].tolist() == [1, 4] and (rows["dtype"] == "fp32").all()
    assert (rows["impl"] == "sdpa").all() and (rows["shape"] == "attention").all()
    assert (rows["status"] == "ok").all(), rows[["status", "error"]]
    # M is the batch, N = heads x head_dim, K = the context; the geometry rides along
    assert (rows["N"] == geo["heads"] * geo["head_dim"]).all()
    assert (rows["K"] == geo["context"]).all() and rows["G"].isna().all()
    for key in ("heads", "kv_heads", "head_dim", "context"):
        assert str(rows[key].dtype) == "Int64" and (rows[key] == geo[key]).all()
    assert (rows["rel_err"] < 1e-5).all() and (rows["cos_sim"] > 0.9999).all()
    assert (rows["eager_us"] > 0).all() and rows["graph_us"].isna().all()  # no graphs on a CPU
    flops = 4.0 * rows.M * geo["heads"] * geo["context"] * geo["head_dim"]
    assert rows["flops"].tolist() == flops.tolist()
    kv = 2.0 * rows.M * geo["context"] * geo["kv_heads"] * geo["head_dim"] * 4
    q_and_out = 2.0 * rows.M * geo["heads"] * geo["head_dim"] * 4
    assert rows["bytes"].tolist() == (kv + q_and_out).tolist()
    # GEMM rows leave the attention geometry empty
    assert frame.loc[frame.op == "matmul", "heads"].isna().all()


@pytest.mark.parametrize("backend", ["flashinfer", "sgl_kernel"])
def test_gpu_only_backend_on_cpu_is_unsupported(tmp_path, log_file, backend):
    frame = run_sweep(plan_for(backend), tmp_path / "fi.parquet", log_stream=log_file)
    assert len(frame) > 0
    assert (frame["status"] == "unsupported").all()
    assert (frame["error"] == "no CUDA device").all()
    assert frame["eager_us"].isna().all()
    # their decode attention too, with its geometry
    attention = frame[frame.op == "decode_attention"]
    assert attention["M"].tolist() == [1, 4] and (attention["context"] == 32).all()


@pytest.mark.parametrize(
    "fault, message",
    [
        ("segfault", "killed by signal SIGSEGV"),
        ("exit", "exited with code 7"),
        ("hang", "timed out after 10 s"),
        ("raise", "RuntimeError: injected fault"),
    ],
)
def test_a_fault_costs_one_point(tmp_path, log_file, monkeypatch, fault, message):
    monkeypatch.setenv("STUDY_INJECT_FAULTS", json.dumps({"matmul:16": fault}))
    # The hang must cost only its timeout. The timeout leaves the good points (each well
    # under a second of sampling) a wide margin on a loaded machine (3 s once timed
    # out a good point); a fresh worker's start has its own, longer allowance.
    timeout = 10 if fault == "hang" else 180
    frame = run_sweep(plan_for(point_timeout_s=timeout), tmp_path / "t.parquet",
                      log_stream=log_file)  # fmt: skip
    frame = frame[frame.op == "matmul"]
    bad = frame[frame.M == 16]
    good = frame[frame.M == 1]
    assert len(frame) == 8
    assert (bad["status"] == "error").all()
    assert bad["error"].str.contains(message).all(), bad["error"].tolist()
    assert (good["status"] == "ok").all(), good["error"].tolist()
    if fault == "hang":
        # One timeout per kernel (impl, op, dtype): its later points of that M or more are
        # not waited for.
        for _, rows in bad.groupby("dtype"):
            first, *later = rows["error"].tolist()
            assert first.startswith("timed out") and later, rows["error"].tolist()
            assert all(e.startswith("not run: aten matmul") for e in later), later


def test_interrupted_sweep_resumes(tmp_path, log_file, monkeypatch):
    out = tmp_path / "t.parquet"
    plan = plan_for()
    work = tmp_path / ".t.work"

    # First run dies (the parent's write fails) after measuring every point.
    def write_fails(*args, **kwargs):
        raise OSError("disk gone")

    monkeypatch.setattr("studylib.stages.sweep.sweep_run.write_frame", write_fails)
    with pytest.raises(OSError):
        run_sweep(plan, out, log_stream=log_file)
    assert not out.exists()
    progress = list(work.glob("progress-*.jsonl"))
    assert len(progress) == 1
    measured = [json.loads(line) for line in progress[0].read_text().splitlines()]
    assert sum(r["op"] == "matmul" for r in measured) == 8
    monkeypatch.undo()
    # No worker may measure again: poison every point; rows must come from the progress file.
    poison = {"matmul:1": "raise", "matmul:16": "raise"}
    monkeypatch.setenv("STUDY_INJECT_FAULTS", json.dumps(poison))
    frame = run_sweep(plan, out, log_stream=log_file)
    frame = frame[frame.op == "matmul"]
    assert (frame["status"] == "ok").all()
    timed = [r["eager_us"] for r in measured if r["op"] == "matmul" and r.get("eager_us")]
    assert sorted(frame["eager_us"]) == sorted(timed)


def test_the_same_computation_under_two_names_is_measured_once(tmp_path, log_file, monkeypatch):
    """The decode step's o_proj is dense_square's GEMM: measured once, its row taken over by
    the other name (measured_as), with none of its time; a resumed run keeps both."""
    plan = plan_for()
    case = next(c for c in plan["cases"] if c["op"] == "matmul")
    first = case["shapes"][0]
    case["shapes"] = [first, {**first, "name": "same_gemm"}]
    frame = run_sweep(plan, tmp_path / "t.parquet", log_stream=log_file)
    frame = frame[frame.op == "matmul"]
    named = {shape: rows.set_index(["dtype", "M"]) for shape, rows in frame.groupby("shape")}
    twin = named["same_gemm"]
    original = named[first["name"]].loc[twin.index]
    assert (original["measured_as"] == "").all() and (original["point_s"] > 0).all()
    assert (twin["measured_as"] == first["name"]).all() and (twin["point_s"] == 0).all()
    assert twin["eager_us"].equals(original["eager_us"])
    assert twin["status"].tolist() == original["status"].tolist() == ["ok"] * len(twin)
    # Resumed: every row from the journal, the worker never asked (it would raise).
    monkeypatch.setattr("studylib.stages.sweep.sweep_run.write_frame",
                        lambda *a, **k: (_ for _ in ()).throw(OSError("disk gone")))  # fmt: skip
    with pytest.raises(OSError):
        run_sweep(plan, tmp_path / "u.parquet", log_stream=log_file)
    monkeypatch.undo()
    monkeypatch.setenv("STUDY_INJECT_FAULTS", json.dumps({"matmul:1": "raise",
                                                           "matmul:16": "raise"}))  # fmt: skip
    again = run_sweep(plan, tmp_path / "u.parquet", log_stream=log_file)
    again = again[again.op == "matmul"]
    assert (again["status"] == "ok").all()
    assert sorted(again["measured_as"]) == sorted(frame["measured_as"])
