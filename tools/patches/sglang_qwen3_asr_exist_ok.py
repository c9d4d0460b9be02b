"""Patch an installed SGLang so it imports with transformers >= 5.13 (run by install_gpu_bundle.sh).

SGLang 0.5.16 pins transformers 5.12.1; its ``sglang/srt/configs/qwen3_asr.py`` registers
``qwen3_asr`` (and ``qwen3_asr_thinker``) with ``AutoConfig`` at import time. Newer transformers
(the H200 image has 5.17) ships those model types itself, so the registration raises
``ValueError: 'qwen3_asr' is already used by a Transformers config`` and every
``import sglang.srt...`` (the server included) fails. The patch adds ``exist_ok=True`` to those
two calls and nothing else.

    python tools/patches/sglang_qwen3_asr_exist_ok.py SITE_DIR

SITE_DIR holds the installed ``sglang/`` (e.g. the --target folder). Idempotent: a patched
file is left alone. Exits 1, naming the file, if a line to patch is neither in its original
nor in its patched form (SGLang changed: review the patch), and 0 with a note when SGLang is
not installed under SITE_DIR.
"""

from __future__ import annotations

import sys
from pathlib import Path

REL = Path("sglang/srt/configs/qwen3_asr.py")
EDITS = [
    ('AutoConfig.register("qwen3_asr", Qwen3ASRConfig)',
     'AutoConfig.register("qwen3_asr", Qwen3ASRConfig, exist_ok=True)'),
    ('AutoConfig.register("qwen3_asr_thinker", Qwen3ASRThinkerConfig)',
     'AutoConfig.register("qwen3_asr_thinker", Qwen3ASRThinkerConfig, exist_ok=True)'),
]  # fmt: skip


def patch(site: Path) -> str:
    """Patch site/REL in place; a one-line account of what was done. Raises SystemExit(1)."""
    path = site / REL
    if not path.is_file():
        return (
            f"sglang qwen3_asr patch: {path} not found (SGLang not installed here), nothing to do"
        )
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    done = 0
    for old, new in EDITS:
        hits = [i for i, line in enumerate(lines) if line.strip() == old]
        if hits:
            for i in hits:
                lines[i] = lines[i].replace(old, new)
            done += len(hits)
        elif not any(line.strip() == new for line in lines):
            here = Path(__file__).name
            raise SystemExit(
                f"sglang qwen3_asr patch: ERROR: {path}: neither {old!r} nor its patched form "
                f"found; SGLang changed, review tools/patches/{here}"
            )
    if not done:
        return f"sglang qwen3_asr patch: {path} already patched"
    path.write_text("".join(lines), encoding="utf-8")
    return (
        f"sglang qwen3_asr patch: {path}: added exist_ok=True to {done} AutoConfig.register call(s)"
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} SITE_DIR")
    print(patch(Path(sys.argv[1])))
