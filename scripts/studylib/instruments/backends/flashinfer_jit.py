"""FlashInfer's JIT modules built before the GPU jobs that call them (rule flashinfer_jit).

A fresh machine builds each FlashInfer module at its first call, with the GPU idle: on the
H200 (2026-12-04, examples/h200-2026-12-04-sampler-arms) the FlashInfer sweep's first calls
built ``gemm`` (bmm_fp8 on cuBLAS), ``mm_bf16_cublaslt``, ``tinygemm2`` and the fa2
batch-prefill module of its decode attention: about 79 s of that job. Built here, on the
CPU while another job measures, they are in FlashInfer's JIT cache when the sweep's first
calls ask for them: the same generators make the same module names, and the cache folder
is keyed by the GPUs' architectures, which the job passes as FLASHINFER_CUDA_ARCH_LIST
(read from NVML) so that it never opens the GPU.

Only the modules named below; any other (one a newer FlashInfer adds, the CUTLASS fused
MoE of tools/prebuild_flashinfer_moe.py: 14 core-hours) is built at its first call as
before. A module this FlashInfer has no generator for is a ``skipped`` row, one that fails
to build a ``failed`` row with its error: the sweep's own first call then builds it (or
records why not), so nothing here can stop the study.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Iterable

from ...core.formats import error_line
from .flashinfer_backend import use_tensor_cores

#: The build job's niceness (scripts/build_flashinfer_jit.py): nvcc yields the CPU to the
#: measuring jobs beside it.
NICENESS = 10
# PosEncodingMode.NONE's value: the decode wrapper's plan(pos_encoding_mode="NONE").
POS_ENCODING_NONE = 0


def arch_list(capabilities: Iterable[str]) -> str:
    """FLASHINFER_CUDA_ARCH_LIST for these compute capabilities ("9.0"), as FlashInfer
    reads it: space-separated, each one once."""
    found = sorted({str(c) for c in capabilities if c})
    return " ".join(found)


def _generator(module: str, name: str) -> Callable | None:
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def _public(module: str, name: str) -> Callable:
    """A module's target -> its spec, from a public generator of no arguments."""

    def spec(target: dict):
        generate = _generator(module, name)
        return generate() if generate else None

    return spec


def _decode_attention(target: dict):
    """The module BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True).plan loads:
    FlashInfer's fa2 batch-prefill primary module for these dtypes and head dim (its
    arguments as flashinfer/decode.py passes them). The CUDA-core decode kernel (fewer
    than 4 query heads per KV head) is left to its first call."""
    if not target.get("tensor_cores"):
        return None
    generate = _generator(
        "flashinfer.jit.attention.modules", "_gen_batch_prefill_primary_module"
    ) or _generator("flashinfer.jit.attention", "gen_batch_prefill_module")
    if generate is None:
        return None
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(target["dtype"])
    if dtype is None:
        return None
    head_dim = int(target["head_dim"])
    return generate("fa2", dtype, dtype, dtype, torch.int32, head_dim, head_dim,
                    POS_ENCODING_NONE, False, False, False)  # fmt: skip


#: (op, impl) -> the generator of the module its first call builds.
MODULES: dict[tuple[str, str], Callable] = {
    ("bmm_fp8", "cublas"): _public("flashinfer.jit.gemm", "gen_gemm_module"),
    ("mm_bf16", "cublaslt"): _public("flashinfer.jit.gemm", "gen_mm_bf16_cublaslt_module"),
    ("mm_bf16", "tinygemm"): _public("flashinfer.jit.tinygemm2", "gen_tinygemm2_module"),
    ("decode_attention", "fa2"): _decode_attention,
    # sglang-kernel's rmsnorm and fused_add_rmsnorm: an SGLang server's every RMSNorm
    # (rule server_jit, instruments/serving/sglang_jit.py).
    ("rmsnorm", "flashinfer"): _public("flashinfer.jit.norm", "gen_norm_module"),
}


def targets(points: Iterable[dict]) -> list[dict]:
    """The distinct module targets of a FlashInfer plan's points (sweep_plan.expand_points):
    (op, impl, dtype) and, for attention, head_dim and whether the tensor-core kernel runs
    (SGLang's rule, flashinfer_backend.use_tensor_cores)."""
    found = {}
    for point in points:
        if (point["op"], point["impl"]) not in MODULES:
            continue
        target = {"op": point["op"], "impl": point["impl"], "dtype": point["dtype"]}
        if point.get("head_dim"):
            target["head_dim"] = int(point["head_dim"])
            target["tensor_cores"] = use_tensor_cores(point["heads"], point["kv_heads"])
        found[tuple(sorted(target.items()))] = target
    return [found[key] for key in sorted(found)]


def build(targets: list[dict], capabilities: list[str], jobs: int) -> list[dict]:
    """Build each target's module into FlashInfer's JIT cache for ``capabilities``; one row
    per module: name, status (built, cached, aot, skipped, failed), seconds, error."""
    arches = arch_list(capabilities)
    if not arches:
        return [_row(t, "-", "skipped", 0.0, "no GPU that NVML sees") for t in targets]
    # Before FlashInfer is imported: its compilation context and cache folder are fixed then.
    # No GPU visible: the build never touches the device another job is measuring on.
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = arches
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["MAX_JOBS"] = str(max(1, int(jobs)))
    rows, seen = [], set()
    for target in targets:
        started = time.monotonic()
        try:
            spec = MODULES[(target["op"], target["impl"])](target)
        except Exception as exc:  # noqa: BLE001 - an import or API change is a row
            rows.append(_row(target, "-", "failed", time.monotonic() - started, error_line(exc)))
            continue
        if spec is None:
            why = "this flashinfer has no generator for it here: its first call builds it"
            rows.append(_row(target, "-", "skipped", 0.0, why))
            continue
        if spec.name in seen:
            continue
        seen.add(spec.name)
        if getattr(spec, "is_aot", False):
            rows.append(_row(target, spec.name, "aot", 0.0, ""))
            continue
        cached = bool(getattr(spec, "is_compiled", False))
        started = time.monotonic()
        try:
            spec.build(need_lock=True)
        except Exception as exc:  # noqa: BLE001 - the sweep's first call tries again
            spent = time.monotonic() - started
            rows.append(_row(target, spec.name, "failed", spent, error_line(exc)))
            continue
        status = "cached" if cached else "built"
        rows.append(_row(target, spec.name, status, time.monotonic() - started, ""))
    return rows


def _row(target: dict, module: str, status: str, seconds: float, error: str) -> dict:
    # finished_at: when it ended, so that a server's start beside it knows its modules
    # (start_builds.less_beside).
    return {"op": target["op"], "impl": target["impl"], "dtype": target["dtype"],
            "module": module, "status": status, "seconds": round(seconds, 2),
            "error": error, "finished_at": round(time.time(), 1)}  # fmt: skip
