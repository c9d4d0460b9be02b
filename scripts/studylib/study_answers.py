"""The study's answers, computed once from its tables: one :class:`Answer` row per question
and subject, written to tables/answers.csv (rule ``answers``) and read by the report, which
decides nothing. Every verdict ("fastest", "bound", "throttled", "explained", a tie) is made
by the rule in :mod:`.core.verdicts`: a winner beats its runner-up by more than the
measurement's own noise, else the row says tie or undecided.

Each stage answers its questions as data (:data:`STAGE_ANSWERS`): ``sweep`` 1 (the fastest
backend per dtype, shape, stretch of sizes and timing mode, and the failures) and 2 (launch
vs memory vs math at decode sizes), ``kernel_power`` 3 (power, clocks and throttling of
kernel loops), ``decode`` 4 (per-expert M) and 5 (decode throughput and energy per server
setting), ``step_model`` 6 (where a decode step's time and energy go); the seed's rows cite
the answers before them (:data:`CITING_ANSWERS`). Every input is optional: a question whose
tables are missing, or lack the rows it needs, answers ``not measured here`` with why, never
an exception.

Public API: :func:`compute_answers` (every question, from one :class:`StudyTables`),
:func:`write_answers`, :data:`QUESTIONS` and :data:`QUESTION_NAV` (the report's order,
titles and navigation).
"""

from __future__ import annotations

from .core.answer_records import Answer, Question, answers_frame
from .core.io import write_frame
from .seed_comparison import SEED_QUESTIONS, seed_answers
from .stages.decode.decode_answers import DECODE_QUESTIONS, decode_answers
from .stages.decode.expert_answers import EXPERT_QUESTIONS, expert_answers
from .stages.kernel_power.kernel_power_answers import KERNEL_POWER_QUESTIONS, kernel_power_answers
from .stages.step_model.step_model_answers import STEP_MODEL_QUESTIONS, step_answers
from .stages.sweep.sweep_answers import SWEEP_QUESTIONS, q1_answers
from .stages.sweep.sweep_bounds import q2_answers
from .study_tables import StudyTables

#: The report's questions, in order, with their titles: each stage's.
QUESTIONS: dict[Question, str] = {**SWEEP_QUESTIONS, **KERNEL_POWER_QUESTIONS, **EXPERT_QUESTIONS,
                                  **DECODE_QUESTIONS,
                                  **STEP_MODEL_QUESTIONS, **SEED_QUESTIONS}  # fmt: skip


#: Each question's navigation name, its section's anchor and the short form the first screen
#: shows.
QUESTION_NAV: dict[Question, tuple[str, str, str]] = {
    1: ("Q1 Fastest", "q1", "Which backend is fastest, and which fail?"),
    2: ("Q2 Bound", "q2", "Launch-, memory- or math-bound at decode sizes?"),
    3: ("Q3 Kernel power", "q3", "Kernel loops: under-use or throttling?"),
    4: ("Q4 Experts", "q4", "Tokens per expert against balanced?"),
    5: ("Q5 Decode", "q5", "Server settings: throughput and J/token?"),
    6: ("Q6 Step", "q6", "Where a decode step's time goes?"),
    "seed": ("Seed", "seed", "The seed's figures here?"),
}

#: Each stage's answers, by question: a function of the study's tables returning
#: :class:`Answer` rows (a stage takes frames and dicts, never :class:`StudyTables`: the
#: lambda adapts). Every question is here or in :data:`CITING_ANSWERS`.
STAGE_ANSWERS: dict[Question, object] = {
    1: lambda t: q1_answers(t.sweep, t.compare),
    2: lambda t: q2_answers(t.sweep, t.peaks, t.compare),
    3: lambda t: kernel_power_answers(t.kernel_power, t.hardware),
    4: lambda t: expert_answers(t.expert_m, t.decode, t.decode_recorder),
    5: lambda t: decode_answers(t.decode, t.decode_crosscheck),
    6: lambda t: step_answers(t.step_model, t.decode, t.decode_crosscheck),
}
#: Questions whose answers cite the answers before them (the seed's rows take their numbers
#: from questions 1–4): a function of the study's tables and the answers so far.
CITING_ANSWERS: dict[Question, object] = {"seed": seed_answers}


def compute_answers(tables: StudyTables | None = None) -> list[Answer]:
    """Every question's answers, in question order: each subject decided once."""
    t = tables or StudyTables()
    out: list[Answer] = []
    for question in QUESTIONS:
        if question in CITING_ANSWERS:
            out.extend(CITING_ANSWERS[question](t, tuple(out)))
        else:
            out.extend(STAGE_ANSWERS[question](t))
    subjects = [(a.question, a.subject) for a in out]
    twice = sorted({s for s in subjects if subjects.count(s) > 1}, key=str)
    if twice:
        raise ValueError(f"answers decided twice for one subject: {twice}")
    return out


def write_answers(tables: StudyTables, path) -> list[Answer]:
    """:func:`compute_answers` written to ``path`` (tables/answers.csv)."""
    answers = compute_answers(tables)
    write_frame(answers_frame(answers), path)
    return answers


__all__ = ["CITING_ANSWERS", "QUESTIONS", "QUESTION_NAV", "STAGE_ANSWERS", "StudyTables",
           "compute_answers", "write_answers"]  # fmt: skip
