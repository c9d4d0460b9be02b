"""A long job's journal of finished work (a sweep's points, kernel-power windows, a decode
job's concurrencies, the peaks): one JSON line per finished item, appended as each ends, so an
interrupted job resumes where it stopped. Its name is keyed by the plan and by what measures
it, so nothing measured otherwise is reused."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .io import stable_hash

log = logging.getLogger("study.journal")


def point_key(point: dict) -> str:
    return json.dumps(point, sort_keys=True)


def journal_path(work_dir: Path, plan: dict, hello: dict) -> Path:
    """The journal of finished points, keyed by the plan and by what measures it (device,
    library version as the worker reports it): an upgrade never reuses old points."""
    measured_by = {k: hello.get(k) for k in ("device", "device_name", "library_version")}
    return work_dir / f"progress-{stable_hash([plan, measured_by])}.jsonl"


def read_journal(progress: Path) -> dict:
    """{point key: row} of a journal; a line cut short by a kill mid-write is dropped (and
    the next line written after it stays whole: see ``Journal.record``)."""
    done = {}
    if progress.exists():
        for line in progress.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "_key" in row:
                done[row.pop("_key")] = row
        items = f"{len(done)} finished item{'s' if len(done) != 1 else ''}"
        log.info("resuming from the journal in %s: %s kept", progress.parent.name, items)
    return done


def append_to(path: Path):
    """The journal opened for appending. A last line a kill cut short is ended first, so the
    next record starts on a line of its own (appended to the cut line, it would be lost
    with it)."""
    path = Path(path)
    cut = False
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as last:
            last.seek(-1, 2)
            cut = last.read(1) != b"\n"
    out = open(path, "a", encoding="utf-8")  # noqa: SIM115 - the caller's context manager
    if cut:
        out.write("\n")
    return out


class Journal:
    """A job's journal of finished items, each a JSON line of its key and what it produced,
    appended and flushed as the item ends (a decode job's concurrencies, the peaks job's
    ceilings). ``done`` holds the items a killed earlier attempt finished; ``finish`` removes
    the journal once the job's outputs are written."""

    def __init__(self, work_dir: Path, plan, measured_by: dict):
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.path = journal_path(self.work_dir, plan, measured_by)
        self.done = read_journal(self.path)
        self.reused: list[str] = sorted(self.done)

    def get(self, key: str) -> dict | None:
        return self.done.get(key)

    def record(self, key: str, payload: dict) -> None:
        self.done[key] = payload
        with append_to(self.path) as out:
            out.write(json.dumps({**payload, "_key": key}, default=str) + "\n")
            out.flush()

    def finish(self) -> None:
        for stale in self.work_dir.iterdir():
            stale.unlink()
        self.work_dir.rmdir()
