"""Question 1 as data: which implementation is fastest per dtype, shape, stretch of sizes and
timing mode, and where the failures are. Every row states a ranking of
:func:`sweep_ranking.rank_sweep` (the one ranking), sizes merged by
:func:`verdicts.stretches` within each size class; question 2 (sweep_bounds.py) judges the
implementations these rows name."""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

from ...core.answer_records import ANSWERED, TIE, Answer, Question, fmt_share, not_measured
from ...core.finding_records import FP4_DTYPES, _m_list, _span, fmt_us
from ...core.verdicts import Stretch, decision_noise, gap, stretches
from .sweep_ranking import (
    GEMM,
    MODE_MEANS,
    MOE,
    SizeRanking,
    SweepRanking,
    _mode,
    _prep_sweep,
    dtype_name,
    dtype_rank,
    pick_expert_shape,
    rank_sweep,
)
from .sweep_thresholds import DECODE_M, DECODE_MAX_M, SIZE_CLASSES, size_class

#: The questions the sweep answers (the report's numbering), with their titles.
SWEEP_QUESTIONS: dict[Question, str] = {
    1: "Which backend is fastest at each GEMM size, and which fail where?",
    2: "Are decode-sized GEMMs bound by launch cost, by memory or by the math?",
}

#: Beyond this many names, a sentence counts the rest.
MAX_NAMED = 3

__all__ = ["SWEEP_QUESTIONS", "StretchRow", "class_stretches", "pick_expert_shape", "q1_answers",
           "slower"]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------------------------


def slower(margin: float) -> str:
    """A runner-up's gap as words: "26 % slower", "7.4× the time"."""
    if math.isnan(margin):
        return "—"
    return f"{fmt_share(margin)} slower" if margin < 1 else f"{1 + margin:.1f}× the time"


def names(who: Iterable[str], joiner: str = " = ") -> str:
    return joiner.join(who)


def listed(items: list[str]) -> str:
    """ "a", "a and b", "a, b and c", "a, b, c and 2 more"."""
    if len(items) > MAX_NAMED + 1:
        items = [*items[:MAX_NAMED], f"{len(items) - MAX_NAMED} more"]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# ---------------------------------------------------------------------------------------------
# Stretches of sizes
# ---------------------------------------------------------------------------------------------


class StretchRow:
    """One stretch of consecutive sizes of one (family, dtype, shape, mode) in one size class,
    with what its answer states: the verdict's names and the closest runner-up decision."""

    def __init__(self, key: tuple[str, str, str], mode: str, stretch: Stretch,
                 sizes: list[SizeRanking], grid: tuple[int, ...]) -> None:  # fmt: skip
        self.family, self.dtype, self.shape = key
        self.mode, self.stretch, self.sizes, self.grid = mode, stretch, sizes, grid
        self.ms = [s.m for s in sizes]
        self.m_text = _m_list(self.ms, grid)
        self.cls = size_class(self.ms[0])
        decided = [s for s in sizes if s.ranking.runner_up is not None]
        #: The closest runner-up decision of the stretch (smallest margin over its noise).
        self.closest = min(decided, key=lambda s: s.ranking.margin / s.ranking.noise,
                           default=None)  # fmt: skip

    @property
    def subject(self) -> str:
        return f"{dtype_name(self.dtype)} · {self.shape} · {self.m_text} · {self.mode}"

    @property
    def leaders(self) -> tuple[str, ...]:
        """Fastest or tied at every size of the stretch."""
        return self.stretch.always

    @property
    def status(self) -> str:
        return ANSWERED if self.stretch.status == "answered" else TIE

    def verdict(self) -> str:
        text = names(self.leaders)
        if self.stretch.sometimes:
            parts = [f"{who} at {_m_list(ms, self.grid)}"
                     for who, ms in self.stretch.sometimes.items()]  # fmt: skip
            text += f" (= {'; '.join(parts)})"
        return text

    def best_times(self) -> list[float]:
        return [s.ranking.best.value for s in self.sizes]

    def contenders(self) -> set[str]:
        return {c.who for s in self.sizes for c in s.ranking.order}


def class_stretches(ranked: SweepRanking, key: tuple[str, str, str],
                    mode: str) -> list[StretchRow]:  # fmt: skip
    """The stretches of one (family, dtype, shape) in ``mode``, per size class: consecutive
    sizes of the grid merged while one contender is fastest or tied at all of them; a size of
    the grid with no ranking splits a stretch (none claims a size it skipped)."""
    grid = ranked.grids.get(key, ())
    by_m = {s.m: s for s in ranked.of(*key, mode)}
    out: list[StretchRow] = []
    for cls in SIZE_CLASSES:
        run: list[SizeRanking] = []
        runs = []
        for m in (m for m in grid if size_class(m) == cls):
            if m in by_m:
                run.append(by_m[m])
            elif run:
                runs.append(run)
                run = []
        if run:
            runs.append(run)
        for run in runs:
            order = _time_order(run)
            merged = stretches(((s.m, s.ranking) for s in run), order=order)
            i = 0
            for stretch in merged:
                part = run[i : i + len(stretch.keys)]
                i += len(stretch.keys)
                out.append(StretchRow(key, mode, stretch, part, grid))
    return out


def _time_order(run: list[SizeRanking]):
    """Names ordered by their mean place in the rankings of ``run`` (fastest first)."""
    places: dict[str, list[int]] = {}
    for s in run:
        for i, c in enumerate(s.ranking.order):
            places.setdefault(c.who, []).append(i)
    return lambda name: (sum(places.get(name, [99])) / len(places.get(name, [99])), name)


# ---------------------------------------------------------------------------------------------
# Question 1
# ---------------------------------------------------------------------------------------------


def q1_answers(sweep: pd.DataFrame | None, compare: pd.DataFrame | None = None,
               ranked: SweepRanking | None = None) -> list[Answer]:  # fmt: skip
    """Question 1's rows: per (dtype, shape, stretch of sizes, mode) the fastest or the tied
    set with the runner-up and the margin; whole MoE layers the same way and what recorded
    routing changes; where the failures are; dtypes that ran nowhere (FP4) as not measured."""
    if sweep is None or sweep.empty or not {"backend", "status"} <= set(sweep.columns):
        return [not_measured(1, "sweep", "no sweep table (the sweep stage has not run)",
                             lead=True)]  # fmt: skip
    ranked = ranked or rank_sweep(sweep, compare)
    out: list[Answer] = []
    alone: dict[tuple[str, str], dict[str, list[str]]] = {}
    for key in ranked.groups():
        family, dtype, shape = key
        timed = {p.name for p in ranked.points[key]}
        if len(timed) == 1 and not (family == GEMM and shape == ranked.expert_shape):
            alone.setdefault((family, dtype), {}).setdefault(timed.pop(), []).append(shape)
            continue
        rows = {mode: class_stretches(ranked, key, mode) for mode in ranked.modes[key]}
        lead = family == GEMM and shape == ranked.expert_shape
        for mode, stretch_rows in rows.items():
            graphed = [r for m, rs in rows.items() if m != "eager" for r in rs]
            for row in stretch_rows:
                out.append(_stretch_answer(row, ranked, graphed if mode == "eager" else [],
                                           lead and row.cls == SIZE_CLASSES[0]))  # fmt: skip
        out += _unranked_classes(ranked, key)
        if family == MOE:
            out += _recorded_routing(ranked, key)
    for (family, dtype), by_who in alone.items():
        for who, shapes in by_who.items():
            out.append(_alone_answer(dtype, family, who, shapes))
    out.append(_failures(sweep))
    out += _dtypes_not_run(sweep)
    return out


def _stretch_answer(row: StretchRow, ranked: SweepRanking, graphed: list[StretchRow],
                    lead: bool) -> Answer:  # fmt: skip
    times = row.best_times()
    value = _span(min(times), max(times), fmt_us)
    closest = row.closest
    runner, margin, noise, noise_from = "", float("nan"), float("nan"), row.sizes[0].noise_from
    if closest is not None:
        r = closest.ranking
        runner, margin, noise, noise_from = r.runner_up.who, r.margin, r.noise, closest.noise_from
    slower_leaders = _graphed_leaders_eager(row, graphed) if row.mode == "eager" else {}
    parts = [_leaders_text(row, value)]
    # The margin column's decision in words: the closest runner-up of the stretch. Where
    # others tie at some sizes only, the runner-up differs by size, so the clause names the
    # size first: the margin is there, not over those tied elsewhere.
    if closest is not None and runner not in slower_leaders:
        if row.stretch.sometimes:
            parts.append(f"next at M = {closest.m}: {runner}, {slower(margin)}")
        else:
            at = f" at M = {closest.m}" if len(row.sizes) > 1 else ""
            parts.append(f"next {runner}, {slower(margin)}{at}")
    if slower_leaders:
        graphed_mode = graphed[0].mode
        parts.append(
            f"{graphed_mode}'s leaders take longer: "
            + ", ".join(f"{who} {text}" for who, text in slower_leaders.items())
        )
    head = f"{dtype_name(row.dtype)} {row.shape}, {row.m_text}, {row.mode}:"
    evidence = "; ".join(_size_evidence(s) for s in row.sizes)
    return Answer(
        question=1, subject=row.subject, status=row.status, verdict=row.verdict(),
        runner_up=runner, margin=margin, noise=noise, noise_from=noise_from, basis=row.mode,
        value=value, evidence=evidence,
        points=sum(len(s.ranking.order) for s in row.sizes),
        sentence=f"{head} {'; '.join(parts)}.",
        why=f"ranked by {row.mode} time: {MODE_MEANS[row.mode]}", lead=lead,
    )  # fmt: skip


def _leaders_text(row: StretchRow, value: str) -> str:
    """ "a fastest (v)", "a = b tie (v)", "a fastest or tied (v), tied with c at M 1–8"."""
    if len(row.contenders()) == 1:
        return f"only {row.leaders[0]} ran ({value})"
    if len(row.leaders) == 1:
        text = f"{row.leaders[0]} fastest{' or tied' if row.stretch.sometimes else ''} ({value})"
        joined = "tied with"
    else:
        text = f"{names(row.leaders)} tie ({value})"
        joined = "joined by"
    if row.stretch.sometimes:
        extra = [f"{who} at {_m_list(ms, row.grid)}" for who, ms in row.stretch.sometimes.items()]
        text += f", {joined} {listed(extra)}"
    return text


def _graphed_leaders_eager(row: StretchRow, graphed: list[StretchRow]) -> dict[str, str]:
    """The graphed ranking's leaders over the sizes of an eager stretch that are not among the
    eager leaders, and how much longer they take eager than the eager fastest: {name:
    "9.3–20×"}."""
    out: dict[str, list[float]] = {}
    for other in graphed:
        shared = set(row.ms) & set(other.ms)
        for who in other.leaders:
            if who in row.leaders or who in row.stretch.sometimes:
                continue
            for s in row.sizes:
                point = s.point(who)
                if s.m in shared and point is not None and "eager" in point.times:
                    out.setdefault(who, []).append(point.times["eager"] / s.ranking.best.value)
    return {who: _span(min(r), max(r), _times) for who, r in out.items()}


def _times(x: float) -> str:
    return f"{x:.1f}×" if x < 10 else f"{x:.0f}×"


def _signed(share: float) -> str:
    return f"{100 * share:+.0f}".replace("-", "−")


def _size_evidence(s: SizeRanking) -> str:
    r = s.ranking
    text = f"M={s.m}: {names(r.tied)} {fmt_us(r.best.value)}"
    if r.runner_up is not None:
        text += (f", next {r.runner_up.who} {fmt_us(r.runner_up.value)} "
                 f"(+{fmt_share(r.margin)} vs {fmt_share(r.noise)} noise)")  # fmt: skip
    return text


def _alone_answer(dtype: str, family: str, who: str, shapes: list[str]) -> Answer:
    """Shapes where one implementation alone was timed: nothing to rank there."""
    what = "MoE layers" if family == MOE else "shapes"
    subject = f"{dtype_name(dtype)} · {', '.join(sorted(shapes))} · one implementation"
    return Answer(1, subject, ANSWERED, verdict=f"{who} (alone)", basis="",
                  sentence=f"{dtype_name(dtype)} {listed(sorted(shapes))}: only {who} was "
                           f"timed on these {what}, so nothing is ranked there.",
                  evidence=", ".join(sorted(shapes)))  # fmt: skip


def _unranked_classes(ranked: SweepRanking, key: tuple[str, str, str]) -> list[Answer]:
    """Size classes the grid holds for (family, dtype, shape) where nothing ran."""
    family, dtype, shape = key
    grid = ranked.grids.get(key, ())
    timed = {p.m for p in ranked.points.get(key, [])}
    out = []
    for cls in SIZE_CLASSES:
        ms = [m for m in grid if size_class(m) == cls]
        if ms and not timed & set(ms):
            subject = f"{dtype_name(dtype)} · {shape} · {_m_list(ms, grid)}"
            out.append(not_measured(1, subject, f"no implementation ran at {_m_list(ms, grid)} "
                                                "(see the support matrix)"))  # fmt: skip
    return out


def _recorded_routing(ranked: SweepRanking, key: tuple[str, str, str]) -> list[Answer]:
    """What recorded routing (the experts a real decode step picked) changes against balanced
    routing, per point of the MoE layer, in its graphed mode."""
    _, dtype, shape = key
    recorded = ranked.recorded.get((dtype, shape), [])
    modes = [m for m in ranked.modes.get(key, ()) if m != "eager"] or ["eager"]
    mode = modes[0]
    balanced = {(p.name, p.m): p for p in ranked.points.get(key, [])}
    changes, counts = [], {"faster": 0, "slower": 0, "same": 0}
    for p in recorded:
        b = balanced.get((p.name, p.m))
        if b is None or mode not in p.times or mode not in b.times:
            continue
        change = gap(p.times[mode], b.times[mode])
        noise = decision_noise(p.noise(mode), b.noise(mode))
        changes.append(change)
        counts["same" if abs(change) <= noise else "slower" if change > 0 else "faster"] += 1
    if not changes:
        return []
    value = f"{_signed(min(changes))} to {_signed(max(changes))} %"
    verdict = ", ".join(f"{k} at {n}" for k, n in counts.items() if n)
    sentence = (f"{dtype_name(dtype)} {shape}, {mode}: recorded routing instead of balanced "
                f"changes times by {value}; beyond noise faster at {counts['faster']} and "
                f"slower at {counts['slower']} of {len(changes)} points.")  # fmt: skip
    return [
        Answer(
            1,
            f"{dtype_name(dtype)} · {shape} · recorded routing · {mode}",
            ANSWERED,
            verdict=verdict,
            basis=mode,
            value=value,
            points=2 * len(changes),
            sentence=sentence,
            evidence=f"{len(changes)} points ok under both routings",
        )
    ]


def _failures(sweep: pd.DataFrame) -> Answer:
    """Where the sweep's failures are, by implementation and dtype; the reasons are the
    support matrix's."""
    df = _prep_sweep(sweep)
    bad = df[df["status"].isin(["unsupported", "error", "mismatch"])]
    combos = df.groupby(["backend", "impl", "op", "dtype"])
    if bad.empty:
        return Answer(1, "failures", ANSWERED, verdict="none", value=f"0 of {len(df)} points",
                      points=len(df), sentence=f"Every one of the {len(df)} sweep points ran "
                      "and matched its reference.")  # fmt: skip
    failing = bad.groupby(["backend", "impl", "op", "dtype"])
    nowhere = sum(1 for key, g in failing if len(g) == len(combos.get_group(key)))
    # A pair the library or the GPU only refused (unsupported) did not fail: an error or a
    # wrong result did. On the H200 every pair that did not run was a refusal (FP4 needs
    # Blackwell), and "11 failing" read as 11 broken kernels.
    broken = sum(1 for _, g in failing if (g["status"] != "unsupported").any())
    refused = failing.ngroups - broken
    verdict = ", ".join(part for part in (f"{broken} failing" if broken else "",
                                          f"{refused} unsupported here" if refused else ""
                                          ) if part)  # fmt: skip
    by_status = {s: int(n) for s, n in bad["status"].value_counts().items()}
    kinds = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items()))
    evidence = "; ".join(
        f"{b}·{i} {op} ({dtype_name(d)}): "
        + ", ".join(f"{n} {s}" for s, n in g["status"].value_counts().items())
        + f" of {len(combos.get_group((b, i, op, d)))}"
        for (b, i, op, d), g in failing
    )  # fmt: skip
    sentence = (f"{failing.ngroups} of {combos.ngroups} implementation × dtype pairs have "
                f"points that did not run ({nowhere} none that did): {broken} failed (an error "
                f"or a wrong result), {refused} were only refused by the library or the GPU "
                f"(unsupported); {kinds} points of {len(df)}: see the support matrix.")  # fmt: skip
    return Answer(1, "failures", ANSWERED, verdict=verdict,
                  value=f"{len(bad)} of {len(df)} points", points=len(df), evidence=evidence,
                  sentence=sentence)  # fmt: skip


def _dtypes_not_run(sweep: pd.DataFrame) -> list[Answer]:
    """A dtype of the grid no point of which ran, and FP4 when the grid has none."""
    df = _prep_sweep(sweep)
    out = []
    for dtype in sorted(set(df["dtype"]) - {""}, key=dtype_rank):
        rows = df[df["dtype"] == dtype]
        if (rows["status"] == "ok").any():
            continue
        counts = ", ".join(f"{n} {s}" for s, n in rows["status"].value_counts().items())
        out.append(not_measured(1, dtype_name(dtype), f"none of the {len(rows)} "
                                f"{dtype_name(dtype)} points ran here ({counts}; the reasons "
                                "are in the support matrix)"))  # fmt: skip
    if not df["dtype"].isin(FP4_DTYPES).any():
        out.append(not_measured(1, "FP4", "no FP4 point in the configured grid"))
    return out


# ---------------------------------------------------------------------------------------------
# The seed comparison's helpers (seed_comparison.py reads the expert shape's points so)
# ---------------------------------------------------------------------------------------------


def _expert_rows(sweep: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """ok single-GEMM rows of the expert shape, and the shape's name."""
    shape = pick_expert_shape(sweep)
    if shape is None:
        return sweep.iloc[0:0], None
    df = sweep[(sweep["shape"] == shape) & sweep["G"].isna() & (sweep["status"] == "ok")]
    return df, shape


def _best(rows: pd.DataFrame, column: str) -> pd.Series | None:
    rows = rows[rows[column].notna()]
    if rows.empty:
        return None
    return rows.loc[rows[column].idxmin()]


def _decode_m(rows: pd.DataFrame) -> float | None:
    ms = sorted(rows["M"].dropna().unique())
    if not ms:
        return None
    if DECODE_M in ms:
        return float(DECODE_M)
    small = [m for m in ms if m <= DECODE_MAX_M]
    pool = small or ms
    return float(min(pool, key=lambda m: abs(m - DECODE_M)))


__all__ += ["_best", "_decode_m", "_expert_rows", "_mode"]
