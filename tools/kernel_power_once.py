"""Run one backend's kernel-power loops outside Snakemake, for a quick check on a GPU box.

    python3 tools/kernel_power_once.py torch --seconds 6 --out /tmp/torch_power.parquet

Uses config/config.yaml (defaults from the schema when snakemake is installed), optionally
with shorter loops or more GPUs at once, and prints the window table.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from studylib.core.config import load_config  # noqa: E402
from studylib.stages.kernel_power.kernel_power_plan import kernel_power_plan  # noqa: E402
from studylib.stages.kernel_power.kernel_power_run import run_kernel_power  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("backend")
    parser.add_argument("--config", default=str(ROOT / "config" / "config.yaml"))
    parser.add_argument("--seconds", type=float, help="loop length (default: the config's)")
    parser.add_argument("--gpus", type=int, help="GPUs running each loop at once")
    parser.add_argument("--out", default="/tmp/kernel_power_once.parquet")
    args = parser.parse_args()
    config = load_config(args.config)
    if args.seconds is not None:
        config["kernel_power"]["seconds"] = {"cuda": args.seconds, "cpu": args.seconds}
    if args.gpus is not None:
        config["kernel_power"]["gpus"] = args.gpus
    plan = kernel_power_plan(config, args.backend)
    out = Path(args.out)
    windows = run_kernel_power(plan, out, out.with_name(out.stem + "_timeline.parquet"))
    cols = ["impl", "op", "M", "mode", "gpu", "status", "seconds", "avg_w", "avg_w_samples",
            "energy_gap_pct", "pct_limit", "sm_clock_mhz", "throttle_reasons", "sm_util",
            "tensor_util", "dram_util", "us_per_call", "sampler_cpu_pct"]  # fmt: skip
    import pandas as pd

    with pd.option_context("display.width", 250, "display.max_colwidth", 60):
        print(windows[cols].round(2).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
