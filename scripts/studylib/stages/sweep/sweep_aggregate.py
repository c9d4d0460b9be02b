"""All backends' sweeps -> the tidy sweep table and the support matrix."""

from __future__ import annotations

import pandas as pd

from ...core.io import write_frame
from ...core.table_registry import read_record, read_table
from ...instruments.peaks import PEAK_FOR_DTYPE
from ...instruments.timing import median_ci_pct
from .sweep_schema import PRECISION, STATUSES, SUPPORT_TABLE, SWEEPS

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


def add_precision(sweep: pd.DataFrame) -> pd.DataFrame:
    """Each timing mode's precision: the 95 % interval of its median, in percent
    (``{mode}_ci_pct``, instruments.timing.median_ci_pct), from the IQR and samples the row
    keeps: how far the stopping rule got before it stopped."""
    sweep = sweep.copy()
    for column in PRECISION:
        mode = column.removesuffix("_ci_pct")
        parts = [sweep.get(f"{mode}{k}") for k in ("_iqr_us", "_us", "_samples")]
        if any(part is None for part in parts):
            sweep[column] = float("nan")
            continue
        sweep[column] = [median_ci_pct(*values) for values in zip(*parts, strict=True)]
    return sweep


def aggregate(sweep_paths, peaks_path, out_sweep_csv, out_support_csv) -> pd.DataFrame:
    """The sweep table and the support matrix (the rankings per size, ``tables/fastest.csv``,
    are rule answers': they need the comparison with a baseline, made after this)."""
    sweep = add_roofline(load_sweeps(sweep_paths), read_record("peaks", peaks_path))
    sweep = add_precision(sweep)
    write_frame(sweep, out_sweep_csv)
    write_frame(support_matrix(sweep), out_support_csv)
    return sweep
