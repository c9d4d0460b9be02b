"""Questions 4 and 5 as answers (decode_answers, expert_answers, decode_noise): a verdict only
beyond the noise, invalid windows never answering, CUDA graphs, weights and TP paired per C,
older decode tables still answered; per-expert M against uniform routing's spread, the
routing said, EP ranks' loads; and the committed examples' rows."""

import math

import numpy as np
import pandas as pd
import pytest
from findings_frames import HW_H200, PEAKS, sglang_decode, synthetic_decode
from helpers import ROOT
from studylib.core.answer_records import ANSWERED, NOT_MEASURED, TIE, UNDECIDED
from studylib.core.verdicts import NOISE_FLOOR
from studylib.seed_comparison import POWER, seed_answers
from studylib.stages.decode.decode_answers import decode_answers
from studylib.stages.decode.decode_judgements import dummy_weights_note, tp_pairs
from studylib.stages.decode.decode_noise import noise_of, noise_table
from studylib.stages.decode.expert_answers import expert_answers, uniform_spread
from studylib.study_tables import StudyTables

EXAMPLES = ROOT / "examples"


def window(variant, c, tpot_ms, *, graphs=True, weights="bf16", gpus=1, valid=True, j=None,
           server_tok_s=None, energy_gap_pct=0.1, errors=0, **more) -> dict:  # fmt: skip
    tok_s = 1e3 * c / tpot_ms
    return {**more, "engine": "sglang", "variant": variant, "model_kind": "dummy",
            "weights": weights, "routing": "uniform", "cuda_graphs": graphs, "concurrency": c,
            "gpus": gpus,
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
    # Over the same log lines (SGLang's millisecond stamps) the ratio of the two counts is
    # the noise, whatever the two tok/s over their different spans; an engine's own account
    # takes none from it (its figures are the scheduler's).
    exact = pair({64: 9.5}, {64: 10.0}, server_tok_s=1e3 * 64 / 9.5 * 1.1, delivery_ratio=1.06)
    row = by_subject(decode_answers(exact))["CUDA graphs · BF16 · C = 64"]
    assert row.status == TIE and row.noise == pytest.approx(0.06)
    assert row.noise_from == "the scheduler's count against the client's over the same log lines"
    engine = pair({64: 9.5}, {64: 10.0}, delivery_ratio=1.06, tpot_source="engine")
    assert by_subject(decode_answers(engine))["CUDA graphs · BF16 · C = 64"].status == ANSWERED


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
    # the headline compares one C, the largest both ran validly: not the eager one's C = 256
    # against the graphs one's C = 1 (20 ms at 256 requests is far more tok/s than 2 ms at 1)
    most = subjects["most throughput"]
    assert most.verdict == "sg-bf16-graphs" and most.runner_up == "sg-bf16-eager"
    assert "(C = 1)" in most.sentence and "C = 256" not in most.sentence
    assert most.basis == "tok/s at C = 1, the C most variants ran validly"
    # a variant with no valid window says so, and nothing of it is a result
    decode.loc[decode["variant"] == "sg-bf16-graphs", "valid"] = False
    only_invalid = by_subject(decode_answers(decode))["sg-bf16-graphs"]
    assert only_invalid.status == NOT_MEASURED and "invalid at C = 1" in only_invalid.why
    # a server that did not start: its reason once, not "invalid at C = ..." per C; the other
    # variant still answers
    why = (
        "the server did not start: the server exited with code -9 before it was ready: "
        "ValueError: Loaded weights leave no GPU memory for the KV cache"
    )
    decode.loc[decode["variant"] == "sg-bf16-graphs", ["first_error", "steady_s"]] = [why, 0.0]
    answers = by_subject(decode_answers(decode))
    not_started = answers["sg-bf16-graphs"]
    assert not_started.status == NOT_MEASURED and not_started.why == why
    assert not_started.sentence == f"No valid window: {why}."
    assert answers["sg-bf16-eager"].status == ANSWERED


def full_length(c, tpot_ms, shortened_tpot_ms, ci=0.5, shortened_ci=0.9, **kw) -> dict:
    """A full-length run's 30-s window and the window its precision rule would have ended."""
    row = window("sg-bf16-graphs", c, tpot_ms, tpot_ci_pct=ci, **kw)
    short_tok_s = 1e3 * c / shortened_tpot_ms
    return {**row, "shortened_steady_s": 12.0, "shortened_tpot_ms": shortened_tpot_ms,
            "shortened_output_tok_s": short_tok_s, "shortened_tpot_ci_pct": shortened_ci,
            "shortened_avg_w_per_gpu": 500.0, "shortened_j_per_token": 500.0 / short_tok_s,
            "shortened_tpot_source": "client"}  # fmt: skip


def test_a_full_length_runs_windows_against_their_shortened_selves():
    # Three windows: C = 16 within the floor (1 %), C = 64 5 % slower in its first 12 s
    # (beyond the 3 % floor), C = 256 2 % apart under its own ± 4 % (within); an invalid
    # window answers nothing.
    rows = pd.DataFrame([full_length(16, 10.0, 10.1), full_length(64, 20.0, 21.0),
                         full_length(256, 30.0, 30.6, ci=4.0),
                         full_length(512, 40.0, 60.0, valid=False)])  # fmt: skip
    answer = by_subject(decode_answers(rows))["shortened windows"]
    assert answer.status == ANSWERED and answer.verdict == "agree at 2 of 3"
    assert answer.sentence.startswith("The study's precision rule, replayed on each "
                                      "full-length window (30 s), would have ended them "
                                      "after 12.0 s")  # fmt: skip
    assert answer.sentence.endswith("(not: sg-bf16-graphs C = 64: TPOT, tok/s, J/token beyond "
                                    "3.0 %).")  # fmt: skip
    # A run whose rule ended its windows has no such row.
    plain = pd.DataFrame([window("sg-bf16-graphs", 16, 10.0)])
    assert "shortened windows" not in by_subject(decode_answers(plain))


def test_headlines_compare_one_shared_c_or_say_there_is_none():
    # As the H200 ran them (2026-12-04): one variant at C = 1 and 16, another at 512 only.
    rows = [window("sg-bf16-eager", c, t) for c, t in {1: 12.3, 16: 10.7}.items()]
    rows += [window("sg-fp8-eager", 512, 18.1, weights="fp8")]
    subjects = by_subject(decode_answers(pd.DataFrame(rows)))
    for subject in ("most throughput", "least energy per token"):
        row = subjects[subject]
        assert row.status == UNDECIDED and row.lead and not row.verdict
        assert "no two variants ran validly at one C (sg-bf16-eager: C = 1 and 16; " \
               "sg-fp8-eager: C = 512)" in row.why  # fmt: skip
    # A third variant at C = 16: the two that share it are compared there, the other named.
    rows += [window("sg-bf16-graphs", 16, 8.0)]
    most = by_subject(decode_answers(pd.DataFrame(rows)))["most throughput"]
    assert (most.verdict, most.runner_up) == ("sg-bf16-graphs", "sg-bf16-eager")
    assert "(C = 16)" in most.sentence
    assert most.sentence.endswith("; not compared: sg-fp8-eager (no valid window at C = 16).")


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


def test_older_tables_answer_per_variant_and_compare_no_unknown_setting():
    # No weights or cuda_graphs column (as examples/h200x2-2026-11-29): each variant at its
    # largest valid C, the headlines; nothing paired, as no setting is known.
    answers = decode_answers(synthetic_decode())
    rows = by_subject(answers)
    assert rows["graphs"].sentence == (
        "graphs at C = 64 (its largest valid C): 1,500 tok/s, 1.6 J/token, 300 W per GPU (50 % "
        "of the limit). Invalid at C = 256: 2 request errors.")  # fmt: skip
    assert rows["graphs"].verdict == "C = 64: 1.6 J/token, 300 W per GPU (50 % of the limit)"
    assert rows["graphs"].value == "1,500 tok/s"
    most = rows["most throughput"]
    assert (most.status, most.verdict, most.runner_up) == (ANSWERED, "graphs", "eager")
    assert rows["least energy per token"].verdict == "graphs"
    assert not [a for a in answers if a.subject.startswith("CUDA graphs") or " vs " in a.subject]
    # No power: tok/s only, and the energy row says why.
    d = synthetic_decode().assign(power_source="none", avg_w_per_gpu=None, pct_limit=None,
                                  j_per_token=None)  # fmt: skip
    rows = by_subject(decode_answers(d))
    assert rows["eager"].sentence == "eager at C = 64 (its largest valid C): 1,000 tok/s."
    assert rows["eager"].verdict == "C = 64"
    assert "power_source none" in rows["energy per token"].why
    assert "least energy per token" not in rows
    # The newer columns dropped from an SGLang table: no pairs, and the seed's power row
    # does not claim graphs off.
    new = ["weights", "cuda_graphs", "hbm_floor_ms", "tpot_over_floor", "j_per_token_net",
           "idle_w_per_gpu"]  # fmt: skip
    d = sglang_decode().drop(columns=new)
    assert {a.subject for a in decode_answers(d)} == {
        "most throughput", "least energy per token", "sglang-bf16-eager", "sglang-bf16-graphs",
        "sglang-fp8-eager", "sglang-fp8-graphs"}  # fmt: skip
    power = by_subject(seed_answers(StudyTables(HW_H200, PEAKS, decode=d)))[POWER]
    assert (
        power.status == ANSWERED and "at C = 64, the most requests in flight here" in power.sentence
    )
    assert "CUDA graphs off" not in power.sentence


def test_graphs_and_weights_paired_per_c():
    answers = decode_answers(sglang_decode())
    rows = by_subject(answers)
    # J/token = W × TPOT / C: on ÷ off = 1.2 × 0.4 = 0.48, a 52 % fall
    assert rows["CUDA graphs · BF16 · C = 1"].sentence == (
        "At C = 1, CUDA graphs cut TPOT by 60 % (10.00 → 4.00 ms); J/token falls by 52 %."
    )
    assert rows["CUDA graphs · FP8 · C = 64"].sentence.startswith(
        "At C = 64, CUDA graphs cut TPOT by 67 % (45.00 → 15.00 ms)")  # fmt: skip
    assert rows["CUDA graphs · BF16"].lead and rows["CUDA graphs · FP8"].lead
    assert rows["FP8 against BF16 · graphs on"].sentence.startswith(
        "FP8 against BF16 weights (graphs on): cut TPOT by 25 % at C = 1 and 25 % at C = 64."
    )
    assert rows["FP8 against BF16 · graphs off"].verdict == (
        "FP8: cut TPOT by 10 % at C = 1 and 10 % at C = 64"
    )
    assert not [a for a in answers if " vs " in a.subject]  # no generic variant comparison


def test_a_weights_pair_missing_a_side_says_why():
    """On an 80-GB H100 the bf16 server does not start: FP8 against BF16 is not measured,
    and says so, not by leaving the seed's question out; the server's reason is said once,
    in the variant's own row."""
    why = (
        "the server did not start: its weights do not fit: 73.7 GiB per GPU (79.1 GB over "
        "1 GPU) against the 67.7 GiB --mem-fraction-static 0.85 leaves of the GPU's 79.6 GiB"
    )
    rows = [window("sg-fp8-graphs", c, t, weights="fp8") for c, t in {1: 1.6, 64: 13.2}.items()]
    rows += [window("sg-bf16-graphs", c, 1.0, valid=False, steady_s=0.0, first_error=why,
                    output_tok_s=float("nan")) for c in (1, 64)]  # fmt: skip
    answers = by_subject(decode_answers(pd.DataFrame(rows)))
    pair = answers["FP8 against BF16 · graphs on"]
    assert pair.status == NOT_MEASURED
    assert pair.sentence == ("Not measured here: sg-bf16-graphs: the server did not start (its "
                             "row says why).")  # fmt: skip
    assert answers["sg-bf16-graphs"].sentence == f"No valid window: {why}."
    assert answers["sg-fp8-graphs"].status == ANSWERED
    # the one variant measured leads question 5 (the first screen), the other does not
    assert answers["sg-fp8-graphs"].lead and not answers["sg-bf16-graphs"].lead
    # a side with windows, none valid: said so
    rows = [{**r, "first_error": ""} for r in rows]
    pair = by_subject(decode_answers(pd.DataFrame(rows)))["FP8 against BF16 · graphs on"]
    assert pair.why == "sg-bf16-graphs: no valid window"


def test_dummy_weights_note_names_the_routing_of_each_variant():
    table = pd.DataFrame({
        "engine": ["sglang", "sglang", "transformers"],
        "variant": ["a-uniform", "b-own", "cpu"],
        "model_kind": ["dummy", "dummy", "local"],
        "routing": ["uniform", "model", None],
    })  # fmt: skip
    variants, text = dummy_weights_note(table)
    assert variants == ["a-uniform", "b-own"]
    assert (
        "a-uniform route uniformly" in text and "b-own use the random weights' own router" in text
    )
    old = table.drop(columns=["model_kind", "routing"])  # an older table: SGLang means dummy
    assert dummy_weights_note(old)[0] == ["a-uniform", "b-own"]
    assert dummy_weights_note(table[table["engine"] == "transformers"]) == ([], "")


def test_tensor_parallel_against_one_gpu_and_graphs_paired_per_gpu_count():
    one = sglang_decode()
    one = one[one["weights"] == "fp8"]
    tp2 = one.copy()
    tp2["variant"] = tp2["variant"] + "-tp2"
    tp2["gpus"] = 2
    tp2["tpot_ms"] = tp2["tpot_ms"] * 0.5  # twice the tok/s, each GPU at 0.8 of the W
    tp2["output_tok_s"] = tp2["output_tok_s"] * 2
    tp2["avg_w_per_gpu"] = tp2["avg_w_per_gpu"] * 0.8
    tp2["w_gpu_min"], tp2["w_gpu_max"] = tp2["avg_w_per_gpu"] - 5, tp2["avg_w_per_gpu"] + 5
    tp2["avg_w_total"] = tp2["avg_w_per_gpu"] * 2
    tp2["j_per_token"] = tp2["avg_w_total"] / tp2["output_tok_s"]
    tp2.loc[tp2["concurrency"] == 64, "throttle_reasons"] = "sw_power_cap,gpu_idle"
    table = pd.concat([one, tp2], ignore_index=True)
    pairs = tp_pairs(table)
    assert len(pairs) == 4 and set(pairs["gpus_n"]) == {2}  # graphs on and off, C = 1 and 64
    on64 = pairs[(pairs["cuda_graphs"] == True) & (pairs["concurrency"] == 64)].iloc[0]  # noqa: E712
    assert (on64["variant_1"], on64["variant_n"]) == ("sglang-fp8-graphs", "sglang-fp8-graphs-tp2")
    assert on64["tok_ratio"] == pytest.approx(2.0) and on64["tpot_ratio"] == pytest.approx(0.5)
    assert on64["j_ratio"] == pytest.approx(0.8)  # 1.6× the watts for 2× the tokens
    assert on64["reasons_n"] == "sw_power_cap" and on64["reasons_1"] == ""
    assert tp_pairs(one).empty  # no tensor-parallel variant: nothing to pair
    rows = by_subject(decode_answers(table))
    tp = rows["TP2 against 1 GPU · sglang-fp8-graphs-tp2"]
    assert tp.sentence.startswith("2 GPUs (TP) against one (FP8, graphs on): cut TPOT by 50 % "
                                  "at C = 1 and 50 % at C = 64.")  # fmt: skip
    # Graphs on against off is paired within each GPU count, never TP2 against TP1; only the
    # one-GPU pair leads.
    assert rows["CUDA graphs · FP8"].lead and not rows["CUDA graphs · FP8 · 2 GPUs"].lead
    assert rows["CUDA graphs · FP8 · C = 64"].evidence.startswith(
        "sglang-fp8-graphs / sglang-fp8-eager:")  # fmt: skip
    assert rows["CUDA graphs · FP8 · 2 GPUs · C = 64"].evidence.startswith(
        "sglang-fp8-graphs-tp2 / sglang-fp8-eager-tp2:")  # fmt: skip


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


def test_the_busiest_expert_against_balance_and_the_spread_in_evidence():
    # 1 layer × 8 experts at C = 4, top-k 2: balanced M = 1; no token counts: the 3 % floor.
    ms = [0.0, 0.0, 0.5, 0.5, 1.0, 1.5, 2.0, 2.5]
    frame = pd.DataFrame({"variant": "sg", "concurrency": 4, "layer": 0, "expert": range(8),
                          "m": ms, "balanced_m": 1.0})  # fmt: skip
    row = by_subject(expert_answers(frame))["sg · C = 4"]
    assert (row.status, row.verdict, row.value) == (ANSWERED, "imbalanced", "2.50×")
    assert row.sentence == ("sg at C = 4: routing is imbalanced, the busiest expert gets 2.50× "
                            "the balanced 1, beyond the noise floor's 1.03×.")  # fmt: skip
    assert row.evidence == ("1 layers × 8 experts; M 0–2.5, median 0.75, balanced 1; 25 % of "
                            "experts got no token")  # fmt: skip


def random_expert_m() -> pd.DataFrame:
    """2 layers × 16 experts, top-2, at C = 8 and 64; expert 0 of layer 1 is hot."""
    rows = []
    for c in (8, 64):
        for layer in (0, 1):
            tokens = [4.0] * 16
            if layer == 1:
                tokens[0] = 4.0 * (3 if c == 8 else 1.5)
            total = sum(tokens)
            for e, t in enumerate(tokens):
                rows.append({"variant": "sglang-bf16-graphs", "concurrency": c, "layer": layer,
                             "expert": e, "tokens": t, "share": t / total,
                             "m": c * 2 * t / total, "balanced_m": c * 2 / 16})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_lead_row_says_random_or_uniform_routing():
    em = random_expert_m()
    rows = by_subject(expert_answers(em, sglang_decode().assign(variant="sglang-bf16-graphs")))
    at8, at64 = rows["sglang-bf16-graphs · C = 8"], rows["sglang-bf16-graphs · C = 64"]
    # layer 1 at C = 8: 18 experts' worth of tokens, expert 0 has 3 → M = 16 × 3/18 = 2.67
    assert at8.value == f"{16 * 3 / 18:.2f}×" and not at8.lead
    assert at64.lead and at64.sentence.endswith("(the random weights' own router).")
    assert "router" not in at8.sentence  # said once, on the lead row
    # without a decode table, nothing is said about the weights
    assert not [a for a in expert_answers(em) if "rout" in a.why or "router" in a.sentence]
    uniform = sglang_decode().assign(routing="uniform", variant="sglang-bf16-graphs")
    lead = by_subject(expert_answers(em, uniform))["sglang-bf16-graphs · C = 64"]
    assert lead.sentence.endswith("(SGLang's uniform routing, random weights).")


def test_ep_rank_loads_and_equal_loads_under_tp():
    em = random_expert_m()  # 16 experts, C = 8 and 64
    ep2 = em.assign(variant="sglang-fp8-graphs-ep2")
    tp2 = em.assign(variant="sglang-fp8-graphs-tp2")
    decode = pd.DataFrame({"engine": "sglang", "variant": ["sglang-fp8-graphs-ep2",
                                                           "sglang-fp8-graphs-tp2"],
                           "gpus": [2, 2], "ep": [2, 1], "concurrency": [8, 8]})  # fmt: skip
    rows = by_subject(expert_answers(pd.concat([ep2, tp2], ignore_index=True), decode))
    # The busiest rank's share of a layer over 1/2, from experts 0-7 against 8-15.
    g = em[em["concurrency"] == 8]
    per_layer = g.groupby("layer").apply(
        lambda x: 2 * max(x.loc[x["expert"] < 8, "tokens"].sum(),
                          x.loc[x["expert"] >= 8, "tokens"].sum()) / x["tokens"].sum(),
        include_groups=False,
    )  # fmt: skip
    ranks = rows["sglang-fp8-graphs-ep2 · EP ranks · C = 8"]
    assert ranks.value == f"{per_layer.max():.2f}×"
    assert ranks.sentence.startswith(f"At C = 8, the busiest of 2 GPUs receives "
                                     f"{per_layer.max():.2f}× its 1/2")  # fmt: skip
    assert not [s for s in rows if s.startswith("sglang-fp8-graphs-tp2 · EP")]
    equal = rows["GPU ranks · tensor parallel"]
    assert equal.verdict == "equal" and equal.sentence.startswith("sglang-fp8-graphs-tp2 split")
    # One GPU, no EP: nothing said about ranks.
    one = expert_answers(em, sglang_decode().assign(variant="sglang-bf16-graphs"))
    assert not [a for a in one if "rank" in a.subject]


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


def test_graphs_not_measured_says_why():
    # The default's decode: two variants, both with CUDA graphs (none without).
    default = pd.DataFrame([window("sg-bf16-graphs", 16, 8.0),
                            window("sg-fp8-graphs", 16, 5.0, weights="fp8")])  # fmt: skip
    row = by_subject(decode_answers(default))["CUDA graphs"]
    assert row.status == NOT_MEASURED and row.lead
    assert "no variant ran without CUDA graphs" in row.why and "full.yaml" in row.why
    # One without graphs, at another C: the pairs were missing, not the variant.
    apart = pair({16: 8.0}, {64: 12.0})
    row = by_subject(decode_answers(apart))["CUDA graphs"]
    assert row.why == "no weights ran validly with CUDA graphs both on and off at a shared C"
