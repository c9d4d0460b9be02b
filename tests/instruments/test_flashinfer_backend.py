"""FlashInfer's FP4 GEMM is refused by FlashInfer's own checks before its inputs are
quantised: on a fresh H200 the quantisation's first call JIT-built a module for 35-36 s for
points the call then refused."""

import sys
import types

import pytest
import torch
from studylib.instruments.backends import flashinfer_backend
from studylib.instruments.backends.backend_interface import Unsupported
from studylib.instruments.backends.flashinfer_backend import fp4_refusal


def fake_mm_fp4(supported: dict[str, set[int]]):
    """An mm_fp4 carrying the two methods FlashInfer's backend_requirement adds."""

    def mm_fp4(*args, **kwargs):
        raise AssertionError("a refused point must not be called")

    mm_fp4.is_backend_supported = lambda impl, cc=None: cc in supported.get(impl, set())
    mm_fp4.is_compute_capability_supported = lambda cc: any(cc in ccs for ccs in supported.values())
    return mm_fp4


BLACKWELL = {"cutlass": {100, 103, 110, 120}, "cudnn": {100, 120}, "trtllm": {100, 103}}


def test_fp4_refusal_asks_flashinfer_per_backend_and_arch():
    mm_fp4 = fake_mm_fp4(BLACKWELL)
    assert fp4_refusal(mm_fp4, "cutlass", 90) == (
        "BackendSupportedError: mm_fp4 does not support backend 'cutlass' with capability 90"
    )
    assert "no backend supports capability 90" in fp4_refusal(mm_fp4, "auto", 90)
    assert fp4_refusal(mm_fp4, "trtllm", 120) is not None  # trtllm: sm_100 family only
    for impl in ("cutlass", "cudnn", "trtllm", "auto"):
        assert fp4_refusal(mm_fp4, impl, 100) is None
    # A FlashInfer without the requirement decorator: the call itself decides.
    assert fp4_refusal(lambda *a: None, "cutlass", 90) is None


def test_refused_fp4_point_quantises_nothing(monkeypatch):
    quantised = []
    fake = types.ModuleType("flashinfer")
    fake.mm_fp4 = fake_mm_fp4(BLACKWELL)
    fake.nvfp4_quantize = lambda *a, **k: quantised.append(a)
    monkeypatch.setitem(sys.modules, "flashinfer", fake)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    point = {"op": "mm_fp4", "dtype": "nvfp4", "impl": "cudnn", "M": 16, "N": 6144, "K": 2048}
    with pytest.raises(Unsupported, match="'cudnn' with capability 90"):
        flashinfer_backend.prepare(point, "cuda")
    assert quantised == []
