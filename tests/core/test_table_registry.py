"""The table registry's checked readers: a column added after committed tables were written;
tables without their writer's record (committed examples, results from before records)."""

import json
import logging
import os
import time

import pandas as pd
import pytest
from helpers import ROOT
from studylib.core.io import write_frame
from studylib.core.table_records import MARKER, sidecar
from studylib.core.table_registry import DamagedFile, columns, read_table

EXAMPLE = ROOT / "examples" / "h200-2026-12-01-step-model" / "tables" / "decode.csv"


def test_a_table_written_before_an_added_column_reads_with_it_empty():
    # Committed on 2026-12-01, before server_running_median (the delivery gate's median).
    assert "server_running_median" not in pd.read_csv(EXAMPLE).columns
    table = read_table("decode_table", EXAMPLE)
    assert table["server_running_median"].isna().all() and len(table) > 0


def test_a_column_that_was_never_optional_is_still_required(tmp_path):
    frame = pd.read_csv(EXAMPLE).drop(columns=["server_tok_s"])
    path = tmp_path / "decode.csv"
    write_frame(frame, path)
    with pytest.raises(DamagedFile, match="no column server_tok_s"):
        read_table("decode_table", path)


def old_csv(frame, path):
    """A CSV as write_frame wrote it before records: its size and rows beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    sidecar(path).write_text(json.dumps({"bytes": path.stat().st_size, "rows": len(frame)}))


def support_rows(n):
    return pd.DataFrame([dict.fromkeys(columns("support"), None)] * n)


def test_committed_examples_read_unchecked_without_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        assert len(read_table("decode_table", EXAMPLE)) > 0  # no record at all
        step = EXAMPLE.with_name("step_model.csv")
        assert sidecar(step).is_file() and len(read_table("step_model", step)) > 0  # old record
    assert caplog.records == []


def test_an_old_record_still_catches_a_cut_at_a_line_end(tmp_path):
    path = tmp_path / "tables" / "support.csv"
    old_csv(support_rows(4), path)
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:3]))
    with pytest.raises(DamagedFile) as error:
        read_table("support", path)
    assert str(error.value) == (
        f"{path}: 95 bytes and 2 rows where its writer wrote 117 bytes and 4 rows: cut at a line "
        "end, or changed after it was written; rerun the rule that writes it"
    )


def test_results_from_before_records_read_with_a_warning(tmp_path, caplog):
    """A results folder written before tables carried records: each old table is read, checked
    for its columns and values, with a one-line warning; once the folder's first recorded table
    is written (its marker), the old tables still read, and a table without a record written
    after it is refused."""
    results = tmp_path / "results"
    old_sweep = results / "sweeps" / "torch.parquet"
    old_support = results / "tables" / "support.csv"
    old_sweep.parent.mkdir(parents=True)
    pd.DataFrame([dict.fromkeys(columns("sweep"), None)] * 2).assign(M=1, N=1, K=1).to_parquet(
        old_sweep, index=False
    )
    old_csv(support_rows(3), old_support)
    checked = "its columns and values are checked, its rows and content cannot be; delete it and "
    checked += "run again to rebuild it with one"
    with caplog.at_level(logging.WARNING):
        assert len(read_table("sweep", old_sweep)) == 2
        assert len(read_table("support", old_support)) == 3
    assert [r.getMessage() for r in caplog.records] == [
        f"{old_sweep}: no writer's record (written before the study's tables carried one): "
        + checked,
        f"{old_support}: only an old writer's record (bytes and rows) (written before the "
        "study's tables carried one): " + checked,
    ]
    # Written an hour before the upgrade; then a job of today's study writes the first record.
    hour_ago = time.time_ns() - 3600 * 10**9
    for path in (old_sweep, old_support):
        os.utime(path, ns=(hour_ago, hour_ago))
    write_frame(support_rows(1), results / "tables" / "other.csv", "aggregate")
    assert (results / MARKER).is_file()
    assert len(read_table("sweep", old_sweep)) == 2
    assert len(read_table("support", old_support)) == 3
    # Rewritten by another program after that: refused.
    pd.read_parquet(old_sweep).head(1).to_parquet(old_sweep, index=False)
    with pytest.raises(DamagedFile) as error:
        read_table("sweep", old_sweep)
    assert str(error.value) == (
        f"{old_sweep}: no writer's record (parquet metadata key study.written), yet written "
        f"after this folder's tables began carrying one ({results / MARKER}): not written by "
        "the study (rewritten by another program, e.g. pandas, or copied here)"
    )
    old_support.write_text(old_support.read_text())  # the same bytes, written again
    with pytest.raises(
        DamagedFile,
        match=r"support.csv: only an old writer's record \(bytes and "
        r"rows\) \(.support.csv.written beside it\), yet written after",
    ):
        read_table("support", old_support)
