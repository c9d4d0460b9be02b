#!/usr/bin/env python3
"""How much of an SGLang server's start runs before it touches the GPU, measured with the
gated start (scripts/studylib/instruments/serving/engines/sglang_gate.py).

    tools/sglang_gate_probe.py results/decode/sglang-fp8-graphs/run.json [--hold-s 10]
        [--out gate_probe.json]

Starts a server with the arguments a decode job's run.json records, through the gate, and
times: launch to the scheduler waiting at the gate (the CPU part), then, the gate held shut
for ``--hold-s``, which processes hold a CUDA context (nvidia-smi's compute apps) and the GPU's
power (NVML, 10 Hz), then gate open to ready (/health 200: the GPU part). The server is then
stopped (its whole process group). Prints one JSON object; writes it to ``--out`` too.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from studylib.instruments.serving.engines import sglang_gate  # noqa: E402
from studylib.instruments.serving.engines.sglang_engine import ENGINE  # noqa: E402


def gated_argv(argv: list[str]) -> list[str]:
    """A recorded ``python -m sglang.launch_server ...`` (or a gated start's) as the gated
    start."""
    if len(argv) > 1 and Path(argv[1]).name == Path(sglang_gate.__file__).name:
        return [argv[0], sglang_gate.__file__, *argv[2:]]
    at = argv.index("-m")
    if argv[at + 1] != "sglang.launch_server":
        raise SystemExit(f"not an SGLang launch: {argv[:4]}")
    return [argv[0], sglang_gate.__file__, *argv[at + 2 :]]


def until(predicate, timeout_s: float, what: str, poll_s: float = 0.05) -> float:
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(poll_s)
    return time.monotonic()


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def compute_apps() -> list[str]:
    done = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                           "--format=csv,noheader"], capture_output=True, text=True)  # fmt: skip
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def power_w(seconds: float) -> list[float]:
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    watts, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        watts.append(pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3)
        time.sleep(0.1)
    return watts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_json", type=Path)
    p.add_argument("--hold-s", type=float, default=10.0)
    p.add_argument("--out", type=Path)
    p.add_argument("--log", type=Path, default=Path("gate_probe_server.log"))
    a = p.parse_args()
    argv = gated_argv(json.loads(a.run_json.read_text())["argv"])
    port = argv[argv.index("--port") + 1]
    gate = Path(tempfile.mkdtemp()) / "open"
    env = {**os.environ, **ENGINE.env, sglang_gate.GATE_ENV: str(gate)}
    result = {"argv": argv, "hold_s": a.hold_s, "idle_w_before": None}
    result["idle_w_before"] = statistics.mean(power_w(2.0))
    with a.log.open("w") as log:
        t0 = time.monotonic()
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)  # fmt: skip
    try:
        gated = until(lambda: sglang_gate.WAITING in a.log.read_text(errors="replace"), 600,
                      "the scheduler at the gate")  # fmt: skip
        result["launch_to_gate_s"] = gated - t0
        result["contexts_at_gate"] = compute_apps()
        held = power_w(a.hold_s)
        result["w_at_gate"] = {"mean": statistics.mean(held), "max": max(held)}
        gate.touch()
        opened = time.monotonic()
        ready = until(lambda: healthy(f"http://127.0.0.1:{port}/health"), 900, "ready")
        result["gate_to_ready_s"] = ready - opened
        result["launch_to_ready_less_hold_s"] = ready - t0 - (opened - gated)
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
