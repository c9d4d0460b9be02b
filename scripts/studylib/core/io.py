"""Atomic output writing: a failed job never leaves a file that looks complete."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


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


def written_record(path: str | os.PathLike) -> Path:
    """Where a CSV's writer records what it wrote (hidden, beside it)."""
    path = Path(path)
    return path.with_name(f".{path.name}.written")


def write_frame(df, path: str | os.PathLike) -> None:
    """Write a pandas frame as parquet or CSV, chosen by the file's suffix. A CSV gets a record
    of its size and rows beside it: a CSV cut exactly at a line end still parses, and only
    this record tells it from a complete one (parquet files carry their own footer)."""
    suffix = Path(path).suffix
    with atomic_path(path) as tmp:
        if suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        elif suffix == ".csv":
            df.to_csv(tmp, index=False)
            size = tmp.stat().st_size
        else:
            raise ValueError(f"unsupported table format: {path}")
    if suffix == ".csv":
        write_json(written_record(path), {"bytes": size, "rows": len(df)})


def stable_hash(data) -> str:
    """A short hash of JSON-able ``data``, independent of key order."""
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
