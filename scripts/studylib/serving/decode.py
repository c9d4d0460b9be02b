"""Decode power: launch a server, hold a closed-loop load at each concurrency, sample power.

Windows per concurrency C, on the sampler's clock: an idle baseline before the server starts
(once), a discarded warm-up, the steady window (at least 0.85 × C requests in flight, held
for ``min_steady_s`` by the timed closed-loop load, so its length does not depend on the
server's speed; a shorter one, which only errors can cause, is flagged ``valid = false``)
and the ramp-down. The server is always torn down, leaving no process behind.

SGLang's expert-distribution recorder is not free (with CUDA graphs its hooks are captured
into every replayed step), so the power and latency windows run with it off, and the
per-expert token counts come from a second server start with the recorder on: the
recorder pass. Its TPOT and watts beside the main pass's give the recorder's cost.

With ``profile_steps`` > 0 (SGLang only), the main pass's server then profiles
``profile_steps`` decode steps at each C (the profile pass, after every steady window: a
process once traced by torch.profiler/CUPTI can run slower afterwards, see the H200 timer
test of 2026-12-01, so no measured window follows a trace): a closed-loop load at C,
``/start_profile`` once its first C requests have each streamed half their output less half
the profiled steps, so that the profiled steps run at the mean KV length of a request (the
context the sweep's decode attention and the HBM floor use; profiled at the load's start,
the H200's attention read a third of the sweep's), the traces of every TP rank read
into breakdown.csv (profile.py: per decode step, kernel time per step component, busy and
idle GPU time). A profile that fails at one C is a warning in run.json; nothing else is lost.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import sys
import threading
import time
from pathlib import Path

import pandas as pd

from ..core.io import write_frame, write_json
from ..core.progress import Progress
from ..findings.decode import delivery_note
from ..instruments.power_sampler import Sampler, open_readers, visible_nvml_indices
from .crosscheck import (
    CROSSCHECK_COLUMNS,
    TIMEOUT_MARGIN_S,
    bench_prompts,
    bench_serving_argv,
    ratios,
    run_bench_serving,
)
from .engines import engine as get_engine
from .engines.base import run_served_name
from .engines.sglang_engine import expert_recorder, requests_held, start_profile, stop_profile
from .experts import EXPERT_M_COLUMNS, RECORDER_DIR_ENV, expert_m, load_logical_count
from .launcher import ServerProcess, flag_value
from .load import (
    STEADY_FRACTION,
    LoadControl,
    LoadSpec,
    run_load,
    steady_window,
    summarize_load,
)
from .model import step_bytes
from .profile import RANK_COLUMNS, TraceError, breakdown_rows, rank_breakdown, read_kernels
from .profile import trace_files as find_traces
from .server_log import COLUMNS as SERVER_COLUMNS
from .server_log import server_window_of

log = logging.getLogger("study.decode")

UNIFORM_ROUTING_ENV = "SGLANG_SIMULATE_UNIFORM_EXPERTS"

SUMMARY_COLUMNS = [
    "engine", "variant", "model_kind", "weights", "routing", "cuda_graphs", "ep", "concurrency",
    "gpus", "power_source", "steady_s", "valid", "requests", "errors", "wrong_length",
    "output_tok_s", "tpot_ms", "tok_s_over_c_tpot", "decoding_share", "itl_p50_ms",
    "itl_p99_ms", "ttft_p50_ms", "avg_w_per_gpu", "w_gpu_min", "w_gpu_median", "w_gpu_max",
    "avg_w_total", "pct_limit", "idle_w_per_gpu", "j_per_token", "j_per_token_net",
    "energy_gap_pct", "sm_clock_mhz", "throttle_reasons", "sm_util", "tensor_util",
    "dram_util", "step_gb", "load_cpu_pct", *SERVER_COLUMNS, "first_error",
]  # fmt: skip

#: The recorder pass beside the main pass, per concurrency: what recording costs.
RECORDER_COLUMNS = [
    "engine", "variant", "concurrency", "steady_s", "tpot_ms", "tpot_ms_off", "tpot_ratio",
    "output_tok_s", "output_tok_s_off", "avg_w_per_gpu", "avg_w_per_gpu_off", "errors",
    "error",
]  # fmt: skip


#: The profile pass's measured breakdown, per concurrency, TP rank and step component
#: (step_components.COMPONENTS); tpot_ms is the main pass's at that C, for reference.
BREAKDOWN_COLUMNS = ["engine", "variant", "weights", "cuda_graphs", "concurrency", "rank",
                     "steps", "context", "component", "us_per_step", "kernels_per_step",
                     *RANK_COLUMNS[1:], "tpot_ms"]  # fmt: skip

#: The profile_prefix of the study's traces: {prefix}-{profile_id}-TP-{rank}.trace.json.gz.
PROFILE_PREFIX = "decode"
#: How long a profile may take at one C (its load, the steps, the trace files) by default.
PROFILE_TIMEOUT_S = 120.0


def _combine(windows: list[dict], tokens: int, idle_w_total: float | None, seconds: float):
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
    joules = sum(energy) if len(energy) == len(windows) else None
    reasons = sorted(
        {r for w in windows for r in (w.get("throttle_reasons") or "").split(",") if r}
    )
    net = None
    if joules is not None and idle_w_total is not None and tokens:
        net = (joules - idle_w_total * seconds) / tokens
    spread = {}
    if total is not None:
        # Across the job's GPUs: tensor-parallel ranks need not draw alike.
        spread = {"w_gpu_min": min(watts), "w_gpu_median": statistics.median(watts),
                  "w_gpu_max": max(watts)}  # fmt: skip
    return {
        "gpus": len(windows),
        "avg_w_total": total,
        "avg_w_per_gpu": total / len(windows) if total is not None else None,
        **spread,
        "pct_limit": 100 * total / sum(limits) if total is not None and limits else None,
        "j_per_token": joules / tokens if joules is not None and tokens else None,
        "j_per_token_net": net,
        "energy_gap_pct": 100 * (sum(energy_s) - sum(energy)) / sum(energy)
        if energy and len(energy_s) == len(energy) and sum(energy)
        else None,
        "sm_clock_mhz": mean("sm_clock_mhz"),
        "throttle_reasons": ",".join(reasons),
        "sm_util": mean("sm_util"),
        "tensor_util": mean("tensor_util"),
        "dram_util": mean("dram_util"),
    }


#: Each engine's expert-parallel size flags (SGLang 0.5.16: --ep-size and its aliases).
EP_FLAGS = {"sglang": ("--ep-size", "--ep", "--expert-parallel-size"),
            "vllm": ("--enable-expert-parallel",)}  # fmt: skip


def _size_flag(args: list, flags: tuple) -> int:
    """The value of the first of ``flags`` the argv gives, else 1."""
    args = [str(a) for a in args]
    return int(next((v for f in flags if (v := flag_value(args, f)) is not None), 1))


def expert_parallel(engine: str, args: list) -> int | None:
    """The server's expert-parallel size: SGLang's --ep value (1 without it); vLLM's
    --enable-expert-parallel spreads the experts over its TP ranks (--tensor-parallel-size)."""
    if engine not in EP_FLAGS:
        return None
    if engine == "vllm":
        if EP_FLAGS["vllm"][0] not in [str(a) for a in args]:
            return 1
        return _size_flag(args, ("--tensor-parallel-size", "-tp"))
    return _size_flag(args, EP_FLAGS["sglang"])


def cuda_graphs(engine: str, args: list) -> bool | None:
    """Whether the server replays CUDA graphs (SGLang and vLLM do unless told not to)."""
    flags = {"sglang": "--disable-cuda-graph", "vllm": "--enforce-eager"}
    if engine not in flags:
        return None
    return flags[engine] not in [str(a) for a in args]


class ServerPass:
    """One server start of a variant: its argv, env, served name and log."""

    def __init__(self, plan: dict, eng, out_dir: Path, log_name: str, recorder: bool = False,
                 shared_experts: int = 0):  # fmt: skip
        self.plan, self.eng = plan, eng
        self.host, self.port = plan["host"], int(plan["port"])
        self.base_url = eng.base_url(self.host, self.port)
        self.served_name = run_served_name(plan["variant"])
        args = [str(a) for a in plan.get("args") or []]
        if plan.get("model_kind") == "dummy" and plan["engine"] == "sglang":
            args += ["--load-format", "dummy"]  # random weights: nothing to load or carry
        self.env = {**eng.env, **{k: str(v) for k, v in (plan.get("env") or {}).items()}}
        if plan.get("routing") == "uniform" and plan["engine"] == "sglang":
            # The router of random weights reads far fewer experts than a trained one (on the
            # H200, TPOT fell far below the uniform-routing HBM floor); SGLang's benchmark
            # switch spreads tokens uniformly over the experts. The recorder pass, when on,
            # records the routing the variant runs.
            self.env[UNIFORM_ROUTING_ENV] = "1"
        if recorder:
            # SGLang records per-layer per-expert token counts only when started this way,
            # and writes its dumps into the folder this variable names.
            # An unbounded buffer: the counts cover every step of the window (the default
            # keeps the last 1000, a fraction of a second at C = 1 with CUDA graphs).
            args += ["--expert-distribution-recorder-mode", "stat",
                     "--expert-distribution-recorder-buffer-size", "-1"]  # fmt: skip
            if shared_experts:
                # SGLang fuses shared experts into the routed ones on sm_80+ and hands their
                # ids (>= the routed count) to the recorder, whose per-expert buffer they
                # overrun: a device-side assert on the H200 (2026-11-30). Unfused, the routed
                # counts are the same.
                args += ["--disable-shared-experts-fusion"]
            self.record_dir = out_dir / "expert_record"
            self.record_dir.mkdir(parents=True, exist_ok=True)
            self.env[RECORDER_DIR_ENV] = str(self.record_dir.resolve())
        self.argv = eng.argv(plan["model"], self.host, self.port, args, python=sys.executable,
                             served_name=self.served_name)  # fmt: skip
        self.server = ServerProcess(
            self.argv,
            out_dir / log_name,
            ready=lambda: eng.ready(self.host, self.port, plan["model"], self.served_name),
            env=self.env,
            ready_timeout_s=plan["ready_timeout_s"],
            stop_grace_s=plan.get("stop_grace_s", 30),
        )

    def load(self, spec: LoadSpec, control: LoadControl | None = None):
        model = self.eng.request_model(self.plan["model"], self.served_name)
        return run_load(self.base_url, model, spec, self.eng.request_extras,
                        self.eng.prompt_format, control)  # fmt: skip


def _specs(plan: dict, c: int, seconds: float) -> tuple[LoadSpec, LoadSpec]:
    """The warm-up (C short requests, or ``warmup_requests``) and the timed steady load."""
    common = {"concurrency": c, "input_len": plan["input_len"], "vocab_size": plan["vocab_size"],
              "seed": c}  # fmt: skip
    warm = LoadSpec(**common, output_len=min(plan["output_len"], 16),
                    num_prompts=max(plan.get("warmup_requests") or c, 1))  # fmt: skip
    return warm, LoadSpec(**common, output_len=plan["output_len"], duration_s=seconds)


def run_decode(plan: dict, out_dir: str | Path, model_facts: dict | None = None) -> pd.DataFrame:
    """Run every concurrency of one server variant; write its files under ``out_dir``.

    ``plan`` (resolved for the device): engine, variant, model, model_kind (local, dummy or
    a path), args, env, host, port, concurrency (list), input_len, output_len,
    min_steady_s, idle_s, ready_timeout_s, sample_hz, vocab_size, weights,
    expert_distribution (bool), expert_distribution_s, top_k, profile_steps (0 or absent: no
    profile pass), profile_timeout_s, layers (else the model's). ``model_facts``: the served
    model's geometry (for the HBM bytes of a step), when the study built the model.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    eng = get_engine(plan["engine"])
    readers, source, why = open_readers(visible_nvml_indices())
    if why:
        log.info("power source %s (%s)", source, why)
    sampler = Sampler(readers, rate_hz=plan["sample_hz"])
    main = ServerPass(plan, eng, out_dir, "server.log")
    rows, windows, requests, recorder_rows, breakdown, crosscheck = [], [], [], [], [], []
    expert_frames = []
    facts = {"argv": main.argv, "served_name": main.served_name,
             "engine_version": eng.version(), "power_source": source}  # fmt: skip
    with sampler:
        time.sleep(0.2)
        t0 = time.monotonic()
        time.sleep(plan["idle_s"])
        idle = sampler.window(t0, time.monotonic())
        windows += [{"label": "idle", "concurrency": 0, **w} for w in idle]
        idle_w = [w["avg_w"] for w in idle if w.get("avg_w") is not None]
        idle_w_total = sum(idle_w) if idle and len(idle_w) == len(idle) else None
        started = time.monotonic()
        passes = 2 if plan.get("expert_distribution") and plan["engine"] == "sglang" else 1
        progress = Progress(passes * len(plan["concurrency"]))
        with main.server:
            facts["ready_s"] = main.server.wait_ready()
            progress.last = time.monotonic()  # the server's start is not a step
            for c in plan["concurrency"]:
                rows.append(_one_concurrency(main, c, sampler, source, windows, requests,
                                             idle_w_total, model_facts))  # fmt: skip
                log.info("%s main pass, C=%d done", progress.step(), c)
            # Before the profile pass: no measured window follows a trace.
            facts["crosscheck"] = _crosscheck_pass(main, rows, out_dir, crosscheck)
            facts["profile"] = _profile_pass(main, rows, model_facts, out_dir, breakdown)
        facts["teardown"] = main.server.stop_result
        facts["main_pass_s"] = time.monotonic() - started
        if plan.get("expert_distribution") and plan["engine"] == "sglang":
            shared = (model_facts or {}).get("shared_experts", 0)
            rec = ServerPass(plan, eng, out_dir, "server_recorder.log", recorder=True,
                        shared_experts=shared)  # fmt: skip
            started = time.monotonic()
            try:
                with rec.server:
                    facts["recorder_ready_s"] = rec.server.wait_ready()
                    progress.last = time.monotonic()
                    for c, main_row in zip(plan["concurrency"], rows, strict=True):
                        counts, row = _recorder_concurrency(rec, c, sampler, main_row)
                        recorder_rows.append(row)
                        log.info("%s recorder pass, C=%d done", progress.step(), c)
                        if counts is not None:
                            frame = expert_m(counts, c, int(plan["top_k"]))
                            frame.insert(0, "concurrency", c)
                            expert_frames.append(frame)
            except Exception as exc:  # noqa: BLE001 - the main pass's results stand without it
                why = _failure_text(exc, out_dir / "server_recorder.log")
                log.warning("the recorder pass failed (main pass kept): %s", why)
                facts["recorder_error"] = why
                recorder_rows.append({"engine": plan["engine"], "variant": plan["variant"],
                                      "error": why})  # fmt: skip
            facts["recorder_teardown"] = rec.server.stop_result
            facts["recorder_pass_s"] = time.monotonic() - started
    summary = pd.DataFrame(rows).reindex(columns=SUMMARY_COLUMNS)
    write_frame(summary, out_dir / "summary.csv")
    write_frame(pd.DataFrame(recorder_rows).reindex(columns=RECORDER_COLUMNS),
                out_dir / "recorder.csv")  # fmt: skip
    experts = (pd.concat(expert_frames, ignore_index=True) if expert_frames
               else pd.DataFrame(columns=EXPERT_M_COLUMNS))  # fmt: skip
    write_frame(experts.reindex(columns=EXPERT_M_COLUMNS), out_dir / "expert_m.csv")
    write_frame(pd.DataFrame(crosscheck).reindex(columns=CROSSCHECK_COLUMNS),
                out_dir / "crosscheck.csv")  # fmt: skip
    write_frame(pd.DataFrame(breakdown).reindex(columns=BREAKDOWN_COLUMNS),
                out_dir / "breakdown.csv")  # fmt: skip
    write_frame(pd.DataFrame(requests), out_dir / "requests.parquet")
    write_frame(pd.DataFrame(windows), out_dir / "windows.parquet")
    timeline = pd.DataFrame(sampler.timeline())
    write_frame(timeline if not timeline.empty else pd.DataFrame({"gpu": []}),
                out_dir / "power_timeline.parquet")  # fmt: skip
    facts["sampler_cpu_pct"] = 100 * (sampler.cpu_fraction() or 0)
    facts["model"] = model_facts
    write_json(out_dir / "run.json", facts)
    return summary


def _crosscheck_pass(pas: ServerPass, main_rows: list[dict], out_dir: Path,
                     crosscheck: list) -> dict:  # fmt: skip
    """SGLang's bench_serving at each C against the same server (serving.crosscheck): one
    row per C into ``crosscheck``; the record for run.json. A failed run is that C's
    ``bench_error``; nothing else is lost."""
    plan = pas.plan
    if not plan.get("crosscheck"):
        return {"enabled": False}
    if plan["engine"] != "sglang":
        why = f"bench_serving drives SGLang's own API; the {plan['engine']} engine is not checked"
        log.info("cross-check skipped: %s", why)
        return {"enabled": True, "skipped": why}
    folder = out_dir / "crosscheck"
    folder.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    for c, row in zip(plan["concurrency"], main_rows, strict=True):
        out = {key: row.get(key) for key in ("engine", "variant", "weights", "cuda_graphs",
               "concurrency", "tpot_ms", "output_tok_s", "server_tok_s", "avg_w_per_gpu",
               "valid")}  # fmt: skip
        prompts = bench_prompts(c, plan["min_steady_s"], plan["output_len"], row.get("tpot_ms"))
        out["bench_prompts"] = prompts
        if not pas.server.alive():
            out["bench_error"] = "the server is no longer running"
            crosscheck.append(out)
            continue
        _drain(pas)
        result_file = folder / f"bench_c{c}.jsonl"
        argv = bench_serving_argv(sys.executable, pas.host, pas.port, plan["model"], c,
                                  plan["input_len"], plan["output_len"], prompts, c,
                                  result_file)  # fmt: skip
        # Its expected time at the study's TPOT, twice, and its start (imports, tokenizer).
        expected = prompts / c * plan["output_len"] * (row.get("tpot_ms") or 100.0) / 1e3
        result = run_bench_serving(argv, result_file, 2 * expected + TIMEOUT_MARGIN_S,
                                   folder / "bench_serving.log")  # fmt: skip
        t0, t1 = result.pop("t0"), result.pop("t1")
        out.update(result)
        # The scheduler's rate over bench_serving's steady part (not its start's prefills or
        # its end's stragglers), as over the study's steady window.
        steady = server_window_of(pas.server.log_path, t0, t1, math.ceil(STEADY_FRACTION * c))
        out["bench_server_tok_s"] = steady["server_tok_s"]
        out.update(ratios(out))
        crosscheck.append(out)
        if out.get("bench_error"):
            log.warning("C=%d: cross-check failed: %s", c, out["bench_error"])
        else:
            log.info("C=%d: bench_serving TPOT %.2f ms, %.0f tok/s (study %.2f ms, %.0f tok/s)",
                     c, out.get("bench_tpot_ms") or 0, out.get("bench_output_tok_s") or 0,
                     out.get("tpot_ms") or 0, out.get("output_tok_s") or 0)  # fmt: skip
    return {"enabled": True, "pass_s": time.monotonic() - started}


#: How long to wait for the server to drop a finished load's cancelled requests.
DRAIN_TIMEOUT_S = 60.0


def _drain(pas: ServerPass, timeout: float = DRAIN_TIMEOUT_S) -> int | None:
    """Wait until the server holds no request (SGLang: /v1/loads), so that the requests the
    previous load cancelled at its window's end do not run in the next one: SGLang drops a
    cancelled stream's request only when it notices the closed connection, and on the H200
    (2026-12-01) a profile started at once after the C = 64 window ran at batch 80 for
    C = 16. Returns the requests still held at the end (None: the engine does not say)."""
    if pas.plan["engine"] != "sglang":
        return None
    deadline = time.monotonic() + timeout
    while True:
        held = requests_held(pas.base_url)
        if not held:
            return held
        if time.monotonic() >= deadline:
            log.warning("the server still holds %d requests after %.0f s: the next load "
                        "runs beside them", held, timeout)  # fmt: skip
            return held
        time.sleep(0.25)


def _steady(pas: ServerPass, c: int, seconds: float, sampler, windows: list, label: str):
    """Warm up, then hold C in flight for ``seconds``: the load and its steady window."""
    _drain(pas)
    warm, spec = _specs(pas.plan, c, seconds)
    t_warm = time.monotonic()
    pas.load(warm)
    windows += [{"label": f"{label}warmup", "concurrency": c, **w}
                for w in sampler.window(t_warm, time.monotonic())]  # fmt: skip
    load = pas.load(spec)
    return spec, load, steady_window(load.active, c, after=load.admitted)


def _one_concurrency(pas, c, sampler, source, windows, requests, idle_w_total, model_facts):
    plan = pas.plan
    spec, load, window = _steady(pas, c, plan["min_steady_s"], sampler, windows, "")
    for r in load.records:
        requests.append({"concurrency": c, "index": r.index, "start": r.start,
                         "first_token": r.first_token, "end": r.end, "tokens": len(r.token_times),
                         "completion_tokens": r.completion_tokens, "error": r.error,
                         "cut": r.cut, "ttft_s": r.ttft_s, "itl_s": r.itl_s()})  # fmt: skip
    row = {"engine": plan["engine"], "variant": plan["variant"],
           "model_kind": plan.get("model_kind"), "weights": plan.get("weights"),
           "routing": plan.get("routing"),
           "cuda_graphs": cuda_graphs(plan["engine"], plan.get("args") or []),
           "ep": expert_parallel(plan["engine"], plan.get("args") or []),
           "concurrency": c, "power_source": source, "load_cpu_pct": load.cpu_pct}  # fmt: skip
    if model_facts is not None and plan.get("routing") == "uniform":
        # The floor assumes uniform routing: what the served router does with random weights
        # is not known ahead (on the H200 it read far fewer experts).
        context = plan["input_len"] + plan["output_len"] / 2  # mean KV length over a request
        row["step_gb"] = step_bytes(model_facts, plan.get("weights") or "bf16", c, context) / 1e9
    if window is None:
        row.update(steady_s=0.0, valid=False, requests=len(load.records),
                   errors=sum(1 for r in load.records if r.error),
                   first_error=next((r.error for r in load.records if r.error), ""))  # fmt: skip
        return row
    s0, s1 = window
    summary = summarize_load(load.records, spec, s0, s1)
    stats = sampler.window(s0, s1)
    windows.extend({"label": "steady", "concurrency": c, **w} for w in stats)
    end = max((r.end for r in load.records if r.end), default=s1)
    windows.extend({"label": "ramp-down", "concurrency": c, **w} for w in sampler.window(s1, end))
    row.update(summary)
    row.update(_combine(stats, summary["output_tokens_steady"], idle_w_total, s1 - s0))
    row["idle_w_per_gpu"] = idle_w_total / len(stats) if idle_w_total and stats else None
    if plan["engine"] == "sglang":
        row.update(server_window_of(pas.server.log_path, s0, s1))
    delivery = delivery_note(row)
    if delivery:
        log.warning("C=%d: %s", c, delivery)
    row["valid"] = bool(summary["steady_s"] >= plan["min_steady_s"] and not delivery
                        and summary["errors"] == 0 and summary["wrong_length"] == 0)  # fmt: skip
    log.info("C=%d: %.1f tok/s, TPOT %.2f ms over %.1f s steady (valid=%s, load CPU %.0f %%)",
             c, summary["output_tok_s"] or 0, summary["tpot_ms"] or 0, summary["steady_s"],
             row["valid"], load.cpu_pct or 0)  # fmt: skip
    return row


def _recorder_concurrency(pas: ServerPass, c: int, sampler, main_row: dict):
    """One recorded window at C: the per-layer per-expert counts and the recorder's cost."""
    plan = pas.plan
    expert_recorder(pas.base_url, "start")
    windows: list = []
    spec, load, window = _steady(pas, c, plan["expert_distribution_s"], sampler, windows,
                                 "recorder-")  # fmt: skip
    expert_recorder(pas.base_url, "stop")
    before = set(pas.record_dir.glob("*"))
    dump = expert_recorder(pas.base_url, "dump")
    counts = _read_counts(dump, sorted(set(pas.record_dir.glob("*")) - before), c)
    (pas.record_dir / f"dump_answer_c{c}.json").write_text(json.dumps(dump))
    row = {"engine": plan["engine"], "variant": plan["variant"], "concurrency": c,
           "tpot_ms_off": main_row.get("tpot_ms"),
           "output_tok_s_off": main_row.get("output_tok_s"),
           "avg_w_per_gpu_off": main_row.get("avg_w_per_gpu")}  # fmt: skip
    if window is not None:
        summary = summarize_load(load.records, spec, *window)
        stats = _combine(sampler.window(*window), summary["output_tokens_steady"], None, 0)
        row.update(steady_s=summary["steady_s"], tpot_ms=summary["tpot_ms"],
                   output_tok_s=summary["output_tok_s"], errors=summary["errors"],
                   avg_w_per_gpu=stats.get("avg_w_per_gpu"))  # fmt: skip
        if row["tpot_ms"] and row["tpot_ms_off"]:
            row["tpot_ratio"] = row["tpot_ms"] / row["tpot_ms_off"]
    return counts, row


def _failure_text(exc: Exception, log_path: Path) -> str:
    """The exception and the server log's last error line (a CUDA assert names its kernel)."""
    text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return text
    errors = [ln.strip() for ln in lines if "Assertion" in ln or "Error:" in ln]
    return f"{text} | server log: {errors[0][:300]}" if errors else text


def _read_counts(dump, new_files, c: int):
    """Per-layer per-expert counts from the record file the dump wrote (or from the dump's
    answer itself), or None with a warning: the decode results stand without them."""
    source = None
    if isinstance(dump, dict) and "logical_count" in dump:
        source = dump
    elif new_files:
        source = [f for f in new_files if f.suffix == ".pt"][-1:] or new_files[-1:]
        source = source[0]
    if source is None:
        log.warning("C=%d: the expert-distribution dump gave no counts: %s", c, dump)
        return None
    try:
        return load_logical_count(source)
    except Exception as exc:  # noqa: BLE001 - the decode results stand without it
        log.warning("C=%d: cannot read the expert distribution record: %s", c, exc)
        return None


#: SGLang's tensor-parallel size flags: one scheduler process, so one trace, per TP rank.
TP_FLAGS = ("--tp", "--tp-size", "--tensor-parallel-size")


def tensor_parallel(args: list) -> int:
    """The server's TP size (1 without a flag): the trace files a profile writes."""
    return _size_flag(args, TP_FLAGS)


def model_layers(plan: dict, model_facts: dict | None) -> int | None:
    """The served model's decoder layers: the variant's ``layers``, the study model's
    geometry, or the local model folder's config.json; None when none says."""
    if plan.get("layers"):
        return int(plan["layers"])
    if model_facts and model_facts.get("layers"):
        return int(model_facts["layers"])
    try:
        config = json.loads((Path(str(plan.get("model"))) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    value = config.get("num_hidden_layers") or (config.get("text_config") or {}).get(
        "num_hidden_layers"
    )
    return int(value) if value else None


def _profile_pass(pas: ServerPass, main_rows: list[dict], model_facts, out_dir: Path,
                  breakdown: list) -> dict:  # fmt: skip
    """Profile ``profile_steps`` decode steps at each C (module docstring): the breakdown
    rows go into ``breakdown``; the record for run.json is returned. Never raises for a
    failed profile: its reason is the C's entry under ``errors``."""
    plan = pas.plan
    steps = int(plan.get("profile_steps") or 0)
    if steps <= 0:
        return {"num_steps": 0}
    if plan["engine"] != "sglang":
        why = f"the {plan['engine']} engine has no profiler endpoint: no breakdown"
        log.info("profile pass skipped: %s", why)
        return {"num_steps": steps, "skipped": why}
    layers = model_layers(plan, model_facts)
    if not layers:
        why = ("the served model's layer count is unknown (no layers in the variant, no "
               "study_model.json or local config.json): no breakdown")  # fmt: skip
        log.warning("profile pass skipped: %s", why)
        return {"num_steps": steps, "skipped": why}
    ranks = tensor_parallel(plan.get("args") or [])
    stamp = time.strftime("%Y%m%dT%H%M%S")
    record = {"num_steps": steps, "layers": layers, "ranks": ranks, "prefix": PROFILE_PREFIX,
              "traces": [], "errors": {}, "warnings": {}}  # fmt: skip
    common = {"engine": plan["engine"], "variant": plan["variant"], "weights": plan.get("weights"),
              "cuda_graphs": cuda_graphs(plan["engine"], plan.get("args") or [])}  # fmt: skip
    started = time.monotonic()
    for c, main_row in zip(plan["concurrency"], main_rows, strict=True):
        folder = out_dir / "profile" / f"c{c}"
        profile_id = f"c{c}-{stamp}"
        try:
            if not pas.server.alive():
                raise RuntimeError("the server is no longer running")
            by_rank, notes, context = _profile_concurrency(pas, c, steps, layers, ranks,
                                                           folder, profile_id)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the decode results stand without it
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            log.warning("C=%d: no measured breakdown: %s", c, why)
            record["errors"][str(c)] = why
        else:
            if notes:
                record["warnings"][str(c)] = "; ".join(notes)
            at_c = {**common, "concurrency": c, "context": context,
                    "tpot_ms": main_row.get("tpot_ms")}  # fmt: skip
            breakdown.extend(breakdown_rows(by_rank, at_c))
            first = by_rank[min(by_rank)]
            flag = " (a prefill pass in the window)" if first["prefill_in_window"] else ""
            log.info("C=%d: %.1f decode steps profiled at KV length %s: busy %.0f us, idle "
                     "%.0f us per step%s", c, first["steps"], context,
                     first["busy_us_per_step"], first["idle_us_per_step"], flag)  # fmt: skip
        for path in sorted(folder.glob(f"{PROFILE_PREFIX}-{profile_id}-*")):
            record["traces"].append({"concurrency": c, "file": str(path.relative_to(out_dir)),
                                     "bytes": path.stat().st_size})  # fmt: skip
    record["trace_bytes"] = sum(t["bytes"] for t in record["traces"])
    record["profile_pass_s"] = time.monotonic() - started
    log.info("profile pass: %d trace files (%.1f MB) kept under %s", len(record["traces"]),
             record["trace_bytes"] / 1e6, out_dir / "profile")  # fmt: skip
    return record


def profile_after_tokens(output_len: int, steps: int) -> int:
    """Tokens each request streams before the profile starts, so that its ``steps`` steps
    centre on half the output: the mean KV length over a request's decode."""
    return max(1, int(output_len) // 2 - int(steps) // 2)


def _profile_concurrency(pas: ServerPass, c: int, steps: int, layers: int, ranks: int,
                         folder: Path, profile_id: str) -> tuple[dict, list, float]:  # fmt: skip
    """One profile at C: a closed-loop load at C in a thread; once its first C requests have
    each streamed ``profile_after_tokens`` tokens (past the start's prefill burst, at the
    mean KV length), /start_profile for ``steps`` passes; the traces of all ``ranks`` read,
    the load stopped. Bounded by ``profile_timeout_s``. {rank: breakdown}, notes on what is
    missing, and the KV length at the profiled steps' middle (input, the fewest tokens the
    requests had streamed when the profile was asked for, half the steps)."""
    plan = pas.plan
    timeout = float(plan.get("profile_timeout_s") or PROFILE_TIMEOUT_S)
    folder.mkdir(parents=True, exist_ok=True)
    # Timed only as a bound: the load is stopped once the traces are in.
    spec = LoadSpec(concurrency=c, input_len=plan["input_len"], output_len=plan["output_len"],
                    duration_s=timeout, vocab_size=plan["vocab_size"], seed=c)  # fmt: skip
    control = LoadControl(after_tokens=profile_after_tokens(plan["output_len"], steps))
    outcome = {}
    _drain(pas)

    def drive():
        try:
            outcome["load"] = pas.load(spec, control)
        except Exception as exc:  # noqa: BLE001 - reported by the waiting thread
            outcome["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            outcome["done"] = True
            control.streaming.set()  # the waiter learns the load ended

    deadline = time.monotonic() + timeout
    thread = threading.Thread(target=drive, name=f"profile-load-c{c}", daemon=True)
    thread.start()
    try:
        if not control.streaming.wait(timeout) or outcome.get("done"):
            raise RuntimeError(f"the profile load's {c} requests never streamed "
                               f"{control.after_tokens} tokens each "
                               f"({_load_problem(outcome, timeout)})")  # fmt: skip
        context = plan["input_len"] + (control.tokens or 0) + steps / 2
        start_profile(pas.base_url, folder.resolve(), steps, PROFILE_PREFIX, profile_id,
                      timeout=max(deadline - time.monotonic(), 1.0))  # fmt: skip
        try:
            traces, notes = _wait_for_traces(folder, profile_id, ranks, deadline,
                                             running=lambda: not outcome.get("done")
                                             and pas.server.alive())  # fmt: skip
        except Exception:
            _end_profile(pas)  # else the next C's /start_profile finds it still running
            raise
    finally:
        control.stop.set()
        thread.join(timeout=60)
    if thread.is_alive():
        notes.append("the profile load did not stop within 60 s")
    by_rank = {}
    for rank, (path, kernels) in sorted(traces.items()):
        try:
            by_rank[rank] = rank_breakdown(kernels, layers, where=str(path))
        except TraceError as exc:
            notes.append(f"rank {rank}: {exc}")
    if not by_rank:
        raise TraceError("; ".join(notes))
    return by_rank, notes, context


def _end_profile(pas: ServerPass) -> None:
    """Best effort: stop a profile that did not finish (nothing to do if it did)."""
    if not pas.server.alive():
        return
    try:
        stop_profile(pas.base_url)
    except Exception as exc:  # noqa: BLE001 - HTTP 500 "not in progress" included
        log.info("/stop_profile: %s", exc)


def _load_problem(outcome: dict, timeout: float) -> str:
    if "error" in outcome:
        return outcome["error"]
    load = outcome.get("load")
    if load is not None:
        failed = next((r.error for r in load.records if r.error), "")
        return f"the load ended: {failed}" if failed else "the load ended early"
    return f"too few tokens after {timeout:g} s"


def _wait_for_traces(folder: Path, profile_id: str, ranks: int, deadline: float, running):
    """{rank: (file, kernels)} once every rank's trace is complete (SGLang writes it only
    after the profiled steps, and gzips it in place: a file still being written is read again
    later). At ``deadline``, or once ``running()`` is false (no more steps coming), the
    ranks there are, with a note naming the missing ones; none is an error."""
    found, partial = {}, {}
    while True:
        for rank, path in find_traces(folder, PROFILE_PREFIX, profile_id).items():
            if rank in found:
                continue
            try:
                found[rank] = (path, read_kernels(path))
                partial.pop(rank, None)
            except TraceError as exc:
                if not exc.incomplete:
                    raise
                partial[rank] = str(exc)
        if len(found) >= ranks or time.monotonic() >= deadline or not running():
            break
        time.sleep(0.2)
    missing = [r for r in range(ranks) if r not in found]
    why = "; ".join(partial.values()) or "no file written"
    if not found:
        raise TimeoutError(f"no trace in {folder} for profile {profile_id} ({why})")
    notes = []
    if missing:
        notes.append(f"no complete trace of rank(s) {', '.join(map(str, missing))} ({why})")
        log.warning("profile %s: %s", profile_id, notes[-1])
    return found, notes
