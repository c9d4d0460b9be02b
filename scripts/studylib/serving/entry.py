"""What the decode rules' entry scripts call: pick the device, build or find the model."""

from __future__ import annotations

import json
from pathlib import Path

from ..plan import resolve_for_device
from .decode import run_decode
from .model import build_moe_model


def job_device(preference: str) -> str:
    import torch

    if preference == "cpu":
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def build_model_for_machine(geometry: dict, preference: str, out_dir) -> dict:
    """The seed geometry on a GPU (bf16), the small one on a CPU (fp32)."""
    device = job_device(preference)
    dtype = "bfloat16" if device == "cuda" else "float32"
    return build_moe_model(out_dir, geometry[device], seed=0, dtype=dtype, device=device)


def run_decode_job(plan: dict, model_dir: str | None, out_dir, port_offset: int = 0) -> None:
    """``port_offset`` keeps the servers of decode jobs running side by side apart."""
    device = job_device(plan["device"])
    resolved = resolve_for_device(plan, device)
    resolved["port"] = int(resolved["port"]) + port_offset
    resolved["args"] = list(resolved.get("args") or [])
    if resolved["model"] == "local":
        if model_dir is None:
            raise ValueError(f"variant {plan['variant']}: model 'local' needs the built model")
        facts = json.loads((Path(model_dir) / "study_model.json").read_text())
        resolved["model"] = str(Path(model_dir).resolve())
        resolved.setdefault("vocab_size", facts["vocab_size"])
    resolved.setdefault("vocab_size", 32000)
    run_decode(resolved, out_dir)
