"""Question 6 as answers (step_model_answers): the step model explains TPOT only within its
tolerance by more than TPOT's noise; no part of a step is stated larger than the step it is
part of (checked on every committed example's step model); the host-time rows decide a gap
as question 5 does."""

import re

import pandas as pd
import pytest
from helpers import ROOT
from studylib.core.answer_records import ANSWERED, NOT_MEASURED, TIE, UNDECIDED
from studylib.core.verdicts import NOISE_FLOOR
from studylib.stages.decode.decode_answers import decode_answers
from studylib.stages.step_model.step_model_answers import step_answers, step_points
from studylib.stages.step_model.step_model_build import (
    MODEL_COMPONENTS,
    PROFILE_STEP_TOLERANCE,
    measured_parts,
)
from studylib.stages.step_model.step_model_figure import NOT_PROFILED, step_frames

EXAMPLES = ROOT / "examples"
#: Those that predicted a step (h100-2026-12-06-whole's sweep lost the FP8 MoE kernels to
#: memory: every row says what is missing, and its Q6 that it is not measured).
STEP_MODELS = sorted(path for path in EXAMPLES.glob("**/tables/step_model.csv")
                     if pd.read_csv(path)["predicted_step_us"].notna().any())  # fmt: skip
#: How an answer states a part against its step ("0.60 ms of the 10.13 ms measured step").
PART_OF_STEP = re.compile(r"(\d+\.\d+) ms of (?:the|a|its) (\d+\.\d+) ms (?:\w+ )?step")


def table(variant: str, c: int, tpot_us: float, predicted: dict, measured: dict | None,
          graphs: bool = True) -> list[dict]:  # fmt: skip
    """One variant and C of the step-model table (balanced routing)."""
    return [{"variant": variant, "weights": "bf16", "cuda_graphs": graphs, "concurrency": c,
             "routing": "balanced", "component": name, "predicted_us": predicted.get(name, 0.0),
             "measured_us": (measured or {}).get(name, float("nan")),
             "predicted_step_us": sum(predicted.values()), "tpot_us": tpot_us,
             "measured_basis": "profile" if measured else "TPOT - predicted kernels",
             "predicted_j_per_token": float("nan"), "j_per_token": float("nan")}
            for name in MODEL_COMPONENTS]  # fmt: skip


def by_subject(answers) -> dict:
    return {a.subject: a for a in answers}


@pytest.mark.parametrize(("predicted_ms", "status", "verdict"), [
    (1.10, ANSWERED, "explained"),      # +10 %: within ±20 % by 10 % > 3 %
    (1.18, UNDECIDED, "undecided"),     # +18 %: within by 2 %, not beyond the 3 % noise
    (1.22, UNDECIDED, "undecided"),     # +22 %: outside by 2 %, not beyond it either
    (1.30, ANSWERED, "not explained"),  # +30 %
])  # fmt: skip
def test_explained_only_beyond_the_noise(predicted_ms, status, verdict):
    rows = table("v", 16, 1000.0, {"moe": 1e3 * predicted_ms}, None)
    row = by_subject(step_answers(pd.DataFrame(rows)))["v · C = 16"]
    assert (row.status, row.verdict) == (status, verdict)
    assert row.noise == pytest.approx(0.03) and row.noise_from == "TPOT: 3 % floor"


def test_a_profile_longer_than_tpot_keeps_its_kernels_and_no_part_exceeds_the_step():
    # The H200's FP8 C = 1 without graphs: a profiled step of 11.61 ms (10.46 ms of it idle
    # or unmodelled) against TPOT 10.13 ms. Stated as 10.46 ms "per step" it exceeded the step.
    profile = {"moe": 605.0, "attention": 37.4, "dense": 510.4, "other": 10458.2}
    rows = table("v-eager", 1, 10131.3, {"moe": 689.5, "other": 2868.3}, profile, graphs=False)
    rows += table("v-graphs", 1, 1405.8, {"moe": 689.5}, None)
    answers = step_answers(pd.DataFrame(rows))
    host = by_subject(answers)["host time · BF16 · C = 1"]
    assert "Idle or unmodelled: 8.98 ms of the 10.13 ms measured step." in host.sentence
    point = step_points(pd.DataFrame(rows)).set_index("variant").loc["v-eager"]
    assert point["measured_us"] == pytest.approx(10131.3)
    assert point["measured"]["other"] == pytest.approx(10131.3 - 605.0 - 37.4 - 510.4)
    # a profile within the noise floor of TPOT stands whole
    rows = table("v", 16, 1000.0 * 11.61 / 11.61, {"moe": 900.0}, {"moe": 700.0, "other": 320.0})
    point = step_points(pd.DataFrame(rows)).iloc[0]
    assert 1020.0 / 1000.0 - 1 <= PROFILE_STEP_TOLERANCE
    assert point["measured"]["other"] == pytest.approx(320.0)


def test_the_host_gap_is_decided_as_question_5_decides_it():
    # Graphs off 2 % slower than on at C = 64: question 5 calls that a tie; no host row.
    rows = table("v-graphs", 64, 10000.0, {"moe": 9800.0}, None)
    rows += table("v-eager", 64, 10200.0, {"moe": 9800.0}, None, graphs=False)
    rows += table("v-graphs", 1, 1400.0, {"moe": 700.0}, None)
    rows += table("v-eager", 1, 10000.0, {"moe": 700.0, "other": 8000.0}, None, graphs=False)
    answers = by_subject(step_answers(pd.DataFrame(rows)))
    assert "host time · BF16 · C = 64" not in answers
    summary = answers["host time · BF16"]
    assert summary.lead and "tie at C = 64" in summary.sentence
    gap = answers["host time · BF16 · C = 1"]
    # 8.6 ms gap, 8.0 ms predicted: −7 %, within ±25 % beyond the gap's noise
    assert gap.status == ANSWERED and gap.verdict == "explained"
    decode = pd.DataFrame(
        [
            {
                "engine": "sglang",
                "variant": v,
                "weights": "bf16",
                "cuda_graphs": g,
                "concurrency": c,
                "gpus": 1,
                "valid": True,
                "output_tok_s": 1e6 * c / t,
                "tpot_ms": t / 1e3,
            }
            for v, g, c, t in (
                ("v-graphs", True, 64, 10000.0),
                ("v-eager", False, 64, 10200.0),
                ("v-graphs", True, 1, 1400.0),
                ("v-eager", False, 1, 10000.0),
            )
        ]
    )
    q5 = by_subject(decode_answers(decode))
    assert q5["CUDA graphs · BF16 · C = 64"].status == TIE
    assert q5["CUDA graphs · BF16 · C = 1"].status == ANSWERED


def test_no_step_model_is_said():
    (row,) = step_answers(None)
    assert row.status == NOT_MEASURED and row.lead


@pytest.mark.parametrize("path", STEP_MODELS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_no_part_exceeds_its_step_in_any_example(path):
    """Every committed example's step model: each measured part within its measured step,
    that step within the noise floor of TPOT (or made of kernels alone), every sentence that
    states a part of a step with the part no larger than the step, and the figure's measured
    bars the same parts."""
    step_model = pd.read_csv(path)
    decode_csv = path.parent / "decode.csv"
    decode = pd.read_csv(decode_csv) if decode_csv.is_file() else None
    points = step_points(step_model)
    assert len(points)
    for _, p in points.iterrows():
        if not p["measured"]:
            continue
        kernels = sum(us for name, us in p["measured"].items() if name != "other")
        assert all(0 <= us <= p["measured_us"] + 1e-6 for us in p["measured"].values())
        assert p["measured_us"] <= max(p["tpot_us"] * (1 + NOISE_FLOOR),
                                       kernels) + 1e-6  # fmt: skip
    answers = step_answers(step_model, decode)
    stated = [m for a in answers for m in PART_OF_STEP.findall(a.sentence)]
    # (run 8's table has no profile: no part of a step is measured, none stated)
    assert bool(stated) == any(bool(m) for m in points["measured"])
    for part, step in stated:
        assert float(part) <= float(step), (part, step)
    shares = [float(s) for a in answers for s in re.findall(r"(\d+) % of the measured step",
                                                            a.sentence)]  # fmt: skip
    assert all(s <= 100 for s in shares)
    bars, _ = step_frames(step_model)
    measured = bars[(bars["bar"] == "measured") & (bars["component"] != NOT_PROFILED)]
    for (variant, c), g in measured.groupby(["variant", "concurrency"]):
        p = points[(points["variant"] == variant) & (points["concurrency"] == c)]
        if p.empty:
            # Profiled, not predicted (the sweep lacked a part at this C: 512 before
            # 2026-12-04): the figure shows the profile, the answers judge no prediction.
            rows = step_model[(step_model["variant"] == variant)
                              & (step_model["concurrency"] == c)
                              & (step_model["routing"] == "balanced")]  # fmt: skip
            assert rows["predicted_step_us"].isna().all()
            assert g["ms"].sum() == pytest.approx(sum(measured_parts(rows).values()) / 1e3)
            continue
        assert g["ms"].sum() == pytest.approx(p.iloc[0]["measured_us"] / 1e3)


def test_the_step_model_examples_answers():
    folder = EXAMPLES / "h200-2026-12-01-step-model" / "tables"
    answers = step_answers(
        pd.read_csv(folder / "step_model.csv"), pd.read_csv(folder / "decode.csv")
    )
    rows = by_subject(answers)
    assert [a.subject for a in answers if a.lead] == [
        "step model · graphs on", "host time · FP8", "host time · BF16"]  # fmt: skip
    assert rows["step model · graphs on"].sentence.startswith(
        "With CUDA graphs at C ≥ 16 the model explains TPOT within ±20 % at 5 of 6 points"
    )
    assert rows["sglang-bf16-graphs · C = 16"].sentence == (
        "Predicted 9.52 ms against TPOT 8.77 ms (+9 %): explained within ±20 %. The fused MoE "
        "takes 7.96 ms of the 8.81 ms measured step."
    )
    assert rows["sglang-bf16-graphs · C = 1"].status == UNDECIDED  # −23 %: 3 % past ±20 %
    assert rows["component · moe"].verdict == "within (16 of 16)"


def test_the_lead_row_lists_its_missed_and_undecided_points_apart():
    # The whole default on an H200 (2026-12-06): one point beyond ±20 % and three within
    # their noise of it; the three are undecided, not misses, and the sentence says which.
    folder = EXAMPLES / "h200-2026-12-06-default" / "tables"
    answers = step_answers(
        pd.read_csv(folder / "step_model.csv"), pd.read_csv(folder / "decode.csv")
    )
    lead = by_subject(answers)["step model · graphs on"]
    assert lead.verdict == "explained at 4 of 8, not explained at 1 of 8, undecided at 3"
    assert (
        "at 4 of 8 points (not explained: sglang-fp8-graphs C = 512 (−24 %); undecided: "
        "sglang-bf16-graphs C = 256 (−18 %), sglang-bf16-graphs C = 512 (−20 %), "
        "sglang-fp8-graphs C = 256 (−21 %));"
    ) in lead.sentence


def test_tpot_past_the_profiled_step_is_said_with_the_model_against_that_step():
    """The H100's FP8 at C = 512 (2026-12-06): TPOT 22.91 ms, the profiled decode step 18.47
    ms, the model 17.64 ms. Undecided against TPOT, the answer says the 4.44 ms a token outside
    the steps the profile timed, and that the model is within 5 % of the step itself."""
    profile = {"moe": 14100.0, "attention": 2600.0, "dense": 1200.0, "other": 570.0}
    rows = table("v", 512, 22910.0, {"moe": 14000.0, "attention": 2500.0, "dense": 1140.0},
                 profile)  # fmt: skip
    row = by_subject(step_answers(pd.DataFrame(rows)))["v · C = 512"]
    assert row.verdict == "not explained"
    assert (
        "; TPOT runs +24 % past it, 4.44 ms a token outside the decode steps the profile timed"
    ) in row.sentence
    assert "against the profiled step the model is −4 %." in row.sentence
    # A TPOT within its noise of the profiled step: nothing said.
    rows = table("v", 64, 1.02 * 18470.0, {"moe": 14000.0}, profile)
    assert "runs" not in by_subject(step_answers(pd.DataFrame(rows)))["v · C = 64"].sentence


def test_the_lead_row_names_where_tpot_runs_past_the_profiled_step():
    profile = {"moe": 14100.0, "attention": 2600.0, "dense": 1200.0, "other": 570.0}
    rows = table("v", 512, 22910.0, {"moe": 14000.0, "attention": 2500.0, "dense": 1140.0},
                 profile)  # fmt: skip
    rows += table("v", 16, 18470.0, {"moe": 14000.0, "attention": 2500.0, "dense": 1140.0},
                  profile)  # fmt: skip
    lead = step_answers(pd.DataFrame(rows))[0]
    assert lead.subject == "step model · graphs on"
    assert lead.sentence.endswith("; TPOT runs past the profiled decode step at v C = 512 "
                                  "(+24 %), where the model is −4 % from that step.")  # fmt: skip
