"""What a server start compiled, from the JIT caches' files (start_builds): each cache's new
folders as the libraries write them, their seconds from the files' times, and nothing that
was there before."""

import os
from pathlib import Path

import pytest
from studylib.instruments.serving.start_builds import (
    builds_since,
    cache_roots,
    job_builds,
    less_beside,
    said,
    snapshot,
    summary,
)


def put(root: Path, relative: str, mtime: float) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    os.utime(path, (mtime, mtime))


@pytest.fixture
def caches(tmp_path):
    roots = cache_roots({"HOME": str(tmp_path / "home")})
    # Before the start: one Triton kernel and one SGLang module already built.
    put(roots["triton"], "OLDKEY/old_kernel.source", 50.0)
    put(roots["triton"], "OLDKEY/old_kernel.json", 51.0)
    put(roots["sglang_jit"], "sgl_kernel_jit_activation_bf16__arch_9.0a/m.so", 60.0)
    return roots


def start(roots: dict) -> None:
    """What a start writes, as Triton, tvm-ffi and FlashInfer lay it out."""
    triton = roots["triton"]
    for ext, t in [("source", 100.0), ("ttir", 100.5), ("ttgir", 101.0), ("llir", 103.0),
                   ("ptx", 105.0), ("cubin", 110.0)]:  # fmt: skip
        put(triton, f"KEY1/fused_moe_kernel.{ext}", t)
    put(triton, "KEY1/fused_moe_kernel.json", 112.0)
    put(triton, "KEY1/__grp__fused_moe_kernel.json", 112.0)
    put(triton, "KEY2/__triton_launcher.so", 113.0)  # a launcher: no stage files to time
    put(triton, "KEY3/_fwd_kernel.source", 120.0)
    put(triton, "KEY3/_fwd_kernel.json", 123.5)
    put(triton, "KEY4/tmp.pid_7_abc/_fwd_kernel.ptx", 121.0)  # a write in passing
    module = "sgl_kernel_jit_rmsnorm_6144_true_bf16__arch_9.0a__tvmffi_0.1.15"
    put(roots["sglang_jit"], f"{module}/build.ninja", 200.0)
    put(roots["sglang_jit"], f"{module}/cuda.cuda.o", 230.0)
    put(roots["sglang_jit"], f"{module}/{module}.so", 235.0)
    put(roots["sglang_jit"], "sgl_kernel_jit_kvcache_2048/build.ninja", 240.0)  # failed: no .so
    put(roots["flashinfer"], "0.7.2/90a/cached_ops/gemm/build.ninja", 300.0)
    put(roots["flashinfer"], "0.7.2/90a/cached_ops/gemm/gemm.so", 330.5)
    # Neither a build script nor a module: not a build (every H200 start wrote FlashInfer's tmp).
    put(roots["flashinfer"], "0.7.2/90a/tmp/lock", 301.0)


def test_a_start_s_new_kernels_and_modules_with_their_build_seconds(caches):
    before = snapshot(caches)
    start(caches)
    rows = {(r["cache"], r["name"]): r for r in builds_since(caches, before)}
    assert rows[("triton", "fused_moe_kernel")] == {"cache": "triton", "kind": "kernel",
                                                    "name": "fused_moe_kernel",
                                                    "seconds": 12.0,
                                                    "landed_at": 112.0}  # fmt: skip
    assert rows[("triton", "_fwd_kernel")]["seconds"] == 3.5
    assert rows[("triton", "__triton_launcher.so")]["kind"] == "helper"
    assert rows[("triton", "__triton_launcher.so")]["seconds"] is None
    module = "sgl_kernel_jit_rmsnorm_6144_true_bf16__arch_9.0a__tvmffi_0.1.15"
    assert rows[("sglang_jit", module)]["seconds"] == 35.0
    assert rows[("sglang_jit", "sgl_kernel_jit_kvcache_2048")]["seconds"] is None
    assert rows[("flashinfer", "gemm")]["seconds"] == 30.5
    assert rows[("flashinfer", "tmp")]["kind"] == "helper"
    assert rows[("flashinfer", "tmp")]["seconds"] is None
    # Nothing that was there before the start, nothing in passing.
    assert not {name for _, name in rows} & {"old_kernel", "KEY4", "tmp.pid_7_abc"}
    assert len(rows) == 7

    record = summary(list(rows.values()))
    assert record["seconds"] == pytest.approx(12 + 3.5 + 35 + 30.5)
    assert record["caches"]["triton"]["built"] == {"kernel": 2, "helper": 1}
    assert record["caches"]["triton"]["names"] == {
        "_fwd_kernel": {"count": 1, "seconds": 3.5, "landed_at": 123.5},
        "fused_moe_kernel": {"count": 1, "seconds": 12.0, "landed_at": 112.0}}  # fmt: skip
    assert record["caches"]["sglang_jit"]["names"][module] == {"count": 1, "seconds": 35.0,
                                                               "landed_at": 235.0}  # fmt: skip
    assert said(record) == ("built 81 s: triton 1 helper, 2 kernels (16 s); "
                            "sglang_jit 2 modules (35 s); "
                            "flashinfer 1 helper, 1 module (30 s)")  # fmt: skip


def test_a_warm_start_built_nothing_and_a_missing_cache_is_no_error(caches, tmp_path):
    before = snapshot(caches)
    assert builds_since(caches, before) == []
    assert said(summary([])) == "nothing built" and said(None) == "nothing built"
    gone = cache_roots({"HOME": str(tmp_path / "nobody")})
    assert builds_since(gone, snapshot(gone)) == []
    # A module rebuilt in place (its .so rewritten) is a build of this start.
    put(caches["sglang_jit"], "sgl_kernel_jit_activation_bf16__arch_9.0a/m.so", 99.0)
    assert [r["name"] for r in builds_since(caches, before)] == [
        "sgl_kernel_jit_activation_bf16__arch_9.0a"
    ]


def test_each_library_s_own_variables_name_its_cache(tmp_path):
    home = str(tmp_path / "h")
    roots = cache_roots({"HOME": home})
    assert roots == {"triton": Path(home, ".triton", "cache"),
                     "sglang_jit": Path(home, ".cache", "tvm-ffi"),
                     "flashinfer": Path(home, ".cache", "flashinfer")}  # fmt: skip
    assert cache_roots({"HOME": home, "TRITON_HOME": "/t"})["triton"] == Path("/t/.triton/cache")
    named = cache_roots({"HOME": home, "TRITON_HOME": "/t", "TRITON_CACHE_DIR": "/c",
                         "TVM_FFI_CACHE_DIR": "/v", "FLASHINFER_WORKSPACE_BASE": "/f"})  # fmt: skip
    assert named == {"triton": Path("/c"), "sglang_jit": Path("/v"),
                     "flashinfer": Path("/f/.cache/flashinfer")}  # fmt: skip


RMSNORM = "sgl_kernel_jit_rmsnorm_6144_true_bf16__arch_9.0a__tvmffi_0.1.15"


def test_a_module_a_jit_job_built_beside_the_start_is_that_job_s(caches):
    # On the H200 (examples/h200-2026-12-06-c1024) the FP8 server_jit job built a module
    # into the shared cache while the bf16 server started: the start's files counted it.
    before = snapshot(caches)
    start(caches)
    record = summary(builds_since(caches, before))
    server_jit = {"flashinfer": [{"module": "gemm", "status": "cached", "seconds": 0.01,
                                  "finished_at": 331.0}],
                  "sglang": [{"module": RMSNORM, "status": "built", "seconds": 36.0,
                              "finished_at": 236.0},
                             {"module": "other", "status": "failed", "seconds": 3.0,
                              "finished_at": 240.0}]}  # fmt: skip
    beside = job_builds("decode/server_jit_fp8", server_jit)
    assert beside == [{"job": "decode/server_jit_fp8", "cache": "sglang_jit", "module": RMSNORM,
                       "seconds": 36.0, "finished_at": 236.0}]  # fmt: skip
    own, taken = less_beside(record, beside)
    assert taken == [{"cache": "sglang_jit", "module": RMSNORM, "seconds": 35.0, "count": 1,
                      "job": "decode/server_jit_fp8"}]  # fmt: skip
    assert own["seconds"] == pytest.approx(12 + 3.5 + 30.5)
    # The failed module (no .so) is still the start's; the other caches are as they were.
    assert own["caches"]["sglang_jit"]["built"] == {"module": 1}
    assert RMSNORM not in own["caches"]["sglang_jit"]["names"]
    assert own["caches"]["triton"] == record["caches"]["triton"]
    assert said(own) == ("built 46 s: triton 1 helper, 2 kernels (16 s); "
                         "sglang_jit 1 module (0 s); "
                         "flashinfer 1 helper, 1 module (30 s)")  # fmt: skip
    # rule flashinfer_jit's record names its modules' list "modules".
    fi = job_builds("sweep/flashinfer_jit", {"modules": [{"module": "gemm", "status": "built",
                                                          "seconds": 31.0,
                                                          "finished_at": 330.0}]})  # fmt: skip
    own, taken = less_beside(record, fi)
    assert [t["module"] for t in taken] == ["gemm"]
    assert own["caches"]["flashinfer"]["built"] == {"helper": 1}  # its tmp, left
    assert own["caches"]["flashinfer"]["seconds"] == 0


def test_a_module_built_at_another_time_stays_the_start_s(caches):
    # The same module in a JIT job's record from before (another box, an earlier run), or
    # from a record that kept no time: the start built it itself.
    before = snapshot(caches)
    start(caches)
    record = summary(builds_since(caches, before))
    earlier = [{"job": "decode/server_jit_bf16", "cache": "sglang_jit", "module": RMSNORM,
                "seconds": 36.0, "finished_at": 150.0}]  # fmt: skip
    untimed = [{**earlier[0], "finished_at": None}]
    other_cache = [{**earlier[0], "cache": "flashinfer", "finished_at": 236.0}]
    for beside in (earlier, untimed, other_cache, []):
        assert less_beside(record, beside) == (record, [])
    assert less_beside(None, earlier) == (None, [])
