import os

import pytest
from studylib.core.io import atomic_path, read_json, write_json


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
