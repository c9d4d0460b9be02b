"""FlashInfer's GEMMs: NVFP4 ``mm_fp4`` and FP8 ``bmm_fp8``, each with every backend it has.

FP4 tensor-core GEMMs need Blackwell (sm_100/sm_120); on Hopper ``mm_fp4`` raises
``BackendSupportedError`` and those points are ``unsupported`` rows carrying that text.
Inputs follow ``mm_fp4``'s documented recipe: ``nvfp4_quantize`` with 128x4 scale factors,
B's scale factors shuffled for the trtllm backend; the reference dequantises the very same
FP4 values and scales with FlashInfer's ``e2m1_and_ufp8sf_scale_to_float``.

``decode_attention`` is ``BatchDecodeWithPagedKVCacheWrapper`` (backend ``fa2``) on a decode
step's attention, planned once when the point is prepared and run per timed call.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

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

OPS = {
    "mm_fp4": {
        "dtypes": ["nvfp4"],
        "impls": ["cutlass", "cudnn", "trtllm", "auto"],
        "grouped": False,
    },
    "bmm_fp8": {"dtypes": ["fp8_e4m3"], "impls": ["cublas", "cudnn", "cutlass"], "grouped": False},
    "mm_bf16": {
        "dtypes": ["bf16"],
        "impls": ["cublaslt", "cudnn", "cutlass", "tinygemm"],
        "grouped": False,
    },
    # MoE layout: G experts x m tokens each (M is m).
    "grouped_mm_bf16": {"dtypes": ["bf16"], "impls": ["cudnn"], "grouped": True},
    # TensorRT-LLM's CUTLASS fused MoE (the seed's setup). fp8: per-expert weight scales and a
    # static per-tensor activation scale (the input is quantised inside the timed call).
    "fused_moe": {
        "dtypes": ["bf16", "fp8_e4m3"],
        "impls": ["cutlass"],
        "grouped": True,
        "fused": True,
    },
    # BatchDecodeWithPagedKVCacheWrapper, backend fa2, over a paged KV cache of page size 1
    # (NHD); M is the batch (attention.py).
    "decode_attention": {
        "dtypes": ["bf16"],
        "impls": ["fa2"],
        "grouped": False,
        "attention": True,
    },
}

FP8_MAX = 448.0
FP4_MAX = 6.0
BLOCK = 16  # NVFP4: one e4m3 scale per 16 values
# The decode wrapper's float workspace: SGLang's (SGLANG_FLASHINFER_WORKSPACE_SIZE, 384 MiB).
DECODE_WORKSPACE_BYTES = 384 * 1024 * 1024


def environment(device: str) -> dict:
    return gpu_library_environment("flashinfer", distribution_version("flashinfer-python"), device)


def is_unsupported_error(exc: BaseException) -> bool:
    """FlashInfer's own 'this backend or arch cannot do it' errors."""
    name = type(exc).__name__
    text = str(exc).lower()
    return (
        name in ("BackendSupportedError", "NotImplementedError")
        or "not supported" in text
        or "does not support" in text
        # e.g. "cuDNN is not available. Please install ...": an optional dependency absent
        or "is not available" in text
        # e.g. "cuDNN grouped_mm_bf16 requires backend version >= 92100, found 91900"
        or "requires backend version" in text
    )


def prepare(point: dict, device: str) -> Prepared:
    if device != "cuda":
        raise Unsupported("no CUDA device")
    if point["op"] == "mm_fp4":
        return _mm_fp4(point)
    if point["op"] == "bmm_fp8":
        return _bmm_fp8(point)
    if point["op"] == "mm_bf16":
        return _mm_bf16(point)
    if point["op"] == "grouped_mm_bf16":
        return _grouped_mm_bf16(point)
    if point["op"] == "fused_moe":
        return _fused_moe(point)
    if point["op"] == "decode_attention":
        return _decode_attention(point)
    raise Unsupported(f"flashinfer adapter has no op {point['op']!r}")


def _global_scale(x):
    """NVFP4's two-level recipe: the per-tensor scale that maps amax onto e4m3 x e2m1."""
    return (FP8_MAX * FP4_MAX) / x.float().abs().amax().clamp(min=1e-12)


def fp4_refusal(mm_fp4, impl: str, capability: int) -> str | None:
    """FlashInfer's own refusal of ``mm_fp4`` with ``impl`` on this arch, asked before the
    inputs are quantised (else None): on a fresh H200 the quantisation's first call JIT-built
    fp4_quantization_90 for 35-36 s (2026-12-04) for points the call then refused. The same
    checks and words as the call's ``BackendSupportedError`` (FlashInfer's
    ``backend_requirement``); for ``auto``, whether any backend supports the arch, as its
    automatic choice asks first."""
    check = getattr(mm_fp4, "is_backend_supported", None)
    if check is None:
        return None  # a FlashInfer without the requirement decorator: the call decides
    if impl == "auto":
        if mm_fp4.is_compute_capability_supported(capability):
            return None
        return (f"BackendSupportedError: No suitable auto backends found for mm_fp4 (no "
                f"backend supports capability {capability})")  # fmt: skip
    if check(impl, capability):
        return None
    return (f"BackendSupportedError: mm_fp4 does not support backend '{impl}' with capability "
            f"{capability}")  # fmt: skip


def _mm_fp4(point: dict) -> Prepared:
    import flashinfer
    import torch

    m, n, k, impl = point["M"], point["N"], point["K"], point["impl"]
    if k % BLOCK:
        raise Unsupported(f"K={k} is not a multiple of the NVFP4 block ({BLOCK})")
    major, minor = torch.cuda.get_device_capability()
    refused = fp4_refusal(flashinfer.mm_fp4, impl, major * 10 + minor)
    if refused:
        raise Unsupported(refused)
    layout = flashinfer.SfLayout.layout_128x4

    def make():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(n, k, device="cuda") / k**0.5).to(torch.bfloat16)
        a_gs, w_gs = _global_scale(a), _global_scale(w)
        a_fp4, a_sf = flashinfer.nvfp4_quantize(a, a_gs, sfLayout=layout, do_shuffle=False)
        # trtllm wants B's scale factors shuffled; the reference dequantises unshuffled ones.
        w_fp4, w_sf = flashinfer.nvfp4_quantize(w, w_gs, sfLayout=layout, do_shuffle=False)
        w_fp4_run, w_sf_run = w_fp4, w_sf
        if impl == "trtllm":
            w_fp4_run, w_sf_run = flashinfer.nvfp4_quantize(
                w, w_gs, sfLayout=layout, do_shuffle=True
            )
        alpha = (1.0 / (a_gs * w_gs)).float().reshape(1)
        run_args = (a_fp4, w_fp4_run.T, a_sf, w_sf_run.T, alpha)
        ref_args = (a_fp4, a_sf, a_gs, w_fp4, w_sf, w_gs)
        return run_args, ref_args

    run_args, ref_args = make()

    def call(a, b, sa, sb, alpha):
        return flashinfer.mm_fp4(a, b, sa, sb, alpha, torch.bfloat16, None, backend=impl)

    def dequant(fp4, sf, gs, rows):
        full = flashinfer.e2m1_and_ufp8sf_scale_to_float(
            fp4.view(torch.uint8).cpu(),
            sf.view(torch.uint8).cpu().reshape(-1),
            (1.0 / gs).float().cpu().reshape(1),
            BLOCK,
            1,  # e4m3 scale factors
            True,  # swizzled 128x4 layout
        )
        return full[:rows].to("cuda", torch.float64)

    def reference():
        a_fp4, a_sf, a_gs, w_fp4, w_sf, w_gs = ref_args
        return dequant(a_fp4, a_sf, a_gs, m) @ dequant(w_fp4, w_sf, w_gs, n).T

    variants = input_variants(lambda _seed: make()[0], call)

    # Packed e2m1 (4 bits) plus one e4m3 scale per 16 values, bf16 out.
    return Prepared(
        run=lambda: call(*run_args),
        reference=reference,
        flops=gemm_flops(m, n, k),
        bytes=gemm_bytes(m, n, k, 4 + 8 / BLOCK, 4 + 8 / BLOCK, 16),
        variants=variants,
    )


def _bmm_fp8(point: dict) -> Prepared:
    import flashinfer
    import torch

    m, n, k, impl = point["M"], point["N"], point["K"], point["impl"]

    def quantize(x):
        scale = x.abs().amax().float().clamp(min=1e-12) / FP8_MAX
        return (x / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale

    def make():
        a, sa = quantize(torch.randn(1, m, k, device="cuda"))
        w, sw = quantize(torch.randn(1, n, k, device="cuda") / k**0.5)
        # B is (b, k, n) column-major: the transpose of a row-major (b, n, k) weight.
        return a, w.transpose(1, 2), sa, sw

    args = make()

    def call(a, b, sa, sb):
        return flashinfer.bmm_fp8(a, b, sa, sb, torch.bfloat16, backend=impl)

    def reference():
        a, b, sa, sb = args
        return (a.double() * sa.double()) @ (b.double() * sb.double())

    variants = input_variants(lambda _seed: make(), call)

    return Prepared(
        run=lambda: call(*args),
        reference=reference,
        flops=gemm_flops(m, n, k),
        bytes=gemm_bytes(m, n, k, 8, 8, 16) + 8,
        variants=variants,
    )


def _require(name: str):
    import flashinfer

    fn = getattr(flashinfer, name, None)
    if fn is None:
        raise Unsupported(f"flashinfer {flashinfer.__version__} has no {name}")
    return fn


def _mm_bf16(point: dict) -> Prepared:
    import torch

    mm_bf16 = _require("mm_bf16")
    m, n, k, impl = point["M"], point["N"], point["K"], point["impl"]

    def make():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(n, k, device="cuda") / k**0.5).to(torch.bfloat16)
        return a, w  # b is (k, n) column-major: w.T

    a, w = make()

    def variants(count: int):
        sets = [make() for _ in range(count)]
        return [lambda s=s: mm_bf16(s[0], s[1].T, backend=impl) for s in sets]

    return Prepared(
        run=lambda: mm_bf16(a, w.T, backend=impl),
        reference=lambda: a.double() @ w.double().T,
        flops=gemm_flops(m, n, k),
        bytes=gemm_bytes(m, n, k, 16, 16, 16),
        variants=variants,
    )


def _grouped_mm_bf16(point: dict) -> Prepared:
    import torch

    grouped = _require("grouped_mm_bf16")
    g, m, n, k, impl = point["G"], point["M"], point["N"], point["K"], point["impl"]
    indptr = torch.arange(0, g + 1, device="cuda", dtype=torch.int32) * m

    def make():
        a = torch.randn(g * m, k, device="cuda", dtype=torch.bfloat16)
        w = (torch.randn(g, n, k, device="cuda") / k**0.5).to(torch.bfloat16)
        return a, w

    a, w = make()

    def reference():
        return (a.double().view(g, m, k) @ w.double().transpose(-2, -1)).reshape(g * m, n)

    def variants(count: int):
        sets = [make() for _ in range(count)]
        return [lambda s=s: grouped(s[0], s[1], indptr, backend=impl) for s in sets]

    return Prepared(
        run=lambda: grouped(a, w, indptr, backend=impl),
        reference=reference,
        flops=gemm_flops(m, n, k, g),
        bytes=gemm_bytes(m, n, k, 16, 16, 16, g),
        variants=variants,
    )


def _fused_moe(point: dict) -> Prepared:
    """``flashinfer.fused_moe.cutlass_fused_moe`` on one MoE layer. Its first call on a GPU
    builds the arch's CUTLASS MoE module (JIT) unless a prebuilt one is installed."""
    import torch

    try:
        from flashinfer.fused_moe import cutlass_fused_moe
    except ImportError as exc:
        raise Unsupported(f"flashinfer has no fused_moe.cutlass_fused_moe: {exc}") from None
    geo = moe.require_moe_cuda(point, "cuda")
    major, minor = torch.cuda.get_device_capability()
    missing = moe_module_missing(f"{major * 10 + minor}")
    if missing:
        raise Unsupported(missing)
    fp8 = point["dtype"] == "fp8_e4m3"
    ids, weights = moe.routing(point, "cuda")

    def make(seed: int):
        layer = moe.make_layer(geo, "cuda", seed)
        fc1 = torch.cat([layer.up, layer.gate], dim=1)  # FlashInfer: [up; gate] rows
        if not fp8:
            return layer, (layer.x, fc1, layer.down, None)
        q1, s1 = moe.quantize_experts(fc1)
        q2, s2 = moe.quantize_experts(layer.down)
        # Static activation scales, as a calibrated checkpoint carries them: the input's
        # amax, and the activation's from the bf16 layer.
        a1 = (layer.x.float().abs().amax() / FP8_MAX).clamp(min=1e-12)
        act = _activation_amax(layer, ids)
        a2 = (act / FP8_MAX).clamp(min=1e-12)
        # cutlass_fused_moe's FP8 scales: gemm1 dequant, gemm2 activation quant, gemm2
        # dequant, gemm1 input dequant.
        scales = [(s1 * a1).float(), (1.0 / a2).float(), (s2 * a2).float(), a1.float()]
        return moe.inputs_only(layer), (layer.x, q1, q2, (a1, scales, s1, s2))

    def call(x, fc1, fc2, quant):
        if quant is None:
            out = cutlass_fused_moe(x, ids, weights, fc1, fc2, torch.bfloat16, quant_scales=None)
        else:
            a1, scales = quant[0], quant[1]
            xq = (x.float() / a1).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            out = cutlass_fused_moe(xq, ids, weights, fc1, fc2, torch.bfloat16,
                                    quant_scales=scales)  # fmt: skip
        return out[0] if isinstance(out, list | tuple) else out

    layer, args = make(0)
    tactics = tune_tactics(lambda: call(*args), point["M"])

    def reference():
        if not fp8:
            return moe.layer_reference(layer, ids, weights)
        _, q1, q2, (_, _, s1, s2) = args  # FlashInfer: [up; gate] rows
        return moe.layer_reference(layer, ids, weights, (q1, s1, q2, s2), up_first=True)

    return moe.prepared(point, ids, fp8, make, call, args, reference,
                        extra={"tactics": tactics})  # fmt: skip


#: FlashInfer's CUTLASS fused-MoE module per compute capability, as
#: ``flashinfer.fused_moe.core.get_cutlass_fused_moe_module`` picks it.
MOE_MODULES = {"89": "sm89", "90": "sm90", "100": "sm100", "110": "sm100", "103": "sm103",
               "120": "sm120", "121": "sm120"}  # fmt: skip
PREBUILD = "python3 tools/prebuild_flashinfer_moe.py --jobs $(nproc)"


def moe_module_missing(arch: str) -> str | None:
    """Why the fused-MoE points cannot run here, when FlashInfer's CUTLASS MoE module for
    ``arch`` is neither installed ahead of time (FlashInfer's AOT folder, where
    tools/install_gpu_bundle.sh puts a cross-built one) nor in its JIT cache; else None.
    The first call would build it: about 14 core-hours (tools/prebuild_flashinfer_moe.py),
    far beyond a point's timeout, so each point would wait out timing.point_timeout_s and
    end as a timeout. The point is unsupported at once instead, naming the build."""
    try:
        from flashinfer.jit import fused_moe as jit_moe
    except ImportError:
        return None  # an older layout: the call itself decides
    generate = getattr(jit_moe, f"gen_cutlass_fused_moe_{MOE_MODULES.get(arch, '')}_module", None)
    if generate is None:
        return None  # an arch FlashInfer has no module for: its own error says so
    spec = generate()
    if spec.is_aot or Path(spec.jit_library_path).exists():
        return None
    return (
        f"FlashInfer's CUTLASS fused-MoE module {spec.name} is not built on this machine "
        f"(not in {spec.aot_path.parent.parent} nor in {Path(spec.jit_library_path).parent}); "
        "its first call would build it, about 14 core-hours, past any point's timeout. "
        f"Build it once: {PREBUILD} (or --cross on another host, carried in the GPU bundle), "
        "then rerun: make sweep BACKEND=flashinfer"
    )


def tune_tactics(run, tokens: int) -> str:
    """Run ``run`` once under FlashInfer's autotuner, profiling its CUTLASS MoE tactics at
    exactly ``tokens``; later calls of that shape use the fastest. A server does the same at
    start-up (SGLang's flashinfer_cutlass MoE runner warms up under ``autotune``). Untuned,
    the library's default tactic ran the bf16 layer at 128 tokens in 29.2 ms on the H200
    (2026-12-01), 6.5x SGLang's Triton kernel. Returns "autotuned", or "default" where this
    flashinfer has no autotuner."""
    try:
        from flashinfer.autotuner import autotune
    except ImportError:
        return "default"
    started = time.monotonic()
    with autotune(True, tuning_buckets=(int(tokens),)):
        run()
    # Said in the job's log: tuning is paid before the point's clock starts (not first_call_ms).
    print(f"flashinfer fused_moe: tactics autotuned at {tokens} tokens in "
          f"{time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)  # fmt: skip
    return "autotuned"


def _activation_amax(layer, ids):
    """The largest |SiLU(gate) x up| the layer produces on its own input (fp32)."""
    import torch

    amax = torch.zeros((), device=layer.x.device)
    for e in torch.unique(ids.long()).tolist():
        tokens = (ids == e).any(dim=1)
        h = layer.x[tokens].float()
        act = torch.nn.functional.silu(h @ layer.gate[e].float().t()) * (
            h @ layer.up[e].float().t()
        )
        amax = torch.maximum(amax, act.abs().amax())
    return amax


def use_tensor_cores(heads: int, kv_heads: int) -> bool:
    """SGLang's choice for its FlashInfer decode wrappers (``should_use_tensor_core`` in
    sglang/srt/layers/attention/flashinfer_backend.py, bf16/fp16 KV): the tensor-core
    (prefill-style) fa2 kernel from 4 query heads per KV head, the CUDA-core decode kernel
    below. The served model's 48 / 8 = 6 takes the tensor cores."""
    return heads // kv_heads >= 4


def _decode_attention(point: dict, device: str = "cuda") -> Prepared:
    """``flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", backend="fa2",
    use_tensor_cores=...)`` as SGLang's FlashInfer attention backend builds it; ``plan`` once
    here (setup: it copies the page table to the GPU and picks the KV split on the host),
    ``run(q, (k_cache, v_cache), out=...)`` timed.

    Page size 1: SGLang's default (``--page-size`` 1 unless set; FlashInfer's page table is
    then its token table), and the same pool layout the Triton op reads, so both kernels read
    the same bytes. The caches are ``[slots, 1, kv_heads, D]`` (NHD), laid out as
    attention.pool_slots says; every request's last page is full (length 1)."""
    import torch

    fn = _require("BatchDecodeWithPagedKVCacheWrapper")
    geo = attention.geometry(point)
    dtype = torch.bfloat16
    tensor_cores = use_tensor_cores(geo.heads, geo.kv_heads)
    workspace = torch.zeros(DECODE_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    wrapper = fn(workspace, "NHD", use_tensor_cores=tensor_cores, backend=point["impl"])
    indptr = (torch.arange(geo.batch + 1, dtype=torch.int32) * geo.context).to(device)
    slots = attention.pool_slots(geo)
    indices = slots.to(device=device, dtype=torch.int32)
    last_page_len = torch.ones(geo.batch, dtype=torch.int32, device=device)
    wrapper.plan(indptr, indices, last_page_len, geo.heads, geo.kv_heads, geo.head_dim, 1,
                 pos_encoding_mode="NONE", q_data_type=dtype, kv_data_type=dtype,
                 sm_scale=geo.sm_scale)  # fmt: skip

    def make(seed: int):
        q, k, v = attention.make_inputs(geo, device, dtype, seed)
        pages = (geo.tokens, 1, geo.kv_heads, geo.head_dim)
        k_pool, v_pool = (attention.paged_pool(geo, c, slots).view(pages) for c in (k, v))
        return q, (k_pool, v_pool), torch.empty_like(q), (k, v)

    def call(q, kv_cache, out, _originals):
        return wrapper.run(q, kv_cache, out=out)

    return attention.paged_prepared(geo, make, call, {"use_tensor_cores": tensor_cores})
