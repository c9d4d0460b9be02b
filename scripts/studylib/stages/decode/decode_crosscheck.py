"""The cross-check of a decode job: SGLang's own client, bench_serving
(instruments.serving.bench_serving), at each C against the same server right after the main
pass's window at that C, one crosscheck.csv row per C beside the study's figures; where that
pair disagrees, the two clients alternated for ``crosscheck_rounds`` rounds (:func:`alternate`);
a job's runs share one bench_serving runner (:func:`crosscheck_worker`)."""

from __future__ import annotations

import contextlib
import logging
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ...core.finding_records import _ok
from ...core.verdicts import beyond, decision_noise, run_to_run
from ...instruments.serving.bench_serving import (
    BenchWorker,
    bench_prompts,
    bench_serving_argv,
    bench_timeout_s,
    run_bench_serving,
)
from ...instruments.serving.bench_steady import bench_steady
from ...instruments.serving.decode_load import (
    STEADY_FRACTION,
)
from ...instruments.serving.launcher import url_host
from ...instruments.serving.load_stagger import staggered_length
from ...instruments.serving.server_log import server_window_of
from .decode_noise import crosscheck_ratio
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
                  worker: BenchWorker | None = None,
                  study_again: Callable[[int], dict] | None = None) -> dict:  # fmt: skip
    """SGLang's bench_serving (instruments.serving.bench_serving) at C against the same
    server, right after the study's window at C (the engine's own speed drifts between
    windows minutes apart: on the H200 its scheduler's rate at C = 1 moved 13 % within one
    server's life): the crosscheck.csv row of C. Where that pair disagrees beyond the noise
    and the plan asks for ``crosscheck_rounds`` > 1, the two clients then alternate
    (:func:`alternate`; ``study_again(c)`` measures one more study window). A failed run is
    its ``bench_error``; nothing else is lost."""
    plan = pas.plan
    folder = out_dir / "crosscheck"
    folder.mkdir(parents=True, exist_ok=True)
    out = {key: row.get(key) for key in ("engine", "variant", "weights", "cuda_graphs",
           "concurrency", "tpot_ms", "tpot_source", "output_tok_s", "server_tok_s_median",
           "avg_w_per_gpu", "valid")}  # fmt: skip
    staggered = bool(plan.get("stagger"))
    out["bench_staggered"] = staggered
    out["bench_backend"] = bench_backend(plan)
    out["bench_prompts"] = bench_prompts_at(plan, c, row)
    if not pas.server.alive():
        out["bench_error"] = "the server is no longer running"
        return out
    out.update(bench_run(pas, c, row, folder, worker))
    out.update(ratios(out))
    rounds = int(plan.get("crosscheck_rounds") or 1)
    if rounds > 1 and study_again is not None and pair_apart(out):
        log.info("C=%d: the two clients %.1f %% apart: %d rounds alternating them", c,
                 100 * abs(crosscheck_ratio(out)[0] - 1), rounds)  # fmt: skip
        out.update(alternate(pas, c, row, out, folder, worker, study_again, rounds))
    if out.get("bench_error"):
        log.warning("C=%d: cross-check failed: %s", c, out["bench_error"])
    else:
        log.info("C=%d: bench_serving TPOT %.2f ms (steady %.2f), %.0f tok/s (study %.2f ms, "
                 "%.0f tok/s)", c, out.get("bench_tpot_ms") or 0,
                 out.get("bench_tpot_steady_ms") or 0, out.get("bench_output_tok_s") or 0,
                 out.get("tpot_ms") or 0, out.get("output_tok_s") or 0)  # fmt: skip
    return out


def bench_backend(plan: dict) -> str:
    """Which of bench_serving's backends (bench_serving.BACKENDS) the plan runs: its
    ``crosscheck_backend``, SGLang's native one where it names none."""
    return plan.get("crosscheck_backend") or "sglang"


def bench_prompts_at(plan: dict, c: int, row: dict) -> int:
    """bench_serving's requests at C: as long as the study's window lasted (a precise window
    may end before min_steady_s), its staggered first wave included where the load has one."""
    seconds = row.get("steady_s") or plan["min_steady_s"]
    return bench_prompts(c, seconds, plan["output_len"], row.get("tpot_ms"),
                         bool(plan.get("stagger")))  # fmt: skip


def bench_run(pas: ServerPass, c: int, row: dict, folder: Path,
              worker: BenchWorker | None, tag: str = "") -> dict:  # fmt: skip
    """One bench_serving run at C after the server is drained: its ``bench_*`` fields, its
    steady TPOT and the scheduler's rate over its whole run and its steady window.
    ``tag`` names a later round's files (bench_c{C}{tag}.jsonl)."""
    plan = pas.plan
    staggered = bool(plan.get("stagger"))
    # Staggered as the study's load was (bench_serving's module says why it matters).
    first = [staggered_length(plan["output_len"], c, i) for i in range(c)] if staggered else None
    prompts = bench_prompts_at(plan, c, row)
    drain_server(pas)
    result_file = folder / f"bench_c{c}{tag}.jsonl"
    argv = bench_serving_argv(sys.executable, url_host(pas.host), pas.port, plan["model"], c,
                              plan["input_len"], plan["output_len"], prompts, c,
                              result_file, first, bench_backend(plan))  # fmt: skip
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
    out = {}
    # Its TPOT over a window as long as the study's, after its own admission: like for like.
    details = result.pop("details", {})
    running = math.ceil(STEADY_FRACTION * c)
    try:
        steady = bench_steady(details, c, plan["output_len"], t1, row.get("steady_s"),
                              staggered)  # fmt: skip
        if steady is not None:
            out["bench_tpot_steady_ms"] = steady["tpot_ms"]
        # The scheduler's rate over that same window: an engine that changes speed within
        # bench_serving's run (a launch-bound one's host phases: 1.5x for 30 s at C = 16 on
        # the H200) is compared over the span each TPOT covers.
        if steady is not None and steady["span"] is not None:
            at = server_window_of(pas.server.log_path, *steady["span"], running, c)
            out["bench_server_tok_s_steady"] = at["server_tok_s_median"]
    except Exception as exc:  # noqa: BLE001 - details it cannot read: the plain ratio stands
        log.warning("C=%d: no steady TPOT from bench_serving's details: %s: %s", c,
                    type(exc).__name__, exc)  # fmt: skip
    out.update(result)
    # The scheduler's rate over bench_serving's steady part (not its start's prefills or
    # its end's stragglers), as over the study's steady window.
    steady = server_window_of(pas.server.log_path, t0, t1, running, c)
    out["bench_server_tok_s_median"] = steady["server_tok_s_median"]
    return out


def pair_apart(out: dict) -> bool:
    """Whether one study window and one bench_serving run disagree beyond the noise (the
    verdict's own rule, decode_noise): only then do more rounds have something to tell."""
    ratio, _ = crosscheck_ratio(out)
    return not out.get("bench_error") and beyond(run_to_run(ratio, 1.0), decision_noise())


def alternate(pas: ServerPass, c: int, row: dict, first: dict, folder: Path,
              worker: BenchWorker | None, study_again: Callable[[int], dict],
              rounds: int) -> dict:  # fmt: skip
    """The two clients alternated on one server: the first pair (the study's window, then
    bench_serving) is round 0; round r runs them in reverse on odd r (A B, B A, A B, ...), so
    a change of the engine's speed over the rounds (a launch-bound engine follows the host's
    phases of seconds to tens of seconds: on the H200 its rate at C = 16 fell 1.5x for 33 s
    from the end of one study window) weighs on both alike. Each arm's TPOT (bench_serving's
    steady one) and the scheduler's rate over its window go to crosscheck/rounds_c{C}.csv;
    the row gets the medians over rounds and their ratios (``tpot_ratio_rounds``,
    ``engine_ratio_rounds``; the median of each round's TPOT ratio over its engine ratio,
    ``client_ratio_rounds``), how many rounds ran whole (``rounds``) and the seconds the
    rounds after the first measured (``rounds_s``, the device-time account's)."""
    arms = [{"round": 0, "arm": "study", "tpot_ms": row.get("tpot_ms"),
             "server_tok_s_median": row.get("server_tok_s_median"),
             "seconds": row.get("steady_s"), "error": ""},
            {"round": 0, "arm": "bench", **_bench_arm(first)}]  # fmt: skip
    for r in range(1, rounds):
        for arm in ("bench", "study") if r % 2 else ("study", "bench"):
            if not pas.server.alive():
                arms.append({"round": r, "arm": arm, "error": "the server is no longer running"})
                break
            try:
                if arm == "study":
                    got = study_again(c)
                else:
                    got = _bench_arm(bench_run(pas, c, row, folder, worker, tag=f"_r{r}"))
            except Exception as exc:  # noqa: BLE001 - the rounds so far and the row stand
                log.warning("C=%d: round %d's %s arm failed: %s: %s", c, r, arm,
                            type(exc).__name__, exc)  # fmt: skip
                got = {"error": f"{type(exc).__name__}: {exc}"}
            arms.append({"round": r, "arm": arm, **got})
    frame = pd.DataFrame(arms).reindex(columns=ROUND_COLUMNS)
    frame.to_csv(folder / f"rounds_c{c}.csv", index=False)
    return rounds_summary(arms)


def _bench_arm(result: dict) -> dict:
    """A bench_serving run as one arm of a round: its steady TPOT (else its median) and the
    scheduler's rate over the same span."""
    steady = result.get("bench_tpot_steady_ms")
    return {"tpot_ms": steady or result.get("bench_tpot_ms"),
            "server_tok_s_median": result.get("bench_server_tok_s_steady") if steady
            else result.get("bench_server_tok_s_median"),
            "seconds": result.get("bench_duration_s"),
            "error": result.get("bench_error") or ""}  # fmt: skip


#: crosscheck/rounds_c{C}.csv: one row per arm of each round; ``seconds``: what it measured
#: (a study window's steady span, a bench_serving run's own duration).
ROUND_COLUMNS = ["round", "arm", "tpot_ms", "server_tok_s_median", "seconds", "error"]


def rounds_summary(arms: list[dict]) -> dict:
    """The medians over the rounds that ran whole (both arms measured) and their ratios: the
    study's TPOT over bench_serving's, the scheduler's rate under bench_serving over under the
    study, and round by round the first over the second (``client_ratio_rounds``); and the
    seconds every arm after the first pair measured (``rounds_s``)."""
    extra = sum(a["seconds"] for a in arms if a["round"] > 0 and _ok(a.get("seconds")))
    whole = []
    for r in sorted({a["round"] for a in arms}):
        pair = {a["arm"]: a for a in arms if a["round"] == r}
        if all(_ok(pair.get(arm, {}).get("tpot_ms")) and not pair[arm].get("error")
               for arm in ("study", "bench")):  # fmt: skip
            whole.append(pair)
    if not whole:
        return {"rounds": 0, "rounds_s": extra}

    def median(arm: str, key: str) -> float | None:
        values = [p[arm][key] for p in whole if _ok(p[arm].get(key))]
        return statistics.median(values) if values else None

    study, bench = median("study", "tpot_ms"), median("bench", "tpot_ms")
    rates = median("study", "server_tok_s_median"), median("bench", "server_tok_s_median")
    # Each round's TPOT ratio over its engine ratio: each client against the scheduler's rate
    # over its own window. The arms' medians can come from different rounds: on the H200
    # (FP8 without graphs, C = 256) the engine moved 0.90-1.05x between arms and the medians
    # read 0.960 TPOT against 0.997 engine, where round by round the ratio followed the
    # engine's (0.978-1.030 after it).
    paired = []
    for p in whole:
        rate = {arm: p[arm].get("server_tok_s_median") for arm in ("study", "bench")}
        if all(_ok(v) and v > 0 for v in rate.values()) and p["bench"]["tpot_ms"] > 0:
            tpot_ratio = p["study"]["tpot_ms"] / p["bench"]["tpot_ms"]
            paired.append(tpot_ratio / (rate["bench"] / rate["study"]))
    return {"rounds": len(whole), "rounds_s": extra, "tpot_rounds_ms": study,
            "bench_tpot_rounds_ms": bench,
            "tpot_ratio_rounds": study / bench if study and bench else None,
            "engine_ratio_rounds": rates[1] / rates[0] if all(rates) else None,
            "client_ratio_rounds": statistics.median(paired) if paired else None}  # fmt: skip


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
