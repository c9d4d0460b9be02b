"""The report's opening sentences, computed from the study's tables.

Every number a finding states is computed here from the data (never typed by hand) and kept
in the finding's ``numbers`` dict for tests. Each input is optional: a function given ``None``
or a table without the rows it needs returns a :class:`Missing` note saying what could not be
computed and why, never an exception.

Questions (see ``STUDY.md`` and :data:`QUESTIONS`), one module per group: ``sweep`` (1 fastest
backend and failures, 2 launch vs memory vs math at decode sizes), ``power`` (3 power, clocks
and throttling of kernel loops), ``experts`` (4 per-expert M during decode), ``decode`` (5
decode throughput and energy per server variant), ``step`` (6 where a decode step's time and
energy go: the step model against the server) and ``seed`` (the seed write-up's figures
beside this machine's); ``common`` holds the records, shared thresholds and text helpers.

Public API: :func:`compute_findings` (all questions, from one :class:`StudyTables`), one
function per question still answered through findings (:func:`q1_backends`, :func:`q2_bounds`,
:func:`q4_experts`, :func:`q5_decode`); questions 3 and "seed" answer as data
(:data:`STAGE_ANSWERS`, :data:`CITING_ANSWERS`).
"""

from __future__ import annotations

from .core.answer_records import ANSWERED, NOT_MEASURED, Answer, answers_frame
from .core.finding_records import Finding, Findings, Missing, Question, describe_machine, fmt_us
from .core.io import write_frame
from .seed_comparison import SEED, SEED_QUESTIONS, SEED_SOURCE, seed_answers
from .stages.decode.decode_answers import DECODE_QUESTIONS, decode_answers
from .stages.decode.decode_findings import q5_decode
from .stages.decode.decode_judgements import (
    dummy_weights_note,
    graphs_pairs,
    regime,
    tp_pairs,
    weights_name,
)
from .stages.decode.expert_answers import EXPERT_QUESTIONS, expert_answers
from .stages.decode.expert_findings import q4_experts
from .stages.kernel_power.kernel_power_answers import KERNEL_POWER_QUESTIONS, kernel_power_answers
from .stages.step_model.step_model_answers import STEP_MODEL_QUESTIONS, step_answers
from .stages.step_model.step_model_findings import q6_step
from .stages.sweep.sweep_answers import SWEEP_QUESTIONS, pick_expert_shape, q1_answers, q1_backends
from .stages.sweep.sweep_bounds import q2_answers, q2_bounds
from .stages.sweep.sweep_thresholds import DECODE_M, DECODE_MAX_M, PREFILL_MIN_M
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
#: :class:`Answer` rows. A question not listed here is still answered from its findings
#: (:func:`legacy_answers`) until its stage writes answers itself.
STAGE_ANSWERS: dict[Question, object] = {
    1: lambda t: q1_answers(t.sweep, t.compare),
    2: lambda t: q2_answers(t.sweep, t.peaks, t.compare),
    3: lambda t: kernel_power_answers(t.kernel_power, t.hardware),
    4: lambda t: expert_answers(t.expert_m, t.decode),
    5: lambda t: decode_answers(t.decode, t.decode_crosscheck),
    6: lambda t: step_answers(t.step_model, t.decode, t.decode_crosscheck),
}
#: Questions whose answers cite the answers before them (the seed's rows take their numbers
#: from questions 1–4): a function of the study's tables and the answers so far.
CITING_ANSWERS: dict[Question, object] = {"seed": seed_answers}


def legacy_answers(findings: Findings, question: Question) -> list[Answer]:
    """A question's findings as answer rows (one per sentence, the first the lead; a missing
    note as ``not measured here``): for stages that do not yet decide their answers."""
    found, missing = findings.for_question(question)
    out = [Answer(question, f"finding {i + 1}", ANSWERED, sentence=f.text, lead=i == 0)
           for i, f in enumerate(found)]  # fmt: skip
    out += [Answer(question, f"missing {i + 1}", NOT_MEASURED, why=m.text,
                   sentence=f"Not measured here: {m.text}.", lead=not found and i == 0)
            for i, m in enumerate(missing)]  # fmt: skip
    return out


def compute_answers(tables: StudyTables | None = None) -> list[Answer]:
    """Every question's answers, in question order: each subject decided once."""
    t = tables or StudyTables()
    findings = None
    out: list[Answer] = []
    for question in QUESTIONS:
        if question in CITING_ANSWERS:
            out.extend(CITING_ANSWERS[question](t, tuple(out)))
            continue
        stage = STAGE_ANSWERS.get(question)
        if stage is not None:
            out.extend(stage(t))
            continue
        if findings is None:
            findings = compute_findings(t)
        out.extend(legacy_answers(findings, question))
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


def compute_findings(tables: StudyTables | None = None) -> Findings:
    """Every question's findings and missing notes, in question order (1–6, then "seed")."""
    t = tables or StudyTables()
    out = Findings()
    for part in (
        q1_backends(t.sweep, t.peaks),
        q2_bounds(t.sweep, t.peaks),
        q4_experts(t.expert_m, t.decode),
        q5_decode(t.decode, t.hardware),
        q6_step(t.step_model),
    ):
        out.extend(part)
    return out


__all__ = [
    "CITING_ANSWERS", "QUESTION_NAV", "STAGE_ANSWERS", "compute_answers", "legacy_answers",
    "write_answers",
    "DECODE_M", "DECODE_MAX_M", "PREFILL_MIN_M", "QUESTIONS", "SEED", "SEED_SOURCE", "Finding",
    "Findings", "Missing", "StudyTables", "compute_findings", "describe_machine",
    "dummy_weights_note", "fmt_us", "graphs_pairs", "pick_expert_shape", "q1_backends",
    "q2_bounds", "q4_experts", "q5_decode", "q6_step", "regime", "seed_answers",
    "tp_pairs", "weights_name",
]  # fmt: skip
