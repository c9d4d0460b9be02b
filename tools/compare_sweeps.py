"""How well two sweeps of the same plan agree, per timing mode, at M >= a threshold.

    python3 tools/compare_sweeps.py run1/sweep.csv run2/sweep.csv --min-m 1024

Prints, per mode, the median and worst relative difference |b - a| / a over the points
that are ok in both, and the worst point.
"""

import argparse
import sys

import pandas as pd

KEYS = ["backend", "impl", "op", "dtype", "shape", "M", "N", "K", "G"]


def load(path: str) -> pd.DataFrame:
    frame = pd.read_parquet(path) if path.endswith(".parquet") else pd.read_csv(path)
    frame["G"] = pd.to_numeric(frame["G"], errors="coerce").fillna(0).astype(int)
    return frame[frame["status"] == "ok"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--min-m", type=int, default=1024)
    args = parser.parse_args()
    both = load(args.a).merge(load(args.b), on=KEYS, suffixes=("_a", "_b"))
    both = both[both["M"] >= args.min_m]
    if both.empty:
        print("no point is ok in both sweeps at that M")
        return 1
    for mode in ("eager_us", "graph_us", "cold_us"):
        a, b = both[f"{mode}_a"], both[f"{mode}_b"]
        spread = ((b - a).abs() / a).dropna()
        if spread.empty:
            continue
        worst = both.loc[spread.idxmax()]
        print(
            f"{mode}: {len(spread)} points, median spread {spread.median():.2%}, "
            f"worst {spread.max():.2%} ({worst['backend']} {worst['impl']} {worst['op']} "
            f"{worst['shape']} G={worst['G']} M={worst['M']}: "
            f"{worst[f'{mode}_a']:.2f} vs {worst[f'{mode}_b']:.2f} us)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
