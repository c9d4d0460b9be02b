"""Decode attention on the CPU: the geometry, work and bytes of a point, the fp64 reference, the
torch SDPA op, and how the sgl_kernel and flashinfer ops call their libraries (fake modules
stand in for SGLang and FlashInfer, which need a GPU)."""

import math
import re
import sys

import pytest
from helpers import fake_module, pin_sgl_versions
from studylib.instruments.backends import attention, torch_backend
from studylib.instruments.backends import flashinfer_backend as fi
from studylib.instruments.backends import sgl_kernel_backend as sgl
from studylib.instruments.backends.backend_interface import Unsupported
from studylib.instruments.worker import compare

torch = pytest.importorskip("torch")

DECODE = "sglang.kernels.ops.attention.decode_attention"
METADATA = "sglang.kernels.ops.attention.metadata"


def point(batch=3, heads=4, kv_heads=2, head_dim=16, context=24, op="decode_attention",
          dtype="bf16", impl="sdpa"):  # fmt: skip
    return {"backend": "torch", "impl": impl, "op": op, "dtype": dtype, "shape": "attention",
            "M": batch, "N": heads * head_dim, "K": context, "G": None, "heads": heads,
            "kv_heads": kv_heads, "head_dim": head_dim, "context": context}  # fmt: skip


def naive_attention(q, k, v, scale):
    """Per request and head, softmax(q k^T) v in fp64, token-major k, v [B, L, kv_heads, D]."""
    batch, heads, _ = q.shape
    group = heads // k.shape[2]
    out = torch.empty(q.shape, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            keys, values = k[b, :, h // group].double(), v[b, :, h // group].double()
            weights = torch.softmax(keys @ q[b, h].double() * scale, dim=0)
            out[b, h] = weights @ values
    return out


def relative_error(out, ref):
    return (torch.linalg.vector_norm(out.double() - ref) / torch.linalg.vector_norm(ref)).item()


# --- geometry, work and bytes --------------------------------------------------------------


def test_the_served_models_decode_step_at_256_requests():
    geo = attention.geometry(point(batch=256, heads=48, kv_heads=8, head_dim=128, context=640))
    assert (geo.group, geo.tokens, geo.sm_scale) == (6, 256 * 640, 128**-0.5)
    assert attention.flops(geo) == 4 * 256 * 48 * 640 * 128
    kv = 2 * 256 * 640 * 8 * 128 * 2
    assert attention.kv_bytes(geo, 2) == kv == 671_088_640  # the ~670 MB of one input set
    assert attention.bytes_moved(geo, 2) == kv + 2 * 256 * 48 * 128 * 2


def test_flops_and_bytes_follow_the_dtype_and_the_batch():
    one = attention.geometry(point(batch=1))
    four = attention.geometry(point(batch=4))
    assert attention.flops(four) == 4 * attention.flops(one)
    assert attention.bytes_moved(one, 4) == 2 * attention.bytes_moved(one, 2)
    assert attention.bytes_moved(one, 2) == 2 * 24 * 2 * 16 * 2 + 2 * 4 * 16 * 2


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda p: p.pop("context"), "needs an attention shape (kind: attention)"),
        (lambda p: p.update(heads=5), "heads (5) is not a multiple of kv_heads (2)"),
    ],
)
def test_a_point_without_attention_geometry_is_unsupported(change, message):
    p = point()
    change(p)
    with pytest.raises(Unsupported, match=re.escape(message)):
        attention.geometry(p)


def test_the_reference_is_grouped_query_attention():
    geo = attention.geometry(point(batch=2, heads=6, kv_heads=2, head_dim=8, context=5))
    q, k, v = attention.make_inputs(geo, "cpu", torch.float32, seed=3)
    assert q.shape == (2, 6, 8) and k.shape == v.shape == (2, 5, 2, 8)
    ref = attention.reference(q, k, v, geo.sm_scale)
    assert ref.dtype == torch.float64
    assert torch.allclose(ref, naive_attention(q, k, v, geo.sm_scale), atol=1e-12)


def test_inputs_are_seeded():
    geo = attention.geometry(point())
    first = attention.make_inputs(geo, "cpu", torch.bfloat16, seed=1)
    again = attention.make_inputs(geo, "cpu", torch.bfloat16, seed=1)
    other = attention.make_inputs(geo, "cpu", torch.bfloat16, seed=2)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[1], other[1])


# --- torch: SDPA over a dense cache ---------------------------------------------------------


@pytest.mark.parametrize("dtype, tolerance", [("fp32", 1e-5), ("bf16", 2e-2)])
def test_torch_sdpa_agrees_with_the_reference(dtype, tolerance):
    p = point(dtype=dtype)
    prepared = torch_backend.prepare(p, "cpu")
    out = prepared.run()
    assert out.shape == (3, 4, 1, 16)
    assert out.dtype == {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    metrics = compare(out, prepared.reference())
    assert metrics["rel_err"] < tolerance and metrics["cos_sim"] > 0.999, metrics
    geo = attention.geometry(p)
    assert prepared.flops == attention.flops(geo)
    assert prepared.bytes == attention.bytes_moved(geo, 4 if dtype == "fp32" else 2)


def test_torch_sdpa_variants_are_independent_caches():
    prepared = torch_backend.prepare(point(dtype="fp32"), "cpu")
    runs = prepared.variants(3)
    outs = [run() for run in runs]
    assert len(outs) == 3 and all(o.shape == (3, 4, 1, 16) for o in outs)
    assert not torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], prepared.run())


def test_torch_sdpa_refuses_a_gemm_point():
    gemm = {"backend": "torch", "impl": "sdpa", "op": "decode_attention", "dtype": "fp32",
            "shape": "down", "M": 1, "N": 64, "K": 32, "G": None}  # fmt: skip
    with pytest.raises(Unsupported, match="'down' has no heads, kv_heads, head_dim, context"):
        torch_backend.prepare(gemm, "cpu")


# --- sgl_kernel: SGLang's Triton decode attention --------------------------------------------


@pytest.fixture
def fresh_sgl(monkeypatch):
    pin_sgl_versions(monkeypatch)


class FakeTritonKernel:
    """Stands in for a @triton.jit function: ``kernel[grid](*args, **constexprs)``."""

    def __init__(self, body):
        self.body, self.launches = body, []

    def __call__(self, *args, **kwargs):  # as triton's JITFunction: callable, but not so
        raise RuntimeError("Cannot call @triton.jit'd outside of the scope of a kernel")

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((grid, args, kwargs))
            return self.body(*args, **kwargs)

        return launch


def paged_attention(q, k_pool, v_pool, indptr, indices, scale):
    """Attention over a paged pool of page size 1: request b's tokens are the pool slots
    indices[indptr[b]:indptr[b + 1]]."""
    group = q.shape[1] // k_pool.shape[1]
    out = torch.empty(q.shape, dtype=torch.float32)
    for b in range(q.shape[0]):
        slots = indices[int(indptr[b]) : int(indptr[b + 1])].long()
        keys = k_pool[slots].float().repeat_interleave(group, dim=1)  # [L, heads, D]
        values = v_pool[slots].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,lhd->hl", q[b].float(), keys) * scale
        out[b] = torch.einsum("hl,lhd->hd", torch.softmax(scores, dim=-1), values)
    return out


def test_sgl_triton_decode_is_called_as_the_server_calls_it(monkeypatch, fresh_sgl, capsys):
    batch, heads, kv_heads, dim, context = 3, 4, 2, 16, 24
    calls = []

    def decode_attention_fwd(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, attn_logits,
                             attn_lse, num_kv_splits, max_kv_splits, sm_scale, k_scale,
                             v_scale, logit_cap=0.0, sinks=None, xai_temperature_len=-1,
                             has_mla=False, use_pdl=False, page_size=1, score_mod=None,
                             aux_tensors=None):  # fmt: skip
        # sglang 0.5.16's own asserts, then the layout forward_decode passes
        assert max_kv_splits == attn_logits.shape[2] == 8
        assert q.shape[0] <= kv_indptr.shape[0] - 1 and q.shape[0] <= attn_logits.shape[0]
        assert q.shape == o.shape == (batch, heads, dim) and q.dtype == torch.bfloat16
        assert k_buffer.shape == v_buffer.shape == (batch * context, kv_heads, dim)
        assert k_buffer.dtype == v_buffer.dtype == torch.bfloat16 and k_buffer.is_contiguous()
        assert kv_indptr.dtype == torch.int32 and kv_indptr.tolist() == [0, 24, 48, 72]
        assert kv_indices.dtype == torch.int64 and kv_indices.shape == (batch * context,)
        assert attn_logits.shape == (batch, heads, 8, dim) and attn_logits.dtype == torch.float32
        assert attn_lse.shape == (batch, heads, 8) and attn_lse.dtype == torch.float32
        assert num_kv_splits.dtype == torch.int32 and num_kv_splits.shape == (batch,)
        assert math.isclose(sm_scale, dim**-0.5) and k_scale == v_scale == 1.0
        assert (logit_cap, sinks, xai_temperature_len, has_mla) == (0.0, None, -1, False)
        assert page_size == 1 and use_pdl is False  # no sm_90 on a CPU
        calls.append(q.data_ptr())
        o.copy_(paged_attention(q, k_buffer, v_buffer, kv_indptr, kv_indices, sm_scale))

    fake_module(monkeypatch, DECODE, decode_attention_fwd=decode_attention_fwd)
    fake_module(monkeypatch, METADATA, get_num_kv_splits_triton=FakeTritonKernel(None))
    p = point(batch, heads, kv_heads, dim, context, impl="triton")
    prepared = sgl._decode_attention(p, device="cpu")
    out = prepared.run()
    assert out.shape == (batch, heads, dim) and out.dtype == torch.bfloat16
    assert relative_error(out, prepared.reference()) < 1e-2
    assert prepared.flops == attention.flops(attention.geometry(p))
    assert prepared.bytes == attention.bytes_moved(attention.geometry(p), 2)
    assert prepared.extra["provider"] == {
        "decode_attention_fwd": DECODE, "get_num_kv_splits_triton": METADATA}  # fmt: skip
    # Without a multiprocessor count the server uses max_kv_splits for every request.
    assert prepared.extra["num_kv_splits"] == 8
    runs = prepared.variants(2)
    assert [r().shape for r in runs] == [(batch, heads, dim)] * 2
    assert len(set(calls)) == 3  # the prepared set and two others, each its own q
    log = capsys.readouterr().err
    assert "decode_attention B=3 context=24: 8 KV splits per request (at most 8)" in log
    assert f"decode_attention_fwd from {DECODE}" in log


def test_the_pool_lays_the_last_tokens_out_as_lockstep_decode_allocates_them():
    geo = attention.geometry({**point(batch=3, context=5), "interleaved": 2})
    slots = attention.pool_slots(geo).view(3, 5)
    # prompts of 3 tokens contiguous (slots 0-8), then one slot per request per step
    assert slots.tolist() == [[0, 1, 2, 9, 12], [3, 4, 5, 10, 13], [6, 7, 8, 11, 14]]
    contiguous = attention.geometry(point(batch=3, context=5))
    assert attention.pool_slots(contiguous).tolist() == list(range(15))
    every = attention.geometry({**point(batch=3, context=5), "interleaved": 5})
    assert attention.pool_slots(every).view(3, 5)[1].tolist() == [1, 4, 7, 10, 13]
    # the pool holds each token at its slot; a contiguous pool is the cache itself
    cache = torch.arange(15 * 2 * 16, dtype=torch.float32).view(3, 5, 2, 16)
    pool = attention.paged_pool(geo, cache, attention.pool_slots(geo))
    assert torch.equal(pool[attention.pool_slots(geo)], cache.view(15, 2, 16))
    assert attention.paged_pool(contiguous, cache, None).data_ptr() == cache.data_ptr()
    with pytest.raises(Unsupported, match=r"interleaved \(6\) is not between 0 and the context"):
        attention.geometry({**point(batch=3, context=5), "interleaved": 6})


@pytest.mark.parametrize("library", ["sgl_kernel", "flashinfer"])
def test_the_paged_ops_read_an_interleaved_pool_through_its_slot_table(monkeypatch, fresh_sgl,
                                                                       library):  # fmt: skip
    # The fakes attend through the slot table they are given: the result matches the fp64
    # reference only if the pool holds each token at the slot the table names.
    p = {**point(batch=3, heads=8, kv_heads=2, impl="fa2" if library == "flashinfer"
                 else "triton"), "interleaved": 10}  # fmt: skip
    expected = attention.pool_slots(attention.geometry(p)).tolist()
    seen = []
    if library == "sgl_kernel":

        def decode_attention_fwd(q, k_buffer, v_buffer, o, kv_indptr, kv_indices, *args,
                                 **kwargs):  # fmt: skip
            seen.append(kv_indices.tolist())
            o.copy_(paged_attention(q, k_buffer, v_buffer, kv_indptr, kv_indices, args[4]))

        fake_module(monkeypatch, DECODE, decode_attention_fwd=decode_attention_fwd)
        fake_module(monkeypatch, METADATA, get_num_kv_splits_triton=FakeTritonKernel(None))
        prepared = sgl._decode_attention(p, device="cpu")
    else:
        FakeDecodeWrapper.made = []
        fake_module(monkeypatch, "flashinfer",
                    BatchDecodeWithPagedKVCacheWrapper=FakeDecodeWrapper)  # fmt: skip
        prepared = fi._decode_attention(p, device="cpu")
        seen.append(FakeDecodeWrapper.made[0].planned[1].tolist())
    out = prepared.run()
    assert seen[0] == expected != list(range(len(expected)))
    assert relative_error(out, prepared.reference()) < 1e-2


def test_torch_sdpa_has_no_pool_to_interleave():
    with pytest.raises(Unsupported, match="dense cache"):
        torch_backend.prepare({**point(), "interleaved": 4}, "cpu")


def test_sgl_kv_splits_come_from_sglangs_scheduling_kernel():
    geo = attention.geometry(point(batch=16, heads=48, kv_heads=8, head_dim=128, context=640))

    def schedule(num_kv_splits, *args, **kwargs):
        num_kv_splits.fill_(4)

    kernel = FakeTritonKernel(schedule)
    splits = sgl._num_kv_splits(kernel, geo, "cpu", sms=132)
    assert splits.tolist() == [4] * 16
    ((grid, args, kwargs),) = kernel.launches
    # TritonAttnBackend.get_num_kv_splits: (num_kv_splits, seq_lens, num_seq, num_group,
    # num_head, num_kv_head, max_kv_splits, device_core_count, MAX_NUM_SEQ=...)
    assert grid == (1,)
    assert args[1].tolist() == [640] * 16 and args[1].dtype == torch.int64
    assert args[2:] == (16, 1, 48, 8, 8, 132) and kwargs == {"MAX_NUM_SEQ": 256}
    big = attention.geometry(point(batch=300, heads=48, kv_heads=8, head_dim=128, context=640))
    sgl._num_kv_splits(kernel, big, "cpu", sms=132)
    assert kernel.launches[-1][2] == {"MAX_NUM_SEQ": 512}


def test_sgl_decode_attention_missing_says_where_it_looked(monkeypatch, fresh_sgl):
    for name in ("sglang", "sglang.kernels", "sglang.kernels.ops",
                 "sglang.kernels.ops.attention", DECODE):  # fmt: skip
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(Unsupported) as info:
        sgl._decode_attention(point(impl="triton"), device="cpu")
    text = str(info.value)
    assert text.startswith("decode_attention_fwd not found in sglang-kernel 0.4.5, sglang 0.5.16")
    assert f"searched {DECODE} (ModuleNotFoundError" in text


def test_sgl_decode_attention_without_cuda_is_unsupported():
    with pytest.raises(Unsupported, match="no CUDA device"):
        sgl.prepare(point(impl="triton"), "cpu")


# --- flashinfer: BatchDecodeWithPagedKVCacheWrapper ------------------------------------------


class FakeDecodeWrapper:
    """FlashInfer's decode wrapper as the adapter must drive it: made, planned once, run."""

    made: list = []

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False,
                 use_tensor_cores=False, backend="auto"):  # fmt: skip
        assert float_workspace_buffer.dtype == torch.uint8
        assert float_workspace_buffer.numel() == fi.DECODE_WORKSPACE_BYTES
        assert kv_layout == "NHD" and use_cuda_graph is False
        self.backend, self.use_tensor_cores = backend, use_tensor_cores
        self.planned, self.runs = None, 0
        FakeDecodeWrapper.made.append(self)

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
             page_size, **kwargs):  # fmt: skip
        assert self.planned is None, "planned twice"
        assert indptr.dtype == indices.dtype == last_page_len.dtype == torch.int32
        assert page_size == 1 and (last_page_len == 1).all()
        assert kwargs["pos_encoding_mode"] == "NONE"
        assert kwargs["q_data_type"] == kwargs["kv_data_type"] == torch.bfloat16
        self.planned = (indptr, indices, num_qo_heads, num_kv_heads, head_dim, kwargs["sm_scale"])

    def run(self, q, paged_kv_cache, out=None):
        indptr, indices, heads, kv_heads, dim, scale = self.planned
        k_cache, v_cache = paged_kv_cache
        # NHD pages of one token: [pages, page_size = 1, kv_heads, head_dim]
        assert k_cache.shape == v_cache.shape == (indices.numel(), 1, kv_heads, dim)
        assert q.shape == (indptr.numel() - 1, heads, dim) and out.shape == q.shape
        self.runs += 1
        out.copy_(paged_attention(q, k_cache[:, 0], v_cache[:, 0], indptr, indices, scale))
        return out


def test_flashinfer_decode_is_planned_once_and_run(monkeypatch):
    FakeDecodeWrapper.made = []
    fake_module(monkeypatch, "flashinfer", BatchDecodeWithPagedKVCacheWrapper=FakeDecodeWrapper)
    p = point(batch=3, heads=8, kv_heads=2, impl="fa2")
    prepared = fi._decode_attention(p, device="cpu")
    out = prepared.run()
    assert out.shape == (3, 8, 16) and out.dtype == torch.bfloat16
    assert relative_error(out, prepared.reference()) < 1e-2
    (wrapper,) = FakeDecodeWrapper.made
    assert wrapper.backend == "fa2" and wrapper.use_tensor_cores is True  # group 4
    indptr, indices, heads, kv_heads, dim, scale = wrapper.planned
    assert indptr.tolist() == [0, 24, 48, 72] and indices.tolist() == list(range(72))
    assert (heads, kv_heads, dim, scale) == (8, 2, 16, 16**-0.5)
    assert [r().shape for r in prepared.variants(2)] == [(3, 8, 16)] * 2
    assert wrapper.runs == 3  # no re-plan for the other sets
    assert prepared.bytes == attention.bytes_moved(attention.geometry(p), 2)


def test_flashinfer_tensor_cores_as_sglang_picks_them():
    assert fi.use_tensor_cores(48, 8) is True  # the served model: 6 query heads per KV head
    assert fi.use_tensor_cores(8, 4) is False
    assert fi.use_tensor_cores(32, 32) is False


def test_flashinfer_decode_without_the_wrapper_is_unsupported(monkeypatch):
    fake_module(monkeypatch, "flashinfer", __version__="0.0.1")
    with pytest.raises(Unsupported, match="flashinfer 0.0.1 has no BatchDecodeWithPaged"):
        fi._decode_attention(point(impl="fa2"), device="cpu")


def test_flashinfer_decode_without_cuda_is_unsupported():
    with pytest.raises(Unsupported, match="no CUDA device"):
        fi.prepare(point(impl="fa2"), "cpu")


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("BatchDecodeWithPagedKVCache failed: head_dim 96 not supported"),
        NotImplementedError("fa3 is not available on sm_80"),
    ],
)
def test_flashinfer_refusals_are_unsupported(exc):
    assert fi.is_unsupported_error(exc)
