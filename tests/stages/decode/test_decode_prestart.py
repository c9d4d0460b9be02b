"""decode.prestart against the stand-in SGLang: the server started gated before its job holds
the device, and the job that holds it first where the prestart does not apply."""

import json
import re
import time

import pytest
from helpers import wait_for
from studylib.instruments import gpu_slots
from studylib.instruments.serving.engines import sglang_gate
from studylib.stages.decode import decode_server
from studylib.stages.decode.decode_run import run_decode
from test_decode_run import _standin_sglang
from test_serving import free_port


def _prestart_plan(**more) -> dict:
    return {
        "engine": "sglang", "variant": "early", "model": "standin", "model_kind": "dummy",
        "args": ["--token-delay", "0.002", "--ready-after", "0.3"], "host": "127.0.0.1",
        "port": free_port(), "concurrency": [2], "input_len": 4, "output_len": 12,
        "min_steady_s": 0.3, "idle_s": 0.1, "ready_timeout_s": 30, "sample_hz": 20,
        "vocab_size": 1000, "prestart": True, "gpus": 1, **more,
    }  # fmt: skip


@pytest.fixture(autouse=True)
def _port_locks(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_slots, "PORT_LOCK_DIR", tmp_path / "server-ports")
    yield
    gpu_slots.release_all()


def test_a_prestarted_server_waits_at_its_gate_while_its_job_waits_for_the_device(
    tmp_path, monkeypatch
):
    # decode.prestart: the server starts before the job holds its device, goes as far as its
    # gate (SGLang: the scheduler's imports) while the job waits, and on to its GPU work only
    # once the job holds the device; its ready time is that last part alone.
    _standin_sglang(monkeypatch)
    monkeypatch.setattr(decode_server, "machine_gpus", lambda: ["0"])
    log = tmp_path / "out" / "server.log"
    held = {}

    def hold_device() -> int:  # the job's wait for the device, as long as the start's CPU part
        wait_for(lambda: log.exists() and sglang_gate.WAITING in log.read_text(),
                 "the server never reached its gate", timeout_s=30)  # fmt: skip
        time.sleep(0.5)
        held["at"] = time.time()
        assert "past the gate" not in log.read_text()
        return 0

    summary = run_decode(_prestart_plan(), tmp_path / "out", hold_device=hold_device)
    assert summary["valid"].all()
    past = float(re.search(r"past the gate at ([0-9.]+)", log.read_text()).group(1))
    assert past >= held["at"]  # its GPU work only once the job held the device
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    start = run["start"]
    assert start["prestart"] is True and start["at_gate"] is True
    assert start["gpu_memory_at_gate"] == []  # no NVML here; on a GPU: none, the gate held
    assert start["device_wait_s"] >= 0.5 and start["before_gate_s"] >= start["device_wait_s"]
    assert run["ready_s"] >= 0.3  # --ready-after, from the gate on


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"prestart": False}, "off (decode.prestart)"),
        ({"gpus": 2}, "the job runs on 2 of the machine's 1 GPUs"),
    ],
)
def test_without_a_prestart_the_job_holds_its_device_before_the_server_starts(
    tmp_path, monkeypatch, change, why
):
    _standin_sglang(monkeypatch)
    monkeypatch.setattr(decode_server, "machine_gpus", lambda: ["0"])
    log = tmp_path / "out" / "server.log"
    plan = _prestart_plan(**change)
    if "gpus" in change:
        plan["args"] = [*plan["args"], "--tp", "2"]

    def hold_device() -> int:
        assert not log.exists()  # nothing started yet
        return 0

    run_decode(plan, tmp_path / "out", hold_device=hold_device)
    start = json.loads((tmp_path / "out" / "run.json").read_text())["start"]
    assert start["prestart"] is False and start["why_not"].startswith(why)
    assert sglang_gate.WAITING not in log.read_text()


def test_a_prestarted_server_takes_a_port_no_other_early_server_holds(tmp_path, monkeypatch):
    # Two decode jobs with prestart wait side by side (Snakemake counts neither as a GPU job),
    # each server at its gate: they cannot both take the base port. Past the slots' ports
    # (base + slot: a job that starts its server once it holds the device), by a lock.
    _standin_sglang(monkeypatch)
    monkeypatch.setattr(decode_server, "machine_gpus", lambda: ["0"])
    plan = _prestart_plan()
    other = gpu_slots.hold_port(plan["port"] + 1, lambda port: True)  # another job's server
    run_decode(plan, tmp_path / "out", hold_device=lambda: 0)
    argv = json.loads((tmp_path / "out" / "run.json").read_text())["argv"]
    port = int(argv[argv.index("--port") + 1])
    assert other == plan["port"] + 1 and port > other


def test_a_gated_starts_builds_are_those_after_its_gate(tmp_path, monkeypatch):
    # While an early server waits at its gate, the jobs measuring beside it build their own
    # modules into the caches it shares: those are not its start's (on an H100 a start that
    # waited 366 s claimed a kernel sweep's builds).
    _standin_sglang(monkeypatch)
    monkeypatch.setattr(decode_server, "machine_gpus", lambda: ["0"])
    cache = tmp_path / "triton"
    log = tmp_path / "out" / "server.log"

    def hold_device() -> int:  # a kernel job builds while the server waits at its gate
        wait_for(lambda: log.exists() and sglang_gate.WAITING in log.read_text(),
                 "the server never reached its gate", timeout_s=30)  # fmt: skip
        (cache / "OTHERKEY").mkdir(parents=True)
        for ext in ("source", "json"):
            (cache / "OTHERKEY" / f"kernel_jobs_kernel.{ext}").write_text("{}")
        return 0

    plan = _prestart_plan(env={"TRITON_CACHE_DIR": str(cache)})
    plan["args"] = [*plan["args"], "--compile-at-start"]
    run_decode(plan, tmp_path / "out", hold_device=hold_device)
    builds = json.loads((tmp_path / "out" / "run.json").read_text())["start_builds"]
    assert set(builds["caches"]["triton"]["names"]) == {"standin_kernel"}
