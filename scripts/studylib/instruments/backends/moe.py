"""What every fused-MoE adapter shares: the layer's geometry, its routing, its weights, the
fp64 reference and the work it does. Each backend only calls its library's kernel.

A fused-MoE point is one MoE layer of a decode step: ``M`` tokens, ``G`` experts of which
each token picks ``top_k``, hidden size ``N`` and expert (intermediate) size ``K``, so its
shape is the expert's down projection (N x K) and its gate/up projection is 2K x N. One call
takes bf16 hidden states [M, N] and the routing, and returns the combined bf16 [M, N]:
gate/up GEMM, SiLU-and-multiply, down GEMM and the weighted sum over the chosen experts.

Routing:
``balanced``  token t picks experts (t * top_k + j) mod G: every expert gets M * top_k / G
              tokens, give or take one (what a perfectly balanced router does).
``recorded``  each token draws top_k distinct experts with the probabilities of a recorded
              expert histogram (``point["expert_shares"]``, from a decode run's recorder);
              the draw is seeded, so every backend and every rerun sees the same routing.
"""

from __future__ import annotations

from dataclasses import dataclass

from .backend_interface import Prepared, Unsupported, input_variants, require_cuda

ROUTINGS = ("balanced", "recorded")
FP8_MAX = 448.0
SEED = 1234


@dataclass(frozen=True)
class Geometry:
    tokens: int  # M
    experts: int  # G
    top_k: int
    hidden: int  # N
    inter: int  # K

    @classmethod
    def of(cls, point: dict) -> Geometry:
        return cls(tokens=point["M"], experts=point["G"], top_k=point["top_k"],
                   hidden=point["N"], inter=point["K"])  # fmt: skip


def expert_ids(point: dict, device: str):
    """[M, top_k] int32 expert ids of the point's routing."""
    import torch

    geo = Geometry.of(point)
    routing = point.get("routing")
    if routing == "balanced":
        t = torch.arange(geo.tokens, device=device)[:, None]
        j = torch.arange(geo.top_k, device=device)[None, :]
        return ((t * geo.top_k + j) % geo.experts).to(torch.int32)
    if routing == "recorded":
        shares = point.get("expert_shares")
        if not shares or len(shares) != geo.experts:
            raise Unsupported(
                f"recorded routing needs {geo.experts} expert shares, got "
                f"{len(shares) if shares else 0} (moe expert_histogram)"
            )
        generator = torch.Generator().manual_seed(SEED)
        probs = torch.tensor(shares, dtype=torch.float64).clamp(min=0)
        ids = torch.multinomial(probs.expand(geo.tokens, -1), geo.top_k, replacement=False,
                                generator=generator)  # fmt: skip
        return ids.to(device=device, dtype=torch.int32)
    raise Unsupported(f"unknown routing {routing!r}; known: {', '.join(ROUTINGS)}")


def routing(point: dict, device: str):
    """(expert ids [M, top_k] int32, routing weights [M, top_k] fp32 summing to 1)."""
    import torch

    ids = expert_ids(point, device)
    generator = torch.Generator(device=device).manual_seed(SEED)
    logits = torch.randn(ids.shape, device=device, generator=generator)
    return ids, torch.softmax(logits, dim=-1)


def tokens_per_expert(ids, experts: int):
    import torch

    return torch.bincount(ids.reshape(-1).long().cpu(), minlength=experts)


@dataclass
class Layer:
    """One layer's bf16 inputs: hidden states, gate / up [G, K, N] and down [G, N, K]."""

    x: object
    gate: object
    up: object
    down: object


def make_layer(geo: Geometry, device: str, seed: int = 0) -> Layer:
    """Random weights scaled so every stage stays O(1) (each set is distinct: cold mode)."""
    import torch

    generator = torch.Generator(device=device).manual_seed(SEED + seed)

    def randn(*shape, scale=1.0):
        out = torch.empty(shape, device=device, dtype=torch.bfloat16)
        return out.normal_(0.0, scale, generator=generator)

    return Layer(
        x=randn(geo.tokens, geo.hidden),
        gate=randn(geo.experts, geo.inter, geo.hidden, scale=geo.hidden**-0.5),
        up=randn(geo.experts, geo.inter, geo.hidden, scale=geo.hidden**-0.5),
        down=randn(geo.experts, geo.hidden, geo.inter, scale=geo.inter**-0.5),
    )


def inputs_only(layer: Layer) -> Layer:
    """The layer without its bf16 weights, for an FP8 point once they are quantised: its
    check reads the quantised ones (:class:`Dequantized`), and the bf16 copies of 256
    experts (18 GiB) would stay beside them for nothing."""
    return Layer(x=layer.x, gate=None, up=None, down=None)


def quantize_experts(w):
    """bf16 [G, R, C] -> (float8_e4m3fn, fp32 [G] per-expert scale): per-tensor per expert,
    as SGLang's FP8 MoE quantises bf16 weights."""
    import torch

    q = torch.empty(w.shape, device=w.device, dtype=torch.float8_e4m3fn)
    scale = torch.empty(w.shape[0], device=w.device, dtype=torch.float32)
    for e in range(w.shape[0]):  # expert by expert: fp32 copies of 256 experts are ~40 GB
        we = w[e].float()
        scale[e] = (we.abs().amax() / FP8_MAX).clamp(min=1e-12)
        q[e] = (we / scale[e]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


class Dequantized:
    """FP8 experts read back one at a time, as :func:`reference` takes only the chosen ones:
    rows ``rows`` of each expert of ``q`` times its scale (per expert ``[G]``, or per row
    ``[G, R]``), in bf16, the values a whole dequantised copy would hold. That copy is not
    made: the fp32 one of 256 experts' gate and up rows is 24 GiB, which an 80-GB H100
    holding the layer did not have (2026-12-06: every FP8 fused-MoE point of sgl-kernel's)."""

    def __init__(self, q, scale, rows: slice = slice(None)):
        self.q, self.scale, self.rows = q, scale, rows

    def __getitem__(self, expert: int):
        import torch

        scale = self.scale[expert]
        scale = scale if scale.dim() == 0 else scale[self.rows, None]
        return (self.q[expert][self.rows].float() * scale).to(torch.bfloat16)


def reference(x, gate, up, down, ids, weights):
    """fp64 MoE layer on the (dequantised) weights, expert by expert (only the chosen ones)."""
    import torch

    x64 = x.double()
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)  # down: hidden x inter
    flat = ids.long()
    for e in torch.unique(flat).tolist():
        token, slot = torch.nonzero(flat == e, as_tuple=True)
        h = x64[token]
        act = torch.nn.functional.silu(h @ gate[e].double().t()) * (h @ up[e].double().t())
        y = act @ down[e].double().t()
        out.index_add_(0, token, y * weights[token, slot].double()[:, None])
    return out


def layer_reference(layer: Layer, ids, weights, fp8_experts=None, up_first: bool = False):
    """A fused-MoE point's check: :func:`reference` on ``layer``'s bf16 weights, or, with
    ``fp8_experts`` = ``(q13, s13, q2, s2)``, on the FP8 experts the kernel read (``q13``'s
    rows gate then up, as SGLang and torch lay them; ``up_first`` for FlashInfer's up then
    gate), read back one expert at a time (:class:`Dequantized`)."""
    if fp8_experts is None:
        return reference(layer.x, layer.gate, layer.up, layer.down, ids, weights)
    q13, s13, q2, s2 = fp8_experts
    half = q13.shape[1] // 2
    first, second = slice(None, half), slice(half, None)
    gate_rows, up_rows = (second, first) if up_first else (first, second)
    gate, up = Dequantized(q13, s13, gate_rows), Dequantized(q13, s13, up_rows)
    return reference(layer.x, gate, up, Dequantized(q2, s2), ids, weights)


def work(point: dict, ids, weight_bits: float, act_bits: float = 16) -> tuple[float, float]:
    """(flops, fewest bytes): three GEMMs per routed token, and every chosen expert's
    weights read once plus the hidden states in and out."""
    geo = Geometry.of(point)
    routed = geo.tokens * geo.top_k
    flops = 2.0 * routed * 3 * geo.hidden * geo.inter
    active = int((tokens_per_expert(ids, geo.experts) > 0).sum())
    weights = active * 3 * geo.hidden * geo.inter * weight_bits / 8
    activations = 2 * geo.tokens * geo.hidden * act_bits / 8
    return flops, weights + activations


def require_moe_cuda(point: dict, device: str) -> Geometry:
    require_cuda(device)
    geo = Geometry.of(point)
    if geo.top_k > geo.experts:
        raise Unsupported(f"top_k {geo.top_k} exceeds the {geo.experts} experts")
    return geo


def prepared(point: dict, ids, fp8: bool, make, call, args, reference, extra=None) -> Prepared:
    """A fused-MoE point's :class:`Prepared`: ``call(*args)`` runs the layer once,
    ``make(seed)`` builds another input set (``(layer, args)``) for cold mode."""

    variants = input_variants(lambda seed: make(seed)[1], call)

    flops, moved = work(point, ids, 8 if fp8 else 16)
    return Prepared(run=lambda: call(*args), reference=reference, flops=flops, bytes=moved,
                    variants=variants, extra=extra or {})  # fmt: skip
