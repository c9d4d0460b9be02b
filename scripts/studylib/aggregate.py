"""All backends' sweeps -> the tidy sweep table and the support matrix."""

from __future__ import annotations

import pandas as pd

from .core.io import write_frame
from .core.table_registry import read_record, read_table
from .instruments.peaks import PEAK_FOR_DTYPE
from .serving.decode import SUMMARY_COLUMNS
from .stages.sweep.sweep_schema import STATUSES, SUPPORT_TABLE, SWEEPS

COLUMNS = list(SWEEPS.columns)

SUPPORT_COLUMNS = list(SUPPORT_TABLE.columns)


def load_sweeps(paths) -> pd.DataFrame:
    frames = [read_table("sweep", p) for p in paths]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    extra = [c for c in frame.columns if c not in COLUMNS]
    return frame[[c for c in COLUMNS if c in frame.columns] + extra]


def support_matrix(sweep: pd.DataFrame) -> pd.DataFrame:
    """backend × impl × op × dtype: how many points of each status, a verdict and a reason."""
    rows = []
    for (backend, impl, op, dtype), group in sweep.groupby(
        ["backend", "impl", "op", "dtype"], sort=True
    ):
        counts = {s: int((group["status"] == s).sum()) for s in STATUSES}
        if counts["ok"] == len(group):
            status = "ok"
        elif counts["ok"] > 0:
            status = "partial"
        else:
            status = max(("error", "mismatch", "unsupported"), key=lambda s: counts[s])
        failures = group[group["status"] != "ok"]
        reason = ""
        if len(failures):
            # The most common message, with its count when it is not the only one.
            top = failures["error"].value_counts()
            reason = top.index[0]
            if len(top) > 1:
                reason += f" (+{len(top) - 1} other messages)"
        rows.append(
            {"backend": backend, "impl": impl, "op": op, "dtype": dtype,
             "points": len(group), **counts, "status": status, "reason": reason}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=SUPPORT_COLUMNS)


def add_roofline(sweep: pd.DataFrame, peaks: dict) -> pd.DataFrame:
    """floor_us = max(FLOPs / peak[dtype], bytes / copy bandwidth); efficiency = floor / time.

    The time is the graph-replayed (kernel-only) median where there is one, else eager. A
    dtype whose peak could not be measured here gets the memory floor alone and says so.
    """
    sweep = sweep.copy()
    bandwidth = peaks.get("copy_gbps")
    compute_peak = sweep["dtype"].map(lambda d: peaks.get(PEAK_FOR_DTYPE.get(d, ""), None))
    compute_peak = pd.to_numeric(compute_peak, errors="coerce")
    compute_us = sweep["flops"] / (compute_peak * 1e12) * 1e6
    memory_us = sweep["bytes"] / (bandwidth * 1e9) * 1e6 if bandwidth else float("nan")
    sweep["compute_floor_us"] = compute_us
    sweep["memory_floor_us"] = memory_us
    sweep["floor_us"] = pd.concat(
        [compute_us, pd.Series(memory_us, index=sweep.index)], axis=1
    ).max(axis=1, skipna=True)
    sweep["floor_basis"] = (compute_us >= memory_us).map({True: "compute", False: "memory"})
    sweep.loc[compute_us.isna(), "floor_basis"] = "memory (no compute peak measured)"
    measured = sweep["graph_us"].where(sweep["graph_us"].notna(), sweep["eager_us"])
    sweep["efficiency"] = sweep["floor_us"] / measured
    not_timed = measured.isna()
    sweep.loc[not_timed, ["floor_basis"]] = ""
    sweep.loc[not_timed, ["efficiency"]] = float("nan")
    return sweep


def aggregate(sweep_paths, peaks_path, out_sweep_csv, out_support_csv) -> pd.DataFrame:
    sweep = add_roofline(load_sweeps(sweep_paths), read_record("peaks", peaks_path))
    write_frame(sweep, out_sweep_csv)
    write_frame(support_matrix(sweep), out_support_csv)
    return sweep


# --- decode ---------------------------------------------------------------------------------

#: Columns the decode table adds to the variants' summaries: the step's HBM floor.
DECODE_FLOOR_COLUMNS = ["hbm_floor_ms", "tpot_over_floor"]


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


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
