#!/usr/bin/env python3
"""How fast this host launches GPU kernels, slice by slice: the speed a launch-bound engine
(SGLang without CUDA graphs at low C, where a decode step is host time) can run at.

    python3 tools/host_launch_rate.py [--seconds 50] [--slice 0.5] [--cpu-proxy] > rate.txt

One process, nothing else asked of the GPU: per slice, the launches per second of a tiny
in-place add (synchronised every 50 launches), the host's steal time (/proc/stat: a VM's
CPU taken by its host) and the CPUs' reported clock. On the lent H200 (2026-12-03) the rate
moved between 91k and 139k launches/s in phases of 2-17 s with no steal and a reported
2100 MHz throughout: examples/h200-2026-12-03-eager/host_launch_rate.txt.

``--cpu-proxy`` also runs a pure-Python loop in a second process (another core, no GPU) and
gives its rate per slice beside the launches, and at the end the correlation of the two over
the slices: whether a probe that never touches the GPU (so that it could run beside a
server's windows without taking from them) sees the same phases.
"""

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from studylib.instruments.host_probes import launch_rate  # noqa: E402


def cpu_stat() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]), sum(map(int, fields[1:9]))


def cpu_mhz() -> tuple[float, float]:
    with open("/proc/cpuinfo") as f:
        values = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
    return (min(values), max(values)) if values else (float("nan"), float("nan"))


def python_loop(counter, stop) -> None:
    """The proxy: a fixed pure-Python workload, its rounds counted into ``counter``."""
    while not stop.is_set():
        total = 0
        for i in range(2000):
            total += i * i
        with counter.get_lock():
            counter.value += 1


def correlation(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3 or statistics.pstdev(xs) == 0 or statistics.pstdev(ys) == 0:
        return None
    return statistics.correlation(xs, ys)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=50.0)
    p.add_argument("--slice", type=float, default=0.5)
    p.add_argument("--cpu-proxy", action="store_true",
                   help="a pure-Python loop in a second process beside the launches")  # fmt: skip
    a = p.parse_args()
    import torch  # after the arguments: --help needs no GPU

    counter, stop, proxy = mp.Value("q", 0), mp.Event(), None
    if a.cpu_proxy:
        proxy = mp.Process(target=python_loop, args=(counter, stop), daemon=True)
        proxy.start()
    x = torch.zeros(16, device="cuda")
    torch.cuda.synchronize()
    print("slice_end_s launches_per_s steal_pct cpu_mhz_min cpu_mhz_max"
          + (" proxy_rounds_per_s" if proxy else ""), flush=True)  # fmt: skip
    launch_rates, proxy_rates = [], []
    start = time.monotonic()
    before = cpu_stat()
    try:
        while time.monotonic() - start < a.seconds:
            t0, rounds0 = time.monotonic(), counter.value
            rate = launch_rate(x, a.slice, torch)
            rounds = (counter.value - rounds0) / (time.monotonic() - t0)
            after = cpu_stat()
            total = after[1] - before[1]
            steal = 100 * (after[0] - before[0]) / total if total else 0.0
            low, high = cpu_mhz()
            line = f"{time.monotonic() - start:.1f} {rate:.0f} {steal:.2f} {low:.0f} {high:.0f}"
            print(line + (f" {rounds:.0f}" if proxy else ""), flush=True)
            launch_rates.append(rate)
            proxy_rates.append(rounds)
            before = after
    finally:
        stop.set()
        if proxy is not None:
            proxy.join(timeout=5)
    if proxy is not None:
        r = correlation(launch_rates, proxy_rates)
        print(f"# correlation of launches and proxy rounds over {len(launch_rates)} slices: "
              + (f"{r:.2f}" if r is not None else "-"), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
