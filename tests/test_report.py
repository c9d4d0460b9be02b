"""Report: one offline HTML page, escaped, with provenance, charts and tables."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from studylib import charts, sweep_figures
from studylib.report import fmt_cell, render_report
from test_figures import EVIL, all_unsupported, make_support, make_sweep

TEMPLATES = Path(__file__).resolve().parents[1] / "report" / "templates"
BUNDLE_MARK = "window.vegaEmbed="

GPU_HW = {
    "device": "cuda",
    "host": {
        "hostname": "gpu-box-17",
        "cpu_model": "AMD EPYC 9654",
        "cpu_count": 192,
        "memory_gib": 1511.2,
        "os": "Linux-6.8",
        "python": "3.11.9",
    },
    "gpus": [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "compute_capability": "9.0",
            "sm_count": 132,
            "memory_total_mib": 143771,
            "l2_cache_mib": 60,
            "power_limit_w": 700,
            "max_sm_clock_mhz": 1980,
            "max_mem_clock_mhz": 3201,
        }
    ],
    "driver_version": "570.86.15",
    "cuda_version": "12.8",
    "packages": {"torch": "2.8.0", "flashinfer-python": "0.5.2", "sglang": None},
    "nvml": {"available": True, "error": None},
    "git_commit": "0123456789abcdef",
    "git_dirty": True,
    "config_hash": "cafe1234",
    "collected_at": "2025-11-29T19:11:00+00:00",
}

CPU_HW = {
    "device": "cpu",
    "host": {"hostname": "laptop", "cpu_model": "Intel <i7> & co"},
    "gpus": [],
    "driver_version": None,
    "cuda_version": None,
    "packages": {"torch": "2.8.0+cpu"},
    "nvml": {"available": False, "error": "NVML Shared Library Not Found"},
    "git_commit": None,
    "git_dirty": None,
    "collected_at": "2025-11-29T19:11:00+00:00",
}


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> dict:
    """A results/ tree with tables, hardware.json and three figures' specs."""
    root = tmp_path_factory.mktemp("results")
    tables, fig_dir = root / "tables", root / "figures"
    tables.mkdir()
    sweep = pd.concat([make_sweep("flashinfer"), all_unsupported("sgl_kernel")])
    sweep.to_csv(tables / "sweep.csv", index=False)
    make_support().to_csv(tables / "support.csv", index=False)
    (root / "hardware.json").write_text(json.dumps(GPU_HW), encoding="utf-8")
    specs = []
    for backend in ("flashinfer", "sgl_kernel"):
        stem = fig_dir / f"latency_{backend}"
        chart = sweep_figures.latency_chart(sweep[sweep["backend"] == backend])
        charts.save_chart(chart, f"{stem}.html", f"{stem}.png", f"{stem}.vl.json")
        specs.append(f"{stem}.vl.json")
    stem = fig_dir / "support"
    charts.save_chart(
        sweep_figures.support_chart(make_support()),
        f"{stem}.html",
        f"{stem}.png",
        f"{stem}.vl.json",
    )
    specs.append(f"{stem}.vl.json")
    return {"root": root, "specs": specs}


def render(study, tmp_path=None, specs=None, hardware=None, **kw) -> tuple[str, Path]:
    root = study["root"]
    out = root / "report" / "index.html"
    hw = root / "hardware.json"
    if hardware is not None:
        hw = Path(tmp_path) / "hardware.json"
        hw.write_text(json.dumps(hardware), encoding="utf-8")
    html = render_report(
        hardware_json=hw,
        sweep_csv=root / "tables" / "sweep.csv",
        support_csv=root / "tables" / "support.csv",
        spec_paths=study["specs"] if specs is None else specs,
        out_html=out,
        config_hash=kw.pop("config_hash", "cafe1234"),
        template_dir=TEMPLATES,
        **kw,
    )
    assert out.read_text(encoding="utf-8") == html
    return html, out


def assert_offline(html: str) -> None:
    attrs = re.findall(r"""\b(?:src|href)\s*=\s*["']?([^"'\s>]*)""", html, re.I)
    assert not [a for a in attrs if re.match(r"(https?:)?//", a, re.I)]
    assert not re.search(r"<link\b[^>]*stylesheet", html, re.I)
    assert "@import" not in html and "fonts.googleapis" not in html


def test_report_full(study):
    html, out = render(study, config_yaml_text="device: auto\nnote: <b>bold</b>\n")
    assert_offline(html)
    # hostile error text is escaped everywhere: never raw markup, but visible as text
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; sm_90" in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html
    # the vega bundle once, one div + one spec per chart
    assert html.count(BUNDLE_MARK) == 1
    for name in ("latency_flashinfer", "latency_sgl_kernel", "support"):
        assert html.count(f'id="chart-{name}"') == 1
        assert html.count(f'data-chart="chart-{name}"') == 1
    # provenance
    for value in ("gpu-box-17", "NVIDIA H200", "570.86.15", "12.8", "cafe1234", "0123456789abcdef"):
        assert value in html
    assert "uncommitted changes" in html and "2025-11-29T19:11:00+00:00" in html
    assert "flashinfer-python" in html and "not installed" in html  # sglang: None
    # a backend with no successful points says so, with its reason
    assert "sgl_kernel: no successful points" in html and "no CUDA device" in html
    # relative links to the tables and figure files
    assert 'href="../tables/sweep.csv"' in html and 'href="../tables/support.csv"' in html
    assert 'href="../figures/latency_flashinfer.png"' in html
    assert 'href="../figures/support.vl.json"' in html
    # sweep table: every row, status coloured, times formatted
    rows = len(pd.read_csv(study["root"] / "tables" / "sweep.csv"))
    assert html.count('<tr class="row-') == rows
    assert 'class="status status-mismatch"' in html
    assert "Fastest backend per size" in html


def test_report_specs_are_parseable_from_page(study):
    html, _ = render(study)
    blobs = re.findall(
        r'<script type="application/json" data-chart="([^"]+)">(.*?)</script>', html, re.S
    )
    assert len(blobs) == 3
    for _, blob in blobs:
        spec = json.loads(blob)
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")


def test_report_without_specs(study):
    html, _ = render(study, specs=[])
    assert_offline(html)
    assert BUNDLE_MARK not in html  # no charts, no JavaScript bundle
    assert 'id="chart-' not in html
    assert "No latency figure was produced" in html
    assert "&lt;script&gt;alert(1)" in html and "<script>alert" not in html


def test_report_cpu_machine(study, tmp_path):
    html, _ = render(study, tmp_path=tmp_path, hardware=CPU_HW, config_hash=None)
    assert_offline(html)
    assert "No GPU on this machine" in html
    assert "Intel &lt;i7&gt; &amp; co" in html
    assert "NVML Shared Library Not Found" in html
    assert html.count(BUNDLE_MARK) == 1


def test_report_with_missing_tables_and_hardware(tmp_path):
    out = tmp_path / "report" / "index.html"
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    html = render_report(
        hardware_json=tmp_path / "absent.json",
        sweep_csv=empty,
        support_csv=tmp_path / "absent.csv",
        spec_paths=[],
        out_html=out,
        config_hash="x",
        template_dir=TEMPLATES,
    )
    assert "No hardware description was found" in html
    assert "The sweep produced no rows" in html


def test_fmt_cell():
    assert fmt_cell("eager_us", 7.1234) == "7.12"
    assert fmt_cell("eager_us", 12345.6) == "12,346"
    assert fmt_cell("M", 16.0) == "16"
    assert fmt_cell("rel_err", 0.000123) == "1.23e-04"
    assert fmt_cell("eager_us", float("nan")) == ""
    assert fmt_cell("error", EVIL) == EVIL  # escaping is the template's job


def render_tree(tree, **kw) -> str:
    """Render the report of a synthetic results tree ({"root", "specs"}) with extra sections."""
    root = tree["root"]
    return render_report(
        hardware_json=root / "hardware.json",
        sweep_csv=root / "tables" / "sweep.csv",
        support_csv=root / "tables" / "absent.csv",
        spec_paths=tree["specs"],
        out_html=root / "report" / "index.html",
        config_hash="cafe1234",
        template_dir=TEMPLATES,
        **kw,
    )


def report_section(html: str, section_id: str) -> str:
    match = re.search(rf'<section id="{section_id}">(.*?)</section>', html, re.S)
    assert match, f"no section {section_id}"
    return match.group(1)


def test_an_expected_gap_is_a_quiet_note_and_a_failure_a_warning(study, tmp_path):
    from studylib.findings.common import Findings

    findings = Findings()
    findings.miss(3, "no power was measured in the kernel loops (no GPU)", expected=True)
    findings.miss(4, "the recorder pass failed")
    html, _ = render(study, tmp_path=tmp_path, findings=findings)
    quiet = re.findall(r'<p class="callout quiet">([^<]*)</p>', html)
    loud = re.findall(r'<p class="callout">([^<]*)</p>', html)
    assert quiet == ["Not measured on this machine: no power was measured in the kernel loops "
                     "(no GPU)"]  # fmt: skip
    assert "Not available: the recorder pass failed" in loud
