"""The components of a decode step, and which GPU kernel belongs to which: the one home for both.

A decode step's GPU time splits into the same groups as a step model of it:

- ``moe``: the routed (and fused shared) experts, the top-k selection, alignment and combine
  around them (the router's GEMM: ``dense``, see below),
- ``attention``: the attention kernels, rotary embedding and the KV-cache store,
- ``dense``: the dense projections (QKV, output, lm_head) as GEMMs,
- ``communication``: tensor-parallel collectives (NCCL, custom all-reduce),
- ``other``: the rest (norms, residual adds, embedding, sampling, copies, per-step metadata,
  activation quantisation): what a step model lumps as other/host.

:data:`RULES` is an ordered list of (component, pattern); :func:`classify` gives the first rule
whose pattern is found in the kernel's name (``re.search``), else ``other``. The names are
what CUPTI reports through torch.profiler: a Triton kernel is named after its Python
function (``_fwd_kernel_stage2``), a CUDA kernel after its demangled C++ name
(``void (anonymous namespace)::act_and_mul_kernel<__nv_bfloat16, ...>(...)``).

The patterns cover what SGLang 0.5.16 runs on sm_90 for the study's model: GLM-4.5 MoE
geometry (``glm4_moe``: sigmoid router with a correction bias, ``n_group = topk_group = 1``,
one shared expert fused into the routed ones, every layer a MoE layer), the Triton attention
backend, bf16 or block-FP8 weights, TP 1 or 2. Each pattern names the file (under SGLang's
installed ``sglang/`` package, FlashInfer's ``flashinfer/``, or the sgl-kernel sources) where
its kernels come from. Known limits, all by name alone:

- The SiLU-and-mul of the experts (``act_and_mul_kernel``) is the same kernel a dense MLP
  would run; it counts as ``moe`` because this model has no dense MLP (first_k_dense_replace
  = 0 and the shared expert runs inside ``fused_moe_kernel``).
- The router's GEMM is a cuBLAS GEMM like the projections' and counts as ``dense``, where the
  step model (stages/step_model/step_model_build.py) puts the router too. In SGLang it runs in fp32
  (srt/models/glm4_moe.py ``Glm4MoeGate``: ``F.linear`` of fp32-cast weights and
  activations), so it reads 4 bytes per weight, not 2.
- The shared expert runs inside ``fused_moe_kernel`` (SGLang fuses it into the routed experts
  on sm_80+, glm4_moe.py ``determine_num_fused_shared_experts``): ``moe``. Only where the
  fusion is off (expert parallelism on NVIDIA GPUs, ``--disable-shared-experts-fusion``) do
  its GEMMs show as ``dense``.
- ``SGLANG_SIMULATE_UNIFORM_EXPERTS`` (the study's uniform routing) replaces the top-k ids
  with plain ATen elementwise kernels (randint, arange, remainder: srt/layers/moe/topk.py
  select_experts): those count as ``other``.
- Block-FP8 activation quantisation (``per_token_group_quant_8bit``) runs before the experts
  and before the dense GEMMs alike: ``other``.
- Attention metadata built once per step (``create_flashinfer_kv_indices_triton``,
  ``get_num_kv_splits_triton``) is per-step host-side work: ``other``.

:data:`PREFILL_RULES` name kernels that only a prefill (extend) pass runs, so a profiled
window that caught one can be flagged; :data:`DECODE_STEP_KERNEL` is the kernel that runs
exactly once per layer in every decode step (the step count is its count over the layers).
"""

from __future__ import annotations

import functools
import re

COMPONENTS = ("moe", "attention", "dense", "communication", "other")

#: A Triton 2.x kernel name carried its signature (``_fwd_kernel_0d1d2d3de``); 3.x does not.
_TRITON_SUFFIX = r"(_\d[\dcde]*)?"

#: (component, pattern) in order: the first match wins.
RULES: tuple[tuple[str, str], ...] = (
    # --- communication: first, as some fused all-reduces also name MoE or norms ------------
    # NCCL (srt/distributed/device_communicators/pynccl.py and torch.distributed):
    # ncclDevKernel_AllReduce_Sum_bf16_RING_LL, ncclKernel_...
    ("communication", r"(?i)nccl"),
    # sgl-kernel's legacy custom all-reduce (csrc/allreduce/custom_all_reduce.cuh, used by
    # srt/distributed/device_communicators/custom_all_reduce_ops.py): cross_device_reduce_*.
    ("communication", r"cross_device_reduce"),
    # SGLang's default custom all-reduce on CUDA, CustomAllReduceV2 (jit_kernel/csrc/
    # distributed/custom_all_reduce.cuh: all_reduce_kernel); FlashInfer's TensorRT-LLM
    # all-reduce fusion (flashinfer/data/csrc comm: allreduce_fusion_kernel_oneshot_lamport,
    # allreduce_fusion_kernel_twoshot_sync, oneShotAllReduceKernel, rmsNormLamport ...);
    # torch symmetric memory (one_shot_all_reduce_kernel, multimem_all_reduce_kernel).
    ("communication", r"(?i)all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|lamport"),
    # --- moe ------------------------------------------------------------------------------
    # The experts: Triton fused_moe_kernel (kernels/ops/moe/fused_moe_triton_kernels.py; bf16
    # and block-FP8 weights; the shared expert fused in as one more expert).
    ("moe", r"fused_moe_kernel"),
    # Token alignment: moe_align_block_size_kernel, ..._small_batch_expert_kernel,
    # count_and_sort_expert_tokens_kernel (sgl-kernel csrc/moe/moe_align_kernel.cu and
    # jit_kernel/csrc/moe/moe_align_kernel.cu, called by srt/layers/moe/moe_runner/
    # triton_utils/moe_align_block_size.py).
    ("moe", r"moe_align_block_size|count_and_sort_expert_tokens"),
    # Combine over top-k: moe_sum_reduce_kernel* (sgl-kernel csrc/moe/moe_sum_reduce.cu, more
    # than 32 tokens) and the Triton _moe_sum_reduce_kernel (fused_moe_triton_kernels.py).
    ("moe", r"moe_sum_reduce"),
    # SiLU x up between the expert GEMMs: act_and_mul_kernel (jit_kernel/csrc/elementwise/
    # activation.cuh, called by triton_utils/fused_moe.py silu_and_mul; Triton
    # act_and_mul_kernel in fused_moe_triton_kernels.py), silu_and_mul_kernel
    # (kernels/ops/layernorm/elementwise.py). See the module note: no dense MLP here.
    ("moe", r"act_and_mul_kernel|silu_and_mul"),
    # Routing kernels: the unified Triton router _router_triton_kernel (jit_kernel/
    # moe_fused_gate.py), moe_fused_gate_kernel* (jit_kernel/csrc/moe/moe_fused_gate.cuh),
    # topkGatingSigmoid / moeTopK / moeSigmoid (jit_kernel/csrc/moe/moe_topk_sigmoid.cuh),
    # topkGatingSoftmax (sgl-kernel csrc/moe/moe_topk_softmax_kernels.cu), FlashInfer's
    # deepseek_v3_topk_kernel (flashinfer/data/csrc/fused_moe/noAuxTcKernels.cu),
    # _streaming_topk_kernel (moe_runner/triton_utils/gate_topk.py),
    # _sigmoid_gate_topk_renorm_kernel (triton_utils/sigmoid_gate_topk_renorm.py).
    ("moe", r"moe_fused_gate|_router_triton_kernel|topkGating|moeTopK|moeSigmoid"
            r"|deepseek_v3_topk|grouped_topk|_streaming_topk_kernel|_sigmoid_gate_topk"),
    # GLM's router with fused shared experts takes srt/layers/moe/topk.py
    # biased_grouped_topk_impl (torch.compile: Inductor kernels, and ATen's topk kernels
    # gatherTopK / sbtopk / mbtopk / bitonicSortKVInPlace for torch.topk); at 32 tokens or
    # fewer the top-k sum is moe_sum_reduce_torch_compile (triton_utils/fused_moe.py).
    # Inductor names its kernels after the fused ATen ops: triton_per_fused_mul_sum_0.
    ("moe", r"gatherTopK|sbtopk|mbtopk|bitonicSortKVInPlace"),
    ("moe", r"^triton_(poi|per|red)_fused\w*_(sigmoid|topk|sum|gather|scatter|randint"
            r"|masked_fill)"),
    # Padding and shared-expert bookkeeping: _fill_padded_rows_kernel (kernels/ops/moe/
    # fill_padded_rows.py), _fused_append_shared_experts* (fused_moe_triton_kernels.py).
    ("moe", r"_fill_padded_rows_kernel|_fused_append_shared_experts|_mask_topk_ids"),
    # DeepGEMM's grouped (per-expert) GEMMs (srt/layers/moe/moe_runner/deep_gemm.py) carry
    # their GemmType among the template arguments, demangled as (deep_gemm::GemmType)N where
    # Normal is 0 in every DeepGEMM (flashinfer/deep_gemm.py, flashinfer/data/csrc/
    # nv_internal/tensorrt_llm/deep_gemm/scheduler.cuh) and the grouped types follow.
    # NOT VERIFIED on a GPU.
    ("moe", r"MGrouped|m_grouped|KGrouped|GemmType\)[1-9]"),
    # Anything else that names itself MoE (other MoE runners: FlashInfer/TensorRT-LLM CUTLASS
    # MoE, DeepEP, ...).
    ("moe", r"(?i)moe|expert|topk"),
    # --- attention ------------------------------------------------------------------------
    # Triton decode attention (kernels/ops/attention/decode_attention.py, called from
    # srt/layers/attention/triton_backend.py forward_decode): split-KV stage 1
    # (_fwd_grouped_kernel_stage1 for GQA, _fwd_kernel_stage1 for MHA) and the reduce over
    # the splits, _fwd_kernel_stage2.
    ("attention", r"^_fwd_(grouped_)?kernel_stage[12]"),
    # Triton extend/prefill attention: _fwd_kernel, _fwd_kernel_unified and
    # _copy_unified_indices_kernel (kernels/ops/attention/extend_attention.py), _fwd_kernel
    # (kernels/ops/attention/prefill_attention.py).
    ("attention", r"^_fwd_kernel(_unified)?" + _TRITON_SUFFIX + "$"),
    ("attention", r"_copy_unified_indices_kernel"),
    # Rotary embedding: fused_rope_kernel / fused_rope_store_kernel (jit_kernel/csrc/
    # elementwise/rope.cuh, srt/layers/rotary_embedding/base.py forward_cuda),
    # rotary_embedding_kernel (jit_kernel/csrc/elementwise/pos_enc.cuh), FlashInfer's
    # BatchQKApplyRotary* (flashinfer/data/include/flashinfer/pos_enc.cuh).
    ("attention", r"(?i)rotary|rope(?!rt)"),
    # KV-cache store: store_kvcache (jit_kernel/csrc/elementwise/kvcache.cuh via
    # jit_kernel/kvcache.py store_cache, srt/mem_cache/memory_pool.py _set_kv_buffer_impl),
    # masked_set_kv_buffer_kernel (memory_pool.py), reshape_and_cache* (other pools).
    ("attention", r"store_kvcache|store_cache|set_kv_buffer|reshape_and_cache"),
    # Other attention backends, for completeness: FlashInfer (BatchDecodeWithPagedKVCache*,
    # BatchPrefillWith*, SinglePrefill*), FlashAttention (flash_fwd*), TensorRT-LLM fmha.
    ("attention", r"(?i)BatchDecode|BatchPrefill|SinglePrefill|SingleDecode|flash_?attn"
                  r"|flash_fwd|fmha|attention"),
    # --- dense ----------------------------------------------------------------------------
    # Block-FP8 dense GEMMs: Triton _w8a8_block_fp8_matmul* (kernels/ops/quantization/
    # fp8_kernel.py, the fallback of srt/layers/quantization/fp8_utils.py), DeepGEMM's
    # sm90_fp8_gemm_1d2d_impl (fp8_utils.py deepgemm_w8a8_block_fp8_linear_with_fallback,
    # when deep_gemm is installed: kernel names NOT VERIFIED on a GPU).
    ("dense", r"_w8a8_block_fp8_matmul|deep_gemm|fp8_gemm_1d[12]d"),
    # bf16 projections (QKVParallelLinear, RowParallelLinear, lm_head: F.linear, cuBLAS /
    # cuBLASLt): nvjet_* (Hopper cuBLAS), sm90_xmma_gemm_*, cutlass*, gemv*, the split-K
    # reduction splitKreduce_kernel; sgl-kernel CUTLASS fp8_blockwise_scaled_mm.
    ("dense", r"(?i)nvjet|gemm|gemv|cutlass|cublas|splitkreduce|matmul|scaled_mm"),
)  # fmt: skip

#: Kernels only a prefill (extend) pass runs: one of them in a profiled window means a prefill
#: pass fell into it (Triton extend attention, extend_attention.py / prefill_attention.py; a
#: ragged or single prefill of FlashInfer).
PREFILL_RULES: tuple[str, ...] = (
    r"^_fwd_kernel(_unified)?" + _TRITON_SUFFIX + "$",
    r"_copy_unified_indices_kernel",
    r"BatchPrefillWithRaggedKVCache|SinglePrefillWithKVCache",
)

#: Runs exactly once per layer in every decode step: the Triton decode attention's reduce over
#: the KV splits (decode_attention.py _decode_softmax_reducev_fwd, after stage 1, for MHA and
#: GQA alike). Decode steps in a trace = its count / the model's layers.
DECODE_STEP_KERNEL = r"^_fwd_kernel_stage2" + _TRITON_SUFFIX + "$"

_COMPILED = tuple((component, re.compile(pattern)) for component, pattern in RULES)
_PREFILL = tuple(re.compile(pattern) for pattern in PREFILL_RULES)
_DECODE_STEP = re.compile(DECODE_STEP_KERNEL)
assert all(component in COMPONENTS for component, _ in RULES)


@functools.lru_cache(maxsize=4096)
def classify(kernel_name: str) -> str:
    """The step component (one of :data:`COMPONENTS`) of a GPU kernel, by its name."""
    for component, pattern in _COMPILED:
        if pattern.search(kernel_name):
            return component
    return "other"


@functools.lru_cache(maxsize=4096)
def is_prefill_only(kernel_name: str) -> bool:
    """Whether only a prefill (extend) pass runs this kernel."""
    return any(pattern.search(kernel_name) for pattern in _PREFILL)


def is_decode_step_kernel(kernel_name: str) -> bool:
    """Whether this is :data:`DECODE_STEP_KERNEL` (once per layer per decode step)."""
    return bool(_DECODE_STEP.search(kernel_name))
