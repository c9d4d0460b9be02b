"""Config files checked before Snakemake reads them: `python scripts/check_config.py FILE...`.

Snakemake reads --configfile itself, before the workflow starts: a missing file ends in a
traceback, a YAML error in a message without the file or line. `make study CONFIG=FILE` runs
this first, so those mistakes are one line naming the file (and the line); exit status 2.
`--sweep-backends 'NAME ...' [FILE...]` (make sweep) also checks each name is a backend the
config (config/config.yaml, then the files) leaves enabled.
"""

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from studylib.core.config import (  # noqa: E402
    ConfigFileError,
    config_keys,
    merged_config,
    read_config_file,
    sweep_backend_problems,
)

SCHEMA = ROOT / "config" / "schema.yaml"
known = config_keys(SCHEMA)
args = sys.argv[1:]
backends = args[1].split() if args[:1] == ["--sweep-backends"] else None
files = args[2:] if backends is not None else args
try:
    overrides = [read_config_file(path, known) for path in files]
    if backends is not None:
        config = read_config_file(ROOT / "config" / "config.yaml", known)
        for override in overrides:
            config = merged_config(config, override)
        schema = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
        problems = sweep_backend_problems(
            backends, config, list(schema["properties"]["backends"]["properties"])
        )
        if problems:
            raise ConfigFileError("make sweep: " + "; ".join(problems))
except ConfigFileError as exc:
    print(exc, file=sys.stderr)
    sys.exit(2)
