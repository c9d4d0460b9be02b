"""The style gates CI enforces: ruff, snakefmt and snakemake --lint."""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

BIN = Path(sys.executable).parent


def run(*cmd):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


def test_ruff_check():
    proc = run(str(BIN / "ruff"), "check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format():
    proc = run(str(BIN / "ruff"), "format", "--check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_snakefmt():
    proc = run(str(BIN / "snakefmt"), "--check", "Snakefile", "rules")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_snakemake_lint():
    proc = run(str(BIN / "snakemake"), "--lint", "--cores", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Congratulations" in proc.stdout + proc.stderr


@pytest.mark.parametrize("example", sorted((ROOT / "config" / "examples").glob("*.yaml")))
def test_examples_are_valid(example, tmp_path):
    proc = run(str(BIN / "snakemake"), "--dry-run", "--cores", "1", "--configfile", str(example))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_tracked_link_points_outside_the_repo():
    """A link git tracks travels with every clone: one to an absolute path or out of the tree
    (a worktree's .venv link was committed once, and the merge replaced the real .venv with
    it) breaks `make test` on a fresh clone."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listing = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
    links = [line.split("\t", 1)[1] for line in listing.splitlines() if line.startswith("120000")]
    outside = [f"{link} -> {(ROOT / link).readlink()}" for link in links
               if (ROOT / link).readlink().is_absolute()
               or not (ROOT / link).resolve().is_relative_to(ROOT.resolve())]  # fmt: skip
    assert not outside, outside
