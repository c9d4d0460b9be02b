"""The decode stage's tables: the columns of a variant's summary, recorder cost, measured step
breakdown and cross-check, and the facts of a variant's argv they record (CUDA graphs, expert
and tensor parallelism, layers)."""

from __future__ import annotations

import json
from pathlib import Path

from ...instruments.serving.launcher import flag_value
from ...instruments.serving.profile_traces import (
    RANK_COLUMNS,
)
from ...instruments.serving.server_log import COLUMNS as SERVER_COLUMNS

#: The summary's ``load``: the shape of the window's load. Staggered, each finished request's
#: replacement arrives alone and is prefilled alone, as in a server's steady state; lockstep,
#: C requests end and are replaced together every output_len steps. The same variant's TPOT
#: differs between the two (1.11-1.31x at C = 64-512 on the H200, docs/decode.md).
LOAD_STAGGERED, LOAD_LOCKSTEP = "staggered", "lockstep"
#: Carried (decode.carried_levels): a level after the first of one load that steps down from
#: the highest C, keeping an evenly aged subset of the streams (load_stagger.kept_clients).
LOAD_CARRIED = "carried"

#: A full-length run's window (decode.full_length_s) also states what the window the study's
#: precision rule would have ended measured, from the same requests and samples
#: (decode_run.shortened_figures): each of these summary columns as ``shortened_{column}``.
SHORTENED_FIGURES = ("steady_s", "output_tok_s", "tpot_ms", "tpot_ci_pct", "avg_w_per_gpu",
                     "j_per_token", "tpot_source")  # fmt: skip
SHORTENED_COLUMNS = [f"shortened_{column}" for column in SHORTENED_FIGURES]

SUMMARY_COLUMNS = [
    "engine", "variant", "model_kind", "weights", "routing", "cuda_graphs", "ep", "concurrency",
    "gpus", "power_source", "steady_s", "valid", "requests", "errors", "wrong_length",
    "output_tok_s", "tpot_ms", "tok_s_over_c_tpot", "decoding_share", "itl_p50_ms",
    "itl_p99_ms", "ttft_p50_ms", "avg_w_per_gpu", "w_gpu_min", "w_gpu_median", "w_gpu_max",
    "avg_w_total", "pct_limit", "idle_w_per_gpu", "j_per_token", "j_per_token_net",
    "energy_gap_pct", "sm_clock_mhz", "throttle_reasons", "sm_util", "tensor_util",
    "dram_util", "step_gb", "load_cpu_pct", "load_stall_s", *SERVER_COLUMNS, "first_error",
    "tpot_source", "client_tok_s", "client_tpot_ms", "tpot_ci_pct", "load", *SHORTENED_COLUMNS,
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
        return _size_flag(args, VLLM_TP_FLAGS)
    return _size_flag(args, EP_FLAGS["sglang"])


def cuda_graphs(engine: str, args: list) -> bool | None:
    """Whether the server replays CUDA graphs (SGLang and vLLM do unless told not to)."""
    flags = {"sglang": "--disable-cuda-graph", "vllm": "--enforce-eager"}
    if engine not in flags:
        return None
    return flags[engine] not in [str(a) for a in args]


#: SGLang's tensor-parallel size flags: one scheduler process, so one trace, per TP rank.
TP_FLAGS = ("--tp", "--tp-size", "--tensor-parallel-size")
VLLM_TP_FLAGS = ("--tensor-parallel-size", "-tp")

#: Each engine's share of a GPU's memory for its weights and KV cache, and the flags of the
#: ranks its weights are split over (tensor, then pipeline parallel).
MEMORY_FRACTION_FLAGS = {"sglang": "--mem-fraction-static", "vllm": "--gpu-memory-utilization"}
SPLIT_FLAGS = {"sglang": (TP_FLAGS, ("--pp", "--pp-size", "--pipeline-parallel-size")),
               "vllm": (VLLM_TP_FLAGS, ("--pipeline-parallel-size", "-pp"))}  # fmt: skip


def weight_ranks(engine: str, args: list) -> int:
    """The GPUs a server splits its weights over: its TP size times its PP size."""
    tp, pp = SPLIT_FLAGS[engine]
    return _size_flag(args, tp) * _size_flag(args, pp)


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


#: One row per variant and C of tables/decode_crosscheck.csv.
CROSSCHECK_COLUMNS = [
    "engine", "variant", "weights", "cuda_graphs", "concurrency", "tpot_ms", "tpot_source",
    "output_tok_s", "server_tok_s_median", "avg_w_per_gpu", "valid", "bench_backend",
    "bench_tpot_ms",
    "bench_tpot_steady_ms",
    "bench_itl_ms", "bench_output_tok_s", "bench_ttft_ms", "bench_prompts", "bench_staggered",
    "bench_completed",
    "bench_duration_s", "bench_server_tok_s_median", "bench_server_tok_s_steady", "tpot_ratio",
    "tpot_ratio_steady", "itl_ratio", "engine_ratio", "engine_ratio_steady", "tok_s_ratio",
    "rounds", "rounds_s", "tpot_rounds_ms", "bench_tpot_rounds_ms", "tpot_ratio_rounds",
    "engine_ratio_rounds", "client_ratio_rounds", "bench_error",
]  # fmt: skip
#: Cross-check columns newer than the committed examples' tables (2026-12-02, session 14:
#: bench_serving's TPOT over its steady part; whose account the study's TPOT is; session 18:
#: whether bench_serving's first requests were staggered as the study's were; session 21: the
#: scheduler's rate over bench_serving's steady window, and the alternated rounds; session 22:
#: the rounds' TPOT ratio over their engine ratio, round by round; session 37: which of
#: bench_serving's backends, so which endpoint, it ran with).
CROSSCHECK_ADDED = ("bench_tpot_steady_ms", "tpot_ratio_steady", "tpot_source", "bench_staggered",
                    "bench_server_tok_s_steady", "engine_ratio_steady", "rounds", "rounds_s",
                    "tpot_rounds_ms", "bench_tpot_rounds_ms", "tpot_ratio_rounds",
                    "engine_ratio_rounds", "client_ratio_rounds", "bench_backend")  # fmt: skip


#: tables/decode_tp_pairs.csv: a TP variant beside its one-GPU twin (decode_judgements.tp_pairs).
TP_COLUMNS = [
    "engine", "weights", "cuda_graphs", "concurrency", "variant_1", "variant_n", "gpus_n",
    "tok_s_1", "tok_s_n", "tok_ratio", "tpot_1_ms", "tpot_n_ms", "tpot_ratio", "w_1", "w_n",
    "w_n_min", "w_n_max", "w_total_ratio", "pct_limit_1", "pct_limit_n", "j_1", "j_n",
    "j_ratio", "clock_1_mhz", "clock_n_mhz", "reasons_1", "reasons_n",
]  # fmt: skip

#: tables/decode_graphs_pairs.csv: CUDA graphs on beside off (decode_judgements.graphs_pairs).
PAIR_COLUMNS = [
    "engine", "weights", "gpus", "concurrency", "variant_on", "variant_off", "tpot_on_ms",
    "tpot_off_ms", "tpot_ratio", "w_on", "w_off", "w_ratio", "j_on", "j_off", "j_ratio",
    "j_net_on", "j_net_off", "j_net_ratio", "tok_s_on", "tok_s_off", "tok_ratio",
]  # fmt: skip
