"""Kernel power: window classification, timeline and power-vs-util figures, report section."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from figure_helpers import draw
from studylib.core import charts
from studylib.stages.kernel_power.kernel_power_figures import (
    power_timeline_chart,
    power_verdicts_chart,
    power_vs_util_chart,
)
from studylib.stages.kernel_power.window_classes import (
    CLASS_COLUMNS,
    CLASSES,
    CLASSIFICATION_RULE,
    classify_window,
    classify_windows,
)
from test_report import GPU_HW, assert_offline
from test_report import render_tree as _render
from test_report import report_section as _section
from test_sweep_figures import PNG_MAGIC, check_outputs

EVIL = "RuntimeError: <script>alert(1)</script> & CUDA trap"
T0 = 5000.0  # host monotonic seconds of each job's first sample
LIMIT = 700.0


def _window(backend: str, mode: str, m: float, t_start: float, seconds: float, **kw) -> dict:
    label = "idle" if mode == "idle" else "steady"
    window = f"{backend}/aten/matmul/bf16/expert_up/M={int(m)}/{mode}" if m else f"{backend}/idle"
    avg_w = kw.pop("avg_w", 120.0)
    row = {
        "backend": backend,
        "impl": "aten" if mode != "idle" else "",
        "op": "matmul" if mode != "idle" else "",
        "dtype": "bf16" if mode != "idle" else "",
        "shape": "expert_up" if mode != "idle" else "",
        "M": m if m else np.nan,
        "N": 6144.0 if m else np.nan,
        "K": 2048.0 if m else np.nan,
        "G": np.nan,
        "mode": mode,
        "label": label,
        "window": window,
        "t_start": T0 + t_start,
        "t_end": T0 + t_start + seconds,
        "seconds": seconds,
        "gpu": 0,
        "gpu_name": "NVIDIA H200",
        "power_source": "nvml",
        "energy_j": avg_w * seconds,
        "energy_j_samples": avg_w * seconds * 1.01,
        "energy_gap_pct": 1.0,
        "avg_w": avg_w,
        "avg_w_samples": avg_w * 1.01,
        "power_limit_w": LIMIT,
        "pct_limit": 100 * avg_w / LIMIT,
        "sm_clock_mhz": 1980.0,
        "max_sm_clock_mhz": 1980.0,
        "mem_clock_mhz": 3201.0,
        "temp_c_max": 55.0,
        "throttle_reasons": "",
        "sm_util": np.nan,
        "sm_occupancy": np.nan,
        "tensor_util": np.nan,
        "dram_util": np.nan,
        "calls": np.nan if mode == "idle" else 100000.0,
        "us_per_call": np.nan if mode == "idle" else 1e6 * seconds / 100000,
        "status": "ok",
        "error": "",
    }
    row.update(kw)
    return row


def make_windows() -> pd.DataFrame:
    """Two backends, idle + eager + graph windows, one of each class."""
    gpm = {"sm_occupancy": 30.0}
    rows = [
        # torch: idle, launch-bound eager, compute-bound graph, memory-bound graph
        _window("torch", "idle", 0, 1, 5, avg_w=80.0, sm_util=0.0, tensor_util=0.0, dram_util=0.0),
        _window("torch", "eager", 16, 7, 5, avg_w=180.0, sm_util=22.0, tensor_util=5.0,
                dram_util=8.0, **gpm),
        _window("torch", "graph", 4096, 13, 5, avg_w=520.0, sm_util=98.0, tensor_util=62.0,
                dram_util=30.0, **gpm),
        _window("torch", "graph", 16, 19, 5, avg_w=300.0, sm_util=90.0, tensor_util=12.0,
                dram_util=71.0, **gpm),
        _window("torch", "eager", 256, 25, 5, avg_w=330.0, sm_util=80.0, tensor_util=30.0,
                dram_util=40.0, **gpm),
        # flashinfer: idle, power-capped, thermally throttled, GPM missing, an error
        _window("flashinfer", "idle", 0, 1, 5, avg_w=75.0),
        _window("flashinfer", "graph", 8192, 7, 5, avg_w=679.0, sm_clock_mhz=1500.0,
                throttle_reasons="sw_power_cap", tensor_util=88.0, sm_util=99.0, dram_util=20.0),
        _window("flashinfer", "graph", 4096, 13, 5, avg_w=400.0, sm_clock_mhz=1400.0,
                throttle_reasons="sw_thermal_slowdown,sw_power_cap", temp_c_max=91.0),
        _window("flashinfer", "eager", 16, 19, 5, avg_w=235.0),
        _window("flashinfer", "eager", 1, 25, 5, status="error", error=EVIL, avg_w=np.nan),
    ]  # fmt: skip
    return pd.DataFrame(rows)


def make_timeline(windows: pd.DataFrame, hz: float = 10.0) -> pd.DataFrame:
    """Samples every 1/hz s over each backend's windows, power = the window's average."""
    rows = []
    for backend, group in windows.groupby("backend"):
        end = float(group["t_end"].max()) + 1
        for t in np.arange(T0, end, 1 / hz):
            inside = group[(group["t_start"] <= t) & (group["t_end"] > t)]
            power = float(inside["avg_w"].iloc[0]) if not inside.empty else 70.0
            power = 70.0 if math.isnan(power) else power
            rows.append(
                {
                    "backend": backend,
                    "gpu": 0,
                    "t": t,
                    "t_rel": t - T0,
                    "power_w": power,
                    "power_avg_w": power,
                    "energy_mj": 1000 * power * (t - T0),
                    "sm_clock_mhz": 1980.0,
                    "mem_clock_mhz": 3201.0,
                    "temp_c": 50.0,
                    "power_limit_w": LIMIT,
                    "reasons": 0x4 if power > 650 else 0,
                    "reasons_names": "sw_power_cap" if power > 650 else "",
                }
            )
    return pd.DataFrame(rows)


def _values(spec: dict) -> list[dict]:
    return [row for rows in spec.get("datasets", {}).values() for row in rows]


# ---------------------------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------------------------


def test_classification_of_every_class():
    df = classify_windows(make_windows())
    got = dict(zip(df["window"], zip(df["class"], df["why"], strict=True), strict=True))
    assert got["torch/idle"] == ("idle", "idle baseline (80 W)")
    cls, why = got["torch/aten/matmul/bf16/expert_up/M=16/eager"]
    assert cls == "launch-bound" and why.startswith("SM util 22% < 50%")
    assert "tensor 5%" in why and "DRAM 8%" in why
    assert got["torch/aten/matmul/bf16/expert_up/M=4096/graph"] == (
        "compute-bound",
        "tensor 62% ≥ 50%",
    )
    cls, why = got["torch/aten/matmul/bf16/expert_up/M=16/graph"]
    assert cls == "memory-bound" and why.startswith("DRAM 71% ≥ 50%")
    cls, why = got["torch/aten/matmul/bf16/expert_up/M=256/eager"]
    assert cls == "unclassified" and "tensor 30%" in why and "SM util 80%" in why
    cls, why = got["flashinfer/aten/matmul/bf16/expert_up/M=8192/graph"]
    assert cls == "power-capped"
    assert why == "sw_power_cap; SM 1500 of 1980 MHz: 24 % below; 97% of the power limit"
    cls, why = got["flashinfer/aten/matmul/bf16/expert_up/M=4096/graph"]
    assert cls == "thermally throttled"
    assert why == ("sw_thermal_slowdown, sw_power_cap; SM 1400 of 1980 MHz: 29 % below, "
                   "max 91 °C; 57% of the power limit")  # fmt: skip
    cls, why = got["flashinfer/aten/matmul/bf16/expert_up/M=16/eager"]
    assert cls == "unclassified" and why.startswith("no GPM utilisation (nvml)")
    assert "235 W" in why and "34% of the limit" in why
    cls, why = got["flashinfer/aten/matmul/bf16/expert_up/M=1/eager"]
    assert cls == "no data" and why.startswith("status error: RuntimeError")
    assert set(df["class"]) <= set(CLASSES)
    assert len(df) == len(make_windows())  # every window keeps its row


def test_under_filled_decode_loop():
    # As measured on the H200: a graph-replayed M=16 GEMM, back to back, half the SMs busy.
    row = {"status": "ok", "power_source": "nvml", "mode": "graph", "avg_w": 352.0,
           "pct_limit": 50.4, "sm_util": 56.5, "tensor_util": 6.8, "dram_util": 0.0,
           "throttle_reasons": ""}  # fmt: skip
    cls, why = classify_window(row)
    assert cls == "under-filled"
    assert why.startswith("SM util 56% < 80% with tensor 7% and DRAM 0% < 50%")


def test_classification_without_nvml_and_edge_cases():
    assert classify_window({"label": "idle", "mode": "idle", "power_source": "none"}) == (
        "no data",
        "no NVML on this machine: no power was measured",
    )
    # any power-cap reason with the clock held down is power-capped, however far below the
    # limit the average sits (a cap that bites in bursts still holds the clock down)
    for reason in ("sw_power_cap", "hw_power_brake_slowdown"):
        cls, why = classify_window(
            {
                "mode": "graph",
                "label": "steady",
                "power_source": "nvml",
                "throttle_reasons": f"applications_clocks_setting,{reason}",
                "pct_limit": 40.0,
                "sm_clock_mhz": 1700.0,
                "max_sm_clock_mhz": 1980.0,
                "sm_util": 95.0,
                "tensor_util": 70.0,
                "dram_util": 10.0,
            }
        )
        assert (cls, why) == (
            "power-capped",
            f"{reason}; SM 1700 of 1980 MHz: 14 % below; 40% of the power limit",
        )
    # a pandas Series works as well as a dict
    row = pd.Series({"mode": "eager", "power_source": "nvml", "sm_util": 10.0})
    assert classify_window(row)[0] == "launch-bound"
    empty = classify_windows(pd.DataFrame())
    assert tuple(empty.columns) == CLASS_COLUMNS and empty.empty


def test_rule_is_ordered_plain_text():
    assert len(CLASSIFICATION_RULE) >= 6
    assert all(isinstance(line, str) and "→" in line for line in CLASSIFICATION_RULE)
    text = " ".join(CLASSIFICATION_RULE)
    assert text.index("thermally throttled") < text.index("power-capped")
    assert text.index("compute-bound") < text.index("memory-bound") < text.index("launch-bound")
    assert "a graph or cold window replays a CUDA graph and is never launch-bound" in text


GPM = {"status": "ok", "power_source": "nvml", "label": "steady", "throttle_reasons": "",
       "avg_w": 300.0, "pct_limit": 43.0}  # fmt: skip


@pytest.mark.parametrize("mode", ["eager", "graph", "cold"])
def test_dram_at_or_above_half_is_memory_bound_in_every_mode(mode):
    row = {**GPM, "mode": mode, "sm_util": 40.0, "tensor_util": 10.0, "dram_util": 50.0}
    assert classify_window(row) == ("memory-bound", "DRAM 50% ≥ 50% (tensor 10%)")


@pytest.mark.parametrize("mode", ["graph", "cold"])
def test_graph_and_cold_windows_are_never_launch_bound(mode):
    # Low SM use in a graph replay (cold: rotating weight sets in one graph) is a grid that
    # leaves SMs idle, not CPU launch cost; the same window eager is launch-bound.
    row = {**GPM, "mode": mode, "sm_util": 20.0, "tensor_util": 5.0, "dram_util": 30.0}
    cls, why = classify_window(row)
    assert cls == "under-filled" and why.endswith(f"({mode}: a CUDA graph replay, no launch gaps)")
    assert classify_window({**row, "mode": "eager"})[0] == "launch-bound"


def test_grouped_moe_windows_classify_like_any_other():
    # A grouped MoE GEMM (G = 256 experts) in each mode: the op and G do not enter the rule.
    base = {**GPM, "op": "grouped_mm", "G": 256, "sm_util": 30.0, "tensor_util": 8.0,
            "dram_util": 12.0}  # fmt: skip
    got = {mode: classify_window({**base, "mode": mode})[0] for mode in ("eager", "graph", "cold")}
    assert got == {"eager": "launch-bound", "graph": "under-filled", "cold": "under-filled"}
    fused = {**base, "op": "fused_moe", "mode": "cold", "tensor_util": 65.0}
    assert classify_window(fused)[0] == "compute-bound"
    capped = {**base, "op": "fused_moe", "mode": "cold", "throttle_reasons": "sw_power_cap",
              "sm_clock_mhz": 1600.0, "max_sm_clock_mhz": 1980.0}  # fmt: skip
    assert classify_window(capped)[0] == "power-capped"


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------


@pytest.fixture()
def tables(tmp_path):
    windows = make_windows()
    csv = tmp_path / "kernel_power.csv"
    windows.to_csv(csv, index=False)
    timeline = make_timeline(windows)
    paths = []
    for backend, group in timeline.groupby("backend"):
        path = tmp_path / f"{backend}_timeline.parquet"
        group.to_parquet(path)
        paths.append(path)
    return {"csv": csv, "timelines": paths, "windows": windows, "timeline": timeline}


def test_timeline_saves_offline_with_bands_and_limit(tmp_path, tables):
    draw("power_timeline", {"windows": tables["csv"], "timeline": tables["timelines"]},
         tmp_path / "power_timeline")  # fmt: skip
    spec = check_outputs(tmp_path, "power_timeline")
    assert len(spec["vconcat"]) == 2  # one panel per backend
    values = _values(spec)
    bands = [v for v in values if "w_start" in v]
    assert len(bands) == len(tables["windows"])  # the failed window too: it has times
    idle = next(v for v in bands if v["window"] == "torch/idle")
    assert idle["w_start"] == pytest.approx(1.0) and idle["w_end"] == pytest.approx(6.0)
    assert idle["avg_w"] == 80.0 and idle["class"] == "idle"
    assert {v["mode"] for v in bands} == {"idle", "eager", "graph"}
    samples = [v for v in values if "power_w" in v]
    assert len(samples) == len(tables["timeline"])
    assert samples[0]["t_rel"] == 0.0
    assert {v["limit_w"] for v in values if "limit_w" in v} == {LIMIT}
    assert json.dumps(spec).count('"strokeDash": [6, 3]') == 2  # a limit rule per panel
    text = json.dumps(spec, ensure_ascii=False)
    assert "torch: power during the kernel loops on NVIDIA H200" in text
    assert '"x2"' in text and "avg W" in text and "% of limit" in text and "reasons" in text


def test_timeline_thins_long_runs_and_has_a_row_per_gpu(tables):
    windows = tables["windows"]
    windows = windows[windows["backend"] == "torch"]
    windows = pd.concat([windows, windows.assign(gpu=1)], ignore_index=True)
    timeline = make_timeline(windows[windows["gpu"] == 0], hz=200.0)
    second = timeline.assign(gpu=1, power_w=timeline["power_w"] * 0.9)
    timeline = pd.concat([timeline, second], ignore_index=True)
    spec = charts.chart_spec(power_timeline_chart(timeline, windows))
    assert [p["title"] for p in spec["vconcat"]] == ["GPU 0 · NVIDIA H200", "GPU 1 · NVIDIA H200"]
    samples = [v for v in _values(spec) if "power_w" in v]
    assert len(samples) == 2 * math.ceil(6200 / 4)  # 6200 samples per GPU, every 4th drawn
    assert "GPU 1: 1 in 4 of 6200 samples drawn" in json.dumps(spec)
    # both panels draw their windows (the two GPUs' bands are equal: one shared dataset)
    assert [p["layer"][0]["mark"]["type"] for p in spec["vconcat"]] == ["rect", "rect"]
    assert len([v for v in _values(spec) if "w_start" in v]) == len(windows) // 2


def test_timeline_empty_says_no_power_samples(tmp_path):
    windows = make_windows().assign(power_source="none", avg_w=np.nan, pct_limit=np.nan, gpu=np.nan)
    csv = tmp_path / "kernel_power.csv"
    windows.to_csv(csv, index=False)
    empty = tmp_path / "torch_timeline.parquet"
    pd.DataFrame(columns=["backend", "gpu", "t", "t_rel", "power_w"]).to_parquet(empty)
    draw("power_timeline", {"windows": csv, "timeline": [empty]}, tmp_path / "power_timeline")
    spec = check_outputs(tmp_path, "power_timeline")
    # nothing to draw for any backend: one small no-data chart the report shows as a note
    note = spec["usermeta"]["study"]
    assert note["has_data"] is False
    assert note["note"].startswith("no power samples (flashinfer, torch; power source: none)")
    assert "\n" not in note["note"] and _values(spec) == []
    # and without any table at all
    spec = charts.chart_spec(power_timeline_chart(pd.DataFrame(), pd.DataFrame()))
    assert "no power samples: none" in json.dumps(spec)
    assert spec["usermeta"]["study"]["has_data"] is False


def test_timeline_backend_without_samples_is_a_panel_beside_the_others():
    """One backend sampled, one not: the figure has data (no usermeta), the other backend's
    panel says why it is empty."""
    windows = make_windows()
    sampled = windows[(windows["backend"] == "torch") & (windows["gpu"] == 0)]
    spec = charts.chart_spec(power_timeline_chart(make_timeline(sampled), windows))
    assert "usermeta" not in spec
    titles = [p["title"]["text"] for p in spec["vconcat"]]
    assert titles[0] == "flashinfer: no power samples: nvml"
    assert titles[1].startswith("torch: power during the kernel loops")


def test_power_vs_util(tmp_path, tables):
    draw("power_vs_util", {"windows": tables["csv"]}, tmp_path / "power_vs_util")
    spec = check_outputs(tmp_path, "power_vs_util")
    points = [v for v in _values(spec) if "avg_w" in v]
    # windows with power and tensor utilisation; the GPM-less and the failed ones are left out
    assert len(points) == 6
    assert {p["mode"] for p in points} == {"idle", "eager", "graph"}
    point = next(p for p in points if p["window"].endswith("M=8192/graph"))
    assert point["class"] == "power-capped" and point["pct_limit"] == pytest.approx(97.0)
    enc = spec["layer"][0]["encoding"]
    assert enc["x"]["field"] == "tensor_util" and enc["y"]["field"] == "avg_w"
    assert enc["shape"]["field"] == "mode"
    color = enc["color"]["scale"]
    assert dict(zip(color["domain"], color["range"], strict=True)) == {
        b: charts.BACKEND_COLORS[b] for b in ("flashinfer", "torch")
    }
    assert "3 windows without tensor-pipe utilisation not shown" in json.dumps(spec)


def test_power_verdicts_draws_each_groups_answer_against_the_limit(tmp_path, tables):
    draw("power_verdicts", {"windows": tables["csv"]}, tmp_path / "power_verdicts")
    spec = check_outputs(tmp_path, "power_verdicts")
    bars = [v for v in _values(spec) if "verdict" in v]
    # one bar per group, in question 3's order, coloured by the group's verdict
    assert [(b["group"], b["verdict"]) for b in bars] == [
        ("idle", "idle"),
        ("decode-sized GEMMs · M ≤ 64 · all modes", "under-use"),
        ("decode-sized GEMMs · M ≤ 64 · eager", "under-use"),
        ("decode-sized GEMMs · M ≤ 64 · graph", "undecided"),  # one window
        ("mid-sized GEMMs · M 65–4095", "undecided"),
        ("prefill-sized GEMMs · M ≥ 4096", "undecided"),  # full clock, capped and throttled
    ]
    assert {b["w_zero"] for b in bars} == {0.0}
    eager = bars[2]
    assert (eager["w_max"], eager["windows"]) == (235.0, 2)
    # a mark per window of a group (the union's windows again), shaped by its limit
    marks = [v for v in _values(spec) if "limit_why" in v]
    assert len(marks) == 2 + 3 + 2 + 1 + 1 + 3
    prefill = {m["window"]: m["limit"] for m in marks if m["group"].startswith("prefill")}
    assert sorted(prefill.values()) == ["full clock", "power-capped", "thermally throttled"]
    assert {m["limit"] for m in marks if m["group"] == "idle"} == {"idle"}
    # the power limit as a dashed rule; y sorted as the answers are
    assert {v["limit_w"] for v in _values(spec) if "limit_w" in v} == {LIMIT}
    assert spec["layer"][0]["encoding"]["y"]["sort"] == [b["group"] for b in bars]
    colors = spec["layer"][0]["encoding"]["color"]["scale"]
    assert dict(zip(colors["domain"], colors["range"], strict=True))["under-use"] == "#4c78a8"


def test_power_verdicts_without_power_says_so():
    no_power = make_windows().assign(power_source="none", avg_w=np.nan)
    spec = charts.chart_spec(power_verdicts_chart(no_power))
    assert spec["usermeta"]["study"]["has_data"] is False
    assert "no power was measured (power source: none)" in json.dumps(spec)


def test_power_vs_util_falls_back_to_sm_clock_without_gpm():
    windows = make_windows().assign(tensor_util=np.nan, sm_util=np.nan, dram_util=np.nan)
    spec = charts.chart_spec(power_vs_util_chart(windows))
    assert spec["layer"][0]["encoding"]["x"]["field"] == "sm_clock_mhz"
    assert "GPM utilisation was unavailable" in json.dumps(spec)
    no_power = windows.assign(power_source="none", avg_w=np.nan)
    spec = charts.chart_spec(power_vs_util_chart(no_power))
    assert "no power was measured (power source: none)" in json.dumps(spec)
    assert spec["usermeta"]["study"]["has_data"] is False


# ---------------------------------------------------------------------------------------------
# Report section
# ---------------------------------------------------------------------------------------------


@pytest.fixture()
def report_tree(tmp_path, tables):
    root = tmp_path / "results"
    (root / "tables").mkdir(parents=True)
    fig = root / "figures"
    (root / "hardware.json").write_text(json.dumps(GPU_HW), encoding="utf-8")
    pd.DataFrame().to_csv(root / "tables" / "sweep.csv")
    csv = root / "tables" / "kernel_power.csv"
    tables["windows"].to_csv(csv, index=False)
    specs = []
    inputs = {"power_timeline": {"windows": csv, "timeline": tables["timelines"]},
              "power_vs_util": {"windows": csv}, "power_verdicts": {"windows": csv}}  # fmt: skip
    for name in ("power_verdicts", "power_timeline", "power_vs_util"):
        draw(name, inputs[name], fig / name)
        specs.append(f"{fig / name}.vl.json")
    return {"root": root, "csv": csv, "specs": specs}


def test_report_kernel_power_section(report_tree):
    html = _render(report_tree, kernel_power=report_tree["csv"])
    assert_offline(html)
    section = _section(html, "q3")
    assert 'href="#q3"' in html and 'id="kernel-power"' in section
    # the figures sit in this section, not under "Other figures"; question 3's first, right
    # after its answers and before the windows table
    for name in ("power_verdicts", "power_timeline", "power_vs_util"):
        assert f'id="chart-{name}"' in section
    assert section.index('id="chart-power_verdicts"') < section.index('<tr class="kp-row')
    assert 'id="other"' not in html
    # the rule, verbatim (escaped), next to the table
    for line in CLASSIFICATION_RULE:
        assert line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in section
    # one table row per window, classes and reasons shown
    assert section.count('<tr class="kp-row') == len(make_windows())
    for cls in ("power-capped", "thermally throttled", "compute-bound", "memory-bound"):
        assert cls in section
    assert "launch-bound" in section and "SM 1500 of 1980 MHz: 24 % below" in section
    assert "sw_thermal_slowdown" in section
    # hostile error text escaped, never markup
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; CUDA trap" in section
    # the table as a download inside the page (a data: URI), never a link to a file beside it
    assert 'href="data:text/csv;' in section and 'download="kernel_power.csv"' in section
    assert "../tables/" not in html
    assert "has no NVML" not in section


def test_report_kernel_power_without_nvml(report_tree, tmp_path):
    windows = make_windows().assign(
        power_source="none", avg_w=np.nan, avg_w_samples=np.nan, pct_limit=np.nan
    )
    csv = tmp_path / "kernel_power_cpu.csv"
    windows.to_csv(csv, index=False)
    html = _render(dict(report_tree, specs=[]), kernel_power=csv)
    section = _section(html, "q3")
    assert "This machine has no NVML: no power was measured." in section
    assert "no data" in section
    assert "No kernel-power figures were produced" in section


def test_report_kernel_power_mixed_sources(report_tree, tmp_path):
    windows = make_windows()
    no_nvml = windows["backend"] == "flashinfer"
    windows.loc[no_nvml, "power_source"] = "none"
    csv = tmp_path / "kernel_power_mixed.csv"
    windows.to_csv(csv, index=False)
    section = _section(_render(report_tree, kernel_power=csv), "q3")
    assert "No power was measured for\n  flashinfer (no NVML in those jobs)" in section
    assert "has no NVML" not in section


def test_report_kernel_power_empty_table(report_tree, tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    html = _render(dict(report_tree, specs=[]), kernel_power=empty)
    assert "The kernel-power table has no windows" in _section(html, "q3")


def test_report_without_kernel_power_is_unchanged(report_tree):
    html = _render(report_tree)
    assert 'id="kernel-power"' not in html and 'href="#kernel-power"' not in html
    # the power figures still appear, under "Other figures"
    other = _section(html, "other")
    assert 'id="chart-power_timeline"' in other and 'id="chart-power_vs_util"' in other


def test_png_outputs_are_png(report_tree):
    for spec in report_tree["specs"]:
        png = spec.replace(".vl.json", ".png")
        with open(png, "rb") as handle:
            assert handle.read(8) == PNG_MAGIC
