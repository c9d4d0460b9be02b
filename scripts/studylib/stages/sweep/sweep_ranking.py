"""The one ranking of the sweep: which implementations are fastest at each size, per timing
mode, under the study's one rule (:mod:`studylib.core.verdicts`). Questions 1 and 2, the
``tables/fastest.csv`` the report's "Fastest per size" table shows and the first-screen charts
all read :func:`rank_sweep`; nothing else ranks.

A point's noise in a mode is its own spread (IQR over median) and, where this run has been
compared with a baseline (``tables/compare.csv``), how far the same point moved between the
two runs; a ranking's margin counts only beyond the larger of both sides' and the 3 % floor.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd

from ...core.finding_records import DTYPE_NAMES, _numeric, num_of, text_of
from ...core.io import write_frame
from ...core.verdicts import (
    NOISE_FLOOR,
    Contender,
    Ranking,
    decision_noise,
    rank,
    run_to_run,
    spread,
)
from .sweep_schema import FASTEST, POINT_KEYS
from .sweep_thresholds import EXPERT_NK, EXPERT_SHAPE, EXPERT_SHAPE_BEFORE

#: Timing modes: (median column, IQR column).
MODE_COLUMNS = {"cold": ("cold_us", "cold_iqr_us"), "graph": ("graph_us", "graph_iqr_us"),
                "eager": ("eager_us", "eager_iqr_us")}  # fmt: skip
#: What each ranked mode answers for.
MODE_MEANS = {
    "cold": "a server with CUDA graphs (weights from HBM on every call, as a decode step)",
    "graph": "a server with CUDA graphs (no cold time measured: weights may sit in L2)",
    "eager": "a server without CUDA graphs (launch cost included)",
}
#: The modes ranked for a server with CUDA graphs, in order of preference: cold where the
#: points have it, else graph replay (runs that took no cold time).
GRAPHED_MODES = ("cold", "graph")
RANK_RULE = (
    "ranked per timing mode: cold (weights streamed from HBM, as a graphed server's decode "
    "step) and eager (a server without CUDA graphs); implementations whose times differ by no "
    "more than their noise (the larger IQR, the run-to-run change where a baseline was "
    f"compared, at least {100 * NOISE_FLOOR:.0f} %) are a tie, named together (a = b)"
)
GEMM, MOE = "gemm", "moe"

SWEEP_NUMERIC = (
    "M", "N", "K", "G", "top_k", "eager_us", "graph_us", "cold_us", "eager_iqr_us",
    "graph_iqr_us", "cold_iqr_us", "floor_us", "flops", "bytes", "launch_overhead_us",
    "efficiency", "tflops", "rel_err",
)  # fmt: skip


def _prep_sweep(sweep: pd.DataFrame) -> pd.DataFrame:
    """The sweep table with its numbers as numbers and its text columns as text (absent
    columns empty), as every ranking and judgement reads it."""
    df = _numeric(sweep, *SWEEP_NUMERIC)
    for c in ("backend", "impl", "op", "dtype", "shape", "status", "error", "floor_basis",
              "routing"):  # fmt: skip
        if c not in df.columns:
            df[c] = ""
        df[c] = df[c].map(text_of)
    for c in ("G", "top_k", "eager_us", "graph_us", "cold_us", "floor_us", "flops",
              "launch_overhead_us", *(iqr for _, iqr in MODE_COLUMNS.values())):  # fmt: skip
        if c not in df.columns:
            df[c] = float("nan")
    return df


def _mode(column: str) -> str:
    """The timing mode of a time column ("cold_us" -> "cold")."""
    return column.removesuffix("_us")


def dtype_name(dtype: str) -> str:
    return DTYPE_NAMES.get(dtype, dtype)


def dtype_rank(dtype: str) -> int:
    names = list(DTYPE_NAMES)
    return names.index(dtype) if dtype in names else len(names)


def pick_expert_shape(sweep: pd.DataFrame | None) -> str | None:
    """The expert shape: ``down`` (or its earlier name ``expert_up``) when present, else the
    shape with (N, K) = (6144, 2048), else the largest-N shape with K = 2048, else the first
    shape named ``expert…``, else the most common shape (single GEMMs, not grouped rows)."""
    if sweep is None or sweep.empty or "shape" not in sweep.columns:
        return None
    df = sweep
    if "G" in df.columns:
        df = df[pd.to_numeric(df["G"], errors="coerce").isna()]
    shapes = [s for s in df["shape"].map(text_of).unique() if s]
    if not shapes:
        return None
    for name in (EXPERT_SHAPE, EXPERT_SHAPE_BEFORE):
        if name in shapes:
            return name
    if "N" in df.columns and "K" in df.columns:
        geo = _numeric(df, "N", "K")[["shape", "N", "K"]].drop_duplicates()
        exact = geo[(geo["N"] == EXPERT_NK[0]) & (geo["K"] == EXPERT_NK[1])]
        if len(exact):
            return text_of(exact["shape"].iloc[0])
        k2048 = geo[geo["K"] == EXPERT_NK[1]].sort_values("N", ascending=False)
        if len(k2048):
            return text_of(k2048["shape"].iloc[0])
    named = [s for s in shapes if s.startswith("expert")]
    if named:
        return sorted(named)[0]
    return text_of(df["shape"].map(text_of).value_counts().index[0])


# ---------------------------------------------------------------------------------------------
# Points: families, names, noise
# ---------------------------------------------------------------------------------------------


def _family(df: pd.DataFrame) -> pd.Series:
    """``gemm`` for single GEMMs (and decode attention, whose M is the batch), ``moe`` for
    whole MoE layers (a routing), "" for grouped rows (their M is tokens per expert)."""
    grouped = df["G"].notna()
    layer = df["routing"].ne("")
    return pd.Series(["" if g and not r else MOE if r else GEMM for g, r in zip(grouped, layer,
                      strict=True)], index=df.index)  # fmt: skip


def moe_shape(row) -> str:
    """A whole MoE layer's name in the rankings: "MoE 256×top-8"."""
    g, k = num_of(row.get("G")), num_of(row.get("top_k"))
    experts = f"{g:.0f}" if not math.isnan(g) else "?"
    return f"MoE {experts}×top-{k:.0f}" if not math.isnan(k) else f"MoE {experts}"


def labels_for(points: pd.DataFrame) -> dict[tuple[str, ...], tuple[str, str]]:
    """(family, dtype, backend, impl, op) -> (name, short name) of every ranked implementation:
    the name is "backend·impl", with the op where one family and dtype has two ops under one
    backend·impl; the short name drops the backend where the rest is unique within the dtype
    (the report's table shows short names beside a legend)."""
    names = {}
    for (family, dtype), group in points.groupby(["family", "dtype"]):
        combos = group[["backend", "impl", "op"]].drop_duplicates().to_records(index=False)
        pairs = pd.Series([(b, i) for b, i, _ in combos]).value_counts()
        for b, i, op in combos:
            suffix = f" {op}" if pairs[(b, i)] > 1 else ""
            names[(family, dtype, b, i, op)] = (f"{b}·{i}{suffix}", f"{i}{suffix}")
    out = {}
    for dtype in {key[1] for key in names}:
        mine = {k: v for k, v in names.items() if k[1] == dtype}
        # One short name per implementation name; a short name two names share is no name.
        by_short: dict[str, set[str]] = {}
        for name, short in mine.values():
            by_short.setdefault(short, set()).add(name)
        for key, (name, short) in mine.items():
            out[key] = (name, short if len(by_short[short]) == 1 else name)
    return out


def _point_key(row) -> tuple:
    values = []
    for column in POINT_KEYS:
        v = row.get(column)
        if column in ("N", "K", "G", "M", "top_k"):
            n = num_of(v)
            values.append(0 if math.isnan(n) else int(n))
        else:
            values.append(text_of(v))
    return tuple(values)


def run_to_run_changes(compare: pd.DataFrame | None) -> dict[tuple, float]:
    """(point key..., mode) -> how far the point moved between the baseline and this run (a
    share, :func:`verdicts.run_to_run`), from ``tables/compare.csv``."""
    if compare is None or compare.empty or "mode" not in compare.columns:
        return {}
    out = {}
    for rec in compare.to_dict("records"):
        change = run_to_run(rec.get("baseline_us"), rec.get("current_us"))
        if not math.isnan(change):
            out[(*_point_key(rec), text_of(rec.get("mode")))] = change
    return out


# ---------------------------------------------------------------------------------------------
# Rankings
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One ok point as a contender sees it: who, its times and its noise per mode."""

    name: str
    short: str
    dtype: str
    backend: str
    impl: str
    op: str
    m: int
    times: dict[str, float]
    #: Per mode: its IQR over median, and its run-to-run change (NaN where unknown).
    iqr: dict[str, float]
    r2r: dict[str, float]
    floor_us: float = float("nan")
    floor_basis: str = ""
    flops: float = float("nan")
    launch_us: float = float("nan")

    def noise(self, mode: str) -> float:
        """Its own noise in ``mode``: the larger known of IQR and run-to-run (NaN if none)."""
        known = [x for x in (self.iqr.get(mode), self.r2r.get(mode))
                 if x is not None and not math.isnan(x)]  # fmt: skip
        return max(known) if known else float("nan")


@dataclass(frozen=True)
class SizeRanking:
    """The ranking of one (family, dtype, shape, mode) at one M."""

    family: str
    dtype: str
    shape: str
    mode: str
    m: int
    ranking: Ranking
    #: Which spread set the noise the runner-up decision used.
    noise_from: str

    def point(self, name: str) -> Point | None:
        return next((c.row for c in self.ranking.order if c.who == name), None)


@dataclass
class SweepRanking:
    """Every ranking of a sweep, and what the answers need around them."""

    sizes: list[SizeRanking] = field(default_factory=list)
    #: (family, dtype, shape) -> every M the grid holds there, whatever its status.
    grids: dict[tuple[str, str, str], tuple[int, ...]] = field(default_factory=dict)
    #: (family, dtype, shape) -> the modes ranked there, graphed first.
    modes: dict[tuple[str, str, str], tuple[str, ...]] = field(default_factory=dict)
    #: dtype -> {name: (short name, backend)} of the implementations ranked in that dtype.
    legend: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)
    #: (family, dtype, shape) -> every ok point ranked there (MoE layers: balanced routing).
    points: dict[tuple[str, str, str], list[Point]] = field(default_factory=dict)
    #: (dtype, shape) -> every ok point of a whole MoE layer under recorded routing.
    recorded: dict[tuple[str, str], list[Point]] = field(default_factory=dict)
    expert_shape: str | None = None
    #: shape -> "down (N = 6144, K = 2048)".
    geometry: dict[str, str] = field(default_factory=dict)
    compared: bool = False

    def of(self, family: str, dtype: str, shape: str, mode: str) -> list[SizeRanking]:
        """The rankings of one (family, dtype, shape, mode), smallest M first."""
        key = (family, dtype, shape, mode)
        return [s for s in self.sizes if (s.family, s.dtype, s.shape, s.mode) == key]

    def groups(self) -> list[tuple[str, str, str]]:
        """Every (family, dtype, shape) ranked: single GEMMs first (the expert shape first of
        them), then MoE layers; dtypes widest first."""

        def order(key):
            family, dtype, shape = key
            return (family != GEMM, dtype_rank(dtype), shape != self.expert_shape, shape)

        return sorted(self.modes, key=order)


def _largest(values: Iterable) -> float:
    known = [v for v in values if v is not None and not math.isnan(v)]
    return max(known) if known else float("nan")


def _noise_from(ranking: Ranking, mode: str) -> str:
    """Which spread set the runner-up decision's noise: the run-to-run change, the IQR or the
    floor, and whether a run-to-run change was known for these points."""
    sides = [c for c in ranking.order if c.who in ranking.tied]
    if ranking.runner_up is not None:
        sides.append(ranking.runner_up)
    iqr = _largest(c.row.iqr.get(mode) for c in sides)
    r2r = _largest(c.row.r2r.get(mode) for c in sides)
    has_r2r = not math.isnan(r2r)
    # Without a runner-up the decision was the tie's: the noise of all tied.
    noise = ranking.noise if ranking.runner_up is not None else decision_noise(iqr, r2r)
    if noise <= NOISE_FLOOR:
        return f"{100 * NOISE_FLOOR:.0f} % floor" + (" (IQR, run-to-run below it)" if has_r2r
                                              else " (IQR below it)")  # fmt: skip
    if has_r2r and r2r >= (iqr if not math.isnan(iqr) else 0):
        return "run-to-run (compare.csv)"
    return "IQR" + (" (run-to-run smaller)" if has_r2r else " (no run-to-run for these points)")


def _points(df: pd.DataFrame, changes: dict, labels: dict) -> list[Point]:
    out = []
    for rec in df.to_dict("records"):
        key = _point_key(rec)
        name, short = labels[(rec["family"], rec["dtype"], rec["backend"], rec["impl"], rec["op"])]
        times, iqr, r2r = {}, {}, {}
        for mode, (median, iqr_column) in MODE_COLUMNS.items():
            t = num_of(rec.get(median))
            if t > 0:
                times[mode] = t
                iqr[mode] = spread(rec.get(iqr_column), t)
                r2r[mode] = changes.get((*key, mode), float("nan"))
        launch = num_of(rec.get("launch_overhead_us"))
        if math.isnan(launch) and "graph" in times and "eager" in times:
            launch = times["eager"] - times["graph"]
        out.append(Point(name, short, rec["dtype"], rec["backend"], rec["impl"], rec["op"],
                         int(rec["M"]),
                         times, iqr, r2r, num_of(rec.get("floor_us")),
                         text_of(rec.get("floor_basis")), num_of(rec.get("flops")),
                         launch))  # fmt: skip
    return out


def ranked_modes(points: Iterable[Point]) -> tuple[str, ...]:
    """The modes a group of points is ranked in: the first graphed mode any point has
    (:data:`GRAPHED_MODES`), then eager; eager alone on a machine without a GPU."""
    points = list(points)
    have = {mode for p in points for mode in p.times}
    graphed = next((m for m in GRAPHED_MODES if m in have), None)
    return tuple(m for m in (graphed, "eager") if m and m in have)


def rank_points(points: Iterable[Point], mode: str) -> Ranking | None:
    """The one ranking of ``points`` (one size) by their ``mode`` time."""
    contenders = [Contender(p.name, p.times[mode], p.noise(mode), p) for p in points
                  if mode in p.times]  # fmt: skip
    return rank(contenders)


def _geometry(df: pd.DataFrame) -> dict[str, str]:
    out = {}
    for shape, rows in df[df["G"].isna()].groupby("shape"):
        n, k = num_of(rows["N"].iloc[0]), num_of(rows["K"].iloc[0])
        out[shape] = shape if math.isnan(n) or math.isnan(k) else (
            f"{shape} (N = {n:.0f}, K = {k:.0f})")  # fmt: skip
    return out


def rank_sweep(sweep: pd.DataFrame | None, compare: pd.DataFrame | None = None) -> SweepRanking:
    """Every single-GEMM shape (decode attention with them) and whole MoE layer (balanced
    routing) of ``sweep``, per dtype, timing mode and M: the ok implementations ranked, with
    each point's noise from its IQR and, where ``compare`` has the point, its run-to-run
    change."""
    out = SweepRanking(compared=compare is not None and not compare.empty)
    need = {"backend", "impl", "status", "dtype", "M"}
    if sweep is None or sweep.empty or not need <= set(sweep.columns):
        return out
    df = _prep_sweep(sweep)
    df = df[df["M"].notna()].copy()
    df["family"] = _family(df)
    df = df[df["family"] != ""]
    moe = df["family"] == MOE
    if moe.any():
        df.loc[moe, "shape"] = df[moe].apply(moe_shape, axis=1)
    out.expert_shape = pick_expert_shape(sweep)
    out.geometry = _geometry(df)
    for (family, dtype, shape), group in df.groupby(["family", "dtype", "shape"]):
        out.grids[(family, dtype, shape)] = tuple(sorted(int(m) for m in group["M"].unique()))
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return out
    labels = labels_for(ok)
    changes = run_to_run_changes(compare)
    recorded = ok["routing"] == "recorded"
    for (dtype, shape), group in ok[recorded].groupby(["dtype", "shape"]):
        out.recorded[(dtype, shape)] = _points(group, changes, labels)
    ok = ok[(ok["family"] == GEMM) | (ok["routing"] == "balanced")]
    for (family, dtype, shape), group in ok.groupby(["family", "dtype", "shape"]):
        points = _points(group, changes, labels)
        for p in points:
            out.legend.setdefault(dtype, {})[p.name] = (p.short, p.backend)
        out.points[(family, dtype, shape)] = points
        modes = ranked_modes(points)
        out.modes[(family, dtype, shape)] = modes
        for mode in modes:
            for m in sorted({p.m for p in points}):
                ranking = rank_points([p for p in points if p.m == m], mode)
                if ranking is not None:
                    out.sizes.append(SizeRanking(family, dtype, shape, mode, m, ranking,
                                                 _noise_from(ranking, mode)))  # fmt: skip
    return out


def bests(
    sweep: pd.DataFrame | None,
    shape: str | None = None,
    modes: Iterable[str] = ("cold", "graph", "eager"),
    per_backend: bool = True,
) -> pd.DataFrame:
    """The lowest time at each M on ``shape`` (default: the expert shape), per dtype and mode,
    of each backend (``per_backend``) or of all: ``rank``'s fastest, which a chart draws (a
    tie is the answers' to name, not a chart's): dtype, backend, mode, M, us, who, floor_us,
    floor_basis."""
    columns = ["dtype", "backend", "mode", "M", "us", "who", "floor_us", "floor_basis"]
    if sweep is None or sweep.empty or "status" not in sweep.columns:
        return pd.DataFrame(columns=columns)
    df = _prep_sweep(sweep)
    shape = shape or pick_expert_shape(df)
    df = df[(df["status"] == "ok") & df["G"].isna() & (df["shape"] == shape) & df["M"].notna()]
    if df.empty:
        return pd.DataFrame(columns=columns)
    df = df.assign(family=GEMM)
    by: dict[tuple, list[Point]] = {}
    for p in _points(df, {}, labels_for(df)):
        by.setdefault((p.dtype, p.backend if per_backend else "", p.m), []).append(p)
    rows = []
    for mode in modes:
        for (dtype, _, m), group in by.items():
            ranking = rank_points(group, mode)
            if ranking is None:
                continue
            best = ranking.best.row
            rows.append({"dtype": dtype, "backend": best.backend, "mode": mode, "M": m,
                         "us": best.times[mode], "who": best.name, "floor_us": best.floor_us,
                         "floor_basis": best.floor_basis})  # fmt: skip
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["dtype", "backend", "mode", "M"]).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# tables/fastest.csv
# ---------------------------------------------------------------------------------------------


def fastest_frame(ranked: SweepRanking) -> pd.DataFrame:
    """Every per-size ranking of ``ranked`` as ``tables/fastest.csv``'s rows (the report's
    "Fastest per size" table reads it and ranks nothing)."""
    rows = []
    for s in ranked.sizes:
        r = s.ranking
        rows.append({
            "family": s.family, "dtype": s.dtype, "shape": s.shape, "M": s.m, "mode": s.mode,
            "contenders": len({c.who for c in r.order}), "tied": " = ".join(r.tied),
            "fastest": r.best.who, "backend": r.best.row.backend, "fastest_us": r.best.value,
            "runner_up": r.runner_up.who if r.runner_up else "",
            "runner_up_us": r.runner_up.value if r.runner_up else float("nan"),
            "margin": r.margin, "noise": r.noise, "noise_from": s.noise_from,
            "status": r.status,
        })  # fmt: skip
    return pd.DataFrame(rows, columns=list(FASTEST))


def write_fastest(sweep: pd.DataFrame | None, compare: pd.DataFrame | None, path) -> pd.DataFrame:
    """``tables/fastest.csv`` (rule answers: the run-to-run noise needs compare.csv)."""
    frame = fastest_frame(rank_sweep(sweep, compare))
    write_frame(frame, path)
    return frame
