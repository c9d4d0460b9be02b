"""Question 2 as answer rows (stages/sweep/sweep_bounds.py): launch cost, the roofline floor,
the share of the peak and flat eager time, judged at every size for the implementations
question 1 ranks first."""

import pytest
from studylib.core.answer_records import ANSWERED, NOT_MEASURED, UNDECIDED
from studylib.stages.sweep.sweep_answers import q1_answers
from studylib.stages.sweep.sweep_bounds import q2_answers
from test_sweep_answers import frame, one, pt

PEAKS = {"bf16_tflops": 800.0, "fp8_tflops": 1600.0, "copy_gbps": 4000.0}
DECODE = (1, 2, 8, 16)


def decode_rows(times: dict, ms=DECODE, floor=5.0) -> list[dict]:
    """{backend: (cold, graph, eager)} at every M of ``ms``."""
    return [pt(b, "x", m, cold=c, graph=g, eager=e, floor=floor)
            for m in ms for b, (c, g, e) in times.items()]  # fmt: skip


def test_q2_judges_the_implementations_q1_ranks_first():
    # Cold: b is fastest; eager: a is (b pays a long launch).
    rows = decode_rows({"a": (9.0, 6.0, 30.0), "b": (7.0, 5.0, 300.0)})
    sweep = frame(*rows)
    q1 = q1_answers(sweep)
    cold, eager = one(q1, "M 1–16 · cold"), one(q1, "M 1–16 · eager")
    assert (cold.verdict, eager.verdict) == ("b·x", "a·x")
    q2 = q2_answers(sweep, PEAKS)
    launch, floor = one(q2, "launch (eager)"), one(q2, "floor (cold)")
    assert launch.evidence.startswith(f"judged: {eager.verdict};")
    assert floor.evidence.startswith(f"judged: {cold.verdict};")
    assert "a·x spends" in launch.sentence and "b·x takes" in floor.sentence
    # a: (30 − 6) / 30 = 80 % launch at every size; b: 7 / 5 = 1.4× the floor.
    assert (launch.status, launch.verdict, launch.value) == (ANSWERED, "launch-bound", "80 %")
    assert (floor.status, floor.verdict, floor.value) == (ANSWERED, "memory-bound", "1.40×")
    assert launch.margin > launch.noise and floor.margin > floor.noise
    assert launch.lead and floor.lead


def test_a_judgement_never_rests_on_one_point():
    # 80 % launch everywhere but at M = 8, where a 51 % share is within noise of 50 %.
    rows = decode_rows({"a": (9.0, 6.0, 30.0)}, ms=(1, 2, 16))
    rows += [pt("a", "x", 8, cold=9.0, graph=14.7, eager=30.0, floor=5.0)]
    launch = one(q2_answers(frame(*rows), PEAKS), "launch (eager)")
    assert launch.status == UNDECIDED
    assert "within noise of 50 % at M = 8" in launch.sentence
    # Launch-bound at M 1–2 and plainly not at 8–16: a split, each side of two sizes.
    rows = decode_rows({"a": (9.0, 6.0, 30.0)}, ms=(1, 2))
    rows += decode_rows({"a": (9.0, 25.0, 30.0)}, ms=(8, 16))
    split = one(q2_answers(frame(*rows), PEAKS), "launch (eager)")
    assert (split.status, split.verdict) == (ANSWERED, "split")
    assert "launch-bound at M 1–2; not launch-bound at M 8–16" in split.sentence


def test_a_time_below_its_floor_is_outside_the_model_not_efficiency():
    rows = decode_rows({"a": (4.0, 3.0, 30.0)})
    floor = one(q2_answers(frame(*rows), PEAKS), "floor (cold)")
    assert floor.verdict == "outside the model (data in L2)"
    assert "efficien" not in floor.sentence and "0.80×" in floor.sentence


def test_prefill_share_of_peak_names_q1s_winners_per_size():
    flops = 2.0 * 4096 * 6144 * 2048
    rows = decode_rows({"a": (9.0, 6.0, 30.0), "b": (7.0, 5.0, 300.0)})
    rows += [pt("a", "x", 4096, cold=140.0, eager=150.0), pt("b", "x", 4096, cold=160.0,
                                                             eager=170.0)]  # fmt: skip
    rows += [pt("a", "x", 8192, cold=300.0, eager=310.0), pt("b", "x", 8192, cold=250.0,
                                                             eager=260.0)]  # fmt: skip
    sweep = frame(*rows)
    q1 = {a.subject: a.verdict for a in q1_answers(sweep)}
    assert q1["BF16 · down · M = 4096 · cold"] == "a·x"
    assert q1["BF16 · down · M = 8192 · cold"] == "b·x"
    peak = one(q2_answers(sweep, PEAKS), "share of peak")
    assert peak.verdict == "a·x at M = 4096; b·x at M = 8192"
    share = flops / 140e-6 / 1e12 / 800.0
    assert f"M=4096: a·x {100 * share:.0f} %" in peak.evidence
    no_peak = one(q2_answers(sweep, {"copy_gbps": 4000.0}), "share of peak")
    assert no_peak.status == NOT_MEASURED and "bf16_tflops" in no_peak.why


def test_flat_needs_two_consecutive_sizes_beyond_the_band():
    eager = {1: 30.0, 2: 31.0, 4: 60.0, 8: 31.0, 16: 32.0, 32: 70.0, 64: 90.0}
    rows = [pt("a", "x", m, cold=9.0, eager=t) for m, t in eager.items()]
    flat = one(q2_answers(frame(*rows), PEAKS), "eager flat")
    # M = 4 alone beyond 1.5× is an outlier; 32 and 64 both beyond it are the break.
    assert (flat.status, flat.verdict) == (ANSWERED, "flat to M = 16")
    assert "up to M = 16; 70.0 µs at M = 32 and after" in flat.sentence
    assert flat.margin > flat.noise


def test_flat_to_the_end_and_undecided_when_the_noise_hides_the_band():
    rows = [pt("a", "x", m, eager=30.0 + m / 100) for m in (1, 16, 64, 256)]
    flat = one(q2_answers(frame(*rows), PEAKS), "eager flat")
    assert (flat.status, flat.verdict) == (ANSWERED, "flat to M = 256")
    noisy = [pt("a", "x", m, eager=t, iqr=0.5) for m, t in ((1, 30.0), (16, 46.0), (64, 47.0))]
    flat = one(q2_answers(frame(*noisy), PEAKS), "eager flat")
    assert flat.status == UNDECIDED and "no break beyond noise" in flat.verdict


def test_cpu_run_has_no_launch_or_floor_judgement():
    rows = [pt(b, "x", m, eager=t, floor=5.0) for m in DECODE for b, t in (("a", 30.0),
                                                                          ("b", 40.0))]  # fmt: skip
    q2 = q2_answers(frame(*rows), PEAKS)
    launch, floor = one(q2, "launch"), one(q2, "floor")
    assert launch.status == NOT_MEASURED and "CUDA graphs need a GPU" in launch.why
    assert floor.status == NOT_MEASURED
    assert one(q2, "eager flat · a·x").status == ANSWERED


def test_no_sweep_is_not_measured():
    (row,) = q2_answers(None)
    assert row.status == NOT_MEASURED and row.lead
    (row,) = q1_answers(None)
    assert row.status == NOT_MEASURED and row.lead


@pytest.mark.parametrize("question", [q1_answers, q2_answers])
def test_subjects_are_unique(question):
    rows = decode_rows({"a": (9.0, 6.0, 30.0), "b": (7.0, 5.0, 300.0)}, ms=(1, 2, 8, 128, 4096))
    rows += [pt("a", "x", m, cold=9.0, eager=30.0, shape="qkv") for m in (1, 16)]
    subjects = [a.subject for a in question(frame(*rows))]
    assert len(subjects) == len(set(subjects))
