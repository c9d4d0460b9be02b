"""Run 5 diagnosis (commit e209bae): per-call time against graph length, the harness's
back-to-back replays and idle-GPU replays vs triton's do_bench_cudagraph, 3 interleaved rounds.
Run from the repo root on a GPU; writes $OUT_DIR/graph_length.csv."""

import csv
import os
import statistics
import sys

sys.path.insert(0, "scripts")
import torch
import triton.testing as tt
from studylib.backends import adapter
from studylib.timing import CudaTimer

POINTS = [
    ("torch", "aten", "matmul", "bf16", 1),
    ("torch", "rowwise", "scaled_mm", "fp8_e4m3", 16),
    ("sgl_kernel", "cutlass", "fp8_scaled_mm", "fp8_e4m3", 1),
    ("flashinfer", "cublas", "bmm_fp8", "fp8_e4m3", 16),
]
rows = []
timer = CudaTimer()
for backend, impl, op, dtype, m in POINTS:
    mod = adapter(backend)
    p = mod.prepare(
        {
            "backend": backend,
            "impl": impl,
            "op": op,
            "dtype": dtype,
            "M": m,
            "N": 6144,
            "K": 2048,
            "G": None,
        },
        "cuda",
    )
    for _ in range(10):
        p.run()
    torch.cuda.synchronize()
    for rnd in range(3):
        for calls in (100, 300, 1000, 3000, 10000):
            g = timer.capture(p.run, calls)
            b2b = statistics.median(timer.replay(g, calls) for _ in range(15))
            iso = statistics.median(timer.replay_isolated(g, calls) for _ in range(15))
            del g
            rows.append(
                dict(
                    backend=backend,
                    op=op,
                    M=m,
                    round=rnd,
                    method="harness_b2b",
                    calls=calls,
                    us=b2b,
                )
            )
            rows.append(
                dict(backend=backend, op=op, M=m, round=rnd, method="isolated", calls=calls, us=iso)
            )
        for rep in (20, 200):
            with torch.cuda.stream(torch.cuda.Stream()):
                us = tt.do_bench_cudagraph(p.run, rep=rep, return_mode="median") * 1e3
            rows.append(
                dict(
                    backend=backend,
                    op=op,
                    M=m,
                    round=rnd,
                    method=f"triton_rep{rep}",
                    calls=None,
                    us=us,
                )
            )
        torch.cuda.synchronize()
    print(backend, op, m, "done", flush=True)
out = os.path.join(os.environ.get("OUT_DIR", "/tmp/out"), "graph_length.csv")
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
print("wrote", out)
