"""The results folder's own shape, checked before Snakemake plans anything: entries no job
can read or replace, which Snakemake itself trips over (a symbolic link that loops ends its
planning in a traceback, one that points nowhere in "a concurrent process has deleted it")
or reads as absent (a folder where a table goes: the report is rendered without it).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

#: What the study writes as files: a folder of such a name is no file of the study.
FILE_SUFFIXES = (".parquet", ".csv", ".json", ".html", ".png", ".tsv", ".log", ".txt")


def results_problems(folder: str | os.PathLike = "results", folders=()) -> list[str]:
    """One line for each entry of ``folder`` that no job can read or replace: a symbolic link
    that loops or points nowhere, a folder named as the study names its files (``peaks.json``,
    ``tables/sweep.csv``), or ``folder`` itself a file. Folders that are links are not
    followed (a results folder may be a link to a larger disk: that is fine). ``folders``:
    paths the study writes as folders whatever their name (a decode variant's, ``v1.json``)."""
    keep = {os.path.normpath(f) for f in folders}
    folder = Path(folder)
    if folder.is_symlink() and not folder.exists():
        return [_link_problem(folder)]
    if folder.exists() and not folder.is_dir():
        return [f"{folder} is a file, not the results folder: move it away (mv {folder} "
                f"{folder}.old) and run again"]  # fmt: skip
    problems = []
    for root, dirs, files in os.walk(folder):
        for name in sorted(dirs + files):
            path = Path(root, name)
            if path.is_symlink() and not path.exists():
                problems.append(_link_problem(path))
            elif (
                name in dirs
                and name.endswith(FILE_SUFFIXES)
                and not path.is_symlink()
                and os.path.normpath(path) not in keep
            ):
                problems.append(f"{path} is a folder where the study writes a file: remove it "
                                f"(rm -r {path}) and run again to rebuild the file")  # fmt: skip
        # A folder named as a file is reported, not entered; links to folders are not followed.
        dirs[:] = [
            d
            for d in dirs
            if not d.endswith(FILE_SUFFIXES) or os.path.normpath(Path(root, d)) in keep
        ]
    return sorted(problems)  # in the order of their paths, whatever order the walk took


def _link_problem(path: Path) -> str:
    """A symbolic link that loops or whose target is absent."""
    target = os.readlink(path)
    try:
        path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return (f"{path} is a symbolic link that loops ({path} -> {target}): remove it "
                    f"(rm {path}) and run again to rebuild the file")  # fmt: skip
    return (f"{path} is a symbolic link to {target}, which does not exist: remove it (rm "
            f"{path}) and run again to rebuild the file, or restore its target")  # fmt: skip
