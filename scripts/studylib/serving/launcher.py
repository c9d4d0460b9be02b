"""Start an inference server, wait until it is really ready, and tear it down leaving nothing.

The server runs in its own process group (``start_new_session``) with its output in a log
file. Readiness is the engine's probe (SGLang and vLLM: ``/health`` answers 200); a server
that exits, or is not ready by the deadline, fails with the tail of its log. Teardown sends
SIGTERM to the whole group, waits, then SIGKILL, and checks that no process of the group is
left (and, where NVML is available, that none of them still holds GPU memory).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("study.serving")


class ServerFailed(RuntimeError):
    """The server died, never became ready, or could not be stopped cleanly."""


def log_tail(path: str | os.PathLike, lines: int = 40) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def http_status(url: str, timeout: float = 5.0) -> int | None:
    """The HTTP status of GET ``url``, or None when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError, TimeoutError):
        return None


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # a process exists that we may not signal
        return True


class ServerProcess:
    """One server process group. Use as a context manager: it is always torn down."""

    def __init__(
        self,
        argv: list[str],
        log_path: str | os.PathLike,
        ready: Callable[[], bool],
        env: dict | None = None,
        ready_timeout_s: float = 600.0,
        poll_s: float = 1.0,
        stop_grace_s: float = 30.0,
    ):
        self.argv = argv
        self.log_path = Path(log_path)
        self.ready = ready
        self.env = env
        self.ready_timeout_s = ready_timeout_s
        self.poll_s = poll_s
        self.stop_grace_s = stop_grace_s
        self.proc: subprocess.Popen | None = None
        self.ready_after_s: float | None = None
        self.stop_result: dict | None = None

    def start(self) -> ServerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, **(self.env or {}))
        env.setdefault("PYTHONUNBUFFERED", "1")
        log.info("starting: %s", " ".join(self.argv))
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            log_file.close()
            raise ServerFailed(f"cannot start {self.argv[0]}: {exc}") from exc
        self._log_file = log_file
        return self

    def wait_ready(self) -> float:
        """Seconds until the probe passed; ServerFailed (with the log's tail) otherwise."""
        assert self.proc is not None
        started = time.monotonic()
        deadline = started + self.ready_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerFailed(
                    f"server exited with code {code} before it was ready; log tail:\n"
                    + log_tail(self.log_path)
                )
            if self.ready():
                self.ready_after_s = time.monotonic() - started
                log.info("ready after %.1f s", self.ready_after_s)
                return self.ready_after_s
            if time.monotonic() >= deadline:
                raise ServerFailed(
                    f"server not ready after {self.ready_timeout_s:g} s; log tail:\n"
                    + log_tail(self.log_path)
                )
            time.sleep(self.poll_s)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> dict:
        """SIGTERM the group, wait, SIGKILL what is left; report how it went."""
        if self.proc is None:
            return {"stopped": "never started"}
        pgid = self.proc.pid  # the leader of its own session: pgid == pid
        result = {"signal": None, "stop_s": 0.0}
        started = time.monotonic()
        if group_alive(pgid):
            os.killpg(pgid, signal.SIGTERM)
            result["signal"] = "SIGTERM"
            deadline = started + self.stop_grace_s
            while group_alive(pgid) and time.monotonic() < deadline:
                self.proc.poll()  # reap the leader so the group check can see it gone
                time.sleep(0.1)
            if group_alive(pgid):
                log.warning("server group %d ignored SIGTERM for %gs: SIGKILL", pgid,
                            self.stop_grace_s)  # fmt: skip
                os.killpg(pgid, signal.SIGKILL)
                result["signal"] = "SIGKILL"
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for _ in range(50):  # children reparented to init are reaped by it
            if not group_alive(pgid):
                break
            time.sleep(0.1)
        result["stop_s"] = time.monotonic() - started
        result["left_behind"] = group_alive(pgid)
        self.stop_result = result
        self._log_file.close()
        if result["left_behind"]:
            raise ServerFailed(f"processes of server group {pgid} are still running")
        return result

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False


def gpu_memory_held_by(pids: set[int]) -> list[dict]:
    """Processes among ``pids`` that still hold GPU memory, per NVML (empty without NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML: nothing can be checked here
        return []
    held = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid in pids:
                held.append({"gpu": index, "pid": proc.pid, "bytes": proc.usedGpuMemory})
    return held
