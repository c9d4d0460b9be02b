"""Config -> the decode stage's plans: the variants that serve on this device, one variant's
plan, the config-only models they serve, and a plan's per-device values picked."""

from __future__ import annotations

from ...core.config import study_device


def decode_variants(config: dict, device: str | None = None) -> list[str]:
    """Enabled variants that serve on ``device`` (a variant's ``devices``: where it runs;
    SGLang's on GPUs, the transformers engine's on CPUs by default)."""
    device = device or study_device(config)
    variants = config.get("decode", {}).get("variants", {})
    return [
        name
        for name, spec in variants.items()
        if spec.get("enabled", True) and device in spec.get("devices", ["cuda", "cpu"])
    ]


def decode_plan(config: dict, variant: str) -> dict:
    """What one decode variant's job depends on (per-device values resolved at run time)."""
    settings = {k: v for k, v in config["decode"].items() if k not in ("variants", "model")}
    return {"variant": variant, "device": config["device"], **settings,
            **config["decode"]["variants"][variant]}  # fmt: skip


def served_models(config: dict, device: str | None = None) -> list[str]:
    """Weight types of the config-only models the enabled variants serve (model: dummy)."""
    variants = config["decode"]["variants"]
    return sorted({variants[v].get("weights", "bf16") for v in decode_variants(config, device)
                   if variants[v]["model"] == "dummy"})  # fmt: skip


def resolve_for_device(plan: dict, device: str) -> dict:
    """Pick the ``{cuda: .., cpu: ..}`` entries of a plan for ``device``."""

    def pick(value):
        # A per-device entry may name one device only (e.g. args for cuda): absent = None.
        if isinstance(value, dict) and value and set(value) <= {"cuda", "cpu"}:
            return value.get(device)
        return value

    return {key: pick(value) for key, value in plan.items()}
