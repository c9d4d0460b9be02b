"""On a GPU: a real CUDA trap (device-side assert) costs one point; the sweep goes on.

python3 -m pytest tests/gpu -q -s
"""

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import tiny_config  # noqa: E402
from studylib.stages.sweep.sweep_plan import sweep_plan  # noqa: E402
from studylib.stages.sweep.sweep_run import run_sweep  # noqa: E402


def test_cuda_trap_costs_one_point(tmp_path, monkeypatch):
    config = tiny_config()
    config["device"] = "cuda"
    config["timing"]["cold_l2_multiple"] = 4
    config["check"] = {"cos_sim_min": {"bf16": 0.99}, "rel_err_max": {"bf16": 0.02}}
    grid = {"cuda": [1, 16, 64], "cpu": [1]}
    config["backends"]["torch"]["cases"] = [
        {"op": "matmul", "dtypes": ["bf16"], "shapes": ["down"], "m": grid}
    ]
    monkeypatch.setenv("STUDY_INJECT_FAULTS", json.dumps({"matmul:16": "cuda_trap"}))
    with open(tmp_path / "log", "w") as log:
        frame = run_sweep(sweep_plan(config, "torch"), tmp_path / "t.parquet", log_stream=log)
    print((tmp_path / "log").read_text()[-3000:])
    rows = frame.set_index("M")
    assert rows.loc[16, "status"] == "error"
    assert "assert" in rows.loc[16, "error"].lower() or "cuda" in rows.loc[16, "error"].lower()
    assert rows.loc[1, "status"] == "ok" and rows.loc[64, "status"] == "ok"
    assert rows.loc[64, "graph_us"] > 0  # measured by a fresh worker after the trap
