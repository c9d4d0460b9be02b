"""Run one backend's sweep outside Snakemake, for debugging a GPU box quickly.

    python3 tools/sweep_once.py torch --m 16,4096 --out /tmp/torch.parquet

Uses config/config.yaml (defaults from the schema), optionally restricted to some M values,
and prints the resulting rows.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from studylib.plan import load_config, sweep_plan  # noqa: E402
from studylib.sweep import run_sweep  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("backend")
    parser.add_argument("--config", default=str(ROOT / "config" / "config.yaml"))
    parser.add_argument("--m", help="comma-separated M values to keep")
    parser.add_argument("--out", default="/tmp/sweep_once.parquet")
    args = parser.parse_args()
    config = load_config(args.config)
    plan = sweep_plan(config, args.backend)
    if args.m:
        keep = {int(v) for v in args.m.split(",")}
        for case in plan["cases"]:
            case["m"] = {
                dev: [m for m in grid if m in keep] or grid[:1] for dev, grid in case["m"].items()
            }
    frame = run_sweep(plan, args.out)
    cols = ["impl", "op", "dtype", "shape", "G", "M", "status", "eager_us", "graph_us", "cold_us",
            "tflops", "cos_sim", "sm_clock_mhz", "throttle", "error"]  # fmt: skip
    import pandas as pd

    with pd.option_context("display.width", 250, "display.max_colwidth", 80):
        print(frame[cols].to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
