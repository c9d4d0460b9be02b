"""One steady window of a decode load -> its summary row: the load's figures over the window,
its power (summed over the job's GPUs), the engine's own account where the client's count fell
short of it, and a full-length window's replay of the precision rule."""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass

from ...core.verdicts import NOISE_FLOOR, beyond
from ...instruments.power_sampler import Sampler
from ...instruments.serving.load_summary import decode_token_counter, summarize_load
from ...instruments.serving.served_model import step_bytes
from ...instruments.serving.server_log import server_window_of
from ...instruments.serving.window_precision import lasted, precise_end
from .decode_judgements import client_over_scheduler, delivery_note, engine_account, stalls_note
from .decode_schema import (
    LOAD_CARRIED,
    LOAD_LOCKSTEP,
    LOAD_STAGGERED,
    SHORTENED_FIGURES,
    cuda_graphs,
    expert_parallel,
)
from .decode_server import ServerPass, load_specs, steady_load

log = logging.getLogger("study.decode")


def combine_power(windows: list[dict], tokens: int, idle_w_total: float | None, seconds: float):
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


def main_window(plan: dict) -> tuple[float, bool]:
    """The main pass's window at each C: its longest length, and whether the precision rule
    (tpot_ci_pct after shortest_steady_s) ends it sooner. A full-length run's (full_length_s)
    lasts that long, and the rule is replayed on it instead (:func:`shortened_figures`)."""
    full = float(plan.get("full_length_s") or 0)
    return (full, False) if full > 0 else (plan["min_steady_s"], True)


@dataclass
class WindowBook:
    """Where a pass's windows go: the sampler, its power source, the windows and requests
    tables' rows so far, the idle baseline and the served model's facts."""

    sampler: Sampler
    source: str
    windows: list
    requests: list
    idle_w_total: float | None
    model_facts: dict | None


def level_row(pas, c: int, spec, load, window, book: WindowBook, level: int | None = None
              ) -> dict:  # fmt: skip
    """The summary row of the window at C of ``load`` (``level``: a carried load's level,
    whose requests are those it holds; None: a load at C alone), its requests, steady and
    ramp-down windows in ``book``."""
    plan, sampler = pas.plan, book.sampler
    seconds, precise = main_window(plan)
    reached = level is None or level < len(load.levels)
    records, started = level_records(load, level)
    for r in started:
        book.requests.append({"concurrency": c, "index": r.index, "client": r.client,
                              "start": r.start,
                              "first_token": r.first_token, "end": r.end,
                              "tokens": len(r.token_times),
                              "completion_tokens": r.completion_tokens, "error": r.error,
                              "cut": r.cut, "ttft_s": r.ttft_s, "itl_s": r.itl_s()})  # fmt: skip
    shape = LOAD_STAGGERED if plan.get("stagger") else LOAD_LOCKSTEP
    row = {"engine": plan["engine"], "variant": plan["variant"], "tpot_source": "client",
           "model_kind": plan.get("model_kind"), "weights": plan.get("weights"),
           "routing": plan.get("routing"),
           "cuda_graphs": cuda_graphs(plan["engine"], plan.get("args") or []),
           "ep": expert_parallel(plan["engine"], plan.get("args") or []),
           "concurrency": c, "power_source": book.source, "load_cpu_pct": load.cpu_pct,
           "load": LOAD_CARRIED if level else shape}  # fmt: skip
    if book.model_facts is not None and plan.get("routing") == "uniform":
        # The floor assumes uniform routing: what the served router does with random weights
        # is not known ahead (on the H200 it read far fewer experts).
        context = plan["input_len"] + plan["output_len"] / 2  # mean KV length over a request
        row["step_gb"] = step_bytes(book.model_facts, plan.get("weights") or "bf16", c,
                                    context) / 1e9  # fmt: skip
    if window is None:
        error = next((r.error for r in records if r.error), "")
        if not reached:
            why = next((r.error for r in load.records if r.error), "no window")
            error = f"the carried load ended before C = {c}: {why}"
        row.update(steady_s=0.0, valid=False, requests=len(records),
                   errors=sum(1 for r in records if r.error), first_error=error)  # fmt: skip
        return row
    s0, s1 = window
    stats = sampler.window(s0, s1)
    book.windows.extend({"label": "steady", "concurrency": c, **w} for w in stats)
    end = level_end(load, level, s1)
    book.windows.extend({"label": "ramp-down", "concurrency": c, **w}
                        for w in sampler.window(s1, end))  # fmt: skip
    row.update(window_figures(pas, records, load.stalls, spec, (s0, s1), stats,
                              book.idle_w_total, warn=True))  # fmt: skip
    held = stalls_note(row)
    if held:
        log.warning("C=%d: %s", c, held)
    delivery = delivery_note(row)
    if delivery:
        log.warning("C=%d: %s", c, delivery)
    row["valid"] = bool(lasted(row["steady_s"], spec.shortest_s or seconds)
                        and not delivery
                        and row["errors"] == 0 and row["wrong_length"] == 0)  # fmt: skip
    crowded = level is not None and (load.levels[level]["held"] or 0) > c
    if crowded:
        # Past its wait, the server still held requests the step down had cancelled.
        row["valid"] = False
        log.warning("C=%d: the server held %d requests at the window's start", c,
                    load.levels[level]["held"])  # fmt: skip
    log.info("C=%d: %.1f tok/s, TPOT %.2f ms (±%.2f %%) over %.1f s steady (valid=%s, load "
             "CPU %.0f %%)", c, row["output_tok_s"] or 0, row["tpot_ms"] or 0,
             row["tpot_ci_pct"] or 0, row["steady_s"], row["valid"],
             load.cpu_pct or 0)  # fmt: skip
    if not precise:
        row.update(shortened_figures(pas, records, spec, (s0, s1), sampler, book.idle_w_total))
        log.info("C=%d: the window its rule would have ended: %.1f s, TPOT %.2f ms (±%.2f %%)",
                 c, row["shortened_steady_s"] or 0, row["shortened_tpot_ms"] or 0,
                 row["shortened_tpot_ci_pct"] or 0)  # fmt: skip
    return row


def level_records(load, level: int | None) -> tuple[list, list]:
    """The requests a window's row reads and those it lists: a load's own (``level`` None),
    or a carried level's, those streaming at any time of its span and, of them, those that
    started in it (none where the load never reached the level)."""
    if level is None:
        return load.records, load.records
    if level >= len(load.levels):
        return [], []
    span = load.levels[level]
    end = span["end"] if span["end"] is not None else float("inf")
    held = [r for r in load.records if r.start < end and (r.end is None or r.end >= span["begin"])]
    return held, [r for r in held if r.start >= span["begin"]]


def level_end(load, level: int | None, s1: float) -> float:
    """Where a window's ramp-down ends: the load's last request's end, or a carried level's
    step down to the next."""
    if level is not None and load.levels[level]["end"] is not None:
        return load.levels[level]["end"]
    return max((r.end for r in load.records if r.end), default=s1)


def window_figures(pas, records, stalls, spec, window: tuple[float, float], stats: list[dict],
                   idle_w_total: float | None, warn: bool) -> dict:  # fmt: skip
    """A window's figures: the load's summary over it, its power (``stats``: the sampler's
    per-GPU windows over it), and for SGLang the engine's own account from its log, whose
    tok/s and TPOT the row takes where the client's count fell short of it (``warn``: say
    so, and say where the engine's rate moved within the window)."""
    s0, s1 = window
    c = spec.concurrency
    row = {"concurrency": c, **summarize_load(records, spec, s0, s1, stalls)}
    row.update(combine_power(stats, row["output_tokens_steady"], idle_w_total, s1 - s0))
    row["idle_w_per_gpu"] = idle_w_total / len(stats) if idle_w_total and stats else None
    row["tpot_source"] = "client"
    if pas.plan["engine"] != "sglang":
        return row
    received = decode_token_counter(records)
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


def shortened_figures(pas, records, spec, window: tuple[float, float], sampler,
                      idle_w_total: float | None) -> dict:  # fmt: skip
    """A full-length window's check of the shortened study (issue 34): the load the plan's
    precision rule would have run (decode_server.load_specs: tpot_ci_pct after
    shortest_steady_s, at most min_steady_s), its rule replayed on this window's own requests
    (window_precision.precise_end), and what the window it ended would have measured, from
    the same requests, power samples and engine log: the ``shortened_*`` columns."""
    (s0, s1), plan = window, pas.plan
    _, rule = load_specs(plan, spec.concurrency, plan["min_steady_s"], precise=True)
    end = precise_end(records, s0, s1, rule.precision, rule.shortest_s, rule.duration_s)
    figures = window_figures(pas, records, None, rule, (s0, end), sampler.window(s0, end),
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
