"""Decode power: launch a server, drive decode-heavy load at each concurrency, sample power.

Windows per concurrency C, on the sampler's clock: an idle baseline before the server starts
(once), a discarded warm-up, the steady window (at least 0.85 × C requests in flight; shorter
than ``min_steady_s`` is flagged ``valid = false``, not reported as a result) and the
ramp-down. The server is always torn down, leaving no process behind.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from ..io import write_frame, write_json
from ..power import Sampler, open_readers, visible_nvml_indices
from .engines import engine as get_engine
from .engines.sglang_engine import expert_recorder
from .experts import RECORDER_DIR_ENV, expert_m, load_logical_count
from .launcher import ServerProcess
from .load import LoadSpec, run_load, steady_window, summarize_load

log = logging.getLogger("study.decode")

SUMMARY_COLUMNS = [
    "engine", "variant", "concurrency", "gpus", "power_source", "steady_s", "valid",
    "requests", "errors", "wrong_length", "output_tok_s", "tpot_ms", "itl_p50_ms",
    "itl_p99_ms", "ttft_p50_ms", "avg_w_per_gpu", "avg_w_total", "pct_limit", "j_per_token",
    "energy_gap_pct", "sm_clock_mhz", "throttle_reasons", "sm_util", "tensor_util", "dram_util",
]  # fmt: skip


def _combine(windows: list[dict], tokens: int) -> dict:
    """Per-GPU window statistics -> the row's power columns (sum over GPUs, mean per GPU)."""
    if not windows:
        return {}
    watts = [w["avg_w"] for w in windows if w.get("avg_w") is not None]
    limits = [w["power_limit_w"] for w in windows if w.get("power_limit_w")]
    energy = [w["energy_j"] for w in windows if w.get("energy_j") is not None]
    energy_s = [w["energy_j_samples"] for w in windows if w.get("energy_j_samples") is not None]

    def mean(key):
        values = [w[key] for w in windows if w.get(key) is not None]
        return sum(values) / len(values) if values else None

    total = sum(watts) if len(watts) == len(windows) else None
    reasons = sorted(
        {r for w in windows for r in (w.get("throttle_reasons") or "").split(",") if r}
    )
    return {
        "gpus": len(windows),
        "avg_w_total": total,
        "avg_w_per_gpu": total / len(windows) if total is not None else None,
        "pct_limit": 100 * total / sum(limits) if total is not None and limits else None,
        "j_per_token": sum(energy) / tokens if len(energy) == len(windows) and tokens else None,
        "energy_gap_pct": 100 * (sum(energy_s) - sum(energy)) / sum(energy)
        if energy and len(energy_s) == len(energy) and sum(energy)
        else None,
        "sm_clock_mhz": mean("sm_clock_mhz"),
        "throttle_reasons": ",".join(reasons),
        "sm_util": mean("sm_util"),
        "tensor_util": mean("tensor_util"),
        "dram_util": mean("dram_util"),
    }


def run_decode(plan: dict, out_dir: str | Path) -> pd.DataFrame:
    """Run every concurrency of one server variant; write its files under ``out_dir``.

    ``plan``: engine, variant, model, args, env, host, port, concurrency (list),
    input_len, output_len, prompts_per_concurrency, min_steady_s, idle_s, warmup_requests,
    ready_timeout_s, stop_grace_s, sample_hz, vocab_size, expert_distribution (bool).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    eng = get_engine(plan["engine"])
    host, port = plan["host"], int(plan["port"])
    base_url = eng.base_url(host, port)
    args = list(plan.get("args", []))
    env = {**eng.env, **{k: str(v) for k, v in (plan.get("env") or {}).items()}}
    if plan.get("expert_distribution") and plan["engine"] == "sglang":
        # SGLang records per-layer per-expert token counts only when started this way, and
        # writes its dumps into the folder this variable names.
        args += ["--expert-distribution-recorder-mode", "stat"]
        plan = {**plan, "expert_record_dir": str(out_dir / "expert_record")}
        Path(plan["expert_record_dir"]).mkdir(parents=True, exist_ok=True)
        env[RECORDER_DIR_ENV] = plan["expert_record_dir"]
    argv = eng.argv(plan["model"], host, port, args, python=sys.executable)
    readers, source, why = open_readers(visible_nvml_indices())
    if why:
        log.info("power source %s (%s)", source, why)
    sampler = Sampler(readers, rate_hz=plan.get("sample_hz", 20))
    rows, windows, requests = [], [], []
    server = ServerProcess(
        argv,
        out_dir / "server.log",
        ready=lambda: eng.ready(host, port, plan["model"]),
        env=env,
        ready_timeout_s=plan.get("ready_timeout_s", 1800),
        stop_grace_s=plan.get("stop_grace_s", 30),
    )
    with sampler:
        time.sleep(0.2)
        t0 = time.monotonic()
        time.sleep(plan.get("idle_s", 5))
        windows += [{"label": "idle", "concurrency": 0, **w}
                    for w in sampler.window(t0, time.monotonic())]  # fmt: skip
        with server:
            ready_s = server.wait_ready()
            for c in plan["concurrency"]:
                rows.append(_one_concurrency(plan, eng, base_url, c, sampler, source,
                                             windows, requests, out_dir))  # fmt: skip
        stop = server.stop_result
    summary = pd.DataFrame(rows)
    for column in SUMMARY_COLUMNS:
        if column not in summary.columns:
            summary[column] = None
    summary = summary[SUMMARY_COLUMNS]
    write_frame(summary, out_dir / "summary.csv")
    write_frame(pd.DataFrame(requests), out_dir / "requests.parquet")
    write_frame(pd.DataFrame(windows), out_dir / "windows.parquet")
    timeline = pd.DataFrame(sampler.timeline())
    write_frame(timeline if not timeline.empty else pd.DataFrame({"gpu": []}),
                out_dir / "power_timeline.parquet")  # fmt: skip
    write_json(out_dir / "run.json", {"argv": argv, "engine_version": eng.version(),
                                      "ready_s": ready_s, "power_source": source,
                                      "sampler_cpu_pct": 100 * (sampler.cpu_fraction() or 0),
                                      "teardown": stop})  # fmt: skip
    return summary


def _one_concurrency(plan, eng, base_url, c, sampler, source, windows, requests, out_dir):
    spec = LoadSpec(
        concurrency=c,
        num_prompts=c * plan.get("prompts_per_concurrency", 8),
        input_len=plan["input_len"],
        output_len=plan["output_len"],
        vocab_size=plan["vocab_size"],
        seed=c,
    )
    warm = LoadSpec(**{**asdict(spec), "num_prompts": max(plan.get("warmup_requests", c), 1),
                       "output_len": min(spec.output_len, 16)})  # fmt: skip
    t_warm = time.monotonic()
    run_load(base_url, plan["model"], warm, eng.request_extras, eng.prompt_format)
    windows += [{"label": "warmup", "concurrency": c, **w}
                for w in sampler.window(t_warm, time.monotonic())]  # fmt: skip
    recording = plan.get("expert_distribution") and plan["engine"] == "sglang"
    if recording:
        expert_recorder(base_url, "start")
    records, active = run_load(base_url, plan["model"], spec, eng.request_extras,
                               eng.prompt_format)  # fmt: skip
    if recording:
        expert_recorder(base_url, "stop")
        record_dir = Path(plan["expert_record_dir"])
        before = set(record_dir.glob("*"))
        dump = expert_recorder(base_url, "dump")
        (out_dir / f"expert_distribution_c{c}.json").write_text(json.dumps(dump))
        _save_expert_m(dump, sorted(set(record_dir.glob("*")) - before), c, plan, out_dir)
    for r in records:
        requests.append({"concurrency": c, "index": r.index, "start": r.start,
                         "first_token": r.first_token, "end": r.end, "tokens": len(r.token_times),
                         "completion_tokens": r.completion_tokens, "error": r.error,
                         "ttft_s": r.ttft_s, "itl_s": r.itl_s()})  # fmt: skip
    window = steady_window(active, c)
    row = {"engine": plan["engine"], "variant": plan["variant"], "concurrency": c,
           "power_source": source}  # fmt: skip
    if window is None:
        row.update(steady_s=0.0, valid=False, requests=len(records),
                   errors=sum(1 for r in records if r.error))  # fmt: skip
        return row
    s0, s1 = window
    load = summarize_load(records, spec, s0, s1)
    stats = sampler.window(s0, s1)
    windows.extend({"label": "steady", "concurrency": c, **w} for w in stats)
    end = max((r.end for r in records if r.end), default=s1)
    windows.extend({"label": "ramp-down", "concurrency": c, **w} for w in sampler.window(s1, end))
    row.update(load)
    row.update(_combine(stats, load["output_tokens_steady"]))
    row["valid"] = bool(load["steady_s"] >= plan.get("min_steady_s", 20)
                        and load["errors"] == 0 and load["wrong_length"] == 0)  # fmt: skip
    log.info("C=%d: %.1f tok/s over %.1f s steady (valid=%s)", c, load["output_tok_s"] or 0,
             load["steady_s"], row["valid"])  # fmt: skip
    return row


def _save_expert_m(dump, new_files, c: int, plan: dict, out_dir: Path) -> None:
    """Per-layer per-expert counts and per-expert M of concurrency ``c``, from the record
    file the dump wrote (or counts in the dump's answer itself)."""
    source = None
    if isinstance(dump, dict) and "logical_count" in dump:
        source = dump
    elif new_files:
        source = new_files[-1]
    if source is None:
        log.warning("C=%d: the expert-distribution dump gave no counts: %s", c, dump)
        return
    try:
        counts = load_logical_count(source)
    except Exception as exc:  # noqa: BLE001 - the decode results stand without it
        log.warning("C=%d: cannot read the expert distribution record: %s", c, exc)
        return
    top_k = int(plan.get("top_k", 8))
    frame = expert_m(counts, c, top_k)
    frame.insert(0, "concurrency", c)
    write_frame(frame, out_dir / f"expert_m_c{c}.csv")
