"""A measurement worker (``worker.py``) seen from the job that runs it: start it, send it
points or loops, read its answers, and kill it with everything it started.

Used by the sweep (one point at a time) and by the kernel-power loops (one worker per GPU).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from .serving.guard import process_id

SCRIPTS_DIR = Path(__file__).resolve().parents[2]


#: The least time a worker gets to start and say hello (imports, CUDA context).
START_TIMEOUT_S = 300.0


class WorkerGone(Exception):
    """The worker died or hung; the message says which."""

    def __init__(self, message: str, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


class WorkerClient:
    """A worker process and the pipes to it."""

    def __init__(self, backend: str, plan_path: Path, log_stream=None, env: dict | None = None):
        self.backend = backend
        self.plan_path = plan_path
        self.env = env or {}  # on top of ours, e.g. the one GPU this worker may use
        self.log_stream = log_stream if log_stream is not None else sys.stderr
        self.proc: subprocess.Popen | None = None
        self.buffer = b""

    def start(self, timeout: float) -> dict:
        """Start the worker and wait for its hello: at least ``START_TIMEOUT_S``, whatever
        the point timeout (importing torch and a backend, and a first CUDA context, can
        outlast a short point timeout on a loaded machine without anything being wrong)."""
        timeout = max(timeout, START_TIMEOUT_S)
        read_fd, write_fd = os.pipe()
        env = {**os.environ, **self.env}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SCRIPTS_DIR), env.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        cmd = [
            sys.executable, "-m", "studylib.instruments.worker", "--backend", self.backend,
            "--plan", str(self.plan_path), "--result-fd", str(write_fd),
            "--parent", process_id(),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=self.log_stream,
            stderr=self.log_stream,
            pass_fds=(write_fd,),
            env=env,
            # Its own process group, killed whole by stop(); the worker dies with this job
            # if the job dies first (serving.guard.die_with_parent).
            start_new_session=True,
        )
        os.close(write_fd)
        self.read_fd = read_fd
        self.buffer = b""
        return self.receive(timeout)["hello"]

    def measure(self, point: dict, timeout: float) -> dict:
        return self.request({"point": point}, timeout)

    def request(self, message: dict, timeout: float) -> dict:
        self.send(message)
        return self.receive(timeout)

    def send(self, message: dict) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerGone(self._death()) from None

    def receive(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerGone(f"timed out after {timeout:g} s (worker killed)", True)
            ready, _, _ = select.select([self.read_fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                raise WorkerGone(self._death())
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def _death(self) -> str:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return "worker closed its result pipe but did not exit"
        if code < 0:
            return f"worker killed by signal {signal.Signals(-code).name}"
        return f"worker exited with code {code}"

    def stop(self, grace_s: float = 5.0) -> None:
        """Ask politely (close its stdin, wait up to ``grace_s``), then kill the whole process
        group. A job that is being stopped gives no grace: the point in progress is lost
        anyway, and the worker would finish it first."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        else:
            # The worker may have left children (compilers, JIT builds) in its group.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.close(self.read_fd)
