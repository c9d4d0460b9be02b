"""The report's computed findings: numbers and texts from synthetic tables, missing notes for
missing inputs, and a print-out on real H200 / CPU results when they are on this machine."""

from pathlib import Path

import pandas as pd
import pytest
from studylib.study_answers import (
    SEED,
    Finding,
    Findings,
    compute_findings,
    fmt_us,
    pick_expert_shape,
    q1_backends,
    q2_bounds,
    q3_power,
    q4_experts,
    q5_decode,
    seed_comparison,
)
from studylib.study_tables import StudyTables

H200 = Path(__file__).resolve().parents[1] / "examples" / "h200x2-2026-11-29"  # a real run
CPU = Path("/tmp/freshclone2/results")

HW_H200 = {
    "device": "cuda",
    "gpus": [{"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132,
              "power_limit_w": 700.0, "max_sm_clock_mhz": 1980}],
    "host": {"cpu_count": 16, "cpu_model": "Xeon"},
}  # fmt: skip
HW_CPU = {"device": "cpu", "gpus": [], "host": {"cpu_count": 2, "cpu_model": "Xeon"}}
PEAKS = {"bf16_tflops": 800.0, "fp8_tflops": 1600.0, "fp4_tflops": None,
         "fp4_error": "BackendSupportedError: no fp4 here", "copy_gbps": 4000.0}  # fmt: skip


def point(backend, impl, op, dtype, m, *, status="ok", error="", eager=None, graph=None,
          cold=None, floor=None, basis="memory", g=None, flops=None):  # fmt: skip
    return {
        "backend": backend, "impl": impl, "op": op, "dtype": dtype, "shape": "expert_up", "M": m,
        "N": 6144, "K": 2048, "G": g, "status": status, "error": error,
        "eager_us": eager, "graph_us": graph, "cold_us": cold, "floor_us": floor,
        "floor_basis": basis if status == "ok" else "",
        "flops": flops if flops is not None else 2.0 * m * 6144 * 2048,
    }  # fmt: skip


def synthetic_sweep() -> pd.DataFrame:
    rows = []
    # BF16: "a" is the faster kernel at M 1 and 16, "b" at M 64; "a" eager is flat to M 64.
    for m, (ae, ag, be, bg) in {1: (30, 6, 40, 7), 16: (30, 6, 40, 7), 64: (40, 9, 40, 8),
                                4096: (200, 150, 190, 140)}.items():  # fmt: skip
        rows.append(point("torch", "a", "matmul", "bf16", m, eager=ae, graph=ag, cold=ag + 2,
                          floor=5.0))  # fmt: skip
        rows.append(point("fi", "b", "mm_bf16", "bf16", m, eager=be, graph=bg, floor=5.0))
    # FP8: one implementation; eager 20 µs at M 16, graph 4 µs, floor 2.5 µs.
    rows.append(point("sgl", "c", "fp8_mm", "fp8_e4m3", 16, eager=20.0, graph=4.0, floor=2.5))
    # FP4: sgl fails below 256 then is slower than flashinfer cutlass; auto unsupported.
    for m in (16, 64):
        rows.append(point("sgl_kernel", "cutlass", "cutlass_scaled_fp4_mm", "nvfp4", m,
                          status="error", error="RuntimeError: bad tile"))  # fmt: skip
        rows.append(point("flashinfer", "cutlass", "mm_fp4", "nvfp4", m, eager=35.0, graph=8.0))
    for m, (s_t, f_t) in {256: (12.0, 10.0), 4096: (90.0, 100.0), 8192: (200.0, 150.0)}.items():
        rows.append(point("sgl_kernel", "cutlass", "cutlass_scaled_fp4_mm", "nvfp4", m,
                          eager=s_t + 20, graph=s_t))  # fmt: skip
        rows.append(point("flashinfer", "cutlass", "mm_fp4", "nvfp4", m, eager=f_t + 20,
                          graph=f_t))  # fmt: skip
    for m in (16, 4096):
        for impl in ("auto", "trtllm"):
            rows.append(point("flashinfer", impl, "mm_fp4", "nvfp4", m, status="unsupported",
                              error="no CUDA device"))  # fmt: skip
    # A grouped row of the same shape is not a single GEMM: never ranked.
    rows.append(point("torch", "a", "grouped_mm", "bf16", 16, eager=1.0, graph=0.5, g=8))
    return pd.DataFrame(rows)


def only(findings: Findings, question, contains: str = "") -> Finding:
    hits = [f for f in findings.findings if f.question == question and contains in f.text]
    assert len(hits) == 1, [f.text for f in findings.findings if f.question == question]
    return hits[0]


# ---------------------------------------------------------------------------------------------
# Formatting and shape choice
# ---------------------------------------------------------------------------------------------


def test_formats_and_expert_shape_choice():
    assert fmt_us(4.321) == "4.3 µs"
    assert fmt_us(0.031) == "0.03 µs"
    assert fmt_us(602.4) == "602 µs"
    assert fmt_us(2453.0) == "2.45 ms"
    assert fmt_us(15900.0) == "15.9 ms"
    sweep = pd.DataFrame([
        {"shape": "dense", "N": 8192, "K": 8192, "G": None},
        {"shape": "big_k2048", "N": 4096, "K": 2048, "G": None},
        {"shape": "small_k2048", "N": 1024, "K": 2048, "G": None},
    ])  # fmt: skip
    assert pick_expert_shape(sweep) == "big_k2048"
    sweep.loc[len(sweep)] = {"shape": "glm", "N": 6144, "K": 2048, "G": None}
    assert pick_expert_shape(sweep) == "glm"
    sweep.loc[len(sweep)] = {"shape": "expert_up", "N": 1, "K": 1, "G": None}
    assert pick_expert_shape(sweep) == "expert_up"
    assert pick_expert_shape(None) is None


# ---------------------------------------------------------------------------------------------
# Question 1
# ---------------------------------------------------------------------------------------------


def test_q1_fastest_per_dtype_and_size_class():
    out = q1_backends(synthetic_sweep(), PEAKS)
    decode = only(out, 1, "BF16, decode-sized")
    assert decode.numbers["winner"] == "torch·a matmul"
    assert (decode.numbers["wins"], decode.numbers["sizes"]) == (2, 3)
    assert decode.numbers["basis"] == "graph"
    assert decode.numbers["runner_up"] == "fi·b mm_bf16"
    assert decode.numbers["winner_min_us"] == 6 and decode.numbers["winner_max_us"] == 9
    assert "fastest is torch·a matmul at 2 of 3 sizes (graph 6.0–9.0 µs)" in decode.text
    prefill = only(out, 1, "BF16, prefill-sized")
    assert prefill.numbers["winner"] == "fi·b mm_bf16"
    fp8 = only(out, 1, "FP8, decode-sized")
    assert "only sgl·c fp8_mm ran" in fp8.text
    # FP8 has no prefill point: a missing note, not a finding.
    assert any("FP8 prefill-sized" in m.text for m in out.missing)


def test_q1_failures_with_their_own_error_and_where():
    out = q1_backends(synthetic_sweep(), PEAKS)
    sgl = only(out, 1, "cutlass_scaled_fp4_mm (FP4): error")
    assert sgl.numbers["status"] == "error"
    assert (sgl.numbers["count"], sgl.numbers["points"], sgl.numbers["ok_points"]) == (2, 5, 3)
    assert "below M = 256" in sgl.text
    assert "“RuntimeError: bad tile”" in sgl.text
    shared = only(out, 1, "no CUDA device")
    assert shared.numbers["combos"] == 2 and shared.numbers["count"] == 4
    assert "flashinfer·auto mm_fp4 (FP4)" in shared.text
    assert "flashinfer·trtllm mm_fp4 (FP4)" in shared.text
    fp4 = only(out, 1, "FP4:")
    assert fp4.numbers["fp4_ok"] == 8
    assert fp4.numbers["fp4_impls"] == [
        "flashinfer·cutlass mm_fp4",
        "sgl_kernel·cutlass cutlass_scaled_fp4_mm",
    ]


def test_q1_no_fp4_ran_quotes_the_peak_error():
    sweep = synthetic_sweep()
    sweep = sweep[~((sweep["dtype"] == "nvfp4") & (sweep["status"] == "ok"))]
    fp4 = only(q1_backends(sweep, PEAKS), 1, "FP4:")
    assert fp4.numbers["fp4_ok"] == 0
    assert "none of the 6 FP4 GEMM points ran" in fp4.text
    assert "BackendSupportedError: no fp4 here" in fp4.text


def test_q1_all_ok():
    sweep = synthetic_sweep()
    sweep = sweep[sweep["status"] == "ok"]
    f = only(q1_backends(sweep, PEAKS), 1, "Every one")
    assert f.numbers["failed"] == 0


# ---------------------------------------------------------------------------------------------
# Question 2
# ---------------------------------------------------------------------------------------------


def test_q2_launch_cost_and_floor_at_m16():
    out = q2_bounds(synthetic_sweep(), PEAKS)
    bf16 = only(out, 2, "BF16 call")
    n = bf16.numbers
    # Fastest eager call at M = 16 is "a" (30 µs), launch = 30 − 6 = 24 µs (80 %).
    assert n["who"] == "torch·a matmul" and n["M"] == 16
    assert n["launch_us"] == pytest.approx(24.0)
    assert n["launch_share"] == pytest.approx(0.8)
    assert n["kernel_who"] == "torch·a matmul"
    assert n["over_floor"] == pytest.approx(6.0 / 5.0)
    assert n["cold_over_floor"] == pytest.approx(8.0 / 5.0)
    assert "launch-bound when called eagerly" in n["verdict"]
    assert "memory-bound" in n["verdict"]
    assert "takes 30.0 µs eager, of which 24.0 µs (80 %) is launch cost" in bf16.text
    assert "its kernel replays in 6.0 µs, 1.20× the memory floor of 5.0 µs" in bf16.text
    fp8 = only(out, 2, "FP8 call")
    assert fp8.numbers["launch_share"] == pytest.approx(0.8)
    assert fp8.numbers["over_floor"] == pytest.approx(1.6)


def test_q2_fastest_kernel_differs_from_fastest_call():
    sweep = synthetic_sweep()
    # "b" becomes the fastest kernel at M = 16 while "a" stays the fastest eager call.
    sweep.loc[(sweep["impl"] == "b") & (sweep["M"] == 16), "graph_us"] = 5.5
    n = only(q2_bounds(sweep, PEAKS), 2, "BF16 call").numbers
    assert n["who"] == "torch·a matmul"
    assert n["kernel_who"] == "fi·b mm_bf16"
    assert n["over_floor"] == pytest.approx(1.1)


def test_q2_prefill_efficiency_against_measured_peak():
    out = q2_bounds(synthetic_sweep(), PEAKS)
    f = only(out, 2, "measured BF16 peak")
    flops = 2.0 * 4096 * 6144 * 2048
    assert f.numbers["M"] == 4096
    assert f.numbers["who"] == "fi·b mm_bf16"
    assert f.numbers["tflops"] == pytest.approx(flops / 140e-6 / 1e12)
    assert f.numbers["pct_peak"] == pytest.approx(100 * flops / 140e-6 / 1e12 / 800.0)
    # FP4 has no measured peak: said, not invented.
    assert any("FP4: no measured peak" in m.text for m in out.missing)


def test_q2_flat_eager_range():
    f = only(q2_bounds(synthetic_sweep(), PEAKS), 2, "stays flat")
    flat = f.numbers["flat_to_m"]
    # a: 30, 30, 40 (≤ 45), 200 -> flat to 64.
    assert flat["torch·a matmul (BF16)"] == 64
    # flashinfer mm_fp4 eager: 35 (16), 35 (64), 30 (256), 120 (4096) -> flat to 256.
    assert flat["flashinfer·cutlass mm_fp4 (FP4)"] == 256
    assert "torch·a matmul (BF16) flat to M = 64 (30.0 µs; 200 µs at M = 4096)" in f.text


def test_q2_says_not_flat_when_the_second_size_is_already_out():
    sweep = synthetic_sweep()
    a = (sweep["impl"] == "a") & (sweep["M"] > 1)
    sweep.loc[a, "eager_us"] = sweep.loc[a, "eager_us"] * 10
    f = only(q2_bounds(sweep, PEAKS), 2, "stays flat")
    assert "torch·a matmul (BF16) not flat (30.0 µs at M = 1, 300 µs at M = 16)" in f.text


def test_q2_eager_only_machine():
    sweep = synthetic_sweep()
    sweep[["graph_us", "cold_us"]] = None
    out = q2_bounds(sweep, PEAKS)
    f = only(out, 2, "BF16 call")
    assert f.numbers["over_floor"] == pytest.approx(30.0 / 5.0)
    assert f.numbers["over_floor_basis"] == "eager"
    assert "launch_us" not in f.numbers
    assert "takes 30.0 µs eager, 6.00× the memory floor" in f.text
    assert any("no graph-replayed times at M = 16" in m.text for m in out.missing)


# ---------------------------------------------------------------------------------------------
# Question 3
# ---------------------------------------------------------------------------------------------


def window(mode, m=None, w=None, pct=None, clock=1980.0, reasons="", tensor=None, impl="a",
           status="ok", source="nvml", gap=0.1):  # fmt: skip
    return {"backend": "torch", "impl": impl if mode != "idle" else None,
            "op": "matmul" if mode != "idle" else None, "dtype": "bf16", "shape": "expert_up",
            "M": m, "mode": mode, "label": "idle" if mode == "idle" else "steady",
            "status": status, "avg_w": w, "pct_limit": pct, "power_limit_w": 700.0,
            "sm_clock_mhz": clock, "throttle_reasons": reasons, "tensor_util": tensor,
            "power_source": source, "energy_gap_pct": gap}  # fmt: skip


def synthetic_power() -> pd.DataFrame:
    return pd.DataFrame([
        window("idle", w=80.0, pct=80 / 7, clock=345.0),
        window("eager", 16, 150.0, 150 / 7, tensor=2.0),
        window("eager", 64, 210.0, 30.0, tensor=6.0),
        window("graph", 16, 350.0, 50.0, tensor=7.0),
        window("eager", 4096, 560.0, 80.0, clock=1900.0, reasons="sw_power_cap", tensor=40.0),
        window("graph", 4096, 690.0, 98.5, clock=1400.0, reasons="sw_power_cap", tensor=85.0,
               gap=-0.8),
        window("eager", 16, impl="fp4", status="unsupported", source="nvml"),
    ])  # fmt: skip


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


# ---------------------------------------------------------------------------------------------
# Question 4
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Question 5
# ---------------------------------------------------------------------------------------------


def synthetic_decode() -> pd.DataFrame:
    def row(variant, c, tok, j, w, pct, valid=True, steady=60.0, errors=0):
        return {"engine": "sglang", "variant": variant, "concurrency": c, "gpus": 8,
                "power_source": "nvml", "steady_s": steady, "valid": valid, "errors": errors,
                "wrong_length": 0, "output_tok_s": tok, "j_per_token": j, "avg_w_per_gpu": w,
                "pct_limit": pct}  # fmt: skip

    return pd.DataFrame([
        row("eager", 16, 400.0, 4.0, 200.0, 33.3),
        row("eager", 64, 1000.0, 2.0, 250.0, 41.7),
        row("graphs", 16, 800.0, 2.5, 250.0, 41.7),
        row("graphs", 64, 1500.0, 1.6, 300.0, 50.0),
        row("graphs", 256, 2000.0, 1.0, 300.0, 50.0, valid=False, steady=8.0, errors=2),
    ])  # fmt: skip


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


# ---------------------------------------------------------------------------------------------
# Seed comparison
# ---------------------------------------------------------------------------------------------


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
    seed = Path(__file__).resolve().parents[1] / ".." / "shared" / "seed" / "fp4-power-pivot.txt"
    seed = Path("/work/shared/seed/fp4-power-pivot.txt") if not seed.exists() else seed
    if not seed.exists():
        pytest.skip("seed write-up not on this machine")
    text = seed.read_text()
    for key in ("fp4_small_quote", "decode_w_quote", "sgl_fp4_quote", "tokens_per_expert_quote"):
        assert SEED[key] in text, key


# ---------------------------------------------------------------------------------------------
# Missing inputs never raise
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Real results, when present
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# SGLang decode: CUDA graphs on / off per weights, HBM floor, net J/token, random routing
# ---------------------------------------------------------------------------------------------


def sglang_decode() -> pd.DataFrame:
    """bf16 and fp8 weights × CUDA graphs on / off at C = 1 and 64, one GPU, new columns."""
    rows = []
    runs = (("bf16", True, 4.0, 300.0), ("bf16", False, 10.0, 250.0),
            ("fp8", True, 3.0, 280.0), ("fp8", False, 9.0, 240.0))  # fmt: skip
    for weights, graphs, tpot, w in runs:
        variant = f"sglang-{weights}-{'graphs' if graphs else 'eager'}"
        for c, scale in ((1, 1.0), (64, 5.0)):
            t = tpot * scale
            tok = c / (t / 1e3)
            rows.append({
                "engine": "sglang", "variant": variant,
                "weights": weights, "cuda_graphs": graphs, "concurrency": c, "gpus": 1,
                "power_source": "nvml", "steady_s": 30.0, "valid": True, "errors": 0,
                "wrong_length": 0, "output_tok_s": tok, "tpot_ms": t, "tok_s_over_c_tpot": 1.0,
                "itl_p50_ms": t, "itl_p99_ms": 2 * t, "ttft_p50_ms": 50.0, "avg_w_per_gpu": w,
                "avg_w_total": w, "pct_limit": 100 * w / 700, "idle_w_per_gpu": 100.0,
                "j_per_token": w / tok, "j_per_token_net": (w - 100.0) / tok,
                "sm_clock_mhz": 1980.0, "throttle_reasons": "", "sm_util": 50.0,
                "tensor_util": 10.0, "dram_util": 60.0, "step_gb": 4.0, "load_cpu_pct": 5.0,
                "first_error": "", "hbm_floor_ms": 1.0 * scale, "tpot_over_floor": t / scale,
            })  # fmt: skip
    return pd.DataFrame(rows)


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


def test_seed_power_per_graphs_regime():
    out = seed_comparison(StudyTables(HW_H200, PEAKS, decode=sglang_decode()))
    power = only(out, "seed", "235 W of 600 W")
    assert power.numbers["decode_w_graphs_off"] == [240.0, 250.0]
    assert power.numbers["decode_w_graphs_on"] == [280.0, 300.0]
    assert "with CUDA graphs off (as the seed ran) 240–250 W" in power.text


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


# ---------------------------------------------------------------------------------------------
# One ranking rule (issue 12): cold time where measured, ties within max(IQR, 3 %)
# ---------------------------------------------------------------------------------------------


def ranked_rows(times: dict, column="cold_us", iqr=0.0) -> pd.DataFrame:
    return pd.DataFrame([
        {"backend": b, "impl": "x", "op": "mm", column: t, column.replace("_us", "_iqr_us"): iqr}
        for b, t in times.items()
    ])  # fmt: skip


def test_times_within_three_percent_are_one_winner():
    from studylib.stages.sweep.sweep_ranking import fastest

    names, best = fastest(ranked_rows({"a": 10.0, "b": 10.29, "c": 10.31}), "cold_us")
    assert names == ["a·x mm", "b·x mm"] and best["backend"] == "a"


def test_a_wide_iqr_widens_the_tie():
    from studylib.stages.sweep.sweep_ranking import fastest

    rows = ranked_rows({"a": 10.0, "b": 10.5}, iqr=0.6)
    assert fastest(rows, "cold_us")[0] == ["a·x mm", "b·x mm"]
    assert fastest(ranked_rows({"a": 10.0, "b": 10.5}), "cold_us")[0] == ["a·x mm"]


def test_rankings_use_cold_time_where_every_row_has_it():
    from studylib.stages.sweep.sweep_ranking import fastest_per_size

    rows = []
    for backend, eager, graph, cold in (("hot", 30.0, 4.0, 9.0), ("cold", 40.0, 5.0, 6.0)):
        rows.append({"backend": backend, "impl": "x", "op": "mm", "dtype": "fp8_e4m3",
                     "shape": "down", "M": 16, "N": 6144, "K": 2048, "G": None,
                     "status": "ok", "eager_us": eager, "graph_us": graph,
                     "cold_us": cold})  # fmt: skip
    ranked = fastest_per_size(pd.DataFrame(rows))
    (row,) = ranked["rows"]
    assert row["basis"] == "cold" and row["cells"][16]["who"] == ["cold/x"]
    # Without cold times (a CPU run, older results) graph decides, and the L2-hot one wins.
    ranked = fastest_per_size(pd.DataFrame(rows).drop(columns="cold_us"))
    assert ranked["rows"][0]["basis"] == "graph"
    assert ranked["rows"][0]["cells"][16]["who"] == ["hot/x"]


def test_ranking_survives_tables_joined_with_repeated_row_labels():
    from studylib.stages.sweep.sweep_ranking import fastest

    rows = pd.concat([ranked_rows({"a": 10.0}), ranked_rows({"b": 12.0})])  # index 0 twice
    assert fastest(rows, "cold_us")[0] == ["a·x mm"]


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


def test_many_implementations_sharing_a_reason_are_counted_per_backend():
    from studylib.stages.sweep.sweep_answers import q1_backends

    rows = []
    for backend, impls in (("flashinfer", ["a", "b", "c", "d"]), ("sgl_kernel", ["e", "f"])):
        for impl in impls:
            rows.append({"backend": backend, "impl": impl, "op": "mm", "dtype": "bf16",
                         "shape": "down", "M": 1, "N": 6144, "K": 2048, "G": None,
                         "status": "unsupported", "error": "no CUDA device"})  # fmt: skip
    out = q1_backends(pd.DataFrame(rows))
    f = only(out, 1, "unsupported at 6 points")
    assert "of 6 implementations: flashinfer (4), sgl_kernel (2) — “no CUDA device”" in f.text


def test_moe_layers_get_their_own_ranking_and_the_routing_effect():
    from studylib.stages.sweep.sweep_answers import q1_backends

    rows = []
    for backend, impl, m, cold, cold_rec in (
        ("torch", "grouped_mm", 16, 3000.0, 2700.0),
        ("torch", "grouped_mm", 512, 6200.0, 6300.0),
        ("sgl_kernel", "triton", 16, 2200.0, 1900.0),
        ("sgl_kernel", "triton", 512, 7400.0, 7400.0),
    ):
        for routing, t in (("balanced", cold), ("recorded", cold_rec)):
            rows.append({"backend": backend, "impl": impl, "op": "fused_moe", "dtype": "bf16",
                         "shape": "down", "M": m, "N": 6144, "K": 2048, "G": 256, "top_k": 8,
                         "routing": routing, "status": "ok", "eager_us": t * 1.1,
                         "graph_us": t, "cold_us": t})  # fmt: skip
    f = only(q1_backends(pd.DataFrame(rows)), 1, "Whole MoE layers")
    assert "(256 experts, top-8, N = 6144, K = 2048), BF16" in f.text
    assert (
        "fastest sgl_kernel·triton fused_moe at M = 16; torch·grouped_mm fused_moe at M = 512"
        in f.text
    )
    assert f.numbers["recorded_change_min_pct"] == pytest.approx(-100 * 300 / 2200)
    assert f.numbers["recorded_change_max_pct"] == pytest.approx(100 * 100 / 6200)


def test_m_list_writes_a_set_with_gaps_as_its_runs():
    from studylib.core.finding_records import _m_list

    grid = [1, 4, 16, 64, 128, 256, 512]
    assert _m_list([1, 16, 64, 128, 256], grid) == "M 1, 16–256"
    assert _m_list([4, 512], grid) == "M 4, 512"
    assert _m_list([16, 64, 128], grid) == "M 16–128"
    assert _m_list([64], grid) == "M = 64"


def test_moe_layers_name_a_tie_as_one_and_a_lone_winner_apart():
    from studylib.stages.sweep.sweep_answers import q1_backends

    rows = []
    for backend, impl, times in (
        ("flashinfer", "cutlass", {1: 164.0, 16: 2228.0, 512: 4597.0}),
        ("sgl_kernel", "triton", {1: 157.0, 16: 2236.0, 512: 7401.0}),
    ):
        for m, t in times.items():
            rows.append({"backend": backend, "impl": impl, "op": "fused_moe", "dtype": "bf16",
                         "shape": "down", "M": m, "N": 6144, "K": 2048, "G": 256, "top_k": 8,
                         "routing": "balanced", "status": "ok", "cold_us": t,
                         "cold_iqr_us": 5.0})  # fmt: skip
    f = only(q1_backends(pd.DataFrame(rows)), 1, "Whole MoE layers")
    # 164 against 157 µs (4 %) is no tie under the 3 % rule; 2228 against 2236 is.
    assert ("fastest sgl_kernel·triton fused_moe at M = 1; flashinfer·cutlass fused_moe and "
            "sgl_kernel·triton fused_moe tied at M = 16; flashinfer·cutlass fused_moe at "
            "M = 512." in f.text)  # fmt: skip
    assert f.numbers["wins"] == {"flashinfer·cutlass fused_moe": 2,
                                 "sgl_kernel·triton fused_moe": 2}  # fmt: skip


def test_gaps_of_a_machine_without_a_gpu_are_expected_and_a_missed_recorder_is_not():
    from studylib.findings.experts import q4_experts

    no_power = synthetic_power().assign(power_source="none", avg_w=None)
    (gap,) = q3_power(no_power, {"device": "cpu"}).missing
    assert gap.expected
    decode_cpu = pd.DataFrame([{"engine": "transformers", "concurrency": 1}])
    assert q4_experts(None, decode_cpu).missing[0].expected
    decode_gpu = pd.DataFrame([{"engine": "sglang", "concurrency": 1}])
    assert not q4_experts(None, decode_gpu).missing[0].expected


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
