"""Block FP8 operands as SGLang quantises them (DeepSeek-style: one fp32 scale per token and
128 columns for activations, one per 128x128 block for weights), built and dequantised in
torch for sgl_kernel_backend's blockwise GEMMs and their checks. torch is imported where
used: the catalogue is read without it."""

from __future__ import annotations

FP8_MAX = 448.0
BLOCK = 128  # fp8 blockwise: 1x128 activation groups, 128x128 weight blocks


def group_quant(x, rows: int):
    """``per_token_group_quant_fp8`` (group 128) in torch: ``x`` (m, K) -> fp8 (rows, K)
    row-major and fp32 scales (rows, K/128) column-major (stride(0) == 1), one per (token,
    128 columns), amax / 448; rows past m are zero."""
    import torch

    m, k = x.shape
    kb = k // BLOCK
    groups = x.float().view(m, kb, BLOCK)
    sa = (groups.abs().amax(-1) / FP8_MAX).clamp(min=1e-12)
    a_q = torch.zeros(rows, k, device=x.device, dtype=torch.float8_e4m3fn)
    a_q[:m] = (groups / sa[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(m, k)
    scales_a = torch.zeros(kb, rows, device=x.device, dtype=torch.float32).t()
    scales_a[:m] = sa
    return a_q, scales_a


def block_weight(n: int, k: int, device: str):
    """A random (N, K) weight quantised per 128x128 block, as a block-FP8 checkpoint stores
    it: fp8 (N, K) row-major and fp32 scales (N/128, K/128) row-major (``weight_scale_inv``)."""
    import torch

    kb, nb = k // BLOCK, n // BLOCK
    w = torch.randn(n, k, device=device) / k**0.5
    blocks = w.view(nb, BLOCK, kb, BLOCK)
    sw = (blocks.abs().amax(dim=(1, 3)).float() / FP8_MAX).clamp(min=1e-12)
    w_q = (blocks / sw[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return w_q.view(n, k), sw


def blockwise_inputs(m: int, n: int, k: int, device: str, rows: int):
    """DeepSeek-style block FP8 operands, as SGLang quantises them.

    Activations: one fp32 scale per (token, 128 columns) (``per_token_group_quant_fp8``,
    group 128), in a buffer of ``rows`` >= m rows whose tail rows are zero; weights: one fp32
    scale per 128x128 block. Returns, as the GEMM takes them:
    ``mat_a`` (rows, K) fp8 row-major; ``mat_b`` (K, N) fp8 column-major (the row-major
    (N, K) weight transposed); ``scales_a`` (rows, K/128) fp32 column-major (stride(0) == 1);
    ``scales_b`` (K/128, N/128) fp32, the transposed view of the row-major (N/128, K/128)
    block scales (SGLang passes ``weight_scale.T``).
    """
    import torch

    a_q, scales_a = group_quant(torch.randn(m, k, device=device), rows)
    w_q, sw = block_weight(n, k, device)
    return a_q, w_q.t(), scales_a, sw.t()


def blockwise_dequant(args, m: int, n: int, k: int):
    """fp64 A (m, K) and W (N, K) from the operands of ``blockwise_inputs``."""
    a_q, b, sa, sw_t = args
    kb, nb = k // BLOCK, n // BLOCK
    a = a_q[:m].double().view(m, kb, BLOCK) * sa[:m].double()[..., None]
    w = b.t().double().view(nb, BLOCK, kb, BLOCK) * sw_t.t().double()[:, None, :, None]
    return a.view(m, k), w.view(n, k)
