"""Build FlashInfer's CUTLASS fused-MoE module for this GPU once, before a sweep.

    python3 tools/prebuild_flashinfer_moe.py [--jobs 8]

flashinfer-python builds ``fused_moe_<arch>`` from TensorRT-LLM's CUTLASS sources on its first
call; that takes longer than a sweep point's timeout (on an H200 it had not finished after 11
minutes with 8 jobs beside a sweep), so the sweep records those points as timed out. Built
here once, the module lands in FlashInfer's JIT cache (~/.cache/flashinfer) and every later
call loads it. Prints the arch and how long the build took.

What it costs (flashinfer-python 0.7.2.post1, sm_90): 248 compile units plus a link, 220 of
them generated files holding ~1,680 CUTLASS kernel instantiations; measured on a 2-core AMD
EPYC (2026-12-01) at 60-720 s of one core per unit, about 14 core-hours in all: roughly an
hour on 16 cores, minutes on a 128-core host. A module built elsewhere (same flashinfer,
CUDA 13.0 nvcc, sm_90a) is loaded without any build from
``<site-packages>/flashinfer/data/aot/fused_moe_90/fused_moe_90.so``; copied into the JIT
cache instead, ninja rebuilds it from its missing objects.
"""

import argparse
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="parallel compiles")
    args = parser.parse_args()
    os.environ["MAX_JOBS"] = str(args.jobs)
    try:
        import torch
        from flashinfer.fused_moe.core import get_cutlass_fused_moe_module
    except ImportError as exc:
        print(f"prebuild_flashinfer_moe: {exc}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("prebuild_flashinfer_moe: no CUDA device", file=sys.stderr)
        return 2
    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}"
    started = time.monotonic()
    get_cutlass_fused_moe_module(arch)
    print(f"fused_moe_{arch} ready in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
