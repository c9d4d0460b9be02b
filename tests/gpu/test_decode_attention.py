"""On a GPU: each decode_attention implementation at B = 16 over the served model's attention
(48 query and 8 KV heads of 128, 640 tokens), against the fp64 reference, captured in a CUDA
graph as the sweep's graph and cold modes capture it, and through the sweep itself.

python3 -m pytest tests/gpu/test_decode_attention.py -q -s

An implementation whose library is not installed is skipped; one whose library refuses this
GPU (an ``unsupported`` point) is skipped with the library's text.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import ROOT  # noqa: E402
from studylib.core.config import load_config  # noqa: E402
from studylib.instruments.backends import adapter, attention  # noqa: E402
from studylib.instruments.backends.backend_interface import Unsupported  # noqa: E402
from studylib.instruments.worker import compare  # noqa: E402
from studylib.stages.sweep.sweep_plan import expand_points, sweep_plan  # noqa: E402
from studylib.stages.sweep.sweep_run import run_sweep  # noqa: E402

BATCH = 16
GEOMETRY = {"heads": 48, "kv_heads": 8, "head_dim": 128, "context": 640}
# backend, impl, the package it needs
IMPLS = [("torch", "sdpa", None), ("sgl_kernel", "triton", "sglang"),
         ("flashinfer", "fa2", "flashinfer")]  # fmt: skip


def point(backend: str, impl: str) -> dict:
    return {"backend": backend, "impl": impl, "op": "decode_attention", "dtype": "bf16",
            "shape": "attention", "M": BATCH, "N": 48 * 128, "K": 640, "G": None,
            **GEOMETRY}  # fmt: skip


def prepare_or_skip(backend: str, impl: str, package: str | None):
    if package and importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed")
    module = adapter(backend)
    try:
        prepared = module.prepare(point(backend, impl), "cuda")
        out = prepared.run()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the library may refuse this GPU
        classify = getattr(module, "is_unsupported_error", lambda e: False)
        if isinstance(exc, Unsupported) or classify(exc):
            pytest.skip(f"{backend} {impl}: {type(exc).__name__}: {exc}")
        raise
    return prepared, out


@pytest.mark.parametrize("backend, impl, package", IMPLS)
def test_decode_attention_matches_the_reference(backend, impl, package):
    prepared, out = prepare_or_skip(backend, impl, package)
    print(f"{backend} {impl}: extra {prepared.extra}")
    expected = (BATCH, 48, 1, 128) if backend == "torch" else (BATCH, 48, 128)
    assert tuple(out.shape) == expected and out.dtype == torch.bfloat16
    metrics = compare(out, prepared.reference())
    assert not metrics["has_nan"] and not metrics["all_zero"]
    assert metrics["rel_err"] < 0.02 and metrics["cos_sim"] > 0.999, metrics
    geo = attention.geometry(point(backend, impl))
    assert prepared.flops == 4 * BATCH * 48 * 640 * 128
    assert prepared.bytes == attention.bytes_moved(geo, 2)
    if backend == "sgl_kernel":
        assert 1 <= prepared.extra["num_kv_splits"] <= 8
    # Cold mode's input sets: each its own q and cache (not the prepared set's answer).
    for run in prepared.variants(2):
        other = compare(run(), prepared.reference())
        assert not other["has_nan"] and other["cos_sim"] < 0.5


@pytest.mark.parametrize("backend, impl, package", IMPLS)
def test_decode_attention_replays_in_a_cuda_graph(backend, impl, package):
    """The sweep's graph and cold modes capture ``run``: the replayed call must give the
    eager call's answer (no host work or re-planning inside it)."""
    prepared, eager = prepare_or_skip(backend, impl, package)
    eager = eager.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        prepared.run()  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = prepared.run()
    graph.replay()
    torch.cuda.synchronize()
    assert compare(captured, eager.double())["rel_err"] < 1e-2


def test_decode_attention_rows_through_the_sweep(tmp_path):
    """Every backend's decode attention at B = 16 as the sweep measures it: eager, graph and
    cold times, checked against the reference (unsupported only with a library's text)."""
    config = load_config(ROOT / "config" / "config.yaml")
    config["device"] = "cuda"
    config["timing"].update(max_time_s={"cuda": 0.2, "cpu": 0.1}, min_time_s=0.01)
    frames = []
    for backend in ("torch", "sgl_kernel", "flashinfer"):
        plan = sweep_plan(config, backend)
        plan["cases"] = [c for c in plan["cases"] if c["op"] == "decode_attention"]
        for case in plan["cases"]:
            case["m"] = {"cuda": [BATCH], "cpu": [1]}
        assert [p["M"] for p in expand_points(plan, "cuda")] == [BATCH]
        with open(tmp_path / f"{backend}.log", "w") as log:
            frames.append(run_sweep(plan, tmp_path / f"{backend}.parquet", log_stream=log))
    for frame in frames:
        row = frame.iloc[0]
        print(row[["backend", "impl", "status", "error", "eager_us", "graph_us", "cold_us",
                   "cold_sets", "rel_err", "gbps"]].to_dict())  # fmt: skip
        assert row["status"] in ("ok", "unsupported"), row["error"]
        if row["status"] == "unsupported":
            assert row["error"] and row["backend"] != "torch"
            continue
        assert row["graph_us"] > 0 and row["cold_us"] > 0 and row["cold_sets"] >= 2
        assert (row["heads"], row["context"], row["N"], row["K"]) == (48, 640, 6144, 640)
