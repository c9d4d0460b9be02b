"""The server never outlives the job that started it, however the job ends.

Two halves, stdlib only:

* The guard: a small process started (in its own session) just before the server. It reads a
  pipe whose only write end the job holds. The job tells it the server's process group
  (``pgid N``) and, after a clean stop, ``release``. When the pipe reaches EOF without a
  release (the job died: SIGKILL, a crash, anything) or the guard gets SIGTERM, it stops the
  server: SIGTERM to the group and to every process carrying the run's token in its
  environment (descendants that left the group), a grace, then SIGKILL. Run as
  ``python guard.py TOKEN GRACE_S``.
* The job side (:func:`protect_job`, first thing in every Snakemake job, see
  ``snakemake_job.setup_logging``): the job dies with its Snakemake (``PR_SET_PDEATHSIG``, and
  the Snakemake named by ``STUDY_SNAKEMAKE`` watched through a pidfd; without it, the first
  non-shell ancestor), and SIGTERM / SIGHUP / SIGINT become ``SystemExit`` so ``with`` and
  ``finally`` blocks tear down cleanly (a server, a measuring worker; a journal keeps the
  finished points). If that teardown hangs, the job exits hard after ``hard_exit_s`` and the
  guard finishes the job. A job whose Snakemake is already gone when it starts (it died while
  the job imported its libraries) stops at once.

Snakemake 9 runs a ``script:`` as ``bash -c "set -euo pipefail; python script.py"`` from a
worker thread; bash >= 5.1 execs the last command, so the job's parent is Snakemake itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import select
import signal
import subprocess
import sys
import threading
import time

#: The environment variable carrying a run's token into the server and its descendants.
TOKEN_ENV = "STUDY_SERVER_GUARD"
#: The Snakemake a job belongs to, as :func:`process_id` (set by the workflow when Snakemake
#: reads it, rules/common.smk; its jobs inherit it).
RUN_ENV = "STUDY_SNAKEMAKE"
PR_SET_PDEATHSIG = 1
SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "mksh", "busybox"}


# ---------------------------------------------------------------- processes, from /proc


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat from the state on (index 0 = state), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def pid_alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    fields = _stat(pid)
    if fields is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not os.path.isdir("/proc")  # no /proc: trust kill(0)
    return fields[0] not in ("Z", "X")


def _all_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    members = []
    for pid in _all_pids():
        fields = _stat(pid)
        if fields and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(pid)
    return members


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process exists that we may not signal
        return True
    if not os.path.isdir("/proc"):
        return True
    return bool(group_members(pgid))  # zombies waiting for a reaper do not count


def token_pids(token: str) -> list[int]:
    """Live processes whose environment carries ``TOKEN_ENV=token`` (ours only: readable)."""
    needle = f"{TOKEN_ENV}={token}".encode()
    found = []
    for pid in _all_pids():
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if needle in environ.split(b"\0") and pid_alive(pid):
            found.append(pid)
    return found


def process_id(pid: int | None = None) -> str:
    """``"pid:start"``: a process, told apart from a later one given the same pid (its start
    time in clock ticks since boot, from /proc; the pid alone without /proc)."""
    pid = os.getpid() if pid is None else pid
    fields = _stat(pid)
    return f"{pid}:{fields[19]}" if fields and len(fields) > 19 else str(pid)


def id_pid(ident: str) -> int:
    return int(ident.split(":", 1)[0])


def process_alive(ident: str) -> bool:
    """Whether the process of :func:`process_id` ``ident`` still runs (not a later one with
    its pid, not a zombie)."""
    pid = id_pid(ident)
    if not pid_alive(pid):
        return False
    start = ident.partition(":")[2]
    fields = _stat(pid)
    return not start or fields is None or (len(fields) > 19 and fields[19] == start)


def cmdline(pid: int, limit: int = 200) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            text = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"
    text = " ".join(text.split())  # one line
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- stopping a server


def _signal_all(pgid: int | None, token: str | None, sig: int) -> bool:
    """Send ``sig`` to the group and the token's processes; whether any was there."""
    any_left = False
    if pgid is not None and group_alive(pgid):
        any_left = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for pid in token_pids(token) if token else []:
        any_left = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    return any_left


def _left(pgid: int | None, token: str | None) -> bool:
    return bool((pgid is not None and group_alive(pgid)) or (token and token_pids(token)))


def terminate(pgid: int | None, token: str | None, grace_s: float, say=print) -> bool:
    """SIGTERM, wait up to ``grace_s``, SIGKILL; True when nothing is left."""
    if not _signal_all(pgid, token, signal.SIGTERM):
        return True
    say(f"guard: SIGTERM to server group {pgid}")
    deadline = time.monotonic() + grace_s
    while _left(pgid, token) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _signal_all(pgid, token, signal.SIGKILL):
        say(f"guard: server group {pgid} outlived {grace_s:g} s: SIGKILL")
    deadline = time.monotonic() + 10
    while _left(pgid, token) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _left(pgid, token)


class _Stop(Exception):
    pass


def guard_main(argv: list[str]) -> int:
    """The guard process: wait for the job's pipe to close, then stop what it left."""
    token, grace_s = argv[0], float(argv[1])

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def on_term(*_):
        raise _Stop

    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, on_term)
    pgid, buffer = None, b""
    try:
        while True:
            chunk = os.read(0, 4096)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                word, _, value = line.decode().partition(" ")
                if word == "pgid":
                    pgid = int(value)
                elif word == "release":
                    return 0
    except _Stop:
        say("guard: SIGTERM")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finish the job once begun
    say("guard: the job is gone without stopping its server: stopping it")
    clean = terminate(pgid, token, grace_s, say)
    say("guard: nothing left" if clean else "guard: processes are still left")
    return 0 if clean else 1


class Guard:
    """The job's handle on its guard process (see the module's docstring)."""

    def __init__(self, token: str, grace_s: float, log_file=None):
        self.token = token
        self.proc = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__), token, str(grace_s)],
            stdin=subprocess.PIPE,
            stdout=log_file if log_file is not None else subprocess.DEVNULL,
            stderr=log_file if log_file is not None else subprocess.DEVNULL,
            start_new_session=True,  # signals to the job's group or session miss it
            env={k: v for k, v in os.environ.items() if k != TOKEN_ENV},
        )

    def _send(self, line: str) -> None:
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):  # the guard is gone, or the pipe already closed
            pass

    def arm(self, pgid: int) -> None:
        self._send(f"pgid {pgid}")

    def release(self, timeout: float = 10.0) -> None:
        """After a clean stop: the guard exits without touching anything."""
        self._send("release")
        self.close(timeout)

    def close(self, timeout: float = 0.0) -> None:
        """Close the pipe (without release the guard then stops what is left)."""
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        if timeout:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)


# ---------------------------------------------------------------- the job side


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def parent_pid(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[1]) if fields else 0


_HARD_EXIT = {"after_s": None, "armed": False}
_HARD_EXIT_LOCK = threading.Lock()


def _arm_hard_exit(signum: int) -> None:
    """Once: exit hard ``after_s`` from now, should the clean teardown hang (or never start,
    the main thread being stuck in native code)."""
    with _HARD_EXIT_LOCK:
        if _HARD_EXIT["after_s"] is None or _HARD_EXIT["armed"]:
            return
        _HARD_EXIT["armed"] = True
    after_s, name = _HARD_EXIT["after_s"], signal.Signals(signum).name

    def hard_exit():
        _leave_signals_to_main()
        time.sleep(after_s)
        print(f"job: teardown took over {after_s:g} s after {name}: exiting hard",
              file=sys.stderr, flush=True)  # fmt: skip
        os._exit(128 + signum)

    threading.Thread(target=hard_exit, daemon=True, name="hard-exit").start()


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _leave_signals_to_main() -> None:
    """Block the stop signals in the calling helper thread: a signal the kernel delivered to
    it would not interrupt the main thread's blocking call, so its handler would wait."""
    signal.pthread_sigmask(signal.SIG_BLOCK, (*STOP_SIGNALS, signal.SIGINT))


def _signal_main(sig: int) -> None:
    """``sig`` to the main thread itself (interrupting whatever it waits in)."""
    _arm_hard_exit(sig)
    signal.pthread_kill(threading.main_thread().ident, sig)


def _watch(pid: int, sig: int) -> None:
    """Send ``sig`` to the main thread when ``pid`` dies (pidfd; else poll its start time)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None

    def wait_pidfd():
        _leave_signals_to_main()
        select.select([fd], [], [])
        _signal_main(sig)

    def poll():
        _leave_signals_to_main()
        start = (_stat(pid) or [None] * 20)[19]
        while (_stat(pid) or [None] * 20)[19] == start and pid_alive(pid):
            time.sleep(0.5)
        _signal_main(sig)

    threading.Thread(target=wait_pidfd if fd is not None else poll, daemon=True,
                     name=f"watch-{pid}").start()  # fmt: skip


def die_with_parent(sig: int = signal.SIGTERM, watch: str | None = None) -> int | None:
    """This process gets ``sig`` when its parent dies (Linux: ``PR_SET_PDEATHSIG``, and a
    thread watching a process). ``watch``, a :func:`process_id`, names the process this one
    must not outlive (a job's Snakemake, a worker's job): it is watched, and if it is already
    gone (it died while this process started) ``sig`` comes at once. Without it the parent is
    watched; a shell parent (a ``bash -c`` or ``sh -c`` wrapper) does not die with its own
    parent, so the first non-shell ancestor is. The pid watched, or None."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent or (watch and not process_alive(watch)):
        # the parent died before the prctl took effect, or what we follow is already gone
        os.kill(os.getpid(), sig)
        return None
    if watch:
        _watch(id_pid(watch), sig)
        return id_pid(watch)
    ancestor = parent
    while ancestor > 1 and comm(ancestor) in SHELLS:
        ancestor = parent_pid(ancestor)
    if ancestor <= 1:
        return None
    _watch(ancestor, sig)
    return ancestor


#: The stop a signal asked for: its number, and whether its SystemExit must be raised again
#: (Python dropped it: :func:`_stop_dropped`).
_STOP = {"signum": None, "again": False}


def _stop_dropped(unraisable, previous) -> None:
    """``sys.unraisablehook`` while :func:`stop_on_signals` holds: where a signal's handler
    runs inside code whose exceptions Python prints and drops (a weakref callback, a
    ``__del__``: on 2026-12-03 a SIGTERM landed in importlib's module-lock callback and the
    job went on measuring, a traceback in its log), the stop is signalled again, to be
    raised where it propagates; anything else goes to the previous hook. The signal comes
    from a thread a moment later: sent from here, its handler would run inside this hook,
    whose exceptions Python drops too. Dropped again, it is sent again."""
    exc_type = getattr(unraisable, "exc_type", None)
    if exc_type is not None and issubclass(exc_type, SystemExit) and _STOP["signum"]:
        _STOP["again"] = True
        again = threading.Timer(0.05, os.kill, (os.getpid(), _STOP["signum"]))
        again.daemon = True
        again.start()
        return
    previous(unraisable)


def stop_on_signals(signals=STOP_SIGNALS, hard_exit_s: float = 300.0,
                    doing: str = "stopping the server"):  # fmt: skip
    """Turn ``signals`` into ``SystemExit(128 + signum)`` in the main thread, once: the
    ``with`` blocks unwind and stop the server. Later signals are ignored while that runs
    (unless Python dropped the first: :func:`_stop_dropped`); after ``hard_exit_s`` the
    process exits hard (its guard then stops the server)."""
    _HARD_EXIT["after_s"] = hard_exit_s

    def handler(signum, _frame):
        if _STOP["signum"] is not None:
            if not _STOP["again"]:
                return
            _STOP["again"] = False
            raise SystemExit(128 + _STOP["signum"])
        _STOP["signum"] = signum
        name = signal.Signals(signum).name
        print(f"job: {name}: {doing} and exiting", file=sys.stderr, flush=True)
        _arm_hard_exit(signum)
        raise SystemExit(128 + signum)

    for sig in signals:
        signal.signal(sig, handler)
    hook = sys.unraisablehook
    if getattr(hook, "func", None) is not _stop_dropped:
        sys.unraisablehook = functools.partial(_stop_dropped, previous=hook)


_PROTECTED: list[bool] = []


def protect_job(hard_exit_s: float = 300.0, doing: str = "stopping the server") -> None:
    """First thing in a Snakemake job: die with its Snakemake (``RUN_ENV``; else the parent),
    and stop cleanly on SIGTERM / SIGHUP / SIGINT (Ctrl-C: one line in the log, no
    traceback). Once per process: the first call's ``hard_exit_s`` holds (a decode job's
    server needs longer to stop than a sweep's worker)."""
    if _PROTECTED:
        return
    _PROTECTED.append(True)
    stop_on_signals((*STOP_SIGNALS, signal.SIGINT), hard_exit_s, doing)
    die_with_parent(signal.SIGTERM, os.environ.get(RUN_ENV) or None)


if __name__ == "__main__":
    sys.exit(guard_main(sys.argv[1:]))
