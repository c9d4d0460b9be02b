"""tools/gpu_study.sh run detached (issue 34): a box whose commands are cut after minutes
starts the study in its own session, then asks for its state, waits for its end and packs
its results (with the journals of unfinished jobs), one command each. Snakemake here is a
stand-in on PATH that holds until a gate file appears (no timing), writes a result and exits
3."""

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from helpers import ROOT

FAKE_SNAKEMAKE = """#!/usr/bin/env bash
echo "snakemake $*"
mkdir -p results/decode/.v.work
echo '{"_key": "main:1"}' > results/decode/.v.work/progress-1.jsonl
until [ -f gate ]; do sleep 0.05; done
mkdir -p results/tables && echo done > results/tables/x.csv
echo "snakemake done"
exit 3
"""


def run(folder: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "tools/gpu_study.sh", *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def box(tmp_path: Path, request) -> tuple[Path, dict]:
    """A repo folder with tools/gpu_study.sh and the gated stand-in Snakemake on PATH; its
    environment (OUT: tmp_path)."""
    folder = tmp_path / "repo"
    (folder / "tools").mkdir(parents=True)
    # A failed assertion still opens the gate: the detached stand-in never outlives the test.
    request.addfinalizer(lambda: (folder / "gate").touch())
    shutil.copy2(ROOT / "tools" / "gpu_study.sh", folder / "tools")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "snakemake").write_text(FAKE_SNAKEMAKE)
    (bin_dir / "snakemake").chmod(0o755)
    return folder, {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                    "GPU_STUDY_INSTALLED": "1", "OUT": str(tmp_path)}  # fmt: skip


def test_a_detached_study_is_started_watched_waited_for_and_collected(tmp_path, request):
    folder, env = box(tmp_path, request)

    assert "no detached run here" in run(folder, "--status", env=env).stdout
    fresh = run(folder, "--wait", "100", "--collect", env=env)  # a fresh box: at once, nothing
    assert fresh.returncode == 2 and not (tmp_path / "results.tar.gz").exists()
    started = run(folder, "--detach", "--cores", "16", env=env)
    assert started.returncode == 0 and "started detached" in started.stdout, started.stderr
    state = run(folder, "--status", env=env)  # held at the gate: running
    assert state.returncode == 3 and "gpu_study: running" in state.stdout
    again = run(folder, "--detach", "--cores", "16", env=env)  # one at a time
    assert again.returncode == 2 and "still going" in again.stderr
    waited = run(folder, "--wait", "1", "--collect", env=env)  # the wait ends at its limit
    assert waited.returncode == 3 and "running" in waited.stdout
    with tarfile.open(tmp_path / "results.tar.gz") as tar:  # what the run has so far
        names = tar.getnames()
    # the unfinished job's journal too: carried back to a fresh box, the job resumes
    assert "results/.gpu_study/run.log" in names
    assert "results/decode/.v.work/progress-1.jsonl" in names
    (tmp_path / "results.tar.gz").unlink()

    (folder / "gate").touch()
    ended = run(folder, "--wait", "100", env=env)
    assert ended.returncode == 3, ended.stdout
    assert "ended, snakemake exit 3" in ended.stdout and "snakemake --cores 16" in ended.stdout
    assert "snakemake exit 3 after" in ended.stdout

    packed = run(folder, "--collect", env=env)
    assert packed.returncode == 0, packed.stderr
    with tarfile.open(tmp_path / "results.tar.gz") as tar:
        names = tar.getnames()
    assert "results/tables/x.csv" in names and "results/.gpu_study/run.log" in names


def test_a_lost_box_s_results_go_on_on_a_fresh_one(tmp_path, request):
    # The first box's collected archive (a finished output, an unfinished job's journal and
    # the detached run's state) carried to a fresh box: --resume unpacks it, keeps the lost
    # run's log, drops its state, and runs Snakemake on only what is missing.
    first = tmp_path / "first"
    (first / "results" / "sweeps").mkdir(parents=True)
    (first / "results" / "sweeps" / "flashinfer.parquet").write_text("measured")
    (first / "results" / "decode" / ".v.work").mkdir(parents=True)
    (first / "results" / "decode" / ".v.work" / "progress-1.jsonl").write_text("{}")
    (first / "results" / ".gpu_study").mkdir()
    (first / "results" / ".gpu_study" / "run.log").write_text("the first box's log")
    (first / "results" / ".gpu_study" / "pid").write_text("1")
    archive = tmp_path / "results.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(first / "results", arcname="results")

    folder, env = box(tmp_path, request)

    missing = run(folder, "--resume", str(tmp_path / "nothing.tar.gz"), "--detach", env=env)
    assert missing.returncode == 2 and "needs the results.tar.gz" in missing.stderr
    started = run(folder, "--resume", str(archive), "--detach", "--cores", "16", env=env)
    assert started.returncode == 0 and "started detached" in started.stdout, started.stderr
    assert (folder / "results" / "sweeps" / "flashinfer.parquet").read_text() == "measured"
    assert (folder / "results" / "gpu_study_before_resume.log").read_text() == (
        "the first box's log"
    )
    (folder / "gate").touch()
    ended = run(folder, "--wait", "100", env=env)
    assert "snakemake --rerun-triggers mtime --cores 16" in ended.stdout, ended.stdout
    assert "ended, snakemake exit 3" in ended.stdout


def test_an_archive_too_big_for_one_file_comes_in_parts_and_resumes_from_them(tmp_path, request):
    # A lent box brings back at most 16 MiB a file: the whole default's archive (20.6 MB on
    # the H200) was left behind whole. Over GPU_STUDY_PART_MIB, --collect splits it, and
    # --resume takes the parts under the archive's name.
    folder, env = box(tmp_path, request)
    (folder / "results" / "sweeps").mkdir(parents=True)
    (folder / "results" / "sweeps" / "torch.parquet").write_bytes(os.urandom(3 * 1048576))
    (tmp_path / "results.tar.gz").write_text("an older archive")
    packed = run(folder, "--collect", env={**env, "GPU_STUDY_PART_MIB": "1"})
    assert packed.returncode == 0, packed.stderr
    parts = sorted(tmp_path.glob("results.tar.gz.part*"))
    assert [p.name for p in parts] == [f"results.tar.gz.part0{i}" for i in range(4)]
    assert all(p.stat().st_size <= 1048576 for p in parts)
    assert not (tmp_path / "results.tar.gz").exists()  # no stale whole archive beside them
    assert "cat results.tar.gz.part* > results.tar.gz" in packed.stdout

    fresh, fresh_env = box(tmp_path / "fresh", request)
    started = run(fresh, "--resume", str(tmp_path / "results.tar.gz"), "--detach", env=fresh_env)
    assert started.returncode == 0 and "started detached" in started.stdout, started.stderr
    assert (fresh / "results" / "sweeps" / "torch.parquet").read_bytes() == (
        folder / "results" / "sweeps" / "torch.parquet"
    ).read_bytes()
    # Under the limit, one archive as before (the parts of the last collect cleared).
    small = run(folder, "--collect", env=env)
    assert small.returncode == 0 and (tmp_path / "results.tar.gz").exists()
    assert not list(tmp_path.glob("results.tar.gz.part*"))
