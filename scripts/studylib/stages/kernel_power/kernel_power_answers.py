"""Question 3 from the kernel-power windows: what the GPU draws and how fast it clocks during
kernel loops, and whether low power is under-use or throttling.

Each group of loop windows a user asks about (decode-sized GEMMs per mode, prefill-sized
GEMMs, loops over experts per dtype and size, idle; ``window_classes.window_group``) gets one
verdict from its windows' ``limit`` (``window_classes.window_limit``, the one rule per window):
``under-use`` when every decided window runs at full clock with no limit reason and the draw
stays below the power limit beyond the watts' noise; ``power-capped`` (or thermally
throttled) when every decided window reports the limit AND holds its clock below its maximum
beyond the clock's noise; ``undecided`` when the windows disagree or fewer than two decide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from ...core.answer_records import ANSWERED, UNDECIDED, Answer, Question, fmt_share, not_measured
from ...core.finding_records import (
    _dtype_name,
    _has,
    _impl_label,
    _is_cpu,
    _plain,
    _span,
    num_of,
    text_of,
)
from ...core.verdicts import beyond, decision_noise
from ..sweep.sweep_thresholds import DECODE_MAX_M
from .window_classes import (
    CLOCK_NOISE,
    CLOCK_NOISE_FROM,
    DECODE_GROUP,
    EXPERT_GROUP,
    FULL_CLOCK,
    HELD_DOWN,
    IDLE_GROUP,
    MID_GROUP,
    POWER_CAPPED,
    PREFILL_GROUP,
    THERMAL,
    classify_windows,
)

#: The question the kernel-power loops answer (the report's numbering), with its title.
KERNEL_POWER_QUESTIONS: dict[Question, str] = {
    3: "What do the GPUs draw and how fast do they clock during kernel loops: under-use or "
    "throttling?",
}

# A group's verdict.
UNDER_USE = "under-use"
THROTTLED = "throttled"
IDLE = "idle"
#: How many windows a group's verdict needs at least: never one.
MIN_WINDOWS = 2
#: Windows named in an answer's evidence at most (the windows table has them all).
EVIDENCE_WINDOWS = 8
ALL_MODES = f"{DECODE_GROUP} · all modes"
EXPERTS_DECODE = f"{EXPERT_GROUP} · all dtypes · M ≤ {DECODE_MAX_M}"
ENERGY_CHECK = "check · energy counter vs samples"
GPU_CHECK = "check · GPUs side by side"


@dataclass(frozen=True)
class PowerGroup:
    """One group of windows and its verdict (one answer row; the figure draws the same)."""

    subject: str
    #: The group's classified window rows (one per window and GPU).
    rows: pd.DataFrame
    verdict: str
    status: str
    margin: float = float("nan")
    noise: float = float("nan")
    noise_from: str = ""
    basis: str = ""
    why: str = ""
    lead: bool = False

    @property
    def windows(self) -> int:
        """Distinct windows (a loop run on several GPUs at once is one window)."""
        return _distinct(self.rows)

    @property
    def deciding(self) -> pd.DataFrame:
        """The rows the verdict rests on: a verdict's decided windows (the undecided ones set
        aside), or every row where there is no verdict."""
        if self.status != ANSWERED or self.verdict == IDLE:
            return self.rows
        return self.rows[self.rows["limit"].map(text_of).isin((FULL_CLOCK, *HELD_DOWN))]

    @property
    def set_aside(self) -> int:
        """Undecided windows a verdict set aside."""
        return _distinct(self.rows) - _distinct(self.deciding)


def _distinct(rows: pd.DataFrame) -> int:
    if "window" in rows.columns and rows["window"].notna().all():
        return int(rows["window"].astype(str).nunique())
    return len(rows)


def _numeric(rows: pd.DataFrame, *columns: str) -> list[pd.Series]:
    return [pd.to_numeric(rows.get(c), errors="coerce") if c in rows.columns
            else pd.Series(float("nan"), index=rows.index) for c in columns]  # fmt: skip


def _watts_noise(rows: pd.DataFrame) -> float:
    """The watts' own noise: the energy counter against the integrated samples (a share)."""
    (gap,) = _numeric(rows, "energy_gap_pct")
    return decision_noise(*(abs(g) / 100 for g in gap.dropna()))


def _drops(rows: pd.DataFrame) -> pd.Series:
    clock, top = _numeric(rows, "sm_clock_mhz", "max_sm_clock_mhz")
    return 1 - clock / top


def decide_group(subject: str, rows: pd.DataFrame, lead: bool = False) -> PowerGroup:
    """One group's verdict from its windows' ``limit`` (never from one window)."""
    if subject == IDLE_GROUP:
        return PowerGroup(subject, rows, IDLE, ANSWERED, basis="W", lead=lead)
    limits = rows["limit"].map(text_of)
    full, held = rows[limits == FULL_CLOCK], rows[limits.isin(HELD_DOWN)]
    open_ = rows[~limits.isin((FULL_CLOCK, *HELD_DOWN))]
    n, decided = _distinct(rows), _distinct(pd.concat([full, held]))
    aside = f"; {_distinct(open_)} undecided set aside" if len(open_) else ""

    def undecided(why: str) -> PowerGroup:
        return PowerGroup(subject, rows, UNDECIDED, UNDECIDED, why=why, lead=lead)

    if n < MIN_WINDOWS:
        return undecided(f"one window: a verdict needs at least {MIN_WINDOWS}")
    if decided < MIN_WINDOWS:
        return undecided(f"only {decided} of {n} windows decided: a verdict needs {MIN_WINDOWS}")
    if len(full) and len(held):
        rest = f", {_distinct(open_)} undecided" if len(open_) else ""
        return undecided(f"the windows disagree: {_distinct(full)} at full clock, "
                         f"{_distinct(held)} {' or '.join(sorted(set(held['limit'])))}"
                         f"{rest}")  # fmt: skip
    if len(full):
        (pct,) = _numeric(full, "pct_limit")
        headroom, noise = 1 - pct.max() / 100, _watts_noise(full)
        if not beyond(headroom, noise):
            return undecided("full clock with no limit reason, but the draw is within its "
                             "noise of the power limit")  # fmt: skip
        return PowerGroup(subject, rows, UNDER_USE, ANSWERED, headroom, noise,
                          "energy counter vs samples, 3 % floor", "W below the limit",
                          f"every window at full clock with no limit reason{aside}",
                          lead)  # fmt: skip
    kinds = set(held["limit"])
    verdict = next(iter(kinds)) if len(kinds) == 1 else THROTTLED
    return PowerGroup(subject, rows, verdict, ANSWERED, float(_drops(held).min()), CLOCK_NOISE,
                      CLOCK_NOISE_FROM, "SM clock below its maximum",
                      f"every window reports {' or '.join(sorted(kinds))} with its clock held "
                      f"down{aside}", lead)  # fmt: skip


def _group_rows(classified: pd.DataFrame) -> dict[str, pd.DataFrame]:
    groups = classified["group"].map(text_of) if "group" in classified.columns else None
    if groups is None:
        return {}
    return {g: classified[groups == g] for g in dict.fromkeys(groups) if g}


def group_order(subject: str) -> tuple:
    """The report's order of the groups: idle, decode per mode, mid, prefill, experts."""
    modes = ("eager", "graph", "cold")
    for i, prefix in enumerate((IDLE_GROUP, DECODE_GROUP, MID_GROUP, PREFILL_GROUP, EXPERT_GROUP)):
        if subject.startswith(prefix):
            tail = subject.removeprefix(prefix)
            mode = next((k for k, m in enumerate(modes) if tail.endswith(m)), len(modes))
            return (i, mode, ">" in tail, tail)
    return (9, 0, False, subject)


def power_groups(classified: pd.DataFrame) -> list[PowerGroup]:
    """Every group's verdict, in the report's order, with the two the first screen leads with:
    the decode-sized GEMM loops (all modes together where several ran) and the loops over
    experts at decode sizes (all dtypes together where several ran)."""
    if classified is None or classified.empty:
        return []
    if "limit" not in classified.columns or "group" not in classified.columns:
        classified = classify_windows(classified)
    by_group = _group_rows(classified)
    subjects = sorted(by_group, key=group_order)
    out: list[PowerGroup] = []
    unions = (
        (ALL_MODES, [s for s in subjects if s.startswith(DECODE_GROUP)]),
        (EXPERTS_DECODE, [s for s in subjects if s.startswith(EXPERT_GROUP)
                          and s.endswith(f"≤ {DECODE_MAX_M}")]),
    )  # fmt: skip
    # The union of several groups leads, placed before its parts; a single group leads itself.
    before = {parts[0]: (union, parts) for union, parts in unions if len(parts) > 1}
    alone = {parts[0] for _, parts in unions if len(parts) == 1}
    for subject in subjects:
        if subject in before:
            union, parts = before[subject]
            out.append(decide_group(union, pd.concat([by_group[p] for p in parts]), lead=True))
        out.append(decide_group(subject, by_group[subject], lead=subject in alone))
    return out


# ---------------------------------------------------------------------------------------------
# Answer rows
# ---------------------------------------------------------------------------------------------


def _label(subject: str) -> str:
    """A group's name as a sentence's subject: "Decode-sized eager GEMM loops (M ≤ 64)"."""
    if subject == ALL_MODES:
        return f"Decode-sized GEMM loops (M ≤ {DECODE_MAX_M}, every mode)"
    if subject.startswith(DECODE_GROUP):
        mode = subject.rsplit(" · ", 1)[-1]
        return f"Decode-sized {mode} GEMM loops (M ≤ {DECODE_MAX_M})"
    if subject == EXPERTS_DECODE:
        return f"Expert loops at M ≤ {DECODE_MAX_M} (every dtype)"
    if subject.startswith(EXPERT_GROUP):
        _, dtype, size = subject.split(" · ")
        return f"{dtype} expert loops at {size}"
    name, _, size = subject.partition(" · ")
    if not size:
        return name[0].upper() + name[1:]
    return f"{name[0].upper()}{name[1:].replace('GEMMs', 'GEMM loops')} ({size})"


def watts_text(rows: pd.DataFrame) -> str:
    """ "173–210 W (25–30 % of 700 W)": a group's draw and its share of the power limit."""
    w, pct, limit = _numeric(rows, "avg_w", "pct_limit", "power_limit_w")
    text = _span(w.min(), w.max(), _plain, " W")
    if pct.notna().any():
        limits = sorted(set(limit.dropna().round()))
        of = f"{limits[0]:.0f} W" if len(limits) == 1 else "the limit"
        text += f" ({_span(pct.min(), pct.max(), _plain, ' %')} of {of})"
    return text


def _window_note(rec: dict) -> str:
    clock = num_of(rec.get("sm_clock_mhz"))
    gpu = num_of(rec.get("gpu"))
    on = f" GPU {gpu:.0f}" if not math.isnan(gpu) and num_of(rec.get("gpus_running")) > 1 else ""
    size = f"M = {num_of(rec.get('M')):.0f}" if not math.isnan(num_of(rec.get("M"))) else ""
    what = " ".join(p for p in (_impl_label(rec), _dtype_name(text_of(rec.get("dtype"))), size,
                                text_of(rec.get("mode"))) if p)  # fmt: skip
    clock_text = f", {clock:.0f} MHz" if not math.isnan(clock) else ""
    limit = text_of(rec.get("limit"))
    return (f"{what}{on}: {num_of(rec.get('avg_w')):.0f} W{clock_text}"
            + (f", {limit}" if limit else ""))  # fmt: skip


def _evidence(rows: pd.DataFrame) -> str:
    notes = [_window_note(rec) for rec in rows.to_dict("records")]
    more = len(notes) - EVIDENCE_WINDOWS
    return "; ".join(notes[:EVIDENCE_WINDOWS]) + (f"; {more} more in the windows table"
                                                  if more > 0 else "")  # fmt: skip


def _sentence(group: PowerGroup) -> str:
    label, rows = _label(group.subject), group.deciding
    draw = watts_text(rows)
    aside = group.set_aside
    aside = f"; {aside} undecided window{'s' if aside > 1 else ''} set aside" if aside else ""
    if group.verdict == IDLE:
        gpus = pd.to_numeric(rows.get("gpu"), errors="coerce").nunique() if "gpu" in rows else 1
        return f"Idle, {'each GPU' if gpus > 1 else 'the GPU'} draws {draw}."
    if group.verdict == UNDER_USE:
        return (f"{label} draw {draw} at full clock, no limit reason: under-use, not "
                f"throttling{aside}.")  # fmt: skip
    if group.verdict == UNDECIDED:
        return f"{label} draw {draw}; no verdict: {group.why}."
    held = rows[rows["limit"].isin(HELD_DOWN)]
    drops = _drops(held)
    name = {POWER_CAPPED: "power-capped", THERMAL: "thermally throttled"}.get(
        group.verdict, "throttled"
    )
    return (
        f"{label} draw {draw}, {name}: the clock held "
        f"{_span(100 * drops.min(), 100 * drops.max(), _plain, ' %')} below its maximum{aside}."
    )


def group_answer(group: PowerGroup) -> Answer:
    runner = {UNDER_USE: "throttled", IDLE: ""}.get(
        group.verdict, "" if group.verdict == UNDECIDED else UNDER_USE
    )
    return Answer(
        3, group.subject, group.status, verdict=group.verdict, runner_up=runner,
        margin=group.margin, noise=group.noise, noise_from=group.noise_from, basis=group.basis,
        value=watts_text(group.deciding), evidence=_evidence(group.rows), points=len(group.rows),
        sentence=_sentence(group), why=group.why, lead=group.lead,
    )  # fmt: skip


def _energy_check(measured: pd.DataFrame) -> Answer | None:
    (gap,) = _numeric(measured, "energy_gap_pct")
    gap = gap.abs().dropna()
    if gap.empty:
        return None
    worst = float(gap.max()) / 100
    agree = not beyond(worst, decision_noise())
    verdict = f"within {worst * 100:.1f} %"
    sentence = (f"Energy counter and integrated samples agree within {worst * 100:.1f} % over "
                f"{len(gap)} windows." if agree else
                f"Energy counter and integrated samples differ by up to {worst * 100:.1f} %: "
                "the watts carry that much noise.")  # fmt: skip
    return Answer(3, ENERGY_CHECK, ANSWERED, verdict=verdict, noise=decision_noise(worst),
                  noise_from="the largest gap", basis="J", value=f"≤ {fmt_share(worst, 1)}",
                  evidence=f"median gap {gap.median():.2f} %", points=len(gap),
                  sentence=sentence)  # fmt: skip


def _gpu_check(loops: pd.DataFrame) -> Answer | None:
    """When each loop ran on several GPUs at once: how far apart the GPUs' watts were."""
    if "gpus_running" not in loops.columns or "window" not in loops.columns:
        return None
    (running,) = _numeric(loops, "gpus_running")
    together = loops[(running > 1) & loops["avg_w"].notna()]
    if together.empty:
        return None
    spread = together.groupby("window")["avg_w"].agg(["min", "max", "count"])
    spread = spread[spread["count"] > 1]
    if spread.empty:
        return None
    pct = (spread["max"] - spread["min"]) / spread["max"]
    worst = pct.idxmax()
    gpus = int(spread["count"].max())
    return Answer(3, GPU_CHECK, ANSWERED, verdict=f"within {fmt_share(pct.max(), 1)}",
                  basis="W", value=f"median {fmt_share(pct.median(), 1)}, max "
                  f"{fmt_share(pct.max(), 1)}", points=len(together),
                  evidence=f"{worst}: {spread.loc[worst, 'min']:.0f}–"
                  f"{spread.loc[worst, 'max']:.0f} W",
                  sentence=f"Each loop ran on {gpus} GPUs at once; their watts differ by a "
                  f"median of {fmt_share(pct.median(), 1)}.")  # fmt: skip


def kernel_power_answers(windows: pd.DataFrame | None,
                         hardware: dict | None = None) -> list[Answer]:  # fmt: skip
    """Question 3's answer rows from the kernel-power table (classified here with
    ``hardware``'s maximum clocks, as the aggregate rule classifies it)."""
    if not _has(windows, "mode"):
        why = ("this machine has no GPU" if _is_cpu(hardware) else
               "the kernel-power stage has not run")  # fmt: skip
        return [not_measured(3, "kernel loops", f"no kernel-power table: {why}", lead=True)]
    classified = classify_windows(windows, hardware)
    (w,) = _numeric(classified, "avg_w")
    measured = classified[(classified["class"] != "no data") & w.notna()]
    if measured.empty:
        why = "no GPU" if _is_cpu(hardware) else "no NVML reading"
        return [not_measured(3, "kernel loops", f"no power was measured in the kernel loops "
                                                f"({why})", lead=True)]  # fmt: skip
    groups = power_groups(classified)
    out = [group_answer(g) for g in groups]
    subjects = {g.subject for g in groups}
    if not any(s.startswith(DECODE_GROUP) for s in subjects):
        out.append(not_measured(3, DECODE_GROUP, "no decode-sized single-GEMM loop was measured",
                                lead=True))  # fmt: skip
    if not any(s.startswith(EXPERT_GROUP) for s in subjects):
        out.append(not_measured(3, EXPERT_GROUP, "no loop over experts was measured"))
    loops = measured[measured["class"] != "idle"]
    out += [a for a in (_energy_check(measured), _gpu_check(loops)) if a is not None]
    return out
