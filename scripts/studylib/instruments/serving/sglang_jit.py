"""The JIT modules an SGLang server builds at its start, built ahead on the CPU (rule
server_jit), as rule flashinfer_jit does for FlashInfer's kernel jobs.

On the H200 (2026-12-05, examples/h200-2026-12-05-partial) the bf16 server's start on a box
where the kernel jobs had run took 189 s, 87 s of it building (its run record's
``start_builds``): FlashInfer's ``norm`` module (53 s; sglang-kernel 0.4.5's ``rmsnorm`` and
``fused_add_rmsnorm`` call flashinfer.norm) and three of SGLang's own tvm-ffi modules,
``clamp_position`` (int64 sequence lengths, 9 s), ``fused_rope`` (NeoX style, 64 rotary dims,
bf16, 12 s) and ``kvcache`` (2,048-byte rows, 11 s), all while its GPU waited; the FP8
server after it found them and built nothing. Built here, beside the first GPU jobs, they
are in the caches the server reads (the same generators make the same module names: SGLang
keys its folder by the module's template arguments, its sources' hash, the target
architecture and tvm-ffi's version).

Which modules, from the served model's config.json, by SGLang 0.5.16's code paths: its
RMSNorm layers (every model), the decode batch's positions
(model_executor/forward_batch_info.py: ``clamp_position_cuda`` over int64 lengths), the
rotary embedding (layers/rotary_embedding/base.py: ``apply_rope_with_cos_sin_cache_inplace``
with the model's rotary dims, NeoX style, in the activations' dtype) and the KV-cache store
(mem_cache/memory_pool.py: ``store_cache`` with rows of kv_heads x head_dim x 2 bytes for a
bf16 cache), SiluAndMul's ``silu_and_mul`` (layers/activation.py, the shared experts and the
Triton MoE; one module per dtype) and, for block-FP8 weights, the activations' quantization
(kernels/ops/quantization/fp8_kernel.py: the v2 kernel, bf16 to FP8, for groups of 16-128).
The last two the kernel jobs build too; a run of decode targets alone has no kernel job, and
there the FP8 server built them at its start (8 and 9 s on the H200,
examples/h200-2026-12-05-full-length). Another SGLang, model or path builds its own at its
start as before, and the start's record says what it built; a module this SGLang has no
generator for is a ``skipped`` row, one that fails to build a ``failed`` row with its error:
nothing here can stop the study.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable

from ...core.formats import error_line
from .start_builds import builds_since, cache_roots, snapshot

#: A kernel's generator in SGLang: module, function, and its arguments from the target.
GENERATORS: dict[str, tuple[str, str, Callable[[dict], tuple]]] = {
    "clamp_position": ("sglang.jit_kernel.clamp_position", "_jit_clamp_position_module",
                       lambda t: (_dtype(t["dtype"]),)),
    "fused_rope": ("sglang.jit_kernel.rope", "_jit_fused_rope_module",
                   lambda t: (bool(t["is_neox"]), int(t["rope_dim"]), _dtype(t["dtype"]))),
    "kvcache": ("sglang.jit_kernel.kvcache", "_jit_kvcache_module",
                lambda t: (int(t["row_bytes"]),)),
    "activation": ("sglang.jit_kernel.activation", "_jit_activation_module",
                   lambda t: (_dtype(t["dtype"]),)),
    "per_token_group_quant_8bit_v2": ("sglang.jit_kernel.per_token_group_quant_8bit_v2",
                                      "_jit_module", lambda t: (_dtype(t["in_dtype"]),
                                                                _dtype(t["out_dtype"]), _pdl())),
}  # fmt: skip

#: Where a module not built here is built.
AT_START = "the server's start builds it"
#: The KV cache's bytes per element: SGLang's default kv_cache_dtype ("auto") stores K and
#: V in the model's bf16.
KV_BYTES = 2
#: The group sizes SGLang 0.5.16 quantizes activations to FP8 with its v2 JIT kernel
#: (kernels/ops/quantization/fp8_kernel.py, _V2_KERNEL_SUPPORTED_GROUP_SIZES).
V2_GROUP_SIZES = (16, 32, 64, 128)


def targets(model_config: dict) -> dict[str, list[dict]]:
    """The modules an SGLang server of this model (its config.json) builds at its start:
    ``flashinfer`` targets in rule flashinfer_jit's form and ``sglang`` ones (kernel and
    its template arguments)."""
    heads = int(model_config["num_attention_heads"])
    head_dim = int(model_config.get("head_dim") or int(model_config["hidden_size"]) // heads)
    kv_heads = int(model_config.get("num_key_value_heads") or heads)
    rope_dim = int(head_dim * float(model_config.get("partial_rotary_factor") or 1.0))
    dtype = str(model_config.get("torch_dtype") or "bfloat16")
    sglang = [
        {"kernel": "clamp_position", "dtype": "int64"},
        {"kernel": "fused_rope", "is_neox": True, "rope_dim": rope_dim, "dtype": dtype},
        {"kernel": "kvcache", "row_bytes": kv_heads * head_dim * KV_BYTES},
        {"kernel": "activation", "dtype": dtype},
    ]
    quant = model_config.get("quantization_config") or {}
    block = quant.get("weight_block_size") or []
    if quant.get("quant_method") == "fp8" and block and int(block[-1]) in V2_GROUP_SIZES:
        sglang.append({"kernel": "per_token_group_quant_8bit_v2", "in_dtype": dtype,
                       "out_dtype": "float8_e4m3fn"})  # fmt: skip
    return {"flashinfer": [{"op": "rmsnorm", "impl": "flashinfer", "dtype": dtype}],
            "sglang": sglang}  # fmt: skip


def _dtype(name: str):
    import torch

    return getattr(torch, name)


def _pdl() -> bool:
    """Whether SGLang launches with programmatic dependent launch on the architecture being
    built for (``override_jit_cuda_arch`` in force): part of the module's name."""
    return bool(importlib.import_module("sglang.jit_kernel.utils").is_arch_support_pdl())


def _arches(capabilities: list[str]) -> list[tuple[int, int]]:
    found = set()
    for capability in capabilities:
        if capability:
            major, _, minor = str(capability).partition(".")
            found.add((int(major), int(minor or 0)))
    return sorted(found)


def build(found: list[dict], capabilities: list[str]) -> list[dict]:
    """Build each target's module into SGLang's JIT cache for the first of ``capabilities``
    ("9.0"; a box's GPUs are alike), without opening a GPU; one row per target and
    architecture: kernel, its arguments, arch, module (its new cache folder), status (built,
    cached, skipped, failed), seconds, error."""
    arches = _arches(capabilities)
    if not arches:
        return [_row(t, "-", "-", "skipped", 0.0, "no GPU that NVML sees") for t in found]
    # No GPU visible: the build never touches the device another job is measuring on.
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        arch_module = importlib.import_module("sglang.jit_kernel.utils.arch")
        override = arch_module.override_jit_cuda_arch
        suffix = arch_module._cuda_arch_suffix
    except Exception as exc:  # noqa: BLE001 - an import that breaks is a row, not a stop
        why = f"this sglang cannot target an architecture here ({error_line(exc)}): {AT_START}"
        return [_row(t, "-", "-", "skipped", 0.0, why) for t in found]
    root = cache_roots(os.environ)["sglang_jit"]
    (major, minor), *others = arches
    arch = f"{major}.{minor}{suffix(major, minor)}"
    with override(major, minor, suffix(major, minor)):
        rows = [_build_one(target, arch, root) for target in found]
    # SGLang keeps one module per arguments in a process (cache_once): one architecture here.
    why = f"one architecture per build (SGLang caches a module per arguments): {AT_START}"
    for major, minor in others:
        rows += [_row(t, f"{major}.{minor}{suffix(major, minor)}", "-", "skipped", 0.0, why)
                 for t in found]  # fmt: skip
    return rows


def _build_one(target: dict, arch: str, root) -> dict:
    module_name, function, arguments = GENERATORS[target["kernel"]]
    try:
        generate = getattr(importlib.import_module(module_name), function)
    except Exception as exc:  # noqa: BLE001 - an import that breaks is a row, not a stop
        why = f"this sglang has no {module_name}.{function} ({error_line(exc)}): {AT_START}"
        return _row(target, arch, "-", "skipped", 0.0, why)
    before = snapshot({"sglang_jit": root})
    started = time.monotonic()
    error = ""
    try:
        generate(*arguments(target))
    except Exception as exc:  # noqa: BLE001 - the server's start tries again
        error = error_line(exc)
    spent = time.monotonic() - started
    made = [r["name"] for r in builds_since({"sglang_jit": root}, before)
            if r["kind"] == "module" and r["seconds"] is not None]  # fmt: skip
    if error and not made:
        return _row(target, arch, "-", "failed", spent, error)
    # A module built but not loaded here (no GPU visible) is in the cache all the same.
    status = "built" if made else "cached"
    return _row(target, arch, ", ".join(made) or "-", status, spent,
                f"built; loading it here failed: {error}" if error else "")  # fmt: skip


def _row(target: dict, arch: str, module: str, status: str, seconds: float, error: str) -> dict:
    arguments = {k: v for k, v in target.items() if k != "kernel"}
    # finished_at: when it ended, so that a server's start beside it knows its modules
    # (start_builds.less_beside).
    return {"kernel": target["kernel"], "arguments": arguments, "arch": arch, "module": module,
            "status": status, "seconds": round(seconds, 2), "error": error,
            "finished_at": round(time.time(), 1)}  # fmt: skip
