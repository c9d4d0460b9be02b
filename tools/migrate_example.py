"""Bring a committed example's derived tables up to today's schema, in place.

    python3 tools/migrate_example.py examples/h200x2-2026-11-30-uniform [...]

Rewrites each table under the example's ``tables/`` (and ``kernel_power/windows.csv``) that
today's checked reader refuses: the columns it lacks added (empty where the example's records
do not say their value), the run's own values written back as they were; see
``studylib.example_migration`` for the rules. Prints one line per table changed (paste them
into the example's README); a table already of today's schema is left alone.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import studylib.study_tables  # noqa: E402, F401 - every stage's tables in the registry
from studylib.core.table_registry import DamagedFile  # noqa: E402
from studylib.example_migration import migrate_example  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("examples", type=Path, nargs="+", help="examples/ folders")
    args = parser.parse_args()
    for example in args.examples:
        try:
            done = migrate_example(example)
        except DamagedFile as exc:
            print(f"migrate_example: {exc}", file=sys.stderr)
            return 2
        for migration in done:
            print(migration.text())
        if not done:
            print(f"{example}: every table already of today's schema")
    return 0


if __name__ == "__main__":
    sys.exit(main())
