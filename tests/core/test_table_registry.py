"""The table registry's checked readers: a column added after committed tables were written."""

import pandas as pd
import pytest
from helpers import ROOT
from studylib.core.io import write_frame
from studylib.core.table_registry import DamagedFile, read_table

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
