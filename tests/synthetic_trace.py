"""A synthetic torch.profiler Chrome trace of SGLang decode steps: a test stand-in.

The kernel names are real (what SGLang 0.5.16 runs for the study's GLM-4.5-geometry MoE with
Triton attention on sm_90, see scripts/studylib/step_components.py), the durations and gaps
made up. Each entry carries the component a test expects for it, written by hand (not taken
from ``classify``), so the expected breakdown does not depend on the code under test.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

T0 = 1_700_000_000_000.0  # µs, the magnitude of Kineto's timestamps
GAP_US = 0.5  # between the kernels of a step
STEP_GAP_US = 20.0  # between steps: the host's scheduling, seen from the GPU

#: Once per decode step, before the layers: (name, µs, expected component).
STEP_HEAD = [
    ("create_flashinfer_kv_indices_triton", 1.0, "other"),
    ("void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::BFloat16, long, "
     "unsigned int, 2, 2, -2>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>)", 1.0,
     "other"),
]  # fmt: skip

#: Once per layer of a decode step.
LAYER = [
    ("void (anonymous namespace)::rmsnorm_cta<__nv_bfloat16, 6144u, false>("
     "(anonymous namespace)::RMSNormParams)", 2.0, "other"),
    ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 6.0, "dense"),
    ("void (anonymous namespace)::fused_rope_kernel<true, __nv_bfloat16, 64u, false>("
     "(anonymous namespace)::FusedRopeParams)", 1.5, "attention"),
    ("void (anonymous namespace)::store_kvcache<256u, 2048u, false>("
     "(anonymous namespace)::StoreKVCacheParams)", 1.0, "attention"),
    ("_fwd_grouped_kernel_stage1", 8.0, "attention"),
    ("_fwd_kernel_stage2", 3.0, "attention"),
    ("nvjet_tst_64x8_64x16_4x1_v_bz_TNN", 5.0, "dense"),
    ("void (anonymous namespace)::fused_add_rmsnorm_reg_kernel<__nv_bfloat16, 8>("
     "__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16 const*, int, float)", 2.0, "other"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, "
     "false, true, false, false, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched"
     "<float const>, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float>, float> >(...)", 4.0, "dense"),  # the router
    ("triton_poi_fused__to_copy_add_sigmoid_0", 1.0, "moe"),
    ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>("
     "at::cuda::detail::TensorInfo<float const, unsigned int>, ...)", 2.0, "moe"),
    ("void moe_align_block_size_small_batch_expert_kernel<int>(int const*, int*, int*, int*, "
     "int, int, unsigned long, unsigned long, int)", 2.5, "moe"),
    ("fused_moe_kernel", 30.0, "moe"),
    ("void (anonymous namespace)::act_and_mul_kernel<__nv_bfloat16, "
     "((anonymous namespace)::ActivationKind)0, true, false>("
     "(anonymous namespace)::ActivationParams)", 1.5, "moe"),
    ("fused_moe_kernel", 20.0, "moe"),
    ("void moe_sum_reduce_kernel<c10::BFloat16, 9>(c10::BFloat16 const*, c10::BFloat16*, long, "
     "long, long, long, long, float)", 1.0, "moe"),
]  # fmt: skip

#: Twice per layer with tensor parallelism (after the output projection and after the MoE).
ALL_REDUCE = (
    "void device::distributed::all_reduce_kernel<__nv_bfloat16, 2u, 1u, true>("
    "device::distributed::AllReduceParams)", 4.0, "communication")  # fmt: skip

#: Once per decode step, after the layers: final norm, lm_head, greedy sampling.
STEP_TAIL = [
    ("void (anonymous namespace)::rmsnorm_cta<__nv_bfloat16, 6144u, false>("
     "(anonymous namespace)::RMSNormParams)", 2.0, "other"),
    ("nvjet_tst_128x8_64x16_4x1_v_bz_TNT", 12.0, "dense"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
     "at::native::ArgMaxOps<float>, unsigned int, long, 4, 4> >(...)", 3.0, "other"),
]  # fmt: skip

#: One layer of a prefill (extend) pass: the Triton extend attention and the experts.
PREFILL_LAYER = [
    ("nvjet_tst_256x128_64x4_2x1_v_bz_TNT", 25.0, "dense"),
    ("_fwd_kernel", 40.0, "attention"),
    ("fused_moe_kernel", 60.0, "moe"),
]


def step_kernels(layers: int, ranks: int = 1) -> list[tuple[str, float, str]]:
    """The kernels of one decode step, in launch order."""
    layer = [*LAYER]
    if ranks > 1:
        layer.insert(7, ALL_REDUCE)
        layer.append(ALL_REDUCE)
    return [*STEP_HEAD, *(k for _ in range(layers) for k in layer), *STEP_TAIL]


def expected_per_step(layers: int, ranks: int = 1) -> dict:
    """What one decode step holds: {component: (kernel µs, kernels)}."""
    out: dict = {}
    for _, us, component in step_kernels(layers, ranks):
        total, count = out.get(component, (0.0, 0))
        out[component] = (total + us, count + 1)
    return out


def events(steps: int, layers: int, ranks: int = 1, prefill_after: int | None = None,
           t0: float = T0, batch: int | None = None) -> list[dict]:  # fmt: skip
    """Chrome trace events of ``steps`` decode steps (a prefill pass after step
    ``prefill_after``), with the runtime, memcpy and annotation events a real trace holds;
    ``batch``: the decode stage-2 kernel's grid (batch, heads, 1), as CUPTI records it."""
    out, t = [], t0
    passes = [step_kernels(layers, ranks)] * steps
    if prefill_after is not None:
        passes.insert(prefill_after, [k for _ in range(layers) for k in PREFILL_LAYER])
    for i, kernels in enumerate(passes):
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1,
                    "tid": 1, "ts": t - 5.0, "dur": 4.0, "args": {"correlation": i}})  # fmt: skip
        out.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)",
                    "pid": 0, "tid": 7, "ts": t - 3.0, "dur": 1.0})  # fmt: skip
        for j, (name, us, _) in enumerate(kernels):
            args = {"device": 0, "stream": 7, "correlation": i, "graph node id": j}
            if batch is not None and name == "_fwd_kernel_stage2":
                args["grid"] = [batch, 48, 1]
            out.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t,
                        "dur": us, "args": args})  # fmt: skip
            t += us + GAP_US
        t += STEP_GAP_US - GAP_US
    out.append({"ph": "X", "cat": "gpu_user_annotation", "name": "decode", "pid": 0, "tid": 7,
                "ts": t0, "dur": t - t0})  # fmt: skip
    return out


def trace(steps: int, layers: int, ranks: int = 1, prefill_after: int | None = None,
          batch: int | None = None) -> dict:  # fmt: skip
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "standin"}],
            "traceEvents": events(steps, layers, ranks, prefill_after, batch=batch),
            "traceName": "standin"}  # fmt: skip


def write_trace(path: str | Path, steps: int, layers: int, ranks: int = 1,
                prefill_after: int | None = None, batch: int | None = None) -> Path:  # fmt: skip
    """Write the trace as SGLang does: gzipped JSON (.gz) or plain."""
    path = Path(path)
    blob = json.dumps(trace(steps, layers, ranks, prefill_after, batch)).encode()
    path.write_bytes(gzip.compress(blob) if path.suffix == ".gz" else blob)
    return path
