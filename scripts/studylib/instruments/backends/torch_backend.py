"""PyTorch's own GEMMs: dense matmul, the fp8 scaled GEMMs (per-tensor and row-wise), the
grouped GEMMs, and a fused-MoE layer built from them (the baseline the fused kernels beat);
and a decode step's attention with ``scaled_dot_product_attention`` over a dense KV cache
(the baseline of the serving kernels' paged decode attention)."""

from __future__ import annotations

from functools import partial

from . import attention, moe
from .backend_interface import (
    Prepared,
    Unsupported,
    gemm_bytes,
    gemm_flops,
    input_variants,
    require_cuda,
)

OPS = {
    "matmul": {"dtypes": ["bf16", "fp16", "fp32"], "impls": ["aten"], "grouped": False},
    "scaled_mm": {"dtypes": ["fp8_e4m3"], "impls": ["per_tensor", "rowwise"], "grouped": False},
    # MoE layout: G experts x m tokens each (M is m), one launch for all experts.
    "grouped_mm": {"dtypes": ["bf16"], "impls": ["aten"], "grouped": True},
    "scaled_grouped_mm": {"dtypes": ["fp8_e4m3"], "impls": ["rowwise"], "grouped": True},
    # One MoE layer (see moe.py): sort by expert, _grouped_mm gate/up, SiLU x up, _grouped_mm
    # down, weighted sum back per token (fp8: row-wise _scaled_grouped_mm, per-token scales).
    "fused_moe": {
        "dtypes": ["bf16", "fp8_e4m3"],
        "impls": ["grouped_mm"],
        "grouped": True,
        "fused": True,
    },
    # One decode step's attention (attention.py): B queries of one token over a dense
    # [B, kv_heads, context, head_dim] cache, GQA through SDPA's enable_gqa. M is B.
    "decode_attention": {
        "dtypes": ["bf16", "fp16", "fp32"],
        "impls": ["sdpa"],
        "grouped": False,
        "attention": True,
    },
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
    if op == "fused_moe":
        return _fused_moe(point, device)
    if op == "decode_attention":
        return _decode_attention(point, device)
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


def _decode_attention(point: dict, device: str) -> Prepared:
    """``torch.nn.functional.scaled_dot_product_attention`` of q ``[B, heads, 1, D]`` over a
    dense cache ``[B, kv_heads, context, D]`` (``enable_gqa``: no copy of the KV heads); SDPA
    picks its kernel (flash / memory-efficient / cuDNN on a GPU, its CPU kernel on a CPU)."""
    import torch

    geo = attention.geometry(point)
    if geo.interleaved:
        raise Unsupported("torch SDPA reads a dense cache: it has no pool whose tokens could "
                          "be interleaved (shape key interleaved)")  # fmt: skip
    tdtype = _torch_dtype(point["dtype"])

    def make(seed: int):
        q, k, v = attention.make_inputs(geo, device, tdtype, seed)
        # The dense cache: head-major, as a model without a paged pool keeps it.
        return q.unsqueeze(2), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()

    def call(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, scale=geo.sm_scale, enable_gqa=True
        )

    q, k, v = make(0)

    def reference():
        # token-major views of the dense cache, as attention.reference takes them
        out = attention.reference(q.squeeze(2), k.transpose(1, 2), v.transpose(1, 2),
                                  geo.sm_scale)  # fmt: skip
        return out.unsqueeze(2)

    variants = input_variants(make, call)

    elem = _BITS[point["dtype"]] // 8
    return Prepared(
        run=lambda: call(q, k, v),
        reference=reference,
        flops=attention.flops(geo),
        bytes=attention.bytes_moved(geo, elem),
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

    variants = input_variants(lambda _seed: make(), call)

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


def _grouped_reference(a, weight, groups: int, m: int):
    """fp64 per-expert products: a [G*m, K] (dequantised), ``weight(g)`` expert g's [N, K]
    (fp64) -> [G*m, N]. Expert by expert: an fp64 copy of 256 experts' [4096, 6144] weights
    is 48 GiB, which an 80-GB H100 did not have (2026-12-06)."""
    import torch

    a64 = a.double().view(groups, m, -1)
    return torch.cat([a64[g] @ weight(g).t() for g in range(groups)])


def _random_experts(groups: int, n: int, k: int, device: str, quantize=None):
    """Random expert weights [G, N, K] of variance 1/K, drawn expert by expert (one fp32
    draw of 256 experts' [4096, 6144] is 24 GiB, its quantisation's temporaries as much
    again): bf16, or ``quantize(fp32 [N, K])``'s (fp8 [G, N, K], fp32 [G, N] scales)."""
    import torch

    if quantize is None:
        w = torch.empty(groups, n, k, device=device, dtype=torch.bfloat16)
        for g in range(groups):
            w[g] = torch.randn(n, k, device=device) / k**0.5
        return w
    q = torch.empty(groups, n, k, device=device, dtype=torch.float8_e4m3fn)
    scale = torch.empty(groups, n, device=device, dtype=torch.float32)
    for g in range(groups):
        q[g], scale_g = quantize(torch.randn(n, k, device=device) / k**0.5)
        scale[g] = scale_g.reshape(-1)
    return q, scale


def _grouped_mm(point: dict, device: str) -> Prepared:
    import torch

    require_cuda(device)
    g, m, n, k = point["G"], point["M"], point["N"], point["K"]
    offs = _offsets(g, m, device)

    def make():
        a = torch.randn(g * m, k, device=device, dtype=torch.bfloat16)
        # Experts' weights stored [G, N, K] and passed as [G, K, N] column-major views.
        return a, _random_experts(g, n, k, device)

    a, w = make()

    def call(a, w):
        return torch._grouped_mm(a, w.transpose(-2, -1), offs=offs, out_dtype=torch.bfloat16)

    variants = input_variants(lambda _seed: make(), call)

    return Prepared(
        run=lambda: call(a, w),
        reference=lambda: _grouped_reference(a, lambda e: w[e].double(), g, m),
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
        w, sw = _random_experts(g, n, k, device, partial(quantize_fp8, rowwise=True))
        return a, w, sa.reshape(g * m), sw

    a, w, sa, sw = make()

    def call(a, w, sa, sw):
        return torch._scaled_grouped_mm(
            a, w.transpose(-2, -1), sa, sw, offs=offs, out_dtype=torch.bfloat16
        )

    def reference():
        a_deq = a.double() * sa.double()[:, None]
        return _grouped_reference(a_deq, lambda e: w[e].double() * sw[e].double()[:, None], g, m)

    variants = input_variants(lambda _seed: make(), call)

    return Prepared(
        run=lambda: call(a, w, sa, sw),
        reference=reference,
        flops=gemm_flops(m, n, k, g),
        bytes=gemm_bytes(m, n, k, 8, 8, 16, g) + 4 * g * (m + n),
        variants=variants,
    )


def _fused_moe(point: dict, device: str) -> Prepared:
    import torch

    geo = moe.require_moe_cuda(point, device)
    fp8 = point["dtype"] == "fp8_e4m3"
    ids, weights = moe.routing(point, device)
    flat = ids.reshape(-1).long()
    ones = torch.ones_like(flat)

    def rowwise(x):
        amax = x.float().abs().amax(dim=1, keepdim=True)
        scale = (amax / FP8_MAX).clamp(min=1e-12)
        return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale

    def grouped(a, w, w_scale, offs):
        """a [rows, in] @ w [G, out, in]^T per expert group."""
        if w_scale is None:
            return torch._grouped_mm(a, w.transpose(-2, -1), offs=offs, out_dtype=torch.bfloat16)
        aq, a_scale = rowwise(a)
        return torch._scaled_grouped_mm(aq, w.transpose(-2, -1), a_scale.reshape(-1), w_scale,
                                        offs=offs, out_dtype=torch.bfloat16)  # fmt: skip

    def make(seed: int):
        layer = moe.make_layer(geo, device, seed)
        w13 = torch.cat([layer.gate, layer.up], dim=1)  # [G, 2K, N]
        if not fp8:
            return layer, (layer.x, w13, None, layer.down, None)
        args = (layer.x, *_rowwise_experts(w13), *_rowwise_experts(layer.down))
        # call() takes (x, w13, s13, w2, s2)
        return moe.inputs_only(layer), args

    def call(x, w13, s13, w2, s2):
        # The grouping is part of the layer's work (the fused kernels sort inside too); no
        # step syncs with the host, so the call can be captured in a graph.
        order = torch.argsort(flat, stable=True)  # routed rows grouped by expert
        counts = torch.zeros(geo.experts, dtype=torch.long, device=device).index_add_(0, flat, ones)
        offs = torch.cumsum(counts, 0).to(torch.int32)
        token_of_row = order // geo.top_k
        h = grouped(x[token_of_row], w13, s13, offs)
        act = torch.nn.functional.silu(h[:, : geo.inter]) * h[:, geo.inter :]
        y = grouped(act, w2, s2, offs) * weights.reshape(-1)[order, None].to(torch.bfloat16)
        return torch.zeros_like(x).index_add_(0, token_of_row, y)

    layer, args = make(0)

    def reference():
        _, w13, s13, w2, s2 = args
        return moe.layer_reference(layer, ids, weights, (w13, s13, w2, s2) if fp8 else None)

    return moe.prepared(point, ids, fp8, make, call, args, reference)


def _rowwise_experts(w):
    """bf16 [G, R, C] -> (float8_e4m3fn [G, R, C], fp32 [G, R] row scales), expert by expert
    (fp32 copies of 256 experts at once would take ~40 GB)."""
    import torch

    q = torch.empty(w.shape, device=w.device, dtype=torch.float8_e4m3fn)
    scale = torch.empty(w.shape[:2], device=w.device, dtype=torch.float32)
    for e in range(w.shape[0]):
        q[e], s = quantize_fp8(w[e].float(), rowwise=True)
        scale[e] = s.reshape(-1)
    return q, scale
