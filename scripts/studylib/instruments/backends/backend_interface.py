"""The interface every backend adapter implements, and the pieces they share.

An adapter module defines:

``OPS``
    ``{op: {"dtypes": [...], "impls": [...], "grouped": bool}}``: what the adapter can
    express. The config is checked against it before any job runs.
``environment(device) -> dict``
    ``library_version`` and ``unsupported`` (``None`` or the reason every point of this
    backend is unsupported on this machine, e.g. the package is missing or no CUDA device).
``prepare(point, device) -> Prepared``
    Builds fresh random inputs for one point and returns the call to time. Raises
    :class:`Unsupported` with the library's own text when the library or the GPU says no.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any


class Unsupported(Exception):
    """The library, the arch or the machine cannot run this point (not a failure)."""


@dataclass
class Prepared:
    """One point, ready to run.

    ``run`` performs exactly the call under test (nothing else) and returns its output.
    ``reference`` computes the fp64 reference on the same, dequantised, inputs.
    ``flops`` and ``bytes`` are the work and the fewest bytes moved (scale factors included).
    ``variants`` builds ``n`` independent input sets and returns a run callable per set, for
    cold timing that rotates buffers larger than the L2 (``None``: not available).
    """

    run: Callable[[], Any]
    reference: Callable[[], Any]
    flops: float
    bytes: float
    variants: Callable[[int], list[Callable[[], Any]]] | None = None
    extra: dict = field(default_factory=dict)


def input_variants(make: Callable[[int], Any], call: Callable[..., Any]):
    """``Prepared.variants`` for an op whose input sets ``make(seed)`` builds (seeds 1, 2, ...:
    the prepared set is seed 0) and ``call(*set)`` runs."""

    def variants(count: int) -> list[Callable[[], Any]]:
        sets = [make(seed) for seed in range(1, count + 1)]
        return [lambda s=s: call(*s) for s in sets]

    return variants


def gemm_flops(m: int, n: int, k: int, groups: int = 1) -> float:
    return 2.0 * m * n * k * groups


def gemm_bytes(
    m: int, n: int, k: int, a_bits: float, w_bits: float, out_bits: float, groups: int = 1
) -> float:
    """Bytes of A, W and the output moved once each (per group for grouped GEMMs)."""
    return groups * (m * k * a_bits + k * n * w_bits + m * n * out_bits) / 8.0


def require_cuda(device: str) -> None:
    if device != "cuda":
        raise Unsupported("no CUDA device")


def cuda_capability() -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability()


def distribution_version(*names: str) -> str | None:
    """The installed version of the first of these distributions that is installed."""

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def gpu_library_environment(module: str, version: str | None, device: str) -> dict:
    """The environment of a CUDA-only library: unsupported without CUDA or when it won't import."""
    if device != "cuda":
        return {"library_version": version, "unsupported": "no CUDA device"}
    try:
        imported = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - a missing or broken install is a result
        return {
            "library_version": version,
            "unsupported": f"{module} not importable: {type(exc).__name__}: {exc}",
        }
    return {
        "library_version": version or getattr(imported, "__version__", None),
        "unsupported": None,
    }
