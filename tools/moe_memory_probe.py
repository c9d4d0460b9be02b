"""What keeps a fused-MoE sweep point's GPU memory after the point is dropped (a GPU box).

    PYTHONPATH=/tmp/site:scripts python3 tools/moe_memory_probe.py [--dtype fp8_e4m3]

Prepares one fused-MoE point (bf16, M = 1, the default's down shape, 256 experts) as the
sweep's worker does, runs it, drops it and collects garbage, then prints the GPU memory still
allocated, the Python stack that allocated each of the largest live blocks (PyTorch's memory
history), and for each live tensor over 1 GiB the chain of objects that refer to it. On an
H100 (2026-12-07) SGLang's Triton fused-MoE point kept all 30 GiB it prepared (the bf16
experts and their concatenated gate-up copy) after ``del`` and a collection: the sweep then
carried them from its first such point to its end (examples/h100-2026-12-07-order/NOTES.md).
"""

import argparse
import gc
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

GIB = 2**30
POINT = {"impl": "triton", "op": "fused_moe", "dtype": "bf16", "shape": "down", "M": 1,
         "N": 6144, "K": 2048, "G": 256, "top_k": 8, "routing": "balanced"}  # fmt: skip


def describe(obj) -> str:
    if isinstance(obj, types.FrameType):
        code = obj.f_code
        return f"frame {code.co_filename}:{obj.f_lineno} {code.co_name}"
    if isinstance(obj, types.FunctionType):
        return f"function {obj.__module__}.{obj.__qualname__}"
    if isinstance(obj, dict):
        return f"dict with keys {list(obj)[:6]}"
    if isinstance(obj, (list, tuple)):
        return f"{type(obj).__name__} of {len(obj)}"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def referrers(obj, ignore: set[int], depth: int = 1, limit: int = 8) -> None:
    """Print who refers to ``obj``, and who refers to them, up to ``limit`` levels."""
    if depth > limit or id(obj) in ignore:
        return
    ignore.add(id(obj))
    for ref in gc.get_referrers(obj):
        if id(ref) in ignore or isinstance(ref, types.FrameType) and ref.f_code.co_name in (
            "referrers", "main"):  # fmt: skip
            continue
        if isinstance(ref, dict) and "__builtins__" in ref and "__name__" in ref:
            print("  " * depth + f"a global of module {ref['__name__']}", flush=True)
            continue
        print("  " * depth + describe(ref), flush=True)
        referrers(ref, ignore, depth + 1, limit)


def allocated(torch, what: str) -> None:
    torch.cuda.synchronize()
    gc.collect()
    print(f"{what}: {torch.cuda.memory_allocated() / GIB:.2f} GiB allocated", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp8_e4m3"])
    parser.add_argument("--blocks", type=int, default=5, help="largest live blocks to show")
    args = parser.parse_args(argv)

    import torch
    from studylib.instruments.backends import adapter

    if not torch.cuda.is_available():
        print("moe_memory_probe: no CUDA device", file=sys.stderr)
        return 2
    backend = adapter("sgl_kernel")  # POINT's impl (triton) is SGLang's fused MoE
    point = dict(POINT, backend="sgl_kernel", dtype=args.dtype)
    torch.cuda.memory._record_memory_history(max_entries=200_000)
    allocated(torch, "before")
    prepared = backend.prepare(point, "cuda")
    allocated(torch, "prepared")
    prepared.run()
    allocated(torch, "run")
    del prepared
    allocated(torch, "point dropped, garbage collected")
    snapshot = torch.cuda.memory._snapshot()
    blocks = [b for s in snapshot["segments"] for b in s["blocks"]
              if b["state"] == "active_allocated"]  # fmt: skip
    for block in sorted(blocks, key=lambda b: -b["size"])[: args.blocks]:
        print(f"{block['size'] / GIB:.3f} GiB allocated at")
        for frame in block.get("frames", [])[:14]:
            if frame["filename"].endswith(".py"):
                print(f"    {frame['filename']}:{frame['line']} {frame['name']}")
    big = [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.is_cuda
           and o.numel() * o.element_size() > GIB]  # fmt: skip
    sizes = [(tuple(t.shape), round(t.numel() * t.element_size() / GIB, 2)) for t in big]
    print("live tensors over 1 GiB:", sizes)
    ignore = {id(big), id(sys._getframe())}
    for tensor in big[:3]:
        print(f"== who refers to the {tuple(tensor.shape)} tensor")
        referrers(tensor, ignore)
    return 0


if __name__ == "__main__":
    sys.exit(main())
