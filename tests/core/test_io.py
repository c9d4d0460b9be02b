import hashlib
import json
import os

import pandas as pd
import pyarrow.parquet as pq
import pytest
from studylib.core.io import atomic_path, read_json, stable_hash, write_frame, write_json
from studylib.core.table_records import MARKER, PARQUET_KEY, sidecar


def test_failed_write_leaves_nothing(tmp_path):
    target = tmp_path / "out" / "table.csv"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash")
    assert not target.exists()
    assert os.listdir(target.parent) == []


def test_write_json_roundtrip_and_mode(tmp_path):
    target = tmp_path / "x.json"
    write_json(target, {"b": 1, "a": [1, 2]})
    assert read_json(target) == {"a": [1, 2], "b": 1}
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


FRAME = pd.DataFrame({"M": [1, 2, 4], "eager_us": [1.5, None, 3.0], "error": ["", "a,\nb", None]})
PLAN = {"backend": "torch", "cases": [{"op": "matmul"}]}


def test_a_parquet_table_carries_its_writers_record_in_its_footer(tmp_path):
    path = tmp_path / "results" / "sweeps" / "torch.parquet"
    write_frame(FRAME, path, "sweep torch", PLAN)
    record = json.loads(pq.read_metadata(path).metadata[PARQUET_KEY])
    data = path.read_bytes()[: record["bytes"]]
    assert record == {"record": 1, "producer": "sweep torch", "file": "sweeps/torch.parquet",
                      "plan": stable_hash(PLAN), "rows": 3, "bytes": len(data),
                      "content": hashlib.sha256(data).hexdigest()[:16]}  # fmt: skip
    assert pd.read_parquet(path).equals(FRAME)  # as df.to_parquet(index=False) writes it
    assert not sidecar(path).exists()
    # The results folder's marker: its tables carry records from here on.
    assert (tmp_path / "results" / MARKER).is_file()


def test_a_csv_table_carries_the_same_record_beside_it(tmp_path):
    path = tmp_path / "results" / "tables" / "sweep.csv"
    write_frame(FRAME, path, "aggregate")
    record = json.loads(sidecar(path).read_text())
    data = path.read_bytes()
    assert record == {"record": 1, "producer": "aggregate", "file": "tables/sweep.csv",
                      "plan": None, "rows": 3, "bytes": len(data),
                      "content": hashlib.sha256(data).hexdigest()[:16]}  # fmt: skip


def test_the_producer_defaults_to_the_writing_function(tmp_path):
    path = tmp_path / "out" / "table.csv"
    write_frame(FRAME, path)
    producer = json.loads(sidecar(path).read_text())["producer"]
    assert producer == "test_io.test_the_producer_defaults_to_the_writing_function"
    # Outside a results folder (a tool's output, an example) no marker is written.
    assert not list(tmp_path.rglob(MARKER))
