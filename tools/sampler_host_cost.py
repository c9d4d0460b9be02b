#!/usr/bin/env python3
"""Does the power sampler, in another process, slow a host-bound launch loop? Which part?

    python3 tools/sampler_host_cost.py [--block 5] [--rounds 4] [--arms none,full,nogpm,lowrate]

A launch-bound engine (SGLang without CUDA graphs at C = 1) waits on the host at every step;
on the H200 it ran slower with the study's sampler beside its load in 7 of 8 rounds
(examples/h200-2026-12-04-sampler-probe). This asks the same of a loop that needs no server:
this process launches a tiny in-place add 50 times and synchronises, over and over (as
tools/host_launch_rate.py), for ``--block`` seconds per arm while a second process runs the
arm's sampler on every visible GPU:

- none: no sampler;
- full: the decode job's (NVML power at 20 Hz, clocks every tenth tick, the energy counter
  once a second, GPM sample pairs a second apart);
- nogpm: the same without GPM;
- lowrate: the same at 2 Hz (the energy counter still once a second, GPM on).

Arms alternate within a round and odd rounds run them in reverse, so the host's own phases
weigh on every arm alike. Prints one line per block, then each arm's median launch rate and,
round by round, its rate over the ``none`` arm's.
"""

import argparse
import multiprocessing as mp
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import yaml  # noqa: E402
from studylib.instruments.host_probes import launch_rate, round_arms, sampler_settings  # noqa: E402
from studylib.instruments.power_sampler import Sampler, open_readers, visible_nvml_indices  # noqa: E402

#: The decode job's sampler rate (decode.sample_hz of the default config).
SAMPLE_HZ = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["decode"]["sample_hz"]
#: Each arm's sampler settings (None: no sampler).
ARMS = {arm: sampler_settings(arm, SAMPLE_HZ) for arm in ("none", "full", "nogpm", "lowrate")}


def run_sampler(settings: dict, ready, stop) -> None:
    """The second process: the arm's sampler on every visible GPU until told to stop."""
    readers, _, _ = open_readers(visible_nvml_indices())
    with Sampler(readers, **settings):
        ready.set()
        stop.wait()


def summary(rows: list[dict]) -> list[str]:
    """Each arm's median rate, then its rate over the ``none`` arm's of the same round."""
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    lines = ["arm  median launches/s  rounds"]
    for arm in arms:
        rates = [r["rate"] for r in rows if r["arm"] == arm]
        lines.append(f"{arm}  {statistics.median(rates):.0f}  {len(rates)}")
    base = {r["round"]: r["rate"] for r in rows if r["arm"] == "none"}
    lines.append("arm  round-by-round rate over none  median")
    for arm in arms:
        if arm == "none" or not base:
            continue
        ratios = [r["rate"] / base[r["round"]] for r in rows
                  if r["arm"] == arm and r["round"] in base]  # fmt: skip
        if ratios:
            shown = " ".join(f"{x:.3f}" for x in ratios)
            lines.append(f"{arm}  {shown}  {statistics.median(ratios):.3f}")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--block", type=float, default=5.0, help="seconds of launches per arm")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--arms", default=",".join(ARMS))
    a = p.parse_args()
    arms = a.arms.split(",")
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        p.error(f"--arms: unknown {unknown}; known: {', '.join(ARMS)}")
    import torch  # after the arguments: --help needs no GPU

    x = torch.zeros(16, device="cuda")
    launch_rate(x, 1.0, torch)  # the first launches pay CUDA's start
    ctx = mp.get_context("spawn")  # the sampler's process never inherits CUDA
    rows = []
    print("round arm launches_per_s", flush=True)
    for rnd in range(a.rounds):
        for arm in round_arms(arms, rnd):
            child, stop = None, ctx.Event()
            if ARMS[arm] is not None:
                ready = ctx.Event()
                child = ctx.Process(target=run_sampler, args=(ARMS[arm], ready, stop))
                child.start()
                if not ready.wait(60):
                    child.terminate()
                    raise SystemExit(f"arm {arm}: the sampler did not start within 60 s")
            try:
                rate = launch_rate(x, a.block, torch)
            finally:
                stop.set()
                if child is not None:
                    child.join(timeout=10)
            rows.append({"round": rnd, "arm": arm, "rate": rate})
            print(f"{rnd} {arm} {rate:.0f}", flush=True)
    print("\n".join(summary(rows)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
