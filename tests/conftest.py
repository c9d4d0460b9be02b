import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

# GPU-only tests live in tests/gpu and run on a CUDA machine (tools/gpu_study.sh); they skip
# themselves elsewhere.
# helpers, stand-ins and the builders tests share across folders (tests/core, instruments,
# stages/<stage>, report, workflow: the tests mirror the library's layout).
for folder in (ROOT / "tests", *sorted((ROOT / "tests").glob("**/"))):
    if folder.name not in ("__pycache__", "gpu") and str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

# Every stage's tables in the table registry, as in a workflow job (snakemake_job imports it).
import studylib.study_tables  # noqa: E402, F401

# Tests of Ctrl-C (a load interrupted, Snakemake stopped with SIGINT) need SIGINT handled, in
# this process and in the processes it starts. A shell script's background command (`cmd &`)
# starts with SIGINT ignored, Python keeps it so, and every child inherits it: there, such a
# test would wait forever for an interrupt nothing delivers. Handled here, children start
# with the default action.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
