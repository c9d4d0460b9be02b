"""All backends' sweeps -> the tidy sweep table and the support matrix."""

from __future__ import annotations

import pandas as pd

from .io import write_frame
from .sweep import COLUMNS

STATUSES = ["ok", "unsupported", "error", "mismatch"]
SUPPORT_COLUMNS = ["backend", "impl", "op", "dtype", "points", *STATUSES, "status", "reason"]


def load_sweeps(paths) -> pd.DataFrame:
    frames = [pd.read_parquet(p) for p in paths]
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


def aggregate(sweep_paths, out_sweep_csv, out_support_csv) -> pd.DataFrame:
    sweep = load_sweeps(sweep_paths)
    write_frame(sweep, out_sweep_csv)
    write_frame(support_matrix(sweep), out_support_csv)
    return sweep
