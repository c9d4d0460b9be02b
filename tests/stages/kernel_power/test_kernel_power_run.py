"""Kernel-power runs with one worker per GPU: the barrier, per-GPU rows, isolation.

The workers run real torch matmuls on the CPU; the sampler has no NVML here, so the power
side is covered by test_power_sampler.py and a stand-in sampler below.
"""

from __future__ import annotations

import json

import pytest
from helpers import tiny_config
from studylib.stages.kernel_power import kernel_power_run as kernel_power
from studylib.stages.kernel_power.kernel_power_plan import kernel_power_plan
from studylib.stages.kernel_power.kernel_power_run import KernelPowerRun


def cpu_plan(seconds=0.3) -> dict:
    config = tiny_config()
    config["device"] = "cpu"
    config["kernel_power"]["backends"] = {
        "torch": [
            {"op": "matmul", "dtype": "fp32", "impl": "aten", "shape": "down", "M": [16]}
        ]  # fmt: skip
    }
    config["kernel_power"].update(modes=["eager"], gpus=2, sample_hz=20,
                                  seconds={"cuda": 1, "cpu": seconds})  # fmt: skip
    return kernel_power_plan(config, "torch")


def faults(spec: dict) -> dict:
    return {"STUDY_INJECT_FAULTS": json.dumps(spec)}


def test_workers_start_each_loop_together_even_when_one_prepares_late(tmp_path):
    plan = cpu_plan()
    run = KernelPowerRun(plan, tmp_path / "work", worker_envs=[{}, faults({"matmul:16": "slow"})])
    windows, _ = run.run()
    loops = windows[windows["label"] == "steady"]
    assert len(loops) == 2 and (loops["status"] == "ok").all()
    assert (loops["gpus_running"] == 2).all()
    # Without the barrier the slow worker would start a second after the other.
    starts = loops["t_start"].tolist()
    assert abs(starts[0] - starts[1]) < 0.2
    ends = loops["t_end"].tolist()
    assert all(end - start >= 0.3 for start, end in zip(starts, ends, strict=True))
    assert (loops["calls"] > 0).all()
    idle = windows[windows["label"] == "idle"]
    assert len(idle) == 1 and idle["gpus_running"].iloc[0] == 0


def test_a_worker_crashing_costs_only_its_own_row(tmp_path):
    plan = cpu_plan()
    run = KernelPowerRun(plan, tmp_path / "work",
                         worker_envs=[faults({"matmul:16": "segfault"}), {}])  # fmt: skip
    windows, _ = run.run()
    loops = windows[windows["label"] == "steady"].reset_index(drop=True)
    assert loops["status"].tolist() == ["error", "ok"]
    assert "SIGSEGV" in loops["error"].iloc[0]
    assert loops["calls"].iloc[1] > 0
    assert all(client.proc is None for client in run.clients)  # no worker left behind


def test_a_point_runs_only_on_its_devices(tmp_path):
    plan = cpu_plan(seconds=0.1)
    gpu_only = {**plan["points"][0], "M": 8, "devices": ["cuda"]}
    cpu_only = {**plan["points"][0], "M": 4, "devices": ["cpu"]}
    plan = {**plan, "gpus": 1, "points": [gpu_only, cpu_only]}
    windows, _ = KernelPowerRun(plan, tmp_path / "work").run()
    loops = windows[windows["label"] == "steady"]
    assert loops["M"].tolist() == [4]
    assert loops["status"].tolist() == ["ok"]


class StandInSampler:
    """Two GPUs; records the windows asked for."""

    readers = [object(), object()]

    def __init__(self):
        self.asked = []

    def window(self, t0, t1):
        self.asked.append((t0, t1))
        return [{"gpu": 4, "avg_w": 100.0}, {"gpu": 6, "avg_w": 300.0}]


def test_each_gpu_row_carries_its_own_worker_over_the_shared_span(tmp_path):
    run = KernelPowerRun(cpu_plan(), tmp_path / "work", worker_envs=[{}, {}])
    run.sampler, run.source = StandInSampler(), "nvml"
    point = run.plan["points"][0]
    results = [
        {"status": "ok", "error": "", "t_start": 10.0, "t_end": 20.0, "calls": 5, "us_per_call": 1},
        {"status": "ok", "error": "", "t_start": 10.2, "t_end": 20.1, "calls": 7, "us_per_call": 2},
    ]
    run.record(point, "eager", results)
    assert run.sampler.asked == [(10.2, 20.0)]  # while both ran
    assert [(r["gpu"], r["calls"], r["avg_w"]) for r in run.rows] == [(4, 5, 100.0), (6, 7, 300.0)]
    assert all(r["t_start"] == 10.2 and r["t_end"] == 20.0 for r in run.rows)


def test_a_failed_gpu_row_gets_no_power(tmp_path):
    run = KernelPowerRun(cpu_plan(), tmp_path / "work", worker_envs=[{}, {}])
    run.sampler, run.source = StandInSampler(), "nvml"
    results = [
        {"status": "error", "error": "worker killed by signal SIGSEGV"},
        {"status": "ok", "error": "", "t_start": 1.0, "t_end": 2.0, "calls": 3, "us_per_call": 1},
    ]
    run.record(run.plan["points"][0], "graph", results)
    assert run.rows[0]["status"] == "error" and "avg_w" not in run.rows[0]
    assert run.rows[1]["gpu"] == 6 and run.rows[1]["avg_w"] == 300.0


@pytest.mark.parametrize(
    ("gpus", "machine", "expected"),
    [
        (1, ["0", "1"], [{}]),
        (2, ["3", "5"], [{"CUDA_VISIBLE_DEVICES": "3"}, {"CUDA_VISIBLE_DEVICES": "5"}]),
        (2, [], [{}]),  # no GPU: one worker on the CPU
    ],
)
def test_worker_envs_give_each_worker_one_gpu(monkeypatch, gpus, machine, expected):
    monkeypatch.setattr(kernel_power, "machine_gpus", lambda: machine)
    assert kernel_power.worker_envs({"gpus": gpus}) == expected


def test_a_killed_run_keeps_its_finished_windows(tmp_path, monkeypatch):
    # The first run dies after its first window (a kill, here an interrupt between loops);
    # the rerun in the same folder takes that window from the journal and measures the rest.
    plan = cpu_plan()
    plan["points"] = [dict(plan["points"][0], M=16), dict(plan["points"][0], M=32)]
    measured = []
    real_loop = KernelPowerRun.loop

    def loop(self, hellos, point, mode, seconds):
        if point["M"] == 32 and "killed" not in measured:
            measured.append("killed")
            raise KeyboardInterrupt
        measured.append(point["M"])
        return real_loop(self, hellos, point, mode, seconds)

    monkeypatch.setattr(KernelPowerRun, "loop", loop)
    with pytest.raises(KeyboardInterrupt):
        KernelPowerRun(plan, tmp_path / "work").run()
    assert measured == [16, "killed"]
    first = json.loads((next((tmp_path / "work").glob("progress-*.jsonl"))).read_text())

    windows, _ = KernelPowerRun(plan, tmp_path / "work").run()
    assert measured == [16, "killed", 32]  # the rerun measured only M = 32
    loops = windows[windows["label"] == "steady"].reset_index(drop=True)
    assert loops["M"].tolist() == [16, 32] and (loops["status"] == "ok").all()
    assert loops["t_start"].iloc[0] == first["t_start"]  # M = 16 is the first run's row
    assert (windows["label"] == "idle").sum() == 1  # a fresh idle baseline only
