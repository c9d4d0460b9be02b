"""The step model: kernel tables -> predicted decode step, beside the measured one."""

import math

import pandas as pd
import pytest
from helpers import ROOT
from studylib.stages.step_model.step_model_answers import count_verdict, step_answers
from studylib.stages.step_model.step_model_build import (
    COLUMNS,
    MODEL_COMPONENTS,
    kernel_us,
    loop_watts,
    measured_components,
    predict_step,
    step_model,
)

GEOMETRY = {"layers": 4, "experts": 256, "shared_experts": 1}
CS = (1, 16)


def _row(backend, impl, op, dtype, shape, m, cold, graph=None, eager=None, **extra):
    graph = cold if graph is None else graph
    return {"backend": backend, "impl": impl, "op": op, "dtype": dtype, "shape": shape, "M": m,
            "status": "ok", "cold_us": cold, "graph_us": graph,
            "eager_us": graph + 10 if eager is None else eager, **extra}  # fmt: skip


def sweep(weights_dtype="bf16", drop=()):
    """Every kernel the model looks up, at C = 1 and 16, with simple times: MoE 100 µs x C
    (balanced) and 120 µs x C (recorded), attention 10, each dense GEMM 2, lm_head 5."""
    rows = []
    for c in CS:
        for routing, per in (("balanced", 100), ("recorded", 120)):
            rows.append(_row("sgl_kernel", "triton", "fused_moe", weights_dtype, "down", c,
                             per * c, G=256, routing=routing))  # fmt: skip
        rows.append(_row("sgl_kernel", "triton", "decode_attention", "bf16", "attention", c, 10))
        gemm = (("torch", "aten", "matmul") if weights_dtype == "bf16"
                else ("sgl_kernel", "cutlass", "fp8_scaled_mm"))  # fmt: skip
        for shape in ("qkv", "o_proj", "gate_up", "down"):
            rows.append(_row(*gemm, weights_dtype, shape, c, 2))
        rows.append(_row("torch", "aten", "matmul", "bf16", "router", c, 2))
        rows.append(_row("torch", "aten", "matmul", "bf16", "lm_head", c, 5))
    frame = pd.DataFrame(rows)
    for shape in drop:
        frame = frame[frame["shape"] != shape]
    return frame


def decode(graphs=True, weights="bf16"):
    return pd.DataFrame([
        {"engine": "sglang", "variant": f"v-{graphs}", "weights": weights, "cuda_graphs": graphs,
         "concurrency": c, "gpus": 1, "valid": True, "tpot_ms": 1.0 + c / 10,
         "j_per_token": 0.5, "idle_w_per_gpu": 80.0, "hbm_floor_ms": 0.9}
        for c in CS
    ] + [{"engine": "sglang", "variant": "tp2", "weights": weights, "cuda_graphs": True,
          "concurrency": 1, "gpus": 2, "valid": True, "tpot_ms": 2.0}])  # fmt: skip


def test_predicted_step_adds_layers_of_moe_attention_dense_and_one_lm_head():
    parts = predict_step(sweep(), GEOMETRY, "bf16", 16, "balanced")
    # the routed experts' layer and the shared expert's gate_up and down (fused in SGLang)
    assert parts["moe"]["us"] == pytest.approx(4 * (1600 + 2 * 2))
    assert parts["attention"]["us"] == pytest.approx(4 * 10)
    # per layer qkv, o_proj and router; lm_head once
    assert parts["dense"]["us"] == pytest.approx(4 * 3 * 2 + 5)
    assert parts["other"]["us"] == 0  # one graph replay: no launches
    assert {p["basis"] for n, p in parts.items() if n != "other"} == {"cold"}
    recorded = predict_step(sweep(), GEOMETRY, "bf16", 16, "recorded")
    assert recorded["moe"]["us"] == pytest.approx(4 * (1920 + 2 * 2))


def test_graphs_off_the_gpu_waits_for_the_host_only_where_the_host_is_longer():
    frame = sweep()
    # The host's cost of a call is its least eager time over M: attention's 15 µs at C = 16.
    at16 = (frame["op"] == "decode_attention") & (frame["M"] == 16)
    frame.loc[at16, "eager_us"] = 15.0
    parts = predict_step(frame, GEOMETRY, "bf16", 1, "balanced", graphs=False)
    # host per layer: moe 110, shared gate_up and down 12 each, attention 15, 3 dense 12
    # each; lm_head 15 once. Kernels at C = 1: 4 x (104 + 10 + 6) + 5 = 485.
    host = 4 * (110 + 2 * 12 + 15 + 3 * 12) + 15
    assert parts["other"]["us"] == pytest.approx(host - 485)
    assert "host" in parts["other"]["basis"]
    # At C = 16 the kernels take 4 x (1604 + 10 + 6) + 5 µs: the GPU hides the host.
    assert predict_step(frame, GEOMETRY, "bf16", 16, "balanced", graphs=False)["other"][
        "us"] == 0  # fmt: skip
    # Without eager times the host is unknown, and so is the step.
    blind = predict_step(frame.drop(columns="eager_us"), GEOMETRY, "bf16", 1, "balanced",
                         graphs=False)  # fmt: skip
    assert math.isnan(blind["other"]["us"]) and "eager times of" in blind["other"]["missing"]


def test_fp8_weights_use_the_fp8_gemms_but_keep_router_and_lm_head_bf16():
    frame = pd.concat([sweep("fp8_e4m3"), sweep("bf16")])
    frame.loc[(frame["op"] == "fp8_scaled_mm"), "cold_us"] = 1.0
    parts = predict_step(frame, GEOMETRY, "fp8", 1, "balanced")
    assert parts["dense"]["us"] == pytest.approx(4 * (2 * 1.0 + 2) + 5)
    assert parts["moe"]["us"] == pytest.approx(4 * (100 + 2 * 1.0))


def test_a_missing_kernel_names_itself_and_leaves_its_component_unknown():
    parts = predict_step(sweep(drop=("lm_head",)), GEOMETRY, "bf16", 1, "balanced")
    assert math.isnan(parts["dense"]["us"]) and "lm_head" in parts["dense"]["missing"]
    assert parts["moe"]["us"] == pytest.approx(4 * (100 + 4))


def test_a_kernel_whose_point_failed_is_missing_with_its_error():
    # The sweep ran it and it failed (an 80-GB H100's FP8 MoE points, out of memory): not the
    # same as a sweep that never asked for it.
    frame = sweep("fp8_e4m3")
    moe = (frame["op"] == "fused_moe") & (frame["M"] == 1)
    frame.loc[moe, ["status", "cold_us", "graph_us"]] = ["error", float("nan"), float("nan")]
    frame["error"] = ""
    frame.loc[moe, "error"] = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 24.00 "
                               "GiB. GPU 0 has a total capacity of 79.18 GiB")  # fmt: skip
    parts = predict_step(frame, GEOMETRY, "fp8", 1, "balanced")
    assert math.isnan(parts["moe"]["us"])
    assert parts["moe"]["missing"] == (
        "sgl_kernel/triton/fused_moe/fp8_e4m3/1/balanced (its point failed: "
        "OutOfMemoryError: CUDA out of memory)"
    )
    assert "its point failed" not in predict_step(sweep("fp8_e4m3"), GEOMETRY, "fp8", 1,
                                                  "balanced")["moe"]["missing"]  # fmt: skip


def test_a_point_without_cold_time_falls_back_to_graph_and_says_so():
    frame = sweep()
    frame["cold_us"] = float("nan")
    assert kernel_us(frame, "cold", backend="torch", op="matmul", shape="lm_head", M=1)[:2] == (
        5.0, "graph")  # fmt: skip
    assert kernel_us(frame, "cold", backend="torch", op="matmul", shape="nope", M=1) is None


def test_the_loop_nearest_in_m_gives_the_watts_cold_first():
    windows = pd.DataFrame([
        {"backend": "torch", "impl": "aten", "op": "matmul", "dtype": "bf16", "M": m,
         "mode": mode, "label": "steady", "status": "ok", "avg_w": w}
        for m, mode, w in ((16, "cold", 400), (4096, "cold", 690), (16, "graph", 300))
    ])  # fmt: skip
    assert loop_watts(windows, "torch", "aten", "matmul", "bf16", 64) == 400
    assert loop_watts(windows, "torch", "aten", "matmul", "bf16", 2048) == 690
    assert loop_watts(windows, "torch", "aten", "matmul", "fp8_e4m3", 16) is None


def test_table_rows_per_component_and_routing_for_one_gpu_variants_only():
    table = step_model(sweep(), decode(), GEOMETRY)
    assert list(table.columns) == COLUMNS
    assert set(table["variant"]) == {"v-True"}  # TP2 left out
    assert len(table) == len(CS) * 2 * len(MODEL_COMPONENTS)
    one = table[(table["concurrency"] == 16) & (table["routing"] == "balanced")]
    step = one["predicted_step_us"].iloc[0]
    assert step == pytest.approx(4 * 1604 + 40 + 29)
    assert one["predicted_over_tpot"].iloc[0] == pytest.approx(step / 2600)
    # Without a profile the measured side is TPOT less the predicted kernels, under other.
    other = one[one["component"] == "other"].iloc[0]
    assert other["measured_us"] == pytest.approx(2600 - step)
    assert other["measured_basis"] == "TPOT - predicted kernels"


def loop_windows() -> pd.DataFrame:
    """Kernel-power windows at M = 16: the fused MoE at 600 W, the GEMMs at 400 W."""
    return pd.DataFrame([
        {"backend": b, "impl": i, "op": o, "dtype": "bf16", "M": 16, "mode": "cold",
         "label": "steady", "status": "ok", "avg_w": w}
        for b, i, o, w in (("sgl_kernel", "triton", "fused_moe", 600),
                           ("torch", "aten", "matmul", 400))
    ])  # fmt: skip


def test_energy_per_token_from_loop_watts_and_idle_power():
    windows = loop_windows()
    table = step_model(sweep(), decode(graphs=False), GEOMETRY, windows=windows)
    row = table[(table["concurrency"] == 16) & (table["routing"] == "balanced")]
    parts = row.set_index("component")["predicted_us"]
    joules = 1e-6 * (parts["moe"] * 600 + (parts["attention"] + parts["dense"]) * 400
                     + parts["other"] * 80)  # fmt: skip
    assert row["predicted_j_per_token"].iloc[0] == pytest.approx(joules / 16)
    assert row["j_per_token_ratio"].iloc[0] == pytest.approx(joules / 16 / 0.5)


def decode_at(tpot16_ms: float, graphs=True) -> pd.DataFrame:
    """decode() with TPOT at C = 16 set to a profile's step (the profiled step must run as
    the measured window did for its parts to stand as measured)."""
    frame = decode(graphs)
    frame.loc[frame["concurrency"] == 16, "tpot_ms"] = tpot16_ms
    return frame


def profile_at16(parts: dict, idle_us: float) -> pd.DataFrame:
    """A one-rank profile of v-True at C = 16: µs per step per component, and its idle."""
    return pd.DataFrame([
        {"variant": "v-True", "concurrency": 16, "rank": 0, "component": comp,
         "us_per_step": us, "idle_us_per_step": idle_us}
        for comp, us in parts.items()
    ])  # fmt: skip


def test_the_profile_feeds_the_measured_side_averaged_over_ranks():
    breakdown = pd.DataFrame([
        {"variant": "v-True", "concurrency": 16, "rank": r, "component": comp,
         "us_per_step": us + r * 10, "idle_us_per_step": 50.0}
        for r in (0, 1)
        for comp, us in (("moe", 6000), ("attention", 45), ("dense", 50), ("other", 30),
                         ("communication", 20))
    ])  # fmt: skip
    measured = measured_components(breakdown, "v-True", 16)
    assert measured == pytest.approx({"moe": 6005, "attention": 50, "dense": 55,
                                      "other": 35 + 25 + 50})  # fmt: skip
    table = step_model(sweep(), decode_at(6.2), GEOMETRY, breakdown=breakdown)
    row = table[(table["concurrency"] == 16) & (table["component"] == "moe")].iloc[0]
    assert row["measured_us"] == pytest.approx(6005) and row["measured_basis"] == "profile"
    assert row["profile_step_us"] == pytest.approx(6005 + 50 + 55 + 110)
    assert math.isnan(row["profile_context"])  # a breakdown without the column: unknown
    breakdown["context"] = 640.0
    table = step_model(sweep(), decode_at(6.2), GEOMETRY, breakdown=breakdown)
    at16 = table[table["concurrency"] == 16]
    assert (at16["profile_context"] == 640.0).all()
    assert table[table["concurrency"] == 1]["profile_context"].isna().all()  # no profile
    assert measured_components(breakdown, "v-True", 1) == {}


def answers_by_subject(table: pd.DataFrame) -> dict:
    return {a.subject: a for a in step_answers(table)}


def test_answers_count_components_and_energy_within_their_targets():
    # The profile at C = 16 (per rank averaged): MoE 6,005 µs against 6,416 predicted,
    # attention 50 against 40, dense 55 against 29, other 110 against none.
    breakdown = profile_at16({"moe": 6005, "attention": 50, "dense": 55, "other": 35,
                              "communication": 25}, 50.0)  # fmt: skip
    table = step_model(sweep(), decode_at(6.2), GEOMETRY, windows=loop_windows(),
                       breakdown=breakdown)  # fmt: skip
    rows = answers_by_subject(table)
    assert rows["component · moe"].verdict == "within"
    assert rows["component · attention"].verdict == "within"
    dense, other = rows["component · dense"], rows["component · other"]
    assert dense.verdict == "outside" == other.verdict
    assert "worst −47 % at v-True C = 16" in dense.sentence  # 29 / 55 - 1
    # Graphs on, the model predicts no host time: the profiler's 110 µs is shown as such.
    assert "worst: none predicted against 0.11 ms at v-True C = 16" in other.sentence
    # J/token: the table's prediction against the measured 0.5 J at each C.
    balanced = table[(table["routing"] == "balanced") & (table["component"] == "moe")]
    ratios = balanced.set_index("concurrency")["j_per_token_ratio"]
    within = int(sum(abs(r - 1) <= 0.25 for r in ratios))
    energy = rows["energy per token"]
    assert energy.verdict == count_verdict(within, len(ratios), "within", "outside")
    predicted = balanced.set_index("concurrency")["predicted_j_per_token"]
    assert f"v-True C = 16: {predicted[16]:.3g} against 0.5 J" in energy.evidence


def test_a_profile_whose_step_is_far_from_tpot_keeps_its_kernels_not_its_idle():
    # A profiled step of 5.17 ms (3 ms of it idle: the tracer's host cost) against a measured
    # TPOT of 2.6 ms: the kernels stand, other becomes TPOT less them (2,600 - 2,105 µs).
    breakdown = profile_at16({"moe": 2000, "attention": 50, "dense": 55, "other": 35,
                              "communication": 25}, 3000.0)  # fmt: skip
    table = step_model(sweep(), decode(), GEOMETRY, breakdown=breakdown)
    at16 = table[(table["concurrency"] == 16) & (table["routing"] == "balanced")]
    measured = at16.set_index("component")["measured_us"]
    assert measured["moe"] == pytest.approx(2000) and measured["other"] == pytest.approx(495)
    assert at16["profile_step_us"].tolist() == pytest.approx([5165.0] * 4)
    assert at16["measured_basis"].iloc[0] == (
        "profile; other = TPOT - profiled kernels (profiled step 5.17 ms, 1.99× TPOT)"
    )
    # The answers state the measured step as TPOT, never the 5.17 ms profile.
    rows = answers_by_subject(table)
    assert rows["v-True · C = 16"].sentence.endswith(
        "The fused MoE takes 2.00 ms of the 2.60 ms measured step.")  # fmt: skip
    assert "0.00 against 0.49 ms" in rows["component · other"].evidence
    # Within the tolerance (the noise floor) the profile stands whole.
    table = step_model(sweep(), decode_at(5.165 / 1.02), GEOMETRY, breakdown=breakdown)
    other = table[(table["concurrency"] == 16) & (table["component"] == "other")].iloc[0]
    assert other["measured_basis"] == "profile"
    assert other["measured_us"] == pytest.approx(35 + 25 + 3000)


def test_answers_state_the_prediction_against_tpot_and_the_launch_gap():
    on = step_model(sweep(), decode(True), GEOMETRY)
    off = step_model(sweep(), decode(False), GEOMETRY)
    off["tpot_us"] = off["tpot_us"] + 2000  # graphs off: 2 ms slower per step
    rows = answers_by_subject(pd.concat([on, off]))
    assert rows["v-True · C = 16"].sentence.startswith("Predicted 6.49 ms against TPOT 2.60 ms")
    # C = 1: the host's 775 µs less the kernels' 485 against a 2 ms gap; C = 16: the GPU
    # hides the host, but the gap is 2 ms (77 % of the 2.6 ms TPOT).
    at1, at16 = rows["host time · BF16 · C = 1"], rows["host time · BF16 · C = 16"]
    assert at1.sentence == ("Without CUDA graphs a step takes 2.00 ms longer (3.10 against "
                            "1.10 ms); the model predicts 0.29 ms more: missed.")  # fmt: skip
    assert at16.verdict == "missed" and "the model predicts 0.00 ms more" in at16.sentence
    assert rows["host time · BF16"].verdict == "not explained (0 of 2)"
    off["tpot_us"] = off["tpot_us"] - 2000 + 290  # the gap the host predicts at C = 1
    rows = answers_by_subject(pd.concat([on, off]))
    assert rows["host time · BF16 · C = 1"].verdict == "explained"
    assert rows["host time · BF16"].verdict == "explained at 1 of 2"


def test_a_profile_that_ran_another_batch_is_set_aside_and_said_so():
    breakdown = pd.DataFrame([
        {"variant": "v-True", "concurrency": 16, "rank": 0, "component": "moe",
         "us_per_step": 9000.0, "idle_us_per_step": 0.0, "batch": 80}])  # fmt: skip
    assert measured_components(breakdown, "v-True", 16) == {}
    table = step_model(sweep(), decode(), GEOMETRY, breakdown=breakdown)
    row = table[(table["concurrency"] == 16) & (table["component"] == "other")].iloc[0]
    assert row["measured_basis"] == ("TPOT - predicted kernels; profile ran at batch 80, "
                                     "not C = 16: not used")  # fmt: skip
    breakdown["batch"] = 16
    assert measured_components(breakdown, "v-True", 16)["moe"] == 9000.0


def test_a_profile_with_a_prefill_pass_in_its_steps_is_set_aside_and_said_so():
    # FP8 at C = 512 on the H200 (2026-12-04): 9 decode steps among 20 profiled passes, the
    # rest prefill passes, whose kernels made a 66-ms "step" against TPOT 16.6 ms.
    breakdown = pd.DataFrame([
        {"variant": "v-True", "concurrency": 16, "rank": 0, "component": "moe",
         "us_per_step": 51630.0, "idle_us_per_step": 0.0, "batch": 16,
         "prefill_us": 24973.3, "prefill_in_window": True}])  # fmt: skip
    assert measured_components(breakdown, "v-True", 16) == {}
    table = step_model(sweep(), decode(), GEOMETRY, breakdown=breakdown)
    row = table[(table["concurrency"] == 16) & (table["component"] == "other")].iloc[0]
    assert row["measured_basis"] == ("TPOT - predicted kernels; a prefill pass fell into the "
                                     "profiled steps (25.0 ms of prefill-only kernels): not "
                                     "used")  # fmt: skip
    # A table read back from CSV holds the flag as text; a clean window's profile stands.
    breakdown["prefill_in_window"] = "False"
    assert measured_components(breakdown, "v-True", 16)["moe"] == 51630.0


def test_fp8_projections_take_sglangs_block_fp8_gemm_where_the_sweep_has_it():
    rowwise = pd.concat([sweep("fp8_e4m3"), sweep("bf16")])
    block = rowwise[rowwise["op"] == "fp8_scaled_mm"].assign(
        op="fp8_blockwise_scaled_mm", impl="triton", cold_us=3.0
    )
    parts = predict_step(pd.concat([rowwise, block]), GEOMETRY, "fp8", 1, "balanced")
    assert parts["dense"]["us"] == pytest.approx(4 * (2 * 3.0 + 2) + 5)
    assert parts["dense"]["basis"] == "cold"
    # Without it, the row-wise GEMM stands in and the basis names it.
    parts = predict_step(rowwise, GEOMETRY, "fp8", 1, "balanced")
    assert parts["dense"]["us"] == pytest.approx(4 * (2 * 2.0 + 2) + 5)
    assert "sgl_kernel/cutlass/fp8_scaled_mm/fp8_e4m3" in parts["dense"]["basis"]
    assert "standing in" in parts["dense"]["basis"]


def test_the_h200_runs_step_model_renders_in_the_report(tmp_path):
    """Run 8's tables (examples/h200-2026-12-01-step) through tools/example_report.py: the
    decode section embeds the step figure with data, and question 6 states the prediction
    against TPOT from the table."""
    import json
    import shutil
    import subprocess
    import sys

    root = ROOT
    example = tmp_path / "example"
    shutil.copytree(root / "examples" / "h200-2026-12-01-step", example)
    # That run kept no hardware record or peaks: another H200 example's stand in.
    shutil.copy(root / "examples" / "h200-2026-12-01-kernels" / "hardware.json", example)
    shutil.copy(root / "examples" / "h200x2-2026-11-30-uniform" / "peaks.json", example)
    subprocess.run([sys.executable, str(root / "tools" / "example_report.py"), str(example),
                    "--out", str(tmp_path / "out")], check=True, capture_output=True)  # fmt: skip
    spec = json.loads((tmp_path / "out" / "figures" / "step_model.vl.json").read_text())
    assert spec.get("usermeta", {}).get("study", {}).get("has_data", True)
    html = (tmp_path / "out" / "report" / "index.html").read_text()
    assert 'id="chart-step_model"' in html
    assert "Q6. Where do a decode step" in html
    assert "Predicted 4.95 ms against TPOT 5.01 ms (−1 %): explained within ±20 %." in html


def test_an_h200_examples_report_draws_power_against_utilisation(tmp_path):
    """tools/example_report.py on runs 14-15's kernel-power windows: the kernel-power section
    shows the power-against-utilisation figure drawn from them (examples keep no timelines),
    and question 3 names FlashInfer's capped MoE loops per dtype."""
    import json
    import subprocess
    import sys

    root = ROOT
    example = root / "examples" / "h200-2026-12-01-kernels" / "run14-15"
    subprocess.run([sys.executable, str(root / "tools" / "example_report.py"), str(example),
                    "--sweeps", "sweeps/torch.csv", "--out", str(tmp_path)],
                   check=True, capture_output=True)  # fmt: skip
    spec = json.loads((tmp_path / "figures" / "power_vs_util.vl.json").read_text())
    # One row per window (26: three idle baselines, 23 loops), beside the power-limit rule's.
    assert max(len(d) for d in spec["datasets"].values()) == 26
    html = (tmp_path / "report" / "index.html").read_text()
    assert 'id="chart-power_vs_util"' in html
    assert "flashinfer·cutlass fused_moe FP8 M = 32 graph" in html


def test_a_profiled_step_shorter_than_tpot_stands_whole():
    # Tracing never speeds a step up: a profile at half the window's TPOT is kept as it is.
    breakdown = profile_at16({"moe": 2000, "attention": 50, "dense": 55}, 100.0)
    table = step_model(sweep(), decode_at(4.4), GEOMETRY, breakdown=breakdown)
    other = table[(table["concurrency"] == 16) & (table["component"] == "other")].iloc[0]
    assert other["measured_basis"] == "profile" and other["measured_us"] == pytest.approx(100)
    assert other["profile_step_us"] == pytest.approx(2205)


def test_an_example_without_hardware_record_is_refused_and_its_tables_are_all_read(tmp_path):
    """tools/example_report.py on runs 9-12 (which kept no hardware.json): refused with one
    message naming the missing record; with --hardware, its kernel-power and per-expert tables
    (tables/) answer questions 3 and 4."""
    import subprocess
    import sys

    root = ROOT
    example = root / "examples" / "h200-2026-12-01-step-model"
    tool = [sys.executable, str(root / "tools" / "example_report.py"), str(example),
            "--sweeps", "sweeps/*.csv", "--out", str(tmp_path)]  # fmt: skip
    refused = subprocess.run(tool, capture_output=True, text=True)
    assert refused.returncode == 2
    assert "no hardware record" in refused.stderr and "--hardware" in refused.stderr
    hardware = root / "examples" / "h200-2026-12-01-kernels" / "hardware.json"
    subprocess.run([*tool, "--hardware", str(hardware)], check=True, capture_output=True)
    html = (tmp_path / "report" / "index.html").read_text()
    answers = pd.read_csv(tmp_path / "tables" / "answers.csv", keep_default_na=False)
    power = answers[answers["question"].astype(str) == "3"].set_index("subject")
    assert power.loc["decode-sized GEMMs · M ≤ 64 · cold", "status"] != "not measured here"
    assert "no kernel-power table" not in html
    assert "no SGLang expert-distribution record" not in html
    assert "1.03× is within uniform routing" in html
    assert "this machine has no GPU" not in html


def test_the_step_figure_stacks_a_set_aside_profiles_kernels_and_tpot_where_none_ran():
    from studylib.stages.step_model.step_model_figure import NOT_PROFILED, step_frames

    breakdown = profile_at16({"moe": 2000, "attention": 50, "dense": 55}, 3000.0)
    bars, _ = step_frames(step_model(sweep(), decode(), GEOMETRY, breakdown=breakdown))
    measured = bars[bars["bar"] == "measured"].set_index(["concurrency", "component"])["ms"]
    # C = 16: the profiled step (5.1 ms) ran 1.96x the 2.6-ms TPOT: kernels stacked, other is
    # TPOT less them. C = 1: no profile, TPOT alone.
    assert measured[(16, "moe")] == pytest.approx(2.0)
    assert measured[(16, "other")] == pytest.approx(2.6 - 2.105)
    assert (16, NOT_PROFILED) not in measured.index
    assert measured[(1, NOT_PROFILED)] == pytest.approx(1.1)


def test_a_count_verdict_says_its_undecided_points_apart():
    # A point the noise left undecided is neither explained nor missed (was: counted as
    # missed: "not explained (0 of 3)" over two misses and one undecided point).
    assert count_verdict(0, 3, "explained", "not explained") == "not explained (0 of 3)"
    assert (count_verdict(0, 3, "explained", "not explained", undecided=1)
            == "not explained at 2 of 3, undecided at 1")  # fmt: skip
    assert (count_verdict(2, 4, "within", "outside", undecided=1)
            == "within at 2 of 4, outside at 1 of 4, undecided at 1")  # fmt: skip
    assert (
        count_verdict(2, 3, "explained", "not", undecided=1)
        == "explained at 2 of 3, undecided at 1"
    )
