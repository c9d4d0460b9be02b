"""Kernel names -> decode-step components (scripts/studylib/step_components.py)."""

import pytest
from studylib.instruments.step_components import (
    COMPONENTS,
    RULES,
    classify,
    is_decode_step_kernel,
    is_prefill_only,
)
from synthetic_trace import LAYER, PREFILL_LAYER, STEP_HEAD, STEP_TAIL

# Names as CUPTI reports them (Triton: the Python function's name; CUDA: the demangled C++
# name), from the SGLang 0.5.16, sgl-kernel and FlashInfer sources the rules cite.
NAMES = [
    # moe
    ("fused_moe_kernel", "moe"),
    ("fused_moe_kernel_gptq_awq", "moe"),
    ("void moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, "
     "unsigned long, int*, bool)", "moe"),
    ("void moe_align_block_size_small_batch_expert_kernel<int>(int const*, int*, int*, int*, "
     "int, int, unsigned long, unsigned long, int)", "moe"),
    ("void count_and_sort_expert_tokens_kernel<int>(int const*, int*, int*, unsigned long, "
     "int)", "moe"),
    ("void moe_sum_reduce_kernel<c10::BFloat16, 9>(c10::BFloat16 const*, c10::BFloat16*, "
     "long, long, long, long, long, float)", "moe"),
    ("void moe_sum_reduce_warp_per_token_vec_kernel<8>(c10::BFloat16 const*, "
     "c10::BFloat16*, long, long, long, long, long, long, float)", "moe"),
    ("_moe_sum_reduce_kernel", "moe"),
    ("void (anonymous namespace)::act_and_mul_kernel<__nv_bfloat16, "
     "((anonymous namespace)::ActivationKind)0, true, false>("
     "(anonymous namespace)::ActivationParams)", "moe"),
    ("act_and_mul_kernel", "moe"),
    ("silu_and_mul_kernel", "moe"),
    ("_router_triton_kernel", "moe"),
    ("void (anonymous namespace)::moe_fused_gate_kernel_small_token<float>("
     "(anonymous namespace)::MoEFusedGateParams)", "moe"),
    ("void deepseek_v3_topk_kernel<float, float, int, float, true>(float*, float*, int*, "
     "float*, long, long, long, long, long, float, int)", "moe"),
    ("void topkGatingSigmoid<float, 8, 256, 4, 32, int, float>(float const*, bool const*, "
     "float*, int, int*, int, int, int, bool, float const*)", "moe"),
    ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>("
     "at::cuda::detail::TensorInfo<float const, unsigned int>, unsigned int, unsigned int, "
     "bool, unsigned int, unsigned int, at::cuda::detail::TensorInfo<float, unsigned int>, "
     "unsigned int, at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int, float*)",
     "moe"),
    ("triton_poi_fused__to_copy_add_sigmoid_0", "moe"),
    ("triton_per_fused_mul_sum_0", "moe"),
    ("_fill_padded_rows_kernel", "moe"),
    ("_fused_append_shared_experts_kernel", "moe"),
    ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<0u, 512u, 7168u, 64u, 128u, 128u, 1u, 5u, "
     "128u, 128u, 1u, false, (deep_gemm::GemmType)1>(...)", "moe"),
    ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<0u, 4096u, 7168u, 128u, 64u, 128u, 8u, 5u, "
     "128u, 128u, 1u, false, deep_gemm::GemmType::MGroupedContiguous>(...)", "moe"),
    # attention
    ("_fwd_grouped_kernel_stage1", "attention"),
    ("_fwd_kernel_stage1", "attention"),
    ("_fwd_kernel_stage2", "attention"),
    ("_fwd_kernel", "attention"),
    ("_fwd_kernel_unified", "attention"),
    ("void (anonymous namespace)::fused_rope_kernel<true, __nv_bfloat16, 64u, false>("
     "(anonymous namespace)::FusedRopeParams)", "attention"),
    ("void (anonymous namespace)::fused_rope_store_kernel<true, __nv_bfloat16, 64u, false>("
     "(anonymous namespace)::FusedRopeStoreParams)", "attention"),
    ("void rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, "
     "c10::BFloat16*, c10::BFloat16 const*, int, long, long, int, int, int)", "attention"),
    ("void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<true, 128u, 8u, 16u, "
     "__nv_bfloat16, long>(...)", "attention"),
    ("void (anonymous namespace)::store_kvcache<256u, 2048u, false>("
     "(anonymous namespace)::StoreKVCacheParams)", "attention"),
    ("masked_set_kv_buffer_kernel", "attention"),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<...>(...)", "attention"),
    # dense
    ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<0u, 6144u, 2048u, 64u, 128u, 128u, 1u, 5u, "
     "128u, 128u, 1u, false, (deep_gemm::GemmType)0>(...)", "dense"),
    ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "dense"),
    ("nvjet_hsh_128x64_64x4_2x1_v_bz_coopA_NTN", "dense"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1"
     "_execute_segment_k_off_kernel__5x_cublas", "dense"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn"
     "_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)",
     "dense"),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<...> >(...)", "dense"),
    ("void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, "
     "128, 16, 4, 4, false, false, true, false, false, false, cublasGemvParamsEx<...> >(...)",
     "dense"),
    ("void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, "
     "false, false>(cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, "
     "__nv_bfloat16*, float const*, float const*, __nv_bfloat16 const*, float const*, "
     "__nv_bfloat16*, void*, long, float*, int*)", "dense"),
    ("_w8a8_block_fp8_matmul", "dense"),
    # the router's fp32 GEMM (Glm4MoeGate), dense as in the step model
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, "
     "false, true, false, false, false, cublasGemvParamsEx<int, "
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>,"
     " cublasGemvTensorStridedBatched<float>, float> >(...)", "dense"),
    ("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x2x1_ffma"
     "_aligna4_alignc4_execute_kernel_trt", "dense"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_tn_align1>(...)", "dense"),
    ("_w8a8_block_fp8_matmul_unrolledx4", "dense"),
    # communication
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "communication"),
    ("void cross_device_reduce_1stage<__nv_bfloat16, 2>(RankData*, RankSignals, Signal*, "
     "__nv_bfloat16*, int, int)", "communication"),
    ("void device::distributed::all_reduce_kernel<__nv_bfloat16, 2u, 1u, true>("
     "device::distributed::AllReduceParams)", "communication"),
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<"
     "__nv_bfloat16, 2, true>(...)", "communication"),
    # other
    ("void (anonymous namespace)::rmsnorm_cta<__nv_bfloat16, 6144u, false>("
     "(anonymous namespace)::RMSNormParams)", "other"),
    ("void (anonymous namespace)::fused_add_rmsnorm_reg_kernel<__nv_bfloat16, 8>("
     "__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16 const*, int, float)", "other"),
    ("void (anonymous namespace)::per_token_group_quant_8bit_kernel<__nv_bfloat16, "
     "__nv_fp8_e4m3, false>((anonymous namespace)::PerTokenGroupQuantParams)", "other"),
    ("_per_token_group_quant_8bit", "other"),
    ("create_flashinfer_kv_indices_triton", "other"),
    ("get_num_kv_splits_triton", "other"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
     "at::native::ArgMaxOps<float>, unsigned int, long, 4, 4> >(...)", "other"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, "
     "std::array<char*, 1ul> >(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)",
     "other"),
    ("void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::BFloat16, long, "
     "unsigned int, 2, 2, -2>(...)", "other"),
    ("triton_poi_fused_add_bitwise_and_ge_lt_mul_sub_0", "other"),
    ("Memset (Device)", "other"),
]  # fmt: skip


@pytest.mark.parametrize("name, component", NAMES, ids=[n[:60] for n, _ in NAMES])
def test_real_kernel_names_fall_into_their_component(name, component):
    assert classify(name) == component


def test_every_rule_names_a_component_and_compiles():
    import re

    assert COMPONENTS == ("moe", "attention", "dense", "communication", "other")
    for component, pattern in RULES:
        assert component in COMPONENTS
        re.compile(pattern)
    assert {component for _, component in NAMES} == set(COMPONENTS)


def test_the_synthetic_traces_names_agree_with_their_expected_components():
    for name, _, component in [*STEP_HEAD, *LAYER, *STEP_TAIL, *PREFILL_LAYER]:
        assert classify(name) == component, name


def test_prefill_only_kernels_are_the_extend_attention():
    assert is_prefill_only("_fwd_kernel")
    assert is_prefill_only("_fwd_kernel_unified") and is_prefill_only("_fwd_kernel_0d1d2d3de")
    assert is_prefill_only("_copy_unified_indices_kernel")
    assert is_prefill_only("void flashinfer::BatchPrefillWithRaggedKVCacheKernel<...>(...)")
    for decode in ("_fwd_kernel_stage1", "_fwd_kernel_stage2", "_fwd_grouped_kernel_stage1",
                   "fused_moe_kernel", "nvjet_tst_64x8_64x16_4x1_v_bz_TNT"):  # fmt: skip
        assert not is_prefill_only(decode)


def test_the_decode_step_kernel_is_stage_2_alone():
    assert is_decode_step_kernel("_fwd_kernel_stage2")
    assert is_decode_step_kernel("_fwd_kernel_stage2_0d1d2d")  # Triton 2.x's signature suffix
    for other in ("_fwd_kernel_stage1", "_fwd_grouped_kernel_stage1", "_fwd_kernel",
                  "_fwd_kernel_stage2_extra"):  # fmt: skip
        assert not is_decode_step_kernel(other)
