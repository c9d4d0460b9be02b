"""The study's tables, all of them: every stage's schema imported (so each is in the table
registry) and :class:`StudyTables`, the files the answers and the report read, each once."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import device_time  # noqa: F401 - registers the device-time table
from .core import answer_records  # noqa: F401 - registers the answers table
from .core.table_registry import RECORDS, check_inputs, read_record, read_table, table
from .stages.decode import decode_tables
from .stages.kernel_power import kernel_power_schema
from .stages.step_model import step_model_schema
from .stages.sweep import sweep_schema

#: The stages' schema modules, in the order their tables were registered.
SCHEMAS = (sweep_schema, kernel_power_schema, decode_tables, step_model_schema)
__all__ = ["SCHEMAS", "STUDY_FILES", "StudyTables", "check_inputs"]

#: The table (or record) each field of :class:`StudyTables` reads.
_FIELDS = {"hardware": "hardware", "peaks": "peaks", "sweep": "sweep_table",
           "support": "support", "kernel_power": "kernel_power_table", "decode": "decode_table",
           "expert_m": "expert_m_table", "decode_recorder": "recorder_table",
           "decode_crosscheck": "crosscheck_table", "step_model": "step_model",
           "compare": "compare", "answers": "answers"}  # fmt: skip
#: What the answers and the report read, by field: (record or table name, its file under
#: the results folder, from the table's own path: one home for each path).
STUDY_FILES = {
    field: (name, f"{name}.json" if name in RECORDS
            else table(name).path.removeprefix("results/"))
    for field, name in _FIELDS.items()
}  # fmt: skip


@dataclass(frozen=True)
class StudyTables:
    """The study's tables and records, each read once; ``None`` for one that is absent."""

    hardware: dict | None = None
    peaks: dict | None = None
    sweep: pd.DataFrame | None = None
    support: pd.DataFrame | None = None
    kernel_power: pd.DataFrame | None = None
    decode: pd.DataFrame | None = None
    expert_m: pd.DataFrame | None = None
    decode_recorder: pd.DataFrame | None = None
    decode_crosscheck: pd.DataFrame | None = None
    step_model: pd.DataFrame | None = None
    #: This run's points against a baseline's (a configured compare_baseline): the
    #: run-to-run change of each point, part of the noise the rankings use.
    compare: pd.DataFrame | None = None
    #: The answers (rule answers): what the report reads of every question.
    answers: pd.DataFrame | None = None

    @classmethod
    def read(cls, paths, checked: bool = True) -> StudyTables:
        """The files of ``paths`` ({field: path}, e.g. a rule's input; absent fields and
        files are ``None``). ``checked``: through the checked readers (a damaged file raises
        :class:`DamagedFile`); else read plainly, as an older run's folder with older
        columns must be, an unreadable file counting as absent."""
        found = {}
        for name, (spec, _) in STUDY_FILES.items():
            path = paths.get(name) if hasattr(paths, "get") else None
            # Checked, a folder where a table goes is refused, not read as absent.
            if path is None or not (Path(path).is_file() or checked and Path(path).is_dir()):
                continue
            if checked:
                reader = read_record if spec in RECORDS else read_table
                found[name] = reader(spec, path)
            else:
                found[name] = _read_plain(Path(path))
        # An empty per-expert table is no record of the experts.
        if found.get("expert_m") is not None and found["expert_m"].empty:
            found["expert_m"] = None
        return cls(**found)

    @classmethod
    def from_results(cls, results: str | os.PathLike, checked: bool = False) -> StudyTables:
        """The tables of a results folder (``results/`` or a committed example's copy)."""
        results = Path(results)
        return cls.read({name: results / file for name, (_, file) in STUDY_FILES.items()},
                        checked)  # fmt: skip


def _read_plain(path: Path) -> pd.DataFrame | dict | None:
    try:
        if path.suffix == ".json":
            return json.loads(path.read_text())
        return pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError):
        return None
