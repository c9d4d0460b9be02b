"""PyTorch's own GEMMs: dense matmul and the fp8 scaled GEMMs (per-tensor and row-wise)."""

from __future__ import annotations

from .base import Prepared, Unsupported, gemm_bytes, gemm_flops, require_cuda

OPS = {
    "matmul": {"dtypes": ["bf16", "fp16", "fp32"], "impls": ["aten"], "grouped": False},
    "scaled_mm": {"dtypes": ["fp8_e4m3"], "impls": ["per_tensor", "rowwise"], "grouped": False},
    # MoE layout: G experts x m tokens each (M is m), one launch for all experts.
    "grouped_mm": {"dtypes": ["bf16"], "impls": ["aten"], "grouped": True},
    "scaled_grouped_mm": {"dtypes": ["fp8_e4m3"], "impls": ["rowwise"], "grouped": True},
}

_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8_e4m3": 8}
FP8_MAX = 448.0  # largest finite float8_e4m3fn


def environment(device: str) -> dict:
    import torch

    return {"library_version": torch.__version__, "unsupported": None}


def _torch_dtype(dtype: str):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]


def prepare(point: dict, device: str) -> Prepared:
    op = point["op"]
    if op == "matmul":
        return _matmul(point, device)
    if op == "scaled_mm":
        return _scaled_mm(point, device)
    if op == "grouped_mm":
        return _grouped_mm(point, device)
    if op == "scaled_grouped_mm":
        return _scaled_grouped_mm(point, device)
    raise Unsupported(f"torch adapter has no op {op!r}")


def _matmul(point: dict, device: str) -> Prepared:
    import torch

    m, n, k, dtype = point["M"], point["N"], point["K"], point["dtype"]
    tdtype = _torch_dtype(dtype)

    def make():
        # Scaled so that outputs stay O(1) whatever K is.
        a = torch.randn(m, k, device=device, dtype=torch.float32).to(tdtype)
        w = (torch.randn(k, n, device=device, dtype=torch.float32) / k**0.5).to(tdtype)
        return a, w

    a, w = make()

    def variants(count: int):
        sets = [make() for _ in range(count)]
        return [lambda a=a, w=w: torch.matmul(a, w) for a, w in sets]

    return Prepared(
        run=lambda: torch.matmul(a, w),
        reference=lambda: a.double() @ w.double(),
        flops=gemm_flops(m, n, k),
        bytes=gemm_bytes(m, n, k, _BITS[dtype], _BITS[dtype], _BITS[dtype]),
        variants=variants,
    )


def quantize_fp8(x, rowwise: bool):
    """float32 -> (float8_e4m3fn, float32 scale) per tensor or per row (dim 0)."""
    import torch

    amax = x.abs().amax(dim=1, keepdim=True) if rowwise else x.abs().amax()
    scale = (amax.float() / FP8_MAX).clamp(min=1e-12)
    q = (x / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


def _scaled_mm(point: dict, device: str) -> Prepared:
    import torch

    require_cuda(device)
    m, n, k = point["M"], point["N"], point["K"]
    rowwise = point["impl"] == "rowwise"

    def make():
        a, sa = quantize_fp8(torch.randn(m, k, device=device), rowwise)
        # W is stored [N, K] row-major and passed transposed: _scaled_mm wants column-major B.
        w, sw = quantize_fp8(torch.randn(n, k, device=device) / k**0.5, rowwise)
        sw_b = sw.t() if rowwise else sw  # [1, N] for row-wise
        return a, w, sa, sw_b

    a, w, sa, sw = make()

    def call(a, w, sa, sw):
        return torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16)

    def reference():
        # sw.t() undoes the [1, N] layout of row-wise scales and is a no-op on a scalar.
        return (a.double() * sa.double()) @ (w.double() * sw.t().double()).t()

    def variants(count: int):
        sets = [make() for _ in range(count)]
        return [lambda s=s: call(*s) for s in sets]

    scale_bytes = 4 * ((m + n) if rowwise else 2)
    return Prepared(
        run=lambda: call(a, w, sa, sw),
        reference=reference,
        flops=gemm_flops(m, n, k),
        bytes=gemm_bytes(m, n, k, 8, 8, 16) + scale_bytes,
        variants=variants,
    )


def _offsets(groups: int, m: int, device: str):
    """Cumulative row ends of G equal groups (int32, as _grouped_mm wants)."""
    import torch

    return torch.arange(1, groups + 1, device=device, dtype=torch.int32) * m


def _grouped_reference(a, w, groups: int, m: int):
    """fp64 per-expert products: a [G*m, K] (dequantised), w [G, N, K] -> [G*m, N]."""
    k = a.shape[1]
    return (a.double().view(groups, m, k) @ w.double().transpose(-2, -1)).reshape(groups * m, -1)


def _grouped_mm(point: dict, device: str) -> Prepared:
    import torch

    require_cuda(device)
    g, m, n, k = point["G"], point["M"], point["N"], point["K"]
    offs = _offsets(g, m, device)

    def make():
        a = torch.randn(g * m, k, device=device, dtype=torch.bfloat16)
        # Experts' weights stored [G, N, K] and passed as [G, K, N] column-major views.
        w = (torch.randn(g, n, k, device=device) / k**0.5).to(torch.bfloat16)
        return a, w

    a, w = make()

    def call(a, w):
        return torch._grouped_mm(a, w.transpose(-2, -1), offs=offs, out_dtype=torch.bfloat16)

    def variants(count: int):
        sets = [make() for _ in range(count)]
        return [lambda s=s: call(*s) for s in sets]

    return Prepared(
        run=lambda: call(a, w),
        reference=lambda: _grouped_reference(a, w, g, m),
        flops=gemm_flops(m, n, k, g),
        bytes=gemm_bytes(m, n, k, 16, 16, 16, g),
        variants=variants,
    )


def _scaled_grouped_mm(point: dict, device: str) -> Prepared:
    import torch

    require_cuda(device)
    g, m, n, k = point["G"], point["M"], point["N"], point["K"]
    offs = _offsets(g, m, device)

    def make():
        a, sa = quantize_fp8(torch.randn(g * m, k, device=device), rowwise=True)
        w, sw = quantize_fp8(torch.randn(g * n, k, device=device) / k**0.5, rowwise=True)
        return a, w.view(g, n, k), sa.reshape(g * m), sw.reshape(g, n)

    a, w, sa, sw = make()

    def call(a, w, sa, sw):
        return torch._scaled_grouped_mm(
            a, w.transpose(-2, -1), sa, sw, offs=offs, out_dtype=torch.bfloat16
        )

    def reference():
        a_deq = a.double() * sa.double()[:, None]
        w_deq = w.double() * sw.double()[..., None]
        return _grouped_reference(a_deq, w_deq, g, m)

    def variants(count: int):
        sets = [make() for _ in range(count)]
        return [lambda s=s: call(*s) for s in sets]

    return Prepared(
        run=lambda: call(a, w, sa, sw),
        reference=reference,
        flops=gemm_flops(m, n, k, g),
        bytes=gemm_bytes(m, n, k, 8, 8, 16, g) + 4 * g * (m + n),
        variants=variants,
    )
