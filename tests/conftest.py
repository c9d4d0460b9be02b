import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

# GPU-only tests live in tests/gpu and run on a CUDA machine (tools/gpu_study.sh); they skip
# themselves elsewhere.
sys.path.insert(0, str(ROOT / "tests"))  # helpers, stand-ins: for the tests in subfolders too

# Every stage's tables in the table registry, as in a workflow job (snakemake_job imports it).
import studylib.study_tables  # noqa: E402, F401
