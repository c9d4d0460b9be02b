"""The study's answers as a whole (study_answers.compute_answers): the seed rows and the
answers they cite, missing inputs giving `not measured here` rows with why (never an
exception), this machine's expected gaps said as such, the study tables read, and the rows of
real H200 / CPU results."""

from pathlib import Path

import pandas as pd
import pytest
from findings_frames import (
    HW_CPU,
    HW_H200,
    PEAKS,
    sglang_decode,
    synthetic_decode,
    synthetic_power,
    synthetic_sweep,
)
from helpers import ROOT
from studylib.core.answer_records import ANSWERED, NOT_MEASURED, TIE, UNDECIDED, Answer
from studylib.seed_comparison import (
    EXPERTS,
    FP4,
    POWER,
    SEED,
    SGL_FP4,
    decode_sized,
    seed_answers,
)
from studylib.stages.kernel_power.kernel_power_answers import ALL_MODES, kernel_power_answers
from studylib.study_answers import QUESTIONS, compute_answers
from studylib.study_tables import StudyTables

H200 = ROOT / "examples" / "h200x2-2026-11-29"  # a real run


CPU = Path("/tmp/freshclone2/results")


HW_BLACKWELL = {
    "device": "cuda",
    "gpus": [{"name": "NVIDIA RTX PRO 6000 Blackwell", "compute_capability": "12.0",
              "power_limit_w": 600.0, "max_sm_clock_mhz": 2600}],
}  # fmt: skip


def seed_rows(answers) -> dict:
    return {a.subject: a for a in answers if a.question == "seed"}


def test_seed_rows_agree_with_the_q3_rows_they_cite():
    tables = StudyTables(HW_H200, PEAKS, synthetic_sweep(), kernel_power=synthetic_power(),
                         decode=synthetic_decode())  # fmt: skip
    answers = compute_answers(tables)
    seed = seed_rows(answers)
    assert [a.question for a in answers][-len(seed) :] == ["seed"] * len(seed)
    (q3,) = [a for a in answers if a.question == 3 and a.subject == ALL_MODES]
    power = seed[POWER]
    # decode ran at C = 16 and 64, not the seed's 512 (the C = 256 run is not valid): the most
    # requests in flight here stand in, said as such
    assert power.status == ANSWERED and power.basis == "decode.csv" and power.lead
    assert power.sentence.startswith("Here decode at C = 64, the most requests in flight here "
                                     "(the seed's: 512) draws ")  # fmt: skip
    assert power.sentence.endswith("per GPU, against the seed's 235 W of 600 W.")
    # without a decode table, question 3's decode-sized loops stand in, with the same number,
    # verdict and status
    no_decode = compute_answers(StudyTables(HW_H200, PEAKS, synthetic_sweep(),
                                            kernel_power=synthetic_power()))  # fmt: skip
    power = seed_rows(no_decode)[POWER]
    assert (power.value, power.verdict, power.status) == (q3.value, q3.verdict, q3.status)
    assert power.value == "150–350 W (21–50 % of 700 W)" and power.lead
    assert power.sentence == (f"Decode at C = 512 was not measured here; decode-sized GEMM loops "
                              f"draw {q3.value}: under-use (Q3).")  # fmt: skip
    # an H200 has no FP4 tensor cores: both FP4 claims are not measured here, and say why
    for subject in (FP4, SGL_FP4):
        assert seed[subject].status == NOT_MEASURED
        assert seed[subject].why == "FP4 tensor-core GEMMs need sm_100 or sm_120; this GPU is sm_90"
    gpus = seed["GPUs"]
    assert gpus.sentence == (
        "The seed ran on 8× NVIDIA RTX PRO 6000 Blackwell (sm_120, 600 W each); this machine "
        "has 1× NVIDIA H200 (sm_90, 700 W each)."
    )
    assert gpus.value == "700 W vs 600 W"


def test_seed_power_row_follows_an_undecided_q3_row():
    q3 = Answer(3, ALL_MODES, UNDECIDED, verdict=UNDECIDED, value="619–696 W (88–99 % of 700 W)",
                lead=True, why="the windows disagree")  # fmt: skip
    power = seed_rows(seed_answers(StudyTables(HW_H200, PEAKS), [q3]))[POWER]
    assert power.status == UNDECIDED and power.value == q3.value
    assert "no verdict (Q3)" in power.sentence
    # nothing to stand in: not measured here
    power = seed_rows(seed_answers(StudyTables(HW_H200, PEAKS)))[POWER]
    assert power.status == NOT_MEASURED and "nor decode-sized kernel loops" in power.why


def test_seed_power_at_the_seeds_concurrency_reads_decode_graphs_off_first():
    decode = sglang_decode()
    decode.loc[decode["concurrency"] == 64, "concurrency"] = SEED["decode_concurrency"]
    power = seed_rows(seed_answers(StudyTables(HW_H200, PEAKS, decode=decode)))[POWER]
    # graphs off at C = 512: bf16 250 W, fp8 240 W (graphs on drew 280–300 W)
    assert power.status == ANSWERED and power.value == "240–250 W (34–36 % of the limit)"
    # the verdict: this machine's share of its limit beside the seed's (235 of 600 W), not the
    # watts the number column holds again
    assert power.verdict == "34–36 % of the limit (seed: 39 %)"
    assert "decode at C = 512 draws 240–250 W" in power.sentence
    assert "with CUDA graphs off, as the seed ran" in power.sentence
    assert power.evidence == "sglang-bf16-eager, sglang-fp8-eager"


def test_seed_fp4_rows_on_a_blackwell_gpu_cite_question_1_and_the_sweep():
    before = [
        Answer(1, "FP4 · down · M 1–64 · cold", ANSWERED, verdict="flashinfer·cutlass",
               value="8.0–9.0 µs"),
        Answer(1, "FP4 · down · M 4096–8192 · cold", ANSWERED, value="100–150 µs"),
        Answer(1, "BF16 · down · M 1–64 · cold", TIE, value="6.0–9.0 µs"),
    ]  # fmt: skip
    rows = seed_rows(seed_answers(StudyTables(HW_BLACKWELL, PEAKS, synthetic_sweep()), before))
    fp4 = rows[FP4]
    # the decode-sized FP4 row's number, never the prefill one's
    assert fp4.status == ANSWERED and fp4.value == "8.0–9.0 µs"
    assert "take 8.0–9.0 µs (Q1), against the seed's 30–42 µs" in fp4.sentence
    assert fp4.evidence == "Q1 FP4 · down · M 1–64 · cold: 8.0–9.0 µs"
    sgl = rows[SGL_FP4]
    # fails at M 16 and 64; graph times 12/10, 90/100, 200/150 against FlashInfer's: slower at
    # two sizes, faster at one, each beyond the 3 % floor
    assert sgl.status == ANSWERED
    assert sgl.verdict == (
        "fails at M 16–64, runs at M 256–8192; slower than FlashInfer's mm_fp4 at 2, faster "
        "at 1, tied at 0 of 3 shared sizes (graph)"
    )
    # without a decode-sized FP4 answer in question 1: not measured, with question 1's why
    why = Answer(1, "FP4", NOT_MEASURED, why="no FP4 point ran")
    fp4 = seed_rows(seed_answers(StudyTables(HW_BLACKWELL, PEAKS), [why]))[FP4]
    assert fp4.status == NOT_MEASURED and fp4.why == "no FP4 point ran"


def test_decode_sized_subjects():
    assert decode_sized("FP4 · down · M 1–64 · cold") and decode_sized("BF16 · M ≤ 64")
    assert decode_sized("FP8 · M = 16 · eager")
    assert not decode_sized("FP4 · down · M 1–4096") and not decode_sized("FP4 · prefill")


def test_seed_experts_row_cites_question_4_or_reads_the_largest_concurrency():
    q4 = Answer(4, "sglang-bf16-graphs · C = 256", ANSWERED, verdict="near balance",
                value="M 7.7–8.2 against a balanced 8", lead=True)  # fmt: skip
    row = seed_rows(seed_answers(StudyTables(HW_H200, PEAKS), [q4]))[EXPERTS]
    assert (row.value, row.verdict, row.status) == (q4.value, q4.verdict, q4.status)
    # no such row: the same table question 4 reads, at its largest concurrency
    em = pd.DataFrame({"variant": "v", "concurrency": [8, 8, 64, 64], "m": [1.0, 3.0, 7.0, 9.0],
                       "balanced_m": [2.0, 2.0, 8.0, 8.0]})  # fmt: skip
    row = seed_rows(seed_answers(StudyTables(HW_H200, PEAKS, expert_m=em)))[EXPERTS]
    assert row.value == "M 7–9 at C = 64"
    assert row.sentence == ("The seed assumed 16 tokens per expert at C = 512; here per-expert "
                            "M is 7–9 at C = 64 against a balanced 8.")  # fmt: skip
    missing = seed_rows(seed_answers(StudyTables(HW_H200, PEAKS)))[EXPERTS]
    assert missing.status == NOT_MEASURED
    # random weights: the routing behind the numbers is said (uniform: balanced by design)
    for routing, caveat in (("uniform", "balanced by construction"), ("", "not a trained")):
        decode = sglang_decode().assign(routing=routing)
        row = seed_rows(seed_answers(StudyTables(HW_H200, PEAKS, decode=decode, expert_m=em)))
        assert caveat in row[EXPERTS].why


def test_seed_on_cpu():
    rows = seed_rows(seed_answers(StudyTables(HW_CPU, {"device": "cpu"})))
    assert "no GPU (CPU: Xeon, 2 cores)" in rows["GPUs"].sentence
    assert rows[FP4].why == "this machine has no GPU" == rows[SGL_FP4].why
    assert {a.status for s, a in rows.items() if s != "GPUs"} == {NOT_MEASURED}


def test_seed_constants_are_the_seed_texts():
    seed = ROOT / ".." / "shared" / "seed" / "fp4-power-pivot.txt"
    seed = Path("/work/shared/seed/fp4-power-pivot.txt") if not seed.exists() else seed
    if not seed.exists():
        pytest.skip("seed write-up not on this machine")
    text = seed.read_text()
    for key in ("fp4_small_quote", "decode_w_quote", "sgl_fp4_quote", "tokens_per_expert_quote"):
        assert SEED[key] in text, key


def test_everything_missing_gives_not_measured_rows_not_exceptions():
    empty, odd = pd.DataFrame(), pd.DataFrame({"x": [1]})
    for tables in (StudyTables(), *(StudyTables(sweep=f, kernel_power=f, decode=f, expert_m=f)
                                    for f in (empty, odd))):  # fmt: skip
        answers = compute_answers(tables)
        assert {a.status for a in answers} == {NOT_MEASURED}
        assert all(a.why and a.sentence == f"Not measured here: {a.why}." for a in answers)
        # every question says so on the first screen
        assert {a.question for a in answers if a.lead} == set(QUESTIONS)


def test_odd_values_do_not_raise():
    sweep = synthetic_sweep().astype(object)
    sweep.loc[0, "eager_us"] = "n/a"
    sweep.loc[1, "status"] = None
    power = synthetic_power()
    power.loc[1, "throttle_reasons"] = None
    decode = synthetic_decode().drop(columns=["j_per_token", "valid"])
    answers = compute_answers(StudyTables(HW_H200, PEAKS, sweep, kernel_power=power,
                                          decode=decode))  # fmt: skip
    decided = {a.question for a in answers if a.status in (ANSWERED, TIE)}
    assert {1, 2, 3, 5} <= decided


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
    rows = {(a.question, a.subject): a for a in compute_answers(inputs)}
    assert rows[(4, "sglang-graphs · C = 8")].value == "1.50×"  # M 12 against a balanced 8


def test_h200_example_results():
    """The answers of the committed two-H200 run (examples/h200x2-2026-11-29)."""
    answers = {(a.question, a.subject): a for a in compute_answers(StudyTables.from_results(H200))}
    bf16 = answers[(2, "BF16 · expert_up · M 1–64 · launch (eager)")]
    assert bf16.verdict == "launch-bound"
    assert "launch-bound (vs 50 %) at every size" in bf16.sentence
    fp4 = answers[(1, "FP4")]
    assert fp4.status == NOT_MEASURED and "none of the 270 FP4 points ran here" in fp4.why
    assert "2× NVIDIA H200 (sm_90, 700 W each)" in answers[("seed", "GPUs")].sentence
    prefill = answers[(3, "prefill-sized GEMMs · M ≥ 4096")]
    # the two bmm_fp8 M = 4096 eager windows (one loop on two GPUs) report sw_power_cap at
    # 66-70 % of the limit with the clock at its maximum: set aside, not called capped
    assert prefill.verdict == "power-capped" and prefill.value == "688–693 W (98–99 % of 700 W)"
    assert "1 undecided window set aside" in prefill.sentence
    assert "2 GPUs at once" in answers[(3, "check · GPUs side by side")].sentence
    decode = answers[(5, "transformers")]
    assert decode.status == ANSWERED and decode.points == 3
    assert [c.split(":")[0] for c in decode.evidence.split("; ")] == ["C = 1", "C = 16", "C = 64"]
    assert not [a for (q, _), a in answers.items() if q == 5 and a.status == NOT_MEASURED]


@pytest.mark.skipif(not CPU.exists(), reason="CPU example results not on this machine")
def test_cpu_example_results():
    q5 = [a for a in compute_answers(StudyTables.from_results(CPU)) if a.question == 5]
    assert any("power_source none" in a.why for a in q5 if a.status == NOT_MEASURED)
    assert [a for a in q5 if "transformers" in a.subject and a.status == ANSWERED]


def test_gaps_of_a_machine_without_a_gpu_are_expected_and_a_missed_recorder_is_not():
    no_power = synthetic_power().assign(power_source="none", avg_w=None)
    (gap,) = kernel_power_answers(no_power, {"device": "cpu"})
    assert gap.status == NOT_MEASURED and "no GPU" in gap.why
    # Decode through transformers has no expert recorder: said as this machine's gap. Through
    # SGLang the recorder should have run: said as a recorder that did not run, or its error.
    decode_cpu = pd.DataFrame([{"engine": "transformers", "concurrency": 1}])
    cpu = {
        (a.question, a.subject): a
        for a in compute_answers(StudyTables(HW_CPU, {"device": "cpu"}, decode=decode_cpu))
    }
    experts = cpu[(4, "per-expert M")]
    assert experts.status == NOT_MEASURED and experts.lead
    assert "decode ran through transformers, which has no recorder" in experts.why
    assert "the recorder pass did not run" not in experts.why
    assert "no GPU" in cpu[(3, "kernel loops")].why
    decode_gpu = pd.DataFrame([{"engine": "sglang", "concurrency": 1}])
    gpu = {
        (a.question, a.subject): a
        for a in compute_answers(StudyTables(HW_H200, PEAKS, decode=decode_gpu))
    }
    assert "the recorder pass did not run" in gpu[(4, "per-expert M")].why
    # The default's variants route by SGLang's uniform simulation, the recorder off: said so.
    decode_sim = pd.DataFrame([{"engine": "sglang", "variant": "sglang-bf16-graphs",
                                "model_kind": "dummy", "routing": "uniform",
                                "concurrency": 1}])  # fmt: skip
    sim = {
        (a.question, a.subject): a
        for a in compute_answers(StudyTables(HW_H200, PEAKS, decode=decode_sim))
    }
    why = sim[(4, "per-expert M")].why
    assert "off in the default" in why and "config/examples/full.yaml" in why
    assert "failed" not in why
    # A recorder pass that ran and failed: its error, not "off".
    failed = pd.DataFrame([{"variant": "sglang-bf16-graphs", "concurrency": 16,
                            "error": "CUDA error: device-side assert (idx_dim >= 0)"}])  # fmt: skip
    crashed = {
        (a.question, a.subject): a
        for a in compute_answers(
            StudyTables(HW_H200, PEAKS, decode=decode_sim, decode_recorder=failed)
        )  # fmt: skip
    }
    why = crashed[(4, "per-expert M")].why
    assert "the recorder pass failed (CUDA error: device-side assert (idx_dim >= 0))" in why
    assert "off in the default" not in why
    # One variant on a served model's own router: the recorder should have run.
    decode_own = decode_sim.assign(routing="model")
    own = {
        (a.question, a.subject): a
        for a in compute_answers(StudyTables(HW_H200, PEAKS, decode=decode_own))
    }
    assert "the recorder pass did not run" in own[(4, "per-expert M")].why
