"""Config files checked before Snakemake reads them: `python scripts/check_config.py FILE...`.

Snakemake reads --configfile itself, before the workflow starts: a missing file ends in a
traceback, a YAML error in a message without the file or line. `make study CONFIG=FILE` runs
this first, so those mistakes are one line naming the file (and the line); exit status 2.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from studylib.core.config import ConfigFileError, config_keys, read_config_file  # noqa: E402

known = config_keys(Path(__file__).resolve().parents[1] / "config" / "schema.yaml")
try:
    for path in sys.argv[1:]:
        read_config_file(path, known)
except ConfigFileError as exc:
    print(exc, file=sys.stderr)
    sys.exit(2)
