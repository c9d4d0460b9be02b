"""Do two runs of the study answer alike? (studylib/run_agreement.py)

    python3 tools/run_agreement.py FULL SHORT [--also FOLDER]... [--out DIR]
    python3 tools/run_agreement.py --within FULL [--out DIR]

FULL and SHORT are results folders (results/, or a copy) or committed examples: a shortened
run against a full-length one, or any two runs of one machine kind. ``--also`` completes FULL
with more full-length runs: each decode variant and C comes from the first of FULL, then the
--also folders, that has it; the sweep from the first that has one. Prints how many per-size
rankings name the same leaders, overlap or differ, and how many decode rows (variant x C)
agree on TPOT, tok/s, W and J/token within their noise; writes ranking_agreement.csv and
decode_agreement.csv under DIR (default: the current folder). ``--within``: one full-length
run (decode.full_length_s, config/examples/full.yaml), each decode window against the window
the shortened study's precision rule would have ended, replayed on the same requests and
samples (one chip, one server): decode_within.csv. Exit 1 when a ranking's leaders or a
decode row differ, 2 when a folder is missing.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from studylib.run_agreement import (  # noqa: E402
    compare_runs,
    summary,
    within_run,
    within_summary,
)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("full", nargs="?", help="the full-length run's folder")
    parser.add_argument("short", nargs="?", help="the shortened run's folder")
    parser.add_argument("--out", default=".", help="folder for the agreement tables")
    parser.add_argument("--also", action="append", default=[], metavar="FOLDER",
                        help="another full-length run completing FULL: decode variants and C "
                        "that FULL lacks (repeatable, in order of priority)")  # fmt: skip
    parser.add_argument("--within", metavar="FULL",
                        help="one full-length run: each decode window against its shortened "
                        "self")  # fmt: skip
    args = parser.parse_args()
    if args.within is not None:
        return _within(args.within, Path(args.out))
    if args.full is None or args.short is None:
        parser.error("give FULL and SHORT, or --within FULL")
    try:
        ranks, decode = compare_runs(args.full, args.short, args.also)
    except FileNotFoundError as exc:
        print(f"run_agreement: {exc}", file=sys.stderr)
        return 2
    for line in summary(ranks, decode):
        print(line)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ranks.to_csv(out / "ranking_agreement.csv", index=False)
    decode.to_csv(out / "decode_agreement.csv", index=False)
    print(f"tables: {out / 'ranking_agreement.csv'}, {out / 'decode_agreement.csv'}")
    differs = (ranks["agreement"] == "differs").any() or (decode["agreement"] == "differs").any()
    return 1 if differs else 0


def _within(folder: str, out: Path) -> int:
    if not Path(folder).is_dir():
        print(f"run_agreement: no folder {folder}", file=sys.stderr)
        return 2
    agreement, full = within_run(folder)
    for line in within_summary(agreement, full):
        print(line)
    out.mkdir(parents=True, exist_ok=True)
    agreement.to_csv(out / "decode_within.csv", index=False)
    print(f"table: {out / 'decode_within.csv'}")
    return 1 if (agreement["agreement"] == "differs").any() else 0


if __name__ == "__main__":
    sys.exit(main())
