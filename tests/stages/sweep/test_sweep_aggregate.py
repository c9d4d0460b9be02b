import json
import math

import numpy as np
import pandas as pd
import pytest
from studylib.instruments.timing import median_ci_pct, median_rel_stderr, summarize
from studylib.stages.sweep.sweep_aggregate import (
    add_precision,
    add_roofline,
    aggregate,
    support_matrix,
)
from studylib.stages.sweep.sweep_run import to_frame


def rows(backend, impl, statuses, error="boom"):
    return [
        {"backend": backend, "impl": impl, "op": "mm", "dtype": "bf16", "shape": "s",
         "M": m, "N": 8, "K": 8, "G": None, "status": s, "error": "" if s == "ok" else error,
         "eager_us": 1.0 if s == "ok" else None}
        for m, s in enumerate(statuses, start=1)
    ]  # fmt: skip


def test_support_verdicts_and_reasons():
    frame = to_frame(
        rows("a", "x", ["ok", "ok"])
        + rows("a", "y", ["ok", "error"])
        + rows("b", "z", ["unsupported", "unsupported"], error="no CUDA device")
        + rows("b", "w", ["error", "error", "unsupported"])
    )
    support = support_matrix(frame).set_index(["backend", "impl"])
    assert support.loc[("a", "x"), "status"] == "ok"
    assert support.loc[("a", "x"), "reason"] == ""
    assert support.loc[("a", "y"), "status"] == "partial"
    assert support.loc[("b", "z"), "status"] == "unsupported"
    assert support.loc[("b", "z"), "reason"] == "no CUDA device"
    assert support.loc[("b", "w"), "status"] == "error"
    assert support.loc[("b", "w"), ["error", "unsupported", "points"]].tolist() == [2, 1, 3]


def test_aggregate_concatenates_and_writes(tmp_path):
    paths = []
    for backend in ("a", "b"):
        path = tmp_path / f"{backend}.parquet"
        to_frame(rows(backend, "x", ["ok", "unsupported"])).to_parquet(path)
        paths.append(path)
    peaks = tmp_path / "peaks.json"
    peaks.write_text(json.dumps({"bf16_tflops": 1.0, "copy_gbps": 1.0}))
    aggregate(paths, peaks, tmp_path / "sweep.csv", tmp_path / "support.csv")
    sweep = pd.read_csv(tmp_path / "sweep.csv")
    assert list(sweep.columns[:13]) == [
        "backend", "impl", "op", "dtype", "shape", "M", "N", "K", "G", "top_k", "routing",
        "status", "error",
    ]  # fmt: skip
    assert len(sweep) == 4
    assert set(pd.read_csv(tmp_path / "support.csv")["status"]) == {"partial"}


def test_roofline_floor_and_efficiency():
    base = {"backend": "t", "impl": "x", "op": "mm", "shape": "s", "N": 1, "K": 1, "G": None,
            "status": "ok", "error": ""}  # fmt: skip
    frame = to_frame(
        [
            # 2e6 FLOPs at 1 TFLOP/s = 2 us; 1e3 bytes at 1 GB/s = 1 us: compute-bound
            {
                **base,
                "dtype": "bf16",
                "M": 1,
                "flops": 2e6,
                "bytes": 1e3,
                "eager_us": 8.0,
                "graph_us": 4.0,
            },
            # memory-bound: 4e3 bytes = 4 us; no graph time: efficiency from eager
            {**base, "dtype": "bf16", "M": 2, "flops": 2e3, "bytes": 4e3, "eager_us": 16.0},
            # no fp8 peak measured: the memory floor alone, and it says so
            {**base, "dtype": "fp8_e4m3", "M": 3, "flops": 2e9, "bytes": 1e3, "eager_us": 2.0},
            {**base, "dtype": "bf16", "M": 4, "status": "unsupported", "flops": None},
        ]  # fmt: skip
    )
    out = add_roofline(frame, {"bf16_tflops": 1.0, "fp8_tflops": None, "copy_gbps": 1.0})
    assert np.allclose(out["floor_us"][:3], [2.0, 4.0, 1.0])
    assert out["floor_basis"][:3].tolist() == [
        "compute", "memory", "memory (no compute peak measured)"
    ]  # fmt: skip
    assert np.allclose(out["efficiency"][:3], [0.5, 0.25, 0.5])
    assert np.isnan(out["efficiency"][3])


def test_the_hbm_floor_divides_by_the_gpus_that_read_the_step_at_once():
    from studylib.stages.decode.decode_aggregate import decode_table

    rows = pd.DataFrame({"variant": ["tp1", "tp2"], "concurrency": [64, 64], "gpus": [1, 2],
                         "tpot_ms": [10.0, 6.0], "step_gb": [40.0, 40.0]})  # fmt: skip
    table = decode_table([rows], {"device": "cuda", "copy_gbps": 4000.0})
    assert table["hbm_floor_ms"].tolist() == [10.0, 5.0]  # 40 GB at 4 TB/s, on one or two
    assert table["tpot_over_floor"].tolist() == [1.0, 1.2]
    # No copy bandwidth measured (a CPU run): no floor, not a made-up one.
    assert decode_table([rows], {"device": "cpu"})["hbm_floor_ms"].isna().all()


def test_each_mode_states_the_precision_its_stopping_rule_reached():
    # A point's row keeps its median, IQR and samples (timing.summarize); the sweep table
    # states the 95 % interval of each mode's median from them, by the same estimate the
    # stopping rule judged (timing.median_rel_stderr).
    rng = np.random.default_rng(7)
    samples = list(10.0 + rng.normal(0, 0.3, 400))
    row = {"backend": "a", "impl": "x", "op": "mm", "dtype": "bf16", "shape": "s", "M": 1,
           "N": 8, "K": 8, "status": "ok", **summarize(samples, "eager"),
           **summarize(samples[:40], "graph")}  # fmt: skip
    table = add_precision(to_frame([row]))
    expected = 100 * 1.96 * median_rel_stderr(samples)
    assert table["eager_ci_pct"].iloc[0] == pytest.approx(expected)
    assert 0.25 < expected < 0.45  # sigma 3 %, 400 samples: 1.96 x 1.2533 x 3 % / 20 = 0.37 %
    # Ten times fewer samples: about sqrt(10) times wider.
    assert table["graph_ci_pct"].iloc[0] / expected == pytest.approx(math.sqrt(10), rel=0.25)
    # No cold mode measured, or too few samples: no precision, not a made-up one.
    assert np.isnan(table["cold_ci_pct"].iloc[0])
    assert math.isnan(median_ci_pct(0.1, 1.0, 3)) and math.isnan(median_ci_pct(None, 1.0, 9))
