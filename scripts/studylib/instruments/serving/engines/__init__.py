"""One module per inference engine behind one interface (see ``base.py``)."""

from __future__ import annotations

import importlib

MODULES = {
    "sglang": "sglang_engine",
    "vllm": "vllm_engine",
    "transformers": "transformers_engine",
}


def engine(name: str):
    try:
        module = MODULES[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; known: {', '.join(MODULES)}") from None
    return importlib.import_module(f"{__name__}.{module}").ENGINE
