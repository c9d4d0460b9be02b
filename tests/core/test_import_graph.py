"""The library's import graph (issue 31): no cycles among studylib modules, no import inside a
function except of an optional GPU library, no module over 600 lines, and no two modules of
one name."""

import ast
from pathlib import Path

from helpers import ROOT

LIBRARY = ROOT / "scripts" / "studylib"
#: Imported where used, not at the top: optional GPU libraries (and their tokenizers) that a
#: machine without a GPU may lack, and that the catalogue and the Snakefile must not load.
LAZY = {"torch", "flashinfer", "sgl_kernel", "sglang", "transformers", "tokenizers", "pynvml"}
MAX_LINES = 600


def modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in sorted(LIBRARY.rglob("*.py")):
        parts = list(path.relative_to(LIBRARY.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def imported(name: str, package: bool, node: ast.ImportFrom | ast.Import, known) -> list[str]:
    """The studylib modules (or external top-level packages) that ``node`` imports."""
    if isinstance(node, ast.Import):
        return [a.name if a.name.startswith("studylib") else a.name.split(".")[0]
                for a in node.names]  # fmt: skip
    if node.level:
        base = name.split(".") if package else name.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    if not source.startswith("studylib"):
        return [source.split(".")[0]]
    return [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]


def graph():
    """{module: modules imported anywhere in it}, and [(module, target, line)] of imports
    inside functions."""
    known = modules()
    edges, inner = {}, []
    for name, (path, package) in known.items():
        edges[name] = set()
        todo = [(ast.parse(path.read_text(encoding="utf-8")), False)]
        while todo:
            node, in_function = todo.pop()
            for child in ast.iter_child_nodes(node):
                nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in imported(name, package, child, known):
                        if target in known:
                            edges[name].add(target)
                        if in_function:
                            inner.append((name, target, child.lineno))
                todo.append((child, nested))
    return edges, inner


def cycles(edges) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_among_studylib_modules():
    edges, _ = graph()
    assert cycles(edges) == []


def test_no_import_inside_a_function_but_of_an_optional_gpu_library():
    _, inner = graph()
    odd = [(m, t, line) for m, t, line in inner
           if t not in LAZY]  # fmt: skip
    assert odd == []


def test_no_module_over_600_lines_but_the_frozen_decode_ones():
    long = {str(path.relative_to(LIBRARY)): n for path, _ in modules().values()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}  # fmt: skip
    assert not long, long


def test_dependencies_point_down():
    """core imports nothing above it; instruments only core (and the serving guard, which
    moves with serving); a stage no report module."""
    edges, _ = graph()
    above_core = ("studylib.stages", "studylib.instruments", "studylib.report", "studylib.study")
    for module, targets in edges.items():
        if module.startswith("studylib.core"):
            assert not [t for t in targets if t.startswith(above_core)], module
        if module.startswith("studylib.instruments"):
            assert not [t for t in targets if t.startswith(("studylib.stages", "studylib.report",
                                                            "studylib.study"))], module  # fmt: skip
        if module.startswith("studylib.stages"):
            assert not [
                t for t in targets if t.startswith(("studylib.report", "studylib.study"))
            ], module


def test_module_names_are_unique_across_the_library():
    names = [path.name for path, _ in modules().values() if path.name != "__init__.py"]
    assert {n for n in names if names.count(n) > 1} == set()


def test_the_gpu_tests_import_without_the_report_group():
    # A GPU box given the bundle without its report group (tools/build_gpu_bundle.sh
    # --without report) has no altair: tests/gpu failed to import there once (2026-12-04),
    # through tests/helpers drawing figures. Block those packages and import what they import.
    import subprocess
    import sys

    code = (
        "import builtins, sys\n"
        "real = builtins.__import__\n"
        "def guard(name, *a, **k):\n"
        "    if name.split('.')[0] in ('altair', 'vl_convert', 'jinja2'):\n"
        "        raise ModuleNotFoundError(name)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = guard\n"
        f"sys.path[:0] = [{str(ROOT / 'scripts')!r}, {str(ROOT / 'tests')!r}]\n"
        "import conftest, helpers\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
