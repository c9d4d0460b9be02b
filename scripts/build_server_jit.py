# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: the JIT modules an SGLang server of these weights builds at its start,
built ahead on the CPU -> results/decode/server_jit/{weights}.json (see
studylib.instruments.serving.sglang_jit)."""

import fcntl
import json
import os
import time
from pathlib import Path

from studylib.core.io import write_json
from studylib.instruments.backends import flashinfer_jit
from studylib.instruments.hardware import nvml_gpus
from studylib.instruments.serving import sglang_jit
from studylib.snakemake_job import setup_logging

log = setup_logging(snakemake)  # noqa: F821
os.nice(flashinfer_jit.NICENESS)  # and its nvcc children: the measuring jobs beside it come first
model_config = json.loads((Path(snakemake.input.model) / "config.json").read_text())  # noqa: F821
try:
    wanted = sglang_jit.targets(model_config)
except (KeyError, TypeError, ValueError) as exc:  # a model it cannot read: the start builds all
    log.warning("no modules built ahead: the served model's config.json lacks %s", exc)
    wanted = {"flashinfer": [], "sglang": []}
# The GPUs' architectures from NVML: no CUDA context, no wait for the hardware record.
_, gpus, _ = nvml_gpus()
capabilities = [gpu.get("compute_capability") for gpu in gpus]
asked = time.monotonic()
# One weights' job at a time builds (the other's modules are mostly the same): SGLang's
# tvm-ffi builds take no lock of their own. The wait for the other is stated apart: on the
# H200 (examples/h200-2026-12-05-full-length) the second job waited 111 s, then found all built.
with open(Path(snakemake.output[0]).parent / ".build.lock", "a") as lock:  # noqa: F821
    fcntl.flock(lock, fcntl.LOCK_EX)
    started = time.monotonic()
    if started - asked >= 1:
        log.info("waited %.0f s for the other weights' build", started - asked)
    flashinfer_rows = flashinfer_jit.build(wanted["flashinfer"], capabilities,
                                           snakemake.threads)  # noqa: F821  # fmt: skip
    sglang_rows = sglang_jit.build(wanted["sglang"], capabilities)
for row in flashinfer_rows:
    log.info("flashinfer %s: %s %s in %.1f s %s", row["op"], row["module"], row["status"],
             row["seconds"], row["error"])  # fmt: skip
for row in sglang_rows:
    log.info("sglang %s %s (%s): %s %s in %.1f s %s", row["kernel"], row["arguments"],
             row["arch"], row["module"], row["status"], row["seconds"], row["error"])  # fmt: skip
write_json(
    snakemake.output[0],  # noqa: F821
    {"arch_list": flashinfer_jit.arch_list(capabilities),
     "seconds": round(time.monotonic() - started, 2), "waited_s": round(started - asked, 2),
     "flashinfer": flashinfer_rows, "sglang": sglang_rows},
)  # fmt: skip
