"""Questions 4 and 5 as answers (decode_answers, expert_answers, decode_noise): a verdict only
beyond the noise, invalid windows never answering, per-expert M against uniform routing's
spread; and the committed examples' rows."""

import math

import numpy as np
import pandas as pd
import pytest
from helpers import ROOT
from studylib.core.answer_records import ANSWERED, NOT_MEASURED, TIE
from studylib.core.verdicts import NOISE_FLOOR
from studylib.stages.decode.decode_answers import decode_answers
from studylib.stages.decode.decode_noise import noise_of, noise_table
from studylib.stages.decode.expert_answers import expert_answers, uniform_spread

EXAMPLES = ROOT / "examples"


def window(variant, c, tpot_ms, *, graphs=True, weights="bf16", gpus=1, valid=True, j=None,
           server_tok_s=None, energy_gap_pct=0.1, errors=0) -> dict:  # fmt: skip
    tok_s = 1e3 * c / tpot_ms
    return {"engine": "sglang", "variant": variant, "model_kind": "dummy", "weights": weights,
            "routing": "uniform", "cuda_graphs": graphs, "concurrency": c, "gpus": gpus,
            "power_source": "nvml", "steady_s": 30.0 if valid else 3.0, "valid": valid,
            "errors": errors, "wrong_length": 0, "output_tok_s": tok_s, "tpot_ms": tpot_ms,
            "avg_w_per_gpu": 500.0, "pct_limit": 500 / 7, "j_per_token": j or 500.0 / tok_s,
            "energy_gap_pct": energy_gap_pct,
            "server_tok_s": server_tok_s or tok_s}  # fmt: skip


def pair(on: dict[int, float], off: dict[int, float], **kw) -> pd.DataFrame:
    """A graphs-on and a graphs-off BF16 variant at these C (TPOT ms)."""
    rows = [window("sg-bf16-graphs", c, t, **kw) for c, t in on.items()]
    rows += [window("sg-bf16-eager", c, t, graphs=False) for c, t in off.items()]
    return pd.DataFrame(rows)


def by_subject(answers) -> dict:
    return {a.subject: a for a in answers}


def test_graphs_cut_tpot_only_beyond_the_noise():
    # C = 1: 10 → 2 ms, a cut far beyond noise; C = 16: 10.0 → 9.8 ms, 2 % < the 3 % floor.
    rows = by_subject(decode_answers(pair({1: 2.0, 16: 9.8}, {1: 10.0, 16: 10.0})))
    at1, at16 = rows["CUDA graphs · BF16 · C = 1"], rows["CUDA graphs · BF16 · C = 16"]
    assert at1.status == ANSWERED and at1.verdict == "graphs on"
    assert at1.sentence.startswith("At C = 1, CUDA graphs cut TPOT by 80 % (10.00 → 2.00 ms)")
    assert at1.margin == pytest.approx(4.0) and at1.noise == NOISE_FLOOR
    assert at16.status == TIE and at16.verdict == "graphs on = off"
    assert "tie on TPOT" in at16.sentence and "cut" not in at16.sentence
    assert at16.noise_from == "3 % floor"
    summary = rows["CUDA graphs · BF16"]
    assert summary.lead and summary.status == ANSWERED
    assert summary.sentence == "CUDA graphs (BF16) cut TPOT by 80 % at C = 1; tie at C = 16."
    # the verdict says where the winner wins: one C may favour it and another not
    assert summary.verdict == "graphs on: cut TPOT by 80 % at C = 1; tie at C = 16"


def test_the_cross_check_and_the_schedulers_count_widen_the_noise():
    # 5 % apart at C = 64: beyond the floor, not beyond bench_serving's 8 % disagreement there.
    decode = pair({64: 9.5}, {64: 10.0})
    assert by_subject(decode_answers(decode))["CUDA graphs · BF16 · C = 64"].status == ANSWERED
    check = pd.DataFrame([{"engine": "sglang", "variant": "sg-bf16-eager", "concurrency": 64,
                           "tpot_ratio": 1.08, "bench_error": ""}])  # fmt: skip
    row = by_subject(decode_answers(decode, check))["CUDA graphs · BF16 · C = 64"]
    assert row.status == TIE and row.noise == pytest.approx(0.08)
    assert row.noise_from == "bench_serving's TPOT at C = 64 (sg-bf16-eager)"
    # The graphs-on variant has no cross-check of its own: the other's at that C stands in;
    # its own where it has one.
    noise = noise_table(decode, check)
    assert noise_of(noise, "sg-bf16-graphs", 64).share == pytest.approx(0.08)
    # The scheduler counted 10 % more than the client: that is the noise.
    decode = pair({64: 9.5}, {64: 10.0}, server_tok_s=1e3 * 64 / 9.5 * 1.1)
    row = by_subject(decode_answers(decode))["CUDA graphs · BF16 · C = 64"]
    assert row.status == TIE and row.noise == pytest.approx(0.1)
    assert row.noise_from == "the scheduler's count against the client's"


def test_invalid_windows_never_answer():
    # Graphs on at C = 256: an invalid window (2 request errors) with a far lower TPOT.
    decode = pair({1: 2.0, 256: 1.0}, {1: 10.0, 256: 20.0})
    decode.loc[(decode["variant"] == "sg-bf16-graphs") & (decode["concurrency"] == 256),
               ["valid", "errors", "steady_s"]] = [False, 2, 30.0]  # fmt: skip
    answers = decode_answers(decode)
    subjects = by_subject(answers)
    assert "CUDA graphs · BF16 · C = 256" not in subjects
    assert all("C = 256" not in a.sentence for a in answers if a.subject.startswith("CUDA"))
    graphs = subjects["sg-bf16-graphs"]
    assert graphs.sentence.startswith("sg-bf16-graphs at C = 1 (its largest valid C):")
    assert "Invalid at C = 256: 2 request errors." in graphs.sentence
    assert graphs.why == "invalid at C = 256: 2 request errors"
    # the headline reads each variant at its largest valid C: the eager one's C = 256
    most = subjects["most throughput"]
    assert most.verdict == "sg-bf16-eager" and "(C = 256)" in most.sentence
    # a variant with no valid window says so, and nothing of it is a result
    decode.loc[decode["variant"] == "sg-bf16-graphs", "valid"] = False
    only_invalid = by_subject(decode_answers(decode))["sg-bf16-graphs"]
    assert only_invalid.status == NOT_MEASURED and "invalid at C = 1" in only_invalid.why


def test_weights_and_tp_compared_per_c_beyond_noise():
    rows = [window("sg-bf16-graphs", c, t) for c, t in {1: 1.4, 16: 8.8, 64: 17.5}.items()]
    rows += [window("sg-fp8-graphs", c, t, weights="fp8")
             for c, t in {1: 1.41, 16: 5.0, 64: 9.6}.items()]  # fmt: skip
    rows += [window("sg-fp8-graphs-tp2", c, t, weights="fp8", gpus=2)
             for c, t in {1: 2.0, 16: 5.05, 64: 9.6}.items()]  # fmt: skip
    answers = by_subject(decode_answers(pd.DataFrame(rows)))
    fp8 = answers["FP8 against BF16 · graphs on"]
    assert fp8.sentence.startswith(
        "FP8 against BF16 weights (graphs on): cut TPOT by 43 % at C = 16 and 45 % at C = 64; "
        "tie at C = 1.")  # fmt: skip
    tp = answers["TP2 against 1 GPU · sg-fp8-graphs-tp2"]
    assert tp.sentence.startswith("2 GPUs (TP) against one (FP8, graphs on): raise TPOT by 42 % "
                                  "at C = 1; tie at C = 16, 64.")  # fmt: skip


def test_no_table_no_power_and_no_pair_are_said():
    (row,) = decode_answers(None)
    assert row.status == NOT_MEASURED and row.lead and "no decode ran here" in row.why
    decode = pd.DataFrame([window("sg-bf16-graphs", 1, 2.0)]).assign(j_per_token=np.nan)
    subjects = by_subject(decode_answers(decode))
    assert subjects["energy per token"].status == NOT_MEASURED
    assert subjects["CUDA graphs"].status == NOT_MEASURED and subjects["CUDA graphs"].lead


# ---------------------------------------------------------------------------------------------
# Question 4
# ---------------------------------------------------------------------------------------------


def expert_table(c: int, counts: np.ndarray, top_k: int = 8) -> pd.DataFrame:
    """One layer's token counts per expert at C as the recorder's table."""
    total, experts = counts.sum(), len(counts)
    return pd.DataFrame({"variant": "sg-bf16-graphs", "concurrency": c, "layer": 0,
                         "expert": range(experts), "tokens": counts,
                         "share": counts / total, "m": c * top_k * counts / total,
                         "balanced_m": c * top_k / experts})  # fmt: skip


def test_uniform_routing_is_balanced_and_a_hot_expert_is_not():
    rng = np.random.default_rng(7)
    counts = rng.multinomial(512 * 8 * 200, np.ones(256) / 256)
    table = expert_table(512, counts)
    (row, *_) = expert_answers(table, pd.DataFrame([window("sg-bf16-graphs", 512, 30.0)]))
    assert row.subject == "sg-bf16-graphs · C = 512" and row.lead
    assert row.status == TIE and row.verdict == "balanced"
    assert "against the balanced 16 (the seed's)" in row.sentence
    assert "(SGLang's uniform routing, random weights)" in row.sentence
    assert row.noise_from.startswith("uniform routing's busiest of 256 counts")
    assert row.margin < row.noise
    # one expert at twice its share: beyond what uniform routing gives
    hot = counts.copy()
    hot[0] = 2 * counts.mean()
    (row, *_) = expert_answers(expert_table(512, hot))
    assert row.status == ANSWERED and row.verdict == "imbalanced"
    assert row.value == f"{hot.max() / hot.mean():.2f}×"


def test_uniform_spread_is_the_binomial_busiest_at_that_token_count():
    # one count of a 50 % pick: z(0.95) × sqrt(0.5 / mean)
    assert uniform_spread(10_000, 1, 0.5) == pytest.approx(1.6449 * math.sqrt(0.5 / 10_000),
                                                           rel=1e-3)  # fmt: skip
    # more counts, a higher busiest; more tokens, a lower one
    assert uniform_spread(100, 1024, 1 / 32) > uniform_spread(100, 256, 1 / 32)
    assert uniform_spread(10_000, 256, 1 / 32) < uniform_spread(100, 256, 1 / 32)
    assert math.isnan(uniform_spread(0, 256, 1 / 32))


def test_the_seeds_c512_not_measured_and_no_record_says_why():
    rng = np.random.default_rng(1)
    rows = expert_answers(expert_table(64, rng.multinomial(64 * 8 * 50, np.ones(32) / 32)))
    seed = by_subject(rows)["C = 512 (the seed's regime)"]
    assert seed.status == NOT_MEASURED and seed.lead and "up to C = 64" in seed.why
    (row,) = expert_answers(None, pd.DataFrame({"engine": ["transformers"]}))
    assert row.status == NOT_MEASURED and "decode ran through transformers" in row.why


# ---------------------------------------------------------------------------------------------
# The committed examples
# ---------------------------------------------------------------------------------------------


def example_tables(folder):
    tables = {
        name: pd.read_csv(folder / "tables" / f"{name}.csv")
        for name in ("decode", "expert_m")
        if (folder / "tables" / f"{name}.csv").is_file()
    }
    return tables.get("decode"), tables.get("expert_m")


def test_the_step_model_examples_cuda_graphs_answers():
    decode, expert_m = example_tables(EXAMPLES / "h200-2026-12-01-step-model")
    rows = by_subject(decode_answers(decode))
    assert rows["CUDA graphs · BF16"].sentence == (
        "CUDA graphs (BF16) cut TPOT by 87 % at C = 1 and 11 % at C = 16; tie at C = 64, 256."
    )
    assert rows["CUDA graphs · BF16 · C = 16"].sentence == (
        "At C = 16, CUDA graphs cut TPOT by 11 % (9.86 → 8.77 ms); J/token falls by 7 %."
    )
    assert rows["most throughput"].status == TIE  # FP8 with and without graphs: 17,215-17,217
    leads = [a.subject for a in decode_answers(decode) if a.lead]
    assert leads == ["CUDA graphs · BF16", "CUDA graphs · FP8", "most throughput",
                     "least energy per token"]  # fmt: skip
    *_, top, seed = expert_answers(expert_m, decode)
    assert top.subject == "sglang-bf16-graphs · C = 256" and top.status == TIE
    assert seed.status == NOT_MEASURED


@pytest.mark.parametrize("folder", sorted(p.parent.parent for p in EXAMPLES.glob("**/decode.csv")
                                          if p.parent.name == "tables"),
                         ids=lambda p: str(p.relative_to(EXAMPLES)))  # fmt: skip
def test_every_examples_decode_answers_hold_their_noise(folder):
    """In every example with a decode table: an answered comparison is beyond its noise, a
    tie within it, and no invalid window is a result."""
    decode, expert_m = example_tables(folder)
    invalid = set()
    if "valid" in decode.columns:
        bad = decode[decode["valid"].astype(str).str.lower() != "true"]
        invalid = {(v, int(c)) for v, c in zip(bad["variant"], bad["concurrency"], strict=True)}
    for a in decode_answers(decode) + expert_answers(expert_m, decode):
        if a.status == ANSWERED and not math.isnan(a.margin):
            assert a.margin > a.noise, a
        if a.status == TIE and not math.isnan(a.margin) and a.question == 5:
            assert a.margin <= a.noise or a.subject in (
                "most throughput",
                "least energy per token",
            ), a
        for variant, c in invalid:
            assert not (a.subject.startswith("CUDA graphs") and a.subject.endswith(f"C = {c}")
                        and variant in a.evidence), a  # fmt: skip
