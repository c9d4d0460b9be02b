"""tools/sampler_host_cost.py's plan and summary (its loop needs a GPU): arms alternate, each
arm is set beside the no-sampler arm of its own round."""

import importlib.util

from helpers import ROOT


def tool():
    spec = importlib.util.spec_from_file_location(
        "sampler_host_cost", ROOT / "tools" / "sampler_host_cost.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_arms_are_the_decode_samplers_parts():
    t = tool()
    assert t.ARMS["none"] is None
    assert t.ARMS["full"] == {"rate_hz": 20.0, "gpm": True}
    assert t.ARMS["nogpm"]["gpm"] is False and t.ARMS["lowrate"]["rate_hz"] < 20
    assert t.round_arms(["none", "full"], 1) == ["full", "none"]


def test_each_arm_over_the_same_rounds_none():
    t = tool()
    rows = [
        {"round": 0, "arm": "none", "rate": 100_000.0},
        {"round": 0, "arm": "full", "rate": 80_000.0},
        {"round": 1, "arm": "full", "rate": 110_000.0},  # a faster phase of the host
        {"round": 1, "arm": "none", "rate": 125_000.0},
    ]
    lines = t.summary(rows)
    assert lines[1].split() == ["none", "112500", "2"] and lines[2].split() == [
        "full",
        "95000",
        "2",
    ]
    assert lines[-1].split() == ["full", "0.800", "0.880", "0.840"]
