"""Start an inference server, wait until it is really ready, and tear it down leaving nothing.

Before starting, the server's host:port must be free (else ServerFailed names the process
holding it). The server runs in its own process group (``start_new_session``) with its
output in a log file, beside a guard process (``guard.py``) that stops it if this job dies
without doing so. Readiness is the engine's probe (SGLang and vLLM: ``/health`` answers 200
and ``/v1/models`` lists this run's served name); a server that exits, or is not ready by
the deadline, fails with the tail of its log. Teardown sends SIGTERM to the whole group,
waits, then SIGKILL, and checks that no process of the group (or carrying the run's token)
is left (and, where NVML is available, that none of them still holds GPU memory).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from .guard import TOKEN_ENV, Guard, cmdline, group_alive, group_members, terminate, token_pids

__all__ = ["ServerFailed", "ServerProcess", "check_port_free", "group_alive", "http_status",
           "port_holder", "run_served_name", "url_host"]  # fmt: skip

log = logging.getLogger("study.serving")


class ServerFailed(RuntimeError):
    """The server died, never became ready, or could not be stopped cleanly. Its first line
    says what happened (one line for the user); the lines after it, if any, are context (the
    server log's tail)."""


#: Where a server can be reached from this machine when it listens on every address.
_UNSPECIFIED = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def url_host(host: str) -> str:
    """``host`` as a client on this machine writes it in a URL: an IPv6 literal in brackets
    (``[::1]``), an any-address (``0.0.0.0``, ``::``) as this machine's loopback."""
    host = _UNSPECIFIED.get(str(host), str(host))
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def log_tail(path: str | os.PathLike, lines: int = 40) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:])


#: A log line that says what went wrong (an exception's last line, an error, a fatal signal).
_ERROR_LINE = re.compile(r"(Error|Exception|error:|Errno|[Ff]atal|FAILED|Killed)")


def log_reason(tail: str) -> str:
    """The line of a server log's tail that says why it stopped: the last one that reads as an
    error (a traceback's exception, not the lines after it such as SGLang's "Received sigquit
    from a child process"), else the last line; '' for an empty log."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("launcher: ")]
    errors = [line for line in lines if _ERROR_LINE.search(line)]
    return (errors or lines or [""])[-1][:300]


def failed_with_log(headline: str, log_path: str | os.PathLike) -> ServerFailed:
    """ServerFailed: ``headline`` and the log's reason on one line, then the log's tail."""
    tail = log_tail(log_path)
    reason = log_reason(tail)
    line = f"{headline}: {reason}" if reason else f"{headline} (its log is empty)"
    context = "\n".join(f"    {part}" for part in tail.splitlines())
    return ServerFailed(f"{line}\n  the last lines of its log, {log_path}:\n{context}")


def http_status(url: str, timeout: float = 5.0) -> int | None:
    """The HTTP status of GET ``url``, or None when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError, TimeoutError):
        return None


def run_served_name(variant: str) -> str:
    """A served-model name no other run uses: readiness then knows the server is ours."""
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in variant)
    return f"study-{safe}-{os.getpid()}-{secrets.token_hex(4)}"


def _proc_net_inodes(port: int) -> list[str]:
    """Socket inodes bound to local ``port`` (listening ones first), from /proc/net/tcp*."""
    listening, other = [], []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or int(fields[1].rsplit(":", 1)[1], 16) != port:
                continue
            if fields[9] != "0":
                (listening if fields[3] == "0A" else other).append(fields[9])
    return listening + other


def port_holder(port: int) -> tuple[int, str] | None:
    """(pid, command line) of a process holding a socket on local TCP ``port``, if visible."""
    inodes = _proc_net_inodes(port)
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]": rank for rank, inode in enumerate(inodes)}
    best = None
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{name}/fd/{fd}")
            except OSError:
                continue
            rank = wanted.get(target)
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, int(name))
    return None if best is None else (best[1], cmdline(best[1]))


def check_port_free(host: str, port: int) -> None:
    """ServerFailed (one line, naming the holder where it can be found) unless a server
    could bind ``host:port`` now."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except OSError as exc:
        raise ServerFailed(f"cannot resolve server address {host}:{port}: {exc}") from None
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do
        try:
            sock.bind(address)
            return
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise ServerFailed(f"cannot bind {host}:{port}: {exc.strerror}") from None
    holder = port_holder(port)
    who = (f"held by pid {holder[0]} ({holder[1]})" if holder
           else "held by an unknown process")  # fmt: skip
    raise ServerFailed(f"port {port} on {host} is already in use, {who}")


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value of ``flag`` in a server's argv (``--flag value`` or ``--flag=value``)."""
    for i, part in enumerate(argv):
        if part == flag and i + 1 < len(argv):
            return argv[i + 1]
        if part.startswith(flag + "="):
            return part.split("=", 1)[1]
    return None


class ServerProcess:
    """One server process group. Use as a context manager: it is always torn down.

    ``host`` / ``port`` (default: the argv's ``--host`` / ``--port``) must be free before the
    start. A guard process stops the server should this process die before ``stop()``.

    ``gate``: (the environment variable, the file) of a gated start (an engine's
    ``gated_launch``): ``start()`` may come early, while another job holds the GPU, and the
    server goes on to its GPU work once ``open_gate()`` has made the file; ``wait_ready()``
    then times that part alone (``ready_after_s``) and ``gate_record`` says how long it ran
    before.
    """

    def __init__(
        self,
        argv: list[str],
        log_path: str | os.PathLike,
        ready: Callable[[], bool],
        *,
        ready_timeout_s: float,
        env: dict | None = None,
        poll_s: float = 1.0,
        stop_grace_s: float = 30.0,
        host: str | None = None,
        port: int | None = None,
        gate: tuple[str, Path] | None = None,
    ):
        self.argv = [str(a) for a in argv]
        self.gate = gate
        self.gate_record: dict | None = None
        self._started_at: float | None = None
        self.log_path = Path(log_path)
        self.ready = ready
        self.env = env
        self.ready_timeout_s = ready_timeout_s
        self.poll_s = poll_s
        self.stop_grace_s = stop_grace_s
        self.host = host or flag_value(self.argv, "--host") or "127.0.0.1"
        port = port if port is not None else flag_value(self.argv, "--port")
        self.port = int(port) if port is not None else None
        self.proc: subprocess.Popen | None = None
        self.guard: Guard | None = None
        self.token = secrets.token_hex(8)
        self.ready_after_s: float | None = None
        self.stop_result: dict | None = None

    def start(self) -> ServerProcess:
        if self.port is not None:
            check_port_free(self.host, self.port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, **(self.env or {}))
        env.setdefault("PYTHONUNBUFFERED", "1")
        env[TOKEN_ENV] = self.token  # marks the server and every descendant as this run's
        if self.gate is not None:
            self.gate[1].unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # its folder, where nothing else is left
                self.gate[1].parent.rmdir()
            env[self.gate[0]] = str(self.gate[1])
        log.info("starting: %s", " ".join(self.argv))
        log_file.write(f"launcher: starting {shlex.join(self.argv)}\n".encode())
        # The guard first: from the server's start on, this job's death stops the server.
        try:
            self.guard = Guard(self.token, self.stop_grace_s, log_file)
        except OSError as exc:
            log_file.close()
            raise ServerFailed(f"cannot start the server's guard: {exc}") from exc
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
            self.guard.release()
            log_file.close()
            raise ServerFailed(f"cannot start {self.argv[0]}: {exc}") from exc
        self.guard.arm(self.proc.pid)
        self._log_file = log_file
        self._started_at = time.monotonic()
        return self

    def gpu_memory(self) -> list[dict]:
        """GPU memory the server's processes hold now, per NVML (empty without NVML): a
        gated start's before its gate opens says whether it kept off the GPU."""
        if self.proc is None:
            return []
        return gpu_memory_held_by({self.proc.pid, *group_members(self.proc.pid),
                                   *token_pids(self.token)})  # fmt: skip

    def open_gate(self) -> None:
        """Let a gated start go on to its GPU work (once; nothing without a gate)."""
        if self.gate is None or self.gate_record is not None:
            return
        self.gate[1].parent.mkdir(parents=True, exist_ok=True)
        self.gate[1].touch()
        self.gate_record = {"before_gate_s": time.monotonic() - self._started_at}
        log.info("gate opened %.1f s after the start", self.gate_record["before_gate_s"])

    def wait_ready(self) -> float:
        """Seconds until the probe passed (a gated start's: since its gate opened, which this
        opens if it is not yet); ServerFailed (with the log's tail) otherwise."""
        assert self.proc is not None
        self.open_gate()
        started = time.monotonic()
        deadline = started + self.ready_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                raise failed_with_log(
                    f"the server exited with code {code} before it was ready", self.log_path
                )
            if self.ready():
                self.ready_after_s = time.monotonic() - started
                log.info("ready after %.1f s", self.ready_after_s)
                return self.ready_after_s
            if time.monotonic() >= deadline:
                raise failed_with_log(
                    f"the server was not ready after {self.ready_timeout_s:g} s "
                    "(decode.ready_timeout_s); its log ends",
                    self.log_path,
                )
            time.sleep(self.poll_s)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> dict:
        """SIGTERM the group, wait, SIGKILL what is left; report how it went."""
        if self.proc is None:
            return {"stopped": "never started"}
        if self.stop_result is not None:
            return self.stop_result
        pgid = self.proc.pid  # the leader of its own session: pgid == pid
        result = {"signal": None, "stop_s": 0.0}
        pids = {pgid, *group_members(pgid), *token_pids(self.token)}
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
        if self.gate is not None:
            self.gate[1].unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # its folder, where nothing else is left
                self.gate[1].parent.rmdir()
        for _ in range(50):  # children reparented to init are reaped by it
            if not group_alive(pgid):
                break
            time.sleep(0.1)
        strays = token_pids(self.token)  # descendants that left the group
        if strays:
            log.warning("server processes %s left its group: stopping them", strays)
            result["strays"] = strays
            terminate(None, self.token, min(self.stop_grace_s, 5.0), log.warning)
        result["stop_s"] = time.monotonic() - started
        result["left_behind"] = group_alive(pgid) or bool(token_pids(self.token))
        result["gpu_memory_left"] = gpu_memory_held_by(pids)
        self.stop_result = result
        if result["left_behind"]:
            self.guard.close()  # without release: the guard keeps trying
        else:
            self.guard.release()
        self._log_file.close()
        if result["left_behind"]:
            raise ServerFailed(f"processes of server group {pgid} are still running")
        return result

    def __enter__(self) -> ServerProcess:
        return self if self.proc is not None else self.start()  # a gated one started early

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
