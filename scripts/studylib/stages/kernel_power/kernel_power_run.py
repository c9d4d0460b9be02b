"""Sustained kernel loops under the power sampler: what the GPU draws, clocks and does.

For each representative point and mode (eager launches, graph replays, cold graph replays
that rotate weight sets of several L2s so every call streams them from HBM, as decode does)
the backend's worker runs the kernel back to back for ``seconds``; the sampler in this
process (NVML reads are process-independent) records every GPU the job can see. An idle
baseline comes first and a cooldown separates loops. One row per (window, GPU). With
``gpus: N`` the job holds N GPUs and runs each loop on all of them at once (one worker per
GPU). Finished windows go to a journal as they end (the sweep's, keyed by the plan and what
measures it): a killed job's rerun measures only the windows it had not finished, after a
new idle baseline; its timeline covers the rerun only.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pandas as pd

from ...core.io import write_frame
from ...core.journal import append_to, journal_path, read_journal
from ...core.progress import Progress
from ...instruments.gpu_slots import machine_gpus
from ...instruments.power_sampler import Sampler, open_readers, visible_nvml_indices
from ...instruments.worker_client import WorkerClient, WorkerGone
from .kernel_power_schema import WINDOW_TABLE

log = logging.getLogger("study.kernel_power")

POINT_KEYS = ["backend", "impl", "op", "dtype", "shape", "M", "N", "K", "G", "top_k", "routing"]
WINDOW_COLUMNS = list(WINDOW_TABLE.columns)


def window_id(point: dict | None, mode: str) -> str:
    if point is None:
        return mode
    g = f"/G={point['G']}" if point.get("G") else ""
    routing = f"/{point['routing']}" if point.get("routing") else ""
    return (f"{point['backend']}/{point['impl']}/{point['op']}/{point['dtype']}/"
            f"{point['shape']}{g}{routing}/M={point['M']}/{mode}")  # fmt: skip


class KernelPowerRun:
    """One backend's windows. With several ``worker_envs`` (one GPU each) every loop runs on
    all of those GPUs at the same moment, as in a tensor-parallel server where each GPU
    runs the same GEMM: the workers prepare, meet at a barrier, then start together."""

    def __init__(self, plan: dict, work_dir: Path, log_stream=None,
                 worker_envs: list[dict] | None = None):  # fmt: skip
        self.plan = plan
        self.rows: list[dict] = []
        work_dir.mkdir(parents=True, exist_ok=True)
        self.plan_path = work_dir / "plan.json"
        self.plan_path.write_text(json.dumps(plan, sort_keys=True), encoding="utf-8")
        self.work_dir = work_dir
        self.clients = [WorkerClient(plan["backend"], self.plan_path, log_stream, env)
                        for env in (worker_envs or [{}])]  # fmt: skip
        self.timeout = float(plan["timing"]["point_timeout_s"])
        self.journal = None  # the open journal of finished windows (see run)

    def run(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        plan = self.plan
        hellos = []
        for client in self.clients:
            try:
                hellos.append(client.start(self.timeout))
            except WorkerGone as exc:
                hellos.append({"device": "cpu", "failed": f"worker failed to start: {exc}"})
        working = [h for h in hellos if not h.get("failed")]
        device = (working or hellos)[0]["device"]
        readers, self.source, why = open_readers(
            visible_nvml_indices() if device == "cuda" else None
        )
        if why:
            log.info("power source %s (%s)", self.source, why)
        self.sampler = Sampler(readers, rate_hz=plan["sample_hz"])
        seconds = plan["seconds"][device]
        # Windows a killed run finished (its rows, one per GPU, keyed "window#j"), as the
        # sweep keeps its points: the rerun measures only the rest, and a new idle baseline.
        journal = journal_path(self.work_dir, plan, (working or hellos)[0])
        done: dict[str, list[dict]] = {}
        for key, row in read_journal(journal).items():
            done.setdefault(key.rsplit("#", 1)[0], []).append(row)
        try:
            with self.sampler, append_to(journal) as self.journal:
                time.sleep(0.2)  # a few samples before the first window opens
                t0 = time.monotonic()
                time.sleep(plan["idle_s"][device])
                self.record(None, "idle", [{"status": "ok", "error": "", "t_start": t0,
                                            "t_end": time.monotonic()}])  # fmt: skip
                loops = [(point, mode) for point in plan["points"]
                         if device in point.get("devices", ["cuda", "cpu"])
                         for mode in point.get("modes") or plan["modes"]]  # fmt: skip
                self.progress = Progress(len(loops))
                for point, mode in loops:
                    if finished := done.get(window_id(point, mode)):
                        self.rows.extend(finished)
                        self.progress.skip()
                    elif self.loop(hellos, point, mode, seconds):
                        time.sleep(plan["cooldown_s"][device])
        except BaseException:  # stopped (Snakemake gone, a signal): the journal keeps the rest
            for client in self.clients:
                client.stop(grace_s=0)
            raise
        finally:
            self.journal = None
            for client in self.clients:
                client.stop()
        cpu = self.sampler.cpu_fraction()
        windows = pd.DataFrame(self.rows)
        windows["sampler_cpu_pct"] = 100 * cpu if cpu is not None else None
        for column in WINDOW_COLUMNS:
            if column not in windows.columns:
                windows[column] = None
        windows = windows[WINDOW_COLUMNS]
        for column in ("M", "N", "K", "G", "top_k", "gpu", "calls", "gpus_running"):
            windows[column] = pd.to_numeric(windows[column]).astype("Int64")
        timeline = pd.DataFrame(self.sampler.timeline())
        if not timeline.empty:
            timeline.insert(0, "backend", plan["backend"])
            timeline["t_rel"] = timeline["t"] - timeline["t"].min()
        log.info("sampler used %.2f%% of one core", 100 * (cpu or 0))
        return windows, timeline

    def loop(self, hellos: list[dict], point: dict, mode: str, seconds: float) -> bool:
        """Run one window on every worker; True when a device actually worked (cool down)."""
        together = len(self.clients) > 1
        results: list[dict | None] = [None] * len(self.clients)
        message = {"loop": point, "mode": mode, "seconds": seconds, "barrier": together}
        for i, (client, hello) in enumerate(zip(self.clients, hellos, strict=True)):
            if hello.get("unsupported") or hello.get("failed"):
                why = hello.get("unsupported") or hello["failed"]
                results[i] = {"status": "unsupported" if hello.get("unsupported") else "error",
                              "error": why}  # fmt: skip
                continue
            try:
                if client.proc is None:  # replaced after a fatal error
                    client.start(self.timeout)
                client.send(message)
            except WorkerGone as exc:
                results[i] = self._gone(client, exc)
        if together:
            ready = []
            for i, client in enumerate(self.clients):
                if results[i] is None:
                    try:
                        reply = client.receive(self.timeout)  # prepared, or its failure row
                    except WorkerGone as exc:
                        reply = self._gone(client, exc)
                    if reply.get("ready"):
                        ready.append(i)
                    else:
                        results[i] = reply
            start_at = time.monotonic() + 0.05
            for i in ready:
                try:
                    self.clients[i].send({"go": start_at})
                except WorkerGone as exc:
                    results[i] = self._gone(self.clients[i], exc)
        for i, client in enumerate(self.clients):
            if results[i] is None:
                try:
                    results[i] = client.receive(seconds + self.timeout)
                except WorkerGone as exc:
                    results[i] = self._gone(client, exc)
            if results[i].pop("fatal", False):
                client.stop()
        step = self.progress.step()
        for result in results:
            log.info("%s %s: %s %s", step, window_id(point, mode), result["status"],
                     result.get("error", ""))  # fmt: skip
        self.record(point, mode, results)
        return any(r["status"] == "ok" for r in results)

    @staticmethod
    def _gone(client: WorkerClient, exc: WorkerGone) -> dict:
        client.stop()
        return {"status": "error", "error": str(exc)}

    def record(self, point: dict | None, mode: str, results: list[dict]) -> None:
        """One row per (window, GPU): the sampler's statistics beside the loop's result.

        Several workers: GPU j is worker j's (both follow CUDA_VISIBLE_DEVICES' order), and
        the statistics cover the span in which every worker that ran was running.
        """
        base = {k: (point or {}).get(k) for k in POINT_KEYS}
        base["backend"] = self.plan["backend"]
        base.update(mode=mode, label="idle" if point is None else "steady",
                    window=window_id(point, mode), power_source=self.source,
                    gpus_running=len(results) if point is not None else 0)  # fmt: skip
        keys = (
            "status",
            "error",
            "t_start",
            "t_end",
            "calls",
            "us_per_call",
            "calls_per_replay",
            "cold_sets",
        )
        ran = [r for r in results if r["status"] == "ok"]
        stats = []
        if ran and self.sampler.readers:
            t0, t1 = max(r["t_start"] for r in ran), min(r["t_end"] for r in ran)
            if t1 > t0:
                stats = self.sampler.window(t0, t1)
                for r in ran:
                    r["t_start"], r["t_end"] = t0, t1
        if len(results) == 1:  # one loop: every GPU the job sees shares its result
            pairs = [(results[0], s) for s in stats] or [(results[0], None)]
        else:
            pairs = [(r, stats[j] if r["status"] == "ok" and j < len(stats) else None)
                     for j, r in enumerate(results)]  # fmt: skip
        for j, (result, gpu_stats) in enumerate(pairs):
            row = {**base, **{k: result.get(k) for k in keys}}
            if gpu_stats is not None:
                row.update(gpu_stats)
            elif result["status"] == "ok":
                row["seconds"] = result["t_end"] - result["t_start"]
            self.rows.append(row)
            if point is not None and self.journal is not None:
                key = f"{base['window']}#{j}"
                self.journal.write(json.dumps({**row, "_key": key}, default=str) + "\n")
        if self.journal is not None:
            self.journal.flush()


def worker_envs(plan: dict) -> list[dict]:
    """One environment per worker: a GPU each when the plan asks for several GPUs."""
    want = int(plan.get("gpus", 1))
    gpus = machine_gpus() if want > 1 else []
    if len(gpus) < 2:
        return [{}]
    return [{"CUDA_VISIBLE_DEVICES": gpu} for gpu in gpus[:want]]


def run_kernel_power(plan: dict, out_windows, out_timeline, log_stream=None) -> pd.DataFrame:
    out_windows = Path(out_windows)
    work_dir = out_windows.parent / f".{out_windows.stem}.work"
    windows, timeline = KernelPowerRun(plan, work_dir, log_stream, worker_envs(plan)).run()
    producer = f"kernel_power {plan['backend']}"
    write_frame(timeline if not timeline.empty else pd.DataFrame({"backend": []}), out_timeline,
                producer, plan)  # fmt: skip
    write_frame(windows, out_windows, producer, plan)
    for stale in work_dir.iterdir():
        stale.unlink()
    work_dir.rmdir()
    return windows
