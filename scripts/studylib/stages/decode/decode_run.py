"""Decode power: launch a server, hold a closed-loop load at each concurrency, sample power.

Windows per concurrency C, on the sampler's clock: an idle baseline before the server starts
(once), a discarded warm-up, the steady window (at least 0.85 × C requests in flight, held
for ``min_steady_s`` by the timed closed-loop load, so its length does not depend on the
server's speed; a shorter one, which only errors can cause, is flagged ``valid = false``)
and the ramp-down, then (``crosscheck``, SGLang) SGLang's own client at the same C
(decode_crosscheck). The server is always torn down, leaving no process behind; every
finished concurrency is journaled, so a stopped job resumes (``run_decode``).

SGLang's expert-distribution recorder is not free (with CUDA graphs its hooks are captured
into every replayed step), so the power and latency windows run with it off, and the
per-expert token counts come from a second server start with the recorder on: the
recorder pass. Its TPOT and watts beside the main pass's give the recorder's cost.

With ``profile_steps`` > 0 (SGLang only), the main pass's server then profiles
``profile_steps`` decode steps at each C (the profile pass, after every steady window: a
process once traced by torch.profiler/CUPTI can run slower afterwards, see the H200 timer
test of 2026-12-01, so no measured window follows a trace): a closed-loop load at C whose
prompts hold the context half a request's output would have given it less half the profiled
steps, ``/start_profile`` once its first C requests each have their first token, so that the
profiled steps run at the mean KV length of a request (the
context the sweep's decode attention and the HBM floor use; profiled at the load's start,
the H200's attention read a third of the sweep's), the traces of every TP rank read
into breakdown.csv (profile.py: per decode step, kernel time per step component, busy and
idle GPU time). A profile that fails at one C is a warning in run.json; nothing else is lost.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from functools import partial
from pathlib import Path

import pandas as pd

from ...core.io import write_frame, write_json
from ...core.journal import Journal
from ...core.progress import Progress
from ...core.verdicts import NOISE_FLOOR, beyond
from ...instruments.hardware import smallest_gpu_memory_mib
from ...instruments.power_sampler import Sampler, open_readers, visible_nvml_indices
from ...instruments.serving.engines import engine as get_engine
from ...instruments.serving.engines.sglang_engine import (
    expert_recorder,
)
from ...instruments.serving.launcher import ServerFailed
from ...instruments.serving.load_summary import decode_token_counter, summarize_load
from ...instruments.serving.served_model import step_bytes
from ...instruments.serving.server_log import server_window_of
from ...instruments.serving.window_precision import lasted, precise_end
from .decode_crosscheck import crosscheck_at, crosscheck_skipped, crosscheck_worker
from .decode_judgements import (
    NOT_STARTED,
    client_over_scheduler,
    delivery_note,
    engine_account,
    stalls_note,
)
from .decode_plan import weights_problem
from .decode_profile_pass import profile_left, profile_pass
from .decode_schema import (
    BREAKDOWN_COLUMNS,
    CROSSCHECK_COLUMNS,
    LOAD_LOCKSTEP,
    LOAD_STAGGERED,
    RECORDER_COLUMNS,
    SHORTENED_FIGURES,
    SUMMARY_COLUMNS,
    cuda_graphs,
    expert_parallel,
)
from .decode_server import (
    ServerPass,
    load_record,
    load_specs,
    main_pass_server,
    not_started,
    not_started_row,
    steady_load,
)
from .expert_m import EXPERT_M_COLUMNS, expert_m, read_counts

log = logging.getLogger("study.decode")


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


def run_decode(
    plan: dict,
    out_dir: str | Path,
    model_facts: dict | None = None,
    rule_plan: dict | None = None,
    hold_device=None,
) -> pd.DataFrame:
    """Run every concurrency of one server variant; write its files under ``out_dir``.

    ``plan`` (resolved for the device): engine, variant, model, model_kind (local, dummy or
    a path), args, env, host, port, concurrency (list), input_len, output_len,
    min_steady_s (with tpot_ci_pct: the longest window; shortest_steady_s the shortest), idle_s,
    ready_timeout_s, sample_hz, vocab_size, weights,
    expert_distribution (bool), expert_distribution_s, top_k, profile_steps (0 or absent: no
    profile pass), profile_timeout_s, layers (else the model's). ``model_facts``: the served
    model's geometry (for the HBM bytes of a step), when the study built the model.
    ``rule_plan``: the rule's plan, as the job got it (its hash is in each table's record).

    Each finished concurrency of each pass (with its windows, requests, cross-check row and
    power samples) goes to a journal beside ``out_dir``: a job killed mid-way resumes there,
    on a new server start, measuring only what it had not finished (run.json's ``resumed``).
    ``hold_device``: waits for the job's device and returns its port offset (None: held
    already); with ``prestart`` the server starts before it (decode_server.main_pass_server).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    eng = get_engine(plan["engine"])
    work = out_dir.parent / f".{out_dir.name}.work"
    plan, main, start = main_pass_server(plan, eng, out_dir, hold_device, work.exists(),
                                         bool(_too_big(plan, model_facts)))  # fmt: skip
    readers, source, why = open_readers(visible_nvml_indices())
    if why:
        log.info("power source %s (%s)", source, why)
    measured_by = {"engine_version": eng.version(), "power_source": source,
                   "devices": [getattr(r, "name", type(r).__name__) for r in readers]}  # fmt: skip
    journal = Journal(work, rule_plan or plan, measured_by)
    sampler = Sampler(readers, rate_hz=plan["sample_hz"])
    runs = _Runs(journal, sampler)
    recorder_rows, breakdown, expert_frames = [], [], []
    facts = {"argv": main.argv, "served_name": main.served_name,
             "engine_version": eng.version(), "power_source": source,
             "sample_hz": plan["sample_hz"],
             "gpus": [r.uuid for r in readers if getattr(r, "uuid", None)],
             "start": start}  # fmt: skip
    if journal.reused:
        facts["resumed"] = journal.reused
        log.info("resuming a stopped run: %d finished items kept (%s)", len(journal.reused),
                 ", ".join(journal.reused))  # fmt: skip
    facts["load"] = load_record(plan)
    skipped = crosscheck_skipped(plan)
    facts["crosscheck"] = skipped or {"enabled": True}
    if skipped and skipped.get("skipped"):
        log.info("cross-check skipped: %s", skipped["skipped"])
    recorder_on = bool(plan.get("expert_distribution")) and plan["engine"] == "sglang"
    concurrency = plan["concurrency"]
    too_big = _too_big(plan, model_facts)
    if too_big:
        # Known before the start: not 42-55 s of a server that stops for want of memory.
        facts["start_error"] = f"{NOT_STARTED}: {too_big}"
        log.error("variant %s: %s", plan["variant"], facts["start_error"])
        (out_dir / "server.log").write_text(f"study: {facts['start_error']}\n")
        runs.rows = [not_started_row(plan, c, source, facts["start_error"]) for c in concurrency]
        return _write_outputs(out_dir, plan, rule_plan, runs, [], [], [], facts, sampler,
                              model_facts)  # fmt: skip
    with sampler:
        idle_w_total = runs.idle(plan["idle_s"])
        progress = Progress((2 if recorder_on else 1) * len(concurrency))
        started = time.monotonic()
        main_left = [c for c in concurrency if journal.get(f"main:{c}") is None]
        if main_left or profile_left(plan, journal):
            # The cross-check's alternated rounds measure more study windows on this server.
            again = partial(study_window, main, sampler=sampler, windows=runs.windows)
            main.note_caches()
            with main.server, crosscheck_worker(out_dir, skipped) as bench:
                try:
                    facts["ready_s"] = main.server.wait_ready()
                except ServerFailed as exc:
                    # A server this GPU cannot hold (the bf16 variant's 79 GB of weights on
                    # an 80-GB H100) is the variant's result, not a lost run: its rows say
                    # why, its log stays, and the other variants' tables and the report go on.
                    # One that started before, for the journal's levels, failed by chance:
                    # the job fails and keeps the journal for the next run.
                    if any(key != "idle" for key in journal.reused):
                        raise
                    facts["start_error"] = not_started(exc, model_facts)
                    log.error("%s", exc)
                    runs.rows = [not_started_row(plan, c, source, facts["start_error"])
                                 for c in concurrency]  # fmt: skip
                else:
                    start.update(main.server.gate_record or {})
                    facts["start_builds"] = main.start_record()
                    progress.last = time.monotonic()  # the server's start is not a step
                    for c in concurrency:
                        if runs.restore_main(c):
                            progress.skip()
                            continue
                        mark = runs.mark()
                        row = _one_concurrency(main, c, sampler, source, runs.windows,
                                               runs.requests, idle_w_total,
                                               model_facts)  # fmt: skip
                        runs.rows.append(row)
                        if skipped is None:
                            runs.crosscheck.append(crosscheck_at(main, c, row, out_dir, bench,
                                                                 again))  # fmt: skip
                        runs.record_main(c, mark)
                        log.info("%s main pass, C=%d done", progress.step(), c)
                    # After every measured window: no measured window follows a trace.
                    facts["profile"] = profile_pass(main, runs.rows, model_facts, out_dir,
                                                    breakdown, journal)  # fmt: skip
            facts["teardown"] = main.server.stop_result
        else:
            for c in concurrency:
                runs.restore_main(c)
                progress.skip()
            facts["profile"] = profile_pass(main, runs.rows, model_facts, out_dir, breakdown,
                                            journal)  # fmt: skip
        facts["main_pass_s"] = time.monotonic() - started
        if recorder_on and "start_error" not in facts:
            shared = (model_facts or {}).get("shared_experts", 0)
            rec = ServerPass(plan, eng, out_dir, "server_recorder.log", recorder=True,
                        shared_experts=shared)  # fmt: skip
            started = time.monotonic()
            left = [c for c in concurrency if journal.get(f"recorder:{c}") is None]
            try:
                for c in concurrency:
                    if c not in left:
                        runs.restore_recorder(c, recorder_rows, expert_frames)
                        progress.skip()
                if left:
                    rec.note_caches()
                    with rec.server:
                        facts["recorder_ready_s"] = rec.server.wait_ready()
                        facts["recorder_start_builds"] = rec.start_record()
                        progress.last = time.monotonic()
                        main_rows = dict(zip(concurrency, runs.rows, strict=True))
                        for c in left:
                            mark = runs.mark()
                            counts, row = _recorder_concurrency(rec, c, sampler, main_rows[c])
                            recorder_rows.append(row)
                            log.info("%s recorder pass, C=%d done", progress.step(), c)
                            frame = None
                            if counts is not None:
                                frame = expert_m(counts, c, int(plan["top_k"]))
                                frame.insert(0, "concurrency", c)
                                expert_frames.append(frame)
                            runs.record_recorder(c, mark, row, frame)
            except Exception as exc:  # noqa: BLE001 - the main pass's results stand without it
                why = _failure_text(exc, out_dir / "server_recorder.log")
                log.warning("the recorder pass failed (main pass kept): %s", why)
                facts["recorder_error"] = why
                recorder_rows.append({"engine": plan["engine"], "variant": plan["variant"],
                                      "error": why})  # fmt: skip
            facts["recorder_teardown"] = rec.server.stop_result
            facts["recorder_pass_s"] = time.monotonic() - started
    return _write_outputs(out_dir, plan, rule_plan, runs, recorder_rows, expert_frames,
                          breakdown, facts, sampler, model_facts)  # fmt: skip


def _too_big(plan: dict, model_facts: dict | None) -> str | None:
    """Why the variant's weights do not fit the visible GPUs (the served model's size asked
    only where the study built it), else None."""
    weight_bytes = (model_facts or {}).get("weight_bytes")
    return weight_bytes and weights_problem(
        plan["engine"],
        plan.get("args") or [],
        weight_bytes,
        smallest_gpu_memory_mib(visible_nvml_indices()),
    )


def _write_outputs(out_dir: Path, plan: dict, rule_plan: dict | None, runs: _Runs,
                   recorder_rows: list, expert_frames: list, breakdown: list, facts: dict,
                   sampler: Sampler, model_facts: dict | None) -> pd.DataFrame:  # fmt: skip
    """Every output of the decode job, from what its passes measured; the journal goes."""
    summary = pd.DataFrame(runs.rows).reindex(columns=SUMMARY_COLUMNS)

    def write(frame, path):
        write_frame(frame, path, f"decode {plan['variant']}", rule_plan)

    write(summary, out_dir / "summary.csv")
    recorder = pd.DataFrame(recorder_rows).reindex(columns=RECORDER_COLUMNS)
    if "concurrency" in recorder and recorder["concurrency"].notna().all():
        recorder = recorder.sort_values("concurrency", kind="stable")
    write(recorder, out_dir / "recorder.csv")
    experts = (pd.concat(expert_frames, ignore_index=True) if expert_frames
               else pd.DataFrame(columns=EXPERT_M_COLUMNS))  # fmt: skip
    if not experts.empty:
        experts = experts.sort_values("concurrency", kind="stable")
    write(experts.reindex(columns=EXPERT_M_COLUMNS), out_dir / "expert_m.csv")
    write(pd.DataFrame(runs.crosscheck).reindex(columns=CROSSCHECK_COLUMNS),
          out_dir / "crosscheck.csv")  # fmt: skip
    write(pd.DataFrame(breakdown).reindex(columns=BREAKDOWN_COLUMNS),
          out_dir / "breakdown.csv")  # fmt: skip
    write(pd.DataFrame(runs.requests), out_dir / "requests.parquet")
    write(pd.DataFrame(runs.windows), out_dir / "windows.parquet")
    timeline = pd.DataFrame(runs.timeline())
    write(timeline if not timeline.empty else pd.DataFrame({"gpu": []}),
          out_dir / "power_timeline.parquet")  # fmt: skip
    facts["sampler_cpu_pct"] = 100 * (sampler.cpu_fraction() or 0)
    facts["model"] = model_facts
    write_json(out_dir / "run.json", facts)
    runs.journal.finish()
    return summary


class _Runs:
    """What the passes measured so far, in plan order, and the journal entry of each finished
    concurrency: its rows, windows, requests and the power samples taken since the last
    entry (a resumed job's timeline keeps the earlier attempt's samples)."""

    def __init__(self, journal: Journal, sampler: Sampler):
        self.journal, self.sampler = journal, sampler
        self.rows, self.windows, self.requests, self.crosscheck = [], [], [], []
        self.kept_samples: list[dict] = []  # an earlier attempt's, from the journal
        self.samples_to = float("-inf")  # the journal holds this attempt's samples up to here

    def mark(self) -> tuple[int, int]:
        return len(self.windows), len(self.requests)

    def _new_samples(self) -> list[dict]:
        rows = [r for r in self.sampler.timeline() if r["t"] > self.samples_to]
        if rows:
            self.samples_to = max(r["t"] for r in rows)
        return rows

    def _record(self, key: str, mark: tuple[int, int], **payload) -> None:
        self.journal.record(key, {**payload, "windows": self.windows[mark[0]:],
                                  "requests": self.requests[mark[1]:],
                                  "samples": self._new_samples()})  # fmt: skip

    def _restore(self, kept: dict) -> None:
        self.windows += kept["windows"]
        self.requests += kept["requests"]
        self.kept_samples += kept["samples"]

    def idle(self, seconds: float) -> float | None:
        """The idle baseline before any server starts (once per run: kept on a resume)."""
        kept = self.journal.get("idle")
        if kept is None:
            time.sleep(0.2)
            t0 = time.monotonic()
            time.sleep(seconds)
            idle = self.sampler.window(t0, time.monotonic())
            watts = [w["avg_w"] for w in idle if w.get("avg_w") is not None]
            total = sum(watts) if idle and len(watts) == len(idle) else None
            mark = self.mark()
            self.windows += [{"label": "idle", "concurrency": 0, **w} for w in idle]
            self._record("idle", mark, idle_w_total=total)
            return total
        self._restore(kept)
        return kept["idle_w_total"]

    def restore_main(self, c: int) -> bool:
        kept = self.journal.get(f"main:{c}")
        if kept is None:
            return False
        self._restore(kept)
        self.rows.append(kept["row"])
        if kept.get("crosscheck") is not None:
            self.crosscheck.append(kept["crosscheck"])
        log.info("C=%d: main pass kept from the stopped run", c)
        return True

    def record_main(self, c: int, mark: tuple[int, int]) -> None:
        cross = self.crosscheck[-1] if self.crosscheck and \
            self.crosscheck[-1].get("concurrency") == c else None  # fmt: skip
        self._record(f"main:{c}", mark, row=self.rows[-1], crosscheck=cross)

    def restore_recorder(self, c: int, recorder_rows: list, expert_frames: list) -> None:
        kept = self.journal.get(f"recorder:{c}")
        self._restore(kept)
        recorder_rows.append(kept["row"])
        if kept.get("expert_m"):
            expert_frames.append(pd.DataFrame(kept["expert_m"]))
        log.info("C=%d: recorder pass kept from the stopped run", c)

    def record_recorder(self, c: int, mark, row: dict, frame: pd.DataFrame | None) -> None:
        experts = frame.to_dict("records") if frame is not None else None
        self._record(f"recorder:{c}", mark, row=row, expert_m=experts)

    def timeline(self) -> list[dict]:
        return self.kept_samples + self.sampler.timeline()


def main_window(plan: dict) -> tuple[float, bool]:
    """The main pass's window at each C: its longest length, and whether the precision rule
    (tpot_ci_pct after shortest_steady_s) ends it sooner. A full-length run's (full_length_s)
    lasts that long, and the rule is replayed on it instead (:func:`shortened_figures`)."""
    full = float(plan.get("full_length_s") or 0)
    return (full, False) if full > 0 else (plan["min_steady_s"], True)


def _one_concurrency(pas, c, sampler, source, windows, requests, idle_w_total, model_facts):
    plan = pas.plan
    seconds, precise = main_window(plan)
    spec, load, window = steady_load(pas, c, seconds, sampler, windows, "", precise=precise)
    for r in load.records:
        requests.append({"concurrency": c, "index": r.index, "start": r.start,
                         "first_token": r.first_token, "end": r.end, "tokens": len(r.token_times),
                         "completion_tokens": r.completion_tokens, "error": r.error,
                         "cut": r.cut, "ttft_s": r.ttft_s, "itl_s": r.itl_s()})  # fmt: skip
    row = {"engine": plan["engine"], "variant": plan["variant"], "tpot_source": "client",
           "model_kind": plan.get("model_kind"), "weights": plan.get("weights"),
           "routing": plan.get("routing"),
           "cuda_graphs": cuda_graphs(plan["engine"], plan.get("args") or []),
           "ep": expert_parallel(plan["engine"], plan.get("args") or []),
           "concurrency": c, "power_source": source, "load_cpu_pct": load.cpu_pct,
           "load": LOAD_STAGGERED if plan.get("stagger") else LOAD_LOCKSTEP}  # fmt: skip
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
    stats = sampler.window(s0, s1)
    windows.extend({"label": "steady", "concurrency": c, **w} for w in stats)
    end = max((r.end for r in load.records if r.end), default=s1)
    windows.extend({"label": "ramp-down", "concurrency": c, **w} for w in sampler.window(s1, end))
    row.update(_window_figures(pas, load, spec, (s0, s1), stats, idle_w_total, warn=True))
    held = stalls_note(row)
    if held:
        log.warning("C=%d: %s", c, held)
    delivery = delivery_note(row)
    if delivery:
        log.warning("C=%d: %s", c, delivery)
    row["valid"] = bool(lasted(row["steady_s"], spec.shortest_s or seconds)
                        and not delivery
                        and row["errors"] == 0 and row["wrong_length"] == 0)  # fmt: skip
    log.info("C=%d: %.1f tok/s, TPOT %.2f ms (±%.2f %%) over %.1f s steady (valid=%s, load "
             "CPU %.0f %%)", c, row["output_tok_s"] or 0, row["tpot_ms"] or 0,
             row["tpot_ci_pct"] or 0, row["steady_s"], row["valid"],
             load.cpu_pct or 0)  # fmt: skip
    if not precise:
        row.update(shortened_figures(pas, load, spec, (s0, s1), sampler, idle_w_total))
        log.info("C=%d: the window its rule would have ended: %.1f s, TPOT %.2f ms (±%.2f %%)",
                 c, row["shortened_steady_s"] or 0, row["shortened_tpot_ms"] or 0,
                 row["shortened_tpot_ci_pct"] or 0)  # fmt: skip
    return row


def _window_figures(pas, load, spec, window: tuple[float, float], stats: list[dict],
                    idle_w_total: float | None, warn: bool) -> dict:  # fmt: skip
    """A window's figures: the load's summary over it, its power (``stats``: the sampler's
    per-GPU windows over it), and for SGLang the engine's own account from its log, whose
    tok/s and TPOT the row takes where the client's count fell short of it (``warn``: say
    so, and say where the engine's rate moved within the window)."""
    s0, s1 = window
    c = spec.concurrency
    row = {"concurrency": c, **summarize_load(load.records, spec, s0, s1, load.stalls)}
    row.update(_combine(stats, row["output_tokens_steady"], idle_w_total, s1 - s0))
    row["idle_w_per_gpu"] = idle_w_total / len(stats) if idle_w_total and stats else None
    row["tpot_source"] = "client"
    if pas.plan["engine"] != "sglang":
        return row
    received = decode_token_counter(load.records)
    row.update(server_window_of(pas.server.log_path, s0, s1, received=received))
    drift = row.get("server_drift")
    if warn and drift and beyond(abs(drift - 1), NOISE_FLOOR):
        log.warning("C=%d: the engine's own rate moved %+.1f %% within the window (SGLang's "
                    "log, last third over first third)", c, 100 * (drift - 1))  # fmt: skip
    if engine_account(row):
        if warn:
            log.warning("C=%d: the client received %.1f %% of the tokens the scheduler made "
                        "(%.0f tok/s by its log): tok/s and TPOT are the engine's own account",
                        c, 100 * client_over_scheduler(row), row["server_tok_s"])  # fmt: skip
        use_engine_account(row)
    return row


def shortened_figures(pas, load, spec, window: tuple[float, float], sampler,
                      idle_w_total: float | None) -> dict:  # fmt: skip
    """A full-length window's check of the shortened study (issue 34): the load the plan's
    precision rule would have run (decode_server.load_specs: tpot_ci_pct after
    shortest_steady_s, at most min_steady_s), its rule replayed on this window's own requests
    (window_precision.precise_end), and what the window it ended would have measured, from
    the same requests, power samples and engine log: the ``shortened_*`` columns."""
    (s0, s1), plan = window, pas.plan
    _, rule = load_specs(plan, spec.concurrency, plan["min_steady_s"], precise=True)
    end = precise_end(load.records, s0, s1, rule.precision, rule.shortest_s, rule.duration_s)
    figures = _window_figures(pas, load, rule, (s0, end), sampler.window(s0, end),
                              idle_w_total, warn=False)  # fmt: skip
    return {f"shortened_{column}": figures.get(column) for column in SHORTENED_FIGURES}


def study_window(pas: ServerPass, c: int, sampler, windows: list) -> dict:
    """One more window of the study's load at C, as the main pass measures it (its warm-up,
    its precision rule), for the cross-check's alternated rounds: its TPOT, length and the
    scheduler's median rate over it (its power is not a result: its warm-up's samples are
    kept as ``check-warmup`` windows, its own not)."""
    seconds, precise = main_window(pas.plan)
    spec, load, window = steady_load(pas, c, seconds, sampler, windows, "check-",
                                     precise=precise)  # fmt: skip
    if window is None:
        return {"error": "no steady window"}
    summary = summarize_load(load.records, spec, *window)
    server = server_window_of(pas.server.log_path, *window)
    return {
        "tpot_ms": summary["tpot_ms"],
        "seconds": summary["steady_s"],
        "server_tok_s_median": server["server_tok_s_median"],
        "error": "" if summary["errors"] == 0 else f"{summary['errors']} request errors",
    }


def use_engine_account(row: dict) -> None:
    """The row's tok/s and TPOT from the engine's own log (decode_judgements.engine_account):
    tok/s the scheduler's rate over the window, TPOT its step (``server_step_ms``, its
    whole lines' seconds over their decode steps; from a log in whole seconds, its median
    running requests over its median rate), J/token over the tokens it made; the client's
    figures kept as ``client_tok_s`` and ``client_tpot_ms``."""
    client_tok_s, engine_tok_s = row["output_tok_s"], row["server_tok_s"]
    step_ms = row.get("server_step_ms")
    if step_ms is None:
        step_ms = 1e3 * row["server_running_median"] / row["server_tok_s_median"]
    row.update(client_tok_s=client_tok_s, client_tpot_ms=row.get("tpot_ms"),
               tpot_source="engine", output_tok_s=engine_tok_s, tpot_ms=step_ms)  # fmt: skip
    row["tok_s_over_c_tpot"] = engine_tok_s * row["tpot_ms"] / 1e3 / row["concurrency"]
    for key in ("j_per_token", "j_per_token_net"):
        if row.get(key) is not None:
            row[key] *= client_tok_s / engine_tok_s  # the window's joules over its tokens


def _recorder_concurrency(pas: ServerPass, c: int, sampler, main_row: dict):
    """One recorded window at C: the per-layer per-expert counts and the recorder's cost."""
    plan = pas.plan
    expert_recorder(pas.base_url, "start")
    windows: list = []
    spec, load, window = steady_load(pas, c, plan["expert_distribution_s"], sampler, windows,
                                 "recorder-")  # fmt: skip
    expert_recorder(pas.base_url, "stop")
    before = set(pas.record_dir.glob("*"))
    dump = expert_recorder(pas.base_url, "dump")
    counts = read_counts(dump, sorted(set(pas.record_dir.glob("*")) - before), c)
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
