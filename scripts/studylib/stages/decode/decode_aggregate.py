"""Every variant's decode results -> the decode table (with the step's HBM floor), the
per-expert M table and the recorder table (rule aggregate_decode)."""

from __future__ import annotations

import pandas as pd

from .decode_schema import SUMMARY_COLUMNS


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=columns)
    # Every frame's columns in their order; a column empty in one frame (a variant without
    # the recorder) takes its kind from the frames that have values, not from its NaNs.
    order = list(dict.fromkeys(c for f in frames for c in f.columns))
    kept = [f.dropna(axis=1, how="all") for f in frames]
    return pd.concat(kept, ignore_index=True).reindex(columns=order)


def decode_table(summaries: list[pd.DataFrame], peaks: dict | None) -> pd.DataFrame:
    """Every variant's summary rows, with TPOT against the step's HBM floor: the bytes one
    decode step must read (``step_gb``: weights of the experts the routing touches,
    attention, lm_head, KV cache) over the measured copy bandwidth of the job's GPUs. A
    tensor-parallel server splits every one of those tensors over its ranks, which read
    their shares at once: the floor divides by the GPU count."""
    table = _concat(summaries, SUMMARY_COLUMNS)
    gbps = (peaks or {}).get("copy_gbps") if (peaks or {}).get("device") == "cuda" else None
    step_gb = pd.to_numeric(table.get("step_gb"), errors="coerce")
    gpus = pd.to_numeric(table.get("gpus"), errors="coerce").fillna(1).clip(lower=1)
    table["hbm_floor_ms"] = 1e3 * step_gb / (gbps * gpus) if gbps else float("nan")
    table["tpot_over_floor"] = (
        pd.to_numeric(table["tpot_ms"], errors="coerce") / table["hbm_floor_ms"]
    )
    return table


def with_variant(frames: dict[str, pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    """Per-variant tables (expert M, recorder cost) in one, with a ``variant`` column first."""
    out = []
    for variant, frame in frames.items():
        if not frame.empty:
            frame = frame.drop(columns=["variant"], errors="ignore")
            frame.insert(0, "variant", variant)
            out.append(frame)
    return _concat(out, ["variant", *[c for c in columns if c != "variant"]])
