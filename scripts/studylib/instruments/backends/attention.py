"""Decode attention, shared by the adapters' ``decode_attention`` ops: the geometry of a point,
its work and bytes, the inputs, and the fp64 reference.

One decode step's attention at batch B: each of the B requests has one new query token of
``heads`` query heads and attends over ``context`` cached tokens of ``kv_heads`` KV heads
(grouped-query attention: query head h reads KV head h // (heads / kv_heads)). The point's
M is B; N = heads x head_dim and K = context (config/README.md, shape kind ``attention``).

The KV cache every op reads is built here, token-major ``[B, context, kv_heads, head_dim]``.
The paged ops (SGLang's Triton kernel, FlashInfer; page size 1) read it from a pool of
``B x context`` slots through a slot table (``pool_slots``). By default request b's tokens
are slots b x context ... (b + 1) x context - 1, each request's tokens contiguous. With
``interleaved`` = n (an attention shape's optional key), each request's last n tokens lie
as a server in lockstep decode allocates them, one slot per running request per step: token
j of the n sits at slot B x (context - n) + j x B + b, after the requests' contiguous
prompts. On the H200 (2026-12-01) SGLang's kernel in the server took 1.6x the sweep's at
B = 256 and 1.07-1.14x at B = 16 and 64; the interleaved layout is the hypothesis under
test. The
torch baseline keeps its own dense ``[B, kv_heads, context, head_dim]`` cache (no layout).
"""

from __future__ import annotations

from dataclasses import dataclass

from .backend_interface import Prepared, Unsupported, input_variants

#: What an attention shape gives (config kind: attention), carried by its points beyond M, N
#: and K (plan.expand_points).
KEYS = ("heads", "kv_heads", "head_dim", "context")
#: Keys an attention shape may add: the last tokens of each request laid out as decode
#: allocates them (module docstring); absent or 0 is the contiguous layout.
OPTIONAL_KEYS = ("interleaved",)
#: Every key an attention shape may give its points.
POINT_KEYS = (*KEYS, *OPTIONAL_KEYS)


@dataclass(frozen=True)
class Geometry:
    batch: int
    heads: int
    kv_heads: int
    head_dim: int
    context: int
    interleaved: int = 0

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.heads // self.kv_heads

    @property
    def sm_scale(self) -> float:
        return self.head_dim**-0.5

    @property
    def tokens(self) -> int:
        """KV tokens of the whole batch (the paged pool's slots)."""
        return self.batch * self.context


def geometry(point: dict) -> Geometry:
    """The point's geometry; Unsupported when it is not an attention point."""
    missing = [key for key in KEYS if point.get(key) is None]
    if missing:
        raise Unsupported(
            f"{point.get('op')} needs an attention shape (kind: attention); point "
            f"{point.get('shape')!r} has no {', '.join(missing)}"
        )
    interleaved = int(point.get("interleaved") or 0)
    geo = Geometry(int(point["M"]), *(int(point[key]) for key in KEYS), interleaved)
    if geo.heads % geo.kv_heads:
        raise Unsupported(f"heads ({geo.heads}) is not a multiple of kv_heads ({geo.kv_heads})")
    if not 0 <= interleaved <= geo.context:
        raise Unsupported(f"interleaved ({interleaved}) is not between 0 and the context "
                          f"({geo.context})")  # fmt: skip
    return geo


def pool_slots(geo: Geometry):
    """The slot of each request's each token, request by request (int64, B x context): the
    paged ops' slot table (module docstring)."""
    import torch

    request = torch.arange(geo.batch).unsqueeze(1)
    token = torch.arange(geo.context).unsqueeze(0)
    prompt = geo.context - geo.interleaved
    slots = torch.where(token < prompt, request * prompt + token,
                        geo.batch * prompt + (token - prompt) * geo.batch + request)  # fmt: skip
    return slots.reshape(-1)


def paged_pool(geo: Geometry, cache, slots):
    """The pool ``[B x context, kv_heads, head_dim]`` holding token-major ``cache`` at
    ``slots``: a view of it when the layout is contiguous, else a copy laid out."""
    flat = cache.reshape(geo.tokens, geo.kv_heads, geo.head_dim)
    if not geo.interleaved:
        return flat
    pool = flat.new_empty(flat.shape)
    pool[slots.to(flat.device)] = flat
    return pool


def flops(geo: Geometry) -> float:
    """QK^T and PV: 2 x 2 x B x heads x context x head_dim."""
    return 4.0 * geo.batch * geo.heads * geo.context * geo.head_dim


def kv_bytes(geo: Geometry, elem_bytes: int) -> float:
    """The K and V cache, read once."""
    return 2.0 * geo.tokens * geo.kv_heads * geo.head_dim * elem_bytes


def bytes_moved(geo: Geometry, elem_bytes: int) -> float:
    """The KV cache read once, the queries read and the output written."""
    q_and_out = 2.0 * geo.batch * geo.heads * geo.head_dim * elem_bytes
    return kv_bytes(geo, elem_bytes) + q_and_out


def make_inputs(geo: Geometry, device: str, dtype, seed: int):
    """q ``[B, heads, head_dim]`` and token-major k, v ``[B, context, kv_heads, head_dim]``,
    standard normal in ``dtype`` (scores then have unit variance after the 1/sqrt(d) scale)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)

    q = randn(geo.batch, geo.heads, geo.head_dim)
    k = randn(geo.batch, geo.context, geo.kv_heads, geo.head_dim)
    v = randn(geo.batch, geo.context, geo.kv_heads, geo.head_dim)
    return q, k, v


def reference(q, k, v, sm_scale: float):
    """fp64 softmax attention: q ``[B, heads, D]`` over token-major k, v ``[B, L, kv_heads,
    D]``, query head h on KV head h // group -> ``[B, heads, D]``."""
    import torch

    batch, heads, dim = q.shape
    kv_heads = k.shape[2]
    qd = q.double().reshape(batch, kv_heads, heads // kv_heads, dim)
    kd = k.double().permute(0, 2, 1, 3)  # [B, kv_heads, L, D]
    vd = v.double().permute(0, 2, 1, 3)
    scores = (qd @ kd.transpose(-2, -1)) * sm_scale  # [B, kv_heads, group, L]
    out = torch.softmax(scores, dim=-1) @ vd  # [B, kv_heads, group, D]
    return out.reshape(batch, heads, dim)


def paged_prepared(geo: Geometry, make, call, extra: dict) -> Prepared:
    """The Prepared of a paged-pool op (SGLang's Triton kernel, FlashInfer): ``make(seed)``
    returns ``call``'s arguments, the query first and the token-major ``(k, v)`` the pool
    was built from last (for the reference); ``variants`` builds sets from seeds 1, 2, ...
    Both ops read bf16."""
    args = make(0)

    def ref():
        q, *_, (k, v) = args
        return reference(q, k, v, geo.sm_scale)

    variants = input_variants(make, call)

    return Prepared(run=lambda: call(*args), reference=ref, flops=flops(geo),
                    bytes=bytes_moved(geo, 2), variants=variants, extra=extra)  # fmt: skip
