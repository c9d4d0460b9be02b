"""The CPU study killed (issue 33): Snakemake killed mid-stage, stopped gracefully, two
Snakemakes in one folder, locks and jobs left by a killed run. The job-level lifecycle (a
server never outlives its job): test_lifecycle.py."""

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import copy_workflow, tiny_config
from studylib import snakemake_run
from studylib.instruments.gpu_slots import holder
from studylib.instruments.serving.guard import (
    RUN_ENV,
    cmdline,
    pid_alive,
    process_id,
)
from test_lifecycle import DEADLINE_S, SCRIPTS, poll
from test_serving import free_port

# ------------------------------------------------------------- the CPU study killed (issue 33)
#
# The real workflow in a scratch folder (the tiny CPU config), killed at points defined by its
# progress: a journal holding its first points while the worker hangs on the next
# (STUDY_INJECT_FAULTS, a hang of an hour), the decode job's journal holding C = 1 with the
# load of C = 4 ahead, the peaks job holding the CPU with seconds of measuring ahead. Every
# process of the study runs in that folder: none may be left KILL_GONE_S after Snakemake is
# killed (the target, polled), and the next plain run keeps every finished point.

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
KILL_GONE_S = 10.0  # issue 33: no study process 10 s after Snakemake is killed
HANG = {"matmul:16": "hang"}  # the worker hangs (an hour) on its first matmul at M = 16
SWEEP = "results/sweeps/torch.parquet"
POWER = "results/kernel_power/torch.parquet"
PEAKS = "results/peaks.json"
DECODE = "results/decode/transformers/summary.csv"


def lifecycle_config(port: int) -> dict:
    config = tiny_config()
    config["timing"]["point_timeout_s"] = 600  # a hung point is not given up while we wait
    for point in config["kernel_power"]["backends"]["torch"]:
        if point.get("devices") == ["cpu"]:
            point["M"] = [1, 16]  # M = 1's windows journaled, then the hang at M = 16
    # 12 s of load per level, started once the server is ready and warmed up
    config["decode"].update(idle_s={"cuda": 1, "cpu": 0}, min_steady_s={"cuda": 1, "cpu": 12},
                            port=port)  # fmt: skip
    return config


def write_config(folder: Path, port: int | None = None) -> None:
    port = port if port is not None else free_port()
    (folder / "config" / "config.yaml").write_text(
        yaml.safe_dump(lifecycle_config(port), sort_keys=False)
    )


def study_processes(folder: Path) -> list[tuple[int, str]]:
    """Live processes working in ``folder`` (their current directory): Snakemake, its jobs,
    their workers, servers and guards all do."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid() or not pid_alive(int(name)):
            continue
        try:
            cwd = Path(os.readlink(f"/proc/{name}/cwd"))
        except OSError:
            continue
        if cwd == folder or folder in cwd.parents:
            found.append((int(name), cmdline(int(name), 120)))
    return found


def journal_rows(path_glob: str, folder: Path) -> list[dict]:
    rows = []
    for path in folder.glob(path_glob):
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                rows.append(json.loads(line))
    return rows


class Study:
    """A scratch copy of the workflow; every process left in it is killed at the end."""

    def __init__(self, folder: Path):
        self.dir = folder
        self.procs: list[subprocess.Popen] = []

    def start(self, *targets, env=None, name="run") -> subprocess.Popen:
        out = open(self.dir / f"{name}.out", "wb")  # noqa: SIM115
        proc = subprocess.Popen([SNAKEMAKE, "--cores", "2", *targets], cwd=self.dir,
                                stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})},
                                start_new_session=True)  # fmt: skip
        out.close()
        self.procs.append(proc)
        return proc

    def run(self, *targets, name="rerun", deadline_s=600.0) -> tuple[int, str]:
        proc = self.start(*targets, name=name)
        proc.wait(timeout=deadline_s)
        return proc.returncode, self.output(name)

    def output(self, name: str) -> str:
        return (self.dir / f"{name}.out").read_text(errors="replace")

    def log(self, rel: str) -> str:
        return (self.dir / "results" / "logs" / rel).read_text(errors="replace")

    def gone_after_kill(self, proc: subprocess.Popen, how: str) -> float:
        """Kill Snakemake as ``how`` says; the seconds until no process works in the folder
        (polled, at most KILL_GONE_S)."""
        if how == "Ctrl-C":  # a terminal's Ctrl-C: SIGINT to the foreground process group
            os.killpg(proc.pid, signal.SIGINT)
        elif how.startswith("group-"):  # e.g. `kill -TERM -- -PGID`: Snakemake and its jobs
            os.killpg(proc.pid, getattr(signal, how.removeprefix("group-")))
        else:
            proc.send_signal(getattr(signal, how))
        started = time.monotonic()
        while left := study_processes(self.dir):
            if time.monotonic() - started > KILL_GONE_S:
                raise AssertionError(f"{KILL_GONE_S:g} s after {how}, still running: {left}")
            time.sleep(0.05)
        gone = time.monotonic() - started
        proc.wait(timeout=DEADLINE_S)
        print(f"{how}: no study process after {gone:.2f} s")
        return gone

    def cleanup(self):
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for pid, _ in study_processes(self.dir):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


@pytest.fixture(scope="module")
def built_study(tmp_path_factory):
    """The workflow with the decode model built once (each test copies it)."""
    pytest.importorskip("snakemake")
    folder = tmp_path_factory.mktemp("lifecycle-study")
    copy_workflow(folder)
    write_config(folder, port=30000)
    proc = subprocess.run([SNAKEMAKE, "--cores", "2", "results/decode/model"], cwd=folder,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return folder


@pytest.fixture
def study(built_study, tmp_path):
    folder = tmp_path / "study"
    shutil.copytree(built_study, folder, symlinks=True)
    write_config(folder)  # a port free now for the decode server
    s = Study(folder)
    try:
        yield s
    finally:
        s.cleanup()


@dataclass
class Stage:
    target: str
    log: str  # under results/logs/
    journal: str | None  # its journal's files (glob), if it keeps one
    shown: str  # the killed run's progress: journal lines, or a line of its log
    at: int = 1  # journal lines (the worker then hangs on the next point)


STAGES = {
    "sweep": Stage(SWEEP, "sweep/torch.log", "results/sweeps/.torch.work/progress-*",
                   "journal"),
    # M = 1's three windows (eager measured, graph and cold unsupported), then the hang
    "kernel_power": Stage(POWER, "kernel_power/torch.log",
                          "results/kernel_power/.torch.work/progress-*", "journal", at=3),
    # seconds of measuring ahead (the GEMMs and the copy) once the job holds the CPU
    "peaks": Stage(PEAKS, "peaks.log", None, "holding the CPU"),
    # the idle window and C = 1 journaled, C = 4's 12 s of load ahead
    "decode": Stage(DECODE, "decode/transformers.log",
                    "results/decode/.transformers.work/progress-*", "journal", at=2),
}  # fmt: skip


def reached(study: Study, stage: Stage):
    if stage.shown == "journal":
        return lambda: len(journal_rows(stage.journal, study.dir)) >= stage.at
    path = study.dir / "results" / "logs" / stage.log
    return lambda: path.exists() and stage.shown in path.read_text(errors="replace")


KILLS = [
    ("sweep", "SIGKILL"), ("sweep", "SIGHUP"), ("sweep", "Ctrl-C"), ("sweep", "SIGINT"),
    ("sweep", "group-SIGTERM"),
    ("kernel_power", "SIGKILL"), ("kernel_power", "SIGHUP"),
    ("peaks", "SIGKILL"), ("peaks", "SIGHUP"),
    # decode's job under SIGHUP is stopped as under SIGKILL (its parent gone: SIGTERM), as
    # the sweep, kernel-power and peaks jobs show; the decode cases are the slowest (25-57 s)
    ("decode", "SIGKILL"), ("decode", "Ctrl-C"),
]  # fmt: skip


@pytest.mark.parametrize("name, how", KILLS, ids=[f"{s}-{h}" for s, h in KILLS])
def test_snakemake_killed_mid_stage_leaves_no_process_and_the_rerun_keeps_every_point(
    study, name, how
):
    stage = STAGES[name]
    snakemake = study.start(stage.target, env={"STUDY_INJECT_FAULTS": json.dumps(HANG)},
                            name="killed")  # fmt: skip
    poll(reached(study, stage), f"{name} under way", deadline_s=300, proc=snakemake)
    assert study_processes(study.dir)
    study.gone_after_kill(snakemake, how)  # within KILL_GONE_S, or it fails there
    # SIGKILL, SIGHUP: Snakemake dies, its job gets SIGTERM (PR_SET_PDEATHSIG, the watch)
    # `kill -INT` of Snakemake alone: passed on to its jobs (Snakemake would wait for them)
    signal_seen = "SIGINT" if how in ("Ctrl-C", "SIGINT") else "SIGTERM"
    job_log = study.log(stage.log)
    assert f"job: {signal_seen}: stopping" in job_log and "Traceback" not in job_log
    assert not (study.dir / stage.target).exists()
    if how in ("Ctrl-C", "SIGINT"):
        assert "Terminating processes on user request" in study.output("killed")
    if how == "group-SIGTERM":  # Snakemake's graceful stop, its job stopped by the signal
        assert "Will exit after finishing currently running jobs" in study.output("killed")
    if how == "SIGHUP" and name != "sweep":
        return
    kept = journal_rows(stage.journal, study.dir) if stage.journal else []
    rc, output = study.run(stage.target)  # a plain run: no --unlock, no --rerun-incomplete
    assert rc == 0, output
    if how in ("SIGKILL", "SIGHUP"):  # Snakemake killed outright leaves its lock: removed
        assert "removed Snakemake's lock (.snakemake/locks/) left by a run that is gone" in output
    if not stage.journal:
        return
    items = f"{len(kept)} finished item{'s' if len(kept) != 1 else ''} kept"
    assert (
        kept
        and items in study.log(stage.log)
        and "resuming from the journal in" in study.log(stage.log)
    )
    if name == "decode":  # its journal keeps whole concurrencies: C = 1's row as measured
        summary = pd.read_csv(study.dir / stage.target).set_index("concurrency")
        kept_rows = [row["row"] for row in kept if row["_key"].startswith("main:")]
        assert [row["concurrency"] for row in kept_rows] == [1]
        for column in ("tpot_ms", "output_tok_s", "steady_s", "requests", "valid"):
            assert plain(summary.loc[1, column]) == pytest.approx(kept_rows[0][column]), column
        assert "C=1: main pass kept from the stopped run" in study.log(stage.log)
        return
    if name == "sweep":
        keys, values = (
            ["impl", "op", "dtype", "shape", "M", "N", "K"],
            ["eager_us", "eager_samples"],
        )
    else:
        keys, values = ["window"], ["calls", "us_per_call", "t_start", "t_end"]
    frame = pd.read_parquet(study.dir / stage.target)
    final = {tuple(row[k] for k in keys): row for row in frame.to_dict("records")}
    for row in kept:  # every point measured before the kill, as it was measured
        match = final[tuple(row[k] for k in keys)]
        assert [plain(match[v]) for v in ["status", *values]] == [
            plain(row.get(v)) for v in ["status", *values]
        ]


def plain(value):
    """None for a missing value (None, NaN, pd.NA), else the value."""
    return None if value is None or (not isinstance(value, str) and pd.isna(value)) else value


def test_snakemake_terminated_finishes_the_running_job_and_starts_no_other(study):
    # SIGTERM is Snakemake's own graceful stop: the job running then finishes and is kept,
    # no other starts. Its matmul and attention points take a second each ("slow"): the
    # sweep is 9 s from its end when the signal comes, after its first point.
    slow = {**{f"matmul:{m}": "slow" for m in (1, 16)},
            **{f"decode_attention:{m}": "slow" for m in (1, 4)}}  # fmt: skip
    snakemake = study.start(SWEEP, PEAKS, env={"STUDY_INJECT_FAULTS": json.dumps(slow)},
                            name="terminated")  # fmt: skip
    stage = STAGES["sweep"]
    poll(reached(study, stage), "the sweep under way", deadline_s=300, proc=snakemake)
    peaks_before = (study.dir / PEAKS).exists()  # peaks may have run first: it is done then
    snakemake.send_signal(signal.SIGTERM)
    try:
        snakemake.wait(timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("Snakemake still runs 300 s after SIGTERM; its output ends:\n"
                    + study.output("terminated")[-3000:])  # fmt: skip
    poll(lambda: not study_processes(study.dir), "every study process gone", KILL_GONE_S)
    output = study.output("terminated")
    assert "Will exit after finishing currently running jobs" in output
    assert "Traceback" not in output
    sweep = pd.read_parquet(study.dir / SWEEP)  # finished and kept, every point
    points = int(re.search(r"(\d+) points on cpu", study.log(stage.log)).group(1))
    assert len(sweep) == points and "job: SIG" not in study.log(stage.log)
    assert (study.dir / PEAKS).exists() == peaks_before  # not started after the signal


def test_sigterm_while_the_scheduler_holds_its_lock_does_not_hang_snakemake():
    # Snakemake's own SIGTERM handler takes the scheduler's lock (a plain Lock) inside the
    # handler: a signal landing while the main thread holds it never returns (CI saw the
    # graceful stop hang 300 s). The study's handler, with Snakemake's own exit_gracefully,
    # returns at once and the stop is recorded once the lock is free.
    from snakemake.scheduling.job_scheduler import JobScheduler

    scheduler = type("Scheduler", (), {"exit_gracefully": JobScheduler.exit_gracefully})()
    scheduler._lock, scheduler._user_kill = threading.Lock(), None
    scheduler._open_jobs = threading.Semaphore(0)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        snakemake_run.term_stops_gracefully(scheduler)
        with scheduler._lock:  # the main thread finishing a job when the signal lands
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler has run (it runs in this thread) and returned
            assert scheduler._user_kill is None
        assert scheduler._open_jobs.acquire(timeout=10)  # the scheduler wakes up ...
        assert scheduler._user_kill == "graceful"  # ... to a graceful stop
    finally:
        signal.signal(signal.SIGTERM, previous)


HOLDER = textwrap.dedent(
    """
    # A measuring job left running by a Snakemake that is gone (old code, another machine's
    # kernel without PR_SET_PDEATHSIG): it holds the CPU until a line shows up in a file.
    import os, sys, time
    from pathlib import Path

    sys.path.insert(0, sys.argv[1])
    from studylib.instruments import gpu_slots

    gpu_slots.acquire(1, ["cpu"], Path(".snakemake/gpu-slots"),
                      job="rule sweep of results/sweeps/torch.parquet")
    Path("holder.ready").touch()
    watched, line = sys.argv[2:4]
    while not (os.path.exists(watched) and line in open(watched).read()):
        time.sleep(0.05)
    """
)


def gone_snakemake() -> str:
    """The process id of a process that has ended (a Snakemake that was killed)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ident = process_id(child.pid)
    child.kill()
    child.wait()
    return ident


@pytest.mark.parametrize("stays", [True, False], ids=["stays", "stops"])
def test_a_rerun_while_a_job_of_a_killed_snakemake_runs_removes_nothing(study, stays):
    # Its journal and an output the rerun would remove (marked incomplete, as a killed run
    # leaves it) stand for the work of the job still running.
    journal = study.dir / "results/sweeps/.torch.work/progress-0.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text('{"_key": "a point", "status": "ok"}\n')
    output = study.dir / PEAKS
    output.write_text("{}")
    incomplete = study.dir / ".snakemake" / "incomplete"
    incomplete.mkdir(parents=True, exist_ok=True)
    (incomplete / base64.b64encode(PEAKS.encode()).decode()).write_text("")
    line = "never" if stays else "waiting up to"
    env = {**os.environ, RUN_ENV: gone_snakemake()}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, SCRIPTS, "rerun.out", line],
                              cwd=study.dir, env=env)  # fmt: skip
    study.procs.append(holder)
    poll((study.dir / "holder.ready").exists, "the holder holding the CPU", proc=holder)
    rc, out = study.run(PEAKS)
    waiting = "waiting up to 20 s for the measuring job left by a Snakemake that is gone"
    assert f"{waiting} (pid {holder.pid}) to stop" in out
    assert "Traceback" not in out
    if not stays:  # it stopped while the rerun waited: the rerun runs
        assert rc == 0 and json.loads(output.read_text())["copy_gbps"] > 0
        return
    assert rc != 0
    assert (
        f"the CPU is held by pid {holder.pid} (" in out
        and "rule sweep of results/sweeps/torch.parquet, left running by Snakemake pid" in out
        and f"which is gone (killed?); it did not stop within 20 s: stop it (kill {holder.pid}), "
        "then run again (nothing was run or removed)"
        in out
    )
    assert output.read_text() == "{}" and journal.read_text().count("\n") == 1
    assert not (study.dir / "results/logs/peaks.log").exists()  # no job started


def test_two_snakemakes_in_one_folder_never_time_side_by_side(study):
    # A measures (its worker hangs on its second point, holding the CPU); B, started in the
    # same folder for other targets, would run its timing job beside it.
    a = study.start(SWEEP, env={"STUDY_INJECT_FAULTS": json.dumps(HANG)}, name="a")
    stage = STAGES["sweep"]
    poll(reached(study, stage), "A's sweep under way", deadline_s=300, proc=a)
    kept = journal_rows(stage.journal, study.dir)
    job = int(holder(study.dir / ".snakemake/gpu-slots/cpu.lock")["pid"].split(":")[0])
    assert cmdline(job).endswith("run_sweep.py")
    rc, out = study.run(PEAKS, name="b")
    assert rc != 0 and "Traceback" not in out
    assert (
        f"ERROR study.peaks: the CPU is held by pid {job} ({cmdline(job)}), rule sweep of "
        f"results/sweeps/torch.parquet, run by Snakemake pid {a.pid}, another Snakemake in this "
        "folder: two timing jobs on one device spoil both, so this job stops without measuring; "
        "run this again once it has finished" in out
    )
    assert not (study.dir / PEAKS).exists()
    # The same target again: B removed A's lock files as it ended (Snakemake removes the whole
    # .snakemake/locks/), so Snakemake would start the job, removing A's output first
    rc, out = study.run(SWEEP, name="c")
    assert rc != 0 and "Traceback" not in out and "removed Snakemake's lock" not in out
    assert (
        f"{SWEEP}: being made now (the CPU is held by pid {job} ({cmdline(job)}), rule sweep of "
        f"{SWEEP}, run by Snakemake pid {a.pid}, another Snakemake in this folder); this run "
        "would remove it before its job starts: run this again once that one has finished "
        "(nothing was run or removed)" in out
    )
    assert "localrule sweep" not in out  # no job started
    assert a.poll() is None and journal_rows(stage.journal, study.dir) == kept
    study.gone_after_kill(a, "SIGKILL")


def test_snakemakes_locks_are_removed_only_where_no_snakemake_runs(tmp_path, monkeypatch):
    def join(main=True):
        said = snakemake_run.join_run(main)
        for handle in snakemake_run._HELD:  # as if this Snakemake had ended
            handle.close()
        snakemake_run._HELD.clear()
        return said

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(RUN_ENV, "")  # join_run names this process: restored after the test
    locks = tmp_path / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.output.lock").write_text("results/report/index.html\n")
    # Another Snakemake of the study holds the runs lock: its locks stay
    other = subprocess.Popen([sys.executable, "-c", textwrap.dedent(
        """
        import fcntl, sys, time
        handle = open(".snakemake/study-runs.lock", "a+")
        fcntl.flock(handle, fcntl.LOCK_SH)
        print("held", flush=True)
        time.sleep(60)
        """
    )], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert other.stdout.readline().strip() == "held"
        assert join() == [] and (locks / "0.output.lock").exists()
    finally:
        other.kill()
        other.wait()
    # A Snakemake that Snakemake itself starts for a job does not judge
    assert join(main=False) == [] and (locks / "0.output.lock").exists()
    # None left: the locks of the run that is gone are removed, in one line
    assert join() == [
        "removed Snakemake's lock (.snakemake/locks/) left by a run that is gone (killed?): "
        "no other Snakemake runs in this folder"
    ]
    assert not list(locks.glob("*.lock"))
    assert os.environ[RUN_ENV] == snakemake_run.process_id()


def test_a_job_whose_snakemake_died_while_it_started_stops_at_once(tmp_path):
    # Snakemake killed while its job imported its libraries: the job is already re-parented
    # when it protects itself (no parent death left to see); the Snakemake it was started
    # by (RUN_ENV) is gone, so it stops there, through its clean path.
    code = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {SCRIPTS!r})
        from studylib.instruments.serving.guard import protect_job
        protect_job(5, doing="stopping")
        time.sleep(60)
        print("not stopped", flush=True)
        """
    )
    env = {**os.environ, RUN_ENV: gone_snakemake()}
    job = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=DEADLINE_S)  # fmt: skip
    assert job.returncode == 128 + signal.SIGTERM
    assert job.stderr.strip() == "job: SIGTERM: stopping and exiting" and not job.stdout


def test_a_worker_whose_job_died_while_it_started_stops_at_once(tmp_path):
    # The same for a measuring worker: its job (--parent) is gone before the worker watches.
    worker = subprocess.run(
        [sys.executable, "-m", "studylib.instruments.worker", "--backend", "torch",
         "--plan", str(tmp_path / "plan.json"), "--result-fd", "1", "--parent", gone_snakemake()],
        env={**os.environ, "PYTHONPATH": SCRIPTS}, capture_output=True, timeout=DEADLINE_S,
    )  # fmt: skip
    assert worker.returncode == -signal.SIGKILL and not worker.stdout
