"""SGLang's expert-distribution record -> per-layer per-expert token counts and per-expert M.

In ``stat`` mode SGLang accumulates, per layer, how many tokens were routed to each logical
expert between ``/start_expert_distribution_record`` and ``/stop_…``; ``/dump_…`` writes the
record (a dict whose ``logical_count`` is a [..., layers, experts] tensor) into the folder
named by ``SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR``. The study sets that folder per run and
reads the file back. The per-expert M of a decode step at concurrency C with top-k routing is
C × top_k × (expert's share of the layer's routed tokens); perfect balance would give every
expert C × top_k / experts (512 × 8 / 256 = 16 in the seed).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

log = logging.getLogger("study.decode")

RECORDER_DIR_ENV = "SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR"
EXPERT_M_COLUMNS = ["concurrency", "layer", "expert", "tokens", "share", "m", "balanced_m"]
#: Per expert-parallel rank: the share of a layer's routed tokens its experts receive.
RANK_LOAD_COLUMNS = ["variant", "concurrency", "layer", "rank", "experts", "tokens", "share",
                     "balanced_share", "over_balanced"]  # fmt: skip


def load_logical_count(source) -> list[list[float]]:
    """[layers][experts] token counts from a dump: a dict (JSON answer) or a .pt file."""
    if isinstance(source, str | Path):
        import torch

        record = torch.load(source, map_location="cpu", weights_only=False)
    else:
        record = source
    counts = record["logical_count"]
    try:
        import torch

        if isinstance(counts, torch.Tensor):
            while counts.dim() > 2:  # leading dims (ranks, buffered passes): sum them
                counts = counts.sum(0)
            counts = counts.tolist()
    except ImportError:
        pass
    return [[float(v) for v in layer] for layer in counts]


def expert_m(counts: list[list[float]], concurrency: int, top_k: int) -> pd.DataFrame:
    """One row per (layer, expert): routed tokens, share of the layer, per-step M and the
    balanced M for comparison."""
    rows = []
    for layer, per_expert in enumerate(counts):
        total = sum(per_expert)
        experts = len(per_expert)
        balanced = concurrency * top_k / experts
        for expert, tokens in enumerate(per_expert):
            share = tokens / total if total else float("nan")
            rows.append({"layer": layer, "expert": expert, "tokens": tokens, "share": share,
                         "m": concurrency * top_k * share, "balanced_m": balanced})  # fmt: skip
    return pd.DataFrame(rows)


def rank_loads(expert_m: pd.DataFrame, ep_by_variant: dict[str, int]) -> pd.DataFrame:
    """Per variant with expert parallelism (EP > 1), concurrency, layer and rank: the routed
    tokens that rank's experts receive, their share of the layer's, and that share over the
    balanced 1 / EP.

    SGLang's stat recorder sums every rank's counts into one logical histogram (rank 0 writes
    it), so the per-rank load comes from expert ownership: with its default (trivial) expert
    placement and no redundant experts, rank r of EP holds the contiguous block of experts
    r × E / EP … (r + 1) × E / EP − 1. Under tensor parallelism alone every rank computes a
    slice of every expert, so the ranks' loads are equal by construction: no rows."""
    rows = []
    if expert_m is None or expert_m.empty:
        return pd.DataFrame(columns=RANK_LOAD_COLUMNS)
    for (variant, c, layer), g in expert_m.groupby(["variant", "concurrency", "layer"]):
        ep = int(ep_by_variant.get(variant) or 1)
        experts = int(g["expert"].max()) + 1
        if ep <= 1 or experts % ep:
            continue
        per_rank = experts // ep
        total = float(g["tokens"].sum())
        by_rank = g.groupby(g["expert"] // per_rank)["tokens"].sum()
        for rank in range(ep):
            tokens = float(by_rank.get(rank, 0.0))
            share = tokens / total if total else float("nan")
            rows.append({"variant": variant, "concurrency": c, "layer": layer, "rank": rank,
                         "experts": per_rank, "tokens": tokens, "share": share,
                         "balanced_share": 1 / ep, "over_balanced": share * ep})  # fmt: skip
    return pd.DataFrame(rows, columns=RANK_LOAD_COLUMNS)


def read_counts(dump, new_files, c: int):
    """Per-layer per-expert counts from the record file the dump wrote (or from the dump's
    answer itself), or None with a warning: the decode results stand without them."""
    source = None
    if isinstance(dump, dict) and "logical_count" in dump:
        source = dump
    elif new_files:
        source = [f for f in new_files if f.suffix == ".pt"][-1:] or new_files[-1:]
        source = source[0]
    if source is None:
        log.warning("C=%d: the expert-distribution dump gave no counts: %s", c, dump)
        return None
    try:
        return load_logical_count(source)
    except Exception as exc:  # noqa: BLE001 - the decode results stand without it
        log.warning("C=%d: cannot read the expert distribution record: %s", c, exc)
        return None
