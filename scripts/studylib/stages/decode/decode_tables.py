"""The decode stage's tables in the table registry: a variant's summary, per-expert M,
expert-recorder cost and measured step breakdown, and the tables aggregated from them; how
the report shows the decode table and the pairs derived from it. Their columns are owned by
the stage's schema (``decode_schema.py``, ``expert_m.py``), whose writers write them."""

from __future__ import annotations

from ...core.formats import CLOCKS_SHOWN, ENERGY_GAP_SHOWN, Column, shown_as_text
from ...core.table_registry import Table, register_shown, register_tables
from .decode_schema import (
    BREAKDOWN_COLUMNS,
    CROSSCHECK_ADDED,
    CROSSCHECK_COLUMNS,
    PAIR_COLUMNS,
    RECORDER_COLUMNS,
    SHORTENED_COLUMNS,
    SUMMARY_COLUMNS,
    TP_COLUMNS,
)
from .expert_m import EXPERT_M_COLUMNS

#: Summary columns newer than the committed examples' tables (2026-12-02: the scheduler's
#: median running requests, which the delivery gate reads; the window's TPOT precision;
#: 2026-12-03: the load's shape; 2026-12-04: the scheduler's whole lines' span, its step and
#: the client's count over it, and the server's and the load's own stalls; 2026-12-05: a
#: full-length window's shortened figures).
ADDED_COLUMNS = (
    "server_tok_s_median",
    "server_running_median",
    "server_drift",
    "tpot_source",
    "client_tok_s",
    "client_tpot_ms",
    "tpot_ci_pct",
    "load",
    "server_span_s",
    "server_step_ms",
    "delivery_ratio",
    "server_gc_s",
    "load_stall_s",
    *SHORTENED_COLUMNS,
)

#: The decode table's columns after a variant's summary's (decode_aggregate.decode_table).
FLOOR_COLUMNS = ("hbm_floor_ms", "tpot_over_floor")


def _any(*columns) -> dict[str, str]:
    """Columns the stage's schema owns, not checked by kind."""
    return dict.fromkeys(columns, "any")


register_tables(
    Table("decode_summary", "a variant's decode summary", "results/decode/{variant}/summary.csv",
          _any(*SUMMARY_COLUMNS), added=ADDED_COLUMNS),
    Table("decode_table", "the decode table", "results/tables/decode.csv",
          _any(*SUMMARY_COLUMNS, *FLOOR_COLUMNS), added=ADDED_COLUMNS),
    Table("expert_m", "a variant's per-expert M", "results/decode/{variant}/expert_m.csv",
          _any(*EXPERT_M_COLUMNS)),
    Table("expert_m_table", "the per-expert M table", "results/tables/expert_m.csv",
          _any("variant", *EXPERT_M_COLUMNS)),
    Table("recorder", "a variant's expert-recorder cost", "results/decode/{variant}/recorder.csv",
          _any(*RECORDER_COLUMNS)),
    Table("recorder_table", "the decode recorder table", "results/tables/decode_recorder.csv",
          _any("variant", *RECORDER_COLUMNS)),
    Table("breakdown", "a variant's measured decode-step breakdown",
          "results/decode/{variant}/breakdown.csv", _any(*BREAKDOWN_COLUMNS)),
    Table("crosscheck", "a variant's decode cross-check",
          "results/decode/{variant}/crosscheck.csv", _any(*CROSSCHECK_COLUMNS),
          added=CROSSCHECK_ADDED),
    Table("graphs_pairs_table", "the CUDA graphs on/off pairs",
          "results/tables/decode_graphs_pairs.csv", _any(*PAIR_COLUMNS)),
    Table("tp_pairs_table", "the tensor-parallel pairs", "results/tables/decode_tp_pairs.csv",
          _any(*TP_COLUMNS)),
    Table("crosscheck_table", "the decode cross-check table",
          "results/tables/decode_crosscheck.csv", _any("variant", *CROSSCHECK_COLUMNS),
          added=CROSSCHECK_ADDED),
)  # fmt: skip

DECODE_SHOWN = {
    **shown_as_text("engine", "variant"),
    "concurrency": Column("concurrency", ".0f", tip_fmt="d"),
    "weights": Column("weights"),
    "cuda_graphs": Column("CUDA graphs"),
    "gpus": Column("GPUs", ".0f", tip_fmt="d"),
    "ep": Column("EP", ".0f"),
    "steady_s": Column("steady s", ".1f", tip="steady window (s)"),
    "valid": Column("valid"),
    "output_tok_s": Column("tok/s", ",.1f", tip="output tok/s"),
    "tpot_ms": Column("TPOT ms", ".2f", tip="TPOT (ms)"),
    "tpot_ci_pct": Column("± %", ".2f", tip="TPOT's precision: the 95 % confidence interval's "
                          "half-width of the window's token rate over one-second slices (%)"),
    "load": Column("load", tip="the load's shape: staggered (each replacement arrives and is "
                   "prefilled alone, as in a server's steady state), lockstep (C requests "
                   "replaced together every output length) or carried (one load stepped down "
                   "from the highest C, an evenly aged subset of its streams kept)"),
    "tpot_source": Column("from", tip="whose account tok/s and TPOT are: the client's, or the "
                          "engine's own log where the client's count differed from it"),
    "client_tpot_ms": Column("client TPOT ms", ".2f", tip="the client's TPOT (ms), kept as a "
                             "check where the row is the engine's account"),
    "hbm_floor_ms": Column("HBM floor ms", ".2f", tip="HBM floor of a step (ms)"),
    "tpot_over_floor": Column("TPOT ÷ floor", ".2f", tip="TPOT ÷ HBM floor"),
    "itl_p50_ms": Column("ITL p50 ms", ".2f", tip="ITL p50 (ms)"),
    "itl_p99_ms": Column("ITL p99 ms", ".2f", tip="ITL p99 (ms)"),
    "ttft_p50_ms": Column("TTFT p50 ms", ".1f", tip="TTFT p50 (ms)"),
    "avg_w_per_gpu": Column("W/GPU", ".1f", tip="avg W per GPU"),
    **{f"w_gpu_{s}": Column(f"W/GPU {s}", ".1f") for s in ("min", "median", "max")},
    "idle_w_per_gpu": Column("idle W/GPU", ".1f", tip="idle W per GPU"),
    "avg_w_total": Column("W total", ".1f", tip="avg W total"),
    "pct_limit": Column("% of limit", ".1f", tip="% of power limit"),
    "j_per_token": Column("J/token", ".4g", tip="J per output token"),
    "j_per_token_net": Column("J/token net of idle", ".4g", tip="J per token net of idle"),
    "energy_gap_pct": ENERGY_GAP_SHOWN,
    **CLOCKS_SHOWN,
    "throttle_reasons": Column("reasons", tip="clocks-event reasons"),
    "step_gb": Column("step GB", ".2f"),
    "tok_s_over_c_tpot": Column("tok/s ÷ (C/TPOT)", ".2f"),
    "decoding_share": Column("share of window decoding", ".2f"),
    "load_cpu_pct": Column("load CPU %", ".0f"),
    "server_tok_s": Column("scheduler tok/s", ",.1f",
                           tip="the tokens/s SGLang's scheduler logged over the window"),
    "delivery_ratio": Column("client ÷ scheduler", ".3f", "×",
                             tip="the tokens the client received over those the scheduler "
                                 "generated, over the same whole log lines"),
    "server_gc_s": Column("server GC s", ".2f",
                          tip="seconds of the server's long garbage collections in the window"),
    "load_stall_s": Column("load stalls s", ".2f",
                           tip="seconds the load's own event loop stalled in the window"),
    # A full-length run's (decode.full_length_s): the window its precision rule would have
    # ended, replayed on the same requests (tools/run_agreement.py --within compares them).
    "shortened_steady_s": Column("shortened s", ".1f", tip="where the study's precision "
                                 "rule would have ended this full-length window (s)"),
    "shortened_tpot_ms": Column("shortened TPOT ms", ".2f"),
    "shortened_tpot_ci_pct": Column("shortened ± %", ".2f"),
    "shortened_output_tok_s": Column("shortened tok/s", ",.1f"),
    "shortened_avg_w_per_gpu": Column("shortened W/GPU", ".1f"),
    "shortened_j_per_token": Column("shortened J/token", ".4g"),
    "first_error": Column("first error"),
    "graphs": Column(None, tip="CUDA graphs"),
    "validity": Column(None, tip="validity"),
    "requests": Column(None, "d", tip="requests"),
    "power_source": Column(None, tip="power source"),
}  # fmt: skip
# CUDA graphs on against off (decode_judgements.graphs_pairs).
GRAPHS_PAIRS_SHOWN = {
    **shown_as_text("engine", "weights"), "gpus": Column("GPUs", ".0f"),
    "concurrency": Column("C", ".0f"),
    "tpot_on_ms": Column("TPOT on ms", ".2f"), "tpot_off_ms": Column("TPOT off ms", ".2f"),
    "tpot_ratio": Column("TPOT on÷off", ".2f", "×"),
    "w_on": Column("W/GPU on", ".0f"), "w_off": Column("W/GPU off", ".0f"),
    "w_ratio": Column("W on÷off", ".2f", "×"),
    "j_on": Column("J/token on", ".3g"), "j_off": Column("J/token off", ".3g"),
    "j_ratio": Column("J/token on÷off", ".2f", "×"),
    "j_net_ratio": Column("net J/token on÷off", ".2f", "×"),
    "tok_ratio": Column("tok/s on÷off", ".2f", "×"),
}  # fmt: skip
# One GPU against tensor parallelism (decode_judgements.tp_pairs).
TP_PAIRS_SHOWN = {
    **shown_as_text("weights"), "cuda_graphs": Column("CUDA graphs"),
    "concurrency": Column("C", ".0f"), "gpus_n": Column("GPUs", ".0f"),
    "tok_s_1": Column("tok/s 1 GPU", ",.0f"), "tok_s_n": Column("tok/s N GPUs", ",.0f"),
    "tok_ratio": Column("tok/s N÷1", ".2f", "×"),
    "tpot_1_ms": Column("TPOT 1 GPU ms", ".2f"),
    "tpot_n_ms": Column("TPOT N GPUs ms", ".2f"),
    "w_1": Column("W/GPU 1 GPU", ".0f"), "w_n": Column("W/GPU N GPUs", ".0f"),
    "w_n_min": Column("min W of N", ".0f"), "w_n_max": Column("max W of N", ".0f"),
    "pct_limit_n": Column("% of limit N", ".0f"),
    "j_1": Column("J/token 1 GPU", ".3g"), "j_n": Column("J/token N GPUs", ".3g"),
    "j_ratio": Column("J/token N÷1", ".2f", "×"),
    "clock_n_mhz": Column("SM MHz N", ".0f"),
    "reasons_1": Column("limits 1 GPU"), "reasons_n": Column("limits N GPUs"),
}  # fmt: skip
# The recorder pass against the main pass.
RECORDER_SHOWN = {
    **shown_as_text("variant"), "concurrency": Column("C", ".0f"),
    "steady_s": Column("steady s", ".1f"),
    "tpot_ms": Column("TPOT with recorder ms", ".2f"),
    "tpot_ms_off": Column("TPOT without ms", ".2f"),
    "tpot_ratio": Column("TPOT with÷without", ".2f", "×"),
    "output_tok_s": Column("tok/s with", ",.1f"),
    "output_tok_s_off": Column("tok/s without", ",.1f"),
    "avg_w_per_gpu": Column("W/GPU with", ".1f"),
    "avg_w_per_gpu_off": Column("W/GPU without", ".1f"),
    "errors": Column("errors", ".0f"),
}  # fmt: skip
register_shown("decode_table", DECODE_SHOWN)
register_shown("graphs_pairs", GRAPHS_PAIRS_SHOWN)
register_shown("tp_pairs", TP_PAIRS_SHOWN)
register_shown("recorder_table", RECORDER_SHOWN)


#: The cross-check: the study's load beside SGLang's bench_serving on the same server (its
#: median ITL and the ratio to it stay in the CSV: the table keeps room for its verdicts).
CROSSCHECK_SHOWN = {
    **shown_as_text("variant"), "concurrency": Column("C", ".0f"),
    "tpot_ms": Column("TPOT ms", ".2f", tip="the study's TPOT"),
    "bench_backend": Column("bench_serving backend",
                            tip="sglang: SGLang's native /generate, token-id prompts; "
                            "sglang-oai: /v1/completions, where the study's load posts"),
    "bench_tpot_ms": Column("bench_serving TPOT ms", ".2f", tip="bench_serving's median TPOT"),
    "bench_tpot_steady_ms": Column("bench_serving steady TPOT ms", ".2f",
                                   tip="bench_serving's TPOT over a window as long as the "
                                   "study's after its admission, computed as the study's"),
    "tpot_ratio": Column("TPOT ÷ bench TPOT", ".3f", "×"),
    "tpot_ratio_steady": Column("TPOT ÷ bench steady TPOT", ".3f", "×"),
    "engine_ratio": Column("scheduler during bench ÷ during study", ".3f", "×",
                           tip="the scheduler's median log line, bench_serving's run over "
                           "the study's window"),
    "engine_ratio_steady": Column("scheduler during bench steady ÷ during study", ".3f", "×",
                                  tip="the scheduler's median log line, bench_serving's steady "
                                  "window (its steady TPOT's span) over the study's window"),
    "rounds": Column("alternated rounds", ".0f",
                     tip="rounds of the two clients alternated where one pair disagreed"),
    "tpot_ratio_rounds": Column("TPOT ÷ bench steady TPOT, medians over rounds", ".3f", "×"),
    "output_tok_s": Column("tok/s", ",.0f", tip="the study's output tok/s"),
    "bench_output_tok_s": Column("bench_serving tok/s", ",.0f"),
    "bench_prompts": Column("bench prompts", ".0f"),
    "bench_error": Column("error"),
    "agreement": Column("verdict", tip="the two clients against the noise, and the engine's "
                        "own change of speed between their runs"),
}  # fmt: skip
