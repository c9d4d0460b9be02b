"""The report's "Fastest per size" table (sweep_report.fastest_table: tables/fastest.csv laid
out, nothing ranked) and questions 1 and 2's first-screen charts (sweep_answer_figures)."""

import pandas as pd
from studylib.stages.sweep.sweep_answer_figures import (
    PAGE_WIDTH,
    backends_chart,
    bound_chart,
)
from studylib.stages.sweep.sweep_ranking import fastest_frame, rank_sweep
from studylib.stages.sweep.sweep_report import (
    TIE_COLOR,
    fastest_rankings,
    fastest_table,
    short_names,
)
from test_sweep_answers import frame, pt


def sweep() -> pd.DataFrame:
    rows = []
    for m in (1, 16, 4096):
        rows += [pt("flashinfer", "cublaslt", m, cold=9.5, eager=400.0, floor=5.0),
                 pt("torch", "aten", m, cold=9.52, eager=33.0, floor=5.0),
                 pt("torch", "aten", m, cold=20.0, eager=40.0, shape="gate_up"),
                 pt("sgl_kernel", "cutlass", m, dtype="fp8_e4m3", cold=6.0, eager=20.0,
                    floor=3.0),
                 pt("flashinfer", "cutlass", m, dtype="fp8_e4m3", cold=8.0, eager=90.0,
                    floor=3.0)]  # fmt: skip
    return frame(*rows)


def test_the_table_is_per_mode_and_dtype_with_m_as_rows_and_short_names():
    table = fastest_table(fastest_frame(rank_sweep(sweep())))
    assert [m["mode"] for m in table["modes"]] == ["cold", "eager"]
    cold = table["modes"][0]
    assert [t["dtype"] for t in cold["tables"]] == ["BF16", "FP8"]
    bf16 = cold["tables"][0]
    assert bf16["shapes"] == ["down", "gate_up"]  # the expert shape first
    assert [r["M"] for r in bf16["rows"]] == [1, 16, 4096]
    tie = bf16["rows"][0]["cells"][0]
    assert tie["names"] == ["aten", "cublaslt"] and tie["tie"] and tie["color"] == TIE_COLOR
    assert "flashinfer·cublaslt = torch·aten" in tie["title"] or "torch·aten = " in tie["title"]
    # The legend names what the table shows (flashinfer's cutlass is never fastest here).
    fp8 = {item["short"]: item["name"] for item in cold["tables"][1]["legend"]}
    assert fp8 == {"cutlass": "sgl_kernel·cutlass"}
    eager = table["modes"][1]["tables"][0]["rows"][0]["cells"][0]
    assert eager["names"] == ["aten"] and not eager["tie"]
    assert "next flashinfer·cublaslt" in eager["title"]


def test_short_names_drop_the_backend_only_where_unique():
    assert short_names(["a·x", "b·y", "c·y"]) == {"a·x": "x", "b·y": "b·y", "c·y": "c·y"}


def test_an_older_fastest_csv_is_ranked_again(tmp_path):
    old = tmp_path / "fastest.csv"
    pd.DataFrame({"dtype": ["bf16"], "shape": ["down"], "M": [1], "basis": ["cold"],
                  "who": ["torch/aten"], "us": [9.5]}).to_csv(old, index=False)  # fmt: skip
    frame_ = fastest_rankings(old, sweep())
    assert {"tied", "mode", "runner_up", "noise"} <= set(frame_.columns)
    assert fastest_rankings(None, sweep()).equals(frame_)


def spec_of(chart) -> dict:
    return chart.to_dict()


def test_backends_chart_puts_the_backends_on_one_axis_per_dtype():
    spec = spec_of(backends_chart(sweep()))
    assert spec["facet"]["column"]["field"] == "dtype_name"
    data = pd.DataFrame(next(iter(spec["datasets"].values())))
    assert set(data["dtype_name"]) == {"BF16", "FP8"}
    assert set(data["mode"]) == {"cold", "eager"}
    # Each backend's best: flashinfer's FP8 line is its cutlass, sgl_kernel's its own.
    fp8 = data[(data["dtype_name"] == "FP8") & (data["mode"] == "cold")]
    assert set(fp8["backend"]) == {"flashinfer", "sgl_kernel"}
    width = spec["spec"]["width"]
    assert 2 * (width + 60) + 170 <= PAGE_WIDTH
    assert "usermeta" not in spec


def test_bound_chart_draws_time_over_the_floor_per_mode():
    spec = spec_of(bound_chart(sweep()))
    data = pd.DataFrame(next(iter(spec["datasets"].values())))
    bf16_cold = data[(data["dtype_name"] == "BF16") & (data["mode"] == "cold")]
    assert bf16_cold["over_floor"].round(2).tolist() == [1.9, 1.9, 1.9]
    empty = bound_chart(pd.DataFrame({"status": []}))
    assert empty.to_dict()["usermeta"]["study"]["has_data"] is False
