"""Questions 4 and 5 (stages/decode/decode_answers.py, expert_answers.py): per-expert M and decode
throughput and energy per server variant, from synthetic decode tables."""

import pandas as pd
import pytest
from findings_frames import HW_CPU, HW_H200, PEAKS, only, sglang_decode, synthetic_decode
from studylib.seed_comparison import seed_comparison
from studylib.stages.decode.decode_findings import q5_decode
from studylib.stages.decode.expert_findings import q4_experts
from studylib.study_tables import StudyTables


def test_q4_expert_spread_against_balance():
    # 1 layer × 8 experts at C = 4, top-k 2: balanced M = 1.
    ms = [0.0, 0.0, 0.5, 0.5, 1.0, 1.5, 2.0, 2.5]
    frame = pd.DataFrame({"variant": "sg", "concurrency": 4, "layer": 0, "expert": range(8),
                          "m": ms, "balanced_m": 1.0})  # fmt: skip
    f = only(q4_experts(frame), 4)
    n = f.numbers
    assert (n["m_min"], n["m_median"], n["m_max"]) == (0.0, 0.75, 2.5)
    assert n["hot_share"] == pytest.approx(1 / 8)  # only 2.5 > 2 × 1
    assert n["idle_share"] == pytest.approx(2 / 8)
    assert n["max_over_balanced"] == pytest.approx(2.5)
    assert "sg at C = 4" in f.text and "against a balanced 1" in f.text
    assert "12 % of experts get more than 2× the balanced M" in f.text


def test_q4_missing_says_why():
    decode = pd.DataFrame({"engine": ["transformers"], "concurrency": [1]})
    out = q4_experts(None, decode)
    assert out.findings == [] and "decode ran through transformers" in out.missing[0].text
    out = q4_experts(pd.DataFrame(), None)
    assert "no SGLang expert-distribution record" in out.missing[0].text


def test_q5_per_variant_and_comparison():
    out = q5_decode(synthetic_decode(), HW_H200)
    g = only(out, 5, "graphs (sglang, 8 GPUs)")
    assert g.numbers["per_concurrency"][16] == {
        "tok_s": 800.0,
        "j_per_token": 2.5,
        "w_per_gpu": 250.0,
        "pct_limit": 41.7,
    }
    assert g.numbers["invalid"] == 1
    assert "C = 16: 800.0 tok/s, 2.50 J/token, 250 W per GPU (42 % of the limit)" in g.text
    assert "Invalid (not reported as results): C = 256 (steady 8.0 s, 2 errors)" in g.text
    cmp = only(out, 5, "graphs vs eager")
    assert cmp.numbers["tok_ratio"] == {16: 2.0, 64: 1.5}
    assert cmp.numbers["j_ratio"] == {16: pytest.approx(0.625), 64: pytest.approx(0.8)}
    assert "1.50–2.00× the throughput over C = 16, 64 at 0.62–0.80× the J/token" in cmp.text
    assert out.missing == []


def test_q5_no_power_and_no_table():
    d = synthetic_decode().assign(power_source="none", avg_w_per_gpu=None, pct_limit=None,
                                  j_per_token=None)  # fmt: skip
    out = q5_decode(d, HW_CPU)
    assert "no decode power (no GPU: power_source none)" in out.missing[0].text
    e = only(out, 5, "eager (sglang")
    assert e.numbers["per_concurrency"][64] == {"tok_s": 1000.0}
    out = q5_decode(None)
    assert out.findings == [] and "no decode table" in out.missing[0].text


def test_q5_graphs_on_against_off_per_weights():
    out = q5_decode(sglang_decode(), HW_H200)
    assert out.missing == []
    bf16 = only(out, 5, "CUDA graphs on against off, BF16 weights")
    n = bf16.numbers
    assert (n["variant_on"], n["variant_off"]) == ("sglang-bf16-graphs", "sglang-bf16-eager")
    assert n["per_concurrency"][1]["tpot_ratio"] == pytest.approx(0.4)
    assert n["per_concurrency"][64]["w_ratio"] == pytest.approx(1.2)
    # J/token = W × TPOT / C: on ÷ off = 1.2 × 0.4; net of the 100 W idle: 200 × 0.4 / 150
    assert n["per_concurrency"][1]["j_ratio"] == pytest.approx(0.48)
    assert n["per_concurrency"][1]["j_net_ratio"] == pytest.approx(200 * 0.4 / 150)
    assert "C = 1: TPOT 0.40×, W per GPU 1.20×, J/token 0.48× (net of idle 0.53×)" in bf16.text
    assert "Graphs cut TPOT most at C = 1 (0.40×)" in bf16.text
    fp8 = only(out, 5, "CUDA graphs on against off, FP8 weights")
    assert fp8.numbers["per_concurrency"][64]["tpot_ratio"] == pytest.approx(1 / 3)
    # weights against weights at each graphs setting
    on = only(out, 5, "FP8 against BF16 weights (CUDA graphs on")
    assert on.numbers["tpot_ratio"] == {1: pytest.approx(0.75), 64: pytest.approx(0.75)}
    only(out, 5, "FP8 against BF16 weights (CUDA graphs off")
    assert not [f for f in out.findings if " vs " in f.text]  # no generic variant comparison


def test_q5_states_the_regime_floor_and_net_energy_of_each_variant():
    out = q5_decode(sglang_decode(), HW_H200)
    v = only(out, 5, "sglang-bf16-eager (sglang, BF16 weights, CUDA graphs off, 1 GPU):")
    assert v.numbers["weights"] == "bf16" and v.numbers["cuda_graphs"] is False
    assert v.numbers["per_concurrency"][1]["tpot_ms"] == 10.0
    assert v.numbers["per_concurrency"][1]["j_per_token_net"] == pytest.approx(1.5)
    assert "C = 1: 100.0 tok/s at TPOT 10.0 ms, 2.50 J/token (1.50 net of idle)" in v.text
    assert v.numbers["latency"]["tpot_over_floor"] == {1: 10.0, 64: 10.0}
    assert "10× the step's HBM floor (1.0–5.0 ms" in v.text
    assert "ITL p50 10.0–50.0 ms, p99 20.0–100.0 ms, TTFT p50 50.0 ms" in v.text
    assert "no power, thermal or other clocks-event limit at any C" in v.text
    assert "utilisation SM 50 %, tensor 10 %, DRAM 60 %" in v.text
    dummy = only(out, 5, "serve dummy weights")
    assert dummy.numbers["weights"] == "random" and len(dummy.numbers["variants"]) == 4


def test_q5_graphs_pair_missing_and_throttled_variant():
    d = sglang_decode()
    d = d[d["cuda_graphs"]].copy()  # graphs on only: nothing to pair
    d.loc[d.index[0], "throttle_reasons"] = "sw_power_cap,gpu_idle"
    d.loc[d.index[1], ["valid", "steady_s", "errors", "first_error"]] = [False, 4.0, 2, "<b>x"]
    out = q5_decode(d, HW_H200)
    assert any("CUDA graphs on/off not compared" in m.text for m in out.missing)
    v = only(out, 5, "sglang-bf16-graphs (sglang")
    assert v.numbers["latency"]["reasons"] == {"sw_power_cap": [1]}
    assert "clocks-event reasons sw_power_cap (C = 1)" in v.text
    assert "C = 64 (steady 4.0 s, 2 errors, first error “<b>x”)" in v.text


def test_q5_and_seed_skip_missing_new_columns():
    # The older columns only (as examples/h200x2-2026-11-29): no floor, no net J, no pairs.
    new = ["weights", "cuda_graphs", "hbm_floor_ms", "tpot_over_floor", "j_per_token_net",
           "idle_w_per_gpu"]  # fmt: skip
    d = sglang_decode().drop(columns=new)
    out = q5_decode(d, HW_H200)
    assert out.missing == []
    v = only(out, 5, "sglang-bf16-eager (sglang, 1 GPU)")
    assert "not set against an HBM floor" in v.text and "net of idle" not in v.text
    assert only(out, 5, "sglang-bf16-graphs vs sglang-bf16-eager").numbers["tok_ratio"]
    seed = seed_comparison(StudyTables(HW_H200, PEAKS, decode=d))
    power = only(seed, "seed", "235 W of 600 W")
    assert "CUDA graphs off" not in power.text


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


def test_q4_per_layer_trend_and_random_routing():
    em = random_expert_m()
    out = q4_experts(em, sglang_decode().assign(variant="sglang-bf16-graphs"))
    routing = only(out, 4, "random")
    assert routing.numbers["routing"] == "random"
    at8 = only(out, 4, "at C = 8:")
    # layer 1 at C = 8: 18 experts' worth of tokens, expert 0 has 3 → M = 16 × 3/18 = 2.67
    assert at8.numbers["max_over_balanced"] == pytest.approx(16 * 3 / 18)
    assert at8.numbers["layer_max_over_balanced"] == {0: pytest.approx(1.0),
                                                     1: pytest.approx(16 * 3 / 18)}  # fmt: skip
    trend = only(out, 4, "goes")
    assert trend.numbers["max_over_balanced"][64] == pytest.approx(16 * 1.5 / 16.5)
    assert "more tokens in flight even the load out" in trend.text
    # without a decode table, nothing is said about the weights
    assert not [f for f in q4_experts(em).findings if "random" in f.text]
    seed = seed_comparison(StudyTables(HW_H200, PEAKS, decode=sglang_decode(), expert_m=em))
    bal = only(seed, "seed", "perfect balance")
    assert bal.numbers["top_c"] == 64 and bal.numbers["top_balanced_m"] == 8.0
    assert "random routing" in bal.text
    uniform = sglang_decode().assign(routing="uniform")
    out = q4_experts(em, uniform.assign(variant="sglang-bf16-graphs"))
    assert only(out, 4, "uniform routing").numbers["routing"] == "uniform"
    assert not [f for f in out.findings if "router included" in f.text]
    bal = only(
        seed_comparison(StudyTables(HW_H200, PEAKS, decode=uniform, expert_m=em)),
        "seed",
        "perfect balance",
    )
    assert "routed uniformly" in bal.text and "random routing" not in bal.text


def test_dummy_weights_note_names_the_routing_of_each_variant():
    from studylib.study_answers import dummy_weights_note

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


def test_q5_tensor_parallel_against_one_gpu_and_graphs_paired_per_gpu_count():
    from studylib.study_answers import tp_pairs

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
    out = q5_decode(table, HW_H200)
    tp = only(out, 5, "2 GPUs against one, FP8 weights, CUDA graphs on")
    assert tp.numbers["per_concurrency"][64]["w_n_max"] == pytest.approx(224 + 5)
    assert "C = 64: tok/s 2.00×, TPOT 0.50×, 224 W per GPU against 280 W (GPUs 219–229 W)" in (
        tp.text
    )
    assert "limits sw_power_cap against none" in tp.text
    # Graphs on against off is paired within each GPU count, never TP2 against TP1.
    graphs = [f for f in out.findings if f.text.startswith("CUDA graphs on against off")]
    assert {(f.numbers["gpus"], f.numbers["variant_on"], f.numbers["variant_off"])
            for f in graphs} == {(1, "sglang-fp8-graphs", "sglang-fp8-eager"),
                                 (2, "sglang-fp8-graphs-tp2", "sglang-fp8-eager-tp2")}  # fmt: skip
    assert tp_pairs(one).empty  # no tensor-parallel variant: nothing to pair


def test_q4_per_rank_load_with_expert_parallelism_and_equal_under_tp():
    em = random_expert_m()  # 16 experts, C = 8 and 64
    ep2 = em.assign(variant="sglang-fp8-graphs-ep2")
    tp2 = em.assign(variant="sglang-fp8-graphs-tp2")
    decode = pd.DataFrame({"engine": "sglang", "variant": ["sglang-fp8-graphs-ep2",
                                                           "sglang-fp8-graphs-tp2"],
                           "gpus": [2, 2], "ep": [2, 1], "concurrency": [8, 8]})  # fmt: skip
    out = q4_experts(pd.concat([ep2, tp2], ignore_index=True), decode)
    ranks = only(out, 4, "expert parallel over 2 GPUs, each holding 8 experts")
    # The busiest rank's share of a layer over 1/2, from experts 0-7 against 8-15.
    g = em[em["concurrency"] == 8]
    per_layer = g.groupby("layer").apply(
        lambda x: 2 * max(x.loc[x["expert"] < 8, "tokens"].sum(),
                          x.loc[x["expert"] >= 8, "tokens"].sum()) / x["tokens"].sum(),
        include_groups=False,
    )  # fmt: skip
    assert ranks.numbers["busiest_over_balanced"][8] == pytest.approx(per_layer.max())
    equal = only(out, 4, "split every expert over the GPUs")
    assert equal.numbers["variants"] == ["sglang-fp8-graphs-tp2"]
    # One GPU, no EP: nothing said about ranks.
    one = q4_experts(em, sglang_decode().assign(variant="sglang-bf16-graphs"))
    assert not [f for f in one.findings if "rank" in f.text]
