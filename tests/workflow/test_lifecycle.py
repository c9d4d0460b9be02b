"""The server never outlives its job: SIGKILL / SIGHUP / SIGTERM to the job, the death of its
parent (Snakemake), a real Snakemake killed with SIGKILL. Each case runs a small driver (the
job) that starts the stand-in server (with a grandchild, --spawn-child) through
ServerProcess and waits; after the kill, the server's group, its grandchild, the job and the
port must all be gone within a generous deadline."""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import ROOT, tiny_config
from studylib.instruments.serving.guard import (
    SHELLS,
    group_alive,
    pid_alive,
)
from test_serving import STANDIN, free_port

SCRIPTS = str(ROOT / "scripts")
DEADLINE_S = 60.0  # generous: every case normally finishes within a few seconds

DRIVER = textwrap.dedent(
    """
    import json, os, sys, time

    if "snakemake" in globals():  # run by Snakemake's script: directive
        p = snakemake.params
        scripts, standin, port, state = p.scripts, p.standin, int(p.port), p.state
        flags = list(p.flags)
    else:
        scripts, standin, port, state, *flags = sys.argv[1:]
        port = int(port)
    sys.path.insert(0, scripts)
    from studylib.instruments.serving.guard import protect_job

    protect_job(hard_exit_s=60)
    from studylib.instruments.serving.engines import engine
    from studylib.instruments.serving.launcher import ServerProcess, run_served_name

    eng = engine("sglang")
    name = run_served_name("lifecycle")
    server = ServerProcess(
        [sys.executable, standin, "--host", "127.0.0.1", "--port", str(port),
         "--served-model-name", name, "--spawn-child", *flags],
        os.path.join(os.path.dirname(state), "server.log"),
        ready=lambda: eng.ready("127.0.0.1", port, "standin", name),
        ready_timeout_s=30, poll_s=0.1, stop_grace_s=float(os.environ.get("GRACE", "5")),
    )
    with server:
        server.wait_ready()
        info = {"job": os.getpid(), "parent": os.getppid(), "server": server.proc.pid,
                "guard": server.guard.proc.pid}
        with open(state + ".tmp", "w") as f:
            json.dump(info, f)
        os.replace(state + ".tmp", state)
        while True:
            time.sleep(3600)
    """
)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def poll(condition, what: str, deadline_s: float = DEADLINE_S, proc=None):
    deadline = time.monotonic() + deadline_s
    while not condition():
        if proc is not None and proc.poll() is not None and not condition():
            raise AssertionError(f"{what}: the job's launcher exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {deadline_s:g} s")
        time.sleep(0.05)


class Case:
    """One driver run in tmp_path; whatever it started is killed at the end, pass or fail."""

    def __init__(self, tmp_path):
        self.dir = tmp_path
        self.port = free_port()
        self.driver = tmp_path / "driver.py"
        self.driver.write_text(DRIVER)
        self.state_path = tmp_path / "state.json"
        self.log = tmp_path / "server.log"
        self.procs: list[subprocess.Popen] = []
        self.state: dict = {}
        self.child: int | None = None

    def argv(self, *flags) -> list[str]:
        return [sys.executable, str(self.driver), SCRIPTS, STANDIN, str(self.port),
                str(self.state_path), *flags]  # fmt: skip

    def popen(self, argv, grace_s: float = 5.0, **kwargs) -> subprocess.Popen:
        env = dict(os.environ, GRACE=str(grace_s))
        out = open(self.dir / f"launched-{len(self.procs)}.out", "wb")  # noqa: SIM115
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, **kwargs)  # fmt: skip
        out.close()
        self.procs.append(proc)
        return proc

    def wait_serving(self, launcher: subprocess.Popen, deadline_s: float = DEADLINE_S) -> dict:
        poll(self.state_path.exists, "serving", deadline_s, proc=launcher)
        self.state = json.loads(self.state_path.read_text())
        self.child = int(re.search(r"standin: child pid (\d+)", self.log.read_text()).group(1))
        assert pid_alive(self.state["server"]) and pid_alive(self.child)
        assert not port_free(self.port)
        return self.state

    def nothing_left(self) -> bool:
        return (
            not group_alive(self.state["server"])
            and not pid_alive(self.child)
            and not pid_alive(self.state["job"])
            and not pid_alive(self.state["guard"])
            and port_free(self.port)
        )

    def assert_nothing_left(self):
        poll(self.nothing_left, "all gone (server group, grandchild, job, guard, port)")
        for proc in self.procs:
            proc.wait(timeout=10)  # gone (a zombie at most): reap what is ours

    def cleanup(self):
        pids = [p.pid for p in self.procs] + [self.state.get(k) for k in ("job", "guard")]
        with contextlib.suppress(ProcessLookupError, PermissionError, TypeError):
            os.killpg(self.state.get("server"), signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for pid in [*pids, self.child]:
            with contextlib.suppress(ProcessLookupError, PermissionError, TypeError):
                os.kill(pid, signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


@pytest.fixture
def case(tmp_path):
    c = Case(tmp_path)
    try:
        yield c
    finally:
        c.cleanup()


def test_job_killed_with_sigkill_leaves_nothing(case):
    # The server ignores SIGTERM: the guard must also escalate to SIGKILL.
    job = case.popen(case.argv("--ignore-sigterm"), grace_s=1.0)
    case.wait_serving(job)
    job.send_signal(signal.SIGKILL)
    case.assert_nothing_left()
    assert job.returncode == -signal.SIGKILL
    log = case.log.read_text()
    assert "guard: the job is gone without stopping its server" in log
    assert "SIGKILL" in log and "guard: nothing left" in log


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
def test_job_hung_up_or_terminated_stops_the_server_cleanly(case, sig):
    job = case.popen(case.argv())
    case.wait_serving(job)
    job.send_signal(sig)
    case.assert_nothing_left()
    assert job.returncode == 128 + sig  # the job's own clean exit, not a death by signal
    out = (case.dir / "launched-0.out").read_text()
    assert f"job: {signal.Signals(sig).name}: stopping the server" in out
    assert "guard: the job is gone" not in case.log.read_text()  # no need for the guard


def test_the_jobs_parent_killed_takes_the_job_and_server_down(case):
    # The parent stands in for Snakemake (which runs the job directly: bash execs it).
    parent = case.popen([sys.executable, "-c",
                         "import subprocess, sys; subprocess.run(sys.argv[1:])",
                         *case.argv()])  # fmt: skip
    state = case.wait_serving(parent)
    assert state["parent"] == parent.pid
    parent.send_signal(signal.SIGKILL)
    case.assert_nothing_left()
    out = (case.dir / "launched-0.out").read_text()
    assert "job: SIGTERM: stopping the server" in out  # PR_SET_PDEATHSIG


def test_a_shell_wrapper_between_parent_and_job_does_not_break_the_chain(case):
    # sh -c "...; exit" forks the job and stays: the job watches the shell's parent too.
    command = " ".join(f"'{a}'" for a in case.argv()) + "; exit $?"
    parent = case.popen([sys.executable, "-c",
                         "import subprocess, sys; subprocess.run(['sh', '-c', sys.argv[1]])",
                         command])  # fmt: skip
    state = case.wait_serving(parent)
    assert state["parent"] != parent.pid  # the shell sits between them
    parent.send_signal(signal.SIGKILL)
    case.assert_nothing_left()
    assert "job: SIGTERM: stopping the server" in (case.dir / "launched-0.out").read_text()


def test_snakemake_killed_with_sigkill_leaves_nothing(case):
    pytest.importorskip("snakemake")
    snakefile = case.dir / "Snakefile"
    snakefile.write_text(
        textwrap.dedent(
            f"""
            rule hold:
                output: "done.txt"
                params:
                    scripts={SCRIPTS!r}, standin={STANDIN!r}, port={case.port},
                    state={str(case.state_path)!r}, flags=[]
                script: "driver.py"
            """
        )
    )
    snakemake = case.popen([sys.executable, "-m", "snakemake", "-s", str(snakefile),
                            "-d", str(case.dir), "--cores", "1"], cwd=case.dir)  # fmt: skip
    state = case.wait_serving(snakemake, deadline_s=120)
    # Snakemake 9 runs the script through `bash -c "set -euo pipefail; python ..."`; bash
    # >= 5.1 execs the last command, so the job's parent is Snakemake (with an older shell
    # that forks, the job watches Snakemake through a pidfd instead).
    parent_comm = Path(f"/proc/{state['parent']}/comm").read_text().strip()
    assert state["parent"] == snakemake.pid or parent_comm in SHELLS
    snakemake.send_signal(signal.SIGKILL)
    case.assert_nothing_left()
    assert not (case.dir / "done.txt").exists()
    assert "job: SIGTERM: stopping the server" in (case.dir / "launched-0.out").read_text()


WORKER_JOB = textwrap.dedent(
    """
    import json, os, sys, time
    scripts, plan_path, state = sys.argv[1:]
    sys.path.insert(0, scripts)
    from studylib.instruments.worker_client import WorkerClient

    plan = json.load(open(plan_path))
    client = WorkerClient("torch", plan_path, open(os.devnull, "w"))
    client.start(120)
    # A power loop far longer than the test waits: the worker is busy when the job dies.
    client.send({"loop": plan["points"][0], "mode": "eager", "seconds": 600})
    with open(state + ".tmp", "w") as f:
        json.dump({"job": os.getpid(), "worker": client.proc.pid}, f)
    os.replace(state + ".tmp", state)
    while True:
        time.sleep(3600)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_measuring_worker_dies_with_its_job(tmp_path, sig):
    # The sweep's and the power loops' worker runs in its own session (so the job can kill
    # its group), out of reach of the signals that stop the job; busy in a loop it would not
    # read its closed stdin until the loop ends: the kernel must end it with the job.
    from snakemake.utils import validate
    from studylib.stages.kernel_power.kernel_power_plan import kernel_power_plan

    config = tiny_config()
    validate(config, str(ROOT / "config" / "schema.yaml"), set_default=True)
    config["device"] = "cpu"
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(kernel_power_plan(config, "torch")))
    state = tmp_path / "state.json"
    job = subprocess.Popen([sys.executable, "-c", WORKER_JOB, SCRIPTS, str(plan_path),
                            str(state)])  # fmt: skip
    worker = None
    try:
        poll(state.exists, "the worker's hello", proc=job)
        worker = json.loads(state.read_text())["worker"]
        assert pid_alive(worker)
        os.kill(job.pid, sig)
        job.wait(timeout=DEADLINE_S)
        poll(lambda: not pid_alive(worker), "the worker to die with its job")
    finally:
        with contextlib.suppress(ProcessLookupError):
            job.kill()
        job.wait()
        if worker is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker, signal.SIGKILL)


DROPPED_STOP_JOB = textwrap.dedent(
    """
    import os, signal, sys, time

    sys.path.insert(0, sys.argv[1])
    from studylib.instruments.serving.guard import protect_job

    protect_job(hard_exit_s=60)


    class Dropping:
        # Python prints and drops what a __del__ raises, as it does in a weakref callback
        # (importlib's module-lock callback, where a SIGTERM landed on 2026-12-03).
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs here, inside __del__
                pass


    Dropping()
    print("after the dropped stop", flush=True)
    for _ in range(100):
        time.sleep(0.1)
    print("still measuring", flush=True)
    """
)


def test_a_stop_python_drops_is_raised_again_where_it_propagates():
    # Deterministic: the job signals itself inside a __del__, so the handler's SystemExit
    # is raised where Python drops exceptions. The stop must still end the job, at once,
    # with one line and no traceback.
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", DROPPED_STOP_JOB, SCRIPTS], capture_output=True,
                          text=True, timeout=DEADLINE_S)  # fmt: skip
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert done.stderr.count("job: SIGTERM: stopping the server and exiting") == 1, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
    assert "still measuring" not in done.stdout
    assert time.monotonic() - t0 < DEADLINE_S / 2
