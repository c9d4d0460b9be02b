"""torch's grouped GEMMs' inputs and check, expert by expert (an 80-GB H100 could hold
neither a whole fp32 draw of 256 experts' weights nor their fp64 copy)."""

from functools import partial

import torch
from studylib.instruments.backends.torch_backend import (
    _grouped_reference,
    _random_experts,
    quantize_fp8,
)


def test_the_grouped_check_expert_by_expert_is_the_whole_product():
    a = torch.randn(3 * 2, 8)
    w = torch.randn(3, 5, 8)
    want = (a.double().view(3, 2, 8) @ w.double().transpose(-2, -1)).reshape(6, 5)
    got = _grouped_reference(a, lambda g: w[g].double(), 3, 2)
    assert got.shape == (6, 5) and torch.allclose(got, want, rtol=1e-12, atol=0)


def test_random_experts_are_drawn_per_expert_with_variance_one_over_k():
    torch.manual_seed(0)
    w = _random_experts(4, 64, 256, "cpu")
    assert w.dtype == torch.bfloat16 and w.shape == (4, 64, 256)
    assert abs(w.float().var().item() * 256 - 1) < 0.05
    assert not torch.equal(w[0], w[1])  # each expert its own draw
    q, scale = _random_experts(4, 64, 256, "cpu", partial(quantize_fp8, rowwise=True))
    assert q.dtype == torch.float8_e4m3fn and q.shape == (4, 64, 256) and scale.shape == (4, 64)
    back = q.float() * scale[..., None]
    assert abs(back.var().item() * 256 - 1) < 0.05
