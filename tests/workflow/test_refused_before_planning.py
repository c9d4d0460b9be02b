"""Refused before Snakemake plans (issue 33, a hostile user): a copy of the workflow never run.
The end-to-end study: test_workflow.py."""

import subprocess

import pytest
from helpers import copy_workflow, tiny_config
from test_workflow import SNAKEMAKE, write_config

pytestmark = pytest.mark.e2e

# --- refused before Snakemake plans (issue 33, a hostile user): a copy never run -------------


@pytest.fixture(scope="module")
def unrun(tmp_path_factory):
    """The workflow in a scratch folder with the tiny config, no job ever run: what is
    refused before planning needs no study."""
    workdir = tmp_path_factory.mktemp("unrun")
    copy_workflow(workdir)
    write_config(workdir, tiny_config())
    return workdir


def refused(workdir, *args, cwd=None) -> str:
    """Snakemake's output for a run that must stop before any job, in one clear line."""
    proc = subprocess.run([SNAKEMAKE, "--cores", "2", *args], cwd=cwd or workdir,
                          capture_output=True, text=True)  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "Traceback" not in output and "Select jobs to execute" not in output, output
    return output


def test_a_key_given_twice_in_a_config_file_is_refused_by_plain_snakemake(unrun, tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("m_grid:\n  cpu: [1, 16]\n  cpu: [2]\n  cuda: [1]\n")
    output = refused(unrun, "--dry-run", "--configfile", str(dup))
    assert (f"config file {dup}:3: key cpu is given twice (lines 2 and 3): YAML keeps the last "
            "silently, dropping the first; give it once") in output  # fmt: skip
    # the repository's own config file too
    config = unrun / "config" / "config.yaml"
    text = config.read_text()
    first = text.splitlines().index("device: auto") + 1
    config.write_text(text + "device: cpu\n")
    try:
        output = refused(unrun, "--dry-run")
    finally:
        config.write_text(text)
    again = len(text.splitlines()) + 1
    assert (f"config/config.yaml:{again}: key device is given twice (lines {first} and "
            f"{again})") in output  # fmt: skip


def test_cores_0_is_refused_instead_of_waiting_forever(unrun):
    output = refused(unrun, "--cores", "0")
    assert ("--cores 0 runs no job: Snakemake would plan the study and wait for a core forever; "
            "give --cores 1 or more, or --cores all (make study CORES=8)") in output  # fmt: skip


def test_running_from_another_folder_names_the_studys_own(unrun, tmp_path):
    output = refused(unrun, "--dry-run", "-s", str(unrun / "Snakefile"), cwd=tmp_path)
    assert (f"run the study from its own folder: this folder ({tmp_path}) has no "
            "config/config.yaml, and its results would be written here; cd "
            f"{unrun} and run snakemake there") in output  # fmt: skip
    assert not (tmp_path / "results").exists()


def test_an_unknown_target_or_a_folder_is_snakemakes_one_line(unrun):
    for target in ("nonexistent_target", "results/report"):
        output = refused(unrun, "--dry-run", target)
        assert f"No rule to produce {target} (if you use input functions" in output


def test_a_folder_where_a_study_file_goes_is_named_before_planning(unrun):
    folder = unrun / "results" / "peaks.json"
    folder.mkdir(parents=True)
    try:
        output = refused(unrun, "--dry-run")  # the dry run planned it; the run's jobs failed
    finally:
        folder.rmdir()
    assert ("results folder: results/peaks.json is a folder where the study writes a file: "
            "remove it (rm -r results/peaks.json) and run again to rebuild the file"
            ) in output  # fmt: skip
