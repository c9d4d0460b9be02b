"""The table registry and its checked readers.

Each stage declares its tables (name, what, path, columns with their kinds, allowed values)
in its schema module and registers them here (:func:`register_tables`); writers take their
column order from the registry, readers go through :func:`read_table` and :func:`read_record`,
which stop at a damaged file (truncated, cut mid-line, another table's file, garbage; a table
that disagrees with its writer's record, core/table_records.py: copied from another place, cut,
edited, of another plan) with a :class:`DamagedFile` whose message is one line naming the file
and what is wrong, instead of handing half a table, another backend's rows or another table's
columns to the next stage. ``studylib.study_tables``
imports every stage's schema, so a process that imports it sees every table.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa

from .formats import Column, labelled, tooltips
from .table_records import DamagedFile, check_written, sidecar

__all__ = ["DamagedFile"]  # defined beside the records, raised by every checked reader
log = logging.getLogger("study.tables")


@dataclass(frozen=True)
class Table:
    """One table: what it is, where it lives, its columns (in order) and allowed values."""

    name: str
    what: str
    path: str  # the workflow's path pattern, for messages
    # {column: kind}, or a function giving it (for columns owned elsewhere, read late)
    kinds: dict[str, str] | Callable[[], dict[str, str]]
    values: dict[str, tuple] = field(default_factory=dict)
    # Columns added after tables without them were committed (examples): the writer always
    # writes them; a table read without one gets it empty.
    added: tuple[str, ...] = ()

    @property
    def columns(self) -> dict[str, str]:
        return self.kinds() if callable(self.kinds) else self.kinds


#: Every registered table, by name, in the order they were registered.
_TABLES: dict[str, Table] = {}
#: {table: {column: Column}}, each table's columns in the order its report table shows them
#: (those with no label: tooltips only); also tables the report derives (the decode pairs).
SHOWN: dict[str, dict[str, Column]] = {}


def register_tables(*tables: Table) -> None:
    """Add tables to the registry (a stage's schema module, at import); a name is one table."""
    for spec in tables:
        known = _TABLES.get(spec.name)
        if known is not None and known != spec:
            raise ValueError(f"table {spec.name!r} is registered twice, differently")
        _TABLES[spec.name] = spec


def register_shown(name: str, columns: dict[str, Column]) -> None:
    """How table ``name``'s columns are shown (see :data:`SHOWN`)."""
    SHOWN[name] = columns


def registered_tables() -> tuple[Table, ...]:
    return tuple(_TABLES.values())


#: JSON records: what each is, its required keys and optional ones, with their kinds (num,
#: rate and text may be null; a rate is a measured peak: above 0 and at most RATE_CEILING).
RECORDS = {
    "peaks": ("this machine's measured peaks", {"copy_gbps": "rate"},
              {"device": "text", "bf16_tflops": "rate", "fp8_tflops": "rate",
               "fp32_tflops": "rate", "fp4_tflops": "rate"}),
    "hardware": ("the hardware record", {"device": "text", "gpus": "list", "packages": "dict"},
                 {"host": "dict", "driver_version": "text", "cuda_version": "text"}),
}  # fmt: skip
#: No one device copies 100 TB/s or computes 100 PFLOP/s dense (an H200: 4.8 TB/s, 2 PFLOP/s
#: in FP8): a peak beyond this is a damaged record, not a measurement.
RATE_CEILING = 1e5


def table(name: str) -> Table:
    try:
        return _TABLES[name]
    except KeyError:
        raise KeyError(f"no table {name!r} is registered (known: {', '.join(_TABLES)}); "
                       "import its stage's schema, or studylib.study_tables") from None  # fmt: skip


def columns(name: str) -> list[str]:
    """A table's columns in the order writers put them."""
    return list(table(name).columns)


def _fail(path, problem: str):
    raise DamagedFile(f"{path}: {problem}")


#: Tables already read and checked in this process, by (table, path, size, mtime, its record's
#: size and mtime): a job's inputs are checked before it starts (snakemake_job.setup_logging)
#: and then read by the job.
_CHECKED: dict[tuple, pd.DataFrame] = {}


def read_table(name: str, path: str | os.PathLike, plan: str | None = None) -> pd.DataFrame:
    """``path`` read as table ``name``, checked: readable to its end, its columns present and
    each value of its kind, its rows and content those its writer recorded, written where it
    lies (core/table_records.py) and, given ``plan`` (a plan hash), for that plan; else
    :class:`DamagedFile`. A file read once and unchanged since is not read or checked again
    (the caller gets its own copy)."""
    spec, path = table(name), Path(path)
    if path.is_dir():
        _fail(path, f"a folder, not a file ({spec.what} is expected here)")
    if not path.is_file():
        _fail(path, f"missing ({spec.what} is expected here)")
    stat = path.stat()
    if stat.st_size == 0:
        _fail(path, "empty file (0 bytes): truncated or never finished")
    record = sidecar(path)
    record_stat = record.stat() if path.suffix == ".csv" and record.is_file() else None
    key = (name, str(path.resolve()), stat.st_size, stat.st_mtime_ns,
           record_stat and (record_stat.st_size, record_stat.st_mtime_ns))  # fmt: skip
    if key not in _CHECKED:
        frame = _read_parquet(path) if path.suffix == ".parquet" else _read_csv(path)
        check_frame(name, frame, path)
        warning = check_written(path, len(frame))
        if warning:
            log.warning("%s", warning)
        _CHECKED[key] = frame
    if plan is not None:
        check_written(path, len(_CHECKED[key]), plan)
    return _CHECKED[key].copy()


def _read_parquet(path: Path) -> pd.DataFrame:

    try:
        return pd.read_parquet(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        _fail(path, f"not a readable parquet file (truncated or overwritten?): {first}")


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        _fail(path, f"not a text CSV file: {exc.reason} at byte {exc.start}")
    if not text.endswith("\n"):
        # Every writer ends with a newline: a file without one was cut short.
        _fail(path, "the last line is cut short (no newline at the end): the file is truncated")
    # csv, not lines: a quoted field (a library's error message) may hold newlines.
    reader = csv.reader(io.StringIO(text, newline=""))
    width = len(next(reader))
    for row in reader:
        if len(row) != width:
            _fail(path, f"line {reader.line_num} has {len(row)} fields, the header {width}")
    try:
        return pd.read_csv(path, keep_default_na=True)
    except (pd.errors.ParserError, ValueError) as exc:
        _fail(path, f"not a readable CSV file: {str(exc).strip().splitlines()[0]}")


def check_frame(name: str, frame: pd.DataFrame, path) -> None:
    """Columns present, values of their kinds and among the allowed ones."""
    spec = table(name)
    for column in spec.added:
        if column in spec.columns and column not in frame.columns:
            frame[column] = pd.NA
    missing = [c for c in spec.columns if c not in frame.columns]
    if missing:
        shown = ", ".join(missing[:6]) + (
            f" (+{len(missing) - 6} more)" if len(missing) > 6 else ""
        )
        guess = _looks_like(frame, exclude=name)
        _fail(path, f"not {spec.what} ({spec.path}): no column {shown}"
              + (f"; it looks like {guess}" if guess else ""))  # fmt: skip
    for column, kind in spec.columns.items():
        bad = _bad_values(frame[column], kind)
        if bad is not None:
            row, value = bad
            _fail(path, f"column {column}, row {row + 1}: {value!r} is not {KIND_WORDS[kind]}")
        allowed = spec.values.get(column)
        if allowed:
            present = frame[column].dropna()
            odd = present[~present.isin(allowed)]
            if len(odd):
                _fail(path, f"column {column}, row {odd.index[0] + 1}: {odd.iloc[0]!r} is not "
                      f"one of {', '.join(allowed)}")  # fmt: skip


KIND_WORDS = {"int": "a whole number", "num": "a number", "flag": "true or false",
              "text": "text", "any": "anything", "rate": "a number"}  # fmt: skip


def _bad_values(series: pd.Series, kind: str):
    """(row, value) of the first value not of ``kind``, else None (empty cells pass)."""
    if kind == "any":
        return None
    present = series.dropna()
    if kind == "text":
        odd = present[~present.map(lambda v: isinstance(v, str))]
    elif kind in ("num", "int"):
        if pd.api.types.is_bool_dtype(present):
            odd = present
        else:
            numbers = pd.to_numeric(present, errors="coerce")
            odd = present[numbers.isna()]
            if kind == "int" and odd.empty:
                odd = present[(numbers % 1 != 0) & numbers.notna()]
    else:  # flag
        odd = present[~present.isin([True, False, "True", "False", "true", "false"])]
    if odd.empty:
        return None
    value = odd.iloc[0]
    return odd.index[0], value.item() if hasattr(value, "item") else value  # numpy -> Python


def _looks_like(frame: pd.DataFrame, exclude: str) -> str | None:
    """The table whose columns ``frame`` holds (another table's file copied over this one)."""
    for other in _TABLES.values():
        if other.name != exclude and len(other.columns) > 1:
            if all(c in frame.columns for c in other.columns):
                return f"{other.what} ({other.path})"
    return None


def read_record(name: str, path: str | os.PathLike) -> dict:
    """A JSON record (peaks, hardware) read and checked: a mapping with its keys, each of its
    kind (num and text may be null); else :class:`DamagedFile`."""
    what, required, optional = RECORDS[name]
    path = Path(path)
    if path.is_dir():
        _fail(path, f"a folder, not a file ({what} is expected here)")
    if not path.is_file():
        _fail(path, f"missing ({what} is expected here)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        _fail(path, f"not a JSON text file: {exc.reason} at byte {exc.start}")
    except json.JSONDecodeError as exc:
        _fail(path, f"not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})")
    if not isinstance(data, dict):
        _fail(path, f"holds a JSON {type(data).__name__}, not {what}")
    missing = [key for key in required if key not in data]
    if missing:
        _fail(path, f"not {what}: no key {', '.join(missing)}")
    kinds = {"text": str, "num": (int, float), "rate": (int, float), "list": list, "dict": dict}
    for key, kind in {**required, **optional}.items():
        if key not in data:
            continue
        value = data[key]
        nullable = kind in ("text", "num", "rate")
        wrong = not isinstance(value, kinds[kind]) or isinstance(value, bool)
        if (value is not None or not nullable) and wrong:
            _fail(path, f"key {key}: {value!r} is not {KIND_WORDS.get(kind, 'a ' + kind)}")
        if kind == "rate" and value is not None and not 0 < value <= RATE_CEILING:
            why = ("NaN is no measurement" if math.isnan(value) else
                   "no measured peak is 0 or below" if value <= 0 else
                   f"no one device reaches it (at most {RATE_CEILING:g})")  # fmt: skip
            _fail(path, f"key {key}: {value!r} is not a measured peak: {why}; a damaged or "
                  "edited record")  # fmt: skip
    return data


def kind_of(path: str | os.PathLike) -> tuple[str, str] | None:
    """("table" or "record", name) of a study file, from where it lives; None for others."""
    path = Path(path)
    for name in RECORDS:
        if path.name == f"{name}.json":
            return "record", name
    patterns = {
        spec.name: spec.path.removeprefix("results/")
        .replace("{backend}", "*")
        .replace("{variant}", "*")
        for spec in _TABLES.values()
    }
    # The longest pattern first: kernel_power/*_timeline.parquet before kernel_power/*.parquet.
    for name, pattern in sorted(patterns.items(), key=lambda item: -len(item[1])):
        if path.match(pattern):
            return "table", name
    return None


def check_inputs(paths) -> dict[str, int]:
    """Every study table or record among ``paths`` read and checked (a job's inputs, before
    it runs): {path: rows}; the first damaged one raises :class:`DamagedFile`."""
    checked = {}
    for path in _flat(paths):
        kind = kind_of(path)
        if kind is None:
            continue  # a folder (the decode model) or a file of no table: not checked here
        if kind[0] == "record":
            read_record(kind[1], path)
            checked[str(path)] = 1
        else:
            checked[str(path)] = len(read_table(kind[1], path))
    return checked


def check_plans(name: str, plans: dict) -> None:
    """Each file of ``plans`` ({path: the plan hash this run gives its job}, a rule's
    ``params.plans``) read as table ``name`` and written for that plan: a measuring job's table
    from another run or config is refused (:class:`DamagedFile`)."""
    for path, plan in plans.items():
        read_table(name, path, plan)


def _flat(paths):
    for item in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        if isinstance(item, (str, os.PathLike)):
            yield item
        else:
            yield from _flat(item)


def read_optional(path: str | os.PathLike | None) -> pd.DataFrame:
    """A table the figures and the report draw, read plainly (parquet or CSV); an empty frame
    when there is none to read: no path, no file, an empty file or no header."""
    if path is None or not Path(path).is_file() or Path(path).stat().st_size == 0:
        return pd.DataFrame()
    if Path(path).suffix == ".parquet":
        return pd.read_parquet(path)
    try:
        return pd.read_csv(path, keep_default_na=True)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def shown(name: str) -> list[tuple[str, Column]]:
    """Table ``name``'s report columns, in order: (column, :class:`Column`)."""
    return labelled(SHOWN[name])


def tips(name: str, columns) -> list[tuple[str, str, str]]:
    """Tooltip rows of ``columns`` of table ``name``: (column, title, d3 format; "" for text)."""
    return tooltips(SHOWN[name], columns)
