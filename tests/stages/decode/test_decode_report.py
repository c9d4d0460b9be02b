"""The decode report section: the cross-check table beside the runs."""

from helpers import ROOT
from studylib.stages.decode.decode_report import decode_section

RUN = ROOT / "examples" / "h200-2026-12-02-decode" / "decode" / "sglang-bf16-graphs"


def test_the_section_shows_bench_serving_beside_the_study(tmp_path):
    section = decode_section(RUN / "summary.csv", [], tmp_path / "index.html",
                             crosscheck_csv=RUN / "crosscheck.csv")  # fmt: skip
    check = section["crosscheck"]
    assert [r[1]["text"] for r in check["rows"]] == ["1", "16", "64", "256", "512"]
    labels = check["columns"]
    row = dict(zip(labels, check["rows"][0], strict=True))
    # The H200 run of 2026-12-02 at C = 1: the study 1.516 ms, bench_serving 1.437 ms, and the
    # scheduler itself 7 % faster during bench_serving.
    assert row["TPOT ms"]["text"] == "1.52" and row["bench_serving TPOT ms"]["text"] == "1.44"
    assert row["scheduler during bench ÷ during study"]["text"].startswith("1.070")
    # The runs' table names the scheduler's own count beside the client's.
    assert "scheduler tok/s" in [label for _, label in section["columns"]]
    assert section["crosscheck"] and len(section["downloads"]) == 2


def test_no_cross_check_no_table(tmp_path):
    section = decode_section(RUN / "summary.csv", [], tmp_path / "index.html")
    assert section["crosscheck"] is None
