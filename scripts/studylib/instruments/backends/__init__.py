"""Backend adapters, one module per library, behind one interface (see ``backend_interface.py``).

Modules are imported lazily, and none imports torch or its library at import time, so the
Snakefile and the config checks can read the catalogue on a machine without them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# backend name -> module under studylib.backends
MODULES = {
    "torch": "torch_backend",
    "flashinfer": "flashinfer_backend",
    "sgl_kernel": "sgl_kernel_backend",
}


def adapter(backend: str) -> ModuleType:
    """The adapter module of ``backend``."""
    try:
        module = MODULES[backend]
    except KeyError:
        raise KeyError(f"unknown backend {backend!r}; known: {', '.join(MODULES)}") from None
    return importlib.import_module(f"{__name__}.{module}")


def catalogue() -> dict[str, dict[str, dict]]:
    """backend -> op -> {"dtypes": [...], "impls": [...], "grouped": bool}."""
    return {name: adapter(name).OPS for name in MODULES}
