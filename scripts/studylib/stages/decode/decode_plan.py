"""Config -> the decode stage's plans: the variants that serve on this device, one variant's
plan, the config-only models they serve, and a plan's per-device values picked."""

from __future__ import annotations

import ipaddress
import re

from ...core.config import study_device
from ...instruments.serving.engines import engine as get_engine
from ...instruments.serving.engines.base import arg_problems, flag_name
from ...instruments.serving.launcher import flag_value
from ...instruments.serving.served_model import geometry_positions, model_positions
from .decode_schema import MEMORY_FRACTION_FLAGS, weight_ranks

DEVICES = ("cuda", "cpu")
#: A variant's name is a path component of its files (at most 255 bytes on Linux, with room
#: for the suffixes the study adds).
MAX_VARIANT_NAME = 100
#: What the study adds to an SGLang server's arguments itself: a dummy model's load format,
#: and on the recorder pass the expert-distribution recorder.
DUMMY_ARGS = ["--load-format", "dummy"]
RECORDER_ARGS = ["--expert-distribution-recorder-mode", "stat",
                 "--expert-distribution-recorder-buffer-size", "-1"]  # fmt: skip


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


def counted_gpus(config: dict, variant: str, device: str) -> int:
    """The GPUs a variant's job counts in Snakemake's resources: none where its server starts
    ahead of the device (decode.prestart, SGLang), the job then taking them itself (gpu_slots:
    yielding to the jobs Snakemake starts)."""
    settings = config["decode"]["variants"][variant]
    if settings["engine"] == "sglang" and (config["decode"].get("prestart") or {}).get(device):
        return 0
    return int(settings.get("gpus", 1))


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


def study_flags(eng, model_kind: str | None, recorder: bool) -> dict[str, str]:
    """Flags the study sets on a variant's server itself, each with what sets it."""
    flags = eng.study_flags()
    if eng.name == "sglang" and model_kind == "dummy":
        flags[DUMMY_ARGS[0]] = "model: dummy, served with random weights"
    if eng.name == "sglang" and recorder:
        for flag in RECORDER_ARGS[::2]:
            flags[flag] = "expert_distribution: true, on its recorder pass"
    return flags


def served_positions(eng, args: list, model_kind: str | None, model_dir,
                     geometry: dict | None) -> tuple[int, str] | None:  # fmt: skip
    """The context a variant's server serves, and where that comes from: the engine's
    context flag in its args, else the model's positions (the geometry of a model the study
    builds, or the model folder's config.json); None where unknown."""
    if eng.context_flag:
        for i, arg in enumerate(args):
            if flag_name(arg) == eng.context_flag:
                value = str(arg).split("=", 1)[1] if "=" in str(arg) else (
                    args[i + 1] if i + 1 < len(args) else None)  # fmt: skip
                if value is not None and re.fullmatch(r"[0-9]+", str(value)):
                    return int(value), f"{eng.context_flag} in its args"
    if model_kind in ("local", "dummy") and geometry:
        return geometry_positions(geometry)
    return model_positions(model_dir) if model_dir else None


def context_problem(input_len: int, output_len: int, served: tuple[int, str] | None,
                    whose: str = "the served model", keys: str = "") -> str | None:  # fmt: skip
    """A request's context (prompt and output) beyond the positions the server serves;
    ``keys``: the config keys' prefix (``decode.``) and suffix (``.cpu``), as ``{}``."""
    if served is None or input_len + output_len <= served[0]:
        return None
    name = (keys or "{}").format
    return (f"{name('input_len')} ({input_len}) + {name('output_len')} ({output_len}) = "
            f"{input_len + output_len} tokens per request, beyond the {served[0]} positions of "
            f"{whose} ({served[1]}): the model cannot serve that context")  # fmt: skip


def weights_problem(engine: str, args: list, weight_bytes: float | None,
                    gpu_mib: float | None) -> str | None:  # fmt: skip
    """Weights a server cannot hold with room for a KV cache: their share per GPU at or above
    the memory its engine may take of the smallest of the job's GPUs (``gpu_mib``; the whole
    GPU without the engine's fraction flag). None where they fit, or where either is unknown.
    SGLang itself stops at start then, 42-55 s in (the bf16 model on an 80-GB H100)."""
    if engine not in MEMORY_FRACTION_FLAGS or not weight_bytes or not gpu_mib:
        return None
    args = [str(a) for a in args]
    ranks = weight_ranks(engine, args)
    flag = MEMORY_FRACTION_FLAGS[engine]
    fraction = float(flag_value(args, flag) or 1.0)
    per_gpu, room = weight_bytes / ranks / 2**30, fraction * gpu_mib / 2**10
    if per_gpu < room:
        return None
    share = f"the {room:.1f} GiB {flag} {fraction:g} leaves" if flag in args else "all"
    return (f"its weights do not fit: {per_gpu:.1f} GiB per GPU ({weight_bytes / 1e9:.1f} GB "
            f"over {ranks} GPU{'s' if ranks > 1 else ''}) against {share} of the GPU's "
            f"{gpu_mib / 2**10:.1f} GiB, nothing left for its KV cache; not started (a GPU of "
            "more memory, more GPUs, or FP8 weights serve it)")  # fmt: skip


def host_problem(host) -> str | None:
    """A decode.host no server can listen on, or that no URL can name."""
    host = str(host)
    if not host.strip():
        return "decode.host is empty: give the address the server listens on (127.0.0.1)"
    if host.startswith("[") and host.endswith("]"):
        return (f"decode.host {host}: write an IPv6 address without brackets "
                f"({host[1:-1]}); the study brackets it where it builds a URL")  # fmt: skip
    if "/" in host or any(c.isspace() for c in host):
        return f"decode.host {host!r}: a host name or IP address, not a URL or a path"
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return (f"decode.host {host}: not a host name or IP address (the port goes in "
                    "decode.port)")  # fmt: skip
    return None


def check_decode(config: dict) -> list[str]:
    """Decode settings the schema accepts one by one that would measure nothing or garbage,
    or that the server cannot serve: one line each, naming the key."""
    decode = config.get("decode", {})
    problems = [p for p in [host_problem(decode.get("host", "127.0.0.1"))] if p]
    for device, tokens in (decode.get("output_len") or {}).items():
        if tokens < 2:
            problems.append(f"decode.output_len.{device}: {tokens} token has no time per "
                            "output token (TPOT is the time between a request's tokens): "
                            "give 2 or more")  # fmt: skip
    for device, geometry in (decode.get("model") or {}).items():
        if geometry.get("architecture") == "qwen3_moe" and geometry.get("shared_experts"):
            problems.append(f"decode.model.{device}.shared_experts "
                            f"({geometry['shared_experts']}): qwen3_moe has no shared experts; "
                            "give 0 or architecture glm4_moe")  # fmt: skip
    preaged = {"decode.preaged": decode.get("preaged") or {}}
    preaged |= {
        f"decode.variants.{name}.preaged": spec["preaged"]
        for name, spec in (decode.get("variants") or {}).items()
        if spec.get("preaged")
    }
    for key, by_device in preaged.items():
        for device, on in by_device.items():
            if on and not (decode.get("stagger") or {}).get(device, True):
                problems.append(f"{key}.{device}: pre-aged first requests are a staggered "
                                f"load's (their lengths are its slots); turn "
                                f"decode.stagger.{device} on or this off")  # fmt: skip
    variants = {name: spec for name, spec in (decode.get("variants") or {}).items()
                if spec.get("enabled", True)}  # fmt: skip
    for name in variants:
        if len(name) > MAX_VARIANT_NAME:
            problems.append(f"decode.variants.{name[:20]}...: a name of {len(name)} characters; "
                            "a variant's name names its folder and files (results/decode/"
                            f"<name>/, results/logs/decode/<name>.log): give at most "
                            f"{MAX_VARIANT_NAME}")  # fmt: skip
    for device in DEVICES:
        recording = [name for name, spec in variants.items()
                     if spec.get("expert_distribution") and spec.get("engine") == "sglang"
                     and device in spec.get("devices", DEVICES)]  # fmt: skip
        seconds = (decode.get("expert_distribution_s") or {}).get(device, 1)
        if recording and seconds <= 0:
            problems.append(f"decode.expert_distribution_s.{device}: a {seconds} s recorded "
                            f"window records no expert (variant {recording[0]} records "
                            "them); give it more than 0")  # fmt: skip
    for name, spec in variants.items():
        for device in spec.get("devices", DEVICES):
            problems += _variant_problems(decode, name, spec, device)
    return problems


def _variant_problems(decode: dict, name: str, spec: dict, device: str) -> list[str]:
    """A variant's server on ``device``: its args, the context it serves, its top_k."""
    eng = get_engine(spec["engine"])
    kind = spec["model"] if spec["model"] in ("local", "dummy") else "path"
    where = f"decode.variants.{name}"
    args = ((spec.get("args") or {}).get(device)) or []
    flags = study_flags(eng, kind, bool(spec.get("expert_distribution")))
    problems = [f"{where}.args.{device}: {p}" for p in arg_problems(args, flags)]
    geometry = (decode.get("model") or {}).get(device) if kind != "path" else None
    served = served_positions(eng, args, kind, spec["model"] if kind == "path" else None,
                              geometry)  # fmt: skip
    if served and geometry and served[1].startswith("max_position_embeddings"):
        served = (served[0], f"decode.model.{device}.{served[1]}")
    lengths = [(decode.get(key) or {}).get(device) for key in ("input_len", "output_len")]
    if None not in lengths:
        problem = context_problem(*lengths, served, f"variant {name}'s model",
                                  f"decode.{{}}.{device}")  # fmt: skip
        problems += [problem] if problem else []
    problems += batch_problems(decode, name, spec, device, args)
    top_k = (geometry or {}).get("top_k")
    if spec.get("expert_distribution") and top_k and spec.get("top_k", 8) != top_k:
        problems.append(f"{where}.top_k ({spec.get('top_k', 8)}) is not the top_k of the model "
                        f"it serves on {device} (decode.model.{device}.top_k: {top_k}): its "
                        "recorded tokens per expert would be off by their ratio")  # fmt: skip
    return problems


def batch_problems(decode: dict, name: str, spec: dict, device: str, args: list) -> list[str]:
    """An SGLang variant whose server caps a step's batch below its largest concurrency: past
    --max-running-requests the requests queue and no window holds C in flight; past
    --cuda-graph-max-bs (or its -decode form) a step runs without CUDA graphs, another regime
    than the variant's (SGLang says neither)."""
    levels = (spec.get("concurrency") or decode.get("concurrency") or {}).get(device) or []
    if spec["engine"] != "sglang" or not levels:
        return []
    top, args = max(levels), [str(a) for a in args]
    where = f"decode.variants.{name}.args.{device}"
    caps = [("--max-running-requests", "SGLang would queue the rest and no window would hold "
             f"{top} in flight")]  # fmt: skip
    if "--disable-cuda-graph" not in args:
        caps.append(("--cuda-graph-max-bs", "its steps would run without CUDA graphs"))
        caps.append(("--cuda-graph-max-bs-decode", "its steps would run without CUDA graphs"))
    problems = []
    for flag, what in caps:
        value = flag_value(args, flag)
        if value is not None and value.isdigit() and int(value) < top:
            problems.append(f"{where}: {flag} {value} is below the variant's largest "
                            f"concurrency ({top}): {what}; give it at least {top}")  # fmt: skip
    return problems
