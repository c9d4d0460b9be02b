"""Decode: question 5's figure (TPOT, J/token, CUDA graphs on ÷ off, W per GPU with the
limit), the latency, frontier and per-expert views, one colour per variant in all of them, and
the report sections (questions 4 and 5)."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from figure_helpers import draw
from studylib.core import charts
from studylib.stages.decode.decode_colors import variant_color, variant_scale
from studylib.stages.decode.decode_figures import decode_chart
from studylib.stages.decode.decode_judgements import SHORT_STEADY, invalid_note
from studylib.stages.decode.decode_view_figures import decode_frontier_chart, decode_latency_chart
from studylib.stages.decode.expert_figures import experts_chart
from test_report import GPU_HW, assert_offline
from test_report import render_tree as _render
from test_report import report_section as _section
from test_sweep_figures import check_outputs

EVIL = "<script>alert(1)</script> & co"
VARIANTS = ("sglang-tp8-graphs", "sglang-tp8-nographs")
CONCURRENCY = (1, 8, 64)
LIMIT = 600.0
POWER = ("avg_w_per_gpu", "avg_w_total", "pct_limit", "j_per_token", "energy_gap_pct")
GPM = ("sm_clock_mhz", "sm_util", "tensor_util", "dram_util")


def make_decode() -> pd.DataFrame:
    """Two variants × three concurrencies on 8 GPUs; the last row's steady window is short."""
    rows = []
    for variant, speed in zip(VARIANTS, (1.0, 0.6), strict=True):
        for c in CONCURRENCY:
            tok_s = 40.0 * c * speed
            w = 200.0 + 3 * c
            rows.append(
                {
                    "engine": "sglang",
                    "variant": variant,
                    "concurrency": c,
                    "gpus": 8,
                    "power_source": "nvml",
                    "steady_s": 30.0,
                    "valid": True,
                    "requests": 8 * c,
                    "errors": 0,
                    "wrong_length": 0,
                    "output_tok_s": tok_s,
                    "tpot_ms": 25.0 / speed,
                    "itl_p50_ms": 24.0 / speed,
                    "itl_p99_ms": 40.0 / speed,
                    "ttft_p50_ms": 100.0 + c,
                    "avg_w_per_gpu": w,
                    "avg_w_total": 8 * w,
                    "pct_limit": 100 * w / LIMIT,
                    "j_per_token": 8 * w / tok_s,
                    "energy_gap_pct": 0.5,
                    "sm_clock_mhz": 1900.0,
                    "throttle_reasons": "",
                    "sm_util": 40.0,
                    "tensor_util": 5.0,
                    "dram_util": 20.0,
                }
            )
    rows[-1].update(valid=False, steady_s=8.0)
    return pd.DataFrame(rows)


def make_cpu() -> pd.DataFrame:
    """The same runs on a machine without NVML: power columns NaN; one run without a window."""
    df = make_decode().assign(power_source="none", gpus=np.nan, throttle_reasons=np.nan)
    for column in POWER + GPM:
        df[column] = np.nan
    df.loc[2, ["steady_s", "valid", "output_tok_s", "tpot_ms", "itl_p50_ms"]] = [
        0.0, False, np.nan, np.nan, np.nan,
    ]  # fmt: skip
    return df


def _values(spec: dict) -> list[dict]:
    """The decode table's rows a spec carries (not a note panel's or the ratios')."""
    return [row for rows in spec.get("datasets", {}).values() for row in rows if "valid" in row]


def _save(tmp_path, df: pd.DataFrame | None, name: str = "decode") -> dict:
    csv = tmp_path / f"{name}.csv"
    if df is None:
        csv.write_text("")
    else:
        df.to_csv(csv, index=False)
    draw("decode", {"decode": csv}, tmp_path / name)
    return check_outputs(tmp_path, name)


def _cells(spec: dict) -> list[dict]:
    """The panels of a figure of rows of panels (vconcat of hconcat) or of one row."""
    rows = spec["vconcat"] if "vconcat" in spec else [spec]
    return [cell for row in rows for cell in row.get("hconcat", [row])]


def _y(cell: dict) -> str | None:
    """A panel's measure: the y field of its first layer (None: a panel without one)."""
    first = cell["layer"][0] if "layer" in cell else cell
    return first.get("encoding", {}).get("y", {}).get("field")


def _panels(spec: dict) -> list[str | None]:
    return [_y(c) for c in _cells(spec)]


def _marks(cell: dict) -> list[str]:
    """Every mark type of a panel, nested layers included."""
    out = []
    for layer in cell.get("layer", [cell]):
        if "layer" in layer:
            out += _marks(layer)
        elif "mark" in layer:
            out.append(layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"])
    return out


# ---------------------------------------------------------------------------------------------
# Figure
# ---------------------------------------------------------------------------------------------


def test_invalid_note():
    assert invalid_note({"valid": True}) == ""
    assert invalid_note({"valid": "True", "steady_s": 30}) == ""
    assert invalid_note({"valid": False, "steady_s": 8.0}) == f"invalid: {SHORT_STEADY}"
    assert invalid_note({"valid": "false", "steady_s": 0}) == f"invalid: {SHORT_STEADY}"
    assert (
        invalid_note({"valid": False, "steady_s": 40, "errors": 2, "wrong_length": 1})
        == "invalid: 2 request errors; 1 completion of the wrong length"
    )


def test_decode_chart_with_power_saves_offline(tmp_path):
    spec = _save(tmp_path, make_decode())
    text = json.dumps(spec, ensure_ascii=False)
    # TPOT and J/token; CUDA graphs on ÷ off (no pair here: a panel saying so) and W per GPU
    assert _panels(spec) == ["tpot_ms", "j_per_token", None, "avg_w_per_gpu"]
    assert "no variant ran with CUDA graphs both on and off" in text
    values = _values(spec)
    assert len(values) == 6
    # one colour per variant, its fixed one, the same scale in every panel
    cells = [c for c in _cells(spec) if _y(c)]
    scales = [c["layer"][0]["encoding"]["color"]["scale"] for c in cells]
    assert all(s == scales[0] for s in scales)
    assert scales[0]["domain"] == list(VARIANTS)
    assert scales[0]["range"] == [variant_color(v) for v in VARIANTS]
    # log2 x axis with the measured concurrencies as ticks
    x = cells[0]["layer"][0]["encoding"]["x"]
    assert x["field"] == "concurrency" and x["scale"]["type"] == "log" and x["scale"]["base"] == 2
    assert x["axis"]["values"] == list(CONCURRENCY)
    # the invalid row is drawn hollow and carries the note; valid ones filled
    invalid = [v for v in values if not v["valid"]]
    assert len(invalid) == 1 and invalid[0]["validity"] == f"invalid: {SHORT_STEADY}"
    assert {v["validity"] for v in values if v["valid"]} == {"valid"}
    marks = [layer["mark"] for layer in cells[0]["layer"]]
    assert [m["type"] for m in marks] == ["line", "point", "point"]
    assert marks[1]["filled"] is True and marks[2]["filled"] is False
    filters = [layer["transform"][0]["filter"] for layer in cells[0]["layer"]]
    assert filters[0].startswith("datum.valid") and filters[2].startswith("!datum.valid")
    # % of the power limit in the tooltip, not as a label on each point (labels overlapped)
    watts = cells[2]
    tips = {t["field"]: t for t in watts["layer"][1]["encoding"]["tooltip"]}
    assert tips["pct_limit"]["title"] == "% of power limit"
    assert {"validity", "avg_w_total", "j_per_token", "throttle_reasons"} <= set(tips)
    assert values[0]["pct_limit"] == pytest.approx(100 * 203 / LIMIT)
    # the limit drawn once as a rule with one label; no text mark elsewhere
    assert _marks(watts) == ["line", "point", "point", "rule", "text"]
    limit = watts["layer"][3]["layer"]
    assert "100 / datum.pct_limit" in limit[0]["transform"][1]["calculate"]
    assert "power limit" in limit[1]["transform"][-1]["calculate"]
    assert all("text" not in _marks(c) for c in cells[:2])
    assert "6 runs of 2 variants (sglang); 5 valid" in text
    assert "hollow, faded points: invalid runs" in text
    assert "no power measured" not in text


def test_decode_chart_without_power(tmp_path):
    spec = _save(tmp_path, make_cpu(), "decode_cpu")
    text = json.dumps(spec, ensure_ascii=False)
    assert _panels(spec) == ["tpot_ms", "output_tok_s", None]
    assert "no power measured on this machine (power_source none)" in text
    assert "avg_w_per_gpu" not in text and "j_per_token" not in text
    # strict JSON: NaN became null, never NaN
    assert "NaN" not in (tmp_path / "decode_cpu.vl.json").read_text()
    assert "not drawn (no steady window measured): sglang-tp8-graphs C=64" in text
    assert "4 valid" in text


def test_a_variant_whose_server_did_not_start_is_named_once_in_the_subtitle():
    df = make_decode()
    variant = df["variant"].iloc[0]
    mine = df["variant"] == variant
    df.loc[mine, ["steady_s", "valid", "output_tok_s", "tpot_ms"]] = [0.0, False, np.nan, np.nan]
    df.loc[mine, "first_error"] = "the server did not start: out of GPU memory"
    text = json.dumps(charts.chart_spec(decode_chart(df)), ensure_ascii=False)
    assert f"not drawn (no steady window measured): {variant} (its server did not start)" in text
    assert f"{variant} C=" not in text


def test_decode_chart_only_invalid_rows():
    df = make_decode().assign(valid=False, steady_s=5.0)
    spec = charts.chart_spec(decode_chart(df))
    assert all(not v["valid"] for v in _values(spec))
    assert "no valid run: every row is invalid" in json.dumps(spec)


def test_decode_chart_empty_says_no_decode_runs(tmp_path):
    spec = _save(tmp_path, None, "decode_empty")
    assert "no decode runs" in json.dumps(spec)
    header_only = pd.DataFrame(columns=make_decode().columns)
    assert "no decode runs" in json.dumps(charts.chart_spec(decode_chart(header_only)))
    assert "no decode runs" in json.dumps(charts.chart_spec(decode_chart(pd.DataFrame())))


def test_hostile_text_is_data_not_markup(tmp_path):
    df = make_decode()
    df["variant"] = df["variant"].where(df["variant"] != VARIANTS[1], EVIL)
    df.loc[0, "throttle_reasons"] = EVIL
    spec = _save(tmp_path, df, "decode_evil")  # check_outputs: no raw <script> in the HTML
    assert EVIL in variant_scale(list(df["variant"])).domain
    assert any(v["variant"] == EVIL for v in _values(spec))


# ---------------------------------------------------------------------------------------------
# Report section
# ---------------------------------------------------------------------------------------------


@pytest.fixture()
def tree(tmp_path):
    root = tmp_path / "results"
    (root / "tables").mkdir(parents=True)
    (root / "hardware.json").write_text(json.dumps(GPU_HW), encoding="utf-8")
    pd.DataFrame().to_csv(root / "tables" / "sweep.csv")
    df = make_decode()
    df.loc[0, "variant"] = EVIL  # hostile text reaches the table and the chart
    csv = root / "tables" / "decode.csv"
    df.to_csv(csv, index=False)
    stem = root / "figures" / "decode"
    draw("decode", {"decode": csv}, stem)
    return {"root": root, "csv": csv, "specs": [f"{stem}.vl.json"]}


def test_report_decode_section(tree):
    html = _render(tree, decode=tree["csv"])
    assert_offline(html)
    section = _section(html, "q5")
    assert 'href="#q5"' in html
    assert 'id="chart-decode"' in section and 'id="other"' not in html
    assert html.count('data-chart="chart-decode"') == 1
    assert section.count('<tr class="dc-row') == 6
    assert section.count('<tr class="dc-row dc-invalid"') == 1
    assert f'title="invalid: {SHORT_STEADY}"' in section
    assert f'<span class="status status-error">invalid</span> {SHORT_STEADY}' in section
    for label in ("tok/s", "TPOT ms", "ITL p99 ms", "W/GPU", "% of limit", "J/token"):
        assert f"<th>{label}</th>" in section
    assert "counter vs samples gap %" in section and "DRAM util %" in section
    assert ">33.8<" in section  # % of the limit of C=1: 203 W of 600 W
    # the table as a download inside the page (a data: URI), never a link to a file beside it
    assert re.search(r'href="data:text/csv;[^"]*" download="decode.csv"', section)
    assert "../tables/" not in html
    assert "1 of 6 runs are invalid" in section
    assert "No power was measured" not in section
    # hostile text escaped in the table, and harmless in the embedded spec
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in section
    # ordered by variant then concurrency (numerically: 1, 8, 64)
    pattern = r'sglang-tp8-nographs</td>\s*<td class="num" data-v="[^"]+">(\d+)'
    assert re.findall(pattern, section) == ["1", "8", "64"]


def test_report_decode_without_power(tree, tmp_path):
    csv = tmp_path / "decode_cpu.csv"
    make_cpu().to_csv(csv, index=False)
    section = _section(_render(dict(tree, specs=[]), decode=csv), "q5")
    assert "No power was measured on this machine (power_source none)" in section
    assert "No decode figure was produced" in section
    assert section.count("dc-invalid") == 2


def test_report_decode_mixed_sources(tree, tmp_path):
    df = make_decode()
    df.loc[df["variant"] == VARIANTS[1], "power_source"] = "none"
    csv = tmp_path / "decode_mixed.csv"
    df.to_csv(csv, index=False)
    section = _section(_render(tree, decode=csv), "q5")
    assert f"No power was measured for\n  {VARIANTS[1]} (power_source none)" in section
    assert "on this machine" not in section


def test_report_decode_empty_table(tree, tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    section = _section(_render(tree, decode=empty), "q5")
    assert "The decode table has no rows" in section


def test_report_without_decode_is_unchanged(tree):
    html = _render(tree)
    assert 'id="decode-power"' not in html and 'href="#decode-power"' not in html
    assert "decode.csv" not in _section(html, "sweep")
    assert 'id="chart-decode"' in _section(html, "other")


# ---------------------------------------------------------------------------------------------
# SGLang variants: CUDA graphs on / off per weights, HBM floor, frontier, experts
# ---------------------------------------------------------------------------------------------

SGLANG = {"sglang-bf16-graphs": ("bf16", True), "sglang-bf16-eager": ("bf16", False),
          "sglang-fp8-graphs": ("fp8", True), "sglang-fp8-eager": ("fp8", False)}  # fmt: skip


def make_sglang() -> pd.DataFrame:
    """make_decode's rows as four SGLang variants on one GPU with the newer columns."""
    frames = []
    for variant, (weights, graphs) in SGLANG.items():
        df = make_decode().iloc[:3].copy()
        df["variant"], df["weights"], df["cuda_graphs"], df["gpus"] = variant, weights, graphs, 1
        df["tpot_ms"] = df["tpot_ms"] * (0.5 if graphs else 1.0)
        df["avg_w_total"] = df["avg_w_per_gpu"]
        df["j_per_token"] = df["avg_w_per_gpu"] / df["output_tok_s"]
        df["idle_w_per_gpu"] = 80.0
        df["j_per_token_net"] = (df["avg_w_per_gpu"] - 80.0) / df["output_tok_s"]
        df["step_gb"] = [3.0, 20.0, 70.0]
        df["hbm_floor_ms"] = df["step_gb"] / 4.0
        df["tpot_over_floor"] = df["tpot_ms"] / df["hbm_floor_ms"]
        df["first_error"] = ""
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    out.loc[len(out) - 1, ["valid", "steady_s", "errors", "first_error"]] = [False, 3.0, 1, EVIL]
    return out


def make_expert_m() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for c in (1, 16, 64):
        for layer in range(2):
            counts = rng.multinomial(c * 8 * 50, np.ones(32) / 32)
            for e, t in enumerate(counts):
                rows.append({"variant": "sglang-bf16-graphs", "concurrency": c, "layer": layer,
                             "expert": e, "tokens": int(t), "share": t / counts.sum(),
                             "m": c * 8 * t / counts.sum(), "balanced_m": c * 8 / 32})  # fmt: skip
    return pd.DataFrame(rows)


def test_one_colour_per_variant_in_every_decode_chart(tmp_path):
    """The same variant has the same colour in every decode chart spec (question 5's figure,
    the latency and frontier views, the per-expert M and the step model), whatever else each
    chart holds; a graphs-on/off pair is one hue, on dark and solid, off light and dashed."""
    from studylib.stages.step_model.step_model_figure import step_chart

    df = make_sglang()
    em = make_expert_m()
    step = pd.DataFrame([{"variant": v, "weights": w, "cuda_graphs": g, "concurrency": c,
                          "routing": "balanced", "component": "moe", "predicted_us": 900.0,
                          "measured_us": 800.0, "predicted_step_us": 900.0, "tpot_us": 1000.0,
                          "predicted_j_per_token": 0.5, "j_per_token": 0.4,
                          "measured_basis": "profile"}
                         for v, (w, g) in SGLANG.items() if w == "fp8"
                         for c in (1, 8)])  # fmt: skip
    specs = {
        "decode": charts.chart_spec(decode_chart(df)),
        "latency": charts.chart_spec(decode_latency_chart(df)),
        "frontier": charts.chart_spec(decode_frontier_chart(df)),
        "experts": charts.chart_spec(experts_chart(em)),
        "step": charts.chart_spec(step_chart(step)),
    }
    seen: dict[str, set] = {}

    def scales(node) -> int:
        """Record every variant colour scale under ``node``; how many there were."""
        found = 0
        if isinstance(node, dict):
            color = node.get("color")
            if isinstance(color, dict) and color.get("field") == "variant" and "scale" in color:
                for v, c in zip(color["scale"]["domain"], color["scale"]["range"], strict=True):
                    seen.setdefault(v, set()).add(c)
                found += 1
            found += sum(scales(value) for value in node.values())
        elif isinstance(node, list):
            found += sum(scales(value) for value in node)
        return found

    for name, spec in specs.items():
        assert scales(spec), f"{name}: no variant colour scale"
    assert {v: c for v, c in seen.items()} == {v: {variant_color(v)} for v in seen}
    assert set(seen) == set(SGLANG)
    assert len({variant_color(v) for v in SGLANG}) == 4
    # a pair shares a hue: on dark, off light (dashed in the figures)
    assert variant_color("sglang-bf16-graphs") == "#1f5fa8"
    assert variant_color("sglang-bf16-eager") == "#8fbbe6"
    line = _cells(specs["decode"])[0]["layer"][0]["encoding"]
    assert line["strokeDash"]["field"] == "graphs"
    assert line["strokeDash"]["scale"]["domain"] == ["CUDA graphs on", "CUDA graphs off"]
    # a tensor-parallel twin gets a hue of its own, never its one-GPU twin's
    assert variant_color("sglang-fp8-graphs-tp2") not in (
        variant_color("sglang-fp8-graphs"), variant_color("sglang-bf16-graphs"))  # fmt: skip
    names = [
        "sglang-fp8-graphs",
        "sglang-fp8-graphs-tp2",
        "sglang-fp8-graphs-ep2",
        "sglang-fp8-graphs-tp2-seed-nccl",
    ]  # the h200-x2 config's FP8 variants
    assert len({variant_color(n) for n in names}) == len(names)


def test_decode_figure_draws_graphs_on_over_off_per_pair(tmp_path):
    spec = _save(tmp_path, make_sglang(), "decode_sglang")
    assert _panels(spec) == ["tpot_ms", "j_per_token", "ratio", "avg_w_per_gpu"]
    ratio = _cells(spec)[2]
    assert _marks(ratio) == ["line", "line", "point", "rule"]
    rows = [r for rows in spec["datasets"].values() for r in rows if "ratio" in r]
    # TPOT halves with graphs in make_sglang; J/token per pair and C beside it
    assert {(r["variant"], r["measure"]) for r in rows} == {
        (v, m) for v in ("sglang-bf16-graphs", "sglang-fp8-graphs") for m in ("TPOT", "J/token")
    }
    assert {r["ratio"] for r in rows if r["measure"] == "TPOT"} == {0.5}
    assert {r["off"] for r in rows} == {"sglang-bf16-eager", "sglang-fp8-eager"}
    text = json.dumps(spec, ensure_ascii=False)
    assert "SGLang variants serve dummy (random) weights" in text
    assert "solid: CUDA graphs on, dashed: off" in text
    # older tables (no cuda_graphs): no dash encoding
    old = charts.chart_spec(decode_chart(make_decode()))
    assert "strokeDash" not in _cells(old)[0]["layer"][0]["encoding"]


def test_decode_latency_chart_draws_tpot_against_the_hbm_floor(tmp_path):
    df = make_sglang()
    csv = tmp_path / "decode.csv"
    df.to_csv(csv, index=False)
    draw("decode_latency", {"decode": csv}, tmp_path / "decode_latency")
    spec = check_outputs(tmp_path, "decode_latency")
    assert _panels(spec) == ["tpot_ms", "tpot_over_floor", "itl_p99_ms", "ttft_p50_ms"]
    cells = _cells(spec)
    assert cells[0]["layer"][3]["encoding"]["y"]["field"] == "hbm_floor_ms"  # the floor, dotted
    assert cells[1]["layer"][3]["mark"]["type"] == "rule"  # 1 = at the floor
    assert "HBM floor: bytes a decode step must read" in json.dumps(spec)
    old = charts.chart_spec(decode_latency_chart(make_decode()))
    assert _panels(old) == ["tpot_ms", "itl_p50_ms", "itl_p99_ms", "ttft_p50_ms"]
    assert "no HBM floor in this table" in json.dumps(old)


def test_decode_frontier_one_line_per_variant_c_by_size_not_labels():
    spec = charts.chart_spec(decode_frontier_chart(make_sglang()))
    assert _panels(spec) == ["j_per_token", "j_per_token_net"]
    layers = spec["hconcat"][0]["layer"]
    assert layers[0]["encoding"]["x"]["field"] == "output_tok_s"
    assert layers[0]["encoding"]["order"]["field"] == "concurrency"
    # C is the points' size (and in the tooltip), never a text label that could overlap
    assert layers[1]["encoding"]["size"]["field"] == "concurrency"
    ran = sorted(int(c) for c in make_sglang()["concurrency"].unique())
    assert layers[1]["encoding"]["size"]["legend"]["values"] == ran  # the Cs run, no other
    assert all("text" not in _marks(c) for c in _cells(spec))
    no_power = charts.chart_spec(decode_frontier_chart(make_cpu()))
    assert "no J/token to draw" in json.dumps(no_power)
    assert "no decode runs" in json.dumps(charts.chart_spec(decode_frontier_chart(None)))


def test_decode_figures_without_data_are_no_data_charts():
    """Nothing to draw: the spec carries usermeta study.has_data false and a one-line note,
    which the report shows instead of an empty chart; figures with data carry none."""
    empty = [
        decode_frontier_chart(make_cpu()),  # no power measured
        decode_frontier_chart(None),
        decode_chart(None),
        decode_latency_chart(pd.DataFrame()),
        experts_chart(None),
    ]
    for chart in empty:
        meta = charts.chart_spec(chart)["usermeta"]["study"]
        assert meta["has_data"] is False and meta["note"] and "\n" not in meta["note"]
    assert "usermeta" not in charts.chart_spec(decode_chart(make_cpu()))  # latency panels


def test_experts_chart_histograms_and_busiest_against_uniform_routing(tmp_path):
    from studylib.stages.decode.expert_answers import uniform_noise

    em = make_expert_m()
    csv = tmp_path / "expert_m.csv"
    em.to_csv(csv, index=False)
    draw("experts", {"expert_m": csv}, tmp_path / "experts")
    spec = check_outputs(tmp_path, "experts")
    hist, ratio = spec["vconcat"]
    assert hist["facet"]["field"] == "panel" and hist["columns"] == 3
    assert hist["spec"]["layer"][1]["mark"]["type"] == "rule"  # the balanced M
    rows = [r for rows in spec["datasets"].values() for r in rows]
    bars = [r for r in rows if "bin_lo" in r]
    # every (layer, expert) of every C counted once
    assert sum(r["experts"] for r in bars) == len(em)
    ratios = [r for r in rows if "max_over_balanced" in r]
    assert len(ratios) == 3  # one per variant and C: the busiest over every layer
    for r in ratios:
        g = em[em["concurrency"] == r["concurrency"]]
        assert r["max_over_balanced"] == pytest.approx(g["m"].max() / g["balanced_m"].iloc[0])
        # the grey line is question 4's noise: what uniform routing gives by chance
        assert r["uniform_max"] == pytest.approx(1 + uniform_noise(g, r["concurrency"])[0])
        assert len(r["per_layer"].split(", ")) == 2
    assert "random" in json.dumps(spec)
    empty = charts.chart_spec(experts_chart(pd.DataFrame(columns=list(em.columns))))
    assert "no expert-distribution record" in json.dumps(empty)


def test_report_decode_section_with_sglang_pairs_recorder_and_experts(tree, tmp_path):
    root = tree["root"]
    csv, em_csv, rec_csv = (tmp_path / n for n in ("d.csv", "expert_m.csv", "recorder.csv"))
    make_sglang().to_csv(csv, index=False)
    make_expert_m().to_csv(em_csv, index=False)
    pd.DataFrame({"engine": "sglang", "variant": "sglang-bf16-graphs", "concurrency": [1, 8],
                  "steady_s": 10.0, "tpot_ms": [5.5, 6.6], "tpot_ms_off": [5.0, 6.0],
                  "tpot_ratio": [1.1, 1.1], "output_tok_s": 1.0, "output_tok_s_off": 1.1,
                  "avg_w_per_gpu": 200.0, "avg_w_per_gpu_off": 210.0,
                  "errors": 0}).to_csv(rec_csv, index=False)  # fmt: skip
    specs = []
    for kind in ("decode", "decode_latency", "decode_frontier", "experts"):
        stem = root / "figures" / kind
        draw(kind, {"expert_m": em_csv} if kind == "experts" else {"decode": csv}, stem)
        specs.append(f"{stem}.vl.json")
    html = _render(dict(tree, specs=specs), decode=csv, expert_m=em_csv,
                   decode_recorder=rec_csv)  # fmt: skip
    assert_offline(html)
    section = _section(html, "q5")
    assert re.findall(r'id="chart-([^"]+)"', section) == ["decode", "decode_latency",
                                                          "decode_frontier"]  # fmt: skip
    experts = _section(html, "q4")
    assert re.findall(r'id="chart-([^"]+)"', experts) == ["experts"]
    assert 'id="other"' not in html
    assert "Random weights: sglang-bf16-eager, sglang-bf16-graphs" in section
    assert "--load-format dummy" in section
    # graphs on ÷ off per weights and C: TPOT halves
    assert "CUDA graphs on against off" in section and ">0.50×<" in section
    for label in ("CUDA graphs", "HBM floor ms", "TPOT ÷ floor", "J/token net of idle",
                  "idle W/GPU", "first error"):  # fmt: skip
        assert f"<th>{label}</th>" in section
    # every wide table scrolls inside its own box
    assert section.count('<div class="scroll">') >= 2
    # the recorder's cost (question 4's section)
    assert "TPOT was 1.10× the TPOT" in " ".join(experts.split())
    assert "<th>TPOT with÷without</th>" in experts
    assert re.search(r'href="data:text/csv;[^"]*" download="expert_m\.csv"', section)
    # hostile text from the data escaped (first_error, variant)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in section


def test_report_decode_without_recorder_rows(tree, tmp_path):
    csv, rec_csv = tmp_path / "d.csv", tmp_path / "recorder.csv"
    make_sglang().to_csv(csv, index=False)
    rec_csv.write_text("variant,engine,concurrency,tpot_ms,tpot_ms_off,tpot_ratio\n")
    section = _section(_render(tree, decode=csv, decode_recorder=rec_csv), "q4")
    assert "No recorder pass ran" in section
