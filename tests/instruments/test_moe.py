"""The fused-MoE points' shared pieces (routing, reference, work) on the CPU."""

import pytest

torch = pytest.importorskip("torch")

from studylib.instruments.backends import moe  # noqa: E402
from studylib.instruments.backends.backend_interface import Unsupported  # noqa: E402
from studylib.instruments.timing import MAX_GRAPH_CALLS, cold_rounds, graph_calls, replay_target_us  # noqa: E402


def point(tokens, routing="balanced", experts=16, top_k=4, shares=None):
    p = {"M": tokens, "G": experts, "top_k": top_k, "N": 32, "K": 16, "routing": routing}
    if shares is not None:
        p["expert_shares"] = shares
    return p


@pytest.mark.parametrize("tokens", [1, 3, 4, 17, 64])
def test_balanced_routing_spreads_tokens_evenly(tokens):
    ids = moe.expert_ids(point(tokens), "cpu")
    assert ids.shape == (tokens, 4) and ids.dtype == torch.int32
    # Each token's experts are distinct, and no two experts' loads differ by more than one.
    assert all(len(set(row)) == 4 for row in ids.tolist())
    loads = moe.tokens_per_expert(ids, 16)
    assert int(loads.sum()) == tokens * 4
    assert int(loads.max() - loads.min()) <= 1


def test_recorded_routing_follows_the_shares_and_is_seeded():
    shares = [0.5] + [0.5 / 15] * 15
    p = point(512, "recorded", shares=shares)
    ids = moe.expert_ids(p, "cpu")
    assert torch.equal(ids, moe.expert_ids(p, "cpu"))  # every backend sees the same routing
    assert all(len(set(row)) == 4 for row in ids.tolist())
    loads = moe.tokens_per_expert(ids, 16)
    # Expert 0 holds half the probability, so it is drawn into nearly every token's 4.
    assert loads[0] > 400 and loads[0] > 4 * loads[1:].float().mean()


def test_recorded_routing_without_shares_is_unsupported():
    with pytest.raises(Unsupported, match="needs 16 expert shares"):
        moe.expert_ids(point(4, "recorded", shares=[1.0] * 8), "cpu")
    with pytest.raises(Unsupported, match="unknown routing"):
        moe.expert_ids(point(4, "zipf"), "cpu")


def test_routing_weights_sum_to_one():
    _, weights = moe.routing(point(8), "cpu")
    assert torch.allclose(weights.sum(-1), torch.ones(8))


def test_reference_is_the_weighted_sum_of_each_chosen_expert():
    geo = moe.Geometry(tokens=5, experts=16, top_k=4, hidden=32, inter=16)
    layer = moe.make_layer(geo, "cpu")
    ids, weights = moe.routing(point(5), "cpu")
    got = moe.reference(layer.x, layer.gate, layer.up, layer.down, ids, weights)
    assert torch.equal(moe.layer_reference(layer, ids, weights), got)
    x = layer.x.double()
    for t in range(5):
        want = sum(
            weights[t, j].double()
            * (
                torch.nn.functional.silu(layer.gate[e].double() @ x[t])
                * (layer.up[e].double() @ x[t])
            )
            @ layer.down[e].double().t()
            for j, e in enumerate(ids[t].tolist())
        )
        assert torch.allclose(got[t], want)


def test_work_counts_three_gemms_per_routed_token_and_active_experts_once():
    p = point(2)  # 2 tokens x top-4 over 16 experts: 8 active experts
    ids, _ = moe.routing(p, "cpu")
    flops, moved = moe.work(p, ids, weight_bits=16)
    assert flops == 2.0 * 2 * 4 * 3 * 32 * 16
    assert moved == 8 * 3 * 32 * 16 * 2 + 2 * 2 * 32 * 2


def test_fp8_expert_quantisation_round_trips_within_fp8_precision():
    w = torch.randn(3, 8, 16).to(torch.bfloat16)
    q, scale = moe.quantize_experts(w)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (3,)
    back = torch.stack([moe.Dequantized(q, scale)[e] for e in range(3)]).float()
    assert torch.nn.functional.cosine_similarity(back.flatten(), w.float().flatten(), 0) > 0.999


def test_fp8_experts_read_back_one_at_a_time_give_the_whole_copys_reference():
    # The FP8 points' check without a whole fp32 copy of the experts (24 GiB at 256 experts).
    geo = moe.Geometry(tokens=5, experts=16, top_k=4, hidden=32, inter=16)
    layer = moe.make_layer(geo, "cpu")
    ids, weights = moe.routing(point(5), "cpu")
    q13, s13 = moe.quantize_experts(torch.cat([layer.gate, layer.up], dim=1))
    q2, s2 = moe.quantize_experts(layer.down)
    # the whole copies the backends made before
    w13 = (q13.float() * s13[:, None, None]).to(torch.bfloat16)
    down = (q2.float() * s2[:, None, None]).to(torch.bfloat16)
    want = moe.reference(layer.x, w13[:, :16], w13[:, 16:], down, ids, weights)
    gate, up = (
        moe.Dequantized(q13, s13, slice(None, 16)),
        moe.Dequantized(q13, s13, slice(16, None)),
    )
    got = moe.reference(layer.x, gate, up, moe.Dequantized(q2, s2), ids, weights)
    assert torch.equal(got, want)
    assert torch.equal(moe.layer_reference(layer, ids, weights, (q13, s13, q2, s2)), want)
    # FlashInfer's [up; gate] rows: the same layer checked with its halves swapped back
    q31, s31 = moe.quantize_experts(torch.cat([layer.up, layer.gate], dim=1))
    flashinfer = moe.layer_reference(layer, ids, weights, (q31, s31, q2, s2), up_first=True)
    assert torch.equal(flashinfer, want)
    assert not torch.equal(moe.layer_reference(layer, ids, weights, (q31, s31, q2, s2)), want)
    rows = torch.rand(16, 32) + 0.5  # per-row scales (torch's rowwise FP8)
    assert torch.equal(moe.Dequantized(q13, rows, slice(16, None))[3],
                       (q13[3, 16:].float() * rows[3, 16:, None]).to(torch.bfloat16))  # fmt: skip


@pytest.mark.parametrize(
    "us, calls", [(0.5, MAX_GRAPH_CALLS), (2.0, 500), (3.0, 334), (1000.0, 1), (5000.0, 1)]
)
def test_graph_calls_make_a_replay_last_the_target(us, calls):
    assert graph_calls(us) == calls
    # Whatever the kernel, a replay lasts at least the target unless the call cap stops it.
    assert graph_calls(us) * us >= 1000.0 or graph_calls(us) == MAX_GRAPH_CALLS


def test_graph_calls_of_an_unmeasured_kernel_take_the_cap():
    assert graph_calls(0.0) == MAX_GRAPH_CALLS
    assert cold_rounds(250.0) == 4  # 4 passes over every input set of 250 us
    assert replay_target_us(5.0) == 1000.0 and replay_target_us(20.0) == 2000.0


def test_flashinfer_moe_tactics_are_tuned_at_the_points_tokens(monkeypatch):
    # The fused MoE runs once under FlashInfer's autotuner, profiling exactly the point's
    # token count (as a server warms up), before any timed call; without an autotuner in
    # the installed flashinfer, the default tactic is used and said so.
    import contextlib
    import sys
    import types

    from studylib.instruments.backends.flashinfer_backend import tune_tactics

    entered, calls = [], []

    @contextlib.contextmanager
    def autotune(tune_mode=True, tuning_buckets=None):
        entered.append((tune_mode, tuning_buckets))
        yield
        entered.append("exit")

    package = types.ModuleType("flashinfer")
    package.__path__ = []
    tuner = types.ModuleType("flashinfer.autotuner")
    tuner.autotune = autotune
    monkeypatch.setitem(sys.modules, "flashinfer", package)
    monkeypatch.setitem(sys.modules, "flashinfer.autotuner", tuner)
    assert tune_tactics(lambda: calls.append(entered[-1]), 64) == "autotuned"
    assert entered == [(True, (64,)), "exit"] and calls == [(True, (64,))]

    monkeypatch.setitem(sys.modules, "flashinfer.autotuner", None)  # no autotuner: ImportError
    assert tune_tactics(lambda: calls.append("untuned"), 64) == "default"
    assert calls == [(True, (64,))]  # nothing run: the timed calls use the default tactic


def test_flashinfer_moe_without_its_module_is_unsupported_at_once(monkeypatch, tmp_path):
    # A fresh box: FlashInfer's sm_90 MoE module neither installed ahead of time nor in its
    # JIT cache. The point is unsupported at once (its first call would build for hours),
    # naming the module, where it was looked for and the build; installed (AOT) or cached
    # (JIT), the point runs; an arch FlashInfer has no module for is left to the library.
    import sys
    import types

    from studylib.instruments.backends.flashinfer_backend import moe_module_missing

    made = []

    class Spec:  # flashinfer.jit.core.JitSpec's properties the check reads
        name = "fused_moe_90"
        aot_path = tmp_path / "aot" / "fused_moe_90" / "fused_moe_90.so"
        jit_library_path = tmp_path / "cache" / "fused_moe_90" / "fused_moe_90.so"

        @property
        def is_aot(self):
            return self.aot_path.exists()

    jit = types.ModuleType("flashinfer.jit.fused_moe")
    jit.gen_cutlass_fused_moe_sm90_module = lambda: made.append("sm90") or Spec()
    package = types.ModuleType("flashinfer.jit")
    package.__path__, package.fused_moe = [], jit
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.setitem(sys.modules, "flashinfer.jit", package)
    monkeypatch.setitem(sys.modules, "flashinfer.jit.fused_moe", jit)

    why = moe_module_missing("90")
    assert made == ["sm90"]
    assert "fused_moe_90 is not built on this machine" in why
    assert str(tmp_path / "cache" / "fused_moe_90") in why and str(tmp_path / "aot") in why
    assert "tools/prebuild_flashinfer_moe.py" in why and "make sweep BACKEND=flashinfer" in why
    for built in (Spec.jit_library_path, Spec.aot_path):
        built.parent.mkdir(parents=True)
        built.write_bytes(b"\x7fELF")
        assert moe_module_missing("90") is None
        built.unlink()
    assert moe_module_missing("80") is None and made == ["sm90"] * 3
