"""Synthetic tables shared by the answers' tests (tests/stages/*, tests/report)."""

import pandas as pd

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
