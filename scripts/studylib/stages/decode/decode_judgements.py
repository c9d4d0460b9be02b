"""The decode table read once for every user: numeric and text columns, a window's validity
and why not, the dummy-weights note, and the pairs question 5's answers compare (CUDA graphs
on against off, one GPU against tensor parallelism). The judgements themselves are
decode_answers.py's."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ...core.finding_records import (
    DTYPE_NAMES,
    _has,
    _numeric,
    _ok,
    field_getter,
    num_of,
    text_of,
)
from ...core.verdicts import beyond, decision_noise, run_to_run
from ...instruments.nvml import reason_names
from ...instruments.serving.decode_load import STEADY_FRACTION
from .decode_schema import PAIR_COLUMNS, SHORTENED_FIGURES, TP_COLUMNS

DECODE_NUMERIC = (
    "concurrency", "gpus", "steady_s", "output_tok_s", "tpot_ms", "tok_s_over_c_tpot",
    "itl_p50_ms", "itl_p99_ms", "ttft_p50_ms", "avg_w_per_gpu", "avg_w_total", "pct_limit",
    "idle_w_per_gpu", "j_per_token", "j_per_token_net", "sm_clock_mhz", "sm_util",
    "tensor_util", "dram_util", "step_gb", "hbm_floor_ms", "tpot_over_floor", "load_cpu_pct",
    "errors", "wrong_length", "decoding_share", "w_gpu_min", "w_gpu_median", "w_gpu_max", "ep",
)  # fmt: skip
DECODE_TEXT = ("engine", "variant", "weights", "power_source", "throttle_reasons", "first_error")
#: Engines whose variants serve dummy (random) weights in this study (``model: dummy``).
DUMMY_ENGINES = ("sglang",)


def dummy_weights_note(table: pd.DataFrame | None) -> tuple[list[str], str]:
    """The variants that serve dummy (random) weights, and the sentence that says so and which
    routing they ran: SGLang's uniform switch, or the random weights' own router (which on
    the H200 read far fewer experts than uniform routing). Tables without ``model_kind``
    (older runs) count every SGLang variant as dummy, as the study served no other."""
    if table is None or table.empty or "variant" not in table.columns:
        return [], ""
    if "model_kind" in table.columns and table["model_kind"].notna().any():
        is_dummy = table["model_kind"].map(text_of) == "dummy"
    else:
        is_dummy = (
            table.get("engine", pd.Series("", index=table.index)).map(text_of).isin(DUMMY_ENGINES)
        )
    rows = table[is_dummy]
    variants = sorted(set(map(text_of, rows["variant"])))
    if not variants:
        return [], ""
    routing = (
        rows["routing"].map(text_of)
        if "routing" in rows.columns
        else pd.Series("", index=rows.index)
    )
    uniform = sorted(set(map(text_of, rows.loc[routing == "uniform", "variant"])))
    own = sorted(set(variants) - set(uniform))
    text = (f"{', '.join(variants)} serve dummy weights (--load-format dummy): the weights "
            "are random, so speed and power are those of the served geometry, not of a "
            "trained model.")  # fmt: skip
    if uniform:
        text += (f" {', '.join(uniform)} route uniformly (SGLang's "
                 "SGLANG_SIMULATE_UNIFORM_EXPERTS: each token to top_k experts from a random "
                 "offset, every expert equally likely).")  # fmt: skip
    if own:
        text += (f" {', '.join(own)} use the random weights' own router, which can send most "
                 "tokens to the same few experts: a step then reads fewer expert weights than "
                 "decode with a trained router does.")  # fmt: skip
    return variants, text


#: Reasons that only say the GPU was idle or is at its application clocks: not a limit.
BENIGN_REASONS = ("gpu_idle", "applications_clocks_setting", "none")


def valid_flag(value: Any) -> bool:
    """A ``valid`` cell as a bool: True/False, 1/0, "true"/"false"; missing is False."""
    if isinstance(value, bool | int | float) and not (
        isinstance(value, float) and math.isnan(value)
    ):
        return bool(value)
    return text_of(value).lower() in ("true", "1", "1.0", "yes")


def _count(value: Any) -> int:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return 0
    return 0 if math.isnan(f) else int(f)


#: Why a run is invalid when no request failed: its steady window was too short.
SHORT_STEADY = "steady window shorter than the minimum"

#: Why every run of a variant is invalid when its server did not start (out of GPU memory,
#: a crash before ready, no answer in ``decode.ready_timeout_s``): ``first_error`` begins so.
NOT_STARTED = "the server did not start"


#: The client's count may fall this far below the scheduler's before a window is called
#: delivery-bound (client_over_scheduler: without millisecond stamps the two count over
#: windows that differ by up to a log interval).
DELIVERY_TOLERANCE = 0.05

#: The share of C the scheduler must have kept running through most of the window (its median
#: over the window's log lines, as the load's own steady window asks of the client's
#: in-flight count). Not the fewest: requests that run in lockstep end together, and the one
#: line logged while their replacements are in prefill reads a few running (12 of 256 at FP8
#: C = 256 on the H200, 2026-12-02, one line of 31, the rest 256).
RUNNING_FRACTION = STEADY_FRACTION


def exact_ratio(row: Any) -> float:
    """``delivery_ratio``: the client's count over the scheduler's over the same whole log
    lines (SGLang's stamps in milliseconds); NaN where the row has none."""
    return num_of(field_getter(row)("delivery_ratio"))


def client_over_scheduler(row: Any) -> float:
    """The tokens the client received over those the scheduler generated in the window:
    ``delivery_ratio`` (the two counts over the same whole log lines, the server's stamps in
    milliseconds), else the client's tok/s over the scheduler's mean line (a table from
    before 2026-12-04, or a log in whole seconds); NaN when the server logged nothing."""
    ratio = exact_ratio(row)
    if not math.isnan(ratio):
        return ratio
    get = field_getter(row)
    server = num_of(get("server_tok_s"))
    return num_of(get("output_tok_s")) / server if server > 0 else float("nan")


#: How far the client's count may differ from the scheduler's over the same whole log lines
#: (``delivery_ratio``) before the row is the engine's own account (issue 32: within 2 %, or
#: the engine's count used and named). Both count the same tokens there, apart from those a
#: chunk in flight carries across a span's edge: about 4 steps' worth each (--stream-interval
#: 8), 0.6 % of an 18-s span at C = 512. Without that ratio the decision noise decides.
COUNT_AGREEMENT = 0.02


def engine_account(row: Any) -> bool:
    """Whether a window's tok/s and TPOT are the engine's own account (its log) rather than
    the client's: where the client's token count differs from what the scheduler made over
    the window beyond the noise, SGLang's streaming path, not the engine, set the client's
    timing. On the H200 (bf16, C = 256, 2026-12-02) the client counted 3.5 % more tokens
    than the scheduler made, chunks queued in the streaming path reaching it in bursts, and
    its TPOT read 3.3 % below the scheduler's step (C over its rate), which bench_serving's
    steady TPOT matched within 0.3 %. At bf16 C = 512 (2026-12-04) a window began as the
    client caught up after a one-second delivery stall (its start is the last staggered
    first request's end reaching the client, which the stall had held back): 3.0 % more."""
    exact = not math.isnan(exact_ratio(row))
    return beyond(run_to_run(client_over_scheduler(row), 1.0),
                  COUNT_AGREEMENT if exact else decision_noise())  # fmt: skip


def stalls_note(row: Any) -> str:
    """What held the window's streams back, where anything did ("" otherwise): the server's
    long garbage collections (``server_gc_s``, SGLang's tokenizer process: every stream's
    chunks wait meanwhile) and the load's own stalls (``load_stall_s``, its event loop late)
    inside the window. Either one puts a burst of held-back chunks into the client's count."""
    get = field_getter(row)
    parts = [f"{what} {num_of(get(key)):.2f} s" for key, what in (
        ("server_gc_s", "the server's long garbage collections"),
        ("load_stall_s", "the load's own stalls"),
    ) if num_of(get(key)) > 0]  # fmt: skip
    return "streams held back inside the window: " + "; ".join(parts) if parts else ""


def delivery_note(row: Any) -> str:
    """Why a window does not describe steady decode ("" when it does, or when the server
    logged nothing to compare): the scheduler generated more than the client received (unless
    the row is the engine's own account, ``tpot_source`` engine), or ran fewer than
    ``RUNNING_FRACTION`` × C requests over most of it."""
    get = field_getter(row)
    server, ratio = num_of(get("server_tok_s")), client_over_scheduler(row)
    running, c = num_of(get("server_running_median")), num_of(get("concurrency"))
    causes = []  # a missing value is NaN: no comparison with it holds
    engine_row = text_of(get("tpot_source")) == "engine"  # an old table's row: NA
    if ratio < 1 - DELIVERY_TOLERANCE and not engine_row:
        received = (f"{100 * ratio:.1f} % of them over the same log lines"
                    if not math.isnan(exact_ratio(row))
                    else f"{num_of(get('output_tok_s')):,.0f}")  # fmt: skip
        causes.append(f"the server generated {server:,.0f} tok/s, the client received "
                      f"{received}: its streaming path set the pace")  # fmt: skip
    if running < RUNNING_FRACTION * c:
        causes.append(f"the server ran a median {running:.0f} of C = {c:.0f} requests "
                      "(it idled, waiting for the client)")  # fmt: skip
    return "; ".join(causes)


def invalid_note(row: Any) -> str:
    """Why a decode run is invalid ("" when it is valid): the figures' and report's note."""
    get = field_getter(row)
    if valid_flag(get("valid", False)):
        return ""
    if text_of(get("first_error")).startswith(NOT_STARTED):
        return f"invalid: {NOT_STARTED}"
    causes = []
    errors, wrong = _count(get("errors")), _count(get("wrong_length"))
    if errors:
        causes.append(f"{errors} request error{'s' if errors != 1 else ''}")
    if wrong:
        causes.append(f"{wrong} completion{'s' if wrong != 1 else ''} of the wrong length")
    delivery = delivery_note(row)
    if delivery:
        causes.append(delivery)
    steady = pd.to_numeric(pd.Series([get("steady_s")]), errors="coerce").iloc[0]
    if not causes or math.isnan(steady) or steady <= 0:
        causes.insert(0, SHORT_STEADY)
    return "invalid: " + "; ".join(causes)


def start_failure(rows: pd.DataFrame) -> str:
    """Where a variant's server did not start (every row says so): the first row's
    ``first_error``, the server's reason; else ''."""
    errors = [text_of(e) for e in rows.get("first_error", pd.Series(dtype=object))]
    if errors and all(e.startswith(NOT_STARTED) for e in errors):
        return errors[0]
    return ""


def power_sources(df: pd.DataFrame) -> list[str]:
    """The power sources a decode table's runs were measured with ("none": no power)."""
    if df.empty or "power_source" not in df.columns:
        return ["none"]
    return sorted({text_of(v) or "none" for v in df["power_source"]})


def graphs_flag(value: Any) -> bool | None:
    """A ``cuda_graphs`` cell: True / False, or None where the engine has no such switch."""
    if isinstance(value, bool):
        return value
    text = text_of(value).lower()
    if text in ("true", "1", "1.0", "yes", "on"):
        return True
    if text in ("false", "0", "0.0", "no", "off"):
        return False
    return None


def weights_name(weights: Any) -> str:
    text = text_of(weights)
    return DTYPE_NAMES.get(text, text.upper())


def prep_decode(decode: pd.DataFrame) -> pd.DataFrame:
    df = _numeric(decode, *DECODE_NUMERIC)
    for c in DECODE_NUMERIC:
        if c not in df.columns:
            df[c] = float("nan")
    for c in DECODE_TEXT:
        if c not in df.columns:
            df[c] = ""
        df[c] = df[c].map(text_of)
    df["valid"] = df["valid"].map(valid_flag) if "valid" in df.columns else True
    df["graphs"] = df["cuda_graphs"].map(graphs_flag) if "cuda_graphs" in df.columns else None
    return df


#: The figures two decode windows of one variant and C are compared on, each its column.
DECODE_FIGURES = {"TPOT": "tpot_ms", "tok/s": "output_tok_s", "W": "avg_w_per_gpu",
                  "J/token": "j_per_token"}  # fmt: skip


def figures_differ(a: Any, b: Any) -> tuple[float, list[str]]:
    """Two windows of one variant and C (rows with the decode table's columns): the noise
    their comparison uses (the larger window precision, ``tpot_ci_pct``, never below the
    floor) and the figures (DECODE_FIGURES' names) that differ beyond it."""
    get_a, get_b = field_getter(a), field_getter(b)
    noise = decision_noise(num_of(get_a("tpot_ci_pct")) / 100,
                           num_of(get_b("tpot_ci_pct")) / 100)  # fmt: skip
    changes = {name: run_to_run(num_of(get_a(column)), num_of(get_b(column)))
               for name, column in DECODE_FIGURES.items()}  # fmt: skip
    return noise, [name for name, change in changes.items() if beyond(change, noise)]


def shortened_rows(decode: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A full-length run's valid windows that state a shortened one (decode.full_length_s),
    and those shortened windows' own figures under the rows' column names
    (``shortened_tpot_ms`` as ``tpot_ms``, ...): the two sides :func:`figures_differ` compares
    row by row."""
    if decode is None or "shortened_steady_s" not in decode:
        return pd.DataFrame(), pd.DataFrame()
    full = decode[pd.to_numeric(decode["shortened_steady_s"], errors="coerce").notna()]
    if "valid" in full:
        full = full[full["valid"].map(valid_flag)]
    full = full.reset_index(drop=True)
    return full, full.assign(**{c: full[f"shortened_{c}"] for c in SHORTENED_FIGURES})


def ratio_of(a: Any, b: Any) -> float:
    a, b = num_of(a), num_of(b)
    return a / b if _ok(a) and _ok(b) and b > 0 else float("nan")


def graphs_pairs(decode: pd.DataFrame | None) -> pd.DataFrame:
    """Per engine, weights and concurrency: the CUDA-graphs-on variant beside the graphs-off
    one (valid rows only) with the on/off ratios of TPOT, W per GPU, J/token (total and net of
    idle) and tok/s. Empty (with :data:`PAIR_COLUMNS`) when no such pair ran."""
    rows: list[dict[str, Any]] = []
    if _has(decode, "concurrency", "variant", "cuda_graphs"):
        df = prep_decode(decode)
        df = df[df["valid"] & df["graphs"].notna() & df["output_tok_s"].notna()]
        df = df.assign(gpus=df["gpus"].fillna(1))
        for (engine, weights, gpus), g in df.groupby(["engine", "weights", "gpus"], sort=True):
            on = sorted(set(g.loc[g["graphs"] == True, "variant"]))  # noqa: E712
            off = sorted(set(g.loc[g["graphs"] == False, "variant"]))  # noqa: E712
            if not on or not off:
                continue
            a, b = (
                by_concurrency(g[g["variant"] == on[0]]),
                by_concurrency(g[g["variant"] == off[0]]),
            )
            for c in sorted(set(a.index) & set(b.index)):
                x, y = a.loc[c], b.loc[c]
                rows.append({
                    "engine": engine, "weights": weights, "gpus": int(gpus),
                    "concurrency": int(c),
                    "variant_on": on[0], "variant_off": off[0],
                    "tpot_on_ms": x["tpot_ms"], "tpot_off_ms": y["tpot_ms"],
                    "tpot_ratio": ratio_of(x["tpot_ms"], y["tpot_ms"]),
                    "w_on": x["avg_w_per_gpu"], "w_off": y["avg_w_per_gpu"],
                    "w_ratio": ratio_of(x["avg_w_per_gpu"], y["avg_w_per_gpu"]),
                    "j_on": x["j_per_token"], "j_off": y["j_per_token"],
                    "j_ratio": ratio_of(x["j_per_token"], y["j_per_token"]),
                    "j_net_on": x["j_per_token_net"], "j_net_off": y["j_per_token_net"],
                    "j_net_ratio": ratio_of(x["j_per_token_net"], y["j_per_token_net"]),
                    "tok_s_on": x["output_tok_s"], "tok_s_off": y["output_tok_s"],
                    "tok_ratio": ratio_of(x["output_tok_s"], y["output_tok_s"]),
                })  # fmt: skip
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def tp_pairs(decode: pd.DataFrame | None) -> pd.DataFrame:
    """Per engine, weights, CUDA graphs setting and concurrency: the one-GPU variant beside
    each tensor-parallel one (valid rows only): tok/s, TPOT, W per GPU (and the spread over
    the N GPUs), total watts, % of the limit, J/token, SM clock and clocks-event reasons.
    Empty (with :data:`TP_COLUMNS`) when no such pair ran."""
    rows: list[dict[str, Any]] = []
    if _has(decode, "concurrency", "variant", "gpus"):
        df = prep_decode(decode)
        df = df[df["valid"] & df["output_tok_s"].notna() & df["gpus"].notna()]
        keys = ["engine", "weights", "graphs"]
        for (engine, weights, graphs), g in df.groupby(keys, sort=True, dropna=False):
            ones = sorted(set(g.loc[g["gpus"] == 1, "variant"]))
            if not ones:
                continue
            a = by_concurrency(g[g["variant"] == ones[0]])
            for variant in sorted(set(g.loc[g["gpus"] > 1, "variant"])):
                b = by_concurrency(g[g["variant"] == variant])
                for c in sorted(set(a.index) & set(b.index)):
                    x, y = a.loc[c], b.loc[c]
                    rows.append({
                        "engine": engine, "weights": weights, "cuda_graphs": graphs,
                        "concurrency": int(c), "variant_1": ones[0], "variant_n": variant,
                        "gpus_n": int(y["gpus"]), "tok_s_1": x["output_tok_s"],
                        "tok_s_n": y["output_tok_s"],
                        "tok_ratio": ratio_of(y["output_tok_s"], x["output_tok_s"]),
                        "tpot_1_ms": x["tpot_ms"], "tpot_n_ms": y["tpot_ms"],
                        "tpot_ratio": ratio_of(y["tpot_ms"], x["tpot_ms"]),
                        "w_1": x["avg_w_per_gpu"], "w_n": y["avg_w_per_gpu"],
                        "w_n_min": y.get("w_gpu_min"), "w_n_max": y.get("w_gpu_max"),
                        "w_total_ratio": ratio_of(y["avg_w_total"], x["avg_w_total"]),
                        "pct_limit_1": x["pct_limit"], "pct_limit_n": y["pct_limit"],
                        "j_1": x["j_per_token"], "j_n": y["j_per_token"],
                        "j_ratio": ratio_of(y["j_per_token"], x["j_per_token"]),
                        "clock_1_mhz": x["sm_clock_mhz"], "clock_n_mhz": y["sm_clock_mhz"],
                        "reasons_1": limiting_reasons(x["throttle_reasons"]),
                        "reasons_n": limiting_reasons(y["throttle_reasons"]),
                    })  # fmt: skip
    return pd.DataFrame(rows, columns=TP_COLUMNS)


def by_concurrency(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop_duplicates("concurrency", keep="last").set_index("concurrency")


def limiting_reasons(cell: Any) -> str:
    """The clocks-event reasons of a cell that limit clocks (not idle or the set clocks)."""
    return ",".join(n for n in reason_names(cell) if n not in BENIGN_REASONS)
