"""Server launch, readiness and teardown against a stand-in that follows the engines' contract."""

import os
import socket
import sys
import time

import pytest
from helpers import ROOT, wait_for
from studylib.instruments.serving.engines import engine, sglang_gate
from studylib.instruments.serving.engines.sglang_engine import expert_recorder
from studylib.instruments.serving.guard import pid_alive
from studylib.instruments.serving.launcher import (
    ServerFailed,
    ServerProcess,
    check_port_free,
    group_alive,
    http_status,
    port_holder,
    run_served_name,
)

STANDIN = str(ROOT / "tests" / "standin_server.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def standin(tmp_path, *flags, ready_timeout_s=20.0, stop_grace_s=5.0, gate=None):
    port = free_port()
    sglang = engine("sglang")
    argv = [sys.executable, STANDIN, "--host", "127.0.0.1", "--port", str(port), *flags]
    server = ServerProcess(
        argv,
        tmp_path / "server.log",
        ready=lambda: sglang.ready("127.0.0.1", port),
        ready_timeout_s=ready_timeout_s,
        poll_s=0.1,
        stop_grace_s=stop_grace_s,
        gate=None if gate is None else (sglang.gate_env, gate),
    )
    return server, port


def test_a_gated_start_waits_for_its_gate_and_times_its_ready_from_there(tmp_path):
    gate = tmp_path / "gate" / "open"
    server, port = standin(tmp_path, "--ready-after", "0.5", gate=gate)
    log = tmp_path / "server.log"
    with server:
        wait_for(lambda: sglang_gate.WAITING in log.read_text(), "the server at its gate")
        time.sleep(1.0)  # held at the gate: whatever the wait, nothing past it runs
        assert http_status(f"http://127.0.0.1:{port}/health") is None  # not even bound
        assert "past the gate" not in log.read_text()
        ready = server.wait_ready()  # opens the gate
        assert ready >= 0.4  # --ready-after counts from the gate
        assert server.gate_record["before_gate_s"] >= 1.0
        assert "past the gate" in log.read_text()
    assert not gate.parent.exists()  # the stop removes it, and its folder
    assert not group_alive(server.proc.pid)


def test_ready_only_after_health_answers_200(tmp_path):
    server, port = standin(tmp_path, "--ready-after", "1.5")
    with server:
        assert server.wait_ready() >= 1.4
        assert http_status(f"http://127.0.0.1:{port}/health") == 200
    pgid = server.proc.pid
    assert not group_alive(pgid)
    assert "standin: serving" in (tmp_path / "server.log").read_text()


def test_death_before_ready_fails_fast_with_log_tail(tmp_path):
    server, _ = standin(tmp_path, "--exit-before-ready", "3", ready_timeout_s=60)
    started = time.monotonic()
    with server, pytest.raises(ServerFailed) as failure:
        server.wait_ready()
    assert time.monotonic() - started < 10  # not the 60 s deadline
    assert "exited with code 3" in str(failure.value)
    assert "out of GPU memory (simulated)" in str(failure.value)


def test_never_ready_hits_the_deadline(tmp_path):
    server, _ = standin(tmp_path, "--ready-after", "3600", ready_timeout_s=1.0)
    with server, pytest.raises(ServerFailed, match=r"not ready after 1 s .*; its log ends: "
                               "standin: serving"):  # fmt: skip
        server.wait_ready()
    assert not group_alive(server.proc.pid)


def test_sigterm_ignored_means_sigkill_and_nothing_left(tmp_path):
    server, _ = standin(tmp_path, "--ignore-sigterm", "--spawn-child", stop_grace_s=1.0)
    server.start()
    server.wait_ready()
    result = server.stop()
    assert result["signal"] == "SIGKILL"
    assert result["left_behind"] is False
    assert "ignoring SIGTERM" in (tmp_path / "server.log").read_text()


def test_children_are_stopped_with_the_server(tmp_path):
    server, _ = standin(tmp_path, "--spawn-child")
    with server:
        server.wait_ready()
    log = (tmp_path / "server.log").read_text()
    child = int(log.split("child pid ")[1].split()[0])
    assert not pid_alive(child)  # gone, or a zombie its new parent has yet to reap


def test_an_exception_in_the_measured_code_still_tears_down(tmp_path):
    server, _ = standin(tmp_path)
    with pytest.raises(RuntimeError, match="load generator failed"):
        with server:
            server.wait_ready()
            raise RuntimeError("load generator failed")
    assert not group_alive(server.proc.pid)


def test_crash_during_load_is_seen(tmp_path):
    import json
    import urllib.request

    server, port = standin(tmp_path, "--crash-after-requests", "1")
    with server:
        server.wait_ready()
        body = json.dumps({"prompt": [1, 2], "max_tokens": 4, "ignore_eos": True}).encode()
        url = f"http://127.0.0.1:{port}/v1/completions"
        request = urllib.request.Request(url, data=body, method="POST")
        with urllib.request.urlopen(request, timeout=5) as response:
            assert json.loads(response.read())["usage"]["completion_tokens"] == 4
        with pytest.raises(OSError):
            urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"), timeout=5)
        time.sleep(0.3)
        assert not server.alive()
    assert "crashing during load" in (tmp_path / "server.log").read_text()


def test_expert_recorder_endpoints(tmp_path):
    server, port = standin(tmp_path)
    with server:
        server.wait_ready()
        base = f"http://127.0.0.1:{port}"
        assert expert_recorder(base, "start")["action"] == "start"
        assert expert_recorder(base, "stop")["action"] == "stop"
        assert expert_recorder(base, "dump") == {"logical_count": [[5, 0, 11], [2, 14, 0]]}


def test_engine_argv():
    sglang, vllm = engine("sglang"), engine("vllm")
    argv = sglang.argv("/models/glm", "127.0.0.1", 30000, ["--tp-size", 8], python="/py")
    assert argv == ["/py", "-m", "sglang.launch_server", "--model-path", "/models/glm",
                    "--host", "127.0.0.1", "--port", "30000", "--tp-size", "8"]  # fmt: skip
    assert vllm.argv("m", "127.0.0.1", 8000, []) == [
        "vllm", "serve", "m", "--host", "127.0.0.1", "--port", "8000"
    ]  # fmt: skip
    assert sglang.request_extras == {"ignore_eos": True}
    with pytest.raises(KeyError, match="unknown engine 'tgi'"):
        engine("tgi")


def test_glm5_example_reproduces_the_seed_server():
    """Every flag and NCCL variable of the seed's run_tp8.sh, through the sglang engine."""
    import yaml
    from snakemake.utils import update_config, validate
    from studylib.stages.decode.decode_plan import decode_plan, decode_variants, resolve_for_device

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    example = ROOT / "config" / "examples" / "glm5-nvfp4-8x-rtx-pro-6000.yaml"
    update_config(config, yaml.safe_load(example.read_text()))
    validate(config, str(ROOT / "config" / "schema.yaml"), set_default=True)
    assert decode_variants(config) == ["seed-graphs-off", "production-graphs-on"]
    plan = resolve_for_device(decode_plan(config, "seed-graphs-off"), "cuda")
    argv = engine("sglang").argv(plan["model"], plan["host"], plan["port"], plan["args"], "py",
                                 served_name="glm-5")  # fmt: skip
    # The seed's flags, in its order; the per-run served name (here the seed's) comes last.
    seed = (
        "py -m sglang.launch_server --model-path lukealonso/GLM-5-NVFP4 --host 0.0.0.0 "
        "--port 8000 --reasoning-parser glm45 --tool-call-parser "
        "glm47 --trust-remote-code --tp-size 8 --mem-fraction-static 0.92 "
        "--max-running-requests 1024 --kv-cache-dtype auto --quantization modelopt_fp4 "
        "--attention-backend flashinfer --fp8-gemm-backend cutlass --nsa-decode-backend trtllm "
        "--nsa-prefill-backend trtllm --moe-runner-backend flashinfer_cutlass "
        "--disable-cuda-graph --disable-radix-cache --served-model-name glm-5"
    )
    assert " ".join(argv) == seed
    assert plan["env"] == {
        "PYTHONUNBUFFERED": "1", "NCCL_IB_DISABLE": "1", "NCCL_P2P_LEVEL": "5",
        "NCCL_MIN_NCHANNELS": "8", "OMP_NUM_THREADS": "8", "SAFETENSORS_FAST_GPU": "1",
        "CUDA_HOME": "/usr/local/cuda-12.8",
    }  # fmt: skip
    production = resolve_for_device(decode_plan(config, "production-graphs-on"), "cuda")
    assert set(plan["args"]) - set(production["args"]) == {
        "--disable-cuda-graph", "--disable-radix-cache"
    }  # fmt: skip
    assert plan["gpus"] == 8 and plan["expert_distribution"] is True


def test_h200_x2_example_plans_tp2_and_ep2_with_their_nccl_environment():
    """The two-GPU example: TP2 graphs on and off, TP2 with the seed's NCCL settings and EP2,
    each on two GPUs, NVLink multicast off, beside the default's one-GPU variants; the
    table's ep and graphs cells; the seed's settings reach the server's environment."""
    import yaml
    from snakemake.utils import update_config, validate
    from studylib.stages.decode.decode_plan import decode_plan, decode_variants, resolve_for_device
    from studylib.stages.decode.decode_schema import cuda_graphs, expert_parallel

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(config, yaml.safe_load((ROOT / "config/examples/h200-x2.yaml").read_text()))
    validate(config, str(ROOT / "config" / "schema.yaml"), set_default=True)
    variants = decode_variants(config, "cuda")
    assert {"sglang-fp8-graphs-tp2", "sglang-fp8-eager-tp2", "sglang-fp8-graphs-ep2",
            "sglang-bf16-graphs", "sglang-fp8-graphs"} <= set(variants)  # fmt: skip
    assert "sglang-fp8-eager" not in variants  # off in the default, which this example extends
    facts = {}
    for name in ("sglang-fp8-graphs-tp2", "sglang-fp8-eager-tp2", "sglang-fp8-graphs-ep2",
                 "sglang-fp8-graphs-tp2-seed-nccl", "sglang-fp8-graphs"):  # fmt: skip
        plan = resolve_for_device(decode_plan(config, name), "cuda")
        argv = engine("sglang").argv(plan["model"], plan["host"], plan["port"], plan["args"],
                                     "py", served_name="s")  # fmt: skip
        facts[name] = (plan["gpus"], expert_parallel("sglang", plan["args"]),
                       cuda_graphs("sglang", plan["args"]),
                       (plan.get("env") or {}).get("NCCL_NVLS_ENABLE"),
                       argv[argv.index("--tp") + 1], plan["concurrency"])  # fmt: skip
    assert facts == {
        "sglang-fp8-graphs-tp2": (2, 1, True, "0", "2", [1, 16, 64, 256]),
        "sglang-fp8-eager-tp2": (2, 1, False, "0", "2", [1, 16, 64, 256]),
        "sglang-fp8-graphs-ep2": (2, 2, True, "0", "2", [1, 16, 64, 256]),
        "sglang-fp8-graphs-tp2-seed-nccl": (2, 1, True, "0", "2", [1, 16, 64, 256]),
        "sglang-fp8-graphs": (1, 1, True, None, "1", [1, 16, 64, 256, 512]),
    }  # fmt: skip
    seed = resolve_for_device(decode_plan(config, "sglang-fp8-graphs-tp2-seed-nccl"), "cuda")
    assert {k: v for k, v in seed["env"].items() if k.startswith("NCCL_")} == {
        "NCCL_NVLS_ENABLE": "0", "NCCL_IB_DISABLE": "1", "NCCL_P2P_LEVEL": "5",
        "NCCL_MIN_NCHANNELS": "8"}  # fmt: skip


def test_engine_argv_with_a_served_name():
    sglang, vllm, hf = engine("sglang"), engine("vllm"), engine("transformers")
    args = ["--served-model-name", "glm-5", "--tp-size", "8"]
    argv = sglang.argv("/m", "127.0.0.1", 1, args, python="py", served_name="study-x-1-ab")
    assert argv[-4:] == ["--tp-size", "8", "--served-model-name", "study-x-1-ab"]
    assert "glm-5" not in argv  # the run's own name replaces the configured one
    assert vllm.argv("m", "h", 1, [], served_name="n")[-2:] == ["--served-model-name", "n"]
    assert "n" not in hf.argv("m", "h", 1, [], served_name="n")  # it serves the path
    assert hf.request_model("/models/x", "n") == "/models/x"
    assert sglang.request_model("/models/x", "n") == "n"
    names = {run_served_name("graphs on/x") for _ in range(20)}
    assert len(names) == 20 and all(n.startswith("study-graphs-on-x-") for n in names)


def test_readiness_needs_this_runs_served_name(tmp_path):
    sglang = engine("sglang")
    server, port = standin(tmp_path, "--served-model-name", "someone-else")
    with server:
        server.wait_ready()  # the probe here asks for no name
        assert sglang.ready("127.0.0.1", port)
        assert sglang.ready("127.0.0.1", port, "standin", "someone-else")
        # A foreign server answering on the port is not taken for the one this run started.
        assert not sglang.ready("127.0.0.1", port, "standin", run_served_name("mine"))


def test_a_foreign_server_on_the_port_never_passes_for_ours(tmp_path):
    real = engine("sglang")
    sglang = real.__class__(**{**real.__dict__, "launch": (sys.executable, STANDIN)})
    foreign, port = standin(tmp_path, "--served-model-name", "foreign")
    name = run_served_name("v")
    ours = ServerProcess(
        sglang.argv("m", "127.0.0.1", port, [], served_name=name),
        tmp_path / "ours.log",
        ready=lambda: sglang.ready("127.0.0.1", port, "m", name),
        ready_timeout_s=1.0,
        poll_s=0.1,
    )
    with foreign:
        foreign.wait_ready()
        ours.port = None  # bypass the port check: as if the foreign server bound it later
        with ours, pytest.raises(ServerFailed):
            ours.wait_ready()  # ours cannot bind and exits, or is never seen as ready
        assert http_status(f"http://127.0.0.1:{port}/health") == 200  # still the foreign one


def test_a_port_in_use_is_refused_naming_its_holder(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        server = ServerProcess(
            [sys.executable, STANDIN, "--host", "127.0.0.1", "--port", str(port)],
            tmp_path / "server.log",
            ready=lambda: True,
            ready_timeout_s=20.0,
        )
        with pytest.raises(ServerFailed) as failure, server:
            pass
        message = str(failure.value)
        assert "\n" not in message
        assert f"port {port} on 127.0.0.1 is already in use" in message
        assert f"held by pid {os.getpid()} (" in message
        assert server.proc is None  # nothing was started
    assert port_holder(port) is None
    check_port_free("127.0.0.1", port)  # free again once closed


def test_a_port_held_by_a_running_server_names_its_command(tmp_path):
    first, port = standin(tmp_path, "--served-model-name", "first")
    with first:
        first.wait_ready()
        second, _ = standin(tmp_path)
        second.port = port
        with pytest.raises(ServerFailed) as failure:
            second.start()
        message = str(failure.value)
        assert (
            f"port {port} on 127.0.0.1 is already in use, held by pid {first.proc.pid}" in message
        )
        assert "standin_server.py" in message and "\n" not in message
        assert second.proc is None


def test_an_unknown_holder_is_said_so(monkeypatch):
    import studylib.instruments.serving.launcher as launcher

    monkeypatch.setattr(launcher, "port_holder", lambda port: None)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ServerFailed, match=r"in use, held by an unknown process$"):
            check_port_free("127.0.0.1", port)
