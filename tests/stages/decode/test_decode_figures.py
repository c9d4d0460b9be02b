"""Decode power: the figure (tok/s, W per GPU, J per token vs concurrency) and report section."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from helpers import draw
from studylib.core import charts
from studylib.stages.decode.decode_figures import (
    PAIRED_PALETTE,
    decode_chart,
    decode_frontier_chart,
    decode_latency_chart,
    prepare,
    variant_scale,
)
from studylib.stages.decode.decode_judgements import SHORT_STEADY, invalid_note
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
    return [row for rows in spec.get("datasets", {}).values() for row in rows]


def _save(tmp_path, df: pd.DataFrame | None, name: str = "decode") -> dict:
    csv = tmp_path / f"{name}.csv"
    if df is None:
        csv.write_text("")
    else:
        df.to_csv(csv, index=False)
    draw("decode", {"decode": csv}, tmp_path / name)
    return check_outputs(tmp_path, name)


def _panels(spec: dict) -> list[str]:
    return [p["layer"][0]["encoding"]["y"]["field"] for p in spec["hconcat"]]


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
    assert _panels(spec) == ["output_tok_s", "avg_w_per_gpu", "j_per_token"]
    values = _values(spec)
    assert len(values) == 6
    # one colour per variant, the same scale in every panel
    scales = [p["layer"][0]["encoding"]["color"]["scale"] for p in spec["hconcat"]]
    assert all(s == scales[0] for s in scales)
    assert scales[0]["domain"] == list(VARIANTS) and len(set(scales[0]["range"])) == 2
    # log2 x axis with the measured concurrencies as ticks
    x = spec["hconcat"][0]["layer"][0]["encoding"]["x"]
    assert x["field"] == "concurrency" and x["scale"]["type"] == "log" and x["scale"]["base"] == 2
    assert x["axis"]["values"] == list(CONCURRENCY)
    # the invalid row is drawn hollow and carries the note; valid ones filled
    invalid = [v for v in values if not v["valid"]]
    assert len(invalid) == 1 and invalid[0]["validity"] == f"invalid: {SHORT_STEADY}"
    assert {v["validity"] for v in values if v["valid"]} == {"valid"}
    marks = [layer["mark"] for layer in spec["hconcat"][0]["layer"]]
    assert [m["type"] for m in marks] == ["line", "point", "point"]
    assert marks[1]["filled"] is True and marks[2]["filled"] is False
    filters = [layer["transform"][0]["filter"] for layer in spec["hconcat"][0]["layer"]]
    assert filters[0].startswith("datum.valid") and filters[2].startswith("!datum.valid")
    # % of the power limit in the tooltip
    tips = {t["field"]: t for t in spec["hconcat"][1]["layer"][1]["encoding"]["tooltip"]}
    assert tips["pct_limit"]["title"] == "% of power limit"
    assert {"validity", "avg_w_total", "j_per_token", "throttle_reasons"} <= set(tips)
    assert values[0]["pct_limit"] == pytest.approx(100 * 203 / LIMIT)
    # the W panel labels each valid point with its % of the limit and draws the limit
    w_layers = spec["hconcat"][1]["layer"]
    assert [layer["mark"]["type"] for layer in w_layers] == ["line", "point", "point", "text",
                                                             "rule"]  # fmt: skip
    assert "' %'" in w_layers[3]["transform"][1]["calculate"]
    assert "100 / datum.pct_limit" in w_layers[4]["transform"][1]["calculate"]
    assert [len(p["layer"]) for p in spec["hconcat"]] == [3, 5, 3]
    assert "6 runs of 2 variants (sglang); 5 valid" in text
    assert "hollow, faded points: invalid runs" in text
    assert "no power measured" not in text


def test_decode_chart_without_power(tmp_path):
    spec = _save(tmp_path, make_cpu(), "decode_cpu")
    text = json.dumps(spec, ensure_ascii=False)
    assert _panels(spec) == ["output_tok_s", "tpot_ms", "itl_p50_ms"]
    assert "no power measured on this machine (power_source none)" in text
    assert "avg_w_per_gpu" not in text and "j_per_token" not in text
    # strict JSON: NaN became null, never NaN
    assert "NaN" not in (tmp_path / "decode_cpu.vl.json").read_text()
    assert "not drawn (no steady window measured): sglang-tp8-graphs C=64" in text
    assert "4 valid" in text


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
    section = _section(html, "decode-power")
    assert 'href="#decode-power"' in html
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
    section = _section(_render(dict(tree, specs=[]), decode=csv), "decode-power")
    assert "No power was measured on this machine (power_source none)" in section
    assert "No decode figure was produced" in section
    assert section.count("dc-invalid") == 2


def test_report_decode_mixed_sources(tree, tmp_path):
    df = make_decode()
    df.loc[df["variant"] == VARIANTS[1], "power_source"] = "none"
    csv = tmp_path / "decode_mixed.csv"
    df.to_csv(csv, index=False)
    section = _section(_render(tree, decode=csv), "decode-power")
    assert f"No power was measured for\n  {VARIANTS[1]} (power_source none)" in section
    assert "on this machine" not in section


def test_report_decode_empty_table(tree, tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    section = _section(_render(tree, decode=empty), "decode-power")
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


def test_graphs_pairs_share_a_hue_and_dash_by_graphs(tmp_path):
    df = make_sglang()
    scale = variant_scale(list(df["variant"]), prepare(df))
    # (engine, weights) groups in order, graphs on (dark) before off (light)
    assert scale.domain == ["sglang-bf16-graphs", "sglang-bf16-eager", "sglang-fp8-graphs",
                            "sglang-fp8-eager"]  # fmt: skip
    assert scale.range == [*PAIRED_PALETTE[0], *PAIRED_PALETTE[1]]
    # A tensor-parallel twin (same weights and graphs, two GPUs) gets a hue of its own.
    tp2 = df[df["weights"] == "fp8"].assign(gpus=2)
    tp2["variant"] = tp2["variant"] + "-tp2"
    both = pd.concat([df, tp2], ignore_index=True)
    colors = dict(zip(*(lambda s: (s.domain, s.range))(
        variant_scale(list(both["variant"]), prepare(both))), strict=True))  # fmt: skip
    assert colors["sglang-fp8-graphs-tp2"] not in (colors["sglang-fp8-graphs"],
                                                   colors["sglang-bf16-graphs"])  # fmt: skip
    spec = _save(tmp_path, df, "decode_sglang")
    line = spec["hconcat"][0]["layer"][0]["encoding"]
    assert line["strokeDash"]["field"] == "graphs"
    assert line["strokeDash"]["scale"]["domain"] == ["CUDA graphs on", "CUDA graphs off"]
    text = json.dumps(spec, ensure_ascii=False)
    assert "SGLang variants serve dummy (random) weights" in text
    assert "dark, solid: CUDA graphs on" in text
    # older tables (no cuda_graphs): no dash encoding, names → palette as before
    old = charts.chart_spec(decode_chart(make_decode()))
    assert "strokeDash" not in old["hconcat"][0]["layer"][0]["encoding"]


def test_decode_latency_chart_draws_tpot_against_the_hbm_floor(tmp_path):
    df = make_sglang()
    csv = tmp_path / "decode.csv"
    df.to_csv(csv, index=False)
    draw("decode_latency", {"decode": csv}, tmp_path / "decode_latency")
    spec = check_outputs(tmp_path, "decode_latency")
    assert _panels(spec) == ["tpot_ms", "tpot_over_floor", "itl_p99_ms", "ttft_p50_ms"]
    tpot = spec["hconcat"][0]["layer"]
    assert tpot[3]["encoding"]["y"]["field"] == "hbm_floor_ms"  # the floor, dotted
    assert spec["hconcat"][1]["layer"][3]["mark"]["type"] == "rule"  # 1 = at the floor
    assert "HBM floor: bytes a decode step must read" in json.dumps(spec)
    old = charts.chart_spec(decode_latency_chart(make_decode()))
    assert _panels(old) == ["tpot_ms", "itl_p50_ms", "itl_p99_ms", "ttft_p50_ms"]
    assert "no HBM floor in this table" in json.dumps(old)


def test_decode_frontier_one_line_per_variant_labelled_by_c():
    spec = charts.chart_spec(decode_frontier_chart(make_sglang()))
    assert [p["layer"][0]["encoding"]["y"]["field"] for p in spec["hconcat"]] == [
        "j_per_token", "j_per_token_net"]  # fmt: skip
    layers = spec["hconcat"][0]["layer"]
    assert layers[0]["encoding"]["x"]["field"] == "output_tok_s"
    assert layers[0]["encoding"]["order"]["field"] == "concurrency"
    assert layers[3]["mark"]["type"] == "text" and layers[3]["encoding"]["text"]["field"] == "label"
    assert {v["label"] for v in _values(spec)} == {"C=1", "C=8", "C=64"}
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


def test_experts_chart_histograms_and_max_over_balanced(tmp_path):
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
    assert len(ratios) == 3 * 2
    got = {(r["concurrency"], r["layer"]): r["max_over_balanced"] for r in ratios}
    want = em.groupby(["concurrency", "layer"])["m"].max() / em.groupby(
        ["concurrency", "layer"])["balanced_m"].first()  # fmt: skip
    for (c, layer), x in want.items():
        assert got[(c, f"layer {layer}")] == pytest.approx(x)
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
    section = _section(html, "decode-power")
    ids = re.findall(r'id="chart-([^"]+)"', section)
    assert ids == ["decode", "decode_latency", "decode_frontier", "experts"]
    assert 'id="other"' not in html
    assert "Random weights: sglang-bf16-eager, sglang-bf16-graphs" in section
    assert "--load-format dummy" in section
    # graphs on ÷ off per weights and C: TPOT halves
    assert "CUDA graphs on against off" in section and ">0.50×<" in section
    for label in ("CUDA graphs", "HBM floor ms", "TPOT ÷ floor", "J/token net of idle",
                  "idle W/GPU", "first error"):  # fmt: skip
        assert f"<th>{label}</th>" in section
    # the recorder's cost
    assert "TPOT was 1.10× the TPOT" in " ".join(section.split())
    assert "<th>TPOT with÷without</th>" in section
    assert re.search(r'href="data:text/csv;[^"]*" download="expert_m\.csv"', section)
    # hostile text from the data escaped (first_error, variant)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in section


def test_report_decode_without_recorder_rows(tree, tmp_path):
    csv, rec_csv = tmp_path / "d.csv", tmp_path / "recorder.csv"
    make_sglang().to_csv(csv, index=False)
    rec_csv.write_text("variant,engine,concurrency,tpot_ms,tpot_ms_off,tpot_ratio\n")
    section = _section(_render(tree, decode=csv, decode_recorder=rec_csv), "decode-power")
    assert "No recorder pass ran" in section
