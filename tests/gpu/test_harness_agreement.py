"""On a GPU: the harness's graph-mode times agree with two independent timers.

1. triton's ``do_bench_cudagraph`` at its default length (``rep=20`` ms): its own graph of
   the same call, its own events, its own median;
2. CUPTI through ``torch.profiler``: the kernel durations of 5 back-to-back replays of the
   harness's graph (after ``WARM_S`` of replays, so the GPU runs at the clock it holds when
   the harness samples), summed per call (``cupti_busy_us``). The span from the first
   kernel's start to the last one's end (``cupti_span_us``) is kept beside it; on the H200
   (2026-12-01) it ran up to 7 % above the durations at kernels of ~5 µs, and above the
   harness's time of the same graph: a gap between kernels that appears only under the
   tracer.

The harness and each timer run in ``ROUNDS`` alternating rounds and their medians are
compared (clocks and power drift between minutes by more than the tolerance at the
power-capped sizes); the triton phase runs before any profiling (see below). Each timer
starts from ``WARM_S`` of replays, and every measurement records the SM clock NVML saw
during it (``*_clock_mhz``) and its clocks-event reasons: at a power-capped size a short
burst after an idle gap may run at a higher clock than sustained sampling (run 7,
2026-12-01: FlashInfer ``bmm_fp8`` M = 4096 read 1.083 against CUPTI after 29 ms of warm
replays, and 1.044 against triton's 20-ms burst; warmed for ``WARM_S``, run 16 read it at
0.979 and every one of the 50 ratios within 0.974-1.039), so each ratio comes with the
clocks it was taken at. The CUPTI rows also keep one replay timed from an idle GPU
(``graph_isolated_us``: launch latency included, as the harness timed before 2026-12-01).

Run on a CUDA machine (skipped elsewhere):
    python3 -m pytest tests/gpu -q -s
Writes the per-point ratios to $OUT/harness_vs_independent.csv (or /tmp) and prints the
worst. Target: every ratio within 5 %.
"""

import csv
import os
import statistics
import time
from functools import partial
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
triton_testing = pytest.importorskip("triton.testing")

from studylib.instruments.backends import adapter  # noqa: E402
from studylib.instruments.worker import Measurer  # noqa: E402

MS = (1, 16, 64, 4096)
SINGLE = [
    ("torch", "aten", "matmul", "bf16"),
    ("torch", "rowwise", "scaled_mm", "fp8_e4m3"),
    ("flashinfer", "cublas", "bmm_fp8", "fp8_e4m3"),
    ("flashinfer", "cutlass", "mm_bf16", "bf16"),
    ("sgl_kernel", "cutlass", "fp8_scaled_mm", "fp8_e4m3"),
]
# (N, K): the expert's down projection (hidden 6144 out, expert 2048 in), as in config.yaml.
POINTS = [(b, i, o, d, m, 6144, 2048, None, None) for b, i, o, d in SINGLE for m in MS] + [
    (b, i, "fused_moe", "bf16", m, 6144, 2048, 256, "balanced")
    for b, i in (("torch", "grouped_mm"), ("sgl_kernel", "triton"), ("flashinfer", "cutlass"))
    for m in (1, 16, 64)
]
PLAN = {
    "timing": {"warmup_iters": 5, "min_samples": 20, "max_samples": 2000, "min_time_s": 0.2,
               "max_time_s": {"cuda": 2.0, "cpu": 1.0}, "rel_noise": 0.002,
               "cold_l2_multiple": 4},
    "check": {},
}  # fmt: skip
RESULTS: list[dict] = []
TOLERANCE = 0.05
# Alternating rounds of the harness and one timer; the medians are compared.
ROUNDS = 3
# Replays before an independent timer starts: as long as the harness's own minimum sampling
# time, so both time the GPU in the power and clock state sustained replays settle in.
WARM_S = PLAN["timing"]["min_time_s"]


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    out = Path(os.environ.get("OUT", "/tmp")) / "harness_vs_independent.csv"
    if RESULTS:
        fields = list(dict.fromkeys(key for row in RESULTS for key in row))
        with open(out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(RESULTS)
        for timer in ("triton", "cupti_busy"):
            rows = [r for r in RESULTS if r["timer"] == timer]
            if rows:
                worst = max(rows, key=lambda r: abs(r["ratio"] - 1))
                print(f"\nworst against {timer}: {worst['ratio']:.3f} at {worst}")


def keep_busy(graph, seconds: float = WARM_S) -> None:
    """Replay ``graph`` back to back for ``seconds`` (a synchronise every 8 replays keeps the
    launch queue short), leaving the GPU in its sustained clock and power state."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        for _ in range(8):
            graph.replay()
        torch.cuda.synchronize()


def clocked(measurer, measure):
    """``measure()`` and the median SM clock (MHz) and clocks-event reasons NVML saw during
    it (None and "" without NVML)."""
    watch = measurer.clock_watch() if measurer.clock_watch else None
    if watch is None:
        return measure(), None, ""
    with watch:
        value = measure()
    seen = watch.result()
    return value, seen["sm_clock_mhz"], seen["throttle"]


def cupti_times(graph, calls: int, replays: int = 5) -> tuple[float, float]:
    """(span, busy) µs per call from CUPTI's kernel records of ``replays`` back-to-back replays
    of ``graph``, after ``WARM_S`` of them: the GPU in the steady state the harness samples
    in, not starting from idle clocks after a synchronise."""
    from torch.profiler import ProfilerActivity, profile

    keep_busy(graph)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA" and e.device_time > 0]
    assert kernels, "CUPTI recorded no kernel of the replays"
    span = max(e.time_range.end for e in kernels) - min(e.time_range.start for e in kernels)
    busy = sum(e.device_time for e in kernels)
    return span / (replays * calls), busy / (replays * calls)


def prepare(backend, impl, op, dtype, m, n, k, g, routing):
    """(point, measurer, prepared) warmed up; skips what the library does not support."""
    module = adapter(backend)
    env = module.environment("cuda")
    if env.get("unsupported"):
        pytest.skip(env["unsupported"])
    point = {"backend": backend, "impl": impl, "op": op, "dtype": dtype,
             "M": m, "N": n, "K": k, "G": g}  # fmt: skip
    if routing:
        point.update(top_k=8, routing=routing)
    measurer = Measurer(backend, "cuda", PLAN)
    try:
        prepared = module.prepare(point, "cuda")
        for _ in range(5):
            prepared.run()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the library says no: nothing to compare
        if measurer.failure(exc)["status"] == "unsupported":
            pytest.skip(str(exc)[:200])
        raise
    return point, measurer, prepared


def record(point: dict, timer: str, rounds: list[dict]) -> dict:
    """The medians over rounds of the harness and of ``timer``, and their ratio."""
    ours = statistics.median(r["graph_us"] for r in rounds)
    theirs = statistics.median(r[f"{timer}_us"] for r in rounds)
    row = {**point, "timer": timer, "rounds": len(rounds), "graph_calls": rounds[0]["graph_calls"],
           "graph_us": ours, f"{timer}_us": theirs, "ratio": ours / theirs,
           **{f"{key}_r{i}": r[key] for i, r in enumerate(rounds) for key in r}}  # fmt: skip
    RESULTS.append(row)
    return row


# Two phases, in this order (pytest runs a module's tests in file order): every triton
# comparison, then every CUPTI one. triton times one replay per sample, its launch included.
# On the H200 (2026-12-01) triton read 3-11 % above the harness at ~5 µs kernels when it ran
# after torch.profiler in the same process, and within 1.5 % in a process never profiled
# (examples/h200-2026-12-01-kernels/timers/): CUPTI, once attached, seems to slow the launch
# that back-to-back replays hide. Not yet confirmed by a run of this order.
@pytest.mark.parametrize("backend, impl, op, dtype, m, n, k, g, routing", POINTS)
def test_graph_time_matches_triton(backend, impl, op, dtype, m, n, k, g, routing):
    point, measurer, prepared = prepare(backend, impl, op, dtype, m, n, k, g, routing)
    rounds = []
    for _ in range(ROUNDS):
        ours, ours_mhz, ours_why = clocked(
            measurer, partial(measurer._graph, prepared.run, "graph")
        )
        warm, _, _ = measurer._graph_of(prepared.run)
        keep_busy(warm)
        del warm
        # triton's own graph of the same call at its default length (rep=20 ms); its median.
        bench = partial(
            triton_testing.do_bench_cudagraph, prepared.run, rep=20, return_mode="median"
        )
        theirs, theirs_mhz, theirs_why = clocked(measurer, bench)
        rounds.append({"graph_us": ours["graph_us"], "graph_calls": ours["graph_calls"],
                       "graph_fixed_us": measurer.graph_fixed_us(),
                       "graph_clock_mhz": ours_mhz, "graph_reasons": ours_why,
                       "triton_us": theirs * 1e3, "triton_clock_mhz": theirs_mhz,
                       "triton_reasons": theirs_why})  # fmt: skip
    row = record(point, "triton", rounds)
    assert abs(row["ratio"] - 1) <= TOLERANCE, row


@pytest.mark.parametrize("backend, impl, op, dtype, m, n, k, g, routing", POINTS)
def test_graph_time_matches_cupti_kernel_durations(backend, impl, op, dtype, m, n, k, g, routing):
    point, measurer, prepared = prepare(backend, impl, op, dtype, m, n, k, g, routing)
    rounds = []
    for _ in range(ROUNDS):
        ours, ours_mhz, ours_why = clocked(
            measurer, partial(measurer._graph, prepared.run, "graph")
        )
        graph, calls, _ = measurer._graph_of(prepared.run)
        (span, busy), cupti_mhz, cupti_why = clocked(measurer, partial(cupti_times, graph, calls))
        # Diagnosis only: one replay from an idle GPU, launch included (the old timing).
        isolated = statistics.median(measurer.timer.replay_isolated(graph, calls) for _ in range(9))
        del graph
        rounds.append({"graph_us": ours["graph_us"], "graph_calls": ours["graph_calls"],
                       "graph_clock_mhz": ours_mhz, "graph_reasons": ours_why,
                       "cupti_busy_us": busy, "cupti_span_us": span,
                       "cupti_clock_mhz": cupti_mhz, "cupti_reasons": cupti_why,
                       "graph_isolated_us": isolated})  # fmt: skip
    row = record(point, "cupti_busy", rounds)
    assert abs(row["ratio"] - 1) <= TOLERANCE, row
