"""The sweep stage's tables: a backend's sweep (one row per point), the sweep table (with the
roofline columns) and the support matrix; their columns with full kinds, registered in
:mod:`studylib.core.table_registry`, and how the report shows the sweep table."""

from __future__ import annotations

from ...core.formats import KEY_SHOWN, Column, shown_as_text
from ...core.table_registry import Table, register_shown, register_tables

STATUSES = ("ok", "unsupported", "error", "mismatch")
DTYPES = ("fp32", "bf16", "fp16", "fp8_e4m3", "nvfp4")  # config/schema.yaml's dtype enum
DEVICES = ("cuda", "cpu")

# Column kinds: text, int (whole numbers, may be empty), num (any number, may be empty),
# flag (true/false, may be empty), any (not checked: free-form or another owner's column).
# A fused-MoE point adds its top-k and routing (backends/moe.py); other points leave them empty.
POINT = {"backend": "text", "impl": "text", "op": "text", "dtype": "text", "shape": "text",
         "M": "int", "N": "int", "K": "int", "G": "int", "top_k": "int",
         "routing": "any"}  # fmt: skip

SWEEP = {
    **POINT, "status": "text", "error": "any", "device": "text", "device_name": "any",
    "library_version": "any",
    "eager_us": "num", "eager_iqr_us": "num", "eager_samples": "num",
    "graph_us": "num", "graph_iqr_us": "num", "graph_samples": "num", "graph_calls": "num",
    "graph_fixed_us": "num",
    "cold_us": "num", "cold_iqr_us": "num", "cold_samples": "num", "cold_sets": "num",
    "cold_calls": "num",
    "rel_err": "num", "cos_sim": "num", "all_zero": "flag", "has_nan": "flag", "flops": "num",
    "bytes": "num", "tflops": "num", "gbps": "num", "launch_overhead_us": "num",
    "sm_clock_mhz": "num", "throttle": "any", "first_call_ms": "num", "point_s": "num",
    "prepare_s": "num", "check_s": "num", "measured_as": "any",
}  # fmt: skip
#: Columns newer than committed examples' sweeps (read without them: empty).
SWEEP_ADDED = ("prepare_s", "check_s", "measured_as")
ROOFLINE = {"compute_floor_us": "num", "memory_floor_us": "num", "floor_us": "num",
            "floor_basis": "any", "efficiency": "num"}  # fmt: skip
#: The sweep table's precision of each timing mode's median (sweep_aggregate.add_precision).
PRECISION = {"eager_ci_pct": "num", "graph_ci_pct": "num", "cold_ci_pct": "num"}
SUPPORT = {"backend": "text", "impl": "text", "op": "text", "dtype": "text", "points": "int",
           **{s: "int" for s in STATUSES}, "status": "text", "reason": "any"}  # fmt: skip

_STATUS = {"status": STATUSES, "dtype": DTYPES}
SWEEPS = Table("sweep", "a backend's sweep", "results/sweeps/{backend}.parquet", SWEEP,
               {**_STATUS, "device": DEVICES}, added=SWEEP_ADDED)  # fmt: skip
SWEEP_TABLE = Table("sweep_table", "the sweep table", "results/tables/sweep.csv",
                    {**SWEEP, **ROOFLINE, **PRECISION}, {**_STATUS, "device": DEVICES},
                    added=SWEEP_ADDED + tuple(PRECISION))  # fmt: skip
SUPPORT_TABLE = Table("support", "the support matrix", "results/tables/support.csv",
                      SUPPORT, {"dtype": DTYPES})  # fmt: skip
#: tables/fastest.csv: the per-size rankings the answers are stated from (sweep_ranking.py),
#: one row per (dtype, shape, M, timing mode): the tied fastest (" = " between them), the
#: fastest's time, the runner-up outside the tie, the margin to it and the noise it had to beat.
FASTEST = {"family": "text", "dtype": "text", "shape": "text", "M": "int", "mode": "text",
           "contenders": "int", "tied": "text", "fastest": "text", "backend": "text",
           "fastest_us": "num", "runner_up": "any", "runner_up_us": "num", "margin": "num",
           "noise": "num", "noise_from": "text", "status": "text"}  # fmt: skip
FASTEST_TABLE = Table("fastest", "the rankings per size", "results/tables/fastest.csv", FASTEST,
                      {"dtype": DTYPES, "mode": ("cold", "graph", "eager"),
                       "status": ("answered", "tie")})  # fmt: skip
#: What identifies a point across runs (compare.csv's keys; the rankings read its run-to-run
#: change by them): what it computes, not the shape's name.
POINT_KEYS = ("backend", "impl", "op", "dtype", "N", "K", "G", "M", "top_k", "routing")
#: tables/compare.csv: this run's points against a baseline's (rule compare, sweep_compare.py);
#: the answers read it for the run-to-run change of each point.
COMPARE = {"backend": "text", "impl": "text", "op": "text", "dtype": "text", "N": "int",
           "K": "int", "G": "int", "M": "int", "top_k": "int", "routing": "any",
           "shape": "text", "mode": "text", "baseline_us": "num", "current_us": "num",
           "speedup": "num", "change_pct": "num", "noise_pct": "num", "verdict": "text",
           "baseline_device": "any", "current_device": "any"}  # fmt: skip
COMPARE_TABLE = Table("compare", "the comparison with a baseline", "results/tables/compare.csv",
                      COMPARE, {"mode": ("cold", "graph", "eager")})  # fmt: skip
register_tables(SWEEPS, SWEEP_TABLE, SUPPORT_TABLE, FASTEST_TABLE, COMPARE_TABLE)

SWEEP_SHOWN = {
    **KEY_SHOWN, **{c: Column(c, "d") for c in ("M", "N", "K", "G")}, **shown_as_text("status"),
    "eager_us": Column("eager µs", "us"),
    "eager_iqr_us": Column("IQR µs", "us", tip="eager IQR (µs)", tip_fmt=".3g"),
    "eager_samples": Column("samples", "d"),
    "eager_ci_pct": Column("eager ± %", ".2f", tip="the eager median's 95 % interval, "
                           "half-width, in % (from its IQR and samples)", tip_fmt=".3g"),
    "graph_us": Column("graph µs", "us", tip="graph (µs)", tip_fmt=".4g"),
    "graph_ci_pct": Column("graph ± %", ".2f", tip="the graph median's 95 % interval, "
                           "half-width, in %", tip_fmt=".3g"),
    "cold_us": Column("cold µs", "us", tip="cold (µs)", tip_fmt=".4g"),
    "cold_ci_pct": Column("cold ± %", ".2f", tip="the cold median's 95 % interval, "
                          "half-width, in %", tip_fmt=".3g"),
    "floor_us": Column("floor µs", "us", tip="floor (µs)", tip_fmt=".4g"),
    "launch_overhead_us": Column("launch µs", "us", tip="launch overhead (µs)",
                                 tip_fmt=".3g"),
    "efficiency": Column("efficiency", ".1%"),
    "tflops": Column("TFLOP/s", ",.1f", tip_fmt=".4g"),
    "gbps": Column("GB/s", ",.1f", tip_fmt=".4g"),
    "rel_err": Column("rel. err", ".2e", tip="rel. error"),
    "cos_sim": Column("cos sim", ".6f"),
    "sm_clock_mhz": Column("SM MHz", ".4g", tip="SM clock (MHz)", tip_fmt=".0f"),
    **shown_as_text("throttle", "error"),
}  # fmt: skip
register_shown("sweep_table", SWEEP_SHOWN)
