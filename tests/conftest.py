import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

# GPU-only tests live in tests/gpu and run on a CUDA machine (tools/gpu_study.sh); they skip
# themselves elsewhere.
