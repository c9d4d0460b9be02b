"""On a GPU: a sustained loop (the kernel-power window) ends when its seconds do. With the
launch queue alone bounding the host's lead, about a thousand graph replays were still queued
when the host's clock said stop, and 4-s windows ran 4.05-11.0 s on the H200 (2026-12-04).

python3 -m pytest tests/gpu -q -s
"""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import tiny_config  # noqa: E402
from studylib.instruments.timing import LAUNCH_LEAD_S  # noqa: E402
from studylib.instruments.worker import Measurer  # noqa: E402
from studylib.stages.sweep.sweep_plan import expand_points, sweep_plan  # noqa: E402

SECONDS = 2.0


@pytest.mark.parametrize("mode", ["graph", "cold", "eager"])
def test_a_sustained_loop_ends_with_its_seconds(mode):
    # The served model's square projection at M = 4096: about 0.3 ms a call, replays of 1 ms
    # and more, so an unbounded queue holds a second or more of them.
    config = tiny_config()
    config["device"] = "cuda"
    config["shapes"] = {"square": {"N": 6144, "K": 6144}}
    config["backends"]["torch"]["cases"] = [
        {"op": "matmul", "dtypes": ["bf16"], "shapes": ["square"], "m": {"cuda": [4096]}}
    ]
    plan = sweep_plan(config, "torch")
    (point,) = expand_points(plan, "cuda")
    row = Measurer("torch", "cuda", plan).sustain(point, mode, SECONDS)
    assert row["status"] == "ok", row
    span = row["t_end"] - row["t_start"]
    print(
        f"{mode}: {span:.3f} s for {SECONDS} s, {row['calls']} calls, "
        f"{row['us_per_call']:.1f} us per call"
    )
    # The lead, one replay (at most a few ms here) and the final sync's own cost.
    assert SECONDS <= span <= SECONDS + LAUNCH_LEAD_S + 0.05
