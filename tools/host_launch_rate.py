#!/usr/bin/env python3
"""How fast this host launches GPU kernels, slice by slice: the speed a launch-bound engine
(SGLang without CUDA graphs at low C, where a decode step is host time) can run at.

    python3 tools/host_launch_rate.py [--seconds 50] [--slice 0.5] > rate.txt

One process, nothing else asked of the GPU: per slice, the launches per second of a tiny
in-place add (synchronised every 50 launches), the host's steal time (/proc/stat: a VM's
CPU taken by its host) and the CPUs' reported clock. On the lent H200 (2026-12-03) the rate
moved between 91k and 139k launches/s in phases of 2-17 s with no steal and a reported
2100 MHz throughout: examples/h200-2026-12-03-eager/host_launch_rate.txt.
"""

import argparse
import time


def cpu_stat() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs."""
    fields = open("/proc/stat").readline().split()
    return int(fields[8]), sum(map(int, fields[1:9]))


def cpu_mhz() -> tuple[float, float]:
    values = [float(line.split(":")[1]) for line in open("/proc/cpuinfo")
              if line.startswith("cpu MHz")]  # fmt: skip
    return (min(values), max(values)) if values else (float("nan"), float("nan"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=50.0)
    p.add_argument("--slice", type=float, default=0.5)
    a = p.parse_args()
    import torch  # after the arguments: --help needs no GPU

    x = torch.zeros(16, device="cuda")
    torch.cuda.synchronize()
    print("slice_end_s launches_per_s steal_pct cpu_mhz_min cpu_mhz_max", flush=True)
    start = time.monotonic()
    before = cpu_stat()
    while time.monotonic() - start < a.seconds:
        t0, launches = time.monotonic(), 0
        while time.monotonic() - t0 < a.slice:
            for _ in range(50):
                x.add_(1)
            torch.cuda.synchronize()
            launches += 50
        rate = launches / (time.monotonic() - t0)
        after = cpu_stat()
        total = after[1] - before[1]
        steal = 100 * (after[0] - before[0]) / total if total else 0.0
        low, high = cpu_mhz()
        print(f"{time.monotonic() - start:.1f} {rate:.0f} {steal:.2f} {low:.0f} {high:.0f}",
              flush=True)  # fmt: skip
        before = after
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
