"""FlashInfer's GEMMs: NVFP4 ``mm_fp4`` and FP8 ``bmm_fp8``, each with every backend it has.

FP4 tensor-core GEMMs need Blackwell (sm_100/sm_120); on Hopper ``mm_fp4`` raises
``BackendSupportedError`` and those points are ``unsupported`` rows with that text.
"""

from __future__ import annotations

from .base import Prepared, Unsupported, gemm_bytes, gemm_flops

OPS = {
    "mm_fp4": {"dtypes": ["nvfp4"], "impls": ["cutlass", "cudnn", "trtllm", "auto"], "grouped": False},
    "bmm_fp8": {"dtypes": ["fp8_e4m3"], "impls": ["cublas", "cudnn", "cutlass"], "grouped": False},
}


def environment(device: str) -> dict:
    from importlib import metadata

    try:
        version = metadata.version("flashinfer-python")
    except metadata.PackageNotFoundError:
        version = None
    if device != "cuda":
        return {"library_version": version, "unsupported": "no CUDA device"}
    try:
        import flashinfer  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a missing or broken install is a result
        return {
            "library_version": version,
            "unsupported": f"flashinfer not importable: {type(exc).__name__}: {exc}",
        }
    return {"library_version": version or getattr(flashinfer, "__version__", None), "unsupported": None}


def is_unsupported_error(exc: BaseException) -> bool:
    """FlashInfer's own 'this backend/arch cannot do it' errors."""
    name = type(exc).__name__
    text = str(exc).lower()
    return name in ("BackendSupportedError", "NotImplementedError") or "not supported" in text


def prepare(point: dict, device: str) -> Prepared:
    if device != "cuda":
        raise Unsupported("no CUDA device")
    op = point["op"]
    if op == "mm_fp4":
        return _mm_fp4(point)
    if op == "bmm_fp8":
        return _bmm_fp8(point)
    raise Unsupported(f"flashinfer adapter has no op {op!r}")


def _mm_fp4(point: dict) -> Prepared:
    raise Unsupported("mm_fp4 adapter not implemented yet")


def _bmm_fp8(point: dict) -> Prepared:
    raise Unsupported("bmm_fp8 adapter not implemented yet")


__all__ = ["OPS", "environment", "prepare", "is_unsupported_error", "gemm_bytes", "gemm_flops"]
