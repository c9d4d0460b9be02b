"""Before and after: compare two sweeps point by point (studylib/stages/sweep/sweep_compare.py).

    python3 tools/compare_sweeps.py BASELINE CURRENT [--min-m 1] [--out compare.csv]

BASELINE and CURRENT are a sweep file (tables/sweep.csv, a backend's parquet or CSV) or a
results folder (results/, or a committed example such as examples/h200x2-2026-11-29). Prints
one line per timing mode and writes the signed per-point table (speed-up = baseline / current;
'same' within the larger IQR or 3 %). Exit 1 when no point is ok in both.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from studylib.stages.sweep.sweep_compare import compare, load_sweep, summary  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("baseline")
    parser.add_argument("current")
    parser.add_argument("--min-m", type=int, default=1, help="only points with M at least this")
    parser.add_argument("--out", default="compare.csv", help="the per-point table (CSV)")
    args = parser.parse_args()
    try:
        table = compare(load_sweep(args.baseline), load_sweep(args.current), args.min_m)
    except FileNotFoundError as exc:
        print(f"compare_sweeps: {exc}", file=sys.stderr)
        return 2
    if table.empty:
        print(f"no point is ok in both sweeps at M >= {args.min_m}")
        return 1
    for line in summary(table):
        print(line)
    table.to_csv(args.out, index=False)
    print(f"per-point table: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
