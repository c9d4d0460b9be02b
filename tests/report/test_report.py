"""Report: one offline HTML page, escaped, with provenance, charts and tables."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from helpers import ROOT, embedded_file, packed_payloads, packed_rows, report_paths
from studylib.core import charts
from studylib.core.answer_records import ANSWERED, NOT_MEASURED, TIE, Answer, answers_frame
from studylib.core.io import write_frame
from studylib.core.report_cells import embedded_download, fmt_sig, fmt_sig_us, unpack
from studylib.report import (
    LAST_GOOD,
    TemplateProblem,
    backend_summaries,
    expected_gap,
    fmt_cell,
    machine_has_gpu,
    questions_context,
    render_report,
    spec_data_note,
)
from studylib.stages.sweep import sweep_figures, sweep_table_figures
from studylib.stages.sweep.sweep_report import sweep_table
from test_sweep_figures import EVIL, all_unsupported, make_support, make_sweep

TEMPLATES = ROOT / "report" / "templates"
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
        sweep_table_figures.support_chart(make_support()),
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
        paths={
            "hardware": hw,
            "sweep": root / "tables" / "sweep.csv",
            "support": root / "tables" / "support.csv",
            **report_paths(kw),
        },
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


def assert_self_contained(html: str) -> None:
    """Every link stays in the page: '#' anchors and data: URIs only."""
    hrefs = re.findall(r"""<a\b[^>]*\bhref\s*=\s*["']([^"']*)""", html, re.I)
    assert hrefs
    assert [h for h in hrefs if not h.startswith(("#", "data:"))] == []


def test_report_full(study):
    html, out = render(study, config_yaml_text="device: auto\nnote: <b>bold</b>\n")
    assert_offline(html)
    # hostile error text is escaped everywhere: never raw markup, but visible as text
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; sm_90" in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html
    # the vega bundle once, one div + one spec per chart
    assert html.count(BUNDLE_MARK) == 1
    for name in ("latency_flashinfer", "support"):
        assert html.count(f'id="chart-{name}"') == 1
        assert html.count(f'data-chart="chart-{name}"') == 1
    # sgl_kernel ran nothing: its latency figure is a no-data chart, not drawn (its "no
    # successful points" note stands in for it)
    assert 'id="chart-latency_sgl_kernel"' not in html
    # provenance
    for value in ("gpu-box-17", "NVIDIA H200", "570.86.15", "12.8", "cafe1234", "0123456789abcdef"):
        assert value in html
    assert "uncommitted changes" in html and "2025-11-29T19:11:00+00:00" in html
    assert "flashinfer-python" in html and "not installed" in html  # sglang: None
    # a backend with no successful points says so, with its reason
    assert "sgl_kernel: no successful points" in html and "no CUDA device" in html
    # on a GPU machine a backend that ran nothing is a red box, not a quiet note
    assert re.search(r'<div class="callout no-success">\s*<b>sgl_kernel: no successful', html)
    # mailable: no link leaves the page; the tables are embedded downloads
    assert_self_contained(html)
    assert "../figures/" not in html and "../tables/" not in html
    root = study["root"]
    for name, path in (("sweep.csv", root / "tables" / "sweep.csv"),
                       ("support.csv", root / "tables" / "support.csv"),
                       ("hardware.json", root / "hardware.json")):  # fmt: skip
        assert embedded_file(html, name) == path.read_bytes()
    assert "This page is self-contained" in html and "results/tables/*.csv" in html
    # sweep table: every row packed in the page (the script builds them), status coloured
    rows = len(pd.read_csv(study["root"] / "tables" / "sweep.csv"))
    built = packed_rows(html, "sweep-table")
    assert len(built) == rows
    assert {c["t"] for r in built for c in r["c"] if c["kind"] == "status"} >= {"mismatch"}


def test_report_specs_are_parseable_from_page(study):
    html, _ = render(study)
    blobs = {k: v for k, v in packed_payloads(html).items() if k.startswith("chart-")}
    assert len(blobs) == 2  # flashinfer's latency and the support matrix; sgl_kernel: no data
    for blob in blobs.values():
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
    assert_self_contained(html)
    assert "No GPU on this machine" in html
    assert "Intel &lt;i7&gt; &amp; co" in html
    assert "NVML Shared Library Not Found" in html
    assert html.count(BUNDLE_MARK) == 1
    # without a GPU, "no CUDA device" everywhere is this machine's expected gap: a quiet note
    quiet = re.findall(r'<div class="callout quiet no-success expected">(.*?)</div>', html, re.S)
    assert quiet and all("sgl_kernel: no successful points" in q for q in quiet)
    assert "no CUDA device" in quiet[0]
    assert '<div class="callout no-success">' not in html


def test_report_with_missing_tables_and_hardware(tmp_path):
    out = tmp_path / "report" / "index.html"
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    html = render_report(
        paths={
            "hardware": tmp_path / "absent.json",
            "sweep": empty,
            "support": tmp_path / "absent.csv",
        },
        spec_paths=[],
        out_html=out,
        config_hash="x",
        template_dir=TEMPLATES,
    )
    assert "No hardware description was found" in html
    assert "The sweep produced no rows" in html


def test_fmt_cell():
    assert fmt_cell("eager_us", 7.1234) == "7.12"
    assert fmt_cell("eager_us", 12345.6) == "12,350"
    assert fmt_cell("eager_us", 1234.56) == "1,235"
    assert fmt_cell("eager_us", 456.78) == "457"
    assert fmt_cell("graph_us", 0.51234) == "0.512"
    assert fmt_cell("tflops", 987.654) == "988"
    assert fmt_cell("tflops", 0.00019278811954477618) == "0.000193"
    assert fmt_cell("gbps", 4321.0) == "4,320"
    assert fmt_cell("gbps", 12.345) == "12.3"
    assert fmt_cell("M", 16.0) == "16"
    assert fmt_cell("rel_err", 0.000123) == "1.23e-04"
    assert fmt_cell("eager_us", float("nan")) == ""
    assert fmt_cell("error", EVIL) == EVIL  # escaping is the template's job


def render_tree(tree, **kw) -> str:
    """Render the report of a synthetic results tree ({"root", "specs"}) with extra sections."""
    root = tree["root"]
    return render_report(
        paths={
            "hardware": root / "hardware.json",
            "sweep": root / "tables" / "sweep.csv",
            "support": root / "tables" / "absent.csv",
            **report_paths(kw),
        },
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


def test_answers_render_as_rows_with_their_status(study, tmp_path):
    """The report shows answers.csv as it is: a question's rows in its section, its lead row
    on the first screen, each with its status; nothing is decided in the report."""
    answers = tmp_path / "answers.csv"
    write_frame(answers_frame([
        Answer(3, "kernel loops", NOT_MEASURED, why="no GPU", sentence="Not measured here: no GPU.",
               lead=True),
        Answer(1, "BF16 · down · M 1–64 · cold", TIE, verdict="a = b", runner_up="c",
               margin=0.4, noise=0.05, value="9.2–9.7 µs", sentence="a = b <tie>.", lead=True),
    ]), answers)  # fmt: skip
    html, _ = render(study, tmp_path=tmp_path, answers=answers)
    first = report_section(html, "answers")
    assert "a = b &lt;tie&gt;." in first and "Not measured here: no GPU." in first
    assert '<span class="answer-status answer-tie">tie</span>' in first
    assert '<span class="answer-status answer-not-measured-here">not measured here</span>' in first
    q1 = report_section(html, "q1")
    assert "BF16 · down · M 1–64 · cold" in q1 and "40 % &gt; 5 % noise" in q1
    assert "9.2–9.7 µs" in q1
    # no answers table: every question says it has none, nothing is computed in its place
    html, _ = render(study)
    assert report_section(html, "q1").count("No answer was computed for this question") == 1


def test_a_first_screen_shows_what_was_measured_before_what_was_not():
    # Question 5 of the default: its analysis leads with "CUDA graphs: not measured here" (no
    # variant without graphs) beside the answered headlines; the first screen puts the
    # answers first, the not-measured row after them, the section's full table as it came.
    answers = [
        Answer(5, "CUDA graphs", NOT_MEASURED, why="no variant ran without", lead=True),
        Answer(5, "most throughput", ANSWERED, verdict="fp8", lead=True),
        Answer(5, "least energy per token", TIE, verdict="a = b", lead=True),
        Answer(5, "sg-fp8-graphs", ANSWERED, verdict="C = 512"),
    ]
    q5 = next(q for q in questions_context(answers) if q["question"] == 5)
    assert [r["subject"] for r in q5["lead"]] == ["most throughput", "least energy per token",
                                                  "CUDA graphs"]  # fmt: skip
    assert [r["subject"] for r in q5["rows"]] == [a.subject for a in answers]
    # A question with nothing measured still leads with its row.
    alone = [Answer(4, "per-expert M", NOT_MEASURED, why="no recorder pass")]
    q4 = next(q for q in questions_context(alone) if q["question"] == 4)
    assert [r["subject"] for r in q4["lead"]] == ["per-expert M"]


def test_fmt_sig():
    assert fmt_sig(0) == "0"
    assert fmt_sig(9.996) == "10.0"
    assert fmt_sig(999.7) == "1,000"
    assert fmt_sig(-12.34) == "-12.3"
    assert fmt_sig(123456) == "123,000"
    assert fmt_sig_us(999.4) == "999"
    assert fmt_sig_us(2166441.783) == "2,166,000"


def tiny_spec(title: str, **extra) -> dict:
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.20.1.json",
        "title": title,
        "data": {"values": [{"x": 1, "y": 2}]},
        "mark": "point",
        "encoding": {"x": {"field": "x", "type": "quantitative"}},
        **extra,
    }


EMPTY_META = {"study": {"has_data": False, "note": "no power measured <here> (power_source none)"}}


def test_spec_data_note():
    assert spec_data_note(tiny_spec("a")) == (True, "")
    assert spec_data_note(tiny_spec("a", usermeta={"other": 1})) == (True, "")
    assert spec_data_note(tiny_spec("a", usermeta={"study": {"has_data": True}})) == (True, "")
    assert spec_data_note(tiny_spec("a", usermeta=EMPTY_META)) == (
        False, "no power measured <here> (power_source none)")  # fmt: skip


def test_a_chart_without_data_is_a_quiet_note(study, tmp_path):
    """Two hand-made specs: the one whose usermeta says it has no data is not embedded but
    named in a grey note with its reason; the other is embedded as before."""
    drawn, empty = tmp_path / "drawn.vl.json", tmp_path / "power_vs_util.vl.json"
    drawn.write_text(json.dumps(tiny_spec("Drawn chart")), encoding="utf-8")
    empty.write_text(json.dumps(tiny_spec("Power vs util", usermeta=EMPTY_META)),
                     encoding="utf-8")  # fmt: skip
    html, _ = render(study, specs=[str(drawn), str(empty)])
    assert 'id="chart-drawn"' in html and 'data-chart="chart-drawn"' in html
    assert 'id="chart-power_vs_util"' not in html and 'data-chart="chart-power_vs_util"' not in html
    notes = re.findall(r'<p class="callout quiet nodata" data-figure="([^"]+)">(.*?)</p>', html,
                       re.S)  # fmt: skip
    assert [name for name, _ in notes] == ["power_vs_util"]
    text = " ".join(notes[0][1].split())
    assert "<b>Power vs util</b> has no data: no power measured &lt;here&gt;" in text
    assert html.count(BUNDLE_MARK) == 1
    # only charts without data: no chart, no vega bundle
    html, _ = render(study, specs=[str(empty)])
    assert BUNDLE_MARK not in html and 'class="chart"' not in html
    assert 'data-figure="power_vs_util"' in html


def test_expected_gap_only_for_no_cuda_on_a_machine_without_gpu():
    cpu_rows = all_unsupported("sgl_kernel")
    assert expected_gap(cpu_rows, has_gpu=False)
    assert not expected_gap(cpu_rows, has_gpu=True)  # a GPU machine: something is wrong
    other = cpu_rows.copy()
    other.loc[other.index[0], "error"] = "not compiled for sm_120"
    assert not expected_gap(other, has_gpu=False)
    failed = cpu_rows.copy()
    failed.loc[failed.index[0], "status"] = "error"
    assert not expected_gap(failed, has_gpu=False)
    (summary,) = backend_summaries(cpu_rows, has_gpu=False)
    assert summary["no_success"] and summary["expected"]
    assert machine_has_gpu(GPU_HW, cpu_rows) and not machine_has_gpu(CPU_HW, cpu_rows)
    assert not machine_has_gpu({}, cpu_rows)
    assert machine_has_gpu({}, make_sweep("torch").assign(device="cuda:0"))


def test_sweep_table_rows_carry_their_filters(study):
    html, _ = render(study)
    section = report_section(html, "sweep")
    # the controls are hidden without JavaScript (every row stays listed)
    assert re.search(r'<div class="table-filters" id="sweep-filters" data-table="sweep-table" '
                     r"hidden>", section)  # fmt: skip
    for column in ("backend", "op", "dtype", "status"):
        assert f'<select data-filter="{column}">' in section
    assert "data-filter-unsupported" in section and "data-filter-text" in section
    sweep = pd.read_csv(study["root"] / "tables" / "sweep.csv")
    rows = packed_rows(html, "sweep-table")
    assert len(rows) == len(sweep)
    assert list(rows[0]["f"]) == ["backend", "op", "dtype", "status"]
    assert all(r["s"] == r["f"]["status"] for r in rows)
    assert sum(r["s"] == "unsupported" for r in rows) == (sweep["status"] == "unsupported").sum()
    table = sweep_table(sweep.fillna(""))
    assert table["n_unsupported"] == (sweep["status"] == "unsupported").sum()
    assert dict((c, v) for c, _, v in table["filters"])["backend"] == sorted(
        sweep["backend"].unique()
    )


def test_embedded_download(tmp_path):
    table = tmp_path / "results" / "tables" / "sweep.csv"
    table.parent.mkdir(parents=True)
    table.write_text("a,b\n1,<x>\n", encoding="utf-8")
    out = tmp_path / "results" / "report" / "index.html"
    item = embedded_download(table, out)
    assert item["name"] == "sweep.csv" and item["path"] == "results/tables/sweep.csv"
    assert item["href"].startswith("data:text/csv;charset=utf-8;base64,")
    assert base64.b64decode(item["href"].split(",", 1)[1]) == table.read_bytes()
    # too large: no link, the path named instead
    big = embedded_download(table, out, limit=4)
    assert big["href"] is None and big["path"] == "results/tables/sweep.csv"
    assert embedded_download(tmp_path / "absent.csv", out) is None
    # large: packed (gzip, base64) for the page's script, the same bytes once unpacked
    table.write_text("a,b\n" + "".join(f"{i},{i * 7}\n" for i in range(20000)), encoding="utf-8")
    packed = embedded_download(table, out)
    assert packed["href"] is None and packed["id"].startswith("packed-sweep-csv-")
    assert unpack(packed["packed"]) == table.read_bytes()
    assert len(packed["packed"]) < table.stat().st_size


def test_a_broken_template_is_one_line_and_the_last_report_stays(study, tmp_path):
    """A template that does not parse, or names what the context lacks, is one line naming
    the template and its line; the last report that rendered stays beside the output."""
    html, out = render(study)
    last_good = out.with_name(LAST_GOOD)
    assert last_good.read_text(encoding="utf-8") == html
    broken = tmp_path / "templates"
    shutil.copytree(TEMPLATES, broken)
    (broken / "index.html.j2").write_text(
        (TEMPLATES / "index.html.j2").read_text(encoding="utf-8") + "{{ broken\n", encoding="utf-8"
    )
    with pytest.raises(TemplateProblem) as exc:
        render_report(paths={}, spec_paths=[], out_html=tmp_path / "r" / "index.html",
                      config_hash="x", template_dir=broken)  # fmt: skip
    lines = (TEMPLATES / "index.html.j2").read_text(encoding="utf-8").count("\n") + 1
    assert str(exc.value) == (f"report template index.html.j2, line {lines}: unexpected end of "
                              "template, expected 'end of print statement'.")  # fmt: skip
    seed = broken / "sections" / "seed.html.j2"
    (broken / "index.html.j2").write_text((TEMPLATES / "index.html.j2").read_text("utf-8"))
    seed.write_text(seed.read_text("utf-8").replace("q.title", "q.absent.name"), "utf-8")
    with pytest.raises(TemplateProblem, match=r"^report template sections/seed.html.j2, line \d+: "
                       r"'dict object' has no attribute 'absent'$"):  # fmt: skip
        render_report(paths={}, spec_paths=[], out_html=tmp_path / "r" / "index.html",
                      config_hash="x", template_dir=broken)  # fmt: skip
    assert last_good.read_text(encoding="utf-8") == html


def test_the_gpu_table_shows_whole_quantities_and_the_compute_capability_as_recorded():
    # NVML's memory in MiB comes as 143155.9375 on the H200: the table shows 143,156, the
    # limit 700 and L2 60, and leaves the compute capability "9.0" and the name alone.
    from studylib.report import provenance

    gpu = {"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132,
           "memory_total_mib": 143155.9375, "l2_cache_mib": 60.0, "power_limit_w": 700.0,
           "max_sm_clock_mhz": 1980, "max_mem_clock_mhz": None}  # fmt: skip
    (shown,) = provenance({"device": "cuda", "gpus": [gpu]}, "abc")["gpus"]
    assert shown["memory_total_mib"] == "143,156" and shown["l2_cache_mib"] == "60"
    assert shown["power_limit_w"] == "700" and shown["compute_capability"] == "9.0"
    assert shown["name"] == "NVIDIA H200" and shown["max_mem_clock_mhz"] == "—"
