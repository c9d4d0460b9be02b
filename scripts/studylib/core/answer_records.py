"""The study's answers as data: one :class:`Answer` per question × subject, written once to
``results/tables/answers.csv`` (rule ``answers``) and read by every part of the report that
speaks of that question, so that two sections can never disagree.

An answer carries its verdict (the winner, the tied set, or a judgement), the runner-up or
alternative and the margin to it, the noise the decision used (:mod:`.verdicts`), the number
behind it, the evidence (points and values) and one short sentence. ``status`` says what the
data support: ``answered`` (the margin is beyond the noise), ``tie`` (a ranking whose leaders
are within the noise of each other), ``undecided`` (a judgement within the noise of its
threshold), ``not measured here`` (with why: this machine or run cannot give it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields

import pandas as pd

from .table_registry import Table, register_tables

Question = int | str

ANSWERED, TIE, UNDECIDED, NOT_MEASURED = "answered", "tie", "undecided", "not measured here"
STATUSES = (ANSWERED, TIE, UNDECIDED, NOT_MEASURED)


@dataclass(frozen=True)
class Answer:
    """One question × subject, decided once."""

    #: 1–6 or "seed" (the report's numbering).
    question: Question
    #: What is decided, unique within the question: "BF16 · down · M 1–64 · cold".
    subject: str
    status: str
    #: The winner, the tied set ("a = b"), or the judgement ("memory-bound").
    verdict: str = ""
    #: The best contender outside the verdict, or the judgement's alternative.
    runner_up: str = ""
    #: How far the verdict is from the runner-up or threshold, as a share (0.12 = 12 %).
    margin: float = float("nan")
    #: The spread the decision used, as a share: a margin not above it is no verdict.
    noise: float = float("nan")
    #: Where the noise came from ("IQR", "IQR and run-to-run", "3 % floor", ...).
    noise_from: str = ""
    #: The measure the decision ranks or judges by ("cold", "eager", "TPOT", "W", ...).
    basis: str = ""
    #: The number behind the verdict, formatted with its unit ("9.2–9.7 µs").
    value: str = ""
    #: The points and values the decision read, briefly.
    evidence: str = ""
    points: int = 0
    #: One short sentence: the answer as the report states it.
    sentence: str = ""
    #: Why it is not measured here (status ``not measured here``), or another caveat.
    why: str = ""
    #: A line of the report's first screen (each question has at least one lead row where
    #: it has any row).
    lead: bool = False

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"answer status {self.status!r} is not one of {STATUSES}")
        if self.status == ANSWERED and _known(self.margin) and _known(self.noise):
            if not self.margin > self.noise:
                raise ValueError(f"{self.subject}: answered with a margin of {self.margin:.3g} "
                                 f"not beyond its noise of {self.noise:.3g}")  # fmt: skip


def _known(x) -> bool:
    try:
        return not math.isnan(float(x))
    except (TypeError, ValueError):
        return False


ANSWER_COLUMNS = {f.name: ("num" if f.type == "float" else "int" if f.type == "int"
                           else "flag" if f.type == "bool" else "text")
                  for f in fields(Answer)}  # fmt: skip
ANSWER_COLUMNS["question"] = "text"

register_tables(
    Table("answers", "the study's answers", "results/tables/answers.csv", ANSWER_COLUMNS,
          values={"status": STATUSES}),
)  # fmt: skip


def answers_frame(answers: Iterable[Answer]) -> pd.DataFrame:
    """The answers as ``answers.csv``'s rows, in the order given."""
    rows = [asdict(a) for a in answers]
    frame = pd.DataFrame(rows, columns=list(ANSWER_COLUMNS))
    frame["question"] = frame["question"].astype(str)
    return frame


def answers_from_frame(frame: pd.DataFrame | None) -> list[Answer]:
    """``answers.csv``'s rows back as :class:`Answer` records (the report reads them so)."""
    if frame is None or frame.empty:
        return []
    out = []
    for rec in frame.to_dict("records"):
        values = {}
        for name, kind in ANSWER_COLUMNS.items():
            v = rec.get(name)
            missing = v is None or (isinstance(v, float) and math.isnan(v))
            if kind == "num":
                values[name] = float("nan") if missing else float(v)
            elif kind == "int":
                values[name] = 0 if missing else int(v)
            elif kind == "flag":
                values[name] = str(v).lower() in ("true", "1", "1.0")
            else:
                values[name] = "" if missing else str(v)
        q = values["question"]
        values["question"] = int(q) if q.isdigit() else q
        out.append(Answer(**values))
    return out


def not_measured(question: Question, subject: str, why: str, lead: bool = False) -> Answer:
    """A subject this machine or run cannot answer, and why."""
    return Answer(question, subject, NOT_MEASURED, why=why, sentence=f"Not measured here: {why}.",
                  lead=lead)  # fmt: skip


def fmt_share(share: float, digits: int = 0) -> str:
    """A share as a percentage ("12 %"); "< 1 %" for a small non-zero one; "—" when unknown."""
    if not _known(share):
        return "—"
    pct = 100 * float(share)
    if 0 < abs(pct) < 0.5 and digits == 0:
        return "< 1 %"
    return f"{pct:.{digits}f} %"


def margin_text(answer: Answer) -> str:
    """ "12 % > 3 % noise", "1 % ≤ 3 % noise": the margin against the noise it had to beat,
    with a decimal or two where whole percents would print the two alike ("3.4 % > 3.0 %",
    not "3 % > 3 %")."""
    if not _known(answer.margin):
        return "—"
    sign = ">" if answer.margin > answer.noise else "≤"
    digits = 0
    while digits < 2 and fmt_share(answer.margin, digits) == fmt_share(answer.noise, digits):
        digits += 1
    return f"{fmt_share(answer.margin, digits)} {sign} {fmt_share(answer.noise, digits)} noise"
