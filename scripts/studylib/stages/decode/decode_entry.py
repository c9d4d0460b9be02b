"""What the decode rules' entry scripts call: pick the device, build or find the model."""

from __future__ import annotations

import json
from pathlib import Path

from ...instruments.device import resolve_device
from ...instruments.serving.served_model import build_moe_model, write_served_model
from .decode_plan import resolve_for_device
from .decode_run import run_decode


def job_device(preference: str) -> str:
    """The device of a decode job (``resolve_device``'s rule); ``device: cuda`` on a machine
    without CUDA stops the job with that reason instead of serving on the CPU."""
    device, unusable = resolve_device(preference)
    if unusable:
        raise RuntimeError(unusable)
    return device


def build_model_for_machine(geometry: dict, preference: str, out_dir) -> dict:
    """The seed geometry on a GPU (bf16), the small one on a CPU (fp32)."""
    device = job_device(preference)
    dtype = "bfloat16" if device == "cuda" else "float32"
    return build_moe_model(out_dir, geometry[device], seed=0, dtype=dtype, device=device)


def write_served_model_for_machine(geometry: dict, weights: str, device: str, out_dir) -> dict:
    """The config-only model a dummy-weight variant serves, in the planned device's geometry."""
    return write_served_model(out_dir, geometry[device], weights)


def run_decode_job(plan: dict, model_dir: str | None, out_dir, hold_device) -> None:
    """``hold_device``: waits for the job's devices (gpu_slots) and returns its slot, the
    offset that keeps the servers of decode jobs running side by side apart; called once the
    server has started where it starts ahead (decode.prestart), else first."""
    device = job_device(plan["device"])
    resolved = resolve_for_device(plan, device)
    resolved["args"] = list(resolved.get("args") or [])
    kind = resolved["model_kind"] = resolved["model"]
    facts = None
    if kind in ("local", "dummy"):
        if model_dir is None:
            raise ValueError(f"variant {plan['variant']}: model {kind!r} needs the built model")
        facts = json.loads((Path(model_dir) / "study_model.json").read_text())
        resolved["model"] = str(Path(model_dir).resolve())
    # Prompt token ids are drawn below the served vocabulary (a variant may name its own).
    resolved["vocab_size"] = resolved.get("vocab_size") or (facts or {}).get("vocab_size", 32000)
    run_decode(resolved, out_dir, model_facts=facts if kind == "dummy" else None, rule_plan=plan,
               hold_device=hold_device)  # fmt: skip
