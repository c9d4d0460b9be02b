"""The CPU study through snakemake-executor-plugin-slurm on a real single-node SLURM cluster.

CI starts the cluster (tools/slurm_single_node.sh: Debian's slurm-wlm with munge) and sets
STUDY_SLURM_TEST=1; elsewhere this test is skipped unless a cluster answers `sinfo`.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import ROOT, tiny_config

pytestmark = pytest.mark.e2e
WANTED = os.environ.get("STUDY_SLURM_TEST") == "1"
# slurmctld's record of each batch job it accepted
SUBMITTED = re.compile(r"_slurm_rpc_submit_batch_job: JobId=(\d+)")


def cluster_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    return subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0


def test_cpu_study_through_the_slurm_executor(tmp_path):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    if not cluster_up():
        if WANTED:
            pytest.fail("STUDY_SLURM_TEST=1 but no SLURM cluster answers sinfo")
        pytest.skip("no SLURM cluster here (CI starts one with tools/slurm_single_node.sh)")
    for name in ["Snakefile", "rules", "scripts", "config", "report", "profiles", "envs"]:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, tmp_path / name)
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(tiny_config()))
    before = set(SUBMITTED.findall(_ctld_log()))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "snakemake"), "--profile", "profiles/slurm",
         # The test cluster has no GPUs (no GRES): the GPU rules ask for none here.
         "--set-resources", "sweep:gpu=0", "peaks:gpu=0", "kernel_power:gpu=0", "decode:gpu=0",
             "decode_model:gpu=0",
         "--default-resources", "slurm_partition=debug", "mem_mb=500", "runtime=30",
         "--slurm-init-seconds-before-status-checks", "2",
         "--seconds-between-status-checks", "3", "--jobs", "4"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert (tmp_path / "results" / "report" / "index.html").stat().st_size > 0
    assert "SLURM run ID" in output
    jobs = set(SUBMITTED.findall(_ctld_log())) - before
    remote = re.findall(r"^rule (\w+):", output, re.M)
    local = set(re.findall(r"^localrule (\w+):", output, re.M))
    # every job of a cluster rule became one SLURM job; the table, figure and report rules
    # (the Snakefile's localrules) ran beside Snakemake
    assert len(jobs) == len(remote), (sorted(jobs), remote)
    assert jobs == set(re.findall(r"submitted with SLURM jobid (\d+)", output))
    assert {"hardware", "peaks", "sweep", "kernel_power", "decode"} <= set(remote), remote
    assert {"plot", "aggregate", "answers", "report"} <= local, local
    assert not local & set(remote), local & set(remote)


def _ctld_log() -> str:
    log = Path("/var/log/slurm/slurmctld.log")
    return log.read_text(errors="replace") if log.exists() else ""
