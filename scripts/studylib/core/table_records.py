"""A table's writer's record: who wrote it, for which plan, where, how many rows, what bytes.

Every table :func:`studylib.core.io.write_frame` writes carries one record, the same JSON object
for both formats: a parquet file keeps it in its footer's key-value metadata (key
``study.written``), a CSV beside it, in ``.<name>.written``::

    {"record": 1, "producer": "sweep torch", "file": "sweeps/torch.parquet",
     "plan": "3f2a9c0d1e4b", "rows": 1234, "bytes": 56789, "content": "9b1c4f0e2a7d3e55"}

``producer``: the job or function that wrote it; ``file``: where it was written (its folder
and name); ``plan``: the hash of the plan the job ran with (``io.stable_hash`` of the rule's
``params.plan``; null for tables derived from other tables); ``rows``; ``bytes`` and
``content``: the size and the SHA-256 (first 16 hex digits) of the CSV file, or of a parquet
file's data (every byte before its footer, which holds the record). Hashing bytes costs a
read of the file, about a millisecond per megabyte.

The checked readers (``table_registry.read_table``) hold a table against its record
(:func:`check_written`): another file copied over it, a cut, an added or edited row, a garbage
record are refused (:class:`DamagedFile`, one line). A table without a record (committed
examples, results from before records) is read as before; inside a results folder whose tables
carry records (its ``.records`` marker, written with the first of them) one written after the
marker is refused: the study did not write it (see :func:`check_written`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

#: The record's version, its key in a parquet footer, and its fields with their kinds.
FORMAT = 1
PARQUET_KEY = b"study.written"
FIELDS = {"record": int, "producer": str, "file": str, "plan": (str, type(None)),
          "rows": int, "bytes": int, "content": str}  # fmt: skip
KIND_WORDS = {int: "a whole number", str: "text", (str, type(None)): "text or null"}
#: The marker a results folder gets with its first recorded table (see module docstring).
MARKER = ".records"
MARKER_TEXT = ("The study's tables in this folder carry their writer's record (see\n"
               "scripts/studylib/core/table_records.py): one without a record written after\n"
               "this file is refused by the checked readers; one written before is read with a\n"
               "warning.\n")  # fmt: skip


class DamagedFile(ValueError):
    """An input file that is not what its table says: the message is one line."""


def sidecar(path: str | os.PathLike) -> Path:
    """Where a CSV's writer records what it wrote (hidden, beside it)."""
    path = Path(path)
    return path.with_name(f".{path.name}.written")


def where(path: str | os.PathLike) -> str:
    """A table's place as its record names it: its folder and name (``sweeps/torch.parquet``),
    the same wherever the results folder lives."""
    return "/".join(Path(path).parts[-2:])


def results_root(path: str | os.PathLike) -> Path | None:
    """The results folder a study file lies in (``results/``, at most three folders up: the
    deepest table is ``results/decode/{variant}/summary.csv``), else None."""
    for parent in list(Path(path).parents)[:3]:
        if parent.name == "results":
            return parent
    return None


def mark_records(path: str | os.PathLike) -> None:
    """Give ``path``'s results folder its marker, if it has none (before its first recorded
    table is written; two jobs at once: the first wins)."""
    root = results_root(path)
    if root is None or (root / MARKER).exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(root / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        return
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(MARKER_TEXT)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def new_record(path, producer: str, plan: str | None, rows: int, size: int, content: str):
    return {"record": FORMAT, "producer": producer, "file": where(path), "plan": plan,
            "rows": int(rows), "bytes": int(size), "content": content}  # fmt: skip


class _HashingSink:
    """A file that hashes what is written through it (pyarrow writes a parquet file here)."""

    def __init__(self, raw):
        self.raw, self.hash, self.size, self.closed = raw, hashlib.sha256(), 0, False

    def write(self, data) -> int:
        data = bytes(data)
        self.hash.update(data)
        self.size += len(data)
        return self.raw.write(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.raw.flush()

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False


def write_parquet(df, tmp: Path, record: Callable[[int, int, str], dict]) -> None:
    """``df`` as parquet (as ``df.to_parquet(index=False)`` writes it) with its record in the
    footer: ``record(rows, bytes, content)`` of the data written before the footer."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    with open(tmp, "wb") as raw:
        sink = _HashingSink(raw)
        writer = pq.ParquetWriter(sink, table.schema)
        writer.write_table(table)
        made = record(table.num_rows, sink.size, sink.hash.hexdigest()[:16])
        writer.add_key_value_metadata({PARQUET_KEY: json.dumps(made, sort_keys=True)})
        writer.close()


def _parquet_facts(path: Path) -> tuple[str | None, dict]:
    """(the record's text or None, {rows, bytes, content} of the file's data)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        handle.seek(max(size - 8, 0))
        tail = handle.read(8)
        footer = int.from_bytes(tail[:4], "little")
        data_size = max(size - 8 - footer, 0)
        handle.seek(0)
        data = handle.read(data_size)
    meta = pq.read_metadata(path)
    text = (meta.metadata or {}).get(PARQUET_KEY)
    return (None if text is None else text.decode("utf-8", "replace"),
            {"rows": meta.num_rows, "bytes": data_size, "content": digest(data)})  # fmt: skip


def _csv_facts(path: Path, rows: int) -> tuple[str | None, dict]:
    record = sidecar(path)
    text = record.read_text(encoding="utf-8", errors="replace") if record.is_file() else None
    data = path.read_bytes()
    return text, {"rows": rows, "bytes": len(data), "content": digest(data)}


def _place(path: Path) -> str:
    """Where ``path``'s record lives, for messages."""
    if path.suffix == ".parquet":
        return f"parquet metadata key {PARQUET_KEY.decode()}"
    return f"{sidecar(path).name} beside it"


def parse_record(text: str) -> tuple[dict | None, str | None]:
    """(record, None); (the old CSV record {bytes, rows}, None); or (None, what is wrong)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
    if not isinstance(data, dict):
        return None, f"a JSON {type(data).__name__}, not a record"
    if "record" not in data and set(data) == {"bytes", "rows"}:  # before producers and hashes
        if all(isinstance(data[k], int) and not isinstance(data[k], bool) for k in data):
            return data, None
        return None, "bytes and rows that are not whole numbers"
    missing = [key for key in FIELDS if key not in data]
    if missing:
        return None, f"no key {', '.join(missing)}"
    for key, kind in FIELDS.items():
        value = data[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            return None, f"key {key}: {value!r} is not {KIND_WORDS[kind]}"
    if data["record"] != FORMAT:
        return None, f"record format {data['record']}, not {FORMAT}"
    return data, None


def check_written(path: Path, rows: int, plan: str | None = None) -> str | None:
    """``path`` (read: ``rows`` rows) against its writer's record: :class:`DamagedFile` where
    they disagree; a warning line for a table of a results folder written before its tables
    carried records; else None. ``plan``: the plan hash this run expects of it."""
    if path.suffix == ".parquet":
        text, facts = _parquet_facts(path)
    else:
        text, facts = _csv_facts(path, rows)
    record, problem = (None, None) if text is None else parse_record(text)
    if problem:
        raise DamagedFile(f"{path}: its writer's record ({_place(path)}) is garbage: {problem}; "
                          "damaged or edited")  # fmt: skip
    if record is not None and "record" in record:
        _against(path, record, facts, plan)
        return None
    if record is not None and record["bytes"] != facts["bytes"]:  # the old CSV record
        raise DamagedFile(
            f"{path}: {facts['bytes']} bytes and {rows} rows where its writer wrote "
            f"{record['bytes']} bytes and {record['rows']} rows: cut at a line end, or changed "
            "after it was written; rerun the rule that writes it")  # fmt: skip
    return _without_record(path, old=record is not None)


def _against(path: Path, record: dict, facts: dict, plan: str | None) -> None:
    producer, here = record["producer"], where(path)
    if record["file"] != here:
        raise DamagedFile(f"{path}: written by {producer} as {record['file']}, not as {here}: "
                          "another table copied over this one")  # fmt: skip
    if plan is not None and record["plan"] != plan:
        raise DamagedFile(f"{path}: written by {producer} for another plan (plan "
                          f"{record['plan']}; this run's is {plan}): a table of another run or "
                          "config copied here")  # fmt: skip
    have, want = facts["rows"], record["rows"]
    if have != want:
        how = ("cut, or rows removed after it was written" if have < want else
               "rows added (a duplicated row?) after it was written")  # fmt: skip
        raise DamagedFile(f"{path}: {have} rows where its writer ({producer}) wrote {want}: "
                          f"{how}")  # fmt: skip
    if (facts["bytes"], facts["content"]) != (record["bytes"], record["content"]):
        raise DamagedFile(
            f"{path}: not the content its writer ({producer}) wrote ({facts['bytes']} bytes, "
            f"hash {facts['content']}, where it wrote {record['bytes']} bytes, hash "
            f"{record['content']}): edited after it was written")  # fmt: skip


def _without_record(path: Path, old: bool) -> str | None:
    """A table without a record (``old``: with the size and rows of the CSV record from before
    producers and hashes): unchecked outside a results folder (committed examples); in one,
    allowed with a warning when written before the folder's first recorded table (results of a
    study from before records), else refused."""
    root = results_root(path)
    if root is None:
        return None
    marker = root / MARKER
    what = "only an old writer's record (bytes and rows)" if old else "no writer's record"
    if marker.is_file() and path.stat().st_mtime_ns >= marker.stat().st_mtime_ns:
        raise DamagedFile(
            f"{path}: {what} ({_place(path)}), yet written after this folder's tables began "
            f"carrying one ({marker}): not written by the study (rewritten by another program, "
            "e.g. pandas, or copied here)"
        )
    return (f"{path}: {what} (written before the study's tables carried one): its columns and "
            "values are checked, its rows and content cannot be; delete it and run again to "
            "rebuild it with one")  # fmt: skip
