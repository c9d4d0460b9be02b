"""sgl-kernel's GEMMs: NVFP4 ``cutlass_scaled_fp4_mm``, FP8 ``fp8_scaled_mm`` (row-wise
scales) and ``fp8_blockwise_scaled_mm`` (128-wide block scales, DeepSeek style); and SGLang's
Triton kernels its server runs: the block-FP8 linear layer (``fp8_blockwise_scaled_mm``, impl
``triton``), the fused MoE and the decode attention.

sgl-kernel's 0.4 series moved these ops out of ``sgl_kernel`` into SGLang. Each op is looked
up in ``LOCATIONS`` order, ``sgl_kernel`` first, and called with the conventions of the module
that provided it (``CONVENTIONS``); a point is ``unsupported`` with the places searched when
the op is nowhere. Where the installed pair keeps each op:

=========================  ==========================  =====================================
op                         sglang-kernel 0.4.5         SGLang 0.5.16
=========================  ==========================  =====================================
fp8_scaled_mm              ``sgl_kernel`` (sm_90 ok)   ``sglang.kernels.ops.gemm`` (forwards
                                                       to ``sgl_kernel``)
fp8_blockwise_scaled_mm    absent                      ``sglang.jit_kernel.fp8_blockwise_gemm``
(impl cutlass)                                         (JIT, SM120 only: sm_90/sm_100 raise
                                                       "requires SM120 (Blackwell)")
fp8_blockwise_scaled_mm    absent                      ``sglang.kernels.ops.quantization.fp8_
(impl triton:                                          kernel`` (Triton GEMM; the quantiser is
per_token_group_quant_fp8,                             sgl-kernel's CUDA kernel); earlier
w8a8_block_fp8_matmul_                                 SGLang releases kept both in
triton)                                                ``sglang.srt.layers.quantization.fp8_
                                                       kernel``
scaled_fp4_quant,          absent                      absent (0.5.16 quantises and multiplies
cutlass_scaled_fp4_mm                                  NVFP4 with FlashInfer's fp4_quantize /
                                                       mm_fp4); some SGLang releases have them
                                                       in ``sglang.jit_kernel.nvfp4`` (sm_100+)
decode_attention_fwd,      absent                      ``sglang.kernels.ops.attention.decode_
get_num_kv_splits_triton                               attention`` and ``.metadata`` (Triton:
                                                       the kernels of ``--attention-backend
                                                       triton``)
=========================  ==========================  =====================================

An arch the library refuses (e.g. FP4 or SM120-only kernels on Hopper) gives an
``unsupported`` row carrying the library's own text (``is_unsupported_error``). The module
that provided each op is printed once per worker on stderr (the job's log; the row schema has
no per-point column for it) and kept in ``Prepared.extra["provider"]``.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

from . import attention, moe
from .backend_interface import (
    Prepared,
    Unsupported,
    distribution_version,
    gemm_bytes,
    gemm_flops,
    gpu_library_environment,
    input_variants,
)
from .fp8_blocks import (
    BLOCK,
    FP8_MAX,
    block_weight,
    blockwise_dequant,
    blockwise_inputs,
    group_quant,
)

OPS = {
    "cutlass_scaled_fp4_mm": {"dtypes": ["nvfp4"], "impls": ["cutlass"], "grouped": False},
    "fp8_scaled_mm": {"dtypes": ["fp8_e4m3"], "impls": ["cutlass"], "grouped": False},
    # cutlass: sgl-kernel's CUTLASS GEMM alone (activations quantised outside the timed call);
    # triton: SGLang's block-FP8 linear layer as its server runs it on sm_90 (no DeepGEMM, no
    # SM120 CUTLASS): the bf16 activations' 1x128 quantisation plus the Triton GEMM, timed as
    # one call (_fp8_blockwise_triton).
    "fp8_blockwise_scaled_mm": {
        "dtypes": ["fp8_e4m3"],
        "impls": ["cutlass", "triton"],
        "grouped": False,
    },
    # SGLang's Triton fused MoE (what its server runs per MoE layer on sm_90): fp8 is w8a8 with
    # per-expert weight scales and dynamic per-tensor activation scales, as SGLang quantises a
    # bf16 model online (--quantization fp8).
    "fused_moe": {
        "dtypes": ["bf16", "fp8_e4m3"],
        "impls": ["triton"],
        "grouped": True,
        "fused": True,
    },
    # SGLang's Triton decode attention (its server's kernel with --attention-backend triton),
    # over a paged KV pool of page size 1; M is the batch (attention.py).
    "decode_attention": {
        "dtypes": ["bf16"],
        "impls": ["triton"],
        "grouped": False,
        "attention": True,
    },
}

SGL_KERNEL = "sgl_kernel"
SGLANG_GEMM = "sglang.kernels.ops.gemm"
SGLANG_FP8_BLOCKWISE = "sglang.jit_kernel.fp8_blockwise_gemm"
SGLANG_FP8_KERNEL = "sglang.kernels.ops.quantization.fp8_kernel"
SGLANG_FP8_KERNEL_OLD = "sglang.srt.layers.quantization.fp8_kernel"  # earlier releases' home
SGLANG_NVFP4 = "sglang.jit_kernel.nvfp4"
SGLANG_FUSED_MOE = "sglang.srt.layers.moe.fused_moe_triton"
SGLANG_DECODE_ATTENTION = "sglang.kernels.ops.attention.decode_attention"
SGLANG_ATTENTION_METADATA = "sglang.kernels.ops.attention.metadata"

# Where each function may live, searched in this order.
LOCATIONS = {
    "fp8_scaled_mm": [SGL_KERNEL, SGLANG_GEMM],
    "fp8_blockwise_scaled_mm": [SGL_KERNEL, SGLANG_FP8_BLOCKWISE],
    # SGLang's Triton block-FP8 linear (fp8_utils.triton_w8a8_block_fp8_linear calls these two;
    # sgl_kernel has neither under these names).
    "per_token_group_quant_fp8": [SGLANG_FP8_KERNEL, SGLANG_FP8_KERNEL_OLD],
    "w8a8_block_fp8_matmul_triton": [SGLANG_FP8_KERNEL, SGLANG_FP8_KERNEL_OLD],
    "cutlass_scaled_fp4_mm": [SGL_KERNEL, SGLANG_NVFP4],
    "scaled_fp4_quant": [SGL_KERNEL, SGLANG_NVFP4],
    "fused_experts": [SGLANG_FUSED_MOE],
    "decode_attention_fwd": [SGLANG_DECODE_ATTENTION],
    "get_num_kv_splits_triton": [SGLANG_ATTENTION_METADATA],
}

# How each place's function is called where places differ (see _fp8_blockwise_scaled_mm):
#   "aot": sgl_kernel's own wrapper, which pads M to a multiple of 4 itself;
#   "jit_row_padded": SGLang's JIT wrapper, which does not pad: SGLang feeds it activations
#   quantised into buffers of M rounded up to 4 rows (zero tail, column-major scales) and
#   slices the output back (fp8_utils.cutlass_w8a8_block_fp8_linear_with_fallback).
# Every other (op, place) pair has the same signature in both places.
CONVENTIONS = {
    ("fp8_blockwise_scaled_mm", SGL_KERNEL): "aot",
    ("fp8_blockwise_scaled_mm", SGLANG_FP8_BLOCKWISE): "jit_row_padded",
}
ROW_ALIGNMENT = 4  # SGLang's row padding for the JIT blockwise GEMM
FP4_MAX = 6.0
FP4_ALIGNMENT = 32  # CUTLASS NVFP4 GEMM: N and K multiples of 32 (SGLang's FP4_GEMM_ALIGNMENT)

_UNSUPPORTED_TEXT = re.compile(
    r"not supported|does not support|not implemented|no compiled"
    r"|requires? (compute capab|sm_?\d|blackwell|hopper)",
    re.IGNORECASE,
)
_announced: set[tuple[str, str]] = set()
#: What find() answered for each name in this process: a Found, or the Unsupported's message.
#: A sweep asks once per point, and a search that fails (the FP4 ops on sm_90) cost 0.14 s a
#: point on the H200 (imports and version lookups): 7.5 s of the default's sgl-kernel sweep.
_searched: dict[str, Found | str] = {}


@dataclass(frozen=True)
class Found:
    """An op and the module it came from."""

    name: str
    module: str
    fn: Callable

    @property
    def convention(self) -> str:
        return CONVENTIONS.get((self.name, self.module), "same")


def _version() -> str | None:
    return distribution_version("sglang-kernel", "sgl-kernel")


def _versions() -> str:
    """Both packages the ops may come from, for messages."""
    return f"sglang-kernel {_version()}, sglang {distribution_version('sglang')}"


def environment(device: str) -> dict:
    env = gpu_library_environment(SGL_KERNEL, _version(), device)
    sglang = distribution_version("sglang")
    if sglang and env.get("library_version"):
        # Some ops come from SGLang itself (see the module docstring).
        env["library_version"] = f"{env['library_version']} (sglang {sglang})"
    return env


def find(name: str) -> Found:
    """The function ``name`` from the first module of ``LOCATIONS`` that has it, or Unsupported
    listing every place searched and why it had nothing; searched once per process."""
    if name not in _searched:
        try:
            _searched[name] = _search(name)
        except Unsupported as exc:
            _searched[name] = str(exc)
    found = _searched[name]
    if isinstance(found, str):
        raise Unsupported(found)
    return found


def _search(name: str) -> Found:
    tried = []
    for module_name in LOCATIONS[name]:
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001 - a missing or broken install is a result
            tried.append(f"{module_name} ({type(exc).__name__}: {exc})")
            continue
        fn = getattr(module, name, None)
        if callable(fn):
            return Found(name, module_name, fn)
        tried.append(f"{module_name} (no {name})")
    raise Unsupported(f"{name} not found in {_versions()}: searched " + "; ".join(tried))


def _announce(found: Found) -> dict:
    """Say once per process which module provides an op; returns it for ``Prepared.extra``."""
    key = (found.name, found.module)
    if key not in _announced:
        _announced.add(key)
        print(
            f"sgl_kernel adapter: {found.name} from {found.module} "
            f"(convention {found.convention}; {_versions()})",
            file=sys.stderr,
            flush=True,
        )
    return {found.name: found.module}


def is_unsupported_error(exc: BaseException) -> bool:
    """The libraries' own 'this arch or build cannot do it' errors, e.g. SGLang 0.5.16's
    "fp8_blockwise_scaled_mm JIT kernel requires SM120 (Blackwell).", the NVFP4 JIT's
    "NVFP4 JIT kernels require compute capability >= 10.0, got 9.0." and sgl-kernel's
    NotImplementedError "No compiled nvfp4 ... kernel"."""
    return type(exc).__name__ == "NotImplementedError" or bool(_UNSUPPORTED_TEXT.search(str(exc)))


def prepare(point: dict, device: str) -> Prepared:
    if device != "cuda":
        raise Unsupported("no CUDA device")
    builders = {
        "fp8_scaled_mm": _fp8_scaled_mm,
        "fp8_blockwise_scaled_mm": _fp8_blockwise_scaled_mm,
        "cutlass_scaled_fp4_mm": _cutlass_scaled_fp4_mm,
        "fused_moe": _fused_moe,
        "decode_attention": _decode_attention,
    }
    if point["op"] not in builders:
        raise Unsupported(f"sgl_kernel adapter has no op {point['op']!r}")
    if point["op"] == "fp8_blockwise_scaled_mm" and point.get("impl") == "triton":
        return _fp8_blockwise_triton(point)
    return builders[point["op"]](point)


def _rowwise_fp8(x):
    import torch

    scale = (x.abs().amax(dim=1, keepdim=True).float() / FP8_MAX).clamp(min=1e-12)
    return (x / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale


def _fp8_scaled_mm(point: dict, device: str = "cuda") -> Prepared:
    import torch

    found = find("fp8_scaled_mm")
    provider = _announce(found)
    fn = found.fn  # same signature in sgl_kernel and sglang.kernels.ops.gemm
    m, n, k = point["M"], point["N"], point["K"]

    def make():
        a, sa = _rowwise_fp8(torch.randn(m, k, device=device))
        w, sw = _rowwise_fp8(torch.randn(n, k, device=device) / k**0.5)
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
        extra={"provider": provider},
    )


def _fp8_blockwise_scaled_mm(point: dict, device: str = "cuda") -> Prepared:
    import torch

    found = find("fp8_blockwise_scaled_mm")
    provider = _announce(found)
    fn = found.fn
    m, n, k = point["M"], point["N"], point["K"]
    if k % BLOCK or n % BLOCK:
        raise Unsupported(f"N={n} and K={k} must be multiples of the {BLOCK} block")
    if found.convention == "jit_row_padded":
        # SGLang's JIT wrapper allocates out (rows, N) and pads nothing: M is padded to 4 rows
        # at quantisation and the output sliced back (a view: no extra kernel).
        rows = -(-m // ROW_ALIGNMENT) * ROW_ALIGNMENT

        def call(a_q, b, sa, sb):
            return fn(a_q, b, sa, sb, torch.bfloat16)[:m]
    else:
        # sgl_kernel's AOT wrapper pads mat_a / scales_a to 4 rows itself.
        rows = m

        def call(a_q, b, sa, sb):
            return fn(a_q, b, sa, sb, torch.bfloat16)

    def make():
        return blockwise_inputs(m, n, k, device, rows)

    args = make()

    def reference():
        a, w = blockwise_dequant(args, m, n, k)
        return a @ w.t()

    variants = input_variants(lambda _seed: make(), call)

    scale_bytes = 4 * (m * k // BLOCK + (n // BLOCK) * (k // BLOCK))
    return Prepared(
        run=lambda: call(*args),
        reference=reference,
        flops=gemm_flops(m, n, k),
        bytes=gemm_bytes(m, n, k, 8, 8, 16) + scale_bytes,
        variants=variants,
        extra={"provider": provider},
    )


def _fp8_blockwise_triton(point: dict, device: str = "cuda") -> Prepared:
    """SGLang's block-FP8 linear layer as its server runs it on sm_90 when neither DeepGEMM nor
    SM120's CUTLASS applies (``fp8_utils.triton_w8a8_block_fp8_linear``: the auto dispatch's
    last resort, and ``--fp8-gemm-backend triton``)::

        q_input, x_scale = per_token_group_quant_fp8(input_2d, 128, column_major_scales=False)
        output = w8a8_block_fp8_matmul_triton(q_input, weight, x_scale, weight_scale,
                                              [128, 128], output_dtype=torch.bfloat16)

    ``input_2d`` bf16 (M, K); ``weight`` fp8 (N, K) row-major; ``weight_scale`` fp32
    (ceil(N/128), ceil(K/128)) row-major; ``x_scale`` comes back fp32 (M, K/128) row-major.
    On CUDA SGLang 0.5.16's ``per_token_group_quant_fp8`` is ``sglang_per_token_group_quant_fp8``
    (sgl-kernel's ``per_token_group_quant_8bit``); the GEMM is the Triton
    ``_w8a8_block_fp8_matmul`` with SGLang's tuned config for (N, K, the GPU) or its default.

    One timed call is the quantisation and the GEMM together: the server quantises every
    projection's activations right before its GEMM, so a row is the layer's time, not the
    GEMM's alone (the cutlass impl times its GEMM on activations quantised beforehand). The
    check: the fp64 product of the activations quantised as SGLang does (``group_quant``) and
    the weight, both dequantised, as the cutlass impl's."""
    import torch

    quant_found = find("per_token_group_quant_fp8")
    mm_found = find("w8a8_block_fp8_matmul_triton")
    provider = {**_announce(quant_found), **_announce(mm_found)}
    quant, gemm = quant_found.fn, mm_found.fn
    m, n, k = point["M"], point["N"], point["K"]
    if k % BLOCK or n % BLOCK:
        raise Unsupported(f"N={n} and K={k} must be multiples of the {BLOCK} block")

    def call(x, w_q, w_s):
        # Timed as one: the activations' 1x128 quantisation, then the block-FP8 GEMM.
        q_input, x_scale = quant(x, BLOCK, column_major_scales=False)
        return gemm(q_input, w_q, x_scale, w_s, [BLOCK, BLOCK], output_dtype=torch.bfloat16)

    def make():
        x = torch.randn(m, k, device=device).to(torch.bfloat16)
        return (x, *block_weight(n, k, device))

    args = make()

    def reference():
        x, w_q, w_s = args
        a_q, scales_a = group_quant(x, m)
        a, w = blockwise_dequant((a_q, w_q.t(), scales_a, w_s.t()), m, n, k)
        return a @ w.t()

    variants = input_variants(lambda _seed: make(), call)

    # The GEMM's operands and output (as the cutlass impl's), plus the quantiser's bf16 read
    # and its fp8 and scale writes.
    scale_bytes = 4 * (m * k // BLOCK + (n // BLOCK) * (k // BLOCK))
    quant_bytes = 2 * m * k + m * k + 4 * (m * k // BLOCK)
    return Prepared(
        run=lambda: call(*args),
        reference=reference,
        flops=gemm_flops(m, n, k),
        bytes=gemm_bytes(m, n, k, 8, 8, 16) + scale_bytes + quant_bytes,
        variants=variants,
        extra={"provider": provider},
    )


def _cutlass_scaled_fp4_mm(point: dict, device: str = "cuda") -> Prepared:
    import torch

    # sgl_kernel's and sglang.jit_kernel.nvfp4's share one signature:
    #   scaled_fp4_quant(input bf16 (m, K), input_global_scale fp32 (1,))
    #     -> packed e2m1 uint8 (m, K/2), e4m3 scales swizzled 128x4 (round_up(m, 128), K/16)
    #   cutlass_scaled_fp4_mm(a, b (N, K/2), block_scale_a, block_scale_b, alpha fp32 (1,),
    #                         out_dtype) -> (m, N)
    quant_found = find("scaled_fp4_quant")
    mm_found = find("cutlass_scaled_fp4_mm")
    provider = {**_announce(quant_found), **_announce(mm_found)}
    quant, fn = quant_found.fn, mm_found.fn
    m, n, k = point["M"], point["N"], point["K"]
    if k % FP4_ALIGNMENT or n % FP4_ALIGNMENT:
        raise Unsupported(
            f"N={n} and K={k} must be multiples of {FP4_ALIGNMENT} for the CUTLASS NVFP4 GEMM"
        )

    def make():
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        w = (torch.randn(n, k, device=device) / k**0.5).to(torch.bfloat16)
        a_gs = (FP8_MAX * FP4_MAX / a.float().abs().amax().clamp(min=1e-12)).reshape(1)
        w_gs = (FP8_MAX * FP4_MAX / w.float().abs().amax().clamp(min=1e-12)).reshape(1)
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
        extra={"provider": provider},
    )


def _publish_default_server_args() -> None:
    """SGLang's MoE kernels read process-wide server args (deterministic inference, fused
    all-reduce); outside a server none are published. Publish the defaults of a server
    started without flags, field by field (ServerArgs' own init would resolve a model)."""

    from sglang.srt import runtime_context
    from sglang.srt.server_args import ServerArgs

    try:
        runtime_context.get_server_args()
        return
    except ValueError:
        pass
    args = ServerArgs.__new__(ServerArgs)
    for f in dataclasses.fields(ServerArgs):
        if f.default is not dataclasses.MISSING:
            setattr(args, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            setattr(args, f.name, f.default_factory())
    runtime_context.get_context().set_server_args(args)


def _fused_moe(point: dict, device: str = "cuda") -> Prepared:
    """SGLang's ``fused_experts`` (Triton) on one MoE layer, in place as its server calls it
    (the output overwrites the hidden states; out of place it allocates the output in the
    tensor-parallel group's memory pool, which needs a distributed setup). Each call first
    copies the layer's input into the buffer it overwrites (M x N bf16: a few µs at most),
    so every call sees the same hidden states."""
    import torch

    found = find("fused_experts")
    provider = _announce(found)
    _publish_default_server_args()
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    from sglang.srt.layers.moe.topk import StandardTopKOutput

    geo = moe.require_moe_cuda(point, device)
    fp8 = point["dtype"] == "fp8_e4m3"
    ids, weights = moe.routing(point, device)
    topk = StandardTopKOutput(topk_weights=weights, topk_ids=ids, router_logits=None)
    config = MoeRunnerConfig(
        num_experts=geo.experts,
        num_local_experts=geo.experts,
        hidden_size=geo.hidden,
        intermediate_size_per_partition=geo.inter,
        top_k=geo.top_k,
        params_dtype=torch.bfloat16,
        inplace=True,
    )

    def make(seed: int):
        layer = moe.make_layer(geo, device, seed)
        w13 = torch.cat([layer.gate, layer.up], dim=1)  # SGLang: [gate; up] rows
        if not fp8:
            return layer, (layer.x, w13, layer.down, None, None)
        q13, s13 = moe.quantize_experts(w13)
        q2, s2 = moe.quantize_experts(layer.down)
        return moe.inputs_only(layer), (layer.x, q13, q2, s13, s2)

    def call(x, w13, w2, s13, s2):
        hidden = buffers.setdefault(x.data_ptr(), torch.empty_like(x))
        hidden.copy_(x)
        if s13 is None:
            return found.fn(hidden, w13, w2, topk, config)
        return found.fn(hidden, w13, w2, topk, config, use_fp8_w8a8=True, w1_scale=s13,
                        w2_scale=s2)  # fmt: skip

    buffers: dict = {}  # one overwritten buffer per input set

    layer, args = make(0)

    def reference():
        _, q13, q2, s13, s2 = args
        return moe.layer_reference(layer, ids, weights, (q13, s13, q2, s2) if fp8 else None)

    return moe.prepared(point, ids, fp8, make, call, args, reference, {"provider": provider})


#: SGLang 0.5.16's ``--triton-attention-num-kv-splits`` default: the most KV splits per request.
MAX_KV_SPLITS = 8


def _decode_attention(point: dict, device: str = "cuda") -> Prepared:
    """SGLang's ``decode_attention_fwd`` as ``TritonAttnBackend.forward_decode`` calls it
    (sglang/srt/layers/attention/triton_backend.py): q ``[B, heads, D]``, the layer's K and V
    pools ``[slots, kv_heads, D]`` (page size 1, SGLang's default), ``kv_indptr`` (int32,
    B + 1) and ``kv_indices`` (int64, the pool slots of each request's tokens), fp32
    ``attn_logits`` ``[B, heads, max_kv_splits, D]`` and ``attn_lse`` ``[B, heads,
    max_kv_splits]`` scratch, ``num_kv_splits`` (int32, B) from SGLang's own scheduling kernel
    ``get_num_kv_splits_triton`` (the server runs it once per step, in its metadata, not per
    layer: here it runs once, in prepare), ``sm_scale`` = 1/sqrt(D), k and v scales 1.0, and
    PDL on sm_90+ as the server enables it. The output is written into a buffer made once per
    input set (the server allocates it per call)."""
    import torch

    found = find("decode_attention_fwd")
    splits_found = find("get_num_kv_splits_triton")
    provider = {**_announce(found), **_announce(splits_found)}
    geo = attention.geometry(point)
    dtype = torch.bfloat16
    # The pool's slot table, contiguous or as decode lays it out (attention.py).
    kv_indptr = (torch.arange(geo.batch + 1, dtype=torch.int32) * geo.context).to(device)
    kv_indices = attention.pool_slots(geo).to(device)
    sms = torch.cuda.get_device_properties(0).multi_processor_count if device == "cuda" else 0
    num_kv_splits = _num_kv_splits(splits_found.fn, geo, device, sms)
    splits = int(num_kv_splits[0].item())  # every request is as long: one value
    layout = f" (last {geo.interleaved} tokens interleaved)" if geo.interleaved else ""
    print(f"sgl_kernel adapter: decode_attention B={geo.batch} context={geo.context}{layout}: "
          f"{splits} KV splits per request (at most {MAX_KV_SPLITS})", file=sys.stderr,
          flush=True)  # fmt: skip
    attn_logits = torch.empty((geo.batch, geo.heads, MAX_KV_SPLITS, geo.head_dim),
                              dtype=torch.float32, device=device)  # fmt: skip
    attn_lse = torch.empty((geo.batch, geo.heads, MAX_KV_SPLITS), dtype=torch.float32,
                           device=device)  # fmt: skip
    # SGLang's is_arch_support_pdl(): CUDA sm_90 and newer.
    use_pdl = device == "cuda" and torch.cuda.get_device_capability()[0] >= 9

    def make(seed: int):
        q, k, v = attention.make_inputs(geo, device, dtype, seed)
        k_pool, v_pool = (attention.paged_pool(geo, c, kv_indices) for c in (k, v))
        return q, k_pool, v_pool, torch.empty_like(q), (k, v)

    def call(q, k_pool, v_pool, out, _originals):
        found.fn(q, k_pool, v_pool, out, kv_indptr, kv_indices, attn_logits, attn_lse,
                 num_kv_splits, MAX_KV_SPLITS, geo.sm_scale, 1.0, 1.0, logit_cap=0.0,
                 sinks=None, xai_temperature_len=-1, has_mla=False, use_pdl=use_pdl,
                 page_size=1)  # fmt: skip
        return out

    return attention.paged_prepared(geo, make, call,
                                    {"provider": provider, "num_kv_splits": splits})  # fmt: skip


def _num_kv_splits(kernel, geo, device: str, sms: int):
    """KV splits per request as SGLang's server picks them (``TritonAttnBackend.
    get_num_kv_splits`` with ``sms`` multiprocessors: every request ``context`` tokens long,
    one query token each)."""
    import torch

    num_kv_splits = torch.empty((geo.batch,), dtype=torch.int32, device=device)
    if sms <= 0:  # the server's fallback without a core count
        return num_kv_splits.fill_(MAX_KV_SPLITS)
    seq_lens = torch.full((geo.batch,), geo.context, dtype=torch.int64, device=device)
    schedule = 256 if geo.batch < 256 else 1 << (geo.batch - 1).bit_length()
    kernel[(1,)](num_kv_splits, seq_lens, geo.batch, 1, geo.heads, geo.kv_heads,
                 MAX_KV_SPLITS, sms, MAX_NUM_SEQ=schedule)  # fmt: skip
    return num_kv_splits
