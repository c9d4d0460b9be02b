"""Which device a job measures on, decided one way for every job (sweep, kernel power,
decode): the config's ``device`` against what this machine has."""

from __future__ import annotations

import platform


def resolve_device(preference: str) -> tuple[str, str | None]:
    """(device, reason it is unusable or None)."""
    import torch

    if preference == "cpu":
        return "cpu", None
    if torch.cuda.is_available():
        return "cuda", None
    if preference == "cuda":
        return "cuda", "no CUDA device (device: cuda was requested)"
    return "cpu", None


def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        try:
            return torch.cuda.get_device_name()
        except Exception:  # noqa: BLE001 - the name is informative only
            return "cuda (unavailable)"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"
