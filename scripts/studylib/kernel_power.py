"""Sustained kernel loops under the power sampler: what the GPU draws, clocks and does.

For each representative point and mode (eager launches, graph replays) the backend's worker
runs the kernel back to back for ``seconds``; the sampler in this process (NVML reads are
process-independent) records every GPU the job can see. An idle baseline comes first and a
cooldown separates loops. One row per (window, GPU).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pandas as pd

from .io import write_frame
from .power import Sampler, open_readers, visible_nvml_indices
from .sweep import WorkerClient, WorkerGone

log = logging.getLogger("study.kernel_power")

POINT_KEYS = ["backend", "impl", "op", "dtype", "shape", "M", "N", "K", "G"]
WINDOW_COLUMNS = [
    *POINT_KEYS, "mode", "label", "window", "t_start", "t_end", "seconds", "gpu", "gpu_name",
    "power_source", "energy_j", "energy_j_samples", "energy_gap_pct", "avg_w", "avg_w_samples",
    "power_limit_w", "pct_limit", "sm_clock_mhz", "mem_clock_mhz", "temp_c_max",
    "throttle_reasons", "sm_util", "sm_occupancy", "tensor_util", "dram_util", "gpm_pairs",
    "samples", "calls", "us_per_call", "status", "error", "sampler_cpu_pct",
]  # fmt: skip


def window_id(point: dict | None, mode: str) -> str:
    if point is None:
        return mode
    g = f"/G={point['G']}" if point.get("G") else ""
    return (f"{point['backend']}/{point['impl']}/{point['op']}/{point['dtype']}/"
            f"{point['shape']}{g}/M={point['M']}/{mode}")  # fmt: skip


class KernelPowerRun:
    def __init__(self, plan: dict, work_dir: Path, log_stream=None):
        self.plan = plan
        self.rows: list[dict] = []
        work_dir.mkdir(parents=True, exist_ok=True)
        self.plan_path = work_dir / "plan.json"
        self.plan_path.write_text(json.dumps(plan, sort_keys=True), encoding="utf-8")
        self.client = WorkerClient(plan["backend"], self.plan_path, log_stream)
        self.timeout = float(plan["timing"]["point_timeout_s"])

    def run(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        plan = self.plan
        try:
            hello = self.client.start(self.timeout)
        except WorkerGone as exc:
            hello = {"device": "cpu", "failed": f"worker failed to start: {exc}"}
        device = hello["device"]
        readers, self.source, why = open_readers(
            visible_nvml_indices() if device == "cuda" else None
        )
        if why:
            log.info("power source %s (%s)", self.source, why)
        self.sampler = Sampler(readers, rate_hz=plan["sample_hz"])
        seconds = plan["seconds"][device]
        try:
            with self.sampler:
                time.sleep(0.2)  # a few samples before the first window opens
                t0 = time.monotonic()
                time.sleep(plan["idle_s"][device])
                self.record(None, "idle", {"status": "ok", "error": "", "t_start": t0,
                                           "t_end": time.monotonic()})  # fmt: skip
                for point in plan["points"]:
                    for mode in plan["modes"]:
                        if self.loop(hello, point, mode, seconds):
                            time.sleep(plan["cooldown_s"][device])
        finally:
            self.client.stop()
        cpu = self.sampler.cpu_fraction()
        windows = pd.DataFrame(self.rows)
        windows["sampler_cpu_pct"] = 100 * cpu if cpu is not None else None
        for column in WINDOW_COLUMNS:
            if column not in windows.columns:
                windows[column] = None
        windows = windows[WINDOW_COLUMNS]
        for column in ("M", "N", "K", "G", "gpu", "calls"):
            windows[column] = pd.to_numeric(windows[column]).astype("Int64")
        timeline = pd.DataFrame(self.sampler.timeline())
        if not timeline.empty:
            timeline.insert(0, "backend", plan["backend"])
            timeline["t_rel"] = timeline["t"] - timeline["t"].min()
        log.info("sampler used %.2f%% of one core", 100 * (cpu or 0))
        return windows, timeline

    def loop(self, hello: dict, point: dict, mode: str, seconds: float) -> bool:
        """Run one window; True when the device actually worked (a cooldown is due)."""
        if hello.get("unsupported") or hello.get("failed"):
            status = "unsupported" if hello.get("unsupported") else "error"
            result = {"status": status, "error": hello.get("unsupported") or hello["failed"]}
        else:
            try:
                if self.client.proc is None:
                    self.client.start(self.timeout)
                message = {"loop": point, "mode": mode, "seconds": seconds}
                result = self.client.request(message, seconds + self.timeout)
            except WorkerGone as exc:
                result = {"status": "error", "error": str(exc)}
                self.client.stop()
            if result.pop("fatal", False):
                self.client.stop()
        log.info("%s: %s %s", window_id(point, mode), result["status"], result.get("error", ""))
        self.record(point, mode, result)
        return result["status"] == "ok"

    def record(self, point: dict | None, mode: str, result: dict) -> None:
        base = {k: (point or {}).get(k) for k in POINT_KEYS}
        base["backend"] = self.plan["backend"]
        base.update(
            mode=mode,
            label="idle" if point is None else "steady",
            window=window_id(point, mode),
            power_source=self.source,
            **{
                k: result.get(k)
                for k in ("status", "error", "t_start", "t_end", "calls", "us_per_call")
            },  # fmt: skip
        )
        if result["status"] != "ok" or not self.sampler.readers:
            if result["status"] == "ok":
                base["seconds"] = result["t_end"] - result["t_start"]
            self.rows.append(base)
            return
        for stats in self.sampler.window(result["t_start"], result["t_end"]):
            self.rows.append({**base, **stats})


def run_kernel_power(plan: dict, out_windows, out_timeline, log_stream=None) -> pd.DataFrame:
    out_windows = Path(out_windows)
    work_dir = out_windows.parent / f".{out_windows.stem}.work"
    windows, timeline = KernelPowerRun(plan, work_dir, log_stream).run()
    write_frame(timeline if not timeline.empty else pd.DataFrame({"backend": []}), out_timeline)
    write_frame(windows, out_windows)
    for stale in work_dir.iterdir():
        stale.unlink()
    work_dir.rmdir()
    return windows


def aggregate_kernel_power(paths, out_csv) -> pd.DataFrame:
    frames = [pd.read_parquet(p) for p in paths]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=WINDOW_COLUMNS)
    write_frame(table, out_csv)
    return table
