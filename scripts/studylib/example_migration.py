"""A committed example's derived tables brought up to today's schema (tools/migrate_example.py).

An example keeps the tables its run wrote; the study's tables have gained columns since. The
migration rewrites each table under the example's ``tables/`` (and its ``kernel_power/
windows.csv``) that today's checked reader refuses, and never changes a number the run
measured:
- a column the table lacks is added empty (not recorded then), except where the example's
  own records say its value: a decode server's CUDA graphs and expert parallelism from its
  argv (``runs/<variant>.run.json``, ``decode/<variant>/run.json`` or ``decode_run.json``),
  read by the decode stage's own functions; and a decode setting that did not exist yet
  (``routing``, ``weights``), which ran as the setting's default in config/schema.yaml does
  (the router of the served model; bf16);
- a value today's code would not compute is dropped: the step's HBM floor (``step_gb``,
  ``hbm_floor_ms``, ``tpot_over_floor``) of a decode row whose routing is not uniform
  (decode_run computes it for uniform routing only: it is the floor of uniform routing, not
  of the run).
Raw files (each job's own outputs: sweeps, summaries, breakdowns) stay as the run wrote them.
A table the reader already accepts is not rewritten, so migrating twice changes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from .core.config import SCHEMA
from .core.io import write_frame
from .core.table_registry import DamagedFile, read_table, table
from .stages.decode.decode_schema import cuda_graphs, expert_parallel

#: The derived tables an example may keep, by file, and the registered table each is.
DERIVED = {
    "tables/sweep.csv": "sweep_table",
    "tables/support.csv": "support",
    "tables/kernel_power.csv": "kernel_power_table",
    "kernel_power/windows.csv": "kernel_power_table",
    "tables/decode.csv": "decode_table",
    "tables/expert_m.csv": "expert_m_table",
    "tables/decode_recorder.csv": "recorder_table",
    "tables/decode_crosscheck.csv": "crosscheck_table",
    "tables/step_model.csv": "step_model",
}  # fmt: skip
#: Decode settings newer than some examples: what a variant that does not set them runs.
DECODE_SETTINGS = ("routing", "weights")
#: Derived from the run's argv by the decode stage's functions.
FROM_ARGV = {"cuda_graphs": cuda_graphs, "ep": expert_parallel}
#: The step's HBM floor: decode_run computes step_gb for uniform routing only.
FLOOR = ("step_gb", "hbm_floor_ms", "tpot_over_floor")


@dataclass
class Migration:
    """What migrating one table did (a line per change, for the example's README)."""

    path: Path
    table: str
    added_empty: list[str] = field(default_factory=list)
    derived: dict[str, str] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)

    def text(self) -> str:
        parts = []
        if self.derived:
            parts.append("; ".join(f"{c} {how}" for c, how in self.derived.items()))
        if self.added_empty:
            parts.append(f"added empty (not recorded then): {', '.join(self.added_empty)}")
        if self.dropped:
            parts.append("; ".join(self.dropped))
        return f"{self.path}: " + "; ".join(parts)


def decode_setting_defaults(schema_path: Path = SCHEMA) -> dict[str, str]:
    """The defaults config/schema.yaml gives a decode variant's :data:`DECODE_SETTINGS`."""
    schema = yaml.safe_load(Path(schema_path).read_text(encoding="utf-8"))
    variant = schema["properties"]["decode"]["properties"]["variants"]["additionalProperties"]
    return {name: variant["properties"][name]["default"] for name in DECODE_SETTINGS}


def run_argv(example: Path, variant: str, variants: int) -> list | None:
    """A decode variant's server argv from the example's run record, where it kept one (the
    example's single ``decode_run.json`` where it ran a single variant)."""
    for path in (example / "runs" / f"{variant}.run.json",
                 example / "decode" / variant / "run.json",
                 *([example / "decode_run.json"] if variants == 1 else [])):  # fmt: skip
        if path.is_file():
            argv = json.loads(path.read_text(encoding="utf-8")).get("argv")
            return argv if isinstance(argv, list) else None
    return None


def migrate_decode(frame: pd.DataFrame, example: Path, done: Migration) -> pd.DataFrame:
    """The decode table's columns a run record or a setting's default says (see module);
    ``frame`` as text, as :func:`migrate_table` reads it."""
    frame = frame.copy()
    variants = list(dict.fromkeys(frame["variant"])) if "variant" in frame.columns else []
    for column, derive in FROM_ARGV.items():
        if column in frame.columns:
            continue
        values = {}
        for v in variants:
            engine = frame.loc[frame["variant"] == v, "engine"].iloc[0]
            argv = run_argv(example, v, len(variants))
            value = derive(engine, argv) if argv is not None else None
            values[v] = "" if value is None else str(value)
        if any(values.values()):  # else added empty, with the columns no record says
            frame[column] = frame["variant"].map(values)
            done.derived[column] = "from the server's argv (the run record)"
    for column, default in decode_setting_defaults().items():
        if column not in frame.columns:
            frame[column] = default
            done.derived[column] = f"= {default} (the setting's default: it did not exist yet)"
    not_uniform = frame["routing"] != "uniform"
    floors = [c for c in FLOOR if c in frame.columns]
    if floors and (frame.loc[not_uniform, floors] != "").any(axis=None):
        frame.loc[not_uniform, floors] = ""
        done.dropped.append(f"{', '.join(floors)} emptied where routing is not uniform (the "
                            "floor of uniform routing, not of this run)")  # fmt: skip
    return frame


def migrate_table(path: Path, name: str, example: Path) -> Migration | None:
    """Table ``name`` at ``path`` brought to today's columns (written back); None where the
    checked reader already accepts it."""
    try:
        read_table(name, path)
        return None
    except DamagedFile:
        pass
    # As text: every value the run wrote is written back exactly as it was.
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    done = Migration(path, name)
    if name == "decode_table":
        frame = migrate_decode(frame, example, done)
    columns = list(table(name).columns)
    done.added_empty = [c for c in columns if c not in frame.columns]
    extra = [c for c in frame.columns if c not in columns]
    if extra:
        raise DamagedFile(f"{path}: columns {', '.join(extra)} are not the {name} table's: "
                          "a table of another kind, or a column renamed since (migrate it by "
                          "hand, in code)")  # fmt: skip
    write_frame(frame.reindex(columns=columns, fill_value=""), path)
    read_table(name, path)  # now accepted, or DamagedFile says why not
    return done


def migrate_example(example: Path) -> list[Migration]:
    """Every derived table of ``example`` (and of the examples in its sub-folders that keep
    tables) brought to today's schema; what was done, per table."""
    done = []
    folders = [example, *sorted(p.parent for p in example.glob("*/**/README.md"))]
    for folder in folders:
        for file, name in DERIVED.items():
            if (folder / file).is_file():
                migration = migrate_table(folder / file, name, folder)
                if migration is not None:
                    done.append(migration)
    return done
