import sys
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import validate

# The study's library lives under scripts/ beside the entry scripts.
sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))

from studylib.plan import (  # noqa: E402
    ConfigFileError,
    apply_cli_values,
    check_config,
    config_warnings,
    decode_plan,
    decode_variants,
    empty_overrides,
    enabled_backends,
    schema_problem,
    kernel_power_plan,
    read_config_file,
    served_models,
    stable_hash,
    study_device,
    sweep_plan,
)

SCHEMA = str(Path(workflow.basedir) / "config" / "schema.yaml")

# --config values nested in a mapping arrive as strings: type them as a config file would.
apply_cli_values(config, workflow.config_settings.config or {})
# An override's `{}` removes nothing from the merged config: say so rather than ignore it.
try:
    _overrides = [
        (str(path), read_config_file(path))
        for path in workflow.config_settings.configfiles or []
    ]
except ConfigFileError as exc:
    raise WorkflowError(str(exc)) from None
_overrides.append(("--config", workflow.config_settings.config or {}))
_problems = [
    f"{source}: {problem}"
    for source, override in _overrides
    for problem in empty_overrides(override, config)
]
if _problems:
    raise WorkflowError("invalid config: " + "; ".join(_problems))
# One clear message naming the bad key, before any job runs.
try:
    validate(config, SCHEMA, set_default=True)
except WorkflowError:
    raise WorkflowError(f"invalid config: {schema_problem(config, SCHEMA)}") from None
_problems = check_config(config)
if _problems:
    raise WorkflowError("invalid config: " + "; ".join(_problems))
for _warning in config_warnings(config):
    logger.warning(f"config warning: {_warning}")

BACKENDS = enabled_backends(config)
# The device the DAG is planned for (auto: a GPU that NVML sees): it picks the decode
# variants (SGLang on GPUs, transformers on CPUs by default).
STUDY_DEVICE = study_device(config)
DECODE_VARIANTS = decode_variants(config, STUDY_DEVICE)
SERVED_MODELS = served_models(config, STUDY_DEVICE)
# Backends with kernel-power points (and enabled).
POWER_BACKENDS = [b for b in BACKENDS if config["kernel_power"]["backends"].get(b)]
CONFIG_HASH = stable_hash(config)
CONFIG_TEXT = yaml.safe_dump(config, sort_keys=False)
REPORT_TEMPLATES = sorted(
    str(path) for path in (Path(workflow.basedir) / "report" / "templates").glob("*")
)


wildcard_constraints:
    backend="|".join(BACKENDS),
    variant="|".join(DECODE_VARIANTS) or "no-variant",
    weights="bf16|fp8",


def backend_plan(wildcards):
    """Only this backend's slice of the config: its change reruns this backend alone."""
    return sweep_plan(config, wildcards.backend)


def backend_power_plan(wildcards):
    return kernel_power_plan(config, wildcards.backend)


def variant_decode_plan(wildcards):
    return decode_plan(config, wildcards.variant)


def decode_inputs(wildcards):
    """The model the study builds for the variant: the local model with weights (transformers
    engine) or the config-only model of the variant's weight type (dummy weights)."""
    variant = config["decode"]["variants"][wildcards.variant]
    if variant["model"] == "local":
        return {"model": "results/decode/model"}
    if variant["model"] == "dummy":
        return {"model": f"results/decode/served_model/{variant['weights']}"}
    return {}
