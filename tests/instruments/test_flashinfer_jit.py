"""FlashInfer's JIT modules built ahead of its GPU jobs (rule flashinfer_jit): which modules
the default sweep's first calls would build, and what the build records of each."""

import os

import pytest
from helpers import default_config
from studylib.instruments.backends import flashinfer_jit
from studylib.stages.sweep.sweep_plan import flashinfer_jit_targets


class FakeSpec:
    def __init__(self, name, compiled=False, error=None):
        self.name, self.is_compiled, self.error, self.builds = name, compiled, error, 0

    def build(self, need_lock=False):
        self.builds += 1
        if self.error:
            raise RuntimeError(f"ninja: build stopped\n{self.error}")


def test_the_default_sweeps_modules_are_the_four_its_first_calls_built():
    """On the H200 (2026-12-04) the FlashInfer sweep's first calls built gemm (bmm_fp8 on
    cuBLAS), mm_bf16_cublaslt, tinygemm2 and the fa2 batch-prefill module of its decode
    attention (48 query heads over 8 KV heads: the tensor-core kernel)."""
    config = default_config()
    targets = flashinfer_jit_targets(config)
    assert {(t["op"], t["impl"]) for t in targets} == {
        ("bmm_fp8", "cublas"), ("mm_bf16", "cublaslt"), ("mm_bf16", "tinygemm"),
        ("decode_attention", "fa2")}  # fmt: skip
    attention = next(t for t in targets if t["op"] == "decode_attention")
    assert attention == {"op": "decode_attention", "impl": "fa2", "dtype": "bf16",
                         "head_dim": 128, "tensor_cores": True}  # fmt: skip
    config["backends"]["flashinfer"]["enabled"] = False
    assert flashinfer_jit_targets(config) == []


def test_each_module_is_built_once_and_its_outcome_recorded(monkeypatch):
    for key in ("FLASHINFER_CUDA_ARCH_LIST", "CUDA_VISIBLE_DEVICES", "MAX_JOBS"):
        monkeypatch.setenv(key, "before")  # restored after the test
    specs = {
        "gemm": FakeSpec("gemm"),
        "lt": FakeSpec("mm_bf16_cublaslt", compiled=True),
        "tiny": FakeSpec("tinygemm2", error="nvcc fatal: unsupported gpu architecture"),
    }
    monkeypatch.setattr(flashinfer_jit, "MODULES", {
        ("bmm_fp8", "cublas"): lambda t: specs["gemm"],
        ("mm_bf16", "cublaslt"): lambda t: specs["lt"],
        ("mm_bf16", "tinygemm"): lambda t: specs["tiny"],
        ("decode_attention", "fa2"): lambda t: None,
        ("grouped", "x"): lambda t: specs["gemm"],  # the same module by another op
    })  # fmt: skip
    targets = [{"op": op, "impl": impl, "dtype": "bf16"} for op, impl in
               [("bmm_fp8", "cublas"), ("mm_bf16", "cublaslt"), ("mm_bf16", "tinygemm"),
                ("decode_attention", "fa2"), ("grouped", "x")]]  # fmt: skip
    rows = flashinfer_jit.build(targets, ["9.0", "9.0"], jobs=8)
    assert [(r["module"], r["status"]) for r in rows] == [
        ("gemm", "built"), ("mm_bf16_cublaslt", "cached"), ("tinygemm2", "failed"),
        ("-", "skipped")]  # fmt: skip
    assert specs["gemm"].builds == 1
    assert rows[2]["error"] == "RuntimeError: nvcc fatal: unsupported gpu architecture"
    assert "its first call builds it" in rows[3]["error"]
    # FlashInfer reads the architectures, never the GPU another job measures on.
    assert os.environ["FLASHINFER_CUDA_ARCH_LIST"] == "9.0"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "" and os.environ["MAX_JOBS"] == "8"


def test_without_a_gpu_nothing_is_built(monkeypatch):
    monkeypatch.setattr(
        flashinfer_jit,
        "MODULES",
        {("bmm_fp8", "cublas"): lambda t: pytest.fail("no module is generated without a GPU")},
    )
    rows = flashinfer_jit.build([{"op": "bmm_fp8", "impl": "cublas", "dtype": "fp8_e4m3"}],
                                [], jobs=2)  # fmt: skip
    assert [{k: v for k, v in r.items() if k != "finished_at"} for r in rows] == [
        {"op": "bmm_fp8", "impl": "cublas", "dtype": "fp8_e4m3", "module": "-",
         "status": "skipped", "seconds": 0.0, "error": "no GPU that NVML sees"}]  # fmt: skip
    # When it ended, so that a server start beside it knows its modules (start_builds).
    assert rows[0]["finished_at"] > 1.7e9
    assert flashinfer_jit.arch_list(["9.0", "10.0", None, "9.0"]) == "10.0 9.0"
