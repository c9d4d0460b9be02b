"""Question 5 from the decode table: throughput, latency and energy per server variant,
CUDA graphs on against off, one GPU against tensor parallelism."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import pandas as pd

from ..core.finding_records import (
    DTYPE_NAMES,
    Findings,
    _has,
    _is_cpu,
    _message,
    _numeric,
    _ok,
    _plain,
    _span,
    field_getter,
    fmt_pct,
    fmt_ratio,
    fmt_w,
    num_of,
    text_of,
)
from ..instruments.nvml import reason_names

# ---------------------------------------------------------------------------------------------
# Question 5: decode throughput and energy per variant
# ---------------------------------------------------------------------------------------------

DECODE_NUMERIC = (
    "concurrency", "gpus", "steady_s", "output_tok_s", "tpot_ms", "tok_s_over_c_tpot",
    "itl_p50_ms", "itl_p99_ms", "ttft_p50_ms", "avg_w_per_gpu", "avg_w_total", "pct_limit",
    "idle_w_per_gpu", "j_per_token", "j_per_token_net", "sm_clock_mhz", "sm_util",
    "tensor_util", "dram_util", "step_gb", "hbm_floor_ms", "tpot_over_floor", "load_cpu_pct",
    "errors", "wrong_length", "decoding_share", "w_gpu_min", "w_gpu_median", "w_gpu_max", "ep",
)  # fmt: skip
DECODE_TEXT = ("engine", "variant", "weights", "power_source", "throttle_reasons", "first_error")
#: Engines with a CUDA-graphs switch (SGLang: --disable-cuda-graph, vLLM: --enforce-eager).
GRAPH_ENGINES = ("sglang", "vllm")
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


#: The load generator above this % of one CPU core may itself limit the load.
LOAD_CPU_PCT = 80.0
#: tok/s over C / TPOT below this: C was not kept in flight (client or host side).
IN_FLIGHT_MIN = 0.8
#: Reasons that only say the GPU was idle or is at its application clocks: not a limit.
BENIGN_REASONS = ("gpu_idle", "applications_clocks_setting", "none")
UTIL_LABELS = (("sm_util", "SM"), ("tensor_util", "tensor"), ("dram_util", "DRAM"))
#: Columns of :func:`tp_pairs`: one GPU against N at the same engine, weights and graphs.
TP_COLUMNS = [
    "engine", "weights", "cuda_graphs", "concurrency", "variant_1", "variant_n", "gpus_n",
    "tok_s_1", "tok_s_n", "tok_ratio", "tpot_1_ms", "tpot_n_ms", "tpot_ratio", "w_1", "w_n",
    "w_n_min", "w_n_max", "w_total_ratio", "pct_limit_1", "pct_limit_n", "j_1", "j_n",
    "j_ratio", "clock_1_mhz", "clock_n_mhz", "reasons_1", "reasons_n",
]  # fmt: skip
#: Columns of :func:`graphs_pairs`.
PAIR_COLUMNS = [
    "engine", "weights", "gpus", "concurrency", "variant_on", "variant_off", "tpot_on_ms",
    "tpot_off_ms", "tpot_ratio", "w_on", "w_off", "w_ratio", "j_on", "j_off", "j_ratio",
    "j_net_on", "j_net_off", "j_net_ratio", "tok_s_on", "tok_s_off", "tok_ratio",
]  # fmt: skip


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


#: The client's tok/s may fall this far below the scheduler's before a window is called
#: delivery-bound (the two count over windows that differ by up to a log interval).
DELIVERY_TOLERANCE = 0.05

#: The share of C the scheduler must have kept running through most of the window (its median
#: over the window's log lines, as the load's own steady window asks of the client's
#: in-flight count). Not the fewest: requests that run in lockstep end together, and the one
#: line logged while their replacements are in prefill reads a few running (12 of 256 at FP8
#: C = 256 on the H200, 2026-12-02, one line of 31, the rest 256).
RUNNING_FRACTION = 0.85


def delivery_note(row: Any) -> str:
    """Why a window's client-side figures do not describe steady decode ("" when they do,
    or when the server logged nothing to compare): the scheduler generated more than the
    client received, or ran fewer than ``RUNNING_FRACTION`` × C requests over most of it."""
    get = field_getter(row)
    server, client = num_of(get("server_tok_s")), num_of(get("output_tok_s"))
    running, c = num_of(get("server_running_median")), num_of(get("concurrency"))
    causes = []  # a missing value is NaN: no comparison with it holds
    if client < (1 - DELIVERY_TOLERANCE) * server:
        causes.append(f"the server generated {server:,.0f} tok/s, the client received "
                      f"{client:,.0f}: its streaming path set the pace")  # fmt: skip
    if running < RUNNING_FRACTION * c:
        causes.append(f"the server ran a median {running:.0f} of C = {c:.0f} requests "
                      "(it idled, waiting for the client)")  # fmt: skip
    return "; ".join(causes)


def invalid_note(row: Any) -> str:
    """Why a decode run is invalid ("" when it is valid): the figures' and report's note."""
    get = field_getter(row)
    if valid_flag(get("valid", False)):
        return ""
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


def regime(weights: Any, graphs: bool | None) -> str:
    """ "BF16 weights, CUDA graphs on" (the parts that are known)."""
    bits = [f"{weights_name(weights)} weights"] if text_of(weights) else []
    if graphs is not None:
        bits.append(f"CUDA graphs {'on' if graphs else 'off'}")
    return ", ".join(bits)


def _prep_decode(decode: pd.DataFrame) -> pd.DataFrame:
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


def _rspan(values: pd.Series, fmt, unit: str = "") -> str:
    values = values.dropna()
    return _span(values.min(), values.max(), fmt, unit)


def _f1(x: float) -> str:
    return f"{x:.1f}"


def _c_list(cs: Iterable[float]) -> str:
    return ", ".join(str(int(c)) for c in sorted(cs))


def q5_decode(decode: pd.DataFrame | None, hardware: dict | None = None) -> Findings:
    out = Findings()
    if not _has(decode, "concurrency"):
        out.miss(5, "no decode table (results/tables/decode.csv): the decode stage has not run")
        return out
    df = _prep_decode(decode)
    if not (df["power_source"].isin(["nvml", "rapl"]) & df["avg_w_per_gpu"].notna()).any():
        why = "no GPU" if _is_cpu(hardware) else "no NVML or RAPL reading"
        out.miss(5, f"no decode power ({why}: power_source none): J/token and watts not "
                    "reported, throughput only",
                 expected=True)  # fmt: skip
    dummy, note = dummy_weights_note(df)
    if dummy:
        out.add(5, note, variants=dummy, weights="random")
    for variant, g in df.groupby("variant", sort=True):
        _q5_variant(out, variant, g.sort_values("concurrency"))
    if _q5_structured(out, df) == 0:
        _q5_compare(out, df)
    _q5_tp(out, df)
    return out


def _head(variant: str, g: pd.DataFrame) -> str:
    engine = text_of(g["engine"].iloc[0])
    gpus = g["gpus"].dropna()
    about = [engine] if engine and engine != variant else []
    rg = regime(g["weights"].iloc[0], g["graphs"].iloc[0])
    if rg:
        about.append(rg)
    if len(gpus):
        about.append(f"{gpus.iloc[0]:.0f} GPU{'s' if gpus.iloc[0] != 1 else ''}")
    return (variant or engine or "decode") + (f" ({', '.join(about)})" if about else "")


def _q5_variant(out: Findings, variant: str, g: pd.DataFrame) -> None:
    """Per concurrency: tok/s, TPOT, J/token (and net of idle), W per GPU and % of the limit."""
    parts, per_c, invalid = [], {}, []
    for _, r in g.iterrows():
        c = int(r["concurrency"])
        if not r["valid"]:
            bits = []
            if _ok(r["steady_s"]):
                bits.append(f"steady {r['steady_s']:.1f} s")
            for col in ("errors", "wrong_length"):
                if _ok(r[col]) and r[col] > 0:
                    bits.append(f"{r[col]:.0f} {col.replace('_', ' ')}")
            if r["first_error"]:
                bits.append(f"first error “{_message(r['first_error'])}”")
            invalid.append(f"C = {c}" + (f" ({', '.join(bits)})" if bits else ""))
            continue
        bit = f"C = {c}: {r['output_tok_s']:.1f} tok/s"
        rec = {"tok_s": float(r["output_tok_s"])}
        if _ok(r["tpot_ms"]):
            bit += f" at TPOT {r['tpot_ms']:.1f} ms"
            rec["tpot_ms"] = float(r["tpot_ms"])
        if _ok(r["j_per_token"]):
            bit += f", {r['j_per_token']:.2f} J/token"
            rec["j_per_token"] = float(r["j_per_token"])
            if _ok(r["j_per_token_net"]):
                bit += f" ({r['j_per_token_net']:.2f} net of idle)"
                rec["j_per_token_net"] = float(r["j_per_token_net"])
        if _ok(r["avg_w_per_gpu"]):
            bit += f", {fmt_w(r['avg_w_per_gpu'])} per GPU"
            rec["w_per_gpu"] = float(r["avg_w_per_gpu"])
            if _ok(r["pct_limit"]):
                bit += f" ({fmt_pct(r['pct_limit'])} of the limit)"
                rec["pct_limit"] = float(r["pct_limit"])
        parts.append(bit)
        per_c[c] = rec
    text = f"{_head(variant, g)}: " + ("; ".join(parts) if parts else "no valid concurrency level")
    if invalid:
        text += f". Invalid (not reported as results): {', '.join(invalid)}"
    more, latency = _q5_latency(g)
    if more:
        text += f". {more}"
    out.add(5, text + ".", variant=variant, engine=text_of(g["engine"].iloc[0]),
            weights=text_of(g["weights"].iloc[0]), cuda_graphs=graphs_flag(g["graphs"].iloc[0]),
            per_concurrency=per_c, invalid=len(invalid), latency=latency)  # fmt: skip


def _q5_latency(g: pd.DataFrame) -> tuple[str, dict[str, Any]]:
    """A variant's second sentence, over its valid concurrencies: TPOT against the step's HBM
    floor, ITL p50 / p99, TTFT, SM clock, clocks-event reasons and utilisation, idle W, and how
    well C was held; with its numbers."""
    v = g[g["valid"]]
    if v.empty:
        return "", {}
    cs = v["concurrency"]
    bits: list[str] = []
    numbers: dict[str, Any] = {}
    over = v[v["tpot_over_floor"].notna() & v["hbm_floor_ms"].notna()]
    if v["tpot_ms"].notna().any():
        bit = f"TPOT {_rspan(v['tpot_ms'], _f1, ' ms')}"
        if len(over):
            best = over.loc[over["tpot_over_floor"].idxmin()]
            bit += (f", {_rspan(over['tpot_over_floor'], fmt_ratio)} the step's HBM floor "
                    f"({_rspan(over['hbm_floor_ms'], _f1, ' ms')}: the bytes a step reads over "
                    f"the measured copy bandwidth), nearest at C = {best['concurrency']:.0f} "
                    f"({fmt_ratio(best['tpot_over_floor'])})")  # fmt: skip
            numbers["tpot_over_floor"] = {int(c): float(x) for c, x in
                                          zip(over["concurrency"], over["tpot_over_floor"],
                                              strict=True)}  # fmt: skip
            numbers["hbm_floor_ms"] = {int(c): float(x) for c, x in
                                       zip(over["concurrency"], over["hbm_floor_ms"],
                                           strict=True)}  # fmt: skip
        else:
            bit += " (not set against an HBM floor: no step_gb or measured copy bandwidth in "
            bit += "this table)"
        bits.append(bit)
    lat = []
    for col, label in (("itl_p50_ms", "ITL p50"), ("itl_p99_ms", "ITL p99"),
                       ("ttft_p50_ms", "TTFT p50")):  # fmt: skip
        if v[col].notna().any():
            lat.append(f"{label} {_rspan(v[col], _f1, ' ms')}")
            numbers[col] = {int(c): float(x) for c, x in zip(cs, v[col], strict=True) if _ok(x)}
    if lat:
        bits.append(", ".join(lat).replace(", ITL p99", ", p99"))
    if v["sm_clock_mhz"].notna().any():
        bits.append(f"SM clock {_rspan(v['sm_clock_mhz'], _plain, ' MHz')}")
        numbers.update(clock_min=float(v["sm_clock_mhz"].min()),
                       clock_max=float(v["sm_clock_mhz"].max()))  # fmt: skip
    if v["power_source"].isin(["nvml"]).any():
        reasons: dict[str, list[int]] = {}
        for c, cell in zip(cs, v["throttle_reasons"], strict=True):
            for name in reason_names(cell):
                if name not in BENIGN_REASONS:
                    reasons.setdefault(name, []).append(int(c))
        if reasons:
            bits.append("clocks-event reasons " + ", ".join(
                f"{n} (C = {_c_list(c)})" for n, c in sorted(reasons.items())))  # fmt: skip
        else:
            bits.append("no power, thermal or other clocks-event limit at any C")
        numbers["reasons"] = {n: sorted(c) for n, c in reasons.items()}
    utils = [(col, label) for col, label in UTIL_LABELS if v[col].notna().any()]
    if utils:
        bits.append("utilisation " + ", ".join(
            f"{label} {_rspan(v[col], _plain, ' %')}" for col, label in utils))  # fmt: skip
        numbers.update({f"{col}_max": float(v[col].max()) for col, _ in utils})
    if v["idle_w_per_gpu"].notna().any():
        bits.append(f"idle {_rspan(v['idle_w_per_gpu'], _plain, ' W')} per GPU before the "
                    "server started")  # fmt: skip
        numbers["idle_w_per_gpu"] = float(v["idle_w_per_gpu"].median())
    share = v[v["decoding_share"].notna() & v["tok_s_over_c_tpot"].notna()]
    if len(share):
        decoding = _rspan(share["decoding_share"], fmt_ratio)
        bits.append(f"tok/s {_rspan(share['tok_s_over_c_tpot'], fmt_ratio)} C / TPOT, the "
                    f"streams past their first token for {decoding} of the window (the rest: "
                    "replacement requests waiting for their prefill)")  # fmt: skip
        numbers["tok_s_over_c_tpot"] = {int(c): float(x) for c, x in
                                        zip(share["concurrency"], share["tok_s_over_c_tpot"],
                                            strict=True)}  # fmt: skip
        numbers["decoding_share"] = {int(c): float(x) for c, x in
                                     zip(share["concurrency"], share["decoding_share"],
                                         strict=True)}  # fmt: skip
    held = v[v["tok_s_over_c_tpot"] < IN_FLIGHT_MIN]
    busy = v[v["load_cpu_pct"] >= LOAD_CPU_PCT]
    if len(held):
        bits.append(f"at C = {_c_list(held['concurrency'])} tok/s is only "
                    f"{_rspan(held['tok_s_over_c_tpot'], fmt_ratio)} C / TPOT (C not kept in "
                    "flight)")  # fmt: skip
    if len(busy):
        bits.append(f"the load generator used {_rspan(busy['load_cpu_pct'], _plain, ' %')} of "
                    f"a CPU core at C = {_c_list(busy['concurrency'])} (it may limit the "
                    "load)")  # fmt: skip
    if not bits:
        return "", {}
    where = f"C = {_c_list(cs)}"
    return f"Over {where}: " + "; ".join(bits), numbers


def _by_c(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop_duplicates("concurrency", keep="last").set_index("concurrency")


def _ratio(a: Any, b: Any) -> float:
    a, b = num_of(a), num_of(b)
    return a / b if _ok(a) and _ok(b) and b > 0 else float("nan")


def graphs_pairs(decode: pd.DataFrame | None) -> pd.DataFrame:
    """Per engine, weights and concurrency: the CUDA-graphs-on variant beside the graphs-off
    one (valid rows only) with the on/off ratios of TPOT, W per GPU, J/token (total and net of
    idle) and tok/s. Empty (with :data:`PAIR_COLUMNS`) when no such pair ran."""
    rows: list[dict[str, Any]] = []
    if _has(decode, "concurrency", "variant", "cuda_graphs"):
        df = _prep_decode(decode)
        df = df[df["valid"] & df["graphs"].notna() & df["output_tok_s"].notna()]
        df = df.assign(gpus=df["gpus"].fillna(1))
        for (engine, weights, gpus), g in df.groupby(["engine", "weights", "gpus"], sort=True):
            on = sorted(set(g.loc[g["graphs"] == True, "variant"]))  # noqa: E712
            off = sorted(set(g.loc[g["graphs"] == False, "variant"]))  # noqa: E712
            if not on or not off:
                continue
            a, b = _by_c(g[g["variant"] == on[0]]), _by_c(g[g["variant"] == off[0]])
            for c in sorted(set(a.index) & set(b.index)):
                x, y = a.loc[c], b.loc[c]
                rows.append({
                    "engine": engine, "weights": weights, "gpus": int(gpus),
                    "concurrency": int(c),
                    "variant_on": on[0], "variant_off": off[0],
                    "tpot_on_ms": x["tpot_ms"], "tpot_off_ms": y["tpot_ms"],
                    "tpot_ratio": _ratio(x["tpot_ms"], y["tpot_ms"]),
                    "w_on": x["avg_w_per_gpu"], "w_off": y["avg_w_per_gpu"],
                    "w_ratio": _ratio(x["avg_w_per_gpu"], y["avg_w_per_gpu"]),
                    "j_on": x["j_per_token"], "j_off": y["j_per_token"],
                    "j_ratio": _ratio(x["j_per_token"], y["j_per_token"]),
                    "j_net_on": x["j_per_token_net"], "j_net_off": y["j_per_token_net"],
                    "j_net_ratio": _ratio(x["j_per_token_net"], y["j_per_token_net"]),
                    "tok_s_on": x["output_tok_s"], "tok_s_off": y["output_tok_s"],
                    "tok_ratio": _ratio(x["output_tok_s"], y["output_tok_s"]),
                })  # fmt: skip
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def tp_pairs(decode: pd.DataFrame | None) -> pd.DataFrame:
    """Per engine, weights, CUDA graphs setting and concurrency: the one-GPU variant beside
    each tensor-parallel one (valid rows only): tok/s, TPOT, W per GPU (and the spread over
    the N GPUs), total watts, % of the limit, J/token, SM clock and clocks-event reasons.
    Empty (with :data:`TP_COLUMNS`) when no such pair ran."""
    rows: list[dict[str, Any]] = []
    if _has(decode, "concurrency", "variant", "gpus"):
        df = _prep_decode(decode)
        df = df[df["valid"] & df["output_tok_s"].notna() & df["gpus"].notna()]
        keys = ["engine", "weights", "graphs"]
        for (engine, weights, graphs), g in df.groupby(keys, sort=True, dropna=False):
            ones = sorted(set(g.loc[g["gpus"] == 1, "variant"]))
            if not ones:
                continue
            a = _by_c(g[g["variant"] == ones[0]])
            for variant in sorted(set(g.loc[g["gpus"] > 1, "variant"])):
                b = _by_c(g[g["variant"] == variant])
                for c in sorted(set(a.index) & set(b.index)):
                    x, y = a.loc[c], b.loc[c]
                    rows.append({
                        "engine": engine, "weights": weights, "cuda_graphs": graphs,
                        "concurrency": int(c), "variant_1": ones[0], "variant_n": variant,
                        "gpus_n": int(y["gpus"]), "tok_s_1": x["output_tok_s"],
                        "tok_s_n": y["output_tok_s"],
                        "tok_ratio": _ratio(y["output_tok_s"], x["output_tok_s"]),
                        "tpot_1_ms": x["tpot_ms"], "tpot_n_ms": y["tpot_ms"],
                        "tpot_ratio": _ratio(y["tpot_ms"], x["tpot_ms"]),
                        "w_1": x["avg_w_per_gpu"], "w_n": y["avg_w_per_gpu"],
                        "w_n_min": y.get("w_gpu_min"), "w_n_max": y.get("w_gpu_max"),
                        "w_total_ratio": _ratio(y["avg_w_total"], x["avg_w_total"]),
                        "pct_limit_1": x["pct_limit"], "pct_limit_n": y["pct_limit"],
                        "j_1": x["j_per_token"], "j_n": y["j_per_token"],
                        "j_ratio": _ratio(y["j_per_token"], x["j_per_token"]),
                        "clock_1_mhz": x["sm_clock_mhz"], "clock_n_mhz": y["sm_clock_mhz"],
                        "reasons_1": _limits(x["throttle_reasons"]),
                        "reasons_n": _limits(y["throttle_reasons"]),
                    })  # fmt: skip
    return pd.DataFrame(rows, columns=TP_COLUMNS)


def _limits(cell: Any) -> str:
    """The clocks-event reasons of a cell that limit clocks (not idle or the set clocks)."""
    return ",".join(n for n in reason_names(cell) if n not in BENIGN_REASONS)


def _q5_tp(out: Findings, df: pd.DataFrame) -> None:
    """One GPU against tensor parallelism, per engine, weights and graphs setting."""
    pairs = tp_pairs(df)
    keys = ["engine", "weights", "cuda_graphs", "variant_n"]
    for (engine, weights, graphs, variant), g in pairs.groupby(keys, sort=True, dropna=False):
        n, one = int(g["gpus_n"].iloc[0]), g["variant_1"].iloc[0]
        bits, per_c = [], {}
        for _, p in g.iterrows():
            c = int(p["concurrency"])
            rec = {k: float(p[k]) for k in ("tok_ratio", "tpot_ratio", "j_ratio", "w_1", "w_n",
                                             "w_n_min", "w_n_max") if _ok(p[k])}  # fmt: skip
            per_c[c] = rec
            bit = [f"tok/s {fmt_ratio(rec['tok_ratio'])}"] if "tok_ratio" in rec else []
            if "tpot_ratio" in rec:
                bit.append(f"TPOT {fmt_ratio(rec['tpot_ratio'])}")
            if "w_n" in rec and "w_1" in rec:
                w = f"{fmt_w(rec['w_n'])} per GPU against {fmt_w(rec['w_1'])}"
                if "w_n_min" in rec and "w_n_max" in rec:
                    w += f" (GPUs {_span(rec['w_n_min'], rec['w_n_max'], _plain, ' W')})"
                bit.append(w)
            if "j_ratio" in rec:
                bit.append(f"J/token {fmt_ratio(rec['j_ratio'])}")
            if p["reasons_n"] or p["reasons_1"]:
                bit.append(f"limits {p['reasons_n'] or 'none'} against {p['reasons_1'] or 'none'}")
            bits.append(f"C = {c}: " + ", ".join(bit))
        text = (f"{n} GPUs against one, {regime(weights, graphs_flag(graphs)) or engine} "
                f"({variant} / {one}, {n} GPUs ÷ 1): " + "; ".join(bits))  # fmt: skip
        out.add(5, text + ".", engine=engine, weights=weights, cuda_graphs=graphs_flag(graphs),
                variant_1=one, variant_n=variant, gpus=n, per_concurrency=per_c)  # fmt: skip


def _q5_structured(out: Findings, df: pd.DataFrame) -> int:
    """CUDA graphs on against off per weights, and weights against weights per graphs
    setting. Returns the number of comparisons made (0: fall back to variant against
    variant)."""
    graph_engines = sorted(set(df["engine"]) & set(GRAPH_ENGINES))
    if not graph_engines:
        return 0
    if df["graphs"].isna().all() or not (df["weights"] != "").any():
        return 0  # an older table without cuda_graphs and weights: variant against variant
    made = 0
    pairs = graphs_pairs(df.assign(cuda_graphs=df["graphs"]))
    for (engine, weights, gpus), g in pairs.groupby(["engine", "weights", "gpus"], sort=True):
        per_c: dict[int, dict[str, float]] = {}
        bits = []
        for _, p in g.iterrows():
            c = int(p["concurrency"])
            rec = {k: float(p[k]) for k in ("tpot_ratio", "w_ratio", "j_ratio", "j_net_ratio",
                                             "tok_ratio") if _ok(p[k])}  # fmt: skip
            per_c[c] = rec
            bit = [f"TPOT {fmt_ratio(rec['tpot_ratio'])}"] if "tpot_ratio" in rec else []
            if "w_ratio" in rec:
                bit.append(f"W per GPU {fmt_ratio(rec['w_ratio'])}")
            if "j_ratio" in rec:
                j = f"J/token {fmt_ratio(rec['j_ratio'])}"
                if "j_net_ratio" in rec:
                    j += f" (net of idle {fmt_ratio(rec['j_net_ratio'])})"
                bit.append(j)
            bit.append(f"tok/s {fmt_ratio(rec['tok_ratio'])}" if "tok_ratio" in rec else "")
            bits.append(f"C = {c}: " + ", ".join(b for b in bit if b))
        on, off = g["variant_on"].iloc[0], g["variant_off"].iloc[0]
        where = f" on {gpus} GPUs" if gpus > 1 else ""
        text = (f"CUDA graphs on against off, {weights_name(weights)} weights{where} ({engine}: "
                f"{on} / {off}, on ÷ off): " + "; ".join(bits))  # fmt: skip
        tp = g["tpot_ratio"].dropna()
        if len(tp):
            best = g.loc[tp.idxmin()]
            text += (f". Graphs cut TPOT most at C = {best['concurrency']:.0f} "
                     f"({fmt_ratio(best['tpot_ratio'])})" if best["tpot_ratio"] < 1 else
                     ". Graphs do not shorten TPOT at any shared C")  # fmt: skip
        out.add(5, text + ".", engine=engine, weights=weights, gpus=int(gpus), variant_on=on,
                variant_off=off, per_concurrency=per_c)  # fmt: skip
        made += 1
    if not made:
        out.miss(5, "CUDA graphs on/off not compared: no weights ran with both a graphs-on and "
                    "a graphs-off valid variant at a shared concurrency")  # fmt: skip
    valid = df[df["valid"] & df["output_tok_s"].notna() & (df["weights"] != "")]
    valid = valid.assign(gpus=valid["gpus"].fillna(1))
    by = ["engine", "graphs", "gpus"]
    for (engine, graphs, _gpus), g in valid.groupby(by, sort=True, dropna=False):
        weights = sorted(set(g["weights"]))
        if len(weights) < 2:
            continue
        base = "bf16" if "bf16" in weights else weights[0]
        a_var = sorted(set(g.loc[g["weights"] == base, "variant"]))[0]
        a = _by_c(g[g["variant"] == a_var])
        for other in [w for w in weights if w != base]:
            b_var = sorted(set(g.loc[g["weights"] == other, "variant"]))[0]
            b = _by_c(g[g["variant"] == b_var])
            shared = sorted(set(a.index) & set(b.index))
            if not shared:
                continue
            tok = {int(c): _ratio(b.loc[c, "output_tok_s"], a.loc[c, "output_tok_s"])
                   for c in shared}  # fmt: skip
            text = (f"{weights_name(other)} against {weights_name(base)} weights "
                    f"({regime('', graphs_flag(graphs)) or engine}; {b_var} / {a_var}): "
                    f"{_span(min(tok.values()), max(tok.values()), fmt_ratio)} the tok/s over "
                    f"C = {_c_list(shared)}")  # fmt: skip
            numbers: dict[str, Any] = {"base": a_var, "other": b_var, "tok_ratio": tok}
            for col, label, key in (("tpot_ms", "the TPOT", "tpot_ratio"),
                                    ("j_per_token", "the J/token", "j_ratio")):  # fmt: skip
                r = {int(c): _ratio(b.loc[c, col], a.loc[c, col]) for c in shared}
                r = {c: x for c, x in r.items() if _ok(x)}
                if r:
                    text += f", {_span(min(r.values()), max(r.values()), fmt_ratio)} {label}"
                    numbers[key] = r
            out.add(5, text + ".", **numbers)
            made += 1
    return made


def _q5_compare(out: Findings, df: pd.DataFrame) -> None:
    """Variants side by side at each concurrency they share (valid rows only)."""
    valid = df[df["valid"] & df["output_tok_s"].notna()]
    variants = sorted(valid["variant"].unique())
    if len(variants) < 2:
        return
    base = variants[0]
    for other in variants[1:]:
        a = valid[valid["variant"] == base].set_index("concurrency")
        b = valid[valid["variant"] == other].set_index("concurrency")
        shared = sorted(set(a.index) & set(b.index))
        if not shared:
            continue
        tok = {int(c): float(b.loc[c, "output_tok_s"] / a.loc[c, "output_tok_s"])
               for c in shared}  # fmt: skip
        text = (
            f"{other} vs {base}: {_span(min(tok.values()), max(tok.values()), fmt_ratio)} "
            f"the throughput over C = {', '.join(str(int(c)) for c in shared)}"
        )
        numbers: dict[str, Any] = {"base": base, "other": other, "tok_ratio": tok}
        both = [c for c in shared if _ok(a.loc[c, "j_per_token"]) and _ok(b.loc[c, "j_per_token"])]
        if both:
            j = {int(c): float(b.loc[c, "j_per_token"] / a.loc[c, "j_per_token"]) for c in both}
            text += f" at {_span(min(j.values()), max(j.values()), fmt_ratio)} the J/token"
            numbers["j_ratio"] = j
        out.add(5, text + ".", **numbers)
