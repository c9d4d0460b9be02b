"""Question 3 (stages/kernel_power) as answer rows: each group of loop windows decided from its
windows' limit (never from one window; a clock drop counts only beyond its noise), from
synthetic window tables and the committed H200 examples."""

import json

import pandas as pd
import pytest
from findings_frames import HW_CPU, HW_H200, synthetic_power, window
from helpers import ROOT
from studylib.core.answer_records import ANSWERED, NOT_MEASURED, UNDECIDED
from studylib.core.verdicts import NOISE_FLOOR
from studylib.stages.kernel_power.kernel_power_answers import (
    ALL_MODES,
    ENERGY_CHECK,
    EXPERTS_DECODE,
    GPU_CHECK,
    decide_group,
    kernel_power_answers,
    power_groups,
)
from studylib.stages.kernel_power.window_classes import (
    CLOCK_NOISE,
    FULL_CLOCK,
    POWER_CAPPED,
    THERMAL,
    classify_windows,
    window_limit,
)

DECODE_EAGER = "decode-sized GEMMs · M ≤ 64 · eager"
DECODE_GRAPH = "decode-sized GEMMs · M ≤ 64 · graph"
PREFILL = "prefill-sized GEMMs · M ≥ 4096"
KERNELS = ROOT / "examples" / "h200-2026-12-01-kernels" / "run14-15"
STEP = ROOT / "examples" / "h200-2026-12-01-step-model"


def by_subject(answers) -> dict:
    subjects = [a.subject for a in answers]
    assert len(subjects) == len(set(subjects)), subjects
    return {a.subject: a for a in answers}


def expert(mode, m, w, clock=1980.0, reasons="", dtype="bf16", impl="a"):
    row = window(mode, m, w, 100 * w / 700, clock=clock, reasons=reasons, impl=impl)
    row.update(op="fused_moe", G=256, dtype=dtype, window=f"{impl}/{dtype}/{m}/{mode}")
    return row


def test_under_use_and_power_capped_on_synthetic_windows():
    rows = by_subject(kernel_power_answers(synthetic_power(), HW_H200))
    eager = rows[DECODE_EAGER]
    # two decode-sized eager windows at full clock, 21–30 % of the limit: under-use, with the
    # headroom to the limit as the margin over the watts' noise
    assert (eager.status, eager.verdict) == (ANSWERED, "under-use")
    assert eager.value == "150–210 W (21–30 % of 700 W)"
    assert eager.margin == pytest.approx(0.70) and eager.noise == NOISE_FLOOR
    assert "under-use, not throttling" in eager.sentence
    # the M = 4096 windows report sw_power_cap and clock 4 % and 29 % below 1980 MHz
    prefill = rows[PREFILL]
    assert (prefill.status, prefill.verdict) == (ANSWERED, POWER_CAPPED)
    assert prefill.margin == pytest.approx(1 - 1900 / 1980) and prefill.noise == CLOCK_NOISE
    assert "the clock held 4–29 % below its maximum" in prefill.sentence
    # idle is a baseline, no verdict on limits
    assert rows["idle"].verdict == "idle" and rows["idle"].value == "80 W (11 % of 700 W)"
    # decode-sized loops of every mode lead the first screen (eager and graph ran)
    assert [a.subject for a in rows.values() if a.lead] == [ALL_MODES]
    assert rows[ALL_MODES].verdict == "under-use" and rows[ALL_MODES].points == 3
    # the unsupported window has no power: in no group
    assert sum(a.points for s, a in rows.items() if s.startswith("decode-sized") and
               s != ALL_MODES) == 3  # fmt: skip


def test_a_group_verdict_never_rests_on_one_window():
    rows = by_subject(kernel_power_answers(synthetic_power(), HW_H200))
    graph = rows[DECODE_GRAPH]  # one window at full clock, half the limit
    assert (graph.status, graph.verdict) == (UNDECIDED, UNDECIDED)
    assert "one window" in graph.why and "one window" in graph.sentence
    # one loop on two GPUs at once is still one window
    one = pd.DataFrame([dict(window("graph", 16, 350.0, 50.0), window="w", gpu=g, gpus_running=2)
                        for g in (0, 1)])  # fmt: skip
    group = decide_group("g", classify_windows(one, HW_H200))
    assert group.status == UNDECIDED and "one window" in group.why
    # two windows, only one of which decides: still no verdict
    two = pd.DataFrame([dict(window("graph", 16, 350.0, 50.0), window="a"),
                        dict(window("graph", 64, 360.0, 51.0, clock=1960.0,
                                    reasons="sw_power_cap"), window="b")])  # fmt: skip
    group = decide_group("g", classify_windows(two, HW_H200))
    assert group.status == UNDECIDED and "only 1 of 2 windows decided" in group.why


def test_a_clock_drop_within_noise_is_not_throttling():
    top = {"max_sm_clock_mhz": 1980.0, "status": "ok", "power_source": "nvml", "mode": "graph"}
    # sw_power_cap with the clock 1.5 % below its maximum: within the 3 % noise, no verdict
    limit, why = window_limit({**top, "sm_clock_mhz": 1950.0, "throttle_reasons": "sw_power_cap"})
    assert limit == UNDECIDED and "within 3 % of the maximum" in why
    # beyond the noise it is power-capped; a thermal reason names the thermal limit
    assert window_limit({**top, "sm_clock_mhz": 1900.0,
                         "throttle_reasons": "sw_power_cap"})[0] == POWER_CAPPED  # fmt: skip
    assert window_limit({**top, "sm_clock_mhz": 1500.0,
                         "throttle_reasons": "sw_thermal_slowdown"})[0] == THERMAL  # fmt: skip
    # a clock below its maximum with no reason is not throttling either
    limit, why = window_limit({**top, "sm_clock_mhz": 1500.0, "throttle_reasons": ""})
    assert limit == UNDECIDED and "no limit reason" in why
    # no maximum to hold the clock against: undecided, never called throttled
    no_max = {k: v for k, v in top.items() if k != "max_sm_clock_mhz"}
    capped = {"sm_clock_mhz": 1500.0, "throttle_reasons": "sw_power_cap"}
    limit, why = window_limit({**no_max, **capped})
    assert limit == UNDECIDED and "no maximum SM clock" in why
    assert window_limit({**top, "sm_clock_mhz": 1975.0, "throttle_reasons": ""})[0] == FULL_CLOCK
    # a group whose capped windows all sit within the noise of the maximum: no verdict
    frame = pd.DataFrame([expert("graph", m, 698.0, clock=1950.0, reasons="sw_power_cap")
                          for m in (16, 32, 64)])  # fmt: skip
    rows = by_subject(kernel_power_answers(frame, HW_H200))
    assert rows["expert loops · BF16 · M ≤ 64"].status == UNDECIDED


def test_windows_that_disagree_leave_the_group_undecided():
    frame = pd.DataFrame([
        expert("graph", 512, 670.0),  # full clock, no reason
        expert("eager", 512, 672.0),
        expert("graph", 512, 695.0, clock=1500.0, reasons="sw_power_cap", impl="b"),
        expert("graph", 32, 698.0, clock=1700.0, reasons="sw_power_cap", dtype="fp8_e4m3"),
        expert("graph", 64, 699.0, clock=1650.0, reasons="sw_power_cap", dtype="fp8_e4m3"),
    ])  # fmt: skip
    rows = by_subject(kernel_power_answers(frame, HW_H200))
    bf16 = rows["expert loops · BF16 · M > 64"]
    assert bf16.status == UNDECIDED and "disagree: 2 at full clock, 1 power-capped" in bf16.why
    fp8 = rows["expert loops · FP8 · M ≤ 64"]
    assert fp8.verdict == POWER_CAPPED and fp8.lead  # the only dtype at decode sizes leads
    assert EXPERTS_DECODE not in rows
    # no single-GEMM decode loop: said so, as a lead row
    missing = rows["decode-sized GEMMs · M ≤ 64"]
    assert missing.status == NOT_MEASURED and missing.lead


def test_under_use_needs_headroom_beyond_the_watts_noise():
    # full clock and no reason, but at 99 % of the limit: not "under-use"
    frame = pd.DataFrame([window("cold", m, 693.0, 99.0, gap=0.2) for m in (16, 64)])
    frame["window"] = ["a", "b"]
    (cold,) = [a for a in kernel_power_answers(frame, HW_H200) if a.subject.endswith("cold")]
    assert cold.status == UNDECIDED and "within its noise of the power limit" in cold.why
    # the energy gap is the watts' noise where it is larger than the floor
    frame["energy_gap_pct"] = [5.0, -2.0]
    frame["pct_limit"] = [94.0, 96.0]
    (cold,) = [a for a in kernel_power_answers(frame, HW_H200) if a.subject.endswith("cold")]
    assert cold.status == UNDECIDED and cold.noise != cold.noise  # no verdict, no margin
    frame["pct_limit"] = [80.0, 90.0]
    (cold,) = [a for a in kernel_power_answers(frame, HW_H200) if a.subject.endswith("cold")]
    assert cold.verdict == "under-use" and cold.noise == pytest.approx(0.05)


def test_missing_table_or_power_is_not_measured():
    (row,) = kernel_power_answers(None, HW_H200)
    assert row.status == NOT_MEASURED and "kernel-power stage has not run" in row.why
    (row,) = kernel_power_answers(None, HW_CPU)
    assert "no GPU" in row.why
    none = synthetic_power().assign(power_source="none", avg_w=None, pct_limit=None)
    (row,) = kernel_power_answers(none, HW_CPU)
    assert row.status == NOT_MEASURED and row.lead and "no power was measured" in row.why


def test_checks_energy_and_gpus_side_by_side():
    rows = []
    for gpu, scale in ((0, 1.0), (1, 0.9)):
        for rec in synthetic_power().to_dict("records"):
            rec.update(gpu=gpu, gpus_running=0 if rec["mode"] == "idle" else 2,
                       window=f"{rec['mode']}/{rec['M']}/{rec['impl']}")  # fmt: skip
            if rec["avg_w"] is not None and rec["mode"] != "idle":
                rec["avg_w"] *= scale
            rows.append(rec)
    answers = by_subject(kernel_power_answers(pd.DataFrame(rows), HW_H200))
    assert "Each loop ran on 2 GPUs at once" in answers[GPU_CHECK].sentence
    assert answers[GPU_CHECK].value == "median 10.0 %, max 10.0 %"
    energy = answers[ENERGY_CHECK]
    assert energy.value == "≤ 0.8 %" and "agree within 0.8 %" in energy.sentence
    # the graph window ran on two GPUs: one window, so still no verdict
    assert answers[DECODE_GRAPH].status == UNDECIDED
    assert GPU_CHECK not in by_subject(kernel_power_answers(synthetic_power(), HW_H200))


def _example(windows, hardware) -> tuple[dict, pd.DataFrame]:
    hw = json.loads(hardware.read_text())
    frame = pd.read_csv(windows)
    return by_subject(kernel_power_answers(frame, hw)), classify_windows(frame, hw)


def test_kernels_example_rows_against_its_windows_table():
    rows, table = _example(KERNELS / "kernel_power" / "windows.csv", KERNELS / "hardware.json")
    for group in power_groups(table):
        answer = rows[group.subject]
        assert answer.verdict == group.verdict and answer.points == len(group.rows)
    # every decode-sized single GEMM at full clock with no reason: under-use
    decode = table[table["group"].str.startswith("decode-sized")]
    assert set(decode["limit"]) == {FULL_CLOCK} and len(decode) == 6
    assert rows[ALL_MODES].verdict == "under-use" and rows[ALL_MODES].lead
    assert rows[ALL_MODES].value == "173–476 W (25–68 % of 700 W)"
    # the expert loops at decode sizes: capped, the grouped GEMM at 1950 MHz set aside
    experts = rows[EXPERTS_DECODE]
    assert experts.verdict == POWER_CAPPED and experts.lead
    assert "1 undecided window set aside" in experts.sentence
    aside = table[
        (table["group"] == "expert loops · BF16 · M ≤ 64") & (table["limit"] == UNDECIDED)
    ]
    assert list(aside["sm_clock_mhz"]) == [1950.0]
    # BF16 MoE layers at 512 tokens: Triton at full clock, the others capped: no verdict
    assert rows["expert loops · BF16 · M > 64"].status == UNDECIDED


def test_step_model_example_rows_against_its_windows_table():
    hardware = ROOT / "examples" / "h200-2026-12-01-kernels" / "hardware.json"
    rows, table = _example(STEP / "tables" / "kernel_power.csv", hardware)
    cold = rows["decode-sized GEMMs · M ≤ 64 · cold"]
    # FP8 qkv at M = 16 at full clock, M = 64 capped; lm_head M = 16 reports sw_power_cap at
    # its maximum clock (undecided): the windows disagree
    assert cold.status == UNDECIDED and cold.lead
    assert "1 at full clock, 2 power-capped, 1 undecided" in cold.why
    assert rows["expert loops · FP8 · M ≤ 64"].verdict == POWER_CAPPED
    assert "one window" in rows["expert loops · FP8 · M > 64"].why
    assert len(table[table["group"] != ""]) == 9
