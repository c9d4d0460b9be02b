"""sgl-kernel's GEMMs: NVFP4 ``cutlass_scaled_fp4_mm``, FP8 ``fp8_scaled_mm`` (row-wise
scales) and ``fp8_blockwise_scaled_mm`` (128-wide block scales, DeepSeek style).

sgl-kernel's 0.4 series moved ``cutlass_scaled_fp4_mm``/``scaled_fp4_quant`` (and others)
out of ``sgl_kernel`` into SGLang's JIT kernels: each op is looked up where the installed
versions keep it, and a point is ``unsupported`` with the places searched when it is nowhere.
"""

from __future__ import annotations

import importlib

from .base import (
    Prepared,
    Unsupported,
    distribution_version,
    gemm_bytes,
    gemm_flops,
    gpu_library_environment,
)

OPS = {
    "cutlass_scaled_fp4_mm": {"dtypes": ["nvfp4"], "impls": ["cutlass"], "grouped": False},
    "fp8_scaled_mm": {"dtypes": ["fp8_e4m3"], "impls": ["cutlass"], "grouped": False},
    "fp8_blockwise_scaled_mm": {"dtypes": ["fp8_e4m3"], "impls": ["cutlass"], "grouped": False},
}

# Where each function may live, newest layout last.
LOCATIONS = {
    "fp8_scaled_mm": ["sgl_kernel", "sglang.jit_kernel.gemm"],
    "fp8_blockwise_scaled_mm": ["sgl_kernel", "sglang.jit_kernel.gemm"],
    "cutlass_scaled_fp4_mm": ["sgl_kernel", "sglang.jit_kernel.nvfp4"],
    "scaled_fp4_quant": ["sgl_kernel", "sglang.jit_kernel.nvfp4"],
}
FP8_MAX = 448.0
FP4_MAX = 6.0


def _version() -> str | None:
    return distribution_version("sglang-kernel", "sgl-kernel")


def environment(device: str) -> dict:
    return gpu_library_environment("sgl_kernel", _version(), device)


def find(name: str):
    """The function ``name`` from the first module that has it, or Unsupported."""
    tried = []
    for module_name in LOCATIONS[name]:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            tried.append(f"{module_name} ({type(exc).__name__}: {exc})")
            continue
        if hasattr(module, name):
            return getattr(module, name)
        tried.append(f"{module_name} (no {name})")
    raise Unsupported(f"{name} not found in sgl-kernel {_version()}: searched " + "; ".join(tried))


def is_unsupported_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "not supported" in text or "not implemented" in text or "requires compute capab" in text


def prepare(point: dict, device: str) -> Prepared:
    if device != "cuda":
        raise Unsupported("no CUDA device")
    builders = {
        "fp8_scaled_mm": _fp8_scaled_mm,
        "fp8_blockwise_scaled_mm": _fp8_blockwise_scaled_mm,
        "cutlass_scaled_fp4_mm": _cutlass_scaled_fp4_mm,
    }
    if point["op"] not in builders:
        raise Unsupported(f"sgl_kernel adapter has no op {point['op']!r}")
    return builders[point["op"]](point)


def _rowwise_fp8(x):
    import torch

    scale = (x.abs().amax(dim=1, keepdim=True).float() / FP8_MAX).clamp(min=1e-12)
    return (x / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale


def _fp8_scaled_mm(point: dict) -> Prepared:
    import torch

    fn = find("fp8_scaled_mm")
    m, n, k = point["M"], point["N"], point["K"]

    def make():
        a, sa = _rowwise_fp8(torch.randn(m, k, device="cuda"))
        w, sw = _rowwise_fp8(torch.randn(n, k, device="cuda") / k**0.5)
        # mat_b is (K, N) column-major: the transpose of the row-major (N, K) weight.
        return a, w.t(), sa.reshape(m).contiguous(), sw.reshape(n).contiguous()

    args = make()

    def reference():
        a, b, sa, sb = args
        return (a.double() * sa.double()[:, None]) @ (b.double() * sb.double()[None, :])

    def variants(count: int):
        sets = [make() for _ in range(count)]
        return [lambda s=s: fn(*s, torch.bfloat16) for s in sets]

    return Prepared(
        run=lambda: fn(*args, torch.bfloat16),
        reference=reference,
        flops=gemm_flops(m, n, k),
        bytes=gemm_bytes(m, n, k, 8, 8, 16) + 4 * (m + n),
        variants=variants,
    )


def _fp8_blockwise_scaled_mm(point: dict) -> Prepared:
    import torch

    fn = find("fp8_blockwise_scaled_mm")
    m, n, k = point["M"], point["N"], point["K"]
    if k % 128 or n % 128:
        raise Unsupported(f"N={n} and K={k} must be multiples of the 128 block")

    def make():
        # Activations: one scale per (row, 128 columns); weights: per 128x128 block.
        a = torch.randn(m, k, device="cuda")
        sa = (a.view(m, k // 128, 128).abs().amax(-1).float() / FP8_MAX).clamp(min=1e-12)
        a_q = (a.view(m, k // 128, 128) / sa[..., None]).to(torch.float8_e4m3fn).view(m, k)
        w = torch.randn(n, k, device="cuda") / k**0.5
        blocks = w.view(n // 128, 128, k // 128, 128)
        sw = (blocks.abs().amax(dim=(1, 3)).float() / FP8_MAX).clamp(min=1e-12)
        w_q = (blocks / sw[:, None, :, None]).to(torch.float8_e4m3fn).view(n, k)
        # Scales as the kernel expects them: A's column-major (M, K/128), B's (K/128, N/128).
        return a_q, w_q.t(), sa.t().contiguous().t(), sw.t()

    args = make()

    def reference():
        a_q, b, sa, sw_t = args
        a = a_q.double().view(m, k // 128, 128) * sa.double()[..., None]
        w = b.t().double().view(n // 128, 128, k // 128, 128) * sw_t.t().double()[:, None, :, None]
        return a.view(m, k) @ w.view(n, k).t()

    def variants(count: int):
        sets = [make() for _ in range(count)]
        return [lambda s=s: fn(*s, torch.bfloat16) for s in sets]

    scale_bytes = 4 * (m * k // 128 + (n // 128) * (k // 128))
    return Prepared(
        run=lambda: fn(*args, torch.bfloat16),
        reference=reference,
        flops=gemm_flops(m, n, k),
        bytes=gemm_bytes(m, n, k, 8, 8, 16) + scale_bytes,
        variants=variants,
    )


def _cutlass_scaled_fp4_mm(point: dict) -> Prepared:
    import torch

    quant = find("scaled_fp4_quant")
    fn = find("cutlass_scaled_fp4_mm")
    m, n, k = point["M"], point["N"], point["K"]

    def make():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(n, k, device="cuda") / k**0.5).to(torch.bfloat16)
        a_gs = (FP8_MAX * FP4_MAX / a.float().abs().amax()).reshape(1)
        w_gs = (FP8_MAX * FP4_MAX / w.float().abs().amax()).reshape(1)
        a_fp4, a_sf = quant(a, a_gs)
        w_fp4, w_sf = quant(w, w_gs)
        alpha = (1.0 / (a_gs * w_gs)).float()
        return (a_fp4, w_fp4, a_sf, w_sf, alpha), (a, w)

    args, originals = make()

    def reference():
        # Not bit-exact with the kernel's inputs (no dequantiser ships with sgl-kernel); the
        # per-dtype thresholds for nvfp4 allow for the quantisation error of the originals.
        a, w = originals
        return a.double() @ w.double().t()

    def variants(count: int):
        sets = [make()[0] for _ in range(count)]
        return [lambda s=s: fn(*s, torch.bfloat16) for s in sets]

    return Prepared(
        run=lambda: fn(*args, torch.bfloat16),
        reference=reference,
        flops=gemm_flops(m, n, k),
        bytes=gemm_bytes(m, n, k, 4.5, 4.5, 16),
        variants=variants,
    )
