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
from pathlib import Path

import pandas as pd

from ...core.io import write_frame
from ...core.journal import append_to, journal_path, point_key, read_journal
from ...core.progress import Progress
from ...instruments.worker_client import WorkerClient, WorkerGone
from .sweep_plan import ATTENTION_POINT_KEYS, expand_points
from .sweep_schema import SWEEPS

log = logging.getLogger("study.sweep")

# The sweep table's leading columns, in order (the README's output contract).
COLUMNS = list(SWEEPS.columns)


def skipped_after_timeout(point: dict, exc: WorkerGone) -> str:
    return (f"not run: {point['impl']} {point['op']} {point['dtype']} at M={point['M']} "
            f"{exc} (a hang or a kernel build longer than timing.point_timeout_s); its "
            "later points would wait as long")  # fmt: skip


#: Statuses a point of the same computation under another shape's name takes over.
REUSED = ("ok", "mismatch", "unsupported")


def computation_key(point: dict) -> str:
    """What a point computes, not its shape's name: the decode step's ``o_proj`` is the same
    6144 x 6144 GEMM as ``dense_square``, measured once."""
    return point_key({k: v for k, v in point.items() if k != "shape"})


def reused(row: dict, point: dict) -> dict:
    """``point``'s row from ``row``, the same computation measured under another name: its
    results, none of its time (the point cost nothing), ``measured_as`` naming it."""
    kept = {k: v for k, v in row.items() if k not in point and k != "_key"}
    return {**point, **kept, "measured_as": row["shape"], "point_s": 0.0, "first_call_ms": None,
            "prepare_s": 0.0, "check_s": 0.0}  # fmt: skip


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
        counter = Progress(len(points))
        # computation key -> the first row that measured it (nothing is measured twice).
        measured: dict[str, dict] = {}

        def measure(point: dict) -> dict:
            family = (point["impl"], point["op"], point["dtype"])
            if hello.get("unsupported"):
                return {"status": "unsupported", "error": hello["unsupported"]}
            if hello.get("failed"):
                return {"status": "error", "error": hello["failed"]}
            if family in timed_out and point["M"] >= timed_out[family][0]:
                return {"status": "error", "error": timed_out[family][1]}
            try:
                if client.proc is None:
                    client.start(timeout)
                result = client.measure(point, timeout)
            except WorkerGone as exc:
                log.error("point %s: %s", point, exc)
                client.stop()
                if exc.timed_out:
                    timed_out[family] = (point["M"], skipped_after_timeout(point, exc))
                return {"status": "error", "error": str(exc)}
            if result.pop("fatal", False):
                log.error("point %s poisoned the worker; restarting it", point)
                client.stop()
            return result

        with append_to(progress) as progress_file:
            for point in points:
                key = point_key(point)
                same = computation_key(point)
                if key in done:
                    rows.append(done[key])
                    if done[key].get("status") in REUSED:
                        measured.setdefault(same, done[key])
                    counter.skip()
                    continue
                if same in measured:
                    row = reused(measured[same], point)
                    log.info("%s %s %s %s M=%s %s: as %s", counter.step(), point["impl"],
                             point["op"], point["dtype"], point["M"], point["shape"],
                             row["measured_as"])  # fmt: skip
                else:
                    row = derive({**point, **base, **measure(point)})
                    log.info(
                        "%s %s %s %s M=%s N=%s K=%s: %s %s",
                        counter.step(), point["impl"], point["op"], point["dtype"],
                        point["M"], point["N"], point["K"], row["status"],
                        f"{row['eager_us']:.2f} us" if row.get("eager_us")
                        else row.get("error", ""),
                    )  # fmt: skip
                    if row["status"] in REUSED:
                        measured.setdefault(same, row)
                rows.append(row)
                progress_file.write(json.dumps({**row, "_key": key}, default=str) + "\n")
                progress_file.flush()
    except BaseException:  # stopped (Snakemake gone, a signal): the journal keeps the rest
        client.stop(grace_s=0)
        raise
    finally:
        client.stop()

    frame = to_frame(rows)
    write_frame(frame, out_path, producer=f"sweep {plan['backend']}", plan=plan)
    for stale in work_dir.iterdir():
        stale.unlink()
    work_dir.rmdir()
    return frame


def to_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    for column in COLUMNS:
        if column not in frame.columns:
            frame[column] = None
    extra = [c for c in frame.columns if c not in COLUMNS]
    frame = frame[COLUMNS + extra]
    for column in ("M", "N", "K"):
        frame[column] = frame[column].astype("int64")
    # An attention point's geometry (plan.expand_points) follows the table's columns; other
    # points leave it empty.
    for column in ("G", "top_k", *(c for c in ATTENTION_POINT_KEYS if c in frame.columns)):
        frame[column] = pd.to_numeric(frame[column]).astype("Int64")
    frame["error"] = frame["error"].fillna("").astype(str)
    frame["measured_as"] = frame["measured_as"].fillna("").astype(str)
    frame["throttle"] = frame["throttle"].fillna("").astype(str)
    for column in frame.columns:
        if column.endswith(("_us", "_samples", "_calls", "_sets", "_ms", "_mhz")) or column in (
            "rel_err", "cos_sim", "flops", "bytes", "tflops", "gbps", "point_s", "prepare_s",
            "check_s",
        ):  # fmt: skip
            frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    return frame
