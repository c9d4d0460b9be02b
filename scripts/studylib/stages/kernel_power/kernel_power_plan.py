"""Config -> a backend's kernel-power plan (its points, loop lengths, sampling), and the
kernel-power config checks a JSON schema cannot express."""

from __future__ import annotations

from ...instruments.backends import catalogue
from ..sweep.sweep_plan import (
    attention_geometry,
    is_fused,
    moe_plan,
    resolve_shape,
    shape_kind_problems,
)


def kernel_power_plan(config: dict, backend: str) -> dict:
    """What ``backend``'s kernel-power job depends on: its points, loop lengths, sampling."""
    spec = config["kernel_power"]
    points = []
    fused_any = False
    for entry in spec["backends"].get(backend, []):
        shape = resolve_shape(entry["shape"], config["shapes"][entry["shape"]])
        fused = is_fused(backend, entry["op"])
        fused_any = fused_any or fused
        for routing in entry.get("routings", ["balanced"]) if fused else [None]:
            for m in entry["M"]:
                point = {"backend": backend, "impl": entry["impl"], "op": entry["op"],
                         "dtype": entry["dtype"], "shape": entry["shape"], "M": m,
                         "N": shape["N"], "K": shape["K"], "G": entry.get("G")}  # fmt: skip
                if fused:
                    point.update(top_k=config["moe"]["top_k"], routing=routing)
                point.update(attention_geometry(shape))
                if entry.get("modes"):
                    point["modes"] = list(entry["modes"])
                if entry.get("devices"):
                    point["devices"] = list(entry["devices"])
                points.append(point)
    extra = {"moe": moe_plan(config)} if fused_any else {}
    return {
        **extra,
        "backend": backend,
        "device": config["device"],
        "points": points,
        "modes": spec["modes"],
        "seconds": spec["seconds"],
        "idle_s": spec["idle_s"],
        "cooldown_s": spec["cooldown_s"],
        "sample_hz": spec["sample_hz"],
        "gpus": spec["gpus"],
        "timing": config["timing"],
        "check": config["check"],
    }


def check_kernel_power(config: dict) -> list[str]:
    problems = []
    ops = catalogue()
    spec = config.get("kernel_power", {})
    for backend, entries in spec.get("backends", {}).items():
        for i, entry in enumerate(entries):
            where = f"kernel_power.backends.{backend}[{i}]"
            known = ops[backend].get(entry["op"])
            if known is None:
                problems.append(f"{where}.op: {entry['op']!r} is not an op of {backend}")
                continue
            if entry["dtype"] not in known["dtypes"]:
                problems.append(f"{where}.dtype: {backend} {entry['op']} does not take "
                                f"{entry['dtype']!r}")  # fmt: skip
            if entry["impl"] not in known["impls"]:
                problems.append(f"{where}.impl: {entry['impl']!r} is not an implementation of "
                                f"{backend} {entry['op']}")  # fmt: skip
            if entry["shape"] not in config["shapes"]:
                problems.append(f"{where}.shape: no shape named {entry['shape']!r}")
            else:
                problems += shape_kind_problems(f"{where}.shape", backend, entry["op"],
                                                entry["shape"],
                                                config["shapes"][entry["shape"]])  # fmt: skip
            if known["grouped"] != ("G" in entry):
                problems.append(f"{where}.G: {'needed' if known['grouped'] else 'not allowed'} "
                                f"for {backend} {entry['op']}")  # fmt: skip
    return problems
