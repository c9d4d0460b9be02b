"""The decode report section: the cross-check table beside the runs."""

import pandas as pd
from helpers import ROOT
from studylib.core.io import write_frame
from studylib.stages.decode.decode_report import decode_section
from studylib.stages.decode.decode_schema import PAIR_COLUMNS

RUN = ROOT / "examples" / "h200-2026-12-02-decode" / "decode" / "sglang-bf16-graphs"


def test_the_section_shows_bench_serving_beside_the_study(tmp_path):
    paths = {"decode": RUN / "summary.csv", "decode_crosscheck": RUN / "crosscheck.csv"}
    section = decode_section(paths, [], tmp_path / "index.html")
    check = section["crosscheck"]
    assert [r[1]["text"] for r in check["rows"]] == ["1", "16", "64", "256", "512"]
    labels = check["columns"]
    row = dict(zip(labels, check["rows"][0], strict=True))
    # The H200 run of 2026-12-02 at C = 1: the study 1.516 ms, bench_serving 1.437 ms, and the
    # scheduler itself 5.8 % faster during bench_serving (its median log line).
    assert row["TPOT ms"]["text"] == "1.52" and row["bench_serving TPOT ms"]["text"] == "1.44"
    assert row["scheduler during bench ÷ during study"]["text"].startswith("1.058")
    # The runs' table names the scheduler's own count beside the client's.
    assert "scheduler tok/s" in [label for _, label in section["columns"]]
    assert section["crosscheck"] and len(section["downloads"]) == 2


def test_no_cross_check_no_table(tmp_path):
    section = decode_section({"decode": RUN / "summary.csv"}, [], tmp_path / "index.html")
    assert section["crosscheck"] is None


def test_the_pairs_are_read_as_the_aggregate_rule_wrote_them(tmp_path):
    # A pairs table on disk is shown as it is (here: one made-up pair), not paired again.
    pairs = pd.DataFrame(
        [
            {c: None for c in PAIR_COLUMNS}
            | {
                "engine": "sglang",
                "weights": "bf16",
                "gpus": 1,
                "concurrency": 7,
                "tpot_ratio": 0.5,
            }
        ]
    )
    write_frame(pairs, tmp_path / "pairs.csv")
    paths = {"decode": RUN / "summary.csv", "decode_graphs_pairs": tmp_path / "pairs.csv"}
    section = decode_section(paths, [], tmp_path / "index.html")
    assert [row[3]["text"] for row in section["pairs"]["rows"]] == ["7"]
