"""The study's config: reading a config file, its schema (defaults, keys, messages), values
given on the command line, the checks across stages a JSON schema cannot express, and the
device the workflow plans for. Each stage's plan and checks live in its stage
(``stages/<stage>/<stage>_plan.py``); ``study_config.check_config`` runs them all.
"""

from __future__ import annotations

import ipaddress
import math
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


class _DuplicateKey(Exception):
    """A key given twice in one mapping of a YAML file (its 1-based lines)."""

    def __init__(self, key, first: int, again: int):
        super().__init__(key, first, again)
        self.key, self.first, self.again = key, first, again


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping: the safe loader keeps
    the last one silently, so the first value would be dropped without a word."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *anchor` entries may be overridden on purpose
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    if key in seen:
                        raise _DuplicateKey(key, seen[key], line)
                    seen[key] = line
                except TypeError:
                    pass  # an unhashable key: the constructor below names it
        return super().construct_mapping(node, deep=deep)


UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, UniqueKeyLoader.construct_mapping
)


def read_yaml_text(text: str, where: str):
    """``text`` read as YAML with :class:`UniqueKeyLoader`; ConfigFileError naming ``where``
    (and the line) on a syntax error, a Python tag or a key given twice."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a safe loader
    except _DuplicateKey as dup:
        raise ConfigFileError(
            f"{where}:{dup.again}: key {dup.key} is given twice (lines {dup.first} and "
            f"{dup.again}): YAML keeps the last silently, dropping the first; give it once"
        ) from None
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigFileError(
            f"{where}{line}: not plain YAML: {exc.problem} (a config file holds plain values: "
            "no tags such as !!python/...)"
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigFileError(
            f"{where}{line}: YAML syntax error: {exc.problem or exc.context}"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{where}: not YAML: {exc}") from None


def _decoded(path: Path) -> str:
    """The file's text; ConfigFileError naming the line and column of a byte that is not
    UTF-8 (a file saved as Latin-1 or Windows-1252)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        raise ConfigFileError(
            f"config file {path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at "
            f"line {line}, column {column}): save it as UTF-8"
        ) from None


def read_config_file(path: str | Path, known_keys=None) -> dict:
    """The mapping in a config file, or ConfigFileError naming the file (and the line of a
    YAML syntax error, of a key given twice or of a byte that is not UTF-8). With
    ``known_keys`` (the config's top-level keys), a mapping whose keys are mostly others (3
    or more) is refused too: a target written after --configfile that exists (e.g.
    results/hardware.json) is read as a config file."""
    path = Path(path)
    if not path.is_file():
        why = (
            "is a directory (a target written after --configfile?)"
            if path.is_dir()
            else ("not found (a target written after --configfile is read as a config file)")
        )
        raise ConfigFileError(f"config file {path}: {why}")
    data = read_yaml_text(_decoded(path), f"config file {path}")
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


def merged_config(base: dict, override: dict) -> dict:
    """``override`` merged into ``base`` as Snakemake merges a --configfile into the config:
    mappings key by key, anything else replaced."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merged_config(merged[key], value)
        else:
            merged[key] = value
    return merged


def sweep_backend_problems(names, config: dict, known) -> list[str]:
    """What ``make sweep BACKEND=...`` cannot sweep: a name that is no backend (``known``,
    the schema's), or a backend the config disables. One line each."""
    problems = []
    for name in names:
        if name not in known:
            problems.append(f"BACKEND={name} is not a backend; the backends: {', '.join(known)}")
        elif not config.get("backends", {}).get(name, {}).get("enabled", True):
            problems.append(f"BACKEND={name} is disabled (backends.{name}.enabled: false in "
                            "config/config.yaml or CONFIG): enable it to sweep it")  # fmt: skip
    return problems


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
    decode = config.get("decode", {})
    for device, pct in (decode.get("tpot_ci_pct") or {}).items():
        shortest = (decode.get("shortest_steady_s") or {}).get(device, 0)
        if pct > 0 and shortest <= 0:
            problems.append(
                f"decode.shortest_steady_s.{device}: a {shortest} s shortest window ends a "
                f"window at its first slices, however imprecise; with decode.tpot_ci_pct."
                f"{device} ({pct}) give it more than 0 (10 s on a GPU)"
            )
    for device, full in (decode.get("full_length_s") or {}).items():
        longest = (decode.get("min_steady_s") or {}).get(device, 0)
        if 0 < full < longest:
            problems.append(
                f"decode.full_length_s.{device}: a {full} s full-length window is shorter "
                f"than the window it checks (decode.min_steady_s.{device}: {longest} s), so "
                f"it cannot show where that one would have ended; give at least {longest}"
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


def key_problems(config, where: str = "") -> list[str]:
    """Mapping keys that are not text (``123:``, or ``on:`` / ``yes:``, which YAML reads as
    true): the config's keys are names (of variables, variants, shapes); such a key would
    fail later, deep in the workflow, as a Python error."""
    if not isinstance(config, (dict, list)):
        return []
    problems = []
    items = config.items() if isinstance(config, dict) else enumerate(config)
    for key, value in items:
        path = f"{where}[{key}]" if isinstance(config, list) else (
            f"{where}.{key}" if where else str(key))  # fmt: skip
        if isinstance(config, dict) and not isinstance(key, str):
            quoted = ('as written, e.g. "on" (YAML reads an unquoted yes, no, on, off, true or '
                      'false as a boolean)' if isinstance(key, bool) else f'("{key}")')  # fmt: skip
            problems.append(
                f"config key {where or '(top level)'}: the key {key!r} is a "
                f"{'boolean' if isinstance(key, bool) else 'number'}, not a name: quote it "
                f"{quoted}"
            )
            continue
        problems += key_problems(value, path)
    return problems


def _where(error) -> str:
    return ".".join(
        f"[{p}]" if isinstance(p, int) else str(p) for p in error.absolute_path
    ).replace(".[", "[")


def schema_problem(config: dict, schema_path: str) -> str:
    """One line naming the most relevant schema violation of ``config`` (for users)."""
    with open(schema_path, encoding="utf-8") as f:
        schema = yaml.safe_load(f)
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is None:
        return "the config does not match config/schema.yaml"
    where = _where(error)
    if error.validator == "additionalProperties":
        return f"config{'.' + where if where else ''}: {error.message}"
    return f"config key {where or '(top level)'}: {error.message}"


def _whole(checker, value) -> bool:
    """An integer as the config means one: not a bool, not a float (1.0 passes JSON
    Schema's integer, and reaches torch as a float)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(checker, value) -> bool:
    """A number that is one: not NaN, not infinite (YAML's .nan and .inf pass JSON Schema's
    number and every minimum)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))  # fmt: skip


def strict_schema_problem(config: dict, schema_path: str) -> str | None:
    """What JSON Schema lets through that the config cannot mean: a float where an integer
    goes (``M: 1.0``), a NaN or an infinity where a number goes. One line, or None."""
    with open(schema_path, encoding="utf-8") as f:
        schema = yaml.safe_load(f)
    base = jsonschema.Draft202012Validator
    strict = jsonschema.validators.extend(
        base, type_checker=base.TYPE_CHECKER.redefine_many({"integer": _whole, "number": _finite})
    )
    error = jsonschema.exceptions.best_match(strict(schema).iter_errors(config))
    if error is None:
        return None
    where, value = _where(error) or "(top level)", error.instance
    if error.validator == "type" and isinstance(value, float) and not math.isfinite(value):
        return (f"config key {where}: {value} is not a finite number: NaN or infinity "
                "measures nothing, or never ends; give a number")  # fmt: skip
    if error.validator == "type" and isinstance(value, float) and value.is_integer():
        return (f"config key {where}: {value} is not a whole number as the study reads one "
                f"(it would reach the kernels as a float): write {int(value)}")  # fmt: skip
    return f"config key {where}: {error.message}"


def config_text(config: dict) -> str:
    """The config as the report shows it: YAML, in the key order given, its text as written
    (non-ASCII characters as themselves, not ``\\xFC`` escapes; long strings unfolded)."""
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True, width=10**9)


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
