"""Before and after: two sweeps compared point by point."""

import pandas as pd
import pytest
from studylib.stages.sweep.sweep_compare import (
    ComparisonRefused,
    check_comparable,
    compare,
    load_sweep,
    summary,
)


def sweep_rows(shape, points):
    rows = []
    for backend, m, eager, graph, cold in points:
        rows.append({"backend": backend, "impl": "x", "op": "mm", "dtype": "bf16", "shape": shape,
                     "N": 6144, "K": 2048, "G": None, "M": m, "status": "ok",
                     "eager_us": eager, "graph_us": graph, "cold_us": cold,
                     "eager_iqr_us": 0.1, "graph_iqr_us": 0.1, "cold_iqr_us": 0.1})  # fmt: skip
    return pd.DataFrame(rows)


def test_points_match_on_what_they_compute_and_get_a_signed_verdict():
    before = sweep_rows("expert_up", [("t", 16, 30.0, 6.0, 10.0), ("f", 16, 20.0, 5.0, 8.0)])
    after = sweep_rows("down", [("t", 16, 30.3, 4.0, 12.0), ("f", 16, 20.0, 5.0, 8.0)])
    table = compare(before, after)
    got = {(r.backend, r.mode): (r.verdict, round(r.speedup, 3)) for r in table.itertuples()}
    # Renamed shape, same N and K: still the same point.
    assert got[("t", "graph")] == ("faster", 1.5)
    assert got[("t", "cold")] == ("slower", round(10 / 12, 3))
    assert got[("t", "eager")][0] == "same"  # 1 % is within the 3 % tie rule
    assert got[("f", "cold")] == ("same", 1.0)
    assert list(table["shape"].unique()) == ["down"]
    lines = summary(table)
    assert lines[0].startswith("cold: 2 points, 0 faster, 1 slower, 1 the same within noise")


def test_a_point_missing_or_failed_in_one_run_is_left_out():
    before = sweep_rows("s", [("t", 1, 10.0, 5.0, 6.0), ("t", 16, 10.0, 5.0, 6.0)])
    after = sweep_rows("s", [("t", 1, 10.0, 5.0, 6.0), ("t", 16, 10.0, 5.0, 6.0)])
    after.loc[1, "status"] = "error"
    assert set(compare(before, after)["M"]) == {1}
    assert compare(before, after, min_m=16).empty


def test_a_results_folder_reads_its_sweep_table_or_its_sweeps(tmp_path):
    (tmp_path / "sweeps").mkdir()
    sweep_rows("s", [("t", 1, 10.0, 5.0, 6.0)]).to_csv(tmp_path / "sweeps" / "t.csv", index=False)
    assert len(load_sweep(tmp_path)) == 1
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no tables/sweep.csv"):
        load_sweep(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        load_sweep(tmp_path / "nope")


def test_a_pattern_names_the_files_of_a_run(tmp_path):
    from studylib.stages.sweep.sweep_plan import baseline_files

    for name in ("run6_torch.csv", "run6_flashinfer.csv", "old_torch.csv"):
        (tmp_path / name).write_text("x\n")
    assert [p.rsplit("/", 1)[1] for p in baseline_files(tmp_path / "run6_*.csv")] == [
        "run6_flashinfer.csv", "run6_torch.csv"]  # fmt: skip
    with pytest.raises(FileNotFoundError, match="matches no file"):
        baseline_files(tmp_path / "run7_*.csv")


def test_the_comparison_writes_its_table_and_chart_and_the_report_shows_them(tmp_path):
    import json

    from studylib.report import build_context
    from studylib.stages.sweep.sweep_compare import write_comparison

    before = sweep_rows("down", [("torch", m, 30.0, 6.0, 10.0) for m in (1, 16, 64)])
    after = sweep_rows("down", [("torch", m, 30.0, 4.0, 12.0) for m in (1, 16, 64)])
    before.to_csv(tmp_path / "before.csv", index=False)
    after.to_csv(tmp_path / "after.csv", index=False)
    out = tmp_path / "results"
    (out / "tables").mkdir(parents=True)
    (out / "figures").mkdir()
    table = write_comparison(tmp_path / "before.csv", tmp_path / "after.csv",
                             out / "tables" / "compare.csv",
                             out / "figures" / "compare.vl.json")  # fmt: skip
    assert len(table) == 9 and (out / "figures" / "compare.png").stat().st_size > 0
    spec = json.loads((out / "figures" / "compare.vl.json").read_text())
    assert spec["facet"]["column"]["field"] == "mode"
    context = build_context(
        paths={"sweep": tmp_path / "after.csv", "compare": out / "tables" / "compare.csv",
               "compare_spec": out / "figures" / "compare.vl.json"},
        spec_paths=[], out_html=out / "report" / "index.html", config_hash="x",
    )  # fmt: skip
    section = context["compare"]
    assert section["mode"] == "cold" and len(section["rows"]) == 3
    assert {r["verdict"] for r in section["rows"]} == {"slower"}  # cold 10 -> 12 µs
    assert section["rows"][0]["change"] == "-20.0 %"
    assert section["chart"]["has_data"] and section["lines"][0].startswith("cold: 3 points")
    assert section["downloads"][0]["href"].startswith("data:")
    assert build_context(paths={"sweep": tmp_path / "after.csv"}, spec_paths=[],
                         out_html=out / "report" / "index.html",
                         config_hash="x")["compare"] is None  # fmt: skip


def test_a_comparison_across_device_kinds_is_refused_in_one_line(tmp_path):
    # A CPU run against an H200's read "median speed-up 0.004x": no before-and-after.
    gpu = sweep_rows("s", [("t", 16, 30.0, 6.0, 10.0)]).assign(device="cuda", device_name="H200")
    cpu = sweep_rows("s", [("t", 16, 9000.0, None, None)])
    cpu = cpu.assign(device="cpu", device_name="AMD EPYC")
    with pytest.raises(ComparisonRefused, match=r"^the baseline ran on H200 \(cuda\), this run "
                       r"on AMD EPYC \(cpu\): times across device kinds"):  # fmt: skip
        check_comparable(gpu, cpu)
    check_comparable(gpu, gpu)  # one kind: compared


def test_another_gpu_of_the_same_kind_is_said_up_front():
    before = sweep_rows("s", [("t", 16, 30.0, 6.0, 10.0)]).assign(device="cuda", device_name="H100")
    after = sweep_rows("s", [("t", 16, 30.0, 4.0, 10.0)]).assign(device="cuda", device_name="H200")
    lines = summary(compare(before, after))
    assert (
        lines[0] == "the baseline ran on H100, this run on H200: each change includes the machine's"
    )
    assert lines[1].startswith("cold: 1 points")


@pytest.mark.parametrize("text", ["just some notes\n", "a,b\n1,2\n"])
def test_a_baseline_that_is_no_sweep_gets_one_line(tmp_path, text):
    path = tmp_path / "notes.csv"
    path.write_text(text)
    with pytest.raises(ComparisonRefused, match=r"notes.csv: not a sweep \(no column backend"):
        load_sweep(path)
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(ComparisonRefused, match="broken.parquet: not a readable sweep table"):
        load_sweep(broken)
