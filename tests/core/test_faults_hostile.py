"""Bad inputs a hostile user tried (issue 33, rows 160-198 of docs/faults.md): config files,
make targets, results entries, the tools, Ctrl-C. The rest of the rows: test_faults.py."""

import os
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from helpers import ROOT
from studylib.core.config import (
    ConfigFileError,
    read_config_file,
)
from studylib.core.table_registry import (
    DamagedFile,
    check_inputs,
)

# --- config: contradictions ------------------------------------------------------------------
from test_faults import results_folder  # noqa: F401 - the fixture `results`: a good folder

# --- a hostile user (issue 33, rows 160-197) -------------------------------------------------


@pytest.mark.parametrize("text, message", [
    ("m_grid:\n  cpu: [1, 16]\n  cpu: [2]\n  cuda: [1]\n",
     ":3: key cpu is given twice (lines 2 and 3): YAML keeps the last silently, dropping the "
     "first; give it once"),
    ("m_grid: {cpu: [1], cuda: [1]}\ndevice: cpu\nm_grid: {cpu: [4], cuda: [1]}\n",
     ":3: key m_grid is given twice (lines 1 and 3)"),
    ("timing: {min_samples: 5, min_samples: 6}\n", ":1: key min_samples is given twice (lines 1 "
     "and 1)"),
])  # fmt: skip
def test_a_key_given_twice_in_a_config_file_is_refused_with_its_lines(tmp_path, text, message):
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(ConfigFileError) as error:
        read_config_file(path)
    assert str(error.value).startswith(f"config file {path}{message}"), str(error.value)


def test_a_merge_key_may_be_overridden_and_the_repository_config_has_no_key_twice(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text("base: &b {cpu: [1], cuda: [1]}\nm_grid:\n  <<: *b\n  cpu: [2]\n")
    assert read_config_file(path)["m_grid"] == {"cpu": [2], "cuda": [1]}
    for config in [ROOT / "config" / "config.yaml", *(ROOT / "config" / "examples").glob("*")]:
        read_config_file(config)


def test_a_config_file_not_in_utf8_names_the_line_and_column_of_the_byte(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b'device: cpu\ndecode:\n  host: "caf\xe9"\n')
    with pytest.raises(ConfigFileError) as error:
        read_config_file(path)
    assert str(error.value) == (f"config file {path}:3: not UTF-8 text (byte 0xe9 at line 3, "
                                "column 13): save it as UTF-8")  # fmt: skip


def test_a_python_tag_is_not_plain_yaml_and_a_bom_is_fine(tmp_path):
    path = tmp_path / "tag.yaml"
    path.write_text("!!python/object:os.system {}\n")
    with pytest.raises(ConfigFileError) as error:
        read_config_file(path)
    assert str(error.value) == (
        f"config file {path}:1: not plain YAML: could not determine a constructor for the tag "
        "'tag:yaml.org,2002:python/object:os.system' (a config file holds plain values: no tags "
        "such as !!python/...)"
    )
    path.write_bytes(b"\xef\xbb\xbfdevice: cpu\n")
    assert read_config_file(path) == {"device": "cpu"}


@pytest.fixture
def fake_venv(tmp_path):
    """A virtual environment for the Makefile whose snakemake writes its arguments (one a
    line) to $ARGS_OUT and exits 0; its python is this one; its stamp is current."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "bin" / "snakemake").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_OUT"\n')
    (venv / "bin" / "snakemake").chmod(0o755)
    (venv / ".study-cpu").touch()
    return venv


def make(venv, *args):
    """`make` in the repository with the fake venv: (exit status, stderr, snakemake's args)."""
    out = venv.parent / "args.txt"
    out.unlink(missing_ok=True)
    env = {**os.environ, "ARGS_OUT": str(out)}
    proc = subprocess.run(["make", "-s", "STACK=cpu", f"VENV={venv}", *args], cwd=ROOT,
                          capture_output=True, text=True, env=env)  # fmt: skip
    return proc.returncode, proc.stderr, out.read_text().splitlines() if out.exists() else None


def test_make_study_puts_snakemake_args_before_the_config_file(fake_venv, tmp_path):
    config = tmp_path / "x.yaml"
    config.write_text("device: cpu\n")
    rc, err, argv = make(fake_venv, "study", f"CONFIG={config}",
                         "SNAKEMAKE_ARGS=results/report/index.html")  # fmt: skip
    assert rc == 0, err
    # A target after --configfile is read as a config file (Snakemake: "Config file is not
    # valid JSON or YAML"): the target goes first.
    assert argv == ["--cores", "8", "results/report/index.html", "--configfile", str(config)]


def test_make_sweep_names_an_unknown_or_disabled_backend_and_takes_several(fake_venv, tmp_path):
    rc, err, argv = make(fake_venv, "sweep", "BACKEND=torhc")
    assert (rc, argv) == (2, None)
    assert ("make sweep: BACKEND=torhc is not a backend; the backends: torch, flashinfer, "
            "sgl_kernel") in err  # fmt: skip
    off = tmp_path / "off.yaml"
    off.write_text("backends: {flashinfer: {enabled: false}}\n")
    rc, err, argv = make(fake_venv, "sweep", "BACKEND=flashinfer", f"CONFIG={off}")
    assert (rc, argv) == (2, None)
    assert ("make sweep: BACKEND=flashinfer is disabled (backends.flashinfer.enabled: false in "
            "config/config.yaml or CONFIG): enable it to sweep it") in err  # fmt: skip
    rc, err, argv = make(fake_venv, "sweep", "BACKEND=torch flashinfer")
    assert rc == 0, err
    assert argv == ["--cores", "8", "--forcerun", "results/sweeps/torch.parquet",
                    "results/sweeps/flashinfer.parquet"]  # fmt: skip


def test_make_compare_passes_a_baseline_with_a_quote_as_written(fake_venv):
    # It was `/bin/sh: 2: Syntax error: Unterminated quoted string`.
    rc, err, argv = make(fake_venv, "compare", "BASELINE=it's here")
    assert "Syntax error" not in err
    assert argv[:4] == ["results/report/index.html", "--cores", "8", "--config"]
    assert argv[4] == "compare_baseline=it's here"


def test_a_baseline_inside_this_runs_results_is_refused(tmp_path, monkeypatch):
    from studylib.stages.sweep.sweep_plan import baseline_files, own_results_problem

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "tables").mkdir(parents=True)
    (tmp_path / "results" / "tables" / "sweep.csv").write_text("backend\n")
    (tmp_path / "before" / "tables").mkdir(parents=True)
    (tmp_path / "before" / "tables" / "sweep.csv").write_text("backend\n")
    for given in ("results", "./results/tables/sweep.csv", str(tmp_path / "results")):
        assert own_results_problem(baseline_files(given)) == (
            "results/tables/sweep.csv is inside this run's own results folder (results/), which "
            "this run rewrites: a run compared with itself shows no change; copy the earlier run "
            "aside first (cp -r results results-before) and compare with the copy"
        ).replace("results/tables/sweep.csv", baseline_files(given)[0], 1)
    assert own_results_problem(baseline_files("before")) is None
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"^empty: no tables/sweep.csv and no "
                       r"sweeps/\*.parquet\|csv$"):  # fmt: skip
        baseline_files("empty")


def test_results_entries_no_job_can_read_are_named_before_planning(tmp_path):
    from studylib.core.results_folder import results_problems

    results = tmp_path / "results"
    (results / "sweeps").mkdir(parents=True)
    (results / "peaks.json").mkdir()
    (results / "tables" / "sweep.csv").mkdir(parents=True)
    (results / "sweeps" / "torch.parquet").symlink_to("torch.parquet")
    (results / "sweeps" / "flashinfer.parquet").symlink_to("/nonexistent/x.parquet")
    (results / "decode" / "v1.json").mkdir(parents=True)  # a variant's folder: kept
    (results / "big").symlink_to(tmp_path)  # a folder that is a link: not followed
    r = str(results)
    assert results_problems(r, [f"{r}/decode/v1.json"]) == [
        f"{r}/peaks.json is a folder where the study writes a file: remove it (rm -r "
        f"{r}/peaks.json) and run again to rebuild the file",
        f"{r}/sweeps/flashinfer.parquet is a symbolic link to /nonexistent/x.parquet, which "
        f"does not exist: remove it (rm {r}/sweeps/flashinfer.parquet) and run again to rebuild "
        "the file, or restore its target",
        f"{r}/sweeps/torch.parquet is a symbolic link that loops ({r}/sweeps/torch.parquet -> "
        f"torch.parquet): remove it (rm {r}/sweeps/torch.parquet) and run again to rebuild the "
        "file",
        f"{r}/tables/sweep.csv is a folder where the study writes a file: remove it (rm -r "
        f"{r}/tables/sweep.csv) and run again to rebuild the file",
    ]
    other = tmp_path / "other"
    other.write_text("x")
    assert results_problems(other) == [f"{other} is a file, not the results folder: move it "
                                       f"away (mv {other} {other}.old) and run again"]  # fmt: skip
    assert results_problems(tmp_path / "absent") == []


def test_a_folder_where_a_table_goes_is_refused_not_read_as_absent(tmp_path):
    from studylib.study_tables import StudyTables

    table = tmp_path / "results" / "tables" / "sweep.csv"
    table.mkdir(parents=True)
    peaks = tmp_path / "results" / "peaks.json"
    peaks.mkdir()
    with pytest.raises(DamagedFile, match=r"tables/sweep.csv: a folder, not a file \(the sweep "):
        check_inputs([str(table)])
    with pytest.raises(DamagedFile, match=r"peaks.json: a folder, not a file \(this machine's "):
        check_inputs([str(peaks)])
    with pytest.raises(DamagedFile, match="a folder, not a file"):
        StudyTables.read({"sweep": str(table)})
    assert StudyTables.read({"sweep": str(table)}, checked=False).sweep is None


def _tool(name):
    """A tool of tools/ as a module (tools/ is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tool(name, *args):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / f"{name}.py"), *map(str, args)],
                          capture_output=True, text=True)  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stderr.strip()


def test_example_report_refuses_an_out_that_is_a_file_or_the_example(results, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("x")
    assert tool("example_report", results, "--out", readme) == (
        2,
        f"example_report: --out {readme} is a file, not a folder to write into",
    )
    before = sorted(p.relative_to(results) for p in results.rglob("*"))
    assert tool("example_report", results, "--out", f"{results}/") == (
        2,
        f"example_report: --out {results} is the example itself: its own tables "
        "(tables/sweep.csv, ...) would be overwritten by the rendered ones; give another folder",
    )
    assert sorted(p.relative_to(results) for p in results.rglob("*")) == before


def test_example_report_names_a_wrong_record_or_baseline_in_one_line(results, tmp_path):
    assert tool("example_report", results, "--out", tmp_path / "o", "--hardware",
                results / "peaks.json") == (
        2, f"example_report: damaged input: {results}/peaks.json: not the hardware record: no "
        "key gpus, packages")  # fmt: skip
    (tmp_path / "empty").mkdir()
    assert tool("example_report", results, "--out", tmp_path / "o", "--baseline",
                tmp_path / "empty") == (
        2, f"example_report: --baseline {tmp_path}/empty: no tables/sweep.csv and no "
        "sweeps/*.parquet|csv")  # fmt: skip
    (results / "notes.html").write_text("<html>\n<p>a</p>\n<p>a, b</p>\n")  # the report
    rc, err = tool("example_report", results, "--out", tmp_path / "o", "--sweeps", "notes.html")
    assert rc == 2 and err.startswith(f"example_report: {results}/notes.html: not a readable "
                                      "sweep file (")  # fmt: skip


def test_example_report_reads_a_results_folders_parquet_sweeps(results, tmp_path):
    example_report = _tool("example_report")
    # no sweeps/*.csv: a results folder's sweeps/*.parquet (it rendered without them)
    files = example_report.sweep_files(results, None)
    assert files == [str(results / "sweeps" / "torch.parquet")]
    assert example_report.sweep_files(results, "sweeps/*.parquet") == files
    (tmp_path / "sweeps").mkdir()
    parts = example_report.split_by_backend(files, tmp_path)  # was a UnicodeDecodeError
    assert [p.name for p in parts] == ["torch.parquet"]
    assert len(pd.read_parquet(parts[0])) == len(pd.read_parquet(files[0]))


def test_screenshot_report_checks_its_arguments_before_chromium(tmp_path):
    report = tmp_path / "report" / "index.html"
    report.parent.mkdir()
    report.write_text("<html></html>")
    notes = tmp_path / "notes.md"
    notes.write_text("# notes\n")
    assert tool("screenshot_report", report, tmp_path / "shot.txt") == (
        2,
        f"screenshot_report: {tmp_path}/shot.txt: the picture is written as PNG: give a path "
        "ending in .png",
    )  # was a Playwright traceback
    assert tool("screenshot_report", report, tmp_path) == (
        2,
        f"screenshot_report: {tmp_path} is a folder: give the PNG file to write (e.g. "
        f"{tmp_path}/report.png)",
    )
    assert tool("screenshot_report", notes, tmp_path / "shot.png") == (
        2,
        f"screenshot_report: {notes} is not a rendered report (an .html file such as "
        "report/index.html)",
    )  # was a PNG of the Markdown page, exit 0
    assert tool("screenshot_report", report.parent, tmp_path / "shot.png") == (
        2,
        f"screenshot_report: no report {report.parent} (the report is {report})",
    )
    assert not (tmp_path / "shot.png").exists()


#: The entry scripts of jobs that measure nothing: Ctrl-C ends them quietly (measuring jobs'
#: signals are their own, scripts/run_*.py and measure_peaks.py; collect_hardware.py and
#: write_served_model.py are left as they are: an edit reruns their rule and what follows).
QUIET_ENTRIES = ["aggregate_decode", "aggregate_kernel_power", "aggregate_sweeps",
                 "build_step_model", "check_tables", "compare_runs", "plot_figure",
                 "write_answers"]  # fmt: skip


@pytest.mark.parametrize("entry", QUIET_ENTRIES)
def test_an_entry_script_takes_ctrl_c_quietly_before_its_heavy_imports(entry):
    text = (ROOT / "scripts" / f"{entry}.py").read_text()
    first = next(line for line in text.splitlines() if line.startswith(("import ", "from ")))
    assert first.startswith("from studylib import quiet_interrupt")


def test_ctrl_c_ends_a_job_with_130_and_no_traceback():
    """As a terminal's Ctrl-C reaches a job (SIGINT), here while it imports its libraries: it
    printed a KeyboardInterrupt traceback per job; Snakemake marks the outputs incomplete and
    the profile reruns them on the next plain run."""
    import signal

    code = ("import sys; sys.path.insert(0, sys.argv[1]); from studylib import quiet_interrupt; "
            "print('ready', flush=True); import time; time.sleep(60)")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code, str(ROOT / "scripts")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert (proc.returncode, err) == (130, "")
    profile = (ROOT / "profiles" / "default" / "config.yaml").read_text()
    assert "rerun-incomplete: true" in profile


def test_the_reports_config_snapshot_keeps_text_as_written():
    from studylib.core.config import config_text

    note = "</script><script>alert(1)</script> ünïcødé 日本語 " + "long " * 40
    text = config_text({"shapes": {"down": {"N": 1, "K": 1, "note": note}}})
    assert note.strip() in text  # was "\xFCn\xEFc\xF8d\xE9 ..." folded at 80 columns
    assert yaml.safe_load(text)["shapes"]["down"]["note"] == note
