"""Figures: latency and support charts saved as offline HTML, PNG and inline-data Vega-Lite."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from studylib import charts, sweep_figures

EVIL = "BackendSupportedError: <script>alert(1)</script> & sm_90 lacks FP4"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SHAPES = {"expert_up": (6144, 2048), "expert_down": (2048, 6144)}
MS = [1, 16, 64, 256, 1024, 4096]


def make_sweep(backend: str = "flashinfer", graph: bool = False) -> pd.DataFrame:
    """Realistic mixture: two impls run everywhere, one fails below M=256 with hostile text."""
    rows = []
    for shape, (n, k) in SHAPES.items():
        for impl, dtype, op, rate in [
            ("cudnn", "nvfp4", "mm_fp4", 9e14),
            ("cutlass", "nvfp4", "mm_fp4", 1.1e15),
            ("cublas", "fp8_e4m3", "bmm_fp8", 6e14),
        ]:
            for m in MS:
                ok = not (impl == "cutlass" and m < 256)
                us = 6.0 + 2 * m * n * k / rate * 1e6
                rows.append(
                    {
                        "backend": backend,
                        "impl": impl,
                        "op": op,
                        "dtype": dtype,
                        "shape": shape,
                        "M": m,
                        "N": n,
                        "K": k,
                        "G": np.nan,
                        "status": "ok" if ok else "unsupported",
                        "error": "" if ok else EVIL,
                        "device": "cuda",
                        "device_name": "NVIDIA H200",
                        "library_version": "0.5.2",
                        "eager_us": us if ok else np.nan,
                        "eager_iqr_us": us * 0.04 if ok else np.nan,
                        "eager_samples": 200 if ok else np.nan,
                        **({"graph_us": us * 0.6 if ok else np.nan} if graph else {}),
                    }
                )
    df = pd.DataFrame(rows)
    # one mismatch point: it ran, but the answer was wrong
    df.loc[df.index[2], "status"] = "mismatch"
    df.loc[df.index[2], "error"] = "cos_sim 0.42 < 0.97"
    return df


def all_unsupported(backend: str = "flashinfer") -> pd.DataFrame:
    df = make_sweep(backend)
    df["status"] = "unsupported"
    df["device"] = "cpu"
    df["device_name"] = "cpu"
    df["error"] = "no CUDA device"
    for column in ("eager_us", "eager_iqr_us", "eager_samples"):
        df[column] = np.nan
    return df


def make_support() -> pd.DataFrame:
    return pd.DataFrame(
        [
            ("torch", "aten", "matmul", "bf16", 12, 12, 0, 0, 0, "ok", ""),
            ("flashinfer", "cutlass", "mm_fp4", "nvfp4", 12, 6, 6, 0, 0, "partial", EVIL),
            ("flashinfer", "cudnn", "mm_fp4", "nvfp4", 12, 0, 0, 12, 0, "error", "boom & bust"),
            ("sgl_kernel", "cutlass", "mm_fp4", "nvfp4", 12, 0, 12, 0, 0, "unsupported", "gone"),
            ("flashinfer", "cublas", "bmm_fp8", "fp8_e4m3", 12, 11, 0, 0, 1, "mismatch", "cos"),
        ],
        columns="backend impl op dtype points ok unsupported error mismatch status reason".split(),
    )


def check_outputs(tmp_path, stem: str) -> dict:
    html = (tmp_path / f"{stem}.html").read_text(encoding="utf-8")
    assert not re.search(r"""\bsrc\s*=\s*["']?https?:""", html, re.I)
    assert not re.search(r"""<link[^>]+href\s*=\s*["']?https?:""", html, re.I)
    assert "window.vegaEmbed" in html  # the bundle is inlined
    assert "<script>alert(1)</script>" not in html  # hostile text never lands as markup
    assert (tmp_path / f"{stem}.png").read_bytes()[:8] == PNG_MAGIC
    spec = json.loads((tmp_path / f"{stem}.vl.json").read_text(encoding="utf-8"))
    assert "$schema" in spec
    # data inline: datasets carry the values, nothing points at a URL or file
    assert "url" not in json.dumps(spec.get("data", {}))
    assert not list(tmp_path.glob("*.json.part")) and not list(tmp_path.glob("altair-data*"))
    return spec


def _values(spec: dict) -> list[dict]:
    return [row for rows in spec.get("datasets", {}).values() for row in rows]


def test_latency_chart_saves_offline_html_png_and_inline_spec(tmp_path):
    df = make_sweep(graph=True)
    sweep = tmp_path / "flashinfer.parquet"
    df.to_parquet(sweep)
    stem = tmp_path / "latency_flashinfer"
    sweep_figures.plot_latency(sweep, f"{stem}.html", f"{stem}.png", f"{stem}.vl.json")
    spec = check_outputs(tmp_path, "latency_flashinfer")
    values = _values(spec)
    good = df["status"].isin(["ok", "mismatch"]).sum()
    assert len(values) == 2 * good  # eager + graph, failures excluded
    assert {v["mode"] for v in values} == {"eager", "graph"}
    assert all(v["latency_us"] > 0 for v in values)
    text = json.dumps(spec, ensure_ascii=False)
    assert "NVIDIA H200" in text and "flashinfer" in text
    assert "expert_up · N×K = 6144×2048" in text  # facet title names N×K
    assert spec["facet"]["field"] == "shape_label"
    assert '"strokeDash"' in text


def test_latency_tolerates_missing_optional_columns():
    df = make_sweep().drop(columns=["G", "eager_iqr_us", "eager_samples", "library_version"])
    spec = charts.chart_spec(sweep_figures.latency_chart(df))
    modes = {v["mode"] for v in _values(spec)}
    assert modes == {"eager"}


def test_all_unsupported_frame_still_renders_with_reasons(tmp_path):
    stem = tmp_path / "latency_flashinfer"
    df = all_unsupported()
    df.to_parquet(tmp_path / "flashinfer.parquet")
    sweep_figures.plot_latency(
        tmp_path / "flashinfer.parquet", f"{stem}.html", f"{stem}.png", f"{stem}.vl.json"
    )
    spec = check_outputs(tmp_path, "latency_flashinfer")
    subtitle = spec["title"]["subtitle"]
    assert subtitle[0].startswith("no successful points: no CUDA device")
    assert _values(spec) == []


def test_empty_frame_renders():
    spec = charts.chart_spec(sweep_figures.latency_chart(pd.DataFrame(), backend="torch"))
    assert "no successful points" in json.dumps(spec)


def test_support_chart(tmp_path):
    support = tmp_path / "support.csv"
    make_support().to_csv(support, index=False)
    stem = tmp_path / "support"
    sweep_figures.plot_support(support, f"{stem}.html", f"{stem}.png", f"{stem}.vl.json")
    spec = check_outputs(tmp_path, "support")
    values = _values(spec)
    assert len(values) == 5
    assert {v["status"] for v in values} == {"ok", "partial", "error", "unsupported", "mismatch"}
    color = spec["layer"][0]["encoding"]["color"]["scale"]
    assert dict(zip(color["domain"], color["range"], strict=True)) == charts.STATUS_COLORS
    # the hostile reason is data (escaped in the HTML), not markup
    html = (tmp_path / "support.html").read_text(encoding="utf-8")
    assert "\\u003cscript\\u003ealert(1)" in html


def test_support_chart_empty():
    spec = charts.chart_spec(sweep_figures.support_chart(pd.DataFrame()))
    assert "no support data" in json.dumps(spec)


def test_backend_colors_fixed_and_fallback():
    assert charts.backend_color("torch") == charts.BACKEND_COLORS["torch"]
    assert charts.backend_color("new_lib") == charts.backend_color("new_lib")
    assert charts.backend_color("new_lib") in charts.FALLBACK_COLORS
    scale = charts.backend_scale(["sgl_kernel", "torch"]).to_dict()
    assert scale["range"] == [charts.BACKEND_COLORS["sgl_kernel"], charts.BACKEND_COLORS["torch"]]


@pytest.mark.parametrize(
    "text", ["</script><script>alert(1)</script>", "a & b", "\u2028", "<!-- x -->"]
)
def test_json_for_script_is_inert_and_round_trips(text):
    out = charts.json_for_script({"t": text})
    assert "<" not in out and ">" not in out and "&" not in out
    assert json.loads(out) == {"t": text}


def test_json_for_script_rejects_nan():
    with pytest.raises(ValueError):
        charts.json_for_script({"x": math.nan})


def test_shape_label_and_reasons():
    assert charts.shape_label("moe", 4096, 7168, 8.0) == "moe · N×K = 4096×7168 · G=8"
    assert charts.shape_label("d", 1, 2, np.nan) == "d · N×K = 1×2"
    reasons = charts.distinct_reasons(make_sweep())
    assert reasons[0].startswith("BackendSupportedError") and reasons[0].endswith(
        "(×6)"
    )  # 2 shapes × 3 small M


def test_chart_spec_turns_every_missing_value_into_null(tmp_path):
    """A NaN that altair leaves in the data (inline values, some pandas dtypes) must not
    break the strict JSON export: it was a failed figure on the H200 image."""
    import altair as alt

    values = [{"x": 1.0, "y": float("nan"), "why": float("nan")}, {"x": 2.0, "y": 3.0, "why": "a"}]
    chart = alt.Chart(alt.Data(values=values)).mark_point().encode(x="x:Q", y="y:Q")
    spec = charts.chart_spec(chart)
    assert spec["data"]["values"][0] == {"x": 1.0, "y": None, "why": None}
    charts.save_chart(chart, tmp_path / "c.html", tmp_path / "c.png", tmp_path / "c.json")
    assert (tmp_path / "c.png").stat().st_size > 0
