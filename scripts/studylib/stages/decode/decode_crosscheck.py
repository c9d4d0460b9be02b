"""The cross-check of a decode job: SGLang's own client, bench_serving
(instruments.serving.bench_serving), at each C against the same server right after the main
pass's window at that C, one crosscheck.csv row per C beside the study's figures; a job's
runs share one bench_serving runner (:func:`crosscheck_worker`)."""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from pathlib import Path

from ...instruments.serving.bench_serving import (
    BenchWorker,
    bench_prompts,
    bench_serving_argv,
    bench_timeout_s,
    run_bench_serving,
)
from ...instruments.serving.bench_steady import bench_steady_tpot_ms, steady_span_at
from ...instruments.serving.decode_load import (
    STEADY_FRACTION,
)
from ...instruments.serving.launcher import url_host
from ...instruments.serving.load_stagger import staggered_length
from ...instruments.serving.server_log import server_window_of
from .decode_server import ServerPass, drain_server

log = logging.getLogger("study.decode")


def crosscheck_skipped(plan: dict) -> dict | None:
    """run.json's record when no cross-check runs for this plan; None when it runs."""
    if not plan.get("crosscheck"):
        return {"enabled": False}
    if plan["engine"] != "sglang":
        why = f"bench_serving drives SGLang's own API; the {plan['engine']} engine is not checked"
        return {"enabled": True, "skipped": why}
    return None


def crosscheck_worker(out_dir: Path, skipped: dict | None):
    """The runner a job's cross-check runs share (started at its first run, ended with the
    block), or a null context where the cross-check is skipped."""
    if skipped is not None:
        return contextlib.nullcontext()
    return BenchWorker(Path(out_dir) / "crosscheck" / "bench_serving.log")


def crosscheck_at(pas: ServerPass, c: int, row: dict, out_dir: Path,
                  worker: BenchWorker | None = None) -> dict:  # fmt: skip
    """SGLang's bench_serving (instruments.serving.bench_serving) at C against the same
    server, right after the study's window at C (the engine's own speed drifts between
    windows minutes apart: on the H200 its scheduler's rate at C = 1 moved 13 % within one
    server's life): the crosscheck.csv row of C. A failed run is its ``bench_error``;
    nothing else is lost."""
    plan = pas.plan
    folder = out_dir / "crosscheck"
    folder.mkdir(parents=True, exist_ok=True)
    out = {key: row.get(key) for key in ("engine", "variant", "weights", "cuda_graphs",
           "concurrency", "tpot_ms", "tpot_source", "output_tok_s", "server_tok_s_median",
           "avg_w_per_gpu", "valid")}  # fmt: skip
    # as long as the study's window lasted (a precise window may end before min_steady_s)
    seconds = row.get("steady_s") or plan["min_steady_s"]
    # Staggered as the study's load was (bench_serving's module says why it matters).
    staggered = bool(plan.get("stagger"))
    first = [staggered_length(plan["output_len"], c, i) for i in range(c)] if staggered else None
    prompts = bench_prompts(c, seconds, plan["output_len"], row.get("tpot_ms"), staggered)
    out["bench_staggered"] = staggered
    out["bench_prompts"] = prompts
    if not pas.server.alive():
        out["bench_error"] = "the server is no longer running"
        return out
    drain_server(pas)
    result_file = folder / f"bench_c{c}.jsonl"
    argv = bench_serving_argv(sys.executable, url_host(pas.host), pas.port, plan["model"], c,
                              plan["input_len"], plan["output_len"], prompts, c,
                              result_file, first)  # fmt: skip
    timeout_s = bench_timeout_s(prompts, c, plan["output_len"], row.get("tpot_ms"))
    # One runner for the job's runs (its imports paid once); a run it ended without answering
    # runs again in a process of its own, as every run did before the runner.
    result = worker.run(argv, result_file, timeout_s) if worker is not None else None
    if result is not None and result.pop("runner_died"):
        log.warning("C=%d: bench_serving's runner ended without answering (%s): the run again "
                    "in a process of its own", c, result.get("bench_error"))  # fmt: skip
        result = None
    if result is None:
        result = run_bench_serving(argv, result_file, timeout_s, folder / "bench_serving.log")
    t0, t1 = result.pop("t0"), result.pop("t1")
    # Its TPOT over a window as long as the study's, after its own admission: like for like.
    details = result.pop("details", {})
    running = math.ceil(STEADY_FRACTION * c)
    try:
        out["bench_tpot_steady_ms"] = bench_steady_tpot_ms(details, c, plan["output_len"],
                                                           row.get("steady_s"),
                                                           staggered)  # fmt: skip
        # The scheduler's rate over that same window: an engine that changes speed within
        # bench_serving's run (a launch-bound one's host phases: 1.5x for 30 s at C = 16 on
        # the H200) is compared over the span each TPOT covers.
        span = steady_span_at(details, c, t1, row.get("steady_s"), staggered)
        if span is not None:
            at = server_window_of(pas.server.log_path, *span, running, c)
            out["bench_server_tok_s_steady"] = at["server_tok_s_median"]
    except Exception as exc:  # noqa: BLE001 - details it cannot read: the plain ratio stands
        log.warning("C=%d: no steady TPOT from bench_serving's details: %s: %s", c,
                    type(exc).__name__, exc)  # fmt: skip
    out.update(result)
    # The scheduler's rate over bench_serving's steady part (not its start's prefills or
    # its end's stragglers), as over the study's steady window.
    steady = server_window_of(pas.server.log_path, t0, t1, running, c)
    out["bench_server_tok_s_median"] = steady["server_tok_s_median"]
    out.update(ratios(out))
    if out.get("bench_error"):
        log.warning("C=%d: cross-check failed: %s", c, out["bench_error"])
    else:
        log.info("C=%d: bench_serving TPOT %.2f ms (steady %.2f), %.0f tok/s (study %.2f ms, "
                 "%.0f tok/s)", c, out.get("bench_tpot_ms") or 0,
                 out.get("bench_tpot_steady_ms") or 0, out.get("bench_output_tok_s") or 0,
                 out.get("tpot_ms") or 0, out.get("output_tok_s") or 0)  # fmt: skip
    return out


def ratios(row: dict) -> dict:
    """The study's TPOT over bench_serving's median TPOT, its steady TPOT (the like-for-like
    one) and its median ITL, the scheduler's tok/s during bench_serving's run and during its
    steady window over during the study, the study's tok/s over bench_serving's."""

    def ratio(a, b):
        return a / b if a and b else None

    return {
        "tpot_ratio": ratio(row.get("tpot_ms"), row.get("bench_tpot_ms")),
        "tpot_ratio_steady": ratio(row.get("tpot_ms"), row.get("bench_tpot_steady_ms")),
        "itl_ratio": ratio(row.get("tpot_ms"), row.get("bench_itl_ms")),
        "engine_ratio": ratio(row.get("bench_server_tok_s_median"), row.get("server_tok_s_median")),
        "engine_ratio_steady": ratio(
            row.get("bench_server_tok_s_steady"), row.get("server_tok_s_median")
        ),
        "tok_s_ratio": ratio(row.get("output_tok_s"), row.get("bench_output_tok_s")),
    }
