"""A long job's journal of finished work (a sweep's points, kernel-power windows): one JSON
line per finished item, appended as each ends, so an interrupted job resumes where it stopped.
Its name is keyed by the plan and by what measures it, so nothing measured otherwise is reused."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .io import stable_hash

log = logging.getLogger("study.sweep")


def point_key(point: dict) -> str:
    return json.dumps(point, sort_keys=True)


def journal_path(work_dir: Path, plan: dict, hello: dict) -> Path:
    """The journal of finished points, keyed by the plan and by what measures it (device,
    library version as the worker reports it): an upgrade never reuses old points."""
    measured_by = {k: hello.get(k) for k in ("device", "device_name", "library_version")}
    return work_dir / f"progress-{stable_hash([plan, measured_by])}.jsonl"


def read_journal(progress: Path) -> dict:
    """{point key: row} of a journal; a line cut short by a kill mid-write is dropped."""
    done = {}
    if progress.exists():
        for line in progress.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "_key" in row:
                done[row.pop("_key")] = row
        log.info("resuming: %d points already measured", len(done))
    return done
