"""Bad inputs and damaged files (issue 13): one test per row of docs/faults.md.

Unit level, no Snakemake run: the config checks of studylib.plan, the config-file reader, the
--config typing, and core.table_registry's checked readers on good tables damaged on purpose. The
rows that need Snakemake itself (wiring, reruns, locks) are in test_workflow.py; the server's
interrupts in test_lifecycle.py and test_study_killed.py; a hostile user's in
test_faults_hostile.py.
"""

import json
import shutil
import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import ROOT, default_config
from studylib.core.config import (
    ConfigFileError,
    config_warnings,
    empty_overrides,
    read_config_file,
    schema_problem,
)
from studylib.core.config_cli import apply_cli_values, cli_values
from studylib.core.io import stable_hash, write_frame
from studylib.core.journal import append_to, journal_path, read_journal
from studylib.core.table_records import PARQUET_KEY, sidecar
from studylib.core.table_registry import (
    DamagedFile,
    check_inputs,
    check_plans,
    columns,
    read_record,
    read_table,
)
from studylib.instruments.hardware import BACKEND_PACKAGES, job_versions
from studylib.stages.sweep.sweep_aggregate import aggregate
from studylib.stages.sweep.sweep_run import to_frame
from studylib.stages.sweep.sweep_schema import SWEEP_TABLE
from studylib.study_config import check_config

# --- config: contradictions ------------------------------------------------------------------


def _set(path, value):
    def mutate(config):
        *parents, last = path.split(".")
        node = config
        for key in parents:
            node = node[key]
        node[last] = value

    return mutate


CONTRADICTIONS = [
    ("timing.min_samples", 5000, "timing.min_samples (5000) exceeds timing.max_samples (2000)"),
    ("timing.max_samples", 5, "timing.min_samples (10) exceeds timing.max_samples (5)"),
    ("timing.min_time_s", 0.8, "timing.min_time_s (0.8) exceeds timing.max_time_s.cpu (0.5)"),
    ("timing.max_time_s.cuda", 0.01, "timing.min_time_s (0.05) exceeds timing.max_time_s.cuda"),
    ("check.cos_sim_min.bf16", 1.5, "check.cos_sim_min.bf16: 1.5 is above 1"),
    ("kernel_power.seconds.cpu", 0, "kernel_power.seconds.cpu: a 0 s loop measures nothing"),
    ("decode.min_steady_s.cuda", 0, "decode.min_steady_s.cuda: a 0 s steady window"),
    ("decode.shortest_steady_s.cuda", 0, "decode.shortest_steady_s.cuda: a 0 s shortest window"),
    (
        "decode.full_length_s.cuda",
        5,
        "decode.full_length_s.cuda: a 5 s full-length window is "
        "shorter than the window it checks (decode.min_steady_s.cuda: 20 s)",
    ),
    ("decode.model.cpu.top_k", 32, "decode.model.cpu.top_k (32) exceeds its experts (16)"),
    ("decode.model.cpu.kv_heads", 3, "decode.model.cpu.heads (4) is not a multiple of kv_heads"),
]


@pytest.mark.parametrize("path, value, message", CONTRADICTIONS, ids=[c[0] for c in CONTRADICTIONS])
def test_a_contradiction_is_one_line(path, value, message):
    config = default_config()
    _set(path, value)(config)
    problems = check_config(config)
    assert len(problems) == 1 and message in problems[0], problems
    assert "\n" not in problems[0]


WARNINGS = [
    (_set("decode.host", "0.0.0.0"), "decode.host 0.0.0.0: the decode server listens beyond"),
    (_set("backends.flashinfer.enabled", False), "kernel_power.backends.flashinfer: not run"),
]


@pytest.mark.parametrize("mutate, message", WARNINGS, ids=["public-host", "power-of-disabled"])
def test_allowed_but_doubtful_is_warned(mutate, message):
    config = default_config()
    mutate(config)
    assert check_config(config) == []
    warnings = config_warnings(config)
    assert len(warnings) == 1 and message in warnings[0]


def test_the_default_config_warns_of_nothing():
    assert config_warnings(default_config()) == []


# --- config: overrides -----------------------------------------------------------------------

EMPTY_OVERRIDES = [
    ({"decode": {"variants": {}}}, "decode.variants: {} removes nothing"),
    ({"backends": {}}, "backends: {} removes nothing"),
    ({"kernel_power": {"backends": {}}}, "kernel_power.backends: {} removes nothing"),
]


@pytest.mark.parametrize("override, message", EMPTY_OVERRIDES, ids=["variants", "backends", "kp"])
def test_an_empty_mapping_in_an_override_is_refused(override, message):
    problems = empty_overrides(override, default_config())
    assert len(problems) == 1 and message in problems[0]


def test_an_empty_mapping_where_nothing_is_merged_is_fine():
    assert empty_overrides({"decode": {"model": {}}}, {"decode": {}}) == []


def snakemake_merged(config, override):
    """What Snakemake 9 makes of --config (nested values as strings, merged into config), and
    the study's typing of the words given (rules/common.smk)."""
    from snakemake.cli import parse_config
    from snakemake.utils import update_config

    update_config(config, parse_config([override]))
    return config, cli_values([override])


def test_nested_cli_override_works():
    config, cli = snakemake_merged(default_config(), "decode={port: 30117, host: 127.0.0.1}")
    assert config["decode"]["port"] == "30117"  # as Snakemake leaves it
    apply_cli_values(config, cli)
    assert config["decode"]["port"] == 30117 and config["decode"]["host"] == "127.0.0.1"
    assert config["decode"]["variants"]  # the rest of decode is kept
    assert check_config(config) == []


def test_nested_cli_override_of_the_wrong_type_is_one_line():
    config, cli = snakemake_merged(default_config(), "decode={port: x}")
    apply_cli_values(config, cli)
    assert schema_problem(config, str(ROOT / "config" / "schema.yaml")) == (
        "config key decode.port: 'x' is not of type 'integer'"
    )


def test_nested_cli_lists_are_typed():
    config, cli = snakemake_merged(default_config(), "m_grid={cpu: [1, 2], cuda: [16]}")
    apply_cli_values(config, cli)
    assert config["m_grid"] == {"cpu": [1, 2], "cuda": [16]}


# --- config files ----------------------------------------------------------------------------

CONFIG_FILES = [
    ("missing", None, "bad.yaml: not found (a target written after --configfile"),
    ("syntax", "device: cpu\nm_grid: [1\n", "bad.yaml:3: YAML syntax error: expected ',' or ']'"),
    ("tab", "device: cpu\n\tm_grid: 1\n", "bad.yaml:2: YAML syntax error"),
    ("empty", "", "bad.yaml: empty; a config file is a mapping of keys"),
    ("comments-only", "# nothing\n", "bad.yaml: empty"),
    ("list", "- device\n", "bad.yaml: holds a list, not a mapping of keys"),
    ("scalar", "cpu\n", "bad.yaml: holds a str, not a mapping of keys"),
    ("directory", "DIR", "bad.yaml: is a directory (a target written after --configfile?)"),
]


@pytest.mark.parametrize("case, text, message", CONFIG_FILES, ids=[c[0] for c in CONFIG_FILES])
def test_a_bad_config_file_is_one_line_naming_it(tmp_path, case, text, message):
    path = tmp_path / "bad.yaml"
    if text == "DIR":
        path.mkdir()
    elif text is not None:
        path.write_text(text)
    with pytest.raises(ConfigFileError) as error:
        read_config_file(path)
    assert str(error.value).startswith(f"config file {path}")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_an_output_read_as_a_config_file_says_targets_go_first(tmp_path):
    """`snakemake --configfile c.yaml results/hardware.json` reads the target as a config."""
    known = {"device": {}, "shapes": {}, "timing": {}}
    hardware = tmp_path / "hardware.json"
    hardware.write_text('{"device": "cpu", "host": "x", "gpus": [], "packages": {}}')
    with pytest.raises(ConfigFileError) as error:
        read_config_file(hardware, known)
    assert "a target written after --configfile?" in str(error.value)
    assert "write targets first" in str(error.value) and "\n" not in str(error.value)
    # An override with a typo or two stays the schema's to name.
    override = tmp_path / "o.yaml"
    override.write_text("device: cpu\ntimng: {}\n")
    assert read_config_file(override, known) == {"device": "cpu", "timng": {}}


def test_check_config_entry_names_the_file(tmp_path):
    """`make study CONFIG=...` checks the file before Snakemake reads it (Snakemake's own
    messages for these lack the file or are a traceback)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("device: [cpu\n")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_config.py"), str(bad)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == f"config file {bad}:2: YAML syntax error: expected ',' or ']', but got '<stream end>'"
    )


# --- damaged tables --------------------------------------------------------------------------


def sweep_rows():
    rows = [
        {"backend": "torch", "impl": "aten", "op": "matmul", "dtype": "bf16", "shape": "s",
         "M": m, "N": 8, "K": 8, "G": None, "status": "ok", "error": "", "device": "cpu",
         "eager_us": 1.0 + m, "flops": 128.0 * m, "bytes": 64.0}
        for m in (1, 2, 4, 8)
    ]  # fmt: skip
    # A library's message over several lines, with a comma and quotes: one CSV record.
    rows[3].update(status="error", error='RuntimeError: "bad",\n  at line 2', eager_us=None)
    return rows


def window_rows():
    row = dict.fromkeys(columns("kernel_power"))
    row.update({"backend": "torch", "mode": "idle", "status": "ok", "error": "", "gpu": 0,
                "power_source": "none", "seconds": 1.0, "M": 16, "N": 8, "K": 8})  # fmt: skip
    return pd.DataFrame([row], columns=columns("kernel_power")).astype(
        {c: "Int64" for c in ("M", "N", "K", "G", "gpu", "calls", "gpus_running")}
    )


#: The plan the fixture's torch sweep ran with.
PLAN = {"backend": "torch", "cases": []}


@pytest.fixture(name="results")
def results_folder(tmp_path):
    """A small, good results folder: a sweep, its tables, kernel-power windows, records."""
    root = tmp_path / "results"
    (root / "sweeps").mkdir(parents=True)
    (root / "kernel_power").mkdir()
    write_frame(to_frame(sweep_rows()), root / "sweeps" / "torch.parquet", "sweep torch", PLAN)
    write_frame(window_rows(), root / "kernel_power" / "torch.parquet", "kernel_power torch")
    peaks = {"device": "cpu", "copy_gbps": 10.0, "bf16_tflops": 1.0, "fp8_tflops": None}
    (root / "peaks.json").write_text(json.dumps(peaks))
    hardware = {"device": "cpu", "gpus": [], "packages": {}, "host": {}, "driver_version": None}
    (root / "hardware.json").write_text(json.dumps(hardware))
    (root / "decode" / "v").mkdir(parents=True)
    for name in ("summary", "expert_m"):
        empty = pd.DataFrame(columns=columns(f"decode_{name}" if name == "summary" else name))
        write_frame(empty, root / "decode" / "v" / f"{name}.csv", "decode v")
    aggregate([root / "sweeps" / "torch.parquet"], root / "peaks.json",
              root / "tables" / "sweep.csv", root / "tables" / "support.csv")  # fmt: skip
    return root


def test_good_tables_pass(results):
    checked = check_inputs(sorted(str(p) for p in results.rglob("*") if p.is_file()))
    assert checked[str(results / "tables" / "sweep.csv")] == 4
    assert len(checked) == 8


def cut(path, keep):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def edit_csv(column, value, row=1):
    def damage(path):
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        frame.loc[row, column] = value
        frame.to_csv(path, index=False)

    return damage


def flashinfer_sweep_over_torch(path):
    """The issue's case: results/sweeps/flashinfer.parquet (a sweep of its own) copied over
    torch.parquet: the same columns, another backend's rows."""
    other = path.parent / "flashinfer.parquet"
    rows = [{**row, "backend": "flashinfer", "impl": "cutlass"} for row in sweep_rows()]
    write_frame(to_frame(rows), other, "sweep flashinfer", {**PLAN, "backend": "flashinfer"})
    shutil.copy(other, path)


def cut_with_pandas(keep):
    def damage(path):
        if path.suffix == ".parquet":
            pd.read_parquet(path).head(keep).to_parquet(path, index=False)
        else:
            pd.read_csv(path).head(keep).to_csv(path, index=False)

    return damage


def record_kept(change):
    """``path`` rewritten after ``change`` (of its arrow table) by a tool that keeps the
    writer's record in the parquet metadata."""

    def damage(path):
        record = pq.read_metadata(path).metadata[PARQUET_KEY]
        table = change(pq.read_table(path))
        pq.write_table(table.replace_schema_metadata({PARQUET_KEY: record}), path)

    return damage


def record_is(text):
    def damage(path):
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            pq.write_table(table.replace_schema_metadata({PARQUET_KEY: text}), path)
        else:
            sidecar(path).write_text(text)

    return damage


def duplicate_row(path, record=None):
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2] + lines[1:]))
    if record is not None:
        sidecar(path).write_text(record)


def same_size_edit(path):
    text = path.read_text()
    assert ",2.0," in text
    path.write_text(text.replace(",2.0,", ",9.0,", 1))


def other_variants_summary(path):
    """decode/w/summary.csv with its record copied over decode/v's."""
    other = path.parents[1] / "w" / "summary.csv"
    write_frame(pd.read_csv(path), other, "decode w")
    shutil.copy(other, path)
    shutil.copy(sidecar(other), sidecar(path))


OTHER_WRITER = (
    "written by sweep flashinfer as sweeps/flashinfer.parquet, not as sweeps/torch.parquet"
)
NO_RECORD_AFTER = "yet written after this folder's tables began carrying one ("
GARBAGE = "its writer's record (parquet metadata key study.written) is garbage: "

DAMAGED = [
    # (id, file, damage, message)
    ("csv-cut-mid-line", "tables/sweep.csv", lambda p: cut(p, 0.6),
     "the last line is cut short (no newline at the end): the file is truncated"),
    ("csv-cut-at-a-line-end", "tables/sweep.csv",
     lambda p: p.write_text("".join(p.read_text().splitlines(keepends=True)[:3])),
     "2 rows where its writer (sweep_aggregate.aggregate) wrote 4: cut, or rows removed after "
     "it was written"),
    ("csv-short-row", "tables/sweep.csv",
     lambda p: p.write_text(p.read_text().splitlines()[0] + "\ntorch,aten,mm_bf1\n"),
     f"line 2 has 3 fields, the header {len(SWEEP_TABLE.columns)}"),
    ("csv-0-bytes", "tables/sweep.csv", lambda p: p.write_bytes(b""),
     "empty file (0 bytes): truncated or never finished"),
    ("csv-binary", "tables/support.csv", lambda p: p.write_bytes(b"\xff\xfe\x00garbage\n"),
     "not a text CSV file: invalid start byte at byte 0"),
    ("csv-not-a-number", "tables/sweep.csv", edit_csv("eager_us", "fast"),
     "column eager_us, row 2: 'fast' is not a number"),
    ("csv-not-whole", "tables/sweep.csv", edit_csv("M", "1.5"),
     "column M, row 2: 1.5 is not a whole number"),
    ("csv-bad-status", "tables/sweep.csv", edit_csv("status", "okk"),
     "column status, row 2: 'okk' is not one of ok, unsupported, error, mismatch"),
    ("csv-bad-dtype", "tables/support.csv", edit_csv("dtype", "bf8", row=0),
     "column dtype, row 1: 'bf8' is not one of fp32"),
    ("csv-other-table", "tables/sweep.csv",
     lambda p: shutil.copy(p.parents[0] / "support.csv", p),
     "not the sweep table (results/tables/sweep.csv): no column shape, M, N, K, G, top_k (+35 "
     "more); it looks like the support matrix (results/tables/support.csv)"),
    ("parquet-other-table", "sweeps/torch.parquet",
     lambda p: shutil.copy(p.parents[1] / "kernel_power" / "torch.parquet", p),
     "it looks like a backend's kernel-power windows (results/kernel_power/{backend}.parquet)"),
    ("parquet-truncated", "sweeps/torch.parquet", lambda p: cut(p, 0.5),
     "not a readable parquet file (truncated or overwritten?): Could not open Parquet input"),
    ("parquet-0-bytes", "kernel_power/torch.parquet", lambda p: p.write_bytes(b""),
     "empty file (0 bytes)"),
    ("parquet-is-csv", "kernel_power/torch.parquet",
     lambda p: shutil.copy(p.parents[1] / "tables" / "sweep.csv", p),
     "not a readable parquet file"),
    ("peaks-garbage", "peaks.json", lambda p: p.write_text('{"device": "cpu", oops'),
     "not JSON (line 1, column 19: Expecting property name enclosed in double quotes)"),
    ("peaks-list", "peaks.json", lambda p: p.write_text("[1, 2]"),
     "holds a JSON list, not this machine's measured peaks"),
    ("peaks-wrong-type", "peaks.json", lambda p: p.write_text('{"copy_gbps": "fast"}'),
     "key copy_gbps: 'fast' is not a number"),
    ("peaks-0-bytes", "peaks.json", lambda p: p.write_text(""),
     "not JSON (line 1, column 1: Expecting value)"),
    ("hardware-is-peaks", "hardware.json",
     lambda p: shutil.copy(p.parent / "peaks.json", p),
     "not the hardware record: no key gpus, packages"),
    ("hardware-truncated", "hardware.json", lambda p: cut(p, 0.5), "not JSON (line 1"),
    ("hardware-missing", "hardware.json", lambda p: p.unlink(),
     "missing (the hardware record is expected here)"),
    ("decode-summary-is-expert-m", "decode/v/summary.csv",
     lambda p: shutil.copy(p.parent / "expert_m.csv", p),
     "not a variant's decode summary (results/decode/{variant}/summary.csv): no column engine"),
    # issue 33: each table against its writer's record (core/table_records.py)
    ("parquet-of-another-backend", "sweeps/torch.parquet", flashinfer_sweep_over_torch,
     f"{OTHER_WRITER}: another table copied over this one"),
    ("parquet-cut-with-pandas", "sweeps/torch.parquet", cut_with_pandas(2),
     f"no writer's record (parquet metadata key study.written), {NO_RECORD_AFTER}"),
    ("parquet-cut-record-kept", "sweeps/torch.parquet", record_kept(lambda t: t.slice(0, 2)),
     "2 rows where its writer (sweep torch) wrote 4: cut, or rows removed after it was written"),
    ("parquet-row-added-record-kept", "sweeps/torch.parquet",
     record_kept(lambda t: pa.concat_tables([t, t.slice(0, 1)])),
     "5 rows where its writer (sweep torch) wrote 4: rows added (a duplicated row?) after it "
     "was written"),
    ("parquet-edited-record-kept", "sweeps/torch.parquet",
     record_kept(lambda t: t.set_column(t.schema.get_field_index("M"), "M",
                                        pa.array([1, 2, 4, 16]))),
     "not the content its writer (sweep torch) wrote ("),
    ("parquet-record-garbage", "kernel_power/torch.parquet", record_is(b"garbage"),
     f"{GARBAGE}not JSON (line 1, column 1: Expecting value); damaged or edited"),
    ("parquet-record-rows-text", "sweeps/torch.parquet",
     record_is(json.dumps({"record": 1, "producer": "sweep torch", "file": "sweeps/torch.parquet",
                           "plan": None, "rows": "4", "bytes": 1, "content": "0"})),
     f"{GARBAGE}key rows: '4' is not a whole number"),
    ("csv-duplicated-row", "tables/sweep.csv", duplicate_row,
     "5 rows where its writer (sweep_aggregate.aggregate) wrote 4: rows added (a duplicated "
     "row?) after it was written"),
    ("csv-duplicated-row-garbage-record", "tables/sweep.csv",
     lambda p: duplicate_row(p, record="{garbage"),
     "its writer's record (.sweep.csv.written beside it) is garbage: not JSON (line 1, column 2: "
     "Expecting property name enclosed in double quotes); damaged or edited"),
    ("csv-record-a-list", "tables/support.csv", record_is("[1, 2]"),
     "its writer's record (.support.csv.written beside it) is garbage: a JSON list, not a "
     "record"),
    ("csv-record-without-keys", "tables/sweep.csv", record_is('{"record": 1, "rows": 4}'),
     "is garbage: no key producer, file, plan, bytes, content"),
    ("csv-record-deleted", "tables/sweep.csv", lambda p: sidecar(p).unlink(),
     f"no writer's record (.sweep.csv.written beside it), {NO_RECORD_AFTER}"),
    ("csv-cut-with-pandas", "tables/sweep.csv", cut_with_pandas(2),
     "2 rows where its writer (sweep_aggregate.aggregate) wrote 4: cut, or rows removed"),
    ("csv-edited-same-size", "tables/sweep.csv", same_size_edit,
     "not the content its writer (sweep_aggregate.aggregate) wrote ("),
    ("csv-of-another-variant", "decode/v/summary.csv", other_variants_summary,
     "written by decode w as w/summary.csv, not as v/summary.csv: another table copied over "
     "this one"),
]  # fmt: skip


@pytest.mark.parametrize("name, damage, message", [d[1:] for d in DAMAGED],
                         ids=[d[0] for d in DAMAGED])  # fmt: skip
def test_a_damaged_file_is_one_line_naming_it(results, name, damage, message):
    path = results / name
    damage(path)
    with pytest.raises(DamagedFile) as error:
        check_inputs([str(path)])
    text = str(error.value)
    assert text.startswith(f"{path}: ") and message in text, text
    assert "\n" not in text


def test_the_aggregate_stops_at_another_tables_parquet(results):
    """The issue's case: a kernel-power parquet over a sweep parquet was aggregated and failed
    later with KeyError: 'flops'."""
    sweep = results / "sweeps" / "torch.parquet"
    shutil.copy(results / "kernel_power" / "torch.parquet", sweep)
    with pytest.raises(DamagedFile, match="torch.parquet: not a backend's sweep"):
        aggregate([sweep], results / "peaks.json", results / "x.csv", results / "y.csv")
    with pytest.raises(DamagedFile, match="peaks.json: not JSON"):
        (results / "peaks.json").write_text("garbage")
        read_record("peaks", results / "peaks.json")


def test_a_measuring_jobs_table_of_another_plan_is_refused(results):
    """A sweep of this backend, from another run or config (its record's plan hash is not the
    one this run gives the sweep job): rule aggregate's params.plans refuses it."""
    path = results / "sweeps" / "torch.parquet"
    check_plans("sweep", {str(path): stable_hash(PLAN)})
    other = stable_hash({**PLAN, "cases": [{"op": "matmul"}]})
    with pytest.raises(DamagedFile) as error:
        check_plans("sweep", {str(path): other})
    assert str(error.value) == (
        f"{path}: written by sweep torch for another plan (plan {stable_hash(PLAN)}; this run's "
        f"is {other}): a table of another run or config copied here"
    )


def test_readers_are_the_registry(results):
    frame = read_table("sweep_table", results / "tables" / "sweep.csv")
    assert list(frame.columns[: len(columns("sweep"))]) == columns("sweep")


# --- reruns ----------------------------------------------------------------------------------


def test_the_journal_is_keyed_by_plan_and_the_measuring_versions(tmp_path):
    plan = {"backend": "torch", "cases": []}
    hello = {"device": "cuda", "device_name": "H200", "library_version": "2.11.0"}
    same = journal_path(tmp_path, plan, dict(hello))
    assert journal_path(tmp_path, plan, hello) == same
    assert journal_path(tmp_path, plan, {**hello, "library_version": "2.12.0"}) != same
    assert journal_path(tmp_path, {**plan, "cases": [1]}, hello) != same


def test_a_journal_line_cut_by_a_kill_is_dropped(tmp_path):
    journal = tmp_path / "progress.jsonl"
    journal.write_text(json.dumps({"_key": "a", "status": "ok"}) + '\n{"_key": "b", "sta')
    assert read_journal(journal) == {"a": {"status": "ok"}}
    # The resumed job's next point (sweep, kernel power, decode, peaks) is not lost with it.
    with append_to(journal) as out:
        out.write(json.dumps({"_key": "c", "status": "ok"}) + "\n")
    assert read_journal(journal) == {"a": {"status": "ok"}, "c": {"status": "ok"}}


@pytest.mark.parametrize("backend", sorted(BACKEND_PACKAGES))
def test_versions_that_rerun_a_backend_are_its_own(backend):
    versions = job_versions(backend, driver="580.1")
    assert versions["driver"] == "580.1" and "torch" in versions
    assert set(BACKEND_PACKAGES[backend]) <= set(versions)
    others = {p for b, names in BACKEND_PACKAGES.items() if b != backend for p in names}
    assert not (others - set(BACKEND_PACKAGES[backend])) & set(versions)
    everything = job_versions("all", driver=None)
    assert {p for names in BACKEND_PACKAGES.values() for p in names} <= set(everything)


def test_make_clean_results_removes_everything_but_the_readme(tmp_path):
    results = tmp_path / "results"
    for name in ("hardware.json", "peaks.json", "README.md", "sweeps/.torch.work/progress.jsonl",
                 "kernel_power/torch.parquet", "decode/transformers/run.json",
                 "benchmarks/peaks.tsv", "tables/sweep.csv", "figures/support.png",
                 "report/index.html", "logs/report.log", "report.zip"):  # fmt: skip
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_text("x")
    proc = subprocess.run(
        ["make", "-f", str(ROOT / "Makefile"), "clean-results", "STACK=cpu"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in results.iterdir()) == ["README.md"]


@pytest.mark.parametrize(
    "path, name",
    [("results/sweeps/torch.parquet", "sweep"), ("results/tables/sweep.csv", "sweep_table"),
     ("results/kernel_power/torch.parquet", "kernel_power"),
     ("results/kernel_power/torch_timeline.parquet", "timeline"),
     ("results/decode/sglang-bf16-graphs/summary.csv", "decode_summary"),
     ("results/tables/decode_recorder.csv", "recorder_table"), ("results/peaks.json", "peaks"),
     ("results/decode/x/breakdown.csv", "breakdown"),
     ("results/decode/x/requests.parquet", None), ("results/figures/support.vl.json", None)],
)  # fmt: skip
def test_every_study_file_is_known_by_where_it_lives(path, name):
    from studylib.core.table_registry import kind_of

    assert (kind_of(path) or (None, None))[1] == name


def test_a_checked_table_is_read_once_until_it_changes(tmp_path, monkeypatch):
    # A job's inputs are checked before it runs and then read again by the job: the second
    # read reuses the first, a changed file is read afresh, and callers never share a frame.
    from studylib.core import table_registry as tables

    path = tmp_path / "support.csv"
    cols = tables.columns("support")
    pd.DataFrame([{c: None for c in cols}]).to_csv(path, index=False)
    reads = []
    real = tables._read_csv
    monkeypatch.setattr(tables, "_read_csv", lambda p: reads.append(p) or real(p))
    first = tables.read_table("support", path)
    first["backend"] = "changed by a caller"
    again = tables.read_table("support", path)
    assert len(reads) == 1 and again["backend"].isna().all()
    pd.DataFrame([{c: None for c in cols}] * 2).to_csv(path, index=False)
    assert len(tables.read_table("support", path)) == 2 and len(reads) == 2
    # A record written (or damaged) beside an unchanged table is read too.
    sidecar(path).write_text("{garbage")
    with pytest.raises(DamagedFile, match="its writer's record .* is garbage"):
        tables.read_table("support", path)
