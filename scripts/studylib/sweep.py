"""One backend's sweep: every point of its plan becomes a row, whatever happens.

Points are measured in a worker process (``worker.py``). A point that hangs past the
timeout, crashes the worker or poisons its CUDA context costs that point only: it becomes an
``error`` row and a fresh worker takes the rest. Finished rows are appended to a progress
file beside the output, so an interrupted sweep resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from .io import write_frame
from .plan import expand_points, stable_hash
from .tables import columns

SCRIPTS_DIR = Path(__file__).resolve().parents[1]
log = logging.getLogger("study.sweep")

# The sweep table's leading columns, in order (the README's output contract).
COLUMNS = columns("sweep")


#: The least time a worker gets to start and say hello (imports, CUDA context).
START_TIMEOUT_S = 300.0


class WorkerGone(Exception):
    """The worker died or hung; the message says which."""

    def __init__(self, message: str, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


def skipped_after_timeout(point: dict, exc: WorkerGone) -> str:
    return (f"not run: {point['impl']} {point['op']} {point['dtype']} at M={point['M']} "
            f"{exc} (a hang or a kernel build longer than timing.point_timeout_s); its "
            "later points would wait as long")  # fmt: skip


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
            sys.executable, "-m", "studylib.worker", "--backend", self.backend,
            "--plan", str(self.plan_path), "--result-fd", str(write_fd),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=self.log_stream,
            stderr=self.log_stream,
            pass_fds=(write_fd,),
            env=env,
            start_new_session=True,  # its own process group: killed whole, never orphaned
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

    def stop(self) -> None:
        """Ask politely, then kill the whole process group."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
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


def point_key(point: dict) -> str:
    return json.dumps(point, sort_keys=True)


def derive(row: dict) -> dict:
    """Throughput from the best kernel-only time (graph replay, else eager) and launch cost."""
    us = row.get("graph_us") or row.get("eager_us")
    if us and us > 0:
        row["tflops"] = row["flops"] / (us * 1e-6) / 1e12
        row["gbps"] = row["bytes"] / (us * 1e-6) / 1e9
    if row.get("graph_us") and row.get("eager_us"):
        row["launch_overhead_us"] = row["eager_us"] - row["graph_us"]
    return row


def run_sweep(plan: dict, out_path: str | os.PathLike, log_stream=None) -> pd.DataFrame:
    out_path = Path(out_path)
    work_dir = out_path.parent / f".{out_path.stem}.work"
    work_dir.mkdir(parents=True, exist_ok=True)
    plan_path = work_dir / "plan.json"
    plan_path.write_text(json.dumps(plan, sort_keys=True), encoding="utf-8")
    timeout = float(plan["timing"]["point_timeout_s"])
    client = WorkerClient(plan["backend"], plan_path, log_stream)
    hello = None
    rows = []
    try:
        try:
            hello = client.start(timeout)
        except WorkerGone as exc:
            client.stop()
            preferred = plan["device"] if plan["device"] != "auto" else "cpu"
            hello = {"device": preferred, "failed": f"worker failed to start: {exc}"}
        log.info("worker hello: %s", hello)
        progress = journal_path(work_dir, plan, hello)
        done = read_journal(progress)
        device = hello["device"]
        base = {
            "device": device,
            "device_name": hello.get("device_name"),
            "library_version": hello.get("library_version"),
        }
        points = expand_points(plan, device)
        log.info("%d points on %s", len(points), device)
        # (impl, op, dtype) -> (M, why): its later points of that M or more are not run. A
        # timeout (a hang, or a first call building kernels for longer than the timeout)
        # would repeat on each of them, costing the whole timeout every time.
        timed_out: dict[tuple, tuple[int, str]] = {}
        with open(progress, "a", encoding="utf-8") as progress_file:
            for i, point in enumerate(points):
                key = point_key(point)
                if key in done:
                    rows.append(done[key])
                    continue
                family = (point["impl"], point["op"], point["dtype"])
                if hello.get("unsupported"):
                    result = {"status": "unsupported", "error": hello["unsupported"]}
                elif hello.get("failed"):
                    result = {"status": "error", "error": hello["failed"]}
                elif family in timed_out and point["M"] >= timed_out[family][0]:
                    result = {"status": "error", "error": timed_out[family][1]}
                else:
                    try:
                        if client.proc is None:
                            client.start(timeout)
                        result = client.measure(point, timeout)
                    except WorkerGone as exc:
                        log.error("point %s: %s", point, exc)
                        result = {"status": "error", "error": str(exc)}
                        client.stop()
                        if exc.timed_out:
                            timed_out[family] = (point["M"], skipped_after_timeout(point, exc))
                    if result.pop("fatal", False):
                        log.error("point %s poisoned the worker; restarting it", point)
                        client.stop()
                row = derive({**point, **base, **result})
                log.info(
                    "[%d/%d] %s %s %s M=%s N=%s K=%s: %s %s",
                    i + 1, len(points), point["impl"], point["op"], point["dtype"],
                    point["M"], point["N"], point["K"], row["status"],
                    f"{row['eager_us']:.2f} us" if row.get("eager_us") else row.get("error", ""),
                )  # fmt: skip
                rows.append(row)
                progress_file.write(json.dumps({**row, "_key": key}, default=str) + "\n")
                progress_file.flush()
    finally:
        client.stop()

    frame = to_frame(rows)
    write_frame(frame, out_path)
    for stale in work_dir.iterdir():
        stale.unlink()
    work_dir.rmdir()
    return frame


def journal_path(work_dir: Path, plan: dict, hello: dict) -> Path:
    """The journal of finished points, keyed by the plan and by what measures it (device,
    library version as the worker reports it): an upgrade never reuses old points."""
    measured_by = {k: hello.get(k) for k in ("device", "device_name", "library_version")}
    return work_dir / f"progress-{stable_hash([plan, measured_by])}.jsonl"


def read_journal(progress: Path) -> dict:
    """{point key: row} of a journal; a line cut short by a kill mid-write is dropped."""
    done = {}
    if progress.exists():
        for line in progress.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "_key" in row:
                done[row.pop("_key")] = row
        log.info("resuming: %d points already measured", len(done))
    return done


def to_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    for column in COLUMNS:
        if column not in frame.columns:
            frame[column] = None
    extra = [c for c in frame.columns if c not in COLUMNS]
    frame = frame[COLUMNS + extra]
    for column in ("M", "N", "K"):
        frame[column] = frame[column].astype("int64")
    for column in ("G", "top_k"):
        frame[column] = pd.to_numeric(frame[column]).astype("Int64")
    frame["error"] = frame["error"].fillna("").astype(str)
    frame["throttle"] = frame["throttle"].fillna("").astype(str)
    for column in frame.columns:
        if column.endswith(("_us", "_samples", "_calls", "_sets", "_ms", "_mhz")) or column in (
            "rel_err", "cos_sim", "flops", "bytes", "tflops", "gbps", "point_s"
        ):  # fmt: skip
            frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    return frame
