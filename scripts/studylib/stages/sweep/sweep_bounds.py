"""Question 2 as data: are decode-sized GEMMs on the expert shape bound by launch cost, by
memory or by the math? Each judgement is of the implementations question 1 ranks first
(sweep_answers.class_stretches over the one ranking), made at every size of the range against
its threshold with that size's own noise (:func:`verdicts.against_threshold`), and stated as
one verdict only where every size agrees; prefill-sized GEMMs are set against the measured
peak, and each implementation's eager time is judged flat up to a break of two sizes."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from ...core.answer_records import ANSWERED, UNDECIDED, Answer, fmt_share, not_measured
from ...core.finding_records import _m_list, _span, fmt_us, num_of
from ...core.verdicts import against_threshold, decision_noise
from ...instruments.peaks import PEAK_FOR_DTYPE
from .sweep_answers import StretchRow, class_stretches
from .sweep_ranking import GEMM, GRAPHED_MODES, Point, SweepRanking, dtype_name, rank_sweep
from .sweep_thresholds import FLAT_FACTOR, LAUNCH_BOUND_SHARE, NEAR_FLOOR, SIZE_CLASSES

DECODE, PREFILL = SIZE_CLASSES[0], SIZE_CLASSES[2]
#: The noise of a judgement: the judged point's own, in the mode judged.
NOISE_FROM = "{mode} IQR and run-to-run where compared, at least the 3 % floor"
YES, NO, UNSURE, OUTSIDE = "yes", "no", "undecided", "outside"

__all__ = ["q2_answers"]


@dataclass(frozen=True)
class Judged:
    """One size's judgement: yes / no / undecided / outside (the model), with the margin to
    the threshold and the noise it had to beat, and the values judged (one per leader)."""

    m: int
    outcome: str
    margin: float
    noise: float
    values: tuple[float, ...]


def q2_answers(sweep: pd.DataFrame | None, peaks: dict | None = None,
               compare: pd.DataFrame | None = None,
               ranked: SweepRanking | None = None) -> list[Answer]:  # fmt: skip
    """Question 2's rows, per dtype on the expert shape: launch-bound when eager, bound by
    memory (cold), share of the measured peak at prefill sizes, and each implementation's
    eager time flat up to a size."""
    if sweep is None or sweep.empty or not {"backend", "status", "M"} <= set(sweep.columns):
        return [not_measured(2, "sweep", "no sweep table (the sweep stage has not run)",
                             lead=True)]  # fmt: skip
    ranked = ranked or rank_sweep(sweep, compare)
    shape = ranked.expert_shape
    keys = [k for k in ranked.groups() if k[0] == GEMM and k[2] == shape]
    if not keys:
        return [not_measured(2, "expert shape", "no sweep point ran (status ok) at the expert "
                             "shape", lead=True)]  # fmt: skip
    out: list[Answer] = []
    for key in keys:
        modes = ranked.modes[key]
        eager = [r for r in class_stretches(ranked, key, "eager") if r.cls == DECODE]
        graphed_mode = next((m for m in modes if m in GRAPHED_MODES), None)
        graphed = ([r for r in class_stretches(ranked, key, graphed_mode) if r.cls == DECODE]
                   if graphed_mode else [])  # fmt: skip
        out.append(_launch_answer(key, eager))
        out.append(_floor_answer(key, graphed, graphed_mode))
        prefill_mode = graphed_mode or "eager"
        prefill = [r for r in class_stretches(ranked, key, prefill_mode) if r.cls == PREFILL]
        if prefill:
            out.append(_peak_answer(key, prefill, prefill_mode, peaks))
        out += _flat_answers(ranked, key)
    return out


def _subject(key, rows: list[StretchRow], what: str) -> str:
    ms = [m for r in rows for m in r.ms]
    grid = rows[0].grid if rows else ()
    return f"{dtype_name(key[1])} · {key[2]} · {_m_list(ms, grid) if ms else 'M ≤ 64'} · {what}"


def _leaders(rows: list[StretchRow]) -> str:
    """Question 1's verdicts over these stretches, as its rows state them."""
    if len(rows) == 1:
        return rows[0].verdict()
    return "; ".join(f"{r.verdict()} at {r.m_text}" for r in rows)


def _named(rows: list[StretchRow]) -> str:
    """Question 1's leaders over these stretches, briefly: "a = b", "a and those tied with it"
    where others tie at some sizes (the evidence holds question 1's full verdict)."""
    always = list(dict.fromkeys(who for r in rows for who in r.leaders))
    text = " = ".join(always) if len(rows) == 1 else " / ".join(always)
    if any(r.stretch.sometimes for r in rows):
        text += " and its ties" if len(always) == 1 else " and their ties"
    return text


def _judge_sizes(rows: list[StretchRow], judge) -> list[Judged]:
    """Every size of ``rows`` judged for every implementation tied fastest there: the size's
    outcome is theirs where they agree, else undecided."""
    out = []
    for row in rows:
        for s in row.sizes:
            results = [judge(s.point(who), s.mode) for who in s.ranking.tied]
            results = [r for r in results if r is not None]
            if not results:
                continue
            outcomes = {o for o, *_ in results}
            outcome = outcomes.pop() if len(outcomes) == 1 else UNSURE
            # The weakest decision of the size: its margin against its noise.
            _, margin, noise, _ = min(results, key=lambda r: _ratio(r[1], r[2]))
            out.append(Judged(s.m, outcome, margin, noise, tuple(v for *_, v in results)))
    return out


def _ratio(margin: float, noise: float) -> float:
    return margin / noise if not (math.isnan(margin) or math.isnan(noise)) else -1.0


def _combined(judged: list[Judged]) -> tuple[str, list[tuple[str, list[int]]]]:
    """One verdict over the sizes: yes / no / outside where every size agrees, "split" where
    runs of two or more sizes each agree, else undecided; and the runs."""
    runs: list[tuple[str, list[int]]] = []
    for j in judged:
        if runs and runs[-1][0] == j.outcome:
            runs[-1][1].append(j.m)
        else:
            runs.append((j.outcome, [j.m]))
    if len(runs) == 1 and runs[0][0] != UNSURE:
        return runs[0][0], runs
    if all(o != UNSURE and len(ms) > 1 for o, ms in runs):
        return "split", runs
    return UNSURE, runs


def _alternative(verdict: str, words: dict[str, str]) -> str:
    """The judgement a yes or no verdict was decided against ("" for any other)."""
    return {YES: words[NO], NO: words[YES]}.get(verdict, "")


def _weakest(judged: list[Judged]) -> Judged:
    return min(judged, key=lambda j: _ratio(j.margin, j.noise))


# ---------------------------------------------------------------------------------------------
# Launch cost (eager) and the floor (cold)
# ---------------------------------------------------------------------------------------------


def _launch(point: Point | None, mode: str):
    if point is None or "eager" not in point.times or math.isnan(point.launch_us):
        return None
    eager = point.times["eager"]
    share = point.launch_us / eager
    noise = decision_noise(point.noise("eager"))
    outcome, margin = against_threshold(share, LAUNCH_BOUND_SHARE, noise)
    return {"yes": YES, "no": NO}.get(outcome, UNSURE), margin, noise, share


def _launch_answer(key, rows: list[StretchRow]) -> Answer:
    dtype, shape = key[1], key[2]
    subject = _subject(key, rows, "launch (eager)")
    judged = _judge_sizes(rows, _launch)
    if not judged:
        return not_measured(
            2,
            subject,
            "no graph-replayed times (CUDA graphs need a GPU): "
            "launch cost cannot be separated from kernel time",
            lead=True,
        )
    verdict, runs = _combined(judged)
    words = {YES: "launch-bound", NO: "not launch-bound", UNSURE: "undecided"}
    shares = [v for j in judged for v in j.values]
    value = _span(min(shares), max(shares), _pct, " %")
    head = (
        f"{dtype_name(dtype)} {shape}, {_m_list([j.m for j in judged], rows[0].grid)}, "
        f"eager: {_named(rows)} {_verb(rows, 'spend')} {value} of the call on launch"
    )
    return _judgement(subject, head, fmt_share(LAUNCH_BOUND_SHARE), verdict, runs, words, rows,
                      judged, "eager", value, _evidence(judged, _pct, " % launch"))  # fmt: skip


def _judgement(
    subject: str,
    head: str,
    against: str,
    verdict,
    runs,
    words: dict,
    rows: list[StretchRow],
    judged,
    mode: str,
    value: str,
    evidence: str,
) -> Answer:
    """A judgement of Q1's leaders at every size of a stretch as one row: one verdict where
    every size agrees beyond its noise, else the split or undecided; its weakest margin."""
    if verdict in (YES, NO, OUTSIDE):
        text = f"{head}: {words[verdict]} (vs {against}) at every size."
    else:
        text = f"{head}: {_split_text(verdict, runs, words, rows[0].grid, against)}."
    weakest = _weakest(judged)
    return Answer(2, subject, ANSWERED if verdict != UNSURE else UNDECIDED,
                  verdict=words.get(verdict, "split"),
                  runner_up=_alternative(verdict, words), margin=weakest.margin,
                  noise=weakest.noise, noise_from=NOISE_FROM.format(mode=mode), basis=mode,
                  value=value, evidence=f"judged: {_leaders(rows)}; {evidence}",
                  points=len(judged), sentence=text, lead=True)  # fmt: skip


def _floor(point: Point | None, mode: str):
    if point is None or mode not in point.times or not point.floor_us > 0:
        return None
    ratio = point.times[mode] / point.floor_us
    noise = decision_noise(point.noise(mode))
    if ratio < 1:
        return OUTSIDE, float("nan"), noise, ratio
    outcome, margin = against_threshold(ratio, NEAR_FLOOR, noise, above=False)
    return {"yes": YES, "no": NO}.get(outcome, UNSURE), margin, noise, ratio


def _floor_answer(key, rows: list[StretchRow], mode: str | None) -> Answer:
    dtype, shape = key[1], key[2]
    subject = _subject(key, rows, f"floor ({mode or 'cold'})")
    judged = _judge_sizes(rows, _floor) if mode else []
    if not judged:
        why = (
            "no cold or graph-replayed time (CUDA graphs need a GPU): kernel time cannot be "
            "set against the roofline floor"
            if not mode
            else "no roofline floor (peaks)"
        )
        return not_measured(2, subject, why, lead=True)
    basis = _floor_basis(rows, judged)
    words = {YES: f"{basis}-bound", NO: f"not {basis}-bound", UNSURE: "undecided",
             OUTSIDE: "outside the model (data in L2)"}  # fmt: skip
    verdict, runs = _combined(judged)
    ratios = [v for j in judged for v in j.values]
    value = _span(min(ratios), max(ratios), _times)
    head = (
        f"{dtype_name(dtype)} {shape}, {_m_list([j.m for j in judged], rows[0].grid)}, "
        f"{mode}: {_named(rows)} {_verb(rows, 'take')} {value} the {basis} floor"
    )
    return _judgement(subject, head, f"{NEAR_FLOOR:g}×", verdict, runs, words, rows, judged,
                      mode, value, _evidence(judged, _times, " of the floor"))  # fmt: skip


def _floor_basis(rows: list[StretchRow], judged: list[Judged]) -> str:
    bases = {(s.point(who).floor_basis or "roofline").split(" ")[0]
             for r in rows for s in r.sizes for who in s.ranking.tied if s.point(who)}  # fmt: skip
    return bases.pop() if len(bases) == 1 else "roofline"


def _verb(rows: list[StretchRow], verb: str) -> str:
    """``verb`` agreeing with :func:`_named` ("takes" for one implementation alone)."""
    alone = len({w for r in rows for w in r.leaders}) == 1
    return verb + "s" if alone and not any(r.stretch.sometimes for r in rows) else verb


def _split_text(verdict: str, runs, words: dict[str, str], grid, against: str) -> str:
    """A verdict that is not one for the whole range: its runs ("launch-bound at M 1–16; not
    launch-bound at M 24–64"), or, undecided, the sizes of each outcome."""
    if verdict == "split":
        return "; ".join(f"{words[o]} at {_m_list(ms, grid)}" for o, ms in runs)
    sizes: dict[str, list[int]] = {}
    for o, ms in runs:
        sizes.setdefault(o, []).extend(ms)
    parts = [f"{words[o]} at {_m_list(ms, grid)}" for o, ms in sizes.items() if o != UNSURE]
    if UNSURE in sizes:
        parts.append(f"within noise of {against} at {_m_list(sizes[UNSURE], grid)}")
    return f"undecided ({'; '.join(parts)})"


def _evidence(judged: list[Judged], fmt, unit: str) -> str:
    return "; ".join(f"M={j.m}: {', '.join(fmt(v) for v in j.values)}{unit} ({j.outcome}, "
                     f"margin {fmt_share(j.margin)} vs {fmt_share(j.noise)} noise)"
                     for j in judged)  # fmt: skip


def _pct(share: float) -> str:
    return f"{100 * share:.0f}"


def _times(x: float) -> str:
    return f"{x:.2f}×"


# ---------------------------------------------------------------------------------------------
# Prefill: share of the measured peak
# ---------------------------------------------------------------------------------------------


def _peak_answer(key, rows: list[StretchRow], mode: str, peaks: dict | None) -> Answer:
    dtype, shape = key[1], key[2]
    subject = _subject(key, rows, f"share of peak ({mode})")
    peak_key = PEAK_FOR_DTYPE.get(dtype, "")
    peak = num_of((peaks or {}).get(peak_key))
    if not peak > 0:
        return not_measured(
            2,
            subject,
            f"no measured {dtype_name(dtype)} peak "
            f"({peak_key or 'no peak for this dtype'} in peaks.json)",
        )
    shares, evidence = [], []
    for row in rows:
        for s in row.sizes:
            at = []
            for who in s.ranking.tied:
                p = s.point(who)
                if p is not None and p.flops > 0:
                    share = p.flops / (p.times[mode] * 1e6) / peak
                    shares.append(share)
                    at.append(f"{who} {fmt_share(share)}")
            evidence.append(f"M={s.m}: {', '.join(at)}")
    if not shares:
        return not_measured(2, subject, "no FLOP count for the prefill-sized points")
    value = _span(100 * min(shares), 100 * max(shares), lambda x: f"{x:.0f}", " %")
    ms = [m for r in rows for m in r.ms]
    text = (f"{dtype_name(dtype)} {shape}, {_m_list(ms, rows[0].grid)}, {mode}: the fastest, "
            f"{_leaders(rows)}, reach {value} of the measured {peak:.0f} TFLOP/s "
            f"{dtype_name(dtype)} peak")  # fmt: skip
    if max(shares) > 1:
        text += "; above 1 is outside the model (the peak measured low)"
    return Answer(
        2,
        subject,
        ANSWERED,
        verdict=_leaders(rows),
        basis=mode,
        value=value,
        evidence="; ".join(evidence),
        points=len(shares),
        sentence=text + ".",
    )


# ---------------------------------------------------------------------------------------------
# Flat eager time
# ---------------------------------------------------------------------------------------------


def _flat_answers(ranked: SweepRanking, key) -> list[Answer]:
    """Per implementation on the expert shape: the largest M up to which its eager time stays
    within FLAT_FACTOR of its time at the smallest M; a break needs two consecutive sizes
    above that band by more than their noise (one such size alone is an outlier)."""
    dtype, shape = key[1], key[2]
    by_who: dict[str, list[Point]] = {}
    for p in ranked.points.get(key, []):
        if "eager" in p.times:
            by_who.setdefault(p.name, []).append(p)
    out = []
    for who, points in sorted(by_who.items()):
        points = sorted(points, key=lambda p: p.m)
        if len(points) < 3:
            continue
        out.append(_flat_answer(dtype, shape, who, points, ranked.grids.get(key, ())))
    return out


def _flat_answer(dtype: str, shape: str, who: str, points: list[Point], grid) -> Answer:
    base = points[0]
    band = FLAT_FACTOR * base.times["eager"]
    judged = []
    for p in points[1:]:
        noise = decision_noise(base.noise("eager"), p.noise("eager"))
        outcome, margin = against_threshold(p.times["eager"], band, noise)
        judged.append(Judged(p.m, {"yes": YES, "no": NO}.get(outcome, UNSURE), margin, noise,
                             (p.times["eager"],)))  # fmt: skip
    brk = next((i for i in range(len(judged) - 1)
                if judged[i].outcome == YES and judged[i + 1].outcome == YES), None)  # fmt: skip
    subject = f"{dtype_name(dtype)} · {shape} · eager flat · {who}"
    head = (f"{dtype_name(dtype)} {shape}, eager: {who} stays within {FLAT_FACTOR:g}× of its "
            f"M = {base.m} time ({fmt_us(base.times['eager'])})")  # fmt: skip
    if brk is not None:
        flat_to = points[brk].m  # the size before the break (points[0] is the base)
        first = judged[brk]
        weakest = min(judged[brk : brk + 2], key=lambda j: _ratio(j.margin, j.noise))
        verdict = f"flat to M = {flat_to}" if flat_to != base.m else f"not flat above M = {base.m}"
        text = (f"{head} up to M = {flat_to}; {fmt_us(first.values[0])} at M = {first.m} and "
                "after." if flat_to != base.m else f"{head} at no larger size: "
                f"{fmt_us(first.values[0])} at M = {first.m} and after.")  # fmt: skip
        status, margin, noise = ANSWERED, weakest.margin, weakest.noise
        value = f"to M = {flat_to}"
    else:
        unsure = [j.m for j in judged if j.outcome != NO]
        last = points[-1].m
        verdict = f"flat to M = {last}"
        margin, noise, value = float("nan"), float("nan"), f"to M = {last}"
        if unsure:
            status = UNDECIDED
            verdict, value = f"no break beyond noise to M = {last}", ""
            text = (f"{dtype_name(dtype)} {shape}, eager: {who} shows no break beyond noise "
                    f"from its M = {base.m} time ({fmt_us(base.times['eager'])}) up to "
                    f"M = {last}, but {_m_list(unsure, grid)} "
                    f"{'is' if len(unsure) == 1 else 'are'} near or above {FLAT_FACTOR:g}× "
                    "it within noise.")  # fmt: skip
        else:
            status = ANSWERED
            text = f"{head} over the whole range, up to M = {last}."
    return Answer(2, subject, status, verdict=verdict, basis="eager", margin=margin, noise=noise,
                  noise_from=NOISE_FROM.format(mode="eager"),
                  value=value, evidence=_evidence(judged, fmt_us, ""), points=len(points),
                  sentence=text)  # fmt: skip
