"""Two runs side by side (studylib/run_agreement.py, tools/run_agreement.py): a shortened run
against a full-length one."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
from studylib.run_agreement import (
    decode_agreement,
    ranking_agreement,
    reference_tables,
    summary,
    within_summary,
)
from test_sweep_answers import frame, pt

ROOT = Path(__file__).resolve().parents[2]


def sweep(b_cold: float, extra=()):
    # torch·aten 10 µs cold at M 16; flashinfer·cublaslt b_cold; 0.5 % IQR each.
    return frame(pt("torch", "aten", 16, cold=10.0), pt("flashinfer", "cublaslt", 16, cold=b_cold),
                 *extra)  # fmt: skip


def test_the_same_leaders_overlapping_leaders_and_different_ones():
    full = sweep(20.0)  # aten alone leads
    assert ranking_agreement(full, sweep(20.4))["agreement"].tolist() == ["same"]
    # within 3 % of each other: a tie whose leaders include aten
    assert ranking_agreement(full, sweep(10.2))["agreement"].tolist() == ["consistent"]
    row = ranking_agreement(full, sweep(5.0)).iloc[0]  # cublaslt alone leads now
    assert row["agreement"] == "differs" and row["leaders_b"] == "flashinfer·cublaslt"
    assert row["time"] == "differs"  # the leader's time halved, beyond the 3 % noise


def test_a_contender_only_one_run_measured_is_no_disagreement():
    extra = [pt("sgl_kernel", "cutlass", 16, cold=2.0)]  # only in the short run: faster
    assert ranking_agreement(sweep(20.0), sweep(20.0, extra))["agreement"].tolist() == ["same"]


def decode(tpot, w, ci=None, valid=True):
    return pd.DataFrame([{"variant": "v", "concurrency": 64, "tpot_ms": tpot,
                          "output_tok_s": 64e3 / tpot, "avg_w_per_gpu": w,
                          "j_per_token": w * tpot / 64e3, "tpot_ci_pct": ci,
                          "valid": valid}])  # fmt: skip


def test_decode_rows_agree_within_the_larger_precision_of_the_two():
    assert decode_agreement(decode(10.0, 600), decode(10.2, 605))["agreement"].tolist() == ["same"]
    row = decode_agreement(decode(10.0, 600), decode(10.6, 600)).iloc[0]  # 6 % > 3 % floor
    assert row["agreement"] == "differs" and row["differs"] == "TPOT, tok/s, J/token"
    # a window known only to ± 8 %: the same 6 % is within its noise
    assert decode_agreement(decode(10.0, 600), decode(10.6, 600, ci=8.0))["agreement"].tolist() \
        == ["same"]  # fmt: skip
    assert decode_agreement(decode(10.0, 600), decode(10.6, 600, valid=False)).empty
    older = decode(10.0, 600).drop(columns=["tpot_ci_pct", "valid"])  # a table before them
    assert decode_agreement(older, decode(10.2, 600))["agreement"].tolist() == ["same"]


def test_decode_rows_under_different_loads_differ_whatever_their_figures():
    # A staggered window holds each replacement's lone prefill, a lockstep one does not: not
    # the same measurement, even where the figures happen to agree.
    staggered, lockstep = decode(10.0, 600).assign(load="staggered"), decode(10.0, 600)
    row = decode_agreement(staggered, lockstep.assign(load="lockstep")).iloc[0]
    assert row["agreement"] == "differs" and row["differs"] == "load (staggered | lockstep)"
    # One side from before the column: its load is not known, so only the figures judge.
    assert decode_agreement(staggered, lockstep)["agreement"].tolist() == ["same"]


def test_the_tool_prints_the_counts_and_exits_1_on_a_difference(tmp_path):
    for name, b in (("full", 20.0), ("short", 5.0)):
        (tmp_path / name / "tables").mkdir(parents=True)
        sweep(b).assign(status="ok").to_csv(tmp_path / name / "tables" / "sweep.csv", index=False)
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "run_agreement.py"),
                          str(tmp_path / "full"), str(tmp_path / "short"), "--out",
                          str(tmp_path / "out")], capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert "1 sizes and modes in both runs: 0 same leaders, 0 consistent" in run.stdout
    assert (tmp_path / "out" / "ranking_agreement.csv").is_file()
    missing = subprocess.run([sys.executable, str(ROOT / "tools" / "run_agreement.py"),
                              str(tmp_path / "nowhere"), str(tmp_path / "short")],
                             capture_output=True, text=True)  # fmt: skip
    assert missing.returncode == 2 and "nowhere" in missing.stderr


def test_the_summary_names_each_difference():
    lines = summary(ranking_agreement(sweep(20.0), sweep(5.0)),
                    decode_agreement(decode(10.0, 600), decode(10.6, 600)))  # fmt: skip
    assert any("differs: bf16 down M = 16 cold" in line for line in lines)
    assert any("differs: v C = 64: TPOT, tok/s, J/token (noise 3.0 %)" in line for line in lines)
    assert any(line.startswith("decode: 1 window of 1 variant valid in both") for line in lines)


def test_a_reference_pieced_from_several_runs_takes_each_row_from_the_first_that_has_it(
    tmp_path,
):
    # Two committed full-length runs: one holds C = 1 and 16, the other C = 16 and 64.
    for name, rows in (("a", [("v", 1, 1.4), ("v", 16, 5.0)]),
                       ("b", [("v", 16, 9.9), ("v", 64, 9.8)])):  # fmt: skip
        (tmp_path / name / "decode" / "v").mkdir(parents=True)
        pd.DataFrame([{"variant": v, "concurrency": c, "tpot_ms": t} for v, c, t in rows]).to_csv(
            tmp_path / name / "decode" / "v" / "summary.csv", index=False
        )
    sweep, decode = reference_tables([tmp_path / "a", tmp_path / "b"])
    assert sweep is None
    got = decode.set_index("concurrency")["tpot_ms"].to_dict()
    assert got == {1: 1.4, 16: 5.0, 64: 9.8}  # C = 16 from the first run, C = 64 the second
    assert reference_tables([tmp_path / "b"])[1]["concurrency"].tolist() == [16, 64]


def test_decode_rows_say_whether_the_two_ran_on_one_gpu(tmp_path):
    # Two H200s drew 8-9 % apart on the same FP8 decode at the same clock: a W difference
    # between chips is not the shortened window's.
    for name, uuid, w in (("full", "GPU-a1fb", 580.0), ("short", "GPU-a2b8", 629.0)):
        folder = tmp_path / name
        (folder / "decode" / "v").mkdir(parents=True)
        decode(17.0, w).assign(idle_w_per_gpu=78.3 if name == "full" else 80.2).to_csv(
            folder / "decode" / "v" / "summary.csv", index=False
        )
        (folder / "hardware.json").write_text(f'{{"gpus": [{{"uuid": "{uuid}"}}]}}')
    (_, decode_a), (_, decode_b) = (
        reference_tables([tmp_path / "full"]),
        reference_tables([tmp_path / "short"]),
    )
    row = decode_agreement(decode_a, decode_b).iloc[0]
    assert row["chips"] == "different" and row["differs"] == "W, J/token"
    lines = summary(ranking_agreement(None, None), decode_agreement(decode_a, decode_b))
    assert any("another GPU, idle 78.3 | 80.2 W" in line for line in lines)
    assert any(line.startswith("chips: 1 of 1 decode rows compare two GPUs") for line in lines)
    same = decode_agreement(decode_a, decode_a).iloc[0]
    assert same["chips"] == "same" and same["agreement"] == "same"
    older = decode_b.drop(columns=["idle_w_per_gpu"]).assign(gpus="GPU-other")  # no idle W
    lines = summary(ranking_agreement(None, None), decode_agreement(decode_a, older))
    assert any("another GPU, idle 78.3 | ? W" in line for line in lines)
    (tmp_path / "short" / "hardware.json").unlink()  # a run that kept no record
    assert (
        decode_agreement(decode_a, reference_tables([tmp_path / "short"])[1]).iloc[0]["chips"]
        == "unknown"
    )
    # A run of decode targets alone: no hardware record, the GPUs its decode job sampled.
    run = tmp_path / "short" / "decode" / "v" / "run.json"
    for sampled, chip in (("GPU-a1fb", "same"), ("GPU-a2b8", "different")):
        run.write_text(f'{{"gpus": ["{sampled}"]}}')
        short = reference_tables([tmp_path / "short"])[1]
        assert decode_agreement(decode_a, short).iloc[0]["chips"] == chip


def full_length(tpot, w, short_tpot, short_w, short_ci=0.8, valid=True):
    """A full-length run's row: its 30-s window, and the window the rule would have ended."""
    row = decode(tpot, w, ci=0.3, valid=valid).assign(steady_s=30.0)
    return row.assign(shortened_steady_s=12.0, shortened_tpot_ms=short_tpot,
                      shortened_output_tok_s=64e3 / short_tpot, shortened_avg_w_per_gpu=short_w,
                      shortened_j_per_token=short_w * short_tpot / 64e3,
                      shortened_tpot_ci_pct=short_ci, shortened_tpot_source="client")  # fmt: skip


def test_a_full_length_runs_windows_against_their_shortened_selves(tmp_path):
    agreement, full = within_run_of(tmp_path, full_length(10.0, 600, 10.1, 602))
    assert agreement["agreement"].tolist() == ["same"] and agreement["chips"].tolist() == ["same"]
    assert agreement.iloc[0]["tpot_ms_b"] == 10.1  # side b: the shortened window
    lines = within_summary(agreement, full)
    assert "full windows of 30 s against the shortened rule's 12.0 s" in lines[0]
    assert "1 agree" in lines[0] and "decode, one run: 1 window of 1 variant," in lines[0]
    # 5 % slower in its first 12 s, beyond the 3 % floor (the shortened window's ± 0.8 %)
    agreement, _ = within_run_of(tmp_path, full_length(10.0, 600, 10.5, 600))
    assert agreement.iloc[0]["differs"] == "TPOT, tok/s, J/token"
    # A run whose rule ended its windows states none: nothing to compare, and it says so.
    agreement, full = within_run_of(tmp_path, decode(10.0, 600))
    assert agreement.empty and "full_length_s" in within_summary(agreement, full)[0]


def within_run_of(tmp_path, rows):
    from studylib.run_agreement import within_run

    folder = tmp_path / "run"
    (folder / "decode" / "v").mkdir(parents=True, exist_ok=True)
    rows.to_csv(folder / "decode" / "v" / "summary.csv", index=False)
    return within_run(folder)


def test_the_tool_within_one_run(tmp_path):
    within_run_of(tmp_path, full_length(10.0, 600, 10.5, 600))
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "run_agreement.py"), "--within",
                          str(tmp_path / "run"), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert "differs: v C = 64: TPOT, tok/s, J/token" in run.stdout
    assert (tmp_path / "out" / "decode_within.csv").is_file()
    bare = subprocess.run([sys.executable, str(ROOT / "tools" / "run_agreement.py")],
                          capture_output=True, text=True)  # fmt: skip
    assert bare.returncode == 2 and "give FULL and SHORT, or --within FULL" in bare.stderr
