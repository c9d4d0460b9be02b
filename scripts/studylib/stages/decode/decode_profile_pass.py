"""The profile pass of a decode job (SGLang): after the main pass's windows, the same server
profiles profile_steps decode steps at each C (torch.profiler via /start_profile during a
closed-loop load at C whose prompts already hold the context half a request's output would
have given it, less half the steps, started once its first C requests each have their first
token, so the steps run at the mean KV length), and the traces of every TP rank
become breakdown.csv rows (instruments.serving.profile_traces). A profile that fails at one C is
a warning in run.json; nothing else is lost."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from ...core.journal import Journal
from ...instruments.serving.decode_load import (
    LoadControl,
    LoadSpec,
)
from ...instruments.serving.engines.sglang_engine import (
    start_profile,
    stop_profile,
)
from ...instruments.serving.profile_traces import (
    TraceError,
    breakdown_rows,
    rank_breakdown,
    read_kernels,
)
from ...instruments.serving.profile_traces import trace_files as find_traces
from .decode_schema import cuda_graphs, model_layers, tensor_parallel
from .decode_server import ServerPass, drain_server

log = logging.getLogger("study.decode")


#: The profile_prefix of the study's traces: {prefix}-{profile_id}-TP-{rank}.trace.json.gz.
PROFILE_PREFIX = "decode"


#: How long a profile may take at one C (its load, the steps, the trace files) by default.
PROFILE_TIMEOUT_S = 120.0
#: The profile begins once no more of its C requests has had its first token for this long
#: (LoadControl.settle_s): SGLang's prefill burst streams first tokens every 0.1-0.2 s, and
#: a request the server keeps queued (one of 512 at --max-running-requests 512 on the H200)
#: would hold the profile until the first ones end, when their replacements' prefills fill
#: the profiled steps (bf16 at C = 512, 2026-12-04: 35 s waited, no decode step profiled).
PROFILE_SETTLE_S = 2.0


def profile_left(plan: dict, journal: Journal) -> list[int]:
    """The concurrencies whose profile a stopped run had not finished (none when the plan
    profiles nothing)."""
    if int(plan.get("profile_steps") or 0) <= 0 or plan["engine"] != "sglang":
        return []
    return [c for c in plan["concurrency"] if journal.get(f"profile:{c}") is None]


def profile_pass(pas: ServerPass, main_rows: list[dict], model_facts, out_dir: Path,
                 breakdown: list, journal: Journal | None = None) -> dict:  # fmt: skip
    """Profile ``profile_steps`` decode steps at each C (module docstring): the breakdown
    rows go into ``breakdown``; the record for run.json is returned. Never raises for a
    failed profile: its reason is the C's entry under ``errors``. A C whose profile the
    ``journal`` holds (a stopped run's) is kept, not profiled again; each finished one is
    added to it."""
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
        kept = journal.get(f"profile:{c}") if journal is not None else None
        if kept is not None:
            breakdown.extend(kept["breakdown"])
            record["traces"] += kept["traces"]
            if kept.get("warnings"):
                record["warnings"][str(c)] = kept["warnings"]
            continue
        folder = out_dir / "profile" / f"c{c}"
        profile_id = f"c{c}-{stamp}"
        first_row = len(breakdown)
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
        traces = [{"concurrency": c, "file": str(path.relative_to(out_dir)),
                   "bytes": path.stat().st_size}
                  for path in sorted(folder.glob(f"{PROFILE_PREFIX}-{profile_id}-*"))]  # fmt: skip
        record["traces"] += traces
        if journal is not None and str(c) not in record["errors"]:
            # A failed profile is not kept: a resumed run tries it again.
            kept = {"breakdown": breakdown[first_row:], "traces": traces,
                    "warnings": record["warnings"].get(str(c))}  # fmt: skip
            journal.record(f"profile:{c}", kept)
    record["trace_bytes"] = sum(t["bytes"] for t in record["traces"])
    record["profile_pass_s"] = time.monotonic() - started
    log.info("profile pass: %d trace files (%.1f MB) kept under %s", len(record["traces"]),
             record["trace_bytes"] / 1e6, out_dir / "profile")  # fmt: skip
    return record


def profile_prompt_len(input_len: int, output_len: int, steps: int) -> int:
    """The profile load's prompt: the input, plus the tokens a request has streamed when its
    ``steps`` steps centre on half its output (the mean KV length over its decode), less the
    first token, which the profile waits for. Streaming them instead took half the output's
    steps per C (20 s at C = 512 for bf16 on the H200, 2026-12-04); as prompt they are one
    prefill burst (SGLang prefilled 65-74k tokens/s there: about 5 s)."""
    streamed = max(1, int(output_len) // 2 - int(steps) // 2)
    return int(input_len) + streamed - 1


def _profile_concurrency(pas: ServerPass, c: int, steps: int, layers: int, ranks: int,
                         folder: Path, profile_id: str) -> tuple[dict, list, float]:  # fmt: skip
    """One profile at C: a closed-loop load at C in a thread, its prompts of
    ``profile_prompt_len``; once its first C requests each have their first token (past the
    start's prefill burst, at the mean KV length), /start_profile for ``steps`` passes; the
    traces of all ``ranks`` read, the load stopped. Bounded by ``profile_timeout_s``.
    {rank: breakdown}, notes on what is missing, and the KV length at the profiled steps'
    middle (the prompt, the fewest tokens the requests had streamed when the profile was
    asked for, half the steps)."""
    plan = pas.plan
    timeout = float(plan.get("profile_timeout_s") or PROFILE_TIMEOUT_S)
    folder.mkdir(parents=True, exist_ok=True)
    # Timed only as a bound: the load is stopped once the traces are in.
    prompt = profile_prompt_len(plan["input_len"], plan["output_len"], steps)
    spec = LoadSpec(concurrency=c, input_len=prompt, output_len=plan["output_len"],
                    duration_s=timeout, vocab_size=plan["vocab_size"], seed=c)  # fmt: skip
    control = LoadControl(after_tokens=1, settle_s=PROFILE_SETTLE_S)
    outcome = {}
    drain_server(pas)

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
        context = prompt + (control.tokens or 0) + steps / 2
        queued = control.waiting
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
    if queued:
        notes.append(f"{queued} of the load's {c} requests still queued by the server when "
                     f"the profile began: it profiled steps of {c - queued}")  # fmt: skip
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
