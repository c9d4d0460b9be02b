"""The sgl_kernel adapter on CPU: where it looks for each op, what it says when an op is
nowhere, and how it calls each place's function (fake modules injected into sys.modules)."""

import sys
import types

import pytest
from helpers import fake_module, pin_sgl_versions
from studylib.instruments.backends import sgl_kernel_backend as sgl
from studylib.instruments.backends.backend_interface import Unsupported

torch = pytest.importorskip("torch")

JIT_BLOCKWISE = "sglang.jit_kernel.fp8_blockwise_gemm"
FP8_KERNEL = "sglang.kernels.ops.quantization.fp8_kernel"
FP8_KERNEL_OLD = "sglang.srt.layers.quantization.fp8_kernel"
SGLANG_MODULES = ("sglang", "sglang.jit_kernel", "sglang.kernels", "sglang.kernels.ops")


def absent(monkeypatch, *names: str) -> None:
    """Make ``import name`` fail with ModuleNotFoundError whatever is installed."""
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture(autouse=True)
def fixed_versions(monkeypatch):
    """sglang-kernel 0.4.5 and SGLang 0.5.16, whatever is installed; no op announced yet."""
    pin_sgl_versions(monkeypatch)


def never(*args, **kwargs):
    raise AssertionError("called the wrong place's function")


# --- where each op is looked for ---------------------------------------------------------


def test_locations_are_sgl_kernel_then_where_sglang_0_5_16_keeps_them():
    sglang_only = {
        # SGLang's Triton MoE and decode attention (with its KV-split scheduler): only SGLang
        # has them
        "fused_experts": ["sglang.srt.layers.moe.fused_moe_triton"],
        "decode_attention_fwd": ["sglang.kernels.ops.attention.decode_attention"],
        "get_num_kv_splits_triton": ["sglang.kernels.ops.attention.metadata"],
        # SGLang's Triton block-FP8 linear: its quantiser and GEMM, 0.5.16's home first
        "per_token_group_quant_fp8": [FP8_KERNEL, FP8_KERNEL_OLD],
        "w8a8_block_fp8_matmul_triton": [FP8_KERNEL, FP8_KERNEL_OLD],
    }
    for op, places in sgl.LOCATIONS.items():
        if op not in sglang_only:
            assert places[0] == "sgl_kernel", op
        else:
            assert places == sglang_only[op], op
    assert sgl.LOCATIONS["fp8_blockwise_scaled_mm"][1] == JIT_BLOCKWISE
    assert sgl.LOCATIONS["fp8_scaled_mm"][1] == "sglang.kernels.ops.gemm"
    assert sgl.LOCATIONS["scaled_fp4_quant"][1] == "sglang.jit_kernel.nvfp4"
    assert sgl.LOCATIONS["cutlass_scaled_fp4_mm"][1] == "sglang.jit_kernel.nvfp4"
    # The module searched before, which SGLang never had.
    assert all("sglang.jit_kernel.gemm" not in places for places in sgl.LOCATIONS.values())


def test_sgl_kernel_wins_when_it_has_the_op(monkeypatch):
    def mine(*args):
        return "sgl_kernel"

    fake_module(monkeypatch, "sgl_kernel", fp8_blockwise_scaled_mm=mine)
    fake_module(monkeypatch, JIT_BLOCKWISE, fp8_blockwise_scaled_mm=never)
    found = sgl.find("fp8_blockwise_scaled_mm")
    assert (found.module, found.fn, found.convention) == ("sgl_kernel", mine, "aot")


def test_sglang_module_when_sgl_kernel_lacks_the_op(monkeypatch):
    def jit(*args):
        return "jit"

    fake_module(monkeypatch, "sgl_kernel", fp8_scaled_mm=never)  # like sglang-kernel 0.4.5
    fake_module(monkeypatch, JIT_BLOCKWISE, fp8_blockwise_scaled_mm=jit)
    found = sgl.find("fp8_blockwise_scaled_mm")
    assert (found.module, found.fn, found.convention) == (JIT_BLOCKWISE, jit, "jit_row_padded")


def test_places_are_imported_in_order_and_no_further(monkeypatch):
    imported = []

    def import_module(name):
        imported.append(name)
        if name == "sgl_kernel":
            return types.SimpleNamespace()
        return types.SimpleNamespace(cutlass_scaled_fp4_mm=lambda *a: None)

    monkeypatch.setattr(sgl, "importlib", types.SimpleNamespace(import_module=import_module))
    assert sgl.find("cutlass_scaled_fp4_mm").module == "sglang.jit_kernel.nvfp4"
    assert imported == ["sgl_kernel", "sglang.jit_kernel.nvfp4"]


def test_not_found_says_where_it_searched_and_why(monkeypatch):
    fake_module(monkeypatch, "sgl_kernel", fp8_scaled_mm=never)
    absent(monkeypatch, "sglang.jit_kernel.nvfp4", *SGLANG_MODULES)
    with pytest.raises(Unsupported) as info:
        sgl.find("cutlass_scaled_fp4_mm")
    text = str(info.value)
    assert text.startswith("cutlass_scaled_fp4_mm not found in sglang-kernel 0.4.5, sglang 0.5.16")
    assert "sgl_kernel (no cutlass_scaled_fp4_mm)" in text
    assert "sglang.jit_kernel.nvfp4 (ModuleNotFoundError" in text
    assert text.index("sgl_kernel (") < text.index("sglang.jit_kernel.nvfp4 (")


def test_a_place_is_searched_once_per_process_found_or_not(monkeypatch):
    imported = []

    def import_module(name):
        imported.append(name)
        if name == "sgl_kernel":
            return types.SimpleNamespace(fp8_scaled_mm=lambda *a: None)
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(sgl, "importlib", types.SimpleNamespace(import_module=import_module))
    for _ in range(3):  # three points of each op
        assert sgl.find("fp8_scaled_mm").module == "sgl_kernel"
        with pytest.raises(Unsupported, match="scaled_fp4_quant not found in") as info:
            sgl.find("scaled_fp4_quant")
        assert "sglang.jit_kernel.nvfp4 (ModuleNotFoundError" in str(info.value)
    assert imported == ["sgl_kernel", "sgl_kernel", "sglang.jit_kernel.nvfp4"]


def test_a_broken_place_is_recorded_not_raised(monkeypatch):
    def import_module(name):
        if name == "sgl_kernel":
            raise RuntimeError("libcudart.so.13: cannot open shared object file")
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(sgl, "importlib", types.SimpleNamespace(import_module=import_module))
    with pytest.raises(Unsupported, match=r"sgl_kernel \(RuntimeError: libcudart"):
        sgl.find("fp8_blockwise_scaled_mm")


def test_prepare_without_cuda_is_unsupported():
    point = {"op": "fp8_blockwise_scaled_mm", "M": 16, "N": 256, "K": 256}
    with pytest.raises(Unsupported, match="no CUDA device"):
        sgl.prepare(point, "cpu")


def test_library_version_names_sglang_too():
    env = sgl.environment("cpu")
    assert env["library_version"] == "0.4.5 (sglang 0.5.16)"
    assert env["unsupported"] == "no CUDA device"


# --- arch refusals are unsupported rows with the library's text ---------------------------


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("fp8_blockwise_scaled_mm JIT kernel requires SM120 (Blackwell)."),
        RuntimeError("NVFP4 JIT kernels require compute capability >= 10.0, got 9.0."),
        NotImplementedError("No compiled nvfp4 quantization kernel"),
        RuntimeError("fp8_scaled_mm is not supported on this device"),
    ],
)
def test_arch_refusals_are_unsupported(exc):
    assert sgl.is_unsupported_error(exc)


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("CUDA error: an illegal memory access was encountered"),
        RuntimeError("mat_a must be a row major tensor"),
        AssertionError("out_dtype must be Half or BFloat16, got torch.float32"),
    ],
)
def test_real_failures_stay_errors(exc):
    assert not sgl.is_unsupported_error(exc)


def test_worker_row_carries_the_library_text():
    from studylib.instruments.worker import Measurer

    measurer = object.__new__(Measurer)
    measurer.module, measurer.device = sgl, "cpu"
    row = measurer.failure(
        RuntimeError("fp8_blockwise_scaled_mm JIT kernel requires SM120 (Blackwell).")
    )
    assert row["status"] == "unsupported"
    assert (
        row["error"]
        == "RuntimeError: fp8_blockwise_scaled_mm JIT kernel requires SM120 (Blackwell)."
    )


# --- each place's calling convention ------------------------------------------------------


def blockwise_product(mat_a, mat_b, scales_a, scales_b):
    """What a blockwise GEMM computes, from operands laid out as the kernels take them."""
    rows, k = mat_a.shape
    n = mat_b.shape[1]
    a = mat_a.double().view(rows, k // 128, 128) * scales_a.double()[..., None]
    w = mat_b.t().double().view(n // 128, 128, k // 128, 128)
    w = w * scales_b.t().double()[:, None, :, None]
    return a.view(rows, k) @ w.view(n, k).t()


def check_blockwise_operands(mat_a, mat_b, scales_a, scales_b, out_dtype, rows, n, k):
    assert mat_a.dtype == mat_b.dtype == torch.float8_e4m3fn
    assert mat_a.shape == (rows, k) and mat_a.stride(1) == 1  # row-major
    assert mat_b.shape == (k, n) and mat_b.stride(0) == 1  # column-major
    # 1x128 per-token-group activation scales, column-major (stride(0) == 1).
    assert scales_a.dtype == torch.float32 and scales_a.shape == (rows, k // 128)
    assert scales_a.stride(0) == 1
    # 128x128 block weight scales, the (K/128, N/128) view of row-major (N/128, K/128).
    assert scales_b.dtype == torch.float32 and scales_b.shape == (k // 128, n // 128)
    assert scales_b.stride(0) == 1 and scales_b.t().is_contiguous()
    assert out_dtype == torch.bfloat16


def relative_error(out, ref):
    return (torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref)).item()


@pytest.mark.parametrize("m", [5, 8])
def test_blockwise_jit_gets_row_padded_operands(monkeypatch, m, capsys):
    n, k = 256, 384
    rows = -(-m // 4) * 4
    calls = []

    def jit(mat_a, mat_b, scales_a, scales_b, out_dtype):
        check_blockwise_operands(mat_a, mat_b, scales_a, scales_b, out_dtype, rows, n, k)
        # SGLang's padding rows are zero, so the padded GEMM is exact on the first m rows.
        assert not mat_a[m:].float().any() and not scales_a[m:].any()
        calls.append(mat_a.shape)
        return blockwise_product(mat_a, mat_b, scales_a, scales_b).to(out_dtype)

    fake_module(monkeypatch, "sgl_kernel", fp8_scaled_mm=never)
    fake_module(monkeypatch, JIT_BLOCKWISE, fp8_blockwise_scaled_mm=jit)
    point = {"op": "fp8_blockwise_scaled_mm", "M": m, "N": n, "K": k}
    prepared = sgl._fp8_blockwise_scaled_mm(point, device="cpu")
    out = prepared.run()
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert relative_error(out, prepared.reference()) < 1e-2
    assert prepared.extra["provider"] == {"fp8_blockwise_scaled_mm": JIT_BLOCKWISE}
    assert [run().shape for run in prepared.variants(2)] == [(m, n), (m, n)]
    assert calls == [(rows, k)] * 3
    log = capsys.readouterr().err
    assert f"fp8_blockwise_scaled_mm from {JIT_BLOCKWISE}" in log


def test_blockwise_sgl_kernel_gets_unpadded_operands(monkeypatch):
    m, n, k = 5, 256, 128

    def aot(mat_a, mat_b, scales_a, scales_b, out_dtype):
        check_blockwise_operands(mat_a, mat_b, scales_a, scales_b, out_dtype, m, n, k)
        return blockwise_product(mat_a, mat_b, scales_a, scales_b).to(out_dtype)

    fake_module(monkeypatch, "sgl_kernel", fp8_blockwise_scaled_mm=aot)
    point = {"op": "fp8_blockwise_scaled_mm", "M": m, "N": n, "K": k}
    prepared = sgl._fp8_blockwise_scaled_mm(point, device="cpu")
    assert relative_error(prepared.run(), prepared.reference()) < 1e-2
    assert prepared.extra["provider"] == {"fp8_blockwise_scaled_mm": "sgl_kernel"}


def test_blockwise_needs_whole_blocks(monkeypatch):
    fake_module(monkeypatch, "sgl_kernel", fp8_blockwise_scaled_mm=never)
    with pytest.raises(Unsupported, match="multiples of the 128 block"):
        sgl._fp8_blockwise_scaled_mm({"M": 4, "N": 200, "K": 256}, device="cpu")


def test_fp8_scaled_mm_from_sglang_gemm_ops(monkeypatch):
    m, n, k = 3, 64, 32

    def rowwise(mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None):
        assert mat_a.dtype == mat_b.dtype == torch.float8_e4m3fn
        assert mat_a.shape == (m, k) and mat_b.shape == (k, n) and mat_b.stride(0) == 1
        assert scales_a.shape == (m,) and scales_b.shape == (n,)
        assert scales_a.dtype == scales_b.dtype == torch.float32
        assert out_dtype == torch.bfloat16 and bias is None
        out = (mat_a.double() * scales_a.double()[:, None]) @ mat_b.double()
        return (out * scales_b.double()).to(out_dtype)

    fake_module(monkeypatch, "sgl_kernel", bmm_fp8=never)
    fake_module(monkeypatch, "sglang.kernels.ops.gemm", fp8_scaled_mm=rowwise)
    prepared = sgl._fp8_scaled_mm({"M": m, "N": n, "K": k}, device="cpu")
    assert relative_error(prepared.run(), prepared.reference()) < 1e-2
    assert prepared.extra["provider"] == {"fp8_scaled_mm": "sglang.kernels.ops.gemm"}


def test_nvfp4_signature(monkeypatch):
    m, n, k = 3, 64, 96
    quantised = []

    def scaled_fp4_quant(x, global_scale):
        assert x.dtype == torch.bfloat16 and x.dim() == 2 and x.shape[1] == k
        assert global_scale.dtype == torch.float32 and global_scale.shape == (1,)
        rows = -(-x.shape[0] // 128) * 128
        cols = -(-(k // 16) // 4) * 4
        quantised.append(x.shape[0])
        packed = torch.zeros(x.shape[0], k // 2, dtype=torch.uint8)
        return packed, torch.zeros(rows, cols).to(torch.float8_e4m3fn)

    def cutlass_scaled_fp4_mm(a, b, block_scale_a, block_scale_b, alpha, out_dtype):
        assert a.dtype == b.dtype == torch.uint8
        assert a.shape == (m, k // 2) and b.shape == (n, k // 2)  # B is (N, K/2), not transposed
        assert block_scale_a.dtype == block_scale_b.dtype == torch.float8_e4m3fn
        assert block_scale_a.shape[0] == 128 and block_scale_b.shape[0] == 128
        assert alpha.dtype == torch.float32 and alpha.shape == (1,)
        assert out_dtype == torch.bfloat16
        return torch.ones(m, n, dtype=out_dtype)

    fake_module(monkeypatch, "sgl_kernel", fp8_scaled_mm=never)
    fake_module(
        monkeypatch,
        "sglang.jit_kernel.nvfp4",
        scaled_fp4_quant=scaled_fp4_quant,
        cutlass_scaled_fp4_mm=cutlass_scaled_fp4_mm,
    )
    prepared = sgl._cutlass_scaled_fp4_mm({"M": m, "N": n, "K": k}, device="cpu")
    assert quantised == [m, n]
    assert prepared.run().shape == (m, n)
    assert prepared.reference().shape == (m, n)
    assert prepared.extra["provider"] == {
        "scaled_fp4_quant": "sglang.jit_kernel.nvfp4",
        "cutlass_scaled_fp4_mm": "sglang.jit_kernel.nvfp4",
    }


def test_nvfp4_absent_is_unsupported_before_any_work(monkeypatch):
    """SGLang 0.5.16 with sglang-kernel 0.4.5: neither place has the FP4 ops."""
    fake_module(monkeypatch, "sgl_kernel", fp8_scaled_mm=never)
    absent(monkeypatch, "sglang.jit_kernel.nvfp4")
    with pytest.raises(Unsupported, match="scaled_fp4_quant not found"):
        sgl._cutlass_scaled_fp4_mm({"M": 16, "N": 64, "K": 64}, device="cpu")


# --- fp8_blockwise_scaled_mm, impl triton: SGLang's block-FP8 linear on sm_90 --------------


def test_blockwise_has_both_impls_and_the_plan_expands_triton():
    from helpers import default_config
    from studylib.stages.sweep.sweep_plan import expand_points, sweep_plan

    assert sgl.OPS["fp8_blockwise_scaled_mm"]["impls"] == ["cutlass", "triton"]
    config = default_config()
    plan = sweep_plan(config, "sgl_kernel")
    decode = {"cuda": [1, 4, 16, 64, 128, 256, 512], "cpu": [1, 4]}
    for device in ("cuda", "cpu"):
        points = [p for p in expand_points(plan, device) if p["op"] == "fp8_blockwise_scaled_mm"]
        by_impl = {}
        for p in points:
            assert p["dtype"] == "fp8_e4m3" and p["G"] is None
            by_impl.setdefault(p["impl"], set()).add((p["shape"], p["N"], p["K"], p["M"]))
        assert set(by_impl) == {"cutlass", "triton"}
        assert by_impl["cutlass"] == by_impl["triton"]  # the same points for both
        seed = {
            (s, config["shapes"][s]["N"], config["shapes"][s]["K"], m)
            for s in ("down", "gate_up", "dense_square")
            for m in config["m_grid"][device]
        }
        step = {(s, n, 6144, m) for s, n in (("qkv", 8192), ("o_proj", 6144))
                for m in decode[device]}  # fmt: skip
        assert by_impl["triton"] == seed | step


def fake_quantiser(calls):
    """SGLang's per_token_group_quant_fp8 (row-major scales), in torch."""

    def per_token_group_quant_fp8(x, group_size, eps=1e-10, column_major_scales=False,
                                  scale_tma_aligned=False, scale_ue8m0=False):  # fmt: skip
        calls.append(("quant", tuple(x.shape), x.dtype, group_size, column_major_scales))
        m, k = x.shape
        groups = x.float().view(m, k // group_size, group_size)
        scale = groups.abs().amax(-1).clamp(min=eps) / 448.0
        q = (groups / scale[..., None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return q.view(m, k), scale

    return per_token_group_quant_fp8


def fake_triton_gemm(calls, m, n, k):
    """w8a8_block_fp8_matmul_triton: checks what the server passes, returns the product."""

    def w8a8_block_fp8_matmul_triton(A, B, As, Bs, block_size, output_dtype=torch.float16):
        calls.append(("gemm", tuple(A.shape), tuple(B.shape)))
        assert A.dtype == B.dtype == torch.float8_e4m3fn
        assert A.shape == (m, k) and A.is_contiguous()
        assert B.shape == (n, k) and B.is_contiguous()  # the (N, K) weight, not transposed
        assert list(block_size) == [128, 128]
        assert As.dtype == Bs.dtype == torch.float32
        assert As.shape == (m, -(-k // 128)) and As.is_contiguous()  # row-major token scales
        assert Bs.shape == (-(-n // 128), -(-k // 128)) and Bs.is_contiguous()
        assert output_dtype == torch.bfloat16
        a = A.double().view(m, k // 128, 128) * As.double()[..., None]
        w = B.double().view(n // 128, 128, k // 128, 128) * Bs.double()[:, None, :, None]
        return (a.view(m, k) @ w.view(n, k).t()).to(output_dtype)

    return w8a8_block_fp8_matmul_triton


@pytest.mark.parametrize("m", [1, 5])
def test_blockwise_triton_quantises_then_multiplies_as_the_server(monkeypatch, m, capsys):
    n, k = 256, 384
    calls = []
    fake_module(monkeypatch, FP8_KERNEL_OLD, per_token_group_quant_fp8=never,
                w8a8_block_fp8_matmul_triton=never)  # fmt: skip
    fake_module(monkeypatch, FP8_KERNEL, per_token_group_quant_fp8=fake_quantiser(calls),
                w8a8_block_fp8_matmul_triton=fake_triton_gemm(calls, m, n, k))  # fmt: skip
    point = {"op": "fp8_blockwise_scaled_mm", "impl": "triton", "M": m, "N": n, "K": k}
    prepared = sgl._fp8_blockwise_triton(point, device="cpu")
    out = prepared.run()
    # One timed call: the bf16 activations' 1x128 quantisation, then the GEMM.
    assert calls == [("quant", (m, k), torch.bfloat16, 128, False), ("gemm", (m, k), (n, k))]
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert relative_error(out, prepared.reference()) < 1e-2
    assert prepared.extra["provider"] == {
        "per_token_group_quant_fp8": FP8_KERNEL,
        "w8a8_block_fp8_matmul_triton": FP8_KERNEL,
    }
    # Cold mode: each set is its own activations and weights, each call quantises again.
    calls.clear()
    outs = [run() for run in prepared.variants(2)]
    assert [o.shape for o in outs] == [(m, n), (m, n)] and not torch.equal(outs[0], outs[1])
    assert [c[0] for c in calls] == ["quant", "gemm"] * 2
    # The quantiser's bf16 read and fp8 + scale writes count on top of the GEMM's bytes.
    gemm_only = m * k + n * k + 2 * m * n + 4 * (m * k // 128 + (n // 128) * (k // 128))
    assert prepared.bytes == gemm_only + 3 * m * k + 4 * (m * k // 128)
    assert prepared.flops == 2 * m * n * k
    log = capsys.readouterr().err
    assert f"w8a8_block_fp8_matmul_triton from {FP8_KERNEL}" in log


def test_blockwise_triton_falls_back_to_the_earlier_home(monkeypatch):
    m, n, k = 4, 128, 256
    calls = []
    absent(monkeypatch, FP8_KERNEL)
    fake_module(monkeypatch, FP8_KERNEL_OLD, per_token_group_quant_fp8=fake_quantiser(calls),
                w8a8_block_fp8_matmul_triton=fake_triton_gemm(calls, m, n, k))  # fmt: skip
    prepared = sgl._fp8_blockwise_triton({"M": m, "N": n, "K": k}, device="cpu")
    assert relative_error(prepared.run(), prepared.reference()) < 1e-2
    assert set(prepared.extra["provider"].values()) == {FP8_KERNEL_OLD}


def test_blockwise_triton_check_catches_a_wrong_product(monkeypatch):
    """The reference is the product of the dequantised operands: a GEMM that drops the
    activation scales is far from it."""
    m, n, k = 8, 256, 512
    right = fake_triton_gemm([], m, n, k)

    def unscaled(A, B, As, Bs, block_size, output_dtype=torch.float16):
        return right(A, B, torch.ones_like(As), Bs, block_size, output_dtype)

    fake_module(monkeypatch, FP8_KERNEL, per_token_group_quant_fp8=fake_quantiser([]),
                w8a8_block_fp8_matmul_triton=unscaled)  # fmt: skip
    prepared = sgl._fp8_blockwise_triton({"M": m, "N": n, "K": k}, device="cpu")
    assert relative_error(prepared.run(), prepared.reference()) > 0.5


def test_blockwise_triton_missing_is_unsupported_naming_the_places(monkeypatch):
    absent(monkeypatch, FP8_KERNEL, FP8_KERNEL_OLD, *SGLANG_MODULES, "sglang.srt",
           "sglang.srt.layers", "sglang.srt.layers.quantization")  # fmt: skip
    with pytest.raises(Unsupported) as info:
        sgl._fp8_blockwise_triton({"M": 16, "N": 256, "K": 256}, device="cpu")
    text = str(info.value)
    assert text.startswith("per_token_group_quant_fp8 not found in sglang-kernel 0.4.5, "
                           "sglang 0.5.16: searched")  # fmt: skip
    assert f"{FP8_KERNEL} (ModuleNotFoundError" in text
    assert f"{FP8_KERNEL_OLD} (ModuleNotFoundError" in text
    # A module without the functions says so too (in a new process: a new search).
    fake_module(monkeypatch, FP8_KERNEL, per_token_group_quant_fp8=fake_quantiser([]))
    sgl._searched.clear()
    with pytest.raises(Unsupported, match=f"{FP8_KERNEL} \\(no w8a8_block_fp8_matmul_triton\\)"):
        sgl._fp8_blockwise_triton({"M": 16, "N": 256, "K": 256}, device="cpu")


def test_blockwise_triton_needs_whole_blocks(monkeypatch):
    fake_module(monkeypatch, FP8_KERNEL, per_token_group_quant_fp8=never,
                w8a8_block_fp8_matmul_triton=never)  # fmt: skip
    with pytest.raises(Unsupported, match="multiples of the 128 block"):
        sgl._fp8_blockwise_triton({"M": 4, "N": 200, "K": 256}, device="cpu")


def test_prepare_routes_by_impl(monkeypatch):
    seen = []
    monkeypatch.setattr(sgl, "_fp8_blockwise_triton", lambda point: seen.append("triton"))
    monkeypatch.setattr(sgl, "_fp8_blockwise_scaled_mm", lambda point: seen.append("cutlass"))
    for impl in ("triton", "cutlass"):
        sgl.prepare({"op": "fp8_blockwise_scaled_mm", "impl": impl, "M": 1, "N": 128,
                     "K": 128}, "cuda")  # fmt: skip
    assert seen == ["triton", "cutlass"]
    # Without a GPU every impl is the same unsupported row.
    with pytest.raises(Unsupported, match="no CUDA device"):
        sgl.prepare({"op": "fp8_blockwise_scaled_mm", "impl": "triton", "M": 1, "N": 128,
                     "K": 128}, "cpu")  # fmt: skip
