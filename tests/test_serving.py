"""Server launch, readiness and teardown against a stand-in that follows the engines' contract."""

import socket
import sys
import time

import pytest
from helpers import ROOT
from studylib.serving.engines import engine
from studylib.serving.engines.sglang_engine import expert_recorder
from studylib.serving.launcher import ServerFailed, ServerProcess, group_alive, http_status

STANDIN = str(ROOT / "tests" / "standin_server.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def standin(tmp_path, *flags, ready_timeout_s=20.0, stop_grace_s=5.0):
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
    )
    return server, port


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
    with server, pytest.raises(ServerFailed, match=r"not ready after 1 s; log tail:"):
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
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(child, 0)


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
    from studylib.plan import decode_plan, decode_variants, resolve_for_device

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    example = ROOT / "config" / "examples" / "glm5-nvfp4-8x-rtx-pro-6000.yaml"
    update_config(config, yaml.safe_load(example.read_text()))
    validate(config, str(ROOT / "config" / "schema.yaml"), set_default=True)
    assert decode_variants(config) == ["seed-graphs-off", "production-graphs-on"]
    plan = resolve_for_device(decode_plan(config, "seed-graphs-off"), "cuda")
    argv = engine("sglang").argv(plan["model"], plan["host"], plan["port"], plan["args"], "py")
    seed = (
        "py -m sglang.launch_server --model-path lukealonso/GLM-5-NVFP4 --host 0.0.0.0 "
        "--port 8000 --served-model-name glm-5 --reasoning-parser glm45 --tool-call-parser "
        "glm47 --trust-remote-code --tp-size 8 --mem-fraction-static 0.92 "
        "--max-running-requests 1024 --kv-cache-dtype auto --quantization modelopt_fp4 "
        "--attention-backend flashinfer --fp8-gemm-backend cutlass --nsa-decode-backend trtllm "
        "--nsa-prefill-backend trtllm --moe-runner-backend flashinfer_cutlass "
        "--disable-cuda-graph --disable-radix-cache"
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
