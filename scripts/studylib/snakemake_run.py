"""What each Snakemake in this folder does as it reads the workflow (rules/common.smk), and
before its first job.

* Its jobs know it: ``STUDY_SNAKEMAKE`` (``serving.guard.RUN_ENV``) names this Snakemake.
  Every job dies with it (``serving.guard.protect_job``, called by
  ``snakemake_job.setup_logging``) and records it beside the devices it holds
  (``instruments/gpu_slots.py``), so that a job of another Snakemake is told apart.
* Snakemake's own locks (``.snakemake/locks/``) stay behind when it is killed (SIGKILL,
  SIGHUP), and the next run would stop with "Directory cannot be locked" until
  ``--unlock``. Every Snakemake of this workflow holds a shared lock on
  ``.snakemake/study-runs.lock`` for its life: when none does and no other Snakemake
  process works in this folder, nothing owns those locks, and they are removed, in one line.
* Before its first job (``onstart``, after Snakemake's own lock, before it removes any
  output of the jobs it will run): a measuring job of another live Snakemake making one of
  those outputs stops the run at once (Snakemake's own lock would not: the first Snakemake
  to end removes every run's lock files); a job left running by a Snakemake that is gone,
  holding a device, is waited for (it stops by itself in seconds), and one still there
  stops the run. One line naming the job, nothing run and nothing removed. ``kill -INT`` of
  Snakemake alone is passed on to its jobs, as a terminal's Ctrl-C would reach them, and
  ``kill -TERM`` (Snakemake's graceful stop) can no longer hang Snakemake.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import threading
import time
from pathlib import Path

from .instruments.gpu_slots import LOCK_DIR, describe_holder, left_running, running_holders
from .instruments.serving.guard import (
    RUN_ENV,
    SHELLS,
    comm,
    id_pid,
    parent_pid,
    pid_alive,
    process_alive,
    process_id,
)

RUNS_LOCK = Path(".snakemake") / "study-runs.lock"
SNAKEMAKE_LOCKS = Path(".snakemake") / "locks"
#: How long a run waits for a job left by a killed Snakemake to stop before it gives up.
LEFT_RUNNING_WAIT_S = 20.0
_HELD: list = []  # the open runs lock: held as long as this Snakemake lives


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def other_snakemakes(folder: Path | None = None) -> list[int]:
    """Other live Snakemake processes working in ``folder`` (their current directory), from
    /proc: a Snakemake started without this workflow's runs lock still counts."""
    folder = (folder or Path.cwd()).resolve()
    mine, found = os.getpid(), []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit() or int(name) == mine or not pid_alive(int(name)):
            continue
        try:
            if Path(os.readlink(f"/proc/{name}/cwd")).resolve() != folder:
                continue
        except OSError:
            continue
        argv = _argv(int(name))[:3]
        if any(Path(a).name == "snakemake" for a in argv) or "-m snakemake" in " ".join(argv):
            found.append(int(name))
    return found


def join_run(main: bool = True) -> list[str]:
    """Name this Snakemake to its jobs, take the shared runs lock, and remove Snakemake's
    locks where no other Snakemake can own them (``main``: the Snakemake a user started, not
    one Snakemake runs a job through). Returns the lines to show."""
    os.environ[RUN_ENV] = process_id()
    RUNS_LOCK.parent.mkdir(parents=True, exist_ok=True)
    handle = open(RUNS_LOCK, "a+", encoding="utf-8")  # noqa: SIM115 - held on purpose
    _HELD.append(handle)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        alone = True
    except BlockingIOError:
        alone = False
    said = []
    if alone and main and SNAKEMAKE_LOCKS.is_dir() and not other_snakemakes():
        stale = sorted(SNAKEMAKE_LOCKS.glob("*.lock"))
        for path in stale:
            path.unlink(missing_ok=True)
        if stale:
            said.append(
                f"removed Snakemake's lock ({SNAKEMAKE_LOCKS}/) left by a run that is gone "
                "(killed?): no other Snakemake runs in this folder"
            )
    fcntl.flock(handle, fcntl.LOCK_SH)
    return said


def check_before_jobs(outputs=(), wait_s: float = LEFT_RUNNING_WAIT_S, say=print,
                      lock_dir: Path = LOCK_DIR) -> str | None:  # fmt: skip
    """Before the first job, the line that stops the run, or None:

    * a measuring job of another Snakemake that is making one of ``outputs`` (the outputs of
      the jobs this run will run): Snakemake would remove it before its job starts (its own
      lock does not say: the first Snakemake to end removes every run's lock files);
    * a measuring job left running by a Snakemake that is gone, waited for up to ``wait_s``
      (it stops by itself within seconds)."""
    ours, outputs = os.environ.get(RUN_ENV), {str(path) for path in outputs}
    for device, record in running_holders(lock_dir):
        run = record.get("snakemake")
        making = sorted(outputs & set(record.get("outputs") or []))
        if making and run and run != ours and process_alive(run):
            return (f"{', '.join(making)}: being made now ({describe_holder(device, record)}); "
                    "this run would remove it before its job starts: run this again once that "
                    "one has finished (nothing was run or removed)")  # fmt: skip
    left = left_running(lock_dir)
    if not left:
        return None
    pids = ", ".join(str(id_pid(record["pid"])) for _, record in left)
    say(f"waiting up to {wait_s:g} s for the measuring job left by a Snakemake that is gone "
        f"(pid {pids}) to stop")  # fmt: skip
    deadline = time.monotonic() + wait_s
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = left_running(lock_dir)
    if not left:
        return None
    held = "; ".join(describe_holder(device, record) for device, record in left)
    return (f"{held}; it did not stop within {wait_s:g} s: stop it (kill {pids}), then run "
            "again (nothing was run or removed)")  # fmt: skip


def jobs_of(pid: int | None = None) -> list[int]:
    """The live children of ``pid`` (this process): a Snakemake's jobs; through a shell that
    forks its command instead of running it in its place, the shell's children too."""
    pid = os.getpid() if pid is None else pid
    names = os.listdir("/proc") if os.path.isdir("/proc") else []
    found = []
    for child in (int(n) for n in names if n.isdigit()):
        if pid_alive(child) and parent_pid(child) == pid:
            found.append(child)
            found += jobs_of(child) if comm(child) in SHELLS else []
    return found


def pass_interrupts_on() -> None:
    """``kill -INT`` of Snakemake alone (a terminal's Ctrl-C reaches its jobs too): Snakemake
    waits for its running jobs, then counts what they wrote as incomplete, so a sweep that
    finished meanwhile (its journal removed) would be measured again. Its jobs get the signal
    first: each stops cleanly, keeping its journal, as with Ctrl-C (a job stops once however
    many times it is told). Called before the first job, in Snakemake's main thread."""
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        for pid in jobs_of():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGINT)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)


def term_stops_gracefully(scheduler) -> None:
    """``kill -TERM`` of Snakemake: finish the running jobs, start no other (Snakemake's own
    graceful stop), without the hang its own handler risks. Snakemake's handler takes the
    scheduler's lock, a plain ``threading.Lock``, inside the signal handler: a signal that
    lands while the main thread holds that lock (finishing a job, selecting the next) waits
    for itself forever, and Snakemake never exits. Here the handler only starts a thread that
    does the same once the lock is free. Called before the first job, in the main thread."""

    def handler(signum, frame):
        threading.Thread(target=scheduler.exit_gracefully, name="sigterm", daemon=True).start()

    signal.signal(signal.SIGTERM, handler)
