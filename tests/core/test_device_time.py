"""The measuring jobs' device time (issue 34): each job's wall time from Snakemake's benchmark
file against the seconds its own records put inside measurement; the total over the jobs
that split, the peaks (no windows) named and left out; the provenance's sentence."""

import json

import pandas as pd
import pytest
from studylib.core.io import write_frame
from studylib.device_time import (
    TOTAL,
    decode_measuring,
    decode_parts,
    decode_wall,
    device_time,
    kernel_power_measuring,
    provenance_line,
    sweep_builds,
    sweep_measuring,
    wall_s,
)
from studylib.stages.sweep.sweep_schema import SWEEP


def benchmark(path, seconds: float):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:{seconds:.0f}\t100\n")
    return path


def test_a_benchmark_gives_the_jobs_wall_time(tmp_path):
    assert wall_s(benchmark(tmp_path / "b.tsv", 616.18)) == 616.18
    assert wall_s(tmp_path / "missing.tsv") is None
    (tmp_path / "empty.tsv").write_text("s\th:m:s\n")
    assert wall_s(tmp_path / "empty.tsv") is None


def test_a_sweep_measures_its_points_less_their_first_calls():
    sweep = pd.DataFrame({"point_s": [10.0, 3.0, 0.1], "first_call_ms": [4000.0, 500.0, None]})
    measured, outside = sweep_measuring(sweep)
    assert measured == pytest.approx(6.0 + 2.5 + 0.1)
    assert "first calls (JIT builds, autotuning) 4 s" in outside
    # Preparing a point's inputs (and FlashInfer's autotuning) is not measurement either.
    sweep["prepare_s"] = [1.0, 0.5, None]
    measured, outside = sweep_measuring(sweep)
    assert measured == pytest.approx(5.0 + 2.0 + 0.1)
    assert "preparing inputs 2 s" in outside
    # A point that sampled nothing is outside, however long it took: on the H200 a worker's
    # first FlashInfer point, refused on sm_90, took 40.1 s (the library's first use).
    sweep = pd.DataFrame({"point_s": [10.0, 3.0, 0.1, 40.1],
                          "first_call_ms": [4000.0, 500.0, None, None],
                          "prepare_s": [1.0, 0.5, None, None],
                          "status": ["ok", "mismatch", "ok", "unsupported"]})  # fmt: skip
    measured, outside = sweep_measuring(sweep)
    assert measured == pytest.approx(5.0 + 2.0 + 0.1)
    assert "points that sampled nothing (unsupported, errors) 40 s" in outside


def test_kernel_power_counts_each_window_once_however_many_gpus_ran_it():
    two_gpus = pd.DataFrame({"gpu": [0, 1, 0, 1], "seconds": [5.0, 5.0, 10.0, 10.0]})
    assert kernel_power_measuring(two_gpus)[0] == 15.0
    cpu = pd.DataFrame({"gpu": [None, None], "seconds": [1.0, 1.0]})  # a CPU's rows name none
    assert kernel_power_measuring(cpu)[0] == 2.0


def test_decode_measures_its_steady_windows_bench_runs_and_idle_baseline():
    summary = pd.DataFrame({"steady_s": [15.0, 15.0]})
    recorder = pd.DataFrame({"steady_s": [10.0]})
    crosscheck = pd.DataFrame({"bench_duration_s": [20.0, None]})
    windows = pd.DataFrame({"label": ["idle", "warmup", "steady", "idle"], "gpu": [0, 0, 0, 1],
                            "seconds": [10.0, 15.0, 15.0, 10.0]})  # fmt: skip
    measured, outside = decode_measuring(summary, recorder, crosscheck, windows, {"ready_s": 61.4})
    assert measured == 15 + 15 + 10 + 20 + 10  # the warm-up is not measurement
    assert outside.startswith("server start 61 s")
    # The cross-check's alternated rounds after its first pair measured 45 s more.
    rounds = crosscheck.assign(rounds_s=[45.0, None])
    assert decode_measuring(summary, recorder, rounds, windows, {})[0] == measured + 45


def test_a_decode_job_whose_server_started_ahead_counts_from_when_it_held_the_device(tmp_path):
    # decode.prestart: the job waited 70 s for the device, its server's imports beside the job
    # before; its device time is its wall less that wait, its start the part after the gate.
    run = {"ready_s": 30.2, "start": {"prestart": True, "at_gate": True, "device_wait_s": 70.0,
                                      "before_gate_s": 71.5}}  # fmt: skip
    wall = benchmark(tmp_path / "decode.tsv", 300.0)
    assert decode_wall(wall, run) == 230.0
    assert decode_wall(wall, {"ready_s": 75.0}) == 300.0  # started once it held the device
    _, outside = decode_measuring(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(),
                                  pd.DataFrame({"label": [], "seconds": []}), run)  # fmt: skip
    assert outside.startswith("server start 30 s from its gate, opened 72 s into a start")


def test_the_table_totals_the_jobs_that_split_and_names_the_rest(tmp_path):
    sweep = tmp_path / "sweeps" / "torch.parquet"
    sweep.parent.mkdir()
    point = {column: None for column in SWEEP} | {
        "backend": "torch", "impl": "aten", "op": "matmul", "dtype": "bf16", "shape": "down",
        "M": 1, "N": 8, "K": 8, "status": "ok", "device": "cpu", "point_s": 80.0,
        "first_call_ms": 0.0}  # fmt: skip
    write_frame(pd.DataFrame([point]), sweep)
    variant = tmp_path / "decode" / "v"
    variant.mkdir(parents=True)
    pd.DataFrame({"steady_s": [30.0]}).to_csv(variant / "summary.csv", index=False)
    pd.DataFrame({"steady_s": []}).to_csv(variant / "recorder.csv", index=False)
    pd.DataFrame({"bench_duration_s": [30.0]}).to_csv(variant / "crosscheck.csv", index=False)
    pd.DataFrame({"label": ["idle"], "gpu": [0], "seconds": [10.0]}).to_parquet(
        variant / "windows.parquet"
    )
    (variant / "run.json").write_text(json.dumps({"ready_s": 60.0}))
    files = tuple(str(variant / n) for n in ("summary.csv", "recorder.csv", "crosscheck.csv",
                                            "windows.parquet", "run.json"))  # fmt: skip
    benchmarks = {"sweep/torch": benchmark(tmp_path / "b" / "sweep" / "torch.tsv", 100),
                  "decode/v": benchmark(tmp_path / "b" / "decode" / "v.tsv", 140),
                  "peaks": benchmark(tmp_path / "b" / "peaks.tsv", 50)}  # fmt: skip
    table = device_time({"torch": str(sweep)}, {}, {"v": files}, benchmarks)
    rows = table.set_index("job")
    assert rows.loc["sweep/torch", "share"] == pytest.approx(0.8)
    assert rows.loc["decode/v", "measuring_s"] == 70 and rows.loc["decode/v", "wall_s"] == 140
    assert pd.isna(rows.loc["peaks", "share"]) and "not split" in rows.loc["peaks", "outside"]
    total = rows.loc[TOTAL]
    assert total["wall_s"] == 240 and total["measuring_s"] == 150  # peaks left out of both
    assert total["share"] == pytest.approx(150 / 240)
    assert total["outside"] == (
        "90 s outside measurement, of it server starts 60 s; 50 s of "
        "jobs not split (peaks) left out"
    )
    # What the records name of the rest, stated apart: the decode job's start.
    assert rows.loc["decode/v", "starts_s"] == 60 and rows.loc["sweep/torch", "builds_s"] == 0
    assert total["starts_s"] == 60 and total["warmups_s"] == 0
    line = provenance_line(table)
    assert line.startswith("62 % of the measuring jobs' 240 s was inside measurement")
    assert "(90 s outside measurement, of it server starts 60 s; 50 s" in line
    assert "most outside in decode/v: 70 of its 140 s (server start 60 s" in line
    assert provenance_line(pd.DataFrame(columns=table.columns)) is None


def test_the_jit_builds_are_stated_apart_outside_the_total(tmp_path):
    """The JIT builds hold no device: each one's row names the modules it built and their
    seconds, and the total of the measuring jobs does not count them."""
    sweep = tmp_path / "torch.parquet"
    point = {column: None for column in SWEEP} | {
        "backend": "torch", "impl": "aten", "op": "matmul", "dtype": "bf16", "shape": "down",
        "M": 1, "N": 8, "K": 8, "status": "ok", "device": "cuda", "point_s": 80.0,
        "first_call_ms": 0.0}  # fmt: skip
    write_frame(pd.DataFrame([point]), sweep)
    record = tmp_path / "flashinfer_jit.json"
    record.write_text(json.dumps({"modules": [
        {"module": "gemm", "status": "built", "seconds": 35.2},
        {"module": "tinygemm2", "status": "cached", "seconds": 0.4},
        {"module": "batch_prefill_with_kv_cache_dtype_q_bf16_x", "status": "built",
         "seconds": 25.3},
        {"module": "mm_bf16_cublaslt", "status": "failed", "seconds": 1.0}]}))  # fmt: skip
    benchmarks = {
        "sweep/torch": benchmark(tmp_path / "sweep" / "torch.tsv", 100),
        "sweep/flashinfer_jit": benchmark(tmp_path / "sweep" / "jit.tsv", 70),
    }
    # An SGLang server's modules (rule server_jit): FlashInfer's and SGLang's own rows.
    server = tmp_path / "server_jit_bf16.json"
    server.write_text(
        json.dumps(
            {
                "flashinfer": [
                    {"op": "rmsnorm", "module": "norm", "status": "built", "seconds": 53.4}
                ],
                "sglang": [
                    {
                        "kernel": "fused_rope",
                        "module": "sgl_kernel_jit_fused_rope_true_64",
                        "status": "built",
                        "seconds": 12.2,
                    },
                    {"kernel": "kvcache", "module": "-", "status": "cached", "seconds": 0.1},
                ],
            }
        )
    )
    benchmarks["decode/server_jit_bf16"] = benchmark(tmp_path / "decode" / "jit.tsv", 66)
    table = device_time({"torch": str(sweep)}, {}, {}, benchmarks,
                        builds={"sweep/flashinfer_jit": str(record),
                                "decode/server_jit_bf16": str(server)})  # fmt: skip
    rows = table.set_index("job")
    jit = rows.loc["sweep/flashinfer_jit"]
    assert jit["stage"] == "builds" and jit["wall_s"] == 70 and pd.isna(jit["share"])
    assert jit["builds_s"] == pytest.approx(60.5)
    assert "gemm 35 s, batch_prefill_with_kv_cache 25 s" in jit["outside"]
    assert "1 already built or skipped, 1 failed" in jit["outside"]
    built = rows.loc["decode/server_jit_bf16"]
    assert built["stage"] == "builds" and built["wall_s"] == 66
    assert built["builds_s"] == pytest.approx(65.6)
    assert "norm 53 s, fused_rope 12 s (1 already built or skipped)" in built["outside"]
    total = rows.loc[TOTAL]
    assert total["wall_s"] == 100 and total["builds_s"] == 0
    assert "not split" not in total["outside"]


def test_starts_builds_and_warmups_are_stated_apart():
    # A sweep's first calls at the points that sampled (a refused point's time is not a build).
    sweep = pd.DataFrame({"point_s": [10.0, 40.1], "first_call_ms": [4000.0, 39000.0],
                          "status": ["ok", "unsupported"]})  # fmt: skip
    assert sweep_builds(sweep) == pytest.approx(4.0)
    # A decode job's starts (main and recorder passes) and its warm-ups on one GPU of two,
    # the cross-check's and the recorder's included.
    windows = pd.DataFrame({"label": ["idle", "warmup", "steady", "check-warmup",
                                      "recorder-warmup", "warmup"],
                            "gpu": [0, 0, 0, 0, 0, 1],
                            "seconds": [5.0, 15.0, 20.0, 12.0, 8.0, 15.0]})  # fmt: skip
    parts = decode_parts(windows, {"ready_s": 131.1, "recorder_ready_s": 70.0})
    assert parts == {"starts_s": pytest.approx(201.1), "builds_s": None,
                     "warmups_s": pytest.approx(35.0)}  # fmt: skip
    assert decode_parts(windows.iloc[0:0], {}) == {"starts_s": 0.0, "builds_s": None,
                                                   "warmups_s": 0.0}  # fmt: skip
    # What each start compiled, by its caches' files (start_builds), is stated apart from it;
    # a record without its start's time counts for nothing.
    built = {"ready_s": 131.1, "start_builds": {"seconds": 72.5, "caches": {}},
             "recorder_ready_s": 70.0, "recorder_start_builds": {"seconds": 3.5}}  # fmt: skip
    parts = decode_parts(windows, built)
    assert parts["starts_s"] == pytest.approx(125.1) and parts["builds_s"] == pytest.approx(76)
    orphan = {"start_builds": {"seconds": 72.5}}
    assert decode_parts(windows, orphan)["builds_s"] is None
    triton = {"built": {"kernel": 30, "helper": 4}, "seconds": 40.0, "names": []}
    jit = {"built": {"module": 1}, "seconds": 12.0, "names": []}
    record = {"seconds": 52.0, "caches": {"triton": triton, "sglang_jit": jit}}
    outside = decode_measuring(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), windows,
                               {"ready_s": 131.1, "start_builds": record})[1]  # fmt: skip
    assert outside.startswith("server start 131 s (built 52 s: triton 4 helpers, 30 kernels "
                              "(40 s); sglang_jit 1 module (12 s)); warm-ups")  # fmt: skip


def test_a_module_a_jit_job_built_beside_a_server_start_is_not_the_start_s(tmp_path):
    """On the H200 (examples/h200-2026-12-06-c1024) the FP8 server_jit job built a module
    into the shared cache during the bf16 server's start, whose record counted it: the table
    takes it out by that job's record and says whose it was."""
    quant = "sgl_kernel_jit_per_token_group_quant_8bit_v2_bf16_t_fp8__arch_9.0a"
    start = {"seconds": 14.22, "caches": {
        "sglang_jit": {"built": {"module": 1}, "seconds": 13.1,
                       "names": {quant: {"count": 1, "seconds": 13.1, "landed_at": 1000.0}}},
        "triton": {"built": {"kernel": 2, "helper": 3}, "seconds": 1.12,
                   "names": {"_fwd_kernel": {"count": 1, "seconds": 1.04,
                                             "landed_at": 990.0}}}}}  # fmt: skip
    variant = tmp_path / "decode" / "bf16"
    variant.mkdir(parents=True)
    pd.DataFrame({"steady_s": [30.0]}).to_csv(variant / "summary.csv", index=False)
    pd.DataFrame({"label": ["idle"], "gpu": [0], "seconds": [10.0]}).to_parquet(
        variant / "windows.parquet"
    )
    (variant / "run.json").write_text(json.dumps({"ready_s": 103.1, "start_builds": start}))
    files = tuple(str(variant / n) for n in ("summary.csv", "recorder.csv", "crosscheck.csv",
                                            "windows.parquet", "run.json"))  # fmt: skip
    fp8 = tmp_path / "server_jit_fp8.json"
    fp8.write_text(json.dumps({"flashinfer": [], "sglang": [
        {"kernel": "per_token_group_quant_8bit_v2", "module": quant, "status": "built",
         "seconds": 13.4, "finished_at": 1000.6}]}))  # fmt: skip
    benchmarks = {"decode/bf16": benchmark(tmp_path / "b" / "bf16.tsv", 300),
                  "decode/server_jit_fp8": benchmark(tmp_path / "b" / "jit.tsv", 30)}  # fmt: skip
    table = device_time({}, {}, {"bf16": files}, benchmarks,
                        builds={"decode/server_jit_fp8": str(fp8)})  # fmt: skip
    row = table.set_index("job").loc["decode/bf16"]
    assert row["builds_s"] == pytest.approx(1.12)
    assert row["starts_s"] == pytest.approx(103.1 - 1.12)
    assert row["outside"].startswith(
        "server start 103 s (built 1 s: triton 3 helpers, 2 kernels (1 s); "
        f"{quant} (13 s) was decode/server_jit_fp8's, beside it); warm-ups"
    )
    # A record of the same module from before the start (an earlier run): the start's own.
    fp8.write_text(json.dumps({"sglang": [{"module": quant, "status": "built", "seconds": 13.4,
                                           "finished_at": 500.0}]}))  # fmt: skip
    table = device_time({}, {}, {"bf16": files}, benchmarks,
                        builds={"decode/server_jit_fp8": str(fp8)})  # fmt: skip
    assert table.set_index("job").loc["decode/bf16", "builds_s"] == pytest.approx(14.22)
