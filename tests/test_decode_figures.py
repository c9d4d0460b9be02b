"""Decode power: the figure (tok/s, W per GPU, J per token vs concurrency) and report section."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from studylib import figures
from studylib.decode_figures import (
    SHORT_STEADY,
    decode_chart,
    invalid_note,
    plot_decode,
    variant_scale,
)
from test_figures import check_outputs
from test_report import GPU_HW, assert_offline
from test_report import render_tree as _render
from test_report import report_section as _section

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
    stem = tmp_path / name
    plot_decode(csv, f"{stem}.html", f"{stem}.png", f"{stem}.vl.json")
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
    spec = figures.chart_spec(decode_chart(df))
    assert all(not v["valid"] for v in _values(spec))
    assert "no valid run: every row is invalid" in json.dumps(spec)


def test_decode_chart_empty_says_no_decode_runs(tmp_path):
    spec = _save(tmp_path, None, "decode_empty")
    assert "no decode runs" in json.dumps(spec)
    header_only = pd.DataFrame(columns=make_decode().columns)
    assert "no decode runs" in json.dumps(figures.chart_spec(decode_chart(header_only)))
    assert "no decode runs" in json.dumps(figures.chart_spec(decode_chart(pd.DataFrame())))


def test_hostile_text_is_data_not_markup(tmp_path):
    df = make_decode()
    df["variant"] = df["variant"].where(df["variant"] != VARIANTS[1], EVIL)
    df.loc[0, "throttle_reasons"] = EVIL
    spec = _save(tmp_path, df, "decode_evil")  # check_outputs: no raw <script> in the HTML
    assert EVIL in variant_scale(list(df["variant"])).domain
    assert any(v["variant"] == EVIL for v in _values(spec))


def test_entry_script_reads_snakemake_inputs(tmp_path):
    import runpy

    from helpers import ROOT
    from snakemake.iocontainers import InputFiles, Log, OutputFiles, Params, Wildcards

    csv = tmp_path / "decode.csv"
    make_decode().to_csv(csv, index=False)
    stem = tmp_path / "decode"
    smk = type("Smk", (), {})()
    smk.input = InputFiles(fromdict={"decode": str(csv)})
    smk.output = OutputFiles(
        fromdict={"html": f"{stem}.html", "png": f"{stem}.png", "spec": f"{stem}.vl.json"}
    )
    smk.wildcards = Wildcards()
    smk.params = Params()
    smk.log = Log()
    smk.rule = "plot_decode"
    runpy.run_path(str(ROOT / "scripts" / "plot_decode.py"), init_globals={"snakemake": smk})
    assert len(check_outputs(tmp_path, "decode")["hconcat"]) == 3


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
    plot_decode(csv, f"{stem}.html", f"{stem}.png", f"{stem}.vl.json")
    return {"root": root, "csv": csv, "specs": [f"{stem}.vl.json"]}


def test_report_decode_section(tree):
    html = _render(tree, decode_csv=tree["csv"])
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
    assert 'href="../tables/decode.csv"' in section and 'href="../tables/decode.csv"' in _section(
        html, "sweep"
    )
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
    section = _section(_render(dict(tree, specs=[]), decode_csv=csv), "decode-power")
    assert "No power was measured on this machine (power_source none)" in section
    assert "No decode figure was produced" in section
    assert section.count("dc-invalid") == 2


def test_report_decode_mixed_sources(tree, tmp_path):
    df = make_decode()
    df.loc[df["variant"] == VARIANTS[1], "power_source"] = "none"
    csv = tmp_path / "decode_mixed.csv"
    df.to_csv(csv, index=False)
    section = _section(_render(tree, decode_csv=csv), "decode-power")
    assert f"No power was measured for\n  {VARIANTS[1]} (power_source none)" in section
    assert "on this machine" not in section


def test_report_decode_empty_table(tree, tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    section = _section(_render(tree, decode_csv=empty), "decode-power")
    assert "The decode table has no rows" in section


def test_report_without_decode_is_unchanged(tree):
    html = _render(tree)
    assert 'id="decode-power"' not in html and 'href="#decode-power"' not in html
    assert "decode.csv" not in _section(html, "sweep")
    assert 'id="chart-decode"' in _section(html, "other")
