"""Question 3 (stages/kernel_power): power ranges, capping, clocks and under-use of kernel
loops, from synthetic window tables."""

import pandas as pd
import pytest
from findings_frames import HW_CPU, HW_H200, only, synthetic_power, window
from studylib.stages.kernel_power.kernel_power_answers import q3_power


def test_q3_power_ranges_and_capping():
    out = q3_power(synthetic_power(), HW_H200)
    idle = only(out, 3, "Idle")
    assert idle.numbers["idle_w_min"] == 80.0
    loops = only(out, 3, "kernel loops")
    n = loops.numbers
    assert (n["decode_eager_w_min"], n["decode_eager_w_max"]) == (150.0, 210.0)
    assert n["decode_eager_pct_max"] == 30.0
    assert (n["decode_graph_w_min"], n["decode_graph_w_max"]) == (350.0, 350.0)
    assert (n["prefill_w_min"], n["prefill_w_max"]) == (560.0, 690.0)
    assert "decode-sized (M ≤ 64) eager loops draw 150–210 W (21–30 % of the limit)" in loops.text
    assert "tensor pipes 2–6 % busy" in loops.text
    capped = only(out, 3, "power-capped")
    # Any power-cap reason counts (the windows' classification), at 80 % of the limit too.
    assert capped.numbers["capped"] == 2 and capped.numbers["windows"] == 5
    assert capped.numbers["clock_min"] == 1400.0 and capped.numbers["max_clock"] == 1980
    assert "torch·a matmul BF16 M = 4096 eager, torch·a matmul BF16 M = 4096 graph" in capped.text
    assert "(a clocks-event reason sw_power_cap or hw_power_brake_slowdown)" in capped.text
    assert "1400–1900 MHz against a maximum of 1980 MHz" in capped.text
    under = only(out, 3, "under-use")
    assert under.numbers["decode_throttled"] == 0
    gap = only(out, 3, "Energy counter")
    assert gap.numbers["max_gap_pct"] == pytest.approx(0.8)


def test_q3_loops_on_two_gpus_at_once_report_the_spread_between_gpus():
    rows = []
    for gpu, scale in ((0, 1.0), (1, 0.9)):
        for rec in synthetic_power().to_dict("records"):
            rec.update(gpu=gpu, gpus_running=0 if rec["mode"] == "idle" else 2,
                       window=f"{rec['mode']}/{rec['M']}/{rec['impl']}")  # fmt: skip
            if rec["avg_w"] is not None and rec["mode"] != "idle":
                rec["avg_w"] *= scale
            rows.append(rec)
    out = q3_power(pd.DataFrame(rows), HW_H200)
    spread = only(out, 3, "GPUs at once")
    assert spread.numbers["gpus"] == 2
    assert spread.numbers["spread_max_pct"] == pytest.approx(10.0)
    capped = only(out, 3, "power-capped")
    assert "loop windows × GPU (2 GPUs)" in capped.text and capped.numbers["windows"] == 10
    # one GPU: no spread sentence
    assert not [f for f in q3_power(synthetic_power(), HW_H200).findings
                if "GPUs at once" in f.text]  # fmt: skip


def test_q3_missing_power():
    none = synthetic_power().assign(power_source="none", avg_w=None, pct_limit=None)
    out = q3_power(none, HW_CPU)
    assert out.findings == []
    assert "power_source none" in out.missing[0].text and "no GPU" in out.missing[0].text
    out = q3_power(None, HW_H200)
    assert out.findings == [] and "kernel-power stage has not run" in out.missing[0].text


def test_q3_gives_cold_and_expert_loops_their_own_ranges():
    rows = synthetic_power()
    cold = window("cold", 16, 470.0, 67.0, tensor=4.0)
    cold["dram_util"] = 56.0
    fused = window("graph", 512, 695.0, 99.3, clock=1700.0, reasons="sw_power_cap", tensor=48.0)
    fused.update(op="fused_moe", G=256, dram_util=66.0)
    out = q3_power(pd.concat([rows, pd.DataFrame([cold, fused])], ignore_index=True))
    loops = only(out, 3, "In the kernel loops")
    assert "their cold loops" in loops.text and "DRAM 56 %" in loops.text
    assert (
        loops.numbers["decode_cold_w_max"] == 470.0 and loops.numbers["decode_cold_dram_max"] == 56
    )
    assert "loops over 256 experts" in loops.text and loops.numbers["experts_w_max"] == 695.0
    # The 512-token MoE layer is not a prefill-sized GEMM, nor a decode-sized one.
    assert loops.numbers["prefill_w_max"] == 690.0


def test_q3_names_each_capped_window_once_with_its_dtype():
    # A BF16 and an FP8 loop of one op and size are two windows: both named, none merged.
    rows = []
    for dtype in ("bf16", "fp8_e4m3"):
        fused = window("graph", 32, 698.0, 99.7, clock=1790.0, reasons="sw_power_cap")
        fused.update(op="fused_moe", G=256, dtype=dtype)
        rows.append(fused)
    out = q3_power(pd.DataFrame(synthetic_power().to_dict("records") + rows))
    capped = only(out, 3, "power-capped")
    assert capped.numbers["capped"] == 4
    assert "torch·a fused_moe BF16 M = 32 graph, torch·a fused_moe FP8 M = 32 graph" in capped.text


def test_q3_under_use_sentence_is_scoped_to_single_gemms_and_names_capped_expert_loops():
    # A whole MoE layer at 32 tokens at its power cap is not a decode-sized GEMM window: the
    # under-use sentence counts single GEMMs only, and a second sentence names the expert loops.
    fused = window("graph", 32, 698.0, 99.7, clock=1790.0, reasons="sw_power_cap")
    fused.update(op="fused_moe", G=256)
    quiet = window("graph", 16, 420.0, 60.0)
    quiet.update(op="fused_moe", G=256)
    out = q3_power(pd.DataFrame(synthetic_power().to_dict("records") + [fused, quiet]), HW_H200)
    under = only(out, 3, "under-use")
    assert "decode-sized (M ≤ 64) single-GEMM loops" in under.text
    assert under.numbers["decode_throttled"] == 0 and under.numbers["decode_windows"] == 3
    experts = only(out, 3, "not low-power")
    assert experts.numbers == {"expert_small_capped": 1, "expert_small_windows": 2}
    assert "1 of 2 ran at the power cap, drawing 698 W" in experts.text


def test_q3_no_expert_sentence_without_capped_expert_loops():
    found = q3_power(synthetic_power(), HW_H200).findings
    assert not [f for f in found if "not low-power" in f.text]


def test_q3_cold_only_decode_loops_are_named_as_decode_sized():
    # A run with only cold loops at decode sizes (the step-model runs): the first clause names
    # the size itself, and no "no decode-sized window" note contradicts it.
    frame = pd.DataFrame([
        window("idle", w=82.0, pct=82 / 7, clock=345.0),
        window("cold", 16, 660.0, 94.0, clock=1800.0, reasons="sw_power_cap", tensor=6.0),
        window("cold", 64, 620.0, 88.5, tensor=30.0),
    ])  # fmt: skip
    out = q3_power(frame, HW_H200)
    loops = only(out, 3, "kernel loops")
    assert "(GPU power from NVML), decode-sized (M ≤ 64) cold loops (weights streamed" in loops.text
    assert "their cold loops" not in loops.text
    assert not [m for m in out.missing if "decode-sized" in m.text]
    assert only(out, 3, "partly throttling").numbers["decode_windows"] == 2
