"""Atomic output writing: a failed job never leaves a file that looks complete, and each table
it writes carries its writer's record (core/table_records.py)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .table_records import digest, mark_records, new_record, sidecar, write_parquet


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` on success only."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    # mkstemp makes 0600 files; outputs get the usual permissions (umask applied).
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_frame(df, path: str | os.PathLike, producer: str | None = None, plan=None) -> None:
    """Write a pandas frame as parquet or CSV, chosen by the file's suffix, with its writer's
    record (core/table_records.py: in a parquet file's footer, beside a CSV): ``producer``
    names the writer (default: the calling module and function), ``plan`` is what the job ran
    with (its hash is recorded: a sweep's or a decode variant's plan; None for tables derived
    from tables). The checked readers refuse a table that disagrees with its record."""
    path = Path(path)
    if path.suffix not in (".parquet", ".csv"):
        raise ValueError(f"unsupported table format: {path}")
    producer = producer or _caller()
    plan_hash = None if plan is None else stable_hash(plan)

    def record(rows: int, size: int, content: str) -> dict:
        return new_record(path, producer, plan_hash, rows, size, content)

    mark_records(path)
    with atomic_path(path) as tmp:
        if path.suffix == ".parquet":
            write_parquet(df, tmp, record)
        else:
            df.to_csv(tmp, index=False)
            data = tmp.read_bytes()
            made = record(len(df), len(data), digest(data))
    if path.suffix == ".csv":
        write_json(sidecar(path), made)


def _caller() -> str:
    """``module.function`` of write_frame's caller (the module alone at its top level)."""
    code = sys._getframe(2).f_code
    stem = Path(code.co_filename).stem
    return stem if code.co_name == "<module>" else f"{stem}.{code.co_name}"


def stable_hash(data) -> str:
    """A short hash of JSON-able ``data``, independent of key order."""
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
