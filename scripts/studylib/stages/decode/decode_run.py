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
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import pandas as pd

from ...core.io import write_frame, write_json
from ...core.journal import Journal
from ...core.progress import Progress
from ...instruments.hardware import smallest_gpu_memory_mib
from ...instruments.power_sampler import Sampler, open_readers, visible_nvml_indices
from ...instruments.serving.decode_load import level_window
from ...instruments.serving.engines import engine as get_engine
from ...instruments.serving.engines.sglang_engine import (
    expert_recorder,
)
from ...instruments.serving.launcher import ServerFailed
from ...instruments.serving.load_summary import summarize_load
from .decode_crosscheck import crosscheck_at, crosscheck_skipped, crosscheck_worker
from .decode_judgements import NOT_STARTED
from .decode_plan import weights_problem
from .decode_profile_pass import profile_left, profile_pass
from .decode_schema import (
    BREAKDOWN_COLUMNS,
    CROSSCHECK_COLUMNS,
    RECORDER_COLUMNS,
    SUMMARY_COLUMNS,
)
from .decode_server import (
    ServerPass,
    carried_levels,
    load_record,
    main_pass_server,
    not_started,
    not_started_row,
    steady_load,
)
from .decode_window import (
    WindowBook,
    combine_power,
    level_row,
    main_window,
    study_window,
)
from .expert_m import EXPERT_M_COLUMNS, expert_m, read_counts

log = logging.getLogger("study.decode")


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
    skipped = crosscheck_skipped(plan)
    facts["load"] = {**load_record(plan), "carried": carried_levels(plan, skipped)}
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
                    book = WindowBook(sampler, source, runs.windows, runs.requests,
                                      idle_w_total, model_facts)  # fmt: skip
                    left = [c for c in concurrency if not runs.restore_main(c)]
                    for _ in range(len(concurrency) - len(left)):
                        progress.skip()
                    carry = facts["load"]["carried"] is True and len(left) > 1
                    if carry:
                        _carried_levels(main, sorted(left, reverse=True), book, runs, progress)
                    for c in [] if carry else left:
                        mark = runs.mark()
                        row = _one_concurrency(main, c, book)
                        runs.rows.append(row)
                        if skipped is None:
                            runs.crosscheck.append(crosscheck_at(main, c, row, out_dir, bench,
                                                                 again))  # fmt: skip
                        runs.record_main(c, mark)
                        log.info("%s main pass, C=%d done", progress.step(), c)
                    runs.rows.sort(key=lambda row: concurrency.index(row["concurrency"]))
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


def _one_concurrency(pas: ServerPass, c: int, book: WindowBook) -> dict:
    """The main pass's window at C, a load of its own."""
    seconds, precise = main_window(pas.plan)
    spec, load, window = steady_load(pas, c, seconds, book.sampler, book.windows, "",
                                     precise=precise)  # fmt: skip
    return level_row(pas, c, spec, load, window, book)


def _carried_levels(pas: ServerPass, levels: list[int], book: WindowBook, runs: _Runs,
                    progress: Progress) -> None:  # fmt: skip
    """The main pass's windows at ``levels`` (highest first) as one load's carried levels
    (decode_server.carried_levels): each level's row, requests and windows (its wait after
    the step down a ``warmup`` window) journaled as a level of its own."""
    seconds, precise = main_window(pas.plan)
    spec, load, _ = steady_load(pas, levels[0], seconds, book.sampler, book.windows, "",
                                precise=precise, then=levels[1:])  # fmt: skip
    for k, c in enumerate(levels):
        mark = runs.mark()
        if k and k < len(load.levels) and load.levels[k]["admitted"] is not None:
            level = load.levels[k]
            book.windows.extend(
                {"label": "warmup", "concurrency": c, **w}
                for w in book.sampler.window(level["begin"], level["admitted"])
            )
        runs.rows.append(level_row(pas, c, replace(spec, concurrency=c, then=()), load,
                                   level_window(load, k), book, level=k))  # fmt: skip
        runs.record_main(c, mark)
        log.info("%s main pass, C=%d done", progress.step(), c)


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
        stats = combine_power(sampler.window(*window), summary["output_tokens_steady"], None, 0)
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
