"""The study's config: reading a config file, its schema (defaults, keys, messages), values
given on the command line, the checks across stages a JSON schema cannot express, and the
device the workflow plans for. Each stage's plan and checks live in its stage
(``stages/<stage>/<stage>_plan.py``); ``study_config.check_config`` runs them all.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import yaml

# The tools may run where snakemake (and jsonschema, which it brings) is not installed: they
# read a config as written, and only the workflow's schema messages need jsonschema.
try:
    import jsonschema
except ImportError:
    jsonschema = None
try:
    from snakemake.utils import validate
except ImportError:
    validate = None


SCHEMA = Path(__file__).resolve().parents[3] / "config" / "schema.yaml"


class ConfigFileError(ValueError):
    """A config file that cannot be read as a mapping of keys: one line naming the file."""


def config_keys(schema_path: str | Path) -> set[str]:
    """The config's top-level keys, as config/schema.yaml declares them."""
    return set(yaml.safe_load(Path(schema_path).read_text(encoding="utf-8"))["properties"])


def read_config_file(path: str | Path, known_keys=None) -> dict:
    """The mapping in a config file, or ConfigFileError naming the file (and the line of a
    YAML syntax error). With ``known_keys`` (the config's top-level keys), a mapping whose
    keys are mostly others (3 or more) is refused too: a target written after --configfile
    that exists (e.g. results/hardware.json) is read as a config file."""
    path = Path(path)
    if not path.is_file():
        why = (
            "is a directory (a target written after --configfile?)"
            if path.is_dir()
            else ("not found (a target written after --configfile is read as a config file)")
        )
        raise ConfigFileError(f"config file {path}: {why}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigFileError(
            f"config file {path}{line}: YAML syntax error: {exc.problem or exc.context}"
        ) from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"config file {path}: not YAML: {exc}") from None
    if data is None:
        raise ConfigFileError(f"config file {path}: empty; a config file is a mapping of keys")
    if not isinstance(data, dict):
        raise ConfigFileError(
            f"config file {path}: holds a {type(data).__name__}, not a "
            "mapping of keys (key: value at the top level)"
        )
    unknown = sorted(map(str, set(data) - set(known_keys or data)))
    if len(unknown) >= 3 and len(unknown) > len(data) / 2:
        raise ConfigFileError(
            f"config file {path}: most of its keys ({', '.join(unknown[:4])}, ...) are not "
            "config keys: a target "
            "written after --configfile? Snakemake reads every word after it as a config "
            "file: write targets first (snakemake TARGET --configfile FILE)"
        )
    return data


def load_config(path: str | Path) -> dict:
    """A config file as Snakemake sees it: the schema's defaults filled in (outside a
    workflow: the tools and the tests). Without snakemake installed, as written."""
    config = read_config_file(path)
    if validate is None:
        print("snakemake missing: config used as written, without schema defaults")
        return config
    validate(config, str(SCHEMA), set_default=True)
    return config


def enabled_backends(config: dict) -> list[str]:
    return [name for name, spec in config["backends"].items() if spec.get("enabled", True)]


#: Samples a time's spread needs (its quartiles: timing.summarize).
MIN_SPREAD_SAMPLES = 4


def check_contradictions(config: dict) -> list[str]:
    """Settings the schema accepts one by one but that contradict each other (or cannot
    mean anything): one line each, naming the keys."""
    problems = []
    timing = config.get("timing", {})
    if timing.get("min_samples", 0) > timing.get("max_samples", float("inf")):
        problems.append(
            f"timing.min_samples ({timing['min_samples']}) exceeds "
            f"timing.max_samples ({timing['max_samples']})"
        )
    for device, most in timing.get("max_time_s", {}).items():
        if timing.get("min_time_s", 0) > most:
            problems.append(
                f"timing.min_time_s ({timing['min_time_s']}) exceeds "
                f"timing.max_time_s.{device} ({most})"
            )
    if timing.get("max_samples", MIN_SPREAD_SAMPLES) < MIN_SPREAD_SAMPLES:
        problems.append(
            f"timing.max_samples ({timing['max_samples']}): quartiles need "
            f"{MIN_SPREAD_SAMPLES} samples; with fewer every time has a spread of 0 and "
            "every difference would count as beyond the noise"
        )
    if timing.get("point_timeout_s", float("inf")) <= timing.get("min_time_s", 0):
        problems.append(
            f"timing.point_timeout_s ({timing['point_timeout_s']}) is not above "
            f"timing.min_time_s ({timing['min_time_s']}): each mode of a point samples at "
            "least min_time_s, so every point would be stopped as a hang"
        )
    for dtype, value in config.get("check", {}).get("cos_sim_min", {}).items():
        if value > 1:
            problems.append(
                f"check.cos_sim_min.{dtype}: {value} is above 1, the largest "
                "cosine similarity: every point would be a mismatch"
            )
        elif value == 1:
            problems.append(
                f"check.cos_sim_min.{dtype}: 1 passes only an exact result: every point "
                "whose result is rounded would be a mismatch"
            )
    for dtype, value in config.get("check", {}).get("rel_err_max", {}).items():
        if value <= 0:
            problems.append(
                f"check.rel_err_max.{dtype}: {value} passes only an exact result: every "
                "point whose result is rounded would be a mismatch"
            )
    for device, seconds in config.get("kernel_power", {}).get("seconds", {}).items():
        if seconds <= 0:
            problems.append(
                f"kernel_power.seconds.{device}: a {seconds} s loop measures "
                "nothing; give it more than 0"
            )
    for device, seconds in config.get("decode", {}).get("min_steady_s", {}).items():
        if seconds <= 0:
            problems.append(
                f"decode.min_steady_s.{device}: a {seconds} s steady window "
                "measures nothing; give it more than 0"
            )
    for device, model in (config.get("decode", {}).get("model") or {}).items():
        where = f"decode.model.{device}"
        if model["top_k"] > model["experts"]:
            problems.append(
                f"{where}.top_k ({model['top_k']}) exceeds its experts ({model['experts']})"
            )
        if model["heads"] % model["kv_heads"]:
            problems.append(
                f"{where}.heads ({model['heads']}) is not a multiple of "
                f"kv_heads ({model['kv_heads']})"
            )
    return problems


# Hosts that only this machine can reach: the decode server has no authentication.
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


def is_loopback(host) -> bool:
    """A host only this machine reaches: localhost or a loopback address (127.0.0.0/8, ::1)."""
    if str(host) in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(str(host)).is_loopback
    except ValueError:
        return False


def config_warnings(config: dict) -> list[str]:
    """What is allowed but probably not meant: one line each."""
    warnings = []
    host = config.get("decode", {}).get("host", "127.0.0.1")
    if not is_loopback(host):
        shown = f'"{host}"' if ":" in str(host) else host  # an IPv6 address: ":: :" reads badly
        warnings.append(
            f"decode.host {shown}: the decode server listens beyond this "
            "machine and has no authentication: anyone who reaches it can use it"
        )
    enabled = set(enabled_backends(config))
    for backend, points in config.get("kernel_power", {}).get("backends", {}).items():
        if points and backend not in enabled:
            warnings.append(
                f"kernel_power.backends.{backend}: not run, backends.{backend} is disabled"
            )
    return warnings


def empty_overrides(override: dict, config: dict, where: str = "") -> list[str]:
    """Keys an override sets to ``{}`` where the merged config still holds entries:
    Snakemake merges mappings, so an empty one removes nothing."""
    found = []
    for key, value in override.items():
        path = f"{where}.{key}" if where else str(key)
        merged = config.get(key) if isinstance(config, dict) else None
        if value == {} and merged:
            found.append(
                f"{path}: {{}} removes nothing (override files are merged into "
                f"config/config.yaml); turn entries off with enabled: false"
            )
        elif isinstance(value, dict) and isinstance(merged, dict):
            found.extend(empty_overrides(value, merged, path))
    return found


def schema_problem(config: dict, schema_path: str) -> str:
    """One line naming the most relevant schema violation of ``config`` (for users)."""
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


def study_device(config: dict) -> str:
    """The device the workflow plans for: ``device`` unless auto, else cuda when NVML sees a
    GPU that CUDA_VISIBLE_DEVICES leaves visible (no torch import: the Snakefile calls this
    on every run). Jobs still check CUDA themselves before they use it."""
    if config.get("device", "auto") != "auto":
        return config["device"]
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
