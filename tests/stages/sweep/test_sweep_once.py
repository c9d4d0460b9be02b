"""tools/sweep_once.py: a debugging sweep restricted to the values asked for, or refused."""

import subprocess
import sys

from helpers import ROOT, default_config
from studylib.stages.sweep.sweep_plan import expand_points, sweep_plan

sys.path.insert(0, str(ROOT / "tools"))
from sweep_once import restrict  # noqa: E402

NONE = dict.fromkeys(("m", "op", "dtype", "impl", "shape"))


def test_a_size_not_in_the_grid_is_refused_with_the_sizes_there_are():
    plan = sweep_plan(default_config(), "torch")
    _, problems = restrict(plan, "cpu", {**NONE, "m": {4096}})
    # m_grid.cpu, and 4 of the decode cases (decode projections, decode attention)
    assert problems == ["--m 4096: not in torch's plan on cpu (it has: 1, 4, 16, 64, 256)"]


def test_the_selection_keeps_only_the_values_given():
    plan = sweep_plan(default_config(), "torch")
    wanted = {**NONE, "m": {16}, "op": {"matmul"}, "dtype": {"fp32"}, "shape": {"down"}}
    cut, problems = restrict(plan, "cpu", wanted)
    assert not problems
    points = expand_points(cut, "cpu")
    assert [(p["op"], p["dtype"], p["shape"], p["M"]) for p in points] == [
        ("matmul", "fp32", "down", 16)
    ]


def test_values_that_never_meet_are_refused():
    plan = sweep_plan(default_config(), "torch")
    # scaled_mm has no fp32: each value exists, but no point has both.
    _, problems = restrict(plan, "cpu", {**NONE, "op": {"scaled_mm"}, "dtype": {"fp32"}})
    assert problems == ["no point of the plan has all of the values given together"]


def test_the_command_line_exits_2_naming_the_bad_value():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "sweep_once.py"), "torch", "--op", "nope"],
        capture_output=True, text=True, timeout=300, env={"CUDA_VISIBLE_DEVICES": "",
                                                          "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "sweep_once: --op nope: not in torch's plan on cpu" in proc.stderr
