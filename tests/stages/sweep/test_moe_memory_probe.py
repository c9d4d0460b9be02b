"""tools/moe_memory_probe.py: the chain of referrers it prints, and its refusal on the CPU."""

import subprocess
import sys

from helpers import ROOT

sys.path.insert(0, str(ROOT / "tools"))
from moe_memory_probe import referrers  # noqa: E402

HELD = []  # a module-level holder, as a cache that keeps a point's tensors would be


class Weights:
    pass


def test_the_chain_reaches_the_module_global_that_holds_an_object(capsys):
    weights = Weights()
    HELD.append({"w13": weights})
    try:
        referrers(weights, {id(sys._getframe())})
    finally:
        HELD.clear()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].strip() == "dict with keys ['w13']"
    assert any(line.strip() == "list of 1" for line in lines)
    assert any(line.strip() == f"a global of module {__name__}" for line in lines), lines


def test_without_a_gpu_it_says_so_and_exits_2():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "moe_memory_probe.py")],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "no CUDA device" in proc.stderr
