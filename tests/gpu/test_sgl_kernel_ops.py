"""On a GPU with SGLang installed: the sgl_kernel adapter's blockwise FP8 (CUTLASS and
SGLang's Triton block-FP8 linear) and NVFP4 points.

python3 -m pytest tests/gpu/test_sgl_kernel_ops.py -q -s

SGLang 0.5.16 keeps ``fp8_blockwise_scaled_mm`` in ``sglang.jit_kernel.fp8_blockwise_gemm``, a
JIT kernel built for SM120 only, and has no ``scaled_fp4_quant`` / ``cutlass_scaled_fp4_mm``
(sglang-kernel 0.4.5 has none of the three). Where the library refuses the arch, the point
must be an ``unsupported`` row with the library's (or the lookup's) text, never an error.
"""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("sglang")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import tiny_config  # noqa: E402
from studylib.instruments.backends import sgl_kernel_backend as sgl  # noqa: E402
from studylib.instruments.backends.backend_interface import Unsupported  # noqa: E402
from studylib.instruments.worker import compare  # noqa: E402
from studylib.stages.sweep.sweep_plan import sweep_plan  # noqa: E402
from studylib.stages.sweep.sweep_run import run_sweep  # noqa: E402

CAPABILITY = torch.cuda.get_device_capability()


@pytest.mark.parametrize("m", [16, 4096])
def test_fp8_blockwise_matches_reference(m):
    point = {"op": "fp8_blockwise_scaled_mm", "impl": "cutlass", "dtype": "fp8_e4m3",
             "M": m, "N": 2048, "K": 6144}  # fmt: skip
    try:
        prepared = sgl.prepare(point, "cuda")
        out = prepared.run()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the library may refuse this arch
        if isinstance(exc, Unsupported) or sgl.is_unsupported_error(exc):
            pytest.skip(f"sm_{CAPABILITY[0]}{CAPABILITY[1]}: {type(exc).__name__}: {exc}")
        raise
    print(f"M={m}: provider {prepared.extra['provider']}")
    assert out.shape == (m, 2048) and out.dtype == torch.bfloat16
    metrics = compare(out, prepared.reference())
    assert not metrics["has_nan"] and not metrics["all_zero"]
    assert metrics["rel_err"] < 0.02 and metrics["cos_sim"] > 0.999, metrics


def test_fp8_blockwise_triton_matches_reference():
    """SGLang's block-FP8 linear as its server runs it on sm_90 (the qkv projection at
    M = 16): per_token_group_quant_fp8 then the Triton w8a8_block_fp8_matmul_triton, one
    call, against the fp64 product of the dequantised operands."""
    m, n, k = 16, 8192, 6144
    point = {"op": "fp8_blockwise_scaled_mm", "impl": "triton", "dtype": "fp8_e4m3",
             "M": m, "N": n, "K": k}  # fmt: skip
    prepared = sgl.prepare(point, "cuda")
    out = prepared.run()
    torch.cuda.synchronize()
    print(f"triton M={m}: provider {prepared.extra['provider']}")
    assert set(prepared.extra["provider"]) == {"per_token_group_quant_fp8",
                                               "w8a8_block_fp8_matmul_triton"}  # fmt: skip
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    metrics = compare(out, prepared.reference())
    assert not metrics["has_nan"] and not metrics["all_zero"]
    assert metrics["rel_err"] < 0.02 and metrics["cos_sim"] > 0.999, metrics
    # The cold mode's input sets run too.
    for run in prepared.variants(2):
        assert run().shape == (m, n)
    torch.cuda.synchronize()


def test_refused_points_are_unsupported_rows(tmp_path):
    """Through the sweep: FP4 below sm_100, and SGLang's SM120-only blockwise JIT elsewhere."""
    config = tiny_config()
    config["device"] = "cuda"
    ops = {"cutlass_scaled_fp4_mm": "nvfp4", "fp8_blockwise_scaled_mm": "fp8_e4m3"}
    config["backends"]["sgl_kernel"]["cases"] = [
        {"op": op, "dtypes": [dtype], "shapes": ["down"], "m": {"cuda": [16], "cpu": [1]}}
        for op, dtype in ops.items()
    ]
    with open(tmp_path / "log", "w") as log:
        frame = run_sweep(sweep_plan(config, "sgl_kernel"), tmp_path / "t.parquet", log_stream=log)
    text = (tmp_path / "log").read_text()
    print(text[-3000:])
    rows = frame.set_index("op")
    print(rows[["status", "error", "library_version"]].to_string())
    assert "error" not in set(rows["status"]), rows["error"].to_dict()

    fp4 = rows.loc["cutlass_scaled_fp4_mm"]
    if CAPABILITY[0] < 10:
        assert fp4["status"] == "unsupported"
        # The ops are absent (SGLang 0.5.16): the places searched; present: the library's refusal.
        assert "not found in" in fp4["error"] or sgl.is_unsupported_error(Exception(fp4["error"]))

    blockwise = rows.loc["fp8_blockwise_scaled_mm"]
    if "from sglang.jit_kernel.fp8_blockwise_gemm" in text and CAPABILITY[0] != 12:
        assert blockwise["status"] == "unsupported"
        assert "requires SM120" in blockwise["error"]
    elif blockwise["status"] != "unsupported":
        assert blockwise["status"] == "ok", blockwise["error"]
