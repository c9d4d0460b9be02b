"""Every config check of the study, in one call: each stage's checks (the sweep's, the
kernel-power's, the MoE routing's, the decode's) and those across stages (core.config)."""

from __future__ import annotations

from .core.config import check_contradictions
from .stages.decode.decode_plan import check_decode
from .stages.kernel_power.kernel_power_plan import check_kernel_power
from .stages.sweep.sweep_plan import check_moe, check_sweep_config


def check_config(config: dict) -> list[str]:
    """Every problem found, each naming the key at fault."""
    return (check_sweep_config(config) + check_kernel_power(config)
            + check_contradictions(config) + check_moe(config) + check_decode(config))  # fmt: skip
