"""The one ranking rule of the study: which implementation is fastest at a size, and when two
are a tie. Question 1's findings, the report's "Fastest per size" table and the before/after
comparison all rank with it."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ...core.finding_records import _impl_label, _numeric, num_of, text_of

#: The time every ranking uses, in order of preference: cold (weights streamed from HBM on
#: every call, as a serving step reads them), else graph (kernel time, weights L2-resident
#: where they fit), else eager (launch cost included: CPU runs).
RANK_COLUMNS = ("cold_us", "graph_us", "eager_us")
#: Two implementations whose times differ by at most the larger of their IQRs or this share
#: of the faster one are a tie, named as one.
TIE_SHARE = 0.03
RANK_RULE = (
    "ranked by cold time (weights streamed from HBM on every call, as in decode) where "
    "measured, else graph, else eager; times within the larger of their IQRs or "
    f"{TIE_SHARE:.0%} of the faster are a tie, named as one (A = B)"
)


SWEEP_NUMERIC = (
    "M", "N", "K", "G", "eager_us", "graph_us", "cold_us", "floor_us", "flops", "bytes",
    "launch_overhead_us", "efficiency", "tflops", "rel_err",
)  # fmt: skip


def _prep_sweep(sweep: pd.DataFrame) -> pd.DataFrame:
    df = _numeric(sweep, *SWEEP_NUMERIC)
    for c in ("backend", "impl", "op", "dtype", "shape", "status", "error", "floor_basis"):
        if c not in df.columns:
            df[c] = ""
        df[c] = df[c].map(text_of)
    if "G" not in df.columns:
        df["G"] = float("nan")
    for c in ("eager_us", "graph_us", "cold_us", "floor_us", "flops"):
        if c not in df.columns:
            df[c] = float("nan")
    return df


def _time_basis(rows: pd.DataFrame) -> str:
    """The first of :data:`RANK_COLUMNS` that every row has."""
    for column in RANK_COLUMNS[:-1]:
        if len(rows) and column in rows.columns and rows[column].notna().all():
            return column
    return RANK_COLUMNS[-1]


def fastest(rows: pd.DataFrame, column: str, label=None) -> tuple[list[str], pd.Series] | None:
    """The fastest of ``rows`` by ``column`` and every row tied with it (see
    :data:`TIE_SHARE`): (labels of the tied, fastest first; the fastest row)."""
    label = label or _impl_label
    rows = rows[pd.to_numeric(rows[column], errors="coerce") > 0].reset_index(drop=True)
    if rows.empty:
        return None
    times = pd.to_numeric(rows[column])
    iqr_column = column.replace("_us", "_iqr_us")
    iqrs = (
        pd.to_numeric(rows[iqr_column], errors="coerce").fillna(0.0)
        if iqr_column in rows.columns
        else pd.Series(0.0, index=rows.index)
    )
    best = times.idxmin()
    t0, iqr0 = float(times[best]), float(iqrs[best])
    tied = [i for i in times.sort_values().index
            if times[i] - t0 <= max(iqr0, float(iqrs[i]), TIE_SHARE * t0)]  # fmt: skip
    names = list(dict.fromkeys(label(rows.loc[i]) for i in tied))
    return names, rows.loc[best]


def _mode(column: str) -> str:
    return {"graph_us": "graph", "eager_us": "eager", "cold_us": "cold"}[column]


def fastest_per_size(sweep: pd.DataFrame) -> dict[str, Any] | None:
    """Per (dtype, shape) of single GEMMs (and decode attention, whose M is the batch) and M:
    the fastest implementations under :data:`RANK_RULE` (ties named together), the basis, and
    the fastest's eager, graph and cold times. ``{"ms": [...], "rows": [{"dtype", "shape",
    "basis", "contenders", "cells": {M: {"who": [...], "backend", "op", "us", "eager_us",
    "graph_us", "cold_us"}}}]}``.
    """
    need = {"status", "eager_us", "dtype", "shape", "M", "backend", "impl"}
    if sweep is None or sweep.empty or not need <= set(sweep.columns):
        return None
    good = _prep_sweep(sweep)
    good = good[(good["status"] == "ok") & (good["eager_us"] > 0)]
    if "G" in good.columns:
        good = good[good["G"].isna()]  # grouped rows' M is tokens per expert: another axis
    if good.empty:
        return None

    def who(row) -> str:
        return f"{text_of(row['backend'])}/{text_of(row['impl'])}"

    rows, ms = [], set()
    for (dtype, shape), group in good.groupby(["dtype", "shape"], sort=True):
        basis = _time_basis(group)
        cells = {}
        for m, at_m in group.groupby("M"):
            won = fastest(at_m, basis, label=who)
            if won is None:
                continue
            names, best = won
            cells[int(m)] = {"who": names, "backend": text_of(best["backend"]),
                             "op": text_of(best.get("op")), "us": float(best[basis]),
                             **{c: num_of(best.get(c)) for c in RANK_COLUMNS}}  # fmt: skip
            ms.add(int(m))
        rows.append({"dtype": dtype, "shape": shape, "basis": _mode(basis),
                     "contenders": group[["backend", "impl"]].drop_duplicates().shape[0],
                     "cells": cells})  # fmt: skip
    return {"ms": sorted(ms), "rows": rows, "rule": RANK_RULE}


#: tables/fastest.csv: one row per (dtype, shape, M) of :func:`fastest_per_size`.
FASTEST_COLUMNS = ["dtype", "shape", "M", "basis", "contenders", "who", "backend", "op", "us",
                   *RANK_COLUMNS]  # fmt: skip


def fastest_frame(sweep: pd.DataFrame | None) -> pd.DataFrame:
    """:func:`fastest_per_size` as a table (``who``: the tied fastest, " = " between them),
    written by the aggregate rule so the report reads it rather than ranking again."""
    ranked = fastest_per_size(sweep)
    rows = []
    for row in (ranked or {}).get("rows", []):
        for m, cell in sorted(row["cells"].items()):
            rows.append({"dtype": row["dtype"], "shape": row["shape"], "M": m,
                         "basis": row["basis"], "contenders": row["contenders"],
                         "who": " = ".join(cell["who"]), "backend": cell["backend"],
                         "op": cell["op"], "us": cell["us"],
                         **{c: cell.get(c) for c in RANK_COLUMNS}})  # fmt: skip
    return pd.DataFrame(rows, columns=FASTEST_COLUMNS)
