"""Run one backend's sweep outside Snakemake, for debugging a GPU box quickly.

    python3 tools/sweep_once.py torch --m 16,4096 --op matmul --out /tmp/torch.parquet

Uses config/config.yaml (defaults from the schema), restricted to the M values, ops, dtypes,
impls and shapes given (each must be in the config's plan for that backend: a value that is
not is refused with the ones that are), and prints the resulting rows.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from studylib.core.config import load_config, study_device  # noqa: E402
from studylib.instruments.backends import catalogue  # noqa: E402
from studylib.stages.sweep.sweep_plan import expand_points, sweep_plan  # noqa: E402
from studylib.stages.sweep.sweep_run import run_sweep  # noqa: E402

FILTERS = ("m", "op", "dtype", "impl", "shape")


def split(text: str | None, kind=str) -> set | None:
    return {kind(v) for v in text.split(",") if v.strip()} if text else None


def restrict(plan: dict, device: str, wanted: dict) -> tuple[dict, list[str]]:
    """The plan cut to ``wanted`` ({filter: set or None}), and the problems: values that the
    plan does not have on ``device``, or an empty selection."""
    points = expand_points(plan, device)
    have = {
        "m": {p["M"] for p in points}, "op": {p["op"] for p in points},
        "dtype": {p["dtype"] for p in points}, "impl": {p["impl"] for p in points},
        "shape": {p["shape"] for p in points},
    }  # fmt: skip
    problems = []
    for key, values in wanted.items():
        if values and values - have[key]:
            missing = ", ".join(str(v) for v in sorted(values - have[key]))
            known = ", ".join(str(v) for v in sorted(have[key]))
            problems.append(f"--{key} {missing}: not in {plan['backend']}'s plan on {device} "
                            f"(it has: {known})")  # fmt: skip
    if problems:
        return plan, problems
    ops = catalogue()[plan["backend"]]
    cases = []
    for case in plan["cases"]:
        if wanted["op"] and case["op"] not in wanted["op"]:
            continue
        case = {**case}
        if wanted["dtype"]:
            case["dtypes"] = [d for d in case["dtypes"] if d in wanted["dtype"]]
        if wanted["impl"]:
            case["impls"] = [i for i in case.get("impls") or ops[case["op"]]["impls"]
                             if i in wanted["impl"]]  # fmt: skip
        if wanted["shape"]:
            case["shapes"] = [s for s in case["shapes"] if s["name"] in wanted["shape"]]
        if wanted["m"]:
            case["m"] = {dev: [m for m in grid if m in wanted["m"]]
                         for dev, grid in case["m"].items()}  # fmt: skip
        if case["dtypes"] and case.get("impls", True) and case["shapes"] and case["m"][device]:
            cases.append(case)
    plan = {**plan, "cases": cases}
    if not expand_points(plan, device):
        problems.append("no point of the plan has all of the values given together")
    return plan, problems


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("backend", choices=sorted(catalogue()))
    parser.add_argument("--config", default=str(ROOT / "config" / "config.yaml"))
    parser.add_argument("--m", help="comma-separated M values to keep")
    parser.add_argument("--op", help="comma-separated ops to keep")
    parser.add_argument("--dtype", help="comma-separated dtypes to keep")
    parser.add_argument("--impl", help="comma-separated implementations to keep")
    parser.add_argument("--shape", help="comma-separated shape names to keep")
    parser.add_argument("--out", default="/tmp/sweep_once.parquet")
    args = parser.parse_args()
    config = load_config(args.config)
    device = study_device(config)
    wanted = {key: split(getattr(args, key), int if key == "m" else str) for key in FILTERS}
    plan, problems = restrict(sweep_plan(config, args.backend), device, wanted)
    if problems:
        for problem in problems:
            print(f"sweep_once: {problem}", file=sys.stderr)
        return 2
    frame = run_sweep(plan, args.out)
    cols = ["impl", "op", "dtype", "shape", "G", "M", "status", "eager_us", "graph_us", "cold_us",
            "tflops", "cos_sim", "sm_clock_mhz", "throttle", "error"]  # fmt: skip
    import pandas as pd

    with pd.option_context("display.width", 250, "display.max_colwidth", 80):
        print(frame[cols].to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
