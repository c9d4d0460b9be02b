"""Config -> per-backend sweep plans, and the config checks a JSON schema cannot express.

A plan holds exactly what one backend's sweep depends on (its cases with their shapes
resolved, its M grids, timing and checking settings), so Snakemake's params trigger reruns a
backend's sweep when, and only when, something that backend uses changes.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

from .backends import catalogue

SCHEMA = Path(__file__).resolve().parents[2] / "config" / "schema.yaml"


def load_config(path: str | Path) -> dict:
    """A config file as Snakemake sees it: the schema's defaults filled in (outside a
    workflow: the tools and the tests). Without snakemake installed, as written."""
    import yaml

    config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    try:
        from snakemake.utils import validate
    except ImportError:
        print("snakemake missing: config used as written, without schema defaults")
        return config
    validate(config, str(SCHEMA), set_default=True)
    return config


def enabled_backends(config: dict) -> list[str]:
    return [name for name, spec in config["backends"].items() if spec.get("enabled", True)]


def check_config(config: dict) -> list[str]:
    """Every problem found, each naming the key at fault."""
    problems = []
    ops = catalogue()
    shapes = config.get("shapes", {})
    if not enabled_backends(config):
        problems.append("backends: every backend is disabled; enable at least one")
    for backend, spec in config["backends"].items():
        for i, case in enumerate(spec["cases"]):
            where = f"backends.{backend}.cases[{i}]"
            op = case["op"]
            if op not in ops[backend]:
                problems.append(
                    f"{where}.op: {op!r} is not an op of {backend}; "
                    f"known: {', '.join(sorted(ops[backend]))}"
                )
                continue
            known = ops[backend][op]
            for dtype in case["dtypes"]:
                if dtype not in known["dtypes"]:
                    problems.append(
                        f"{where}.dtypes: {backend} {op} does not take {dtype!r}; "
                        f"known: {', '.join(known['dtypes'])}"
                    )
            for impl in case.get("impls", []):
                if impl not in known["impls"]:
                    problems.append(
                        f"{where}.impls: {impl!r} is not an implementation of {backend} {op}; "
                        f"known: {', '.join(known['impls'])}"
                    )
            for shape in case["shapes"]:
                if shape not in shapes:
                    problems.append(
                        f"{where}.shapes: no shape named {shape!r} under shapes: "
                        f"(defined: {', '.join(sorted(shapes))})"
                    )
            if case.get("groups") and not known["grouped"]:
                problems.append(f"{where}.groups: {backend} {op} is not a grouped GEMM")
            if known["grouped"] and not case.get("groups"):
                problems.append(f"{where}.groups: {backend} {op} is grouped and needs groups")
    return problems + check_kernel_power(config)


def sweep_plan(config: dict, backend: str) -> dict:
    """The slice of ``config`` that ``backend``'s sweep depends on, fully resolved."""
    spec = config["backends"][backend]
    cases = []
    for case in spec["cases"]:
        case = copy.deepcopy(case)
        case["shapes"] = [
            {"name": name, "N": config["shapes"][name]["N"], "K": config["shapes"][name]["K"]}
            for name in case["shapes"]
        ]
        case.setdefault("m", config["m_grid"])
        cases.append(case)
    return {
        "backend": backend,
        "device": config["device"],
        "cases": cases,
        "timing": config["timing"],
        "check": config["check"],
    }


def expand_points(plan: dict, device: str) -> list[dict]:
    """Every (impl, op, dtype, shape, G, M) point of ``plan`` that applies to ``device``."""
    ops = catalogue()[plan["backend"]]
    points = []
    for case in plan["cases"]:
        if device not in case.get("devices", ["cuda", "cpu"]):
            continue
        impls = case.get("impls") or ops[case["op"]]["impls"]
        for shape in case["shapes"]:
            for dtype in case["dtypes"]:
                for impl in impls:
                    for groups in case.get("groups") or [None]:
                        for m in case["m"][device]:
                            points.append(
                                {
                                    "backend": plan["backend"],
                                    "impl": impl,
                                    "op": case["op"],
                                    "dtype": dtype,
                                    "shape": shape["name"],
                                    "M": m,
                                    "N": shape["N"],
                                    "K": shape["K"],
                                    "G": groups,
                                }
                            )
    return points


def stable_hash(data) -> str:
    """A short hash of JSON-able ``data``, independent of key order."""
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def schema_problem(config: dict, schema_path: str) -> str:
    """One line naming the most relevant schema violation of ``config`` (for users)."""
    import jsonschema
    import yaml

    with open(schema_path, encoding="utf-8") as f:
        schema = yaml.safe_load(f)
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is None:
        return "the config does not match config/schema.yaml"
    where = ".".join(
        f"[{p}]" if isinstance(p, int) else str(p) for p in error.absolute_path
    ).replace(".[", "[")
    if error.validator == "additionalProperties":
        return f"config{'.' + where if where else ''}: {error.message}"
    return f"config key {where or '(top level)'}: {error.message}"


def kernel_power_plan(config: dict, backend: str) -> dict:
    """What ``backend``'s kernel-power job depends on: its points, loop lengths, sampling."""
    spec = config["kernel_power"]
    points = []
    for entry in spec["backends"].get(backend, []):
        shape = config["shapes"][entry["shape"]]
        for m in entry["M"]:
            points.append(
                {"backend": backend, "impl": entry["impl"], "op": entry["op"],
                 "dtype": entry["dtype"], "shape": entry["shape"], "M": m,
                 "N": shape["N"], "K": shape["K"], "G": entry.get("G")}
            )  # fmt: skip
    return {
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
            if known["grouped"] != ("G" in entry):
                problems.append(f"{where}.G: {'needed' if known['grouped'] else 'not allowed'} "
                                f"for {backend} {entry['op']}")  # fmt: skip
    return problems


def study_device(config: dict) -> str:
    """The device the workflow plans for: ``device`` unless auto, else cuda when NVML sees a
    GPU that CUDA_VISIBLE_DEVICES leaves visible (no torch import: the Snakefile calls this
    on every run). Jobs still check CUDA themselves before they use it."""
    if config.get("device", "auto") != "auto":
        return config["device"]
    import os

    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return "cpu"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return "cuda" if pynvml.nvmlDeviceGetCount() > 0 else "cpu"
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver, no library: a machine without a GPU
        return "cpu"


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
