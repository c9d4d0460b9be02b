"""This machine's ceilings, measured: large-GEMM rates per dtype and copy bandwidth.

Efficiency in the study is a ratio to what this card does, not to a datasheet: the roofline
floor of a point is max(FLOPs / peak[dtype], bytes / copy bandwidth).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable

from ..core.journal import Journal
from .backends import adapter
from .hardware import host_info

log = logging.getLogger("study.peaks")

# dtype of a sweep row -> the peak that bounds it
PEAK_FOR_DTYPE = {
    "fp32": "fp32_tflops",
    "bf16": "bf16_tflops",
    "fp16": "bf16_tflops",  # same tensor-core rate as bf16 on every GPU the study targets
    "fp8_e4m3": "fp8_tflops",
    "nvfp4": "fp4_tflops",
}


#: (name, measure) of each ceiling: each measures one and returns its keys of peaks.json.
Ceilings = list[tuple[str, Callable[[], dict]]]


def _median_time_s(fn, sync, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _cuda_event_time_s(fn, repeats: int, inner: int) -> float:
    """Median over ``repeats`` of ``inner`` back-to-back calls timed with device events."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / inner)
    return statistics.median(times)


def cuda_ceilings(size: int = 8192, copy_bytes: int = 4 << 30) -> Ceilings:
    """(name, measure) of each ceiling on the GPU, each measuring one and returning its keys."""
    import torch

    flops = 2.0 * size**3

    def device():
        return {"device": "cuda", "device_name": torch.cuda.get_device_name(), "gemm_size": size}

    def operands():
        return (torch.randn(size, size, device="cuda", dtype=torch.bfloat16),
                torch.randn(size, size, device="cuda", dtype=torch.bfloat16))  # fmt: skip

    def bf16():
        a, b = operands()
        for _ in range(3):
            a @ b
        return {"bf16_tflops": flops / _cuda_event_time_s(lambda: a @ b, 10, 5) / 1e12}

    def fp8():
        try:
            a, b = operands()
            a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
            one = torch.ones((), device="cuda", dtype=torch.float32)

            def gemm():
                return torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                        out_dtype=torch.bfloat16)  # fmt: skip

            for _ in range(3):
                gemm()
            return {"fp8_tflops": flops / _cuda_event_time_s(gemm, 10, 5) / 1e12}
        except Exception as exc:  # noqa: BLE001 - the arch may lack fp8: recorded, not invented
            return {"fp8_tflops": None, "fp8_error": f"{type(exc).__name__}: {exc}"}

    def fp32():
        a32 = torch.randn(4096, 4096, device="cuda")
        return {"fp32_tflops": 2.0 * 4096**3 / _cuda_event_time_s(lambda: a32 @ a32, 10, 3) / 1e12}

    def copy():
        src = torch.empty(copy_bytes // 2, device="cuda", dtype=torch.bfloat16).normal_()
        dst = torch.empty_like(src)
        dst.copy_(src)
        # Bytes read plus bytes written, as the roofline's bandwidth term counts them.
        seconds = _cuda_event_time_s(lambda: dst.copy_(src), 10, 3)
        l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
        return {"copy_gbps": 2 * copy_bytes / seconds / 1e9, "l2_cache_mib": l2_bytes / 2**20}

    return [("device", device), ("bf16", bf16), ("fp8", fp8), ("fp32", fp32),
            ("fp4", lambda: _fp4_peak(size)), ("copy", copy)]  # fmt: skip


def _fp4_peak(size: int) -> dict:
    """NVFP4 GEMM rate through FlashInfer's mm_fp4 where the GPU and library have it."""
    try:
        import torch

        point = {"op": "mm_fp4", "dtype": "nvfp4", "impl": "auto", "M": size, "N": size, "K": size}
        prepared = adapter("flashinfer").prepare(point, "cuda")
        for _ in range(3):
            prepared.run()
        torch.cuda.synchronize()
        return {"fp4_tflops": prepared.flops / _cuda_event_time_s(prepared.run, 10, 5) / 1e12}
    except Exception as exc:  # noqa: BLE001 - no FP4 here (Hopper, or no flashinfer)
        return {"fp4_tflops": None, "fp4_error": f"{type(exc).__name__}: {exc}"[:500]}


#: A CPU GEMM whose first call takes longer than this is timed once, and no larger size is
#: tried (a CPU without bf16 instructions ran a 2048² bf16 GEMM in ~57 s).
SLOW_CPU_CALL_S = 0.5


def cpu_ceilings(
    sizes=(256, 1024, 2048), copy_bytes: int = 256 << 20
) -> list[tuple[str, Callable]]:
    """(name, measure) of each ceiling on the CPU, each measuring one and returning its keys."""
    import torch

    nothing = lambda: None  # noqa: E731 - CPU ops are synchronous

    def gemm(name, dtype):
        # A CPU's best GEMM size varies with its caches and cores: keep the best rate seen.
        rates, largest = [], 0
        for size in sizes:
            a = torch.randn(size, size, dtype=dtype)
            t0 = time.perf_counter()
            a @ a
            first_s = time.perf_counter() - t0
            slow = first_s > SLOW_CPU_CALL_S
            seconds = first_s if slow else _median_time_s(lambda a=a: a @ a, nothing, 5)
            rates.append(2.0 * size**3 / seconds / 1e12)
            largest = max(largest, size)
            if slow:
                break
        return {name: max(rates), "gemm_size": largest}

    def copy():
        src = torch.empty(copy_bytes // 4).normal_()
        dst = torch.empty_like(src)
        dst.copy_(src)
        seconds = _median_time_s(lambda: dst.copy_(src), nothing, 5)
        return {"copy_gbps": 2 * copy_bytes / seconds / 1e9}

    def device():
        return {"device": "cpu", "device_name": host_info()["cpu_model"], "fp8_tflops": None,
                "fp4_tflops": None}  # fmt: skip

    return [("device", device), ("fp32", lambda: gemm("fp32_tflops", torch.float32)),
            ("bf16", lambda: gemm("bf16_tflops", torch.bfloat16)), ("copy", copy)]  # fmt: skip


def measure_ceilings(ceilings: Ceilings, journal: Journal | None = None) -> dict:
    """Every ceiling's keys in one record; with a ``journal``, each measured one is kept there
    as it ends and one a stopped job measured is not measured again. ``gemm_size`` is the
    largest GEMM any ceiling ran."""
    out: dict = {}
    for name, measure_one in ceilings:
        kept = journal.get(name) if journal is not None else None
        if kept is None:
            kept = measure_one()
            if journal is not None:
                journal.record(name, kept)
        else:
            log.info("peaks: %s kept from the stopped run", name)
        size = max(out.get("gemm_size") or 0, kept.get("gemm_size") or 0)
        out.update(kept)
        if size:
            out["gemm_size"] = size
    return out


def measure_cpu(sizes=(256, 1024, 2048), copy_bytes: int = 256 << 20) -> dict:
    return measure_ceilings(cpu_ceilings(sizes, copy_bytes))


def measure(device_preference: str = "auto", journal: Journal | None = None) -> dict:
    import torch

    use_cuda = device_preference != "cpu" and torch.cuda.is_available()
    return measure_ceilings(cuda_ceilings() if use_cuda else cpu_ceilings(), journal)
