# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: FlashInfer's JIT modules built ahead of its GPU jobs ->
results/sweeps/flashinfer_jit.json (see studylib.instruments.backends.flashinfer_jit)."""

import os
import time

from studylib.core.io import write_json
from studylib.instruments.backends.flashinfer_jit import NICENESS, arch_list, build
from studylib.instruments.hardware import nvml_gpus
from studylib.snakemake_job import setup_logging

log = setup_logging(snakemake)  # noqa: F821
os.nice(NICENESS)  # and its nvcc children: the measuring jobs beside it come first
# The GPUs' architectures from NVML: no CUDA context, no wait for the hardware record.
_, gpus, _ = nvml_gpus()
capabilities = [gpu.get("compute_capability") for gpu in gpus]
started = time.monotonic()
rows = build(snakemake.params.targets, capabilities, snakemake.threads)  # noqa: F821
for row in rows:
    log.info("%s %s %s: %s %s in %.1f s %s", row["op"], row["impl"], row["dtype"],
             row["module"], row["status"], row["seconds"], row["error"])  # fmt: skip
write_json(
    snakemake.output[0],  # noqa: F821
    {"arch_list": arch_list(capabilities), "jobs": snakemake.threads,  # noqa: F821
     "seconds": round(time.monotonic() - started, 2), "modules": rows},
)  # fmt: skip
