"""Config -> per-backend sweep plans, and the sweep's config checks a JSON schema cannot
express.

A plan holds exactly what one backend's sweep depends on (its cases with their shapes
resolved, its M grids, timing and checking settings), so Snakemake's params trigger reruns a
backend's sweep when, and only when, something that backend uses changes.
"""

from __future__ import annotations

import copy
import functools
import glob
from pathlib import Path

import pandas as pd

from ...core.config import enabled_backends
from ...instruments.backends import catalogue, flashinfer_jit
from ...instruments.backends.attention import POINT_KEYS as ATTENTION_POINT_KEYS


def check_sweep_config(config: dict) -> list[str]:
    """The sweep's problems (its backends' cases, the shapes), each naming the key at fault."""
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
    problems += operand_problems(config)
    problems += check_shapes(shapes)
    return problems


#: The most elements an operand that grows with M may hold: 2^31 (8 GiB in fp32), beyond the
#: activations of any decode step (256 experts x 512 tokens x 6144 is 8e8) and beyond what
#: kernels index with 32-bit offsets.
MAX_OPERAND = 2**31


def operand_problems(config: dict) -> list[str]:
    """An M grid whose largest M makes an operand that grows with M (the input, M x K, or the
    output, M x N, per group) larger than :data:`MAX_OPERAND` elements on a shape a case
    takes: a typo such as 1e20 ends the sweep in a Python error, a large one in memory
    exhaustion. One line per grid (m_grid.<device>, a case's own m, a kernel-power point's M)."""
    found = {}
    shapes = config.get("shapes", {})
    for backend in enabled_backends(config):
        for i, case in enumerate(config["backends"][backend]["cases"]):
            for device, grid in {**config.get("m_grid", {}), **case.get("m", {})}.items():
                key = (f"backends.{backend}.cases[{i}].m.{device}" if device in case.get("m", {})
                       else f"m_grid.{device}")  # fmt: skip
                m, g = max(grid), max(case.get("groups") or [1])
                for name in case["shapes"]:
                    if key in found or name not in shapes:
                        continue
                    shape = resolve_shape(name, shapes[name])
                    elements = g * m * max(shape["N"], shape["K"])
                    if elements > MAX_OPERAND:
                        found[key] = (
                            f"{key}: M {m} makes an operand of {elements:.3g} elements on "
                            f"shape {name} (N {shape['N']}, K {shape['K']}"
                            f"{f', G {g}' if case.get('groups') else ''}; "
                            f"backends.{backend}.cases[{i}]), beyond the 2^31 (8 GiB in fp32) "
                            "a point's input or output may hold: a typo?"
                        )
    power = config.get("kernel_power", {}).get("backends", {})
    for backend in enabled_backends(config):
        for i, point in enumerate(power.get(backend) or []):
            if point.get("shape") not in shapes or not point.get("M"):
                continue
            shape = resolve_shape(point["shape"], shapes[point["shape"]])
            m, g = max(point["M"]), point.get("G") or 1
            elements = g * m * max(shape["N"], shape["K"])
            if elements > MAX_OPERAND:
                found[f"kernel_power.backends.{backend}[{i}].M"] = (
                    f"kernel_power.backends.{backend}[{i}].M: M {m} makes an operand of "
                    f"{elements:.3g} elements on shape {point['shape']} (N {shape['N']}, K "
                    f"{shape['K']}), beyond the 2^31 (8 GiB in fp32) a point's input or output "
                    "may hold: a typo?"
                )
    return list(found.values())


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


def flashinfer_jit_targets(config: dict) -> list[dict]:
    """The FlashInfer modules the FlashInfer sweep's first calls on a GPU would build (rule
    flashinfer_jit builds them beforehand); none where that sweep is disabled. Its
    kernel-power job's points are ops of the sweep's, so this covers them too."""
    if "flashinfer" not in enabled_backends(config):
        return []
    return flashinfer_jit.targets(expand_points(sweep_plan(config, "flashinfer"), "cuda"))


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


def baseline_files(source: str | Path) -> list[str]:
    """The sweep files of a run to compare with (compare.load_sweep): a file, a pattern
    (``examples/h200-2026-12-01-kernels/sweeps/run6_*.csv``), or a results folder's
    ``tables/sweep.csv``, else its ``sweeps/*.parquet|csv``; FileNotFoundError naming the
    source when there are none."""
    if any(c in str(source) for c in "*?["):  # a pattern: the files it matches
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


def own_results_problem(files, results: str | Path = "results") -> str | None:
    """A baseline inside this run's own results folder: the run compared with itself (every
    point "the same within noise"), or with files the run is rewriting."""
    own = Path(results).resolve()
    for file in files:
        if Path(file).resolve().is_relative_to(own):
            return (f"{file} is inside this run's own results folder ({results}/), which this "
                    "run rewrites: a run compared with itself shows no change; copy the "
                    "earlier run aside first (cp -r results results-before) and compare with "
                    "the copy")  # fmt: skip
    return None
