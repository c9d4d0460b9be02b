"""sgl-kernel's GEMMs: NVFP4 ``cutlass_scaled_fp4_mm`` and FP8 ``fp8_scaled_mm``.

sgl-kernel's 0.4 series moved ``cutlass_scaled_fp4_mm``/``scaled_fp4_quant`` out of
``sgl_kernel`` into SGLang's JIT kernels: the adapter looks where the installed versions keep
them and records why not when they are nowhere.
"""

from __future__ import annotations

from .base import Prepared, Unsupported

OPS = {
    "cutlass_scaled_fp4_mm": {"dtypes": ["nvfp4"], "impls": ["cutlass"], "grouped": False},
    "fp8_scaled_mm": {"dtypes": ["fp8_e4m3"], "impls": ["cutlass"], "grouped": False},
}


def _version() -> str | None:
    from importlib import metadata

    for dist in ("sglang-kernel", "sgl-kernel"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def environment(device: str) -> dict:
    version = _version()
    if device != "cuda":
        return {"library_version": version, "unsupported": "no CUDA device"}
    try:
        import sgl_kernel  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a missing or broken install is a result
        return {
            "library_version": version,
            "unsupported": f"sgl_kernel not importable: {type(exc).__name__}: {exc}",
        }
    return {"library_version": version, "unsupported": None}


def prepare(point: dict, device: str) -> Prepared:
    if device != "cuda":
        raise Unsupported("no CUDA device")
    raise Unsupported(f"sgl_kernel {point['op']} adapter not implemented yet")
