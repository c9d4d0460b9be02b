"""On a GPU: the harness's graph-mode times agree with triton's do_bench_cudagraph.

Run on a CUDA machine (skipped elsewhere):
    python3 -m pytest tests/gpu -q -s
Writes the per-point ratios to $OUT/harness_vs_triton.csv (or /tmp) and prints the worst.
Target: every ratio within 10 %.
"""

import csv
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
triton_testing = pytest.importorskip("triton.testing")

from studylib.backends import adapter  # noqa: E402
from studylib.timing import CudaTimer, StopRule, sample_until, summarize  # noqa: E402

POINTS = [
    ("torch", "aten", "matmul", "bf16", m, 6144, 2048, None)
    for m in (1, 16, 64, 256, 1024, 4096, 16384)
] + [
    ("torch", "rowwise", "scaled_mm", "fp8_e4m3", m, 2048, 6144, None) for m in (16, 256, 4096)
] + [
    ("torch", "aten", "grouped_mm", "bf16", m, 6144, 2048, 32) for m in (1, 16, 256)
] + [
    ("sgl_kernel", "cutlass", "fp8_scaled_mm", "fp8_e4m3", m, 6144, 2048, None)
    for m in (16, 256, 4096)
] + [
    ("flashinfer", "cublas", "bmm_fp8", "fp8_e4m3", m, 6144, 2048, None) for m in (16, 256, 4096)
]  # fmt: skip
RULE = StopRule(min_samples=20, max_samples=2000, min_time_s=0.2, max_time_s=2.0, rel_noise=0.002)
RESULTS: list[dict] = []


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    out = Path(os.environ.get("OUT", "/tmp")) / "harness_vs_triton.csv"
    if RESULTS:
        with open(out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(RESULTS[0]))
            writer.writeheader()
            writer.writerows(RESULTS)
        worst = max(RESULTS, key=lambda r: abs(r["ratio"] - 1))
        print(f"\nworst harness/triton ratio: {worst['ratio']:.3f} at {worst}")


@pytest.mark.parametrize("backend, impl, op, dtype, m, n, k, g", POINTS)
def test_graph_time_matches_triton(backend, impl, op, dtype, m, n, k, g):
    module = adapter(backend)
    env = module.environment("cuda")
    if env.get("unsupported"):
        pytest.skip(env["unsupported"])
    point = {"backend": backend, "impl": impl, "op": op, "dtype": dtype,
             "M": m, "N": n, "K": k, "G": g}  # fmt: skip
    prepared = module.prepare(point, "cuda")
    for _ in range(5):
        prepared.run()
    torch.cuda.synchronize()
    timer = CudaTimer()
    calls = 100
    graph = timer.capture(prepared.run, calls)
    ours = summarize(sample_until(lambda: timer.replay(graph, calls), RULE), "graph")["graph_us"]
    # do_bench_cudagraph: the same calls replayed from a graph, its own timing and median.
    theirs = triton_testing.do_bench_cudagraph(prepared.run, rep=200, return_mode="median") * 1e3
    ratio = ours / theirs
    RESULTS.append({**point, "harness_us": ours, "triton_us": theirs, "ratio": ratio})
    assert 0.9 <= ratio <= 1.1, f"harness {ours:.2f} us vs triton {theirs:.2f} us"
