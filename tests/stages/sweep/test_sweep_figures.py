"""Figures: latency and support charts saved as offline HTML, PNG and inline-data Vega-Lite."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from figure_helpers import draw
from studylib.core import charts
from studylib.stages.sweep import sweep_figures, sweep_table_figures

EVIL = "BackendSupportedError: <script>alert(1)</script> & sm_90 lacks FP4"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SHAPES = {"expert_up": (6144, 2048), "expert_down": (2048, 6144)}
MS = [1, 16, 64, 256, 1024, 4096]


def make_sweep(
    backend: str = "flashinfer", graph: bool = False, cold: bool = False
) -> pd.DataFrame:
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
                        **({"cold_us": us * 0.7 if ok else np.nan} if cold else {}),
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


PEAKS = {"copy_gbps": 4000.0, "fp8_tflops": 1400.0, "fp4_tflops": 2500.0, "bf16_tflops": 780.0}


def with_floor(df: pd.DataFrame) -> pd.DataFrame:
    """The sweep with work, bytes and the roofline columns, as the aggregate step adds them."""
    from studylib.stages.sweep.sweep_aggregate import add_roofline

    bits = df["dtype"].map({"nvfp4": 4.5, "fp8_e4m3": 8, "bf16": 16})
    df = df.assign(
        flops=2.0 * df["M"] * df["N"] * df["K"],
        bytes=(df["M"] * df["K"] + df["K"] * df["N"]) * bits / 8 + 2 * df["M"] * df["N"],
    )
    if "graph_us" not in df.columns:
        df["graph_us"] = np.nan
    return add_roofline(df, PEAKS)


def units(spec: dict, data: dict | None = None) -> list[dict]:
    """Every unit view of a spec (layers, concats, facets walked), with the data it reads
    (a layer's data, when its units share it, is on the layer)."""
    data = spec.get("data", data)
    out = []
    if "mark" in spec:
        out.append({**spec, "data": data})
    for key in ("layer", "hconcat", "vconcat", "concat"):
        for child in spec.get(key, []):
            out.extend(units(child, data))
    if "spec" in spec:
        out.extend(units(spec["spec"], data))
    return out


def panels(spec: dict) -> list[dict]:
    """The latency figure's panels: its layered views."""
    found = []
    for key in ("hconcat", "vconcat"):
        for child in spec.get(key, []):
            found.extend([child] if "layer" in child else panels(child))
    return found


def param(spec: dict, name: str) -> dict:
    return next(p for p in spec.get("params", []) if p["name"] == name)


def test_latency_chart_saves_offline_html_png_and_inline_spec(tmp_path):
    df = make_sweep(graph=True)
    sweep = tmp_path / "flashinfer.parquet"
    df.to_parquet(sweep)
    stem = tmp_path / "latency_flashinfer"
    draw("latency_flashinfer", {"sweep": sweep}, stem)
    spec = check_outputs(tmp_path, "latency_flashinfer")
    values = spec["datasets"]["latency_flashinfer"]
    good = df["status"].isin(["ok", "mismatch"]).sum()
    assert len(values) == 2 * good  # eager + graph, failures excluded
    assert {v["mode"] for v in values} == {"eager", "graph"}
    assert all(v["latency_us"] > 0 for v in values)
    text = json.dumps(spec, ensure_ascii=False)
    assert "NVIDIA H200" in text and "flashinfer" in text
    # a section per dtype, a panel per shape in it, titled with N×K
    assert [s["title"]["text"] for s in spec["vconcat"]] == ["fp8_e4m3", "nvfp4"]
    titles = [p["title"]["text"] for p in panels(spec)]
    assert titles == [["expert_up · N×K = 6144×2048"], ["expert_down · N×K = 2048×6144"]] * 2
    # the subtitle is one line, without the failures' reasons (the support matrix has them)
    assert len(spec["title"]["subtitle"]) == 1
    assert "BackendSupportedError" not in json.dumps(spec["title"])
    assert "usermeta" not in spec  # a figure with data carries no no-data mark


@pytest.mark.parametrize(
    ("graph", "cold", "default", "modes"),
    [
        (True, True, "cold", ["eager", "graph", "cold"]),
        (True, False, "graph", ["eager", "graph"]),
        (False, False, "eager", ["eager"]),
    ],
)
def test_latency_shows_one_timing_mode_chosen_with_a_radio(graph, cold, default, modes):
    spec = charts.chart_spec(sweep_figures.latency_chart(make_sweep(graph=graph, cold=cold)))
    timing = param(spec, sweep_figures.MODE_PARAM)
    assert timing["value"] == default
    assert timing["bind"]["input"] == "radio" and timing["bind"]["options"] == modes
    # every mark of the measured series filters on the chosen mode
    drawn = [u for u in units(spec) if u["data"]["name"] == "latency_flashinfer"]
    assert drawn and all(
        {"filter": "datum.mode == timing"} in u.get("transform", []) for u in drawn
    )
    assert {v["mode"] for v in spec["datasets"]["latency_flashinfer"]} == set(modes)


def test_latency_draws_one_roofline_floor_per_panel():
    df = with_floor(make_sweep(graph=True, cold=True))
    spec = charts.chart_spec(sweep_figures.latency_chart(df))
    floor = spec["datasets"]["floor_flashinfer"]
    good = df[df["status"].isin(["ok", "mismatch"])]
    keys = [(r["panel"], r["dtype"], r["M"]) for r in floor]
    assert len(keys) == len(set(keys)) == len(good.groupby(["shape", "dtype", "M"]))
    assert all("impl" not in r and "series" not in r for r in floor)
    # the two nvfp4 impls of a shape share its floor: the lowest floor_us of the panel
    lowest = good.groupby(["shape", "dtype", "M"])["floor_us"].min()
    for r in floor:
        assert r["floor_us"] == pytest.approx(lowest[(r["shape"], r["dtype"], r["M"])])
    for panel in panels(spec):
        floors = [u for u in units(panel) if u["data"]["name"] == "floor_flashinfer"]
        assert len(floors) == 1
        assert floors[0]["mark"]["color"] == sweep_figures.FLOOR_COLOR
        dash = floors[0]["encoding"]["strokeDash"]["scale"]
        assert dash["domain"] == [sweep_figures.FLOOR_LABEL]
    # without roofline columns there is no floor layer, and nothing breaks
    spec = charts.chart_spec(sweep_figures.latency_chart(make_sweep(graph=True)))
    assert spec["datasets"]["floor_flashinfer"] == []
    assert all(len(p["layer"]) == 3 for p in panels(spec))  # IQR bars, lines, points


def test_latency_legend_click_highlights_an_impl():
    spec = charts.chart_spec(sweep_figures.latency_chart(make_sweep(graph=True)))
    pick = param(spec, sweep_figures.PICK_PARAM)
    assert pick["select"] == {"type": "point", "fields": ["impl"]} and pick["bind"] == "legend"
    names = {u.get("name") for u in units(spec)}
    assert pick["views"] and set(pick["views"]) <= names
    drawn = [u for u in units(spec) if u["data"]["name"] == "latency_flashinfer"]
    for unit in drawn:
        opacity = unit["encoding"]["opacity"]
        assert opacity["condition"]["param"] == "pick"
        assert opacity["value"] == sweep_figures.FADED
        color = unit["encoding"]["color"]
        assert color["field"] == "impl"
        assert color["scale"]["range"] == [
            charts.impl_color("flashinfer", i) for i in color["scale"]["domain"]
        ]


def test_latency_tolerates_missing_optional_columns():
    df = make_sweep().drop(columns=["G", "eager_iqr_us", "eager_samples", "library_version"])
    spec = charts.chart_spec(sweep_figures.latency_chart(df))
    modes = {v["mode"] for v in spec["datasets"]["latency_flashinfer"]}
    assert modes == {"eager"}


def test_latency_panels_split_fused_layers_by_routing():
    """A fused-MoE layer's M counts the layer's tokens: its own panel per top_k and routing."""
    df = make_sweep(graph=True)
    fused = df[df["impl"] == "cudnn"].assign(op="fused_moe", G=256.0, top_k=8.0)
    df = pd.concat([df, fused.assign(routing="balanced"), fused.assign(routing="recorded")])
    spec = charts.chart_spec(sweep_figures.latency_chart(df))
    titles = [p["title"]["text"] for p in panels(spec)]
    head = "expert_up · N×K = 6144×2048 · G=256"
    assert [head, "fused MoE layer, top_k 8, recorded routing"] in titles
    # fp8: two dense panels; nvfp4: two dense, then a fused panel per shape and routing
    assert len(titles) == 8
    assert [len(t) for t in titles] == [1, 1, 1, 1, 2, 2, 2, 2]


def test_latency_panels_name_decode_attention_by_heads_and_context():
    """A decode attention row's M is the batch: its panel names its heads and context, and
    comes after the GEMM panels; GEMM rows of a sweep with attention rows keep theirs."""
    df = make_sweep(graph=True)
    attention = df[(df["impl"] == "cudnn") & (df["shape"] == "expert_up")].assign(
        op="decode_attention", impl="fa2", dtype="nvfp4", shape="attention", N=6144, K=640,
        heads=48, kv_heads=8, head_dim=128, context=640)  # fmt: skip
    df = pd.concat([df, attention])
    spec = charts.chart_spec(sweep_figures.latency_chart(df))
    titles = [p["title"]["text"] for p in panels(spec)]
    assert titles[-1] == ["attention · 48 q / 8 KV heads × 128",
                          "decode attention, context 640, M = batch"]  # fmt: skip
    assert ["expert_up · N×K = 6144×2048"] in titles
    assert len(titles) == 5


def test_all_unsupported_backend_latency_is_a_no_data_chart(tmp_path):
    stem = tmp_path / "latency_flashinfer"
    df = all_unsupported()
    df.to_parquet(tmp_path / "flashinfer.parquet")
    draw("latency_flashinfer", {"sweep": tmp_path / "flashinfer.parquet"}, stem)
    spec = check_outputs(tmp_path, "latency_flashinfer")
    meta = spec["usermeta"]["study"]
    assert meta["has_data"] is False
    assert meta["note"].startswith("no successful points: no CUDA device")
    assert "\n" not in meta["note"]
    assert spec["title"]["subtitle"] == [meta["note"]]
    assert _values(spec) == []
    assert not charts.figure_has_data(spec)


def test_empty_frame_renders():
    spec = charts.chart_spec(sweep_figures.latency_chart(pd.DataFrame(), backend="torch"))
    assert "no successful points" in json.dumps(spec)
    assert spec["usermeta"] == {"study": {"has_data": False, "note": spec["title"]["subtitle"][0]}}


def test_no_data_chart_marks_the_spec_for_the_report():
    spec = charts.chart_spec(charts.no_data_chart("Title", "line one\nline   two"))
    assert spec["usermeta"] == {"study": {"has_data": False, "note": "line one line two"}}
    assert spec["title"]["text"] == "Title" and spec["title"]["subtitle"] == ["line one line two"]
    assert not charts.figure_has_data(spec)
    assert charts.figure_has_data({"mark": "point"})
    # a panel inside a figure with data: no usermeta (Vega-Lite allows it at the top only)
    assert "usermeta" not in charts.chart_spec(charts.no_data_panel("T", "why"))


@pytest.mark.parametrize(
    "figure",
    [
        lambda: sweep_table_figures.efficiency_chart(all_unsupported()),
        lambda: sweep_table_figures.launch_overhead_chart(make_sweep()),  # no graph times
        lambda: sweep_table_figures.support_chart(pd.DataFrame()),
        lambda: sweep_figures.latency_chart(all_unsupported("sgl_kernel")),
    ],
)
def test_sweep_figures_without_data_are_no_data_charts(figure):
    spec = charts.chart_spec(figure())
    assert spec["usermeta"]["study"]["has_data"] is False
    assert spec["usermeta"]["study"]["note"]


def test_impl_colours_are_unique_across_the_catalogue_and_keep_the_backend_hue():
    import colorsys

    from studylib.instruments.backends import catalogue

    pairs = sorted(
        {(b, i) for b, ops in catalogue().items() for op in ops.values() for i in op["impls"]}
    )
    colours = [charts.impl_color(b, i) for b, i in pairs]
    assert len(set(colours)) == len(pairs)
    assert all(p in charts.IMPL_COLORS for p in pairs)  # none left to a spare shade

    def hue(colour: str) -> float:
        r, g, b = (int(colour[k : k + 2], 16) / 255 for k in (1, 3, 5))
        return colorsys.rgb_to_hsv(r, g, b)[0] * 360

    families = {"torch": (180, 250), "sgl_kernel": (80, 170)}
    for (backend, _), colour in zip(pairs, colours, strict=True):
        h = hue(colour)
        if backend == "flashinfer":  # reds, oranges, pinks
            assert h >= 300 or h <= 50, colour
        else:
            lo, hi = families[backend]
            assert lo <= h <= hi, (backend, colour)
    # unlisted impls get spare shades, still one colour per pair within a figure
    extra = [("torch", "new1"), ("torch", "new2"), ("flashinfer", "new"), ("other", "x")]
    scale = charts.impl_scale(pairs + extra).to_dict()
    assert len(set(scale["range"])) == len(scale["domain"]) == len(pairs) + len(extra)
    assert scale["domain"][0] == "flashinfer · auto"


def sweep_two_backends() -> pd.DataFrame:
    torch = make_sweep("torch", graph=True).assign(impl="aten", op="matmul", dtype="bf16")
    df = with_floor(pd.concat([make_sweep("flashinfer", graph=True), torch], ignore_index=True))
    df["launch_overhead_us"] = df["eager_us"] - df["graph_us"]
    measured = df["graph_us"].where(df["graph_us"].notna(), df["eager_us"])
    df["tflops"] = df["flops"] / measured / 1e6
    return df


@pytest.mark.parametrize("kind", ["efficiency", "launch_overhead"])
def test_efficiency_and_launch_overhead_colour_by_backend_impl(kind):
    build = {"efficiency": sweep_table_figures.efficiency_chart,
             "launch_overhead": sweep_table_figures.launch_overhead_chart}[kind]  # fmt: skip
    spec = charts.chart_spec(build(sweep_two_backends()))
    facets = spec["vconcat"] if "vconcat" in spec else [spec]
    assert len(facets) == (2 if kind == "efficiency" else 1)
    for facet in facets:
        enc = facet["spec"]["encoding"]
        assert enc["color"]["field"] == "pair"
        scale = enc["color"]["scale"]
        assert scale["domain"] == [
            "flashinfer · cublas", "flashinfer · cudnn", "flashinfer · cutlass", "torch · aten"
        ]  # fmt: skip
        assert scale["range"] == [charts.impl_color(*d.split(" · ")) for d in scale["domain"]]
        assert enc["detail"]["field"] == "series"
        # the selection sits in the view, or at the top when altair lifts it out of a concat
        name = enc["opacity"]["condition"]["param"]
        selection = param({"params": facet["spec"].get("params", spec.get("params"))}, name)
        assert selection["select"]["fields"] == ["pair"] and selection["bind"] == "legend"
    rows = _values(spec)
    assert {r["pair"] for r in rows} >= {"flashinfer · cudnn", "torch · aten"}


def test_support_chart(tmp_path):
    support = tmp_path / "support.csv"
    make_support().to_csv(support, index=False)
    stem = tmp_path / "support"
    draw("support", {"support": support}, stem)
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
    spec = charts.chart_spec(sweep_table_figures.support_chart(pd.DataFrame()))
    assert "no support data" in json.dumps(spec)
    assert spec["usermeta"]["study"]["has_data"] is False


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


def test_latency_reads_a_sweep_parquet_with_nullable_integer_columns(tmp_path):
    """A sweep's parquet keeps G and top_k as Int64 with <NA> for single GEMMs."""
    df = make_sweep(backend="torch")
    df["G"] = pd.array([None] * len(df), dtype="Int64")
    df["top_k"] = pd.array([None] * len(df), dtype="Int64")
    df.to_parquet(tmp_path / "torch.parquet", index=False)
    frame = pd.read_parquet(tmp_path / "torch.parquet")
    spec = charts.chart_spec(sweep_figures.latency_chart(frame, "torch"))
    assert "usermeta" not in spec  # drawn, not a no-data chart
