"""The report's computed findings as a whole (study_answers): the seed comparison, missing
inputs giving notes not exceptions, the study tables read, and a print-out on real H200 /
CPU results when they are on this machine."""

from pathlib import Path

import pandas as pd
import pytest
from findings_frames import (
    HW_CPU,
    HW_H200,
    PEAKS,
    only,
    sglang_decode,
    synthetic_decode,
    synthetic_power,
    synthetic_sweep,
    window,
)
from helpers import ROOT
from studylib.core.finding_records import Findings
from studylib.seed_comparison import SEED, seed_comparison
from studylib.stages.decode.expert_findings import q4_experts
from studylib.stages.kernel_power.kernel_power_answers import q3_power
from studylib.study_answers import compute_findings
from studylib.study_tables import StudyTables

H200 = ROOT / "examples" / "h200x2-2026-11-29"  # a real run


CPU = Path("/tmp/freshclone2/results")


def test_seed_comparison_on_a_blackwell_like_sweep():
    out = seed_comparison(
        StudyTables(
            HW_H200,
            PEAKS,
            synthetic_sweep(),
            kernel_power=synthetic_power(),
            decode=synthetic_decode(),
        )
    )
    hw = only(out, "seed", "The seed ran on")
    assert hw.numbers["arch"] == "sm_90" and hw.numbers["power_limit_w"] == 700.0
    assert "8× NVIDIA RTX PRO 6000 Blackwell (sm_120, 600 W each)" in hw.text
    assert "1× NVIDIA H200 (sm_90" in hw.text and "700 W against the seed's 600 W" in hw.text
    fp4 = only(out, "seed", "30–42 µs")
    assert fp4.numbers["fp4_decode_ok"] == 2
    assert (fp4.numbers["fp4_eager_min"], fp4.numbers["fp4_eager_max"]) == (35.0, 35.0)
    assert fp4.numbers["fp8_e4m3_eager_us"] == 20.0 and fp4.numbers["fp8_e4m3_graph_us"] == 4.0
    assert fp4.numbers["bf16_decode_eager_span"] == [30.0, 40.0]
    assert "the fastest eager time over M 1–64 spanning 30.0–40.0 µs" in fp4.text
    # The same fastest time at every decode size is one value, not a span.
    flat = synthetic_sweep()
    bf16 = (flat["dtype"] == "bf16") & (flat["M"] <= 64)
    flat.loc[bf16, "eager_us"] = flat.loc[bf16, "eager_us"].clip(upper=30.0)
    text = only(seed_comparison(StudyTables(HW_H200, PEAKS, flat)), "seed", "30–42 µs").text
    assert "the fastest eager time over M 1–64 is 30.0 µs" in text
    sgl = only(out, "seed", "cutlass_scaled_fp4_mm")
    n = sgl.numbers
    assert (n["ok"], n["points"], n["failed_max_m"]) == (3, 5, 64)
    # graph ratios sgl/flashinfer: 12/10, 90/100, 200/150 -> slower at 2 of 3, median 1.2.
    assert (n["slower"], n["shared"]) == (2, 3)
    assert n["median_ratio"] == pytest.approx(1.2)
    power = only(out, "seed", "235 W of 600 W")
    assert power.numbers["seed_pct"] == pytest.approx(235 / 6)
    assert power.numbers["decode_w_min"] == 200.0 and power.numbers["decode_pct_max"] == 50.0
    assert power.numbers["loop_w_max"] == 210.0
    assert any("balanced-routing" in m.text for m in out.missing)


def test_seed_comparison_on_cpu():
    out = seed_comparison(StudyTables(HW_CPU, {"device": "cpu"}))
    hw = only(out, "seed", "The seed ran on")
    assert "no GPU (CPU: Xeon, 2 cores)" in hw.text
    texts = " ".join(m.text for m in out.missing)
    assert "no sweep table" in texts and "no counterpart here (no GPU)" in texts


def test_seed_constants_are_the_seed_texts():
    seed = ROOT / ".." / "shared" / "seed" / "fp4-power-pivot.txt"
    seed = Path("/work/shared/seed/fp4-power-pivot.txt") if not seed.exists() else seed
    if not seed.exists():
        pytest.skip("seed write-up not on this machine")
    text = seed.read_text()
    for key in ("fp4_small_quote", "decode_w_quote", "sgl_fp4_quote", "tokens_per_expert_quote"):
        assert SEED[key] in text, key


def test_everything_missing_gives_notes_not_exceptions():
    out = compute_findings()
    assert out.findings == []
    questions = {m.question for m in out.missing}
    assert questions == {1, 2, 3, 4, 5, 6, "seed"}
    for frame in (pd.DataFrame(), pd.DataFrame({"x": [1]})):
        out = compute_findings(
            StudyTables(sweep=frame, kernel_power=frame, decode=frame, expert_m=frame)
        )
        assert out.findings == [] and out.missing


def test_odd_values_do_not_raise():
    sweep = synthetic_sweep().astype(object)
    sweep.loc[0, "eager_us"] = "n/a"
    sweep.loc[1, "status"] = None
    power = synthetic_power()
    power.loc[1, "throttle_reasons"] = None
    decode = synthetic_decode().drop(columns=["j_per_token", "valid"])
    out = compute_findings(StudyTables(HW_H200, PEAKS, sweep, kernel_power=power, decode=decode))
    assert out.findings


def test_study_tables_read_what_exists(tmp_path):
    (tmp_path / "tables").mkdir()
    synthetic_sweep().to_csv(tmp_path / "tables" / "sweep.csv", index=False)
    (tmp_path / "hardware.json").write_text('{"device": "cpu", "gpus": []}')
    pd.DataFrame({"variant": "sglang-graphs", "concurrency": 8, "layer": 0, "expert": [0, 1],
                  "tokens": [3, 1], "share": [0.75, 0.25], "m": [12.0, 4.0],
                  "balanced_m": 8.0}).to_csv(tmp_path / "tables" / "expert_m.csv",
                                             index=False)  # fmt: skip
    inputs = StudyTables.from_results(tmp_path)
    assert inputs.peaks is None and inputs.kernel_power is None
    assert inputs.hardware["device"] == "cpu"
    assert list(inputs.expert_m["variant"].unique()) == ["sglang-graphs"]
    assert StudyTables.from_results(tmp_path / "nothing").expert_m is None
    out = compute_findings(inputs)
    assert only(out, 4).numbers["m_max"] == 12.0


def _print(title: str, out: Findings) -> None:
    print(f"\n### {title}")
    for q in (1, 2, 3, 4, 5, "seed"):
        found, missing = out.for_question(q)
        for f in found:
            print(f"[{q}] {f.text}")
        for m in missing:
            print(f"[{q}] (missing) {m.text}")


def test_h200_example_results():
    """The findings of the committed two-H200 run (examples/h200x2-2026-11-29)."""
    out = compute_findings(StudyTables.from_results(H200))
    _print("H200", out)
    bf16 = only(out, 2, "BF16 call")
    assert bf16.numbers["M"] == 16 and bf16.numbers["launch_share"] > 0.5
    assert only(out, 1, "FP4:").numbers["fp4_ok"] == 0
    assert only(out, "seed", "The seed ran on").numbers["arch"] == "sm_90"
    capped = only(out, 3, "power-capped")
    # 16: the two bmm_fp8 M = 4096 eager windows report sw_power_cap at 66-70 % of the limit.
    assert capped.numbers["capped"] == 16 and capped.numbers["windows"] == 44
    assert only(out, 3, "GPUs at once").numbers["gpus"] == 2
    decode = only(out, 5, "transformers")
    assert sorted(decode.numbers["per_concurrency"]) == [1, 16, 64]
    assert not [m for m in out.missing if m.question == 5]


@pytest.mark.skipif(not CPU.exists(), reason="CPU example results not on this machine")
def test_cpu_example_results():
    out = compute_findings(StudyTables.from_results(CPU))
    _print("CPU", out)
    assert any("power_source none" in m.text for m in out.missing)
    assert only(out, 5, "transformers").numbers["per_concurrency"]


def test_seed_power_per_graphs_regime():
    out = seed_comparison(StudyTables(HW_H200, PEAKS, decode=sglang_decode()))
    power = only(out, "seed", "235 W of 600 W")
    assert power.numbers["decode_w_graphs_off"] == [240.0, 250.0]
    assert power.numbers["decode_w_graphs_on"] == [280.0, 300.0]
    assert "with CUDA graphs off (as the seed ran) 240–250 W" in power.text


def test_seed_power_sentence_counts_single_gemm_loops_only():
    # An eager loop of a whole MoE layer at 32 tokens is not a decode-sized GEMM loop (question
    # 3 gives it the experts' range): the seed sentence leaves it out, as question 3 does.
    fused = window("eager", 32, 698.0, 99.7, reasons="sw_power_cap")
    fused.update(op="fused_moe", G=256)
    kp = pd.DataFrame(synthetic_power().to_dict("records") + [fused])
    power = only(seed_comparison(StudyTables(HW_H200, PEAKS, kernel_power=kp)), "seed",
                 "235 W of 600 W")  # fmt: skip
    assert "eager GEMM loops draw 150–210 W" in power.text
    assert power.numbers["loop_w_max"] == 210.0


def test_gaps_of_a_machine_without_a_gpu_are_expected_and_a_missed_recorder_is_not():

    no_power = synthetic_power().assign(power_source="none", avg_w=None)
    (gap,) = q3_power(no_power, {"device": "cpu"}).missing
    assert gap.expected
    decode_cpu = pd.DataFrame([{"engine": "transformers", "concurrency": 1}])
    assert q4_experts(None, decode_cpu).missing[0].expected
    decode_gpu = pd.DataFrame([{"engine": "sglang", "concurrency": 1}])
    assert not q4_experts(None, decode_gpu).missing[0].expected
