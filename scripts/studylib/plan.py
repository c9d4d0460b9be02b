"""Config -> per-backend sweep plans, and the config checks a JSON schema cannot express.

A plan holds exactly what one backend's sweep depends on (its cases with their shapes
resolved, its M grids, timing and checking settings), so Snakemake's params trigger reruns a
backend's sweep when, and only when, something that backend uses changes.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

from .instruments.backends import catalogue
from .instruments.backends.attention import POINT_KEYS as ATTENTION_POINT_KEYS

SCHEMA = Path(__file__).resolve().parents[2] / "config" / "schema.yaml"


class ConfigFileError(ValueError):
    """A config file that cannot be read as a mapping of keys: one line naming the file."""


def config_keys(schema_path: str | Path) -> set[str]:
    """The config's top-level keys, as config/schema.yaml declares them."""
    import yaml

    return set(yaml.safe_load(Path(schema_path).read_text(encoding="utf-8"))["properties"])


def read_config_file(path: str | Path, known_keys=None) -> dict:
    """The mapping in a config file, or ConfigFileError naming the file (and the line of a
    YAML syntax error). With ``known_keys`` (the config's top-level keys), a mapping whose
    keys are mostly others (3 or more) is refused too: a target written after --configfile
    that exists (e.g. results/hardware.json) is read as a config file."""
    import yaml

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
                else:
                    problems += shape_kind_problems(f"{where}.shapes", backend, op, shape,
                                                    shapes[shape])  # fmt: skip
            if known.get("fused") and case.get("groups") and len(case["groups"]) != 1:
                problems.append(f"{where}.groups: {backend} {op} is one MoE layer: give its "
                                "expert count alone (e.g. [256])")  # fmt: skip
            if case.get("groups") and not known["grouped"]:
                problems.append(f"{where}.groups: {backend} {op} is not a grouped GEMM")
            if known["grouped"] and not case.get("groups"):
                problems.append(f"{where}.groups: {backend} {op} is grouped and needs groups")
    problems += check_shapes(shapes)
    return problems + check_kernel_power(config) + check_contradictions(config) + check_moe(config)


def shape_kind(shape: dict) -> str:
    """``gemm`` (N, K) or ``attention`` (heads, kv_heads, head_dim, context)."""
    return shape.get("kind", "gemm")


def is_attention(backend: str, op: str) -> bool:
    """A decode-attention op (backends/attention.py): its shapes are attention shapes."""
    return bool(catalogue()[backend].get(op, {}).get("attention"))


def shape_kind_problems(where: str, backend: str, op: str, name: str, shape: dict) -> list[str]:
    """A GEMM shape on an attention op, or an attention shape on a GEMM op."""
    if is_attention(backend, op) and shape_kind(shape) != "attention":
        return [f"{where}: {name!r} is a GEMM shape (N, K) but {backend} {op} is decode "
                "attention and takes attention shapes (kind: attention, with heads, kv_heads, "
                "head_dim, context)"]  # fmt: skip
    if not is_attention(backend, op) and shape_kind(shape) == "attention":
        return [f"{where}: {name!r} is an attention shape (kind: attention) but {backend} "
                f"{op} is a GEMM and takes GEMM shapes (N, K)"]  # fmt: skip
    return []


def check_shapes(shapes: dict) -> list[str]:
    """Each shape's keys fit its kind (the schema requires a kind's keys, not the absence of
    the other kind's), and an attention shape's query heads share its KV heads evenly."""
    problems = []
    for name, shape in shapes.items():
        where = f"shapes.{name}"
        if shape_kind(shape) == "attention":
            given = [key for key in ("N", "K") if key in shape]
            if given:
                problems.append(f"{where}: an attention shape derives N (heads x head_dim) and "
                                f"K (context); remove {', '.join(given)}")  # fmt: skip
            elif shape.get("kv_heads") and shape.get("heads", 0) % shape["kv_heads"]:
                problems.append(f"{where}.heads ({shape['heads']}) is not a multiple of "
                                f"kv_heads ({shape['kv_heads']})")  # fmt: skip
            if shape.get("interleaved", 0) > shape.get("context", 0):
                problems.append(f"{where}.interleaved ({shape['interleaved']}) is more than "
                                f"the context ({shape.get('context')} tokens)")  # fmt: skip
        else:
            given = [key for key in ATTENTION_POINT_KEYS if key in shape]
            if given:
                problems.append(f"{where}: {', '.join(given)} belong to an attention shape: "
                                "add kind: attention (and drop N, K), or remove them")  # fmt: skip
    return problems


def resolve_shape(name: str, shape: dict) -> dict:
    """A shape as plans and points carry it: name, N, K, and an attention shape's geometry
    (N = heads x head_dim, K = context). A GEMM shape resolves as it always has (its plans,
    and so Snakemake's params, are unchanged by the attention kind)."""
    if shape_kind(shape) != "attention":
        return {"name": name, "N": shape["N"], "K": shape["K"]}
    return {"name": name, "kind": "attention", "N": shape["heads"] * shape["head_dim"],
            "K": shape["context"], **attention_geometry(shape)}  # fmt: skip


def check_moe(config: dict) -> list[str]:
    """The fused-MoE settings: top-k within the experts, a usable recorded histogram."""
    fused = [
        (backend, case)
        for backend in enabled_backends(config)
        for case in config["backends"][backend]["cases"]
        if is_fused(backend, case["op"])
    ]
    if not fused:
        return []
    problems = []
    spec = config["moe"]
    top_k = spec["top_k"]
    for backend, case in fused:
        for groups in case.get("groups") or []:
            if top_k > groups:
                problems.append(
                    f"moe.top_k ({top_k}) exceeds backends.{backend} {case['op']}'s "
                    f"{groups} experts"
                )
    if "recorded" in spec["routings"]:
        try:
            shares = expert_shares(spec.get("expert_histogram"))
        except ValueError as exc:
            return [*problems, str(exc)]
        for backend, case in fused:
            for groups in case.get("groups") or []:
                if groups != len(shares):
                    problems.append(
                        f"moe.expert_histogram has {len(shares)} experts; backends.{backend} "
                        f"{case['op']} has {groups}"
                    )
    return problems


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
    for dtype, value in config.get("check", {}).get("cos_sim_min", {}).items():
        if value > 1:
            problems.append(
                f"check.cos_sim_min.{dtype}: {value} is above 1, the largest "
                "cosine similarity: every point would be a mismatch"
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


def config_warnings(config: dict) -> list[str]:
    """What is allowed but probably not meant: one line each."""
    warnings = []
    host = config.get("decode", {}).get("host", "127.0.0.1")
    if host not in LOOPBACK_HOSTS:
        warnings.append(
            f"decode.host {host}: the decode server listens beyond this "
            "machine and has no authentication: anyone who reaches it can use it"
        )
    enabled = set(enabled_backends(config))
    for backend, points in config.get("kernel_power", {}).get("backends", {}).items():
        if points and backend not in enabled:
            warnings.append(
                f"kernel_power.backends.{backend}: not run, backends.{backend} is disabled"
            )
    return warnings


def typed_cli_values(value, nested: bool = False):
    """``--config`` values with their nested scalars typed as YAML types them.

    Snakemake reads ``--config 'decode={port: 30117}'`` with YAML's base loader, so every
    value inside a mapping or list arrives as a string ('30117'); top-level values it types
    itself."""
    import yaml

    if isinstance(value, dict):
        return {key: typed_cli_values(item, True) for key, item in value.items()}
    if isinstance(value, list):
        return [typed_cli_values(item, True) for item in value]
    if nested and isinstance(value, str):
        try:
            return yaml.safe_load(value)
        except yaml.YAMLError:
            return value
    return value


def apply_cli_values(config: dict, overrides: dict) -> None:
    """Put the typed ``--config`` values into ``config`` (where Snakemake merged them)."""
    for key, value in typed_cli_values(overrides).items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            apply_cli_values(config[key], value)
        else:
            config[key] = value


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


def sweep_plan(config: dict, backend: str) -> dict:
    """The slice of ``config`` that ``backend``'s sweep depends on, fully resolved."""
    spec = config["backends"][backend]
    cases = []
    for case in spec["cases"]:
        case = copy.deepcopy(case)
        case["shapes"] = [resolve_shape(name, config["shapes"][name]) for name in case["shapes"]]
        # A case's m may name one device; the other keeps the top-level grid.
        case["m"] = {**config["m_grid"], **case.get("m", {})}
        cases.append(case)
    plan = {
        "backend": backend,
        "device": config["device"],
        "cases": cases,
        "timing": config["timing"],
        "check": config["check"],
    }
    if any(is_fused(backend, case["op"]) for case in cases):
        plan["moe"] = moe_plan(config)
    return plan


def is_fused(backend: str, op: str) -> bool:
    """A fused-MoE op (a whole MoE layer: routing, top-k, experts), see backends/moe.py."""
    return bool(catalogue()[backend].get(op, {}).get("fused"))


def moe_plan(config: dict) -> dict:
    """What a fused-MoE point depends on: top-k, routings, and the recorded expert shares
    (the file's content, not its name, so a new recording reruns the fused points)."""
    spec = config["moe"]  # the schema fills its defaults
    plan = {"top_k": spec["top_k"], "routings": list(spec["routings"])}
    if "recorded" in plan["routings"]:
        plan["expert_shares"] = expert_shares(spec.get("expert_histogram"))
    return plan


def expert_shares(path) -> list[float]:
    """See :func:`_expert_shares`; read once per file version (the Snakefile plans every
    backend and checks the config on each run)."""
    stat = Path(path).stat() if path and Path(path).is_file() else None
    return list(_expert_shares(path, stat.st_mtime_ns if stat else None))


@functools.lru_cache(maxsize=8)
def _expert_shares(path, mtime_ns) -> tuple[float, ...]:
    """Each expert's share of the routed tokens in a recorded expert histogram (the decode
    recorder's per-expert table: ``expert`` and ``tokens`` columns), summed over its layers,
    concurrencies and variants. ValueError naming the file when it cannot be used."""
    import pandas as pd

    if not path:
        raise ValueError("moe.routings has recorded but moe.expert_histogram names no file")
    try:
        table = pd.read_csv(path, comment="#")
    except (OSError, ValueError) as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"moe.expert_histogram {path}: not a readable CSV ({why})") from None
    missing = {"expert", "tokens"} - set(table.columns)
    if missing:
        raise ValueError(
            f"moe.expert_histogram {path}: no {', '.join(sorted(missing))} column "
            "(an expert_m.csv of the decode recorder is expected)"
        )
    tokens = table.groupby("expert")["tokens"].sum().sort_index()
    if tokens.empty or tokens.sum() <= 0 or list(tokens.index) != list(range(len(tokens))):
        raise ValueError(f"moe.expert_histogram {path}: no routed tokens for experts 0..E-1")
    return tuple(round(float(v), 8) for v in tokens / tokens.sum())


def expand_points(plan: dict, device: str) -> list[dict]:
    """Every (impl, op, dtype, shape, G, M) point of ``plan`` that applies to ``device``. An
    attention shape's points carry its geometry too (heads, kv_heads, head_dim, context;
    M is the batch, N = heads x head_dim, K = context)."""
    ops = catalogue()[plan["backend"]]
    points = []
    for case in plan["cases"]:
        if device not in case.get("devices", ["cuda", "cpu"]):
            continue
        impls = case.get("impls") or ops[case["op"]]["impls"]
        # A fused-MoE point is one layer per routing; other ops have none.
        fused = ops[case["op"]].get("fused")
        routings = plan["moe"]["routings"] if fused else [None]
        for shape in case["shapes"]:
            for dtype in case["dtypes"]:
                for impl in impls:
                    for groups in case.get("groups") or [None]:
                        for routing in routings:
                            for m in case["m"][device]:
                                point = {
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
                                if fused:
                                    point["top_k"] = plan["moe"]["top_k"]
                                    point["routing"] = routing
                                point.update(attention_geometry(shape))
                                points.append(point)
    return points


def attention_geometry(shape: dict) -> dict:
    """The keys an attention shape adds to its points (none for a GEMM shape)."""
    return {key: shape[key] for key in ATTENTION_POINT_KEYS if key in shape}


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


def baseline_files(source: str | Path) -> list[str]:
    """The sweep files of a run to compare with (compare.load_sweep): a file, a pattern
    (``examples/h200-2026-12-01-kernels/sweeps/run6_*.csv``), or a results folder's
    ``tables/sweep.csv``, else its ``sweeps/*.parquet|csv``; FileNotFoundError naming the
    source when there are none."""
    if any(c in str(source) for c in "*?["):  # a pattern: the files it matches
        import glob

        files = sorted(glob.glob(str(source)))
        if not files:
            raise FileNotFoundError(f"{source}: matches no file")
        return files
    source = Path(source)
    if source.is_file():
        return [str(source)]
    if source.is_dir():
        table = source / "tables" / "sweep.csv"
        files = [table] if table.is_file() else sorted(
            [*source.glob("sweeps/*.parquet"), *source.glob("sweeps/*.csv")])  # fmt: skip
        if files:
            return [str(f) for f in files]
        raise FileNotFoundError(f"{source}: no tables/sweep.csv and no sweeps/*.parquet|csv")
    raise FileNotFoundError(f"{source}: no such file or folder")
