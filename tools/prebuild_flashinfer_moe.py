"""Build FlashInfer's CUTLASS fused-MoE module once, before a sweep: on the GPU box, or on
any Linux host with nvcc for a GPU box that cannot afford the build.

    python3 tools/prebuild_flashinfer_moe.py [--jobs 8]
    python3 tools/prebuild_flashinfer_moe.py --cross --out .gpu-bundle/aot \\
        [--dtypes bf16,fp8] [--jobs 2] [--workdir DIR]

flashinfer-python builds ``fused_moe_<arch>`` from TensorRT-LLM's CUTLASS sources on its first
call; that takes longer than a sweep point's timeout (on an H200 it had not finished after 11
minutes with 8 jobs beside a sweep), so the sweep records those points as timed out.

On the GPU box (default), the module lands in FlashInfer's JIT cache (~/.cache/flashinfer) and
every later call loads it. What that costs (flashinfer-python 0.7.2.post1, sm_90): 248 compile
units plus a link, 220 of them generated files holding ~1,680 CUTLASS kernel instantiations;
measured on a 2-core AMD EPYC (2026-12-01) at 60-720 s of one core per unit, about 14
core-hours in all: roughly an hour on 16 cores, minutes on a 128-core host.

``--cross`` builds the sm_90 module where no GPU is (CUDA_HOME: nvcc 13.0 with the cuBLAS,
cuRAND and NVRTC headers and ``libnvrtc.so``; the flashinfer-python the GPU box runs, and
apache-tvm-ffi, importable) and writes ``fused_moe_90.so`` into ``--out``.
tools/install_gpu_bundle.sh installs a bundle's ``aot/*.so`` where FlashInfer loads a module
without building it (``flashinfer/data/aot/<name>/<name>.so``). ``--dtypes`` keeps only the
grouped-GEMM kernels of those activation types (bf16: bf16 in and out; fp8: e4m3 in, bf16
out, FlashInfer's FP8 MoE with bf16 output) and their dispatch units: every tile, cluster
shape, epilogue and swap of those types is built, so the library picks among all it would
have, but a call in another type (fp16 or fp32 activations, int4/int8 weights, FP4) finds
no kernel (the missing symbol is reported when that call is made; the study makes none on
sm_90).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

#: --dtypes name: the (activation = weight type, output type) pairs of the grouped GEMMs kept.
#: FP8's dispatch unit takes the address of every fp16-output launcher too: without them the
#: module does not load (the undefined symbols are data relocations, bound at load).
DTYPES = {"bf16": [("bf16", "bf16")], "fp8": [("e4m3", "bf16"), ("e4m3", "f16")]}
#: The dispatch unit per kept type (moe_gemm_kernels_<name>.cu); the others are left out.
DISPATCH_UNITS = {"bf16": "bf16_bf16", "fp8": "fp8_fp8"}
#: Headers and libraries the sources need beyond nvcc's own.
NEEDED = ["include/cublasLt.h", "include/curand_kernel.h", "include/nvrtc.h", "lib64/libnvrtc.so"]


def _on_gpu(jobs: int) -> int:
    os.environ["MAX_JOBS"] = str(jobs)
    try:
        import torch
        from flashinfer.fused_moe.core import get_cutlass_fused_moe_module
    except ImportError as exc:
        print(f"prebuild_flashinfer_moe: {exc}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("prebuild_flashinfer_moe: no CUDA device (build elsewhere with --cross)",
              file=sys.stderr)  # fmt: skip
        return 2
    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}"
    started = time.monotonic()
    get_cutlass_fused_moe_module(arch)
    print(f"fused_moe_{arch} ready in {time.monotonic() - started:.0f} s")
    return 0


def cross_spec(dtypes: list[str]):
    """FlashInfer's own JitSpec of the sm_90 module, narrowed to ``dtypes``."""
    from flashinfer.jit import fused_moe
    from flashinfer.jit.gemm.cutlass import generate_kernels as gk

    pairs = [(getattr(gk.DataType, a), getattr(gk.DataType, o))
             for d in dtypes for a, o in DTYPES[d]]  # fmt: skip
    full = gk.generate_sm90_operations

    def kept(enabled) -> list:
        ops = [
            op
            for op in full(enabled)
            if op.gemm_kind == gk.GemmKind.Grouped
            and op.act_type == op.weight_type
            and (op.act_type, op.output_type) in pairs
        ]
        # In the order of ``pairs`` (stable): FlashInfer writes 8 kernels per file in list
        # order, so a type added later lands in new files and a resumed build keeps the rest.
        return sorted(ops, key=lambda op: pairs.index((op.act_type, op.output_type)))

    gk.generate_sm90_operations = kept
    try:
        spec = fused_moe.gen_cutlass_fused_moe_sm90_module()
    finally:
        gk.generate_sm90_operations = full
    units = {f"moe_gemm_kernels_{DISPATCH_UNITS[d]}.cu" for d in dtypes}
    spec.sources = [s for s in spec.sources
                    if not s.name.startswith("moe_gemm_kernels_") or s.name in units]  # fmt: skip
    return spec


def _cross(args) -> int:
    cuda = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")
    missing = [n for n in NEEDED if not (cuda / n).exists()]
    if not (cuda / "bin" / "nvcc").exists():
        missing.insert(0, "bin/nvcc")
    if missing:
        print(f"prebuild_flashinfer_moe: CUDA_HOME={cuda} lacks {', '.join(missing)} (the "
              "cuBLAS, cuRAND and NVRTC wheels of CUDA 13 hold the headers and libnvrtc)",
              file=sys.stderr)  # fmt: skip
        return 2
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown or not dtypes:
        print(f"prebuild_flashinfer_moe: --dtypes takes {', '.join(DTYPES)}; got {args.dtypes!r}",
              file=sys.stderr)  # fmt: skip
        return 2
    workdir = Path(args.workdir).resolve()
    os.environ.update(CUDA_HOME=str(cuda), FLASHINFER_CUDA_ARCH_LIST="9.0a",
                      FLASHINFER_WORKSPACE_BASE=str(workdir))  # fmt: skip
    try:
        spec = cross_spec(dtypes)
    except ImportError as exc:
        print(f"prebuild_flashinfer_moe: {exc}", file=sys.stderr)
        return 2
    spec.write_ninja()
    generated = sum(1 for s in spec.sources if s.name.endswith(".generated.cu"))
    print(f"{spec.name}: {len(spec.sources)} units ({generated} generated) for "
          f"{', '.join(dtypes)} in {spec.build_dir}", flush=True)  # fmt: skip
    started = time.monotonic()
    ninja = shutil.which("ninja") or "ninja"
    done = subprocess.run([ninja, "-C", str(spec.build_dir), f"-j{args.jobs}"], check=False)
    if done.returncode != 0:
        print(f"prebuild_flashinfer_moe: ninja failed ({done.returncode}); rerun to resume",
              file=sys.stderr)  # fmt: skip
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{spec.name}.so"
    shutil.copy2(spec.jit_library_path, target)
    size = target.stat().st_size / 2**20
    print(f"{target} ({size:.0f} MiB) built in {time.monotonic() - started:.0f} s")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="parallel compiles")
    parser.add_argument("--cross", action="store_true", help="build sm_90 here, for a GPU box")
    parser.add_argument("--out", default=".gpu-bundle/aot", help="--cross: where the .so goes")
    parser.add_argument("--dtypes", default="bf16,fp8", help="--cross: activation types kept")
    parser.add_argument("--workdir", default=".flashinfer-build",
                        help="--cross: build folder (kept: a rerun resumes)")  # fmt: skip
    args = parser.parse_args()
    return _cross(args) if args.cross else _on_gpu(args.jobs)


if __name__ == "__main__":
    sys.exit(main())
