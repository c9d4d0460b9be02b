"""Server start failures (issue 33, deliverable 6) and IPv6 hosts (deliverable 4): one test per
row of docs/faults.md marked S.

A start that cannot work stops before anything starts (a port in use, arguments that repeat a
flag the study sets, a context beyond the model's positions), and one that fails says so on
one line: the server's exit with its log's reason, no traceback in the job's log. No test
here times anything: a failure that stopped at the server's exit says "exited", one that
waited for the deadline would say "not ready after".
"""

import json
import os
import socket
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
from helpers import ROOT
from studylib.instruments.serving.engines import engine
from studylib.instruments.serving.launcher import ServerFailed, log_reason, url_host
from studylib.stages.decode.decode_run import run_decode
from test_serving import STANDIN, free_port


def _standin_sglang(monkeypatch):
    # The stand-in answers SGLang's contract; run it through the sglang engine's argv prefix.
    import studylib.stages.decode.decode_run as decode

    real = engine("sglang")
    standin = real.__class__(**{**real.__dict__, "launch": (sys.executable, STANDIN)})
    monkeypatch.setattr(decode, "get_engine", lambda name: standin)


def _plan(host="127.0.0.1", port=None, args=(), **extra) -> dict:
    return {
        "engine": "sglang", "variant": "v", "model": "standin", "model_kind": "path",
        "args": list(args), "host": host, "port": port or free_port(), "concurrency": [2],
        "input_len": 4, "output_len": 6, "min_steady_s": 0.3, "idle_s": 0.1,
        "ready_timeout_s": 600, "sample_hz": 20, "vocab_size": 1000, **extra,
    }  # fmt: skip


@pytest.mark.parametrize("host, url", [
    ("127.0.0.1", "127.0.0.1"), ("localhost", "localhost"), ("::1", "[::1]"),
    ("fe80::1", "[fe80::1]"), ("::", "[::1]"), ("0.0.0.0", "127.0.0.1"),
])  # fmt: skip
def test_a_url_names_an_ipv6_host_in_brackets(host, url):
    assert url_host(host) == url
    assert engine("sglang").base_url(host, 30000) == f"http://{url}:30000"


def _free_ipv6_port() -> int:
    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        return s.getsockname()[1]


def test_an_ipv6_host_serves_and_loads_end_to_end(tmp_path, monkeypatch):
    """host: "::1" started the server, then the load crashed building an unbracketed URL."""
    _standin_sglang(monkeypatch)
    summary = run_decode(_plan("::1", _free_ipv6_port()), tmp_path / "out")
    assert summary["valid"].all() and (summary["errors"] == 0).all()
    assert (summary["output_tok_s"] > 0).all()
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert "--host ::1" in " ".join(run["argv"]) and run["teardown"]["left_behind"] is False
    requests = pd.read_parquet(tmp_path / "out" / "requests.parquet")
    assert (requests["error"] == "").all()


@pytest.mark.parametrize("family, host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_a_port_in_use_stops_before_anything_starts(tmp_path, monkeypatch, family, host):
    _standin_sglang(monkeypatch)
    with socket.socket(family) as holder:
        holder.bind((host, 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ServerFailed) as failure:
            run_decode(_plan(host, port), tmp_path / "out")
    message = str(failure.value)
    assert message.startswith(f"port {port} on {host} is already in use, held by pid "
                              f"{os.getpid()} (")  # fmt: skip
    assert "\n" not in message
    # Nothing started: no idle window was written, no server log.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []


ARGS = [
    ("repeated-port", ["--port", "30001"],
     "variant v: args: --port is set by the study itself (decode.port): remove it from args"),
    ("repeated-flag", ["--tp", "1", "--tp", "2"],
     "variant v: args: --tp is given twice (arguments 1 and 3): give it once"),
]  # fmt: skip


@pytest.mark.parametrize("args, message", [a[1:] for a in ARGS], ids=[a[0] for a in ARGS])
def test_args_that_repeat_a_flag_stop_before_the_server_starts(tmp_path, monkeypatch, args,
                                                               message):  # fmt: skip
    """A second --port made the server listen where the readiness probe never looked: the
    job waited the whole readiness timeout (30 minutes) without naming the duplicate."""
    _standin_sglang(monkeypatch)
    with pytest.raises(ServerFailed) as failure:
        run_decode(_plan(args=args), tmp_path / "out")
    assert str(failure.value) == message
    assert not (tmp_path / "out" / "server.log").exists()


def test_a_context_beyond_the_served_models_positions_stops_the_job(tmp_path, monkeypatch):
    """A model given by path, whose config.json the config check could not read."""
    _standin_sglang(monkeypatch)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 8}))
    with pytest.raises(ServerFailed) as failure:
        run_decode(_plan(model=str(model)), tmp_path / "out")
    assert str(failure.value) == (
        "variant v: input_len (4) + output_len (6) = 10 tokens per request, beyond the 8 "
        f"positions of the served model (max_position_embeddings in {model}/config.json): the "
        "model cannot serve that context"
    )


def test_a_context_flag_in_args_is_the_served_context(tmp_path, monkeypatch):
    _standin_sglang(monkeypatch)
    with pytest.raises(ServerFailed, match=r"beyond the 9 positions of the served model "
                       r"\(--context-length in its args\)"):  # fmt: skip
        run_decode(_plan(args=["--context-length", "9"]), tmp_path / "out")


SGLANG_DEATH = """launcher: starting python -m sglang.launch_server --port 30000
Traceback (most recent call last):
  File "scheduler.py", line 1, in run_scheduler_process
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB
[2026-12-01 10:00:00] Received sigquit from a child process. It usually means the child failed.
"""


@pytest.mark.parametrize("tail, reason", [
    (SGLANG_DEATH, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    ("launcher: starting x\nloading\nbye\n", "bye"),
    ("launcher: starting x\n", ""),
])  # fmt: skip
def test_the_one_line_names_the_logs_error_not_its_last_words(tail, reason):
    assert log_reason(tail) == reason


# --- what the job's log shows (Snakemake prints it under "Logfile ...") ----------------------

JOB = """
import socket, sys, types
sys.path[:0] = [{scripts!r}]
from studylib.snakemake_job import setup_logging
from studylib.instruments.serving.launcher import ServerProcess, check_port_free
setup_logging(types.SimpleNamespace(log=[{log!r}], input=[], rule="decode"))
"""

SCENARIOS = {
    "exits-before-ready": """
server = ServerProcess([sys.executable, {standin!r}, "--port", "{port}", "--exit-before-ready",
                        "3"], {server_log!r}, ready=lambda: False, ready_timeout_s=600,
                       poll_s=0.1)
with server:
    server.wait_ready()
""",
    "port-in-use": """
holder = socket.socket()
holder.bind(("127.0.0.1", 0))
holder.listen()
check_port_free("127.0.0.1", holder.getsockname()[1])
""",
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_start_failure_is_one_line_in_the_jobs_log(tmp_path, scenario):
    log, server_log = tmp_path / "job.log", tmp_path / "server.log"
    fields = {"scripts": str(ROOT / "scripts"), "log": str(log), "standin": STANDIN,
              "port": free_port(), "server_log": str(server_log)}  # fmt: skip
    code = textwrap.dedent(JOB).format(**fields) + SCENARIOS[scenario].format(**fields)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    text = log.read_text()
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in text and "Traceback" not in proc.stderr
    errors = [line for line in text.splitlines() if " ERROR study.decode: " in line]
    assert len(errors) == 1, text
    if scenario == "exits-before-ready":
        assert errors[0].endswith(
            "the server exited with code 3 before it was ready: standin: fatal: out of GPU "
            "memory (simulated)"
        )
        # The log's tail follows as context, indented (Snakemake removes a failed job's
        # outputs, the server's log among them: its lines are kept here).
        lines = text.splitlines()
        assert lines[lines.index(errors[0]) + 1] == f"  the last lines of its log, {server_log}:"
        assert "    standin: fatal: out of GPU memory (simulated)" in lines
    else:
        assert " is already in use, held by pid " in errors[0]
