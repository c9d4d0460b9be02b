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
function per question (:func:`q1_backends`, :func:`q2_bounds`, :func:`q3_power`,
:func:`q4_experts`, :func:`q5_decode`, :func:`seed_comparison`).
"""

from __future__ import annotations

from .core.finding_records import Finding, Findings, Missing, Question, describe_machine, fmt_us
from .seed_comparison import SEED, SEED_QUESTIONS, SEED_SOURCE, seed_comparison
from .stages.decode.decode_answers import DECODE_QUESTIONS, q5_decode
from .stages.decode.decode_judgements import (
    dummy_weights_note,
    graphs_pairs,
    regime,
    tp_pairs,
    weights_name,
)
from .stages.decode.expert_answers import EXPERT_QUESTIONS, q4_experts
from .stages.kernel_power.kernel_power_answers import KERNEL_POWER_QUESTIONS, q3_power
from .stages.step_model.step_model_answers import STEP_MODEL_QUESTIONS, q6_step
from .stages.sweep.sweep_answers import SWEEP_QUESTIONS, pick_expert_shape, q1_backends, q2_bounds
from .stages.sweep.sweep_thresholds import DECODE_M, DECODE_MAX_M, PREFILL_MIN_M
from .study_tables import StudyTables

#: The report's questions, in order, with their titles: each stage's.
QUESTIONS: dict[Question, str] = {**SWEEP_QUESTIONS, **KERNEL_POWER_QUESTIONS, **EXPERT_QUESTIONS,
                                  **DECODE_QUESTIONS,
                                  **STEP_MODEL_QUESTIONS, **SEED_QUESTIONS}  # fmt: skip


def compute_findings(tables: StudyTables | None = None) -> Findings:
    """Every question's findings and missing notes, in question order (1–6, then "seed")."""
    t = tables or StudyTables()
    out = Findings()
    for part in (
        q1_backends(t.sweep, t.peaks),
        q2_bounds(t.sweep, t.peaks),
        q3_power(t.kernel_power, t.hardware),
        q4_experts(t.expert_m, t.decode),
        q5_decode(t.decode, t.hardware),
        q6_step(t.step_model),
        seed_comparison(t),
    ):
        out.extend(part)
    return out


__all__ = [
    "DECODE_M", "DECODE_MAX_M", "PREFILL_MIN_M", "QUESTIONS", "SEED", "SEED_SOURCE", "Finding",
    "Findings", "Missing", "StudyTables", "compute_findings", "describe_machine",
    "dummy_weights_note", "fmt_us", "graphs_pairs", "pick_expert_shape", "q1_backends",
    "q2_bounds", "q3_power", "q4_experts", "q5_decode", "q6_step", "regime", "seed_comparison",
    "tp_pairs", "weights_name",
]  # fmt: skip
