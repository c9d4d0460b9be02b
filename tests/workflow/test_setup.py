"""`make study`'s choice of pinned set, the GPU set, and its agreement with the offline bundle.

Network-free except the resolve tests (marked below): they ask the package index, skip when
it cannot be reached, and fail instead when STUDY_NETWORK_TESTS=1 (CI sets it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import ROOT

REPO = ROOT
ENVS = REPO / "envs"
GPU_SET = ENVS / "requirements-gpu.txt"
GPU_BASE = ENVS / "requirements-gpu-base.txt"
BUNDLE_LIST = ENVS / "gpu-offline.txt"
BUILDER = REPO / "tools" / "build_gpu_bundle.sh"
PIN_RE = re.compile(
    r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([A-Za-z0-9.+!_-]+)\s*(?:;(.*))?"
)
GPU_PINS = {"torch": "2.11.0", "sglang": "0.5.16", "sglang-kernel": "0.4.5",
            "flashinfer-python": "0.7.2.post1"}  # fmt: skip
BOX = {"python_version": "3.12"}  # the H200 image


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def marker_ok(marker: str | None, env: dict) -> bool:
    """Evaluate the simple python_version markers these files use."""
    if not marker:
        return True
    m = re.fullmatch(r'\s*python_version\s*(>=|<|==)\s*"([0-9.]+)"\s*', marker)
    assert m, f"unsupported marker {marker!r}"
    have = tuple(int(x) for x in env["python_version"].split("."))
    want = tuple(int(x) for x in m.group(2).split("."))
    return {">=": have >= want, "<": have < want, "==": have == want}[m.group(1)]


def read_pins(path: Path, env: dict = BOX) -> dict[str, str]:
    """name -> version of every pin in a requirements file, following -r includes."""
    out: dict[str, str] = {}
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split(" #")[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        if line.startswith("-r "):
            out.update(read_pins(path.parent / line[3:].strip(), env))
            continue
        m = PIN_RE.fullmatch(line)
        assert m, f"{path.name}:{n}: not 'name==version[; marker]': {line!r}"
        if marker_ok(m.group(3), env):
            name = norm(m.group(1))
            assert name not in out, f"{path.name}:{n}: {name} pinned twice"
            out[name] = m.group(2)
    return out


def bundle_pins() -> dict[str, tuple[str, str]]:
    """name -> (version, group) of envs/gpu-offline.txt."""
    out = {}
    for raw in BUNDLE_LIST.read_text(encoding="utf-8").splitlines():
        req, _, comment = raw.partition("#")
        if req.strip():
            name, ver = req.strip().split("==")
            out[norm(name)] = (ver, re.search(r"\[([a-z_]+)\]", comment).group(1))
    return out


# --- (1) make's choice of STACK ----------------------------------------------------------


def make_stack(tmp_path: Path, nvidia_smi: str | None, **env) -> tuple[str, str]:
    """(print-stack output, the 'make: STACK=...' line of `make -n study`) under a PATH
    whose only nvidia-smi is the given script (None: no nvidia-smi at all)."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make not available")
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    if nvidia_smi is not None:
        script = fake / "nvidia-smi"
        script.write_text("#!/bin/sh\n" + nvidia_smi)
        script.chmod(0o755)
    system = [d for d in ("/usr/local/bin", "/usr/bin", "/bin") if Path(d).is_dir()]
    if any((Path(d) / "nvidia-smi").exists() for d in system):
        pytest.skip("this machine has a real nvidia-smi in the system PATH")
    path = os.pathsep.join([str(fake), *system])
    full = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), **env}
    run = dict(cwd=REPO, capture_output=True, text=True, env=full, timeout=60)
    stack = subprocess.run([make, "-s", "print-stack"], **run)
    assert stack.returncode == 0, stack.stderr
    dry = subprocess.run([make, "-n", "study", "VENV=" + str(tmp_path / "venv")], **run)
    assert dry.returncode == 0, dry.stderr
    line = next((x for x in dry.stdout.splitlines() if x.startswith("make: STACK=")), "")
    return stack.stdout.strip(), line


GPU_LIST = 'echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"\necho "GPU 1: NVIDIA H200 (UUID: GPU-1)"\n'


def test_stack_gpu_when_nvidia_smi_lists_gpus(tmp_path):
    stack, line = make_stack(tmp_path, GPU_LIST)
    assert stack == "gpu"
    assert line == "make: STACK=gpu (nvidia-smi lists 2 GPUs)"


def test_stack_gpu_study_installs_the_gpu_set(tmp_path):
    make = shutil.which("make") or pytest.skip("make not available")
    _, line = make_stack(tmp_path, 'echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"\n')
    assert line == "make: STACK=gpu (nvidia-smi lists 1 GPU)"
    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"}
    dry = subprocess.run([make, "-n", "study", f"VENV={tmp_path / 'venv'}"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "-r envs/requirements-gpu-base.txt" in dry.stdout
    assert "--no-deps -r envs/requirements-gpu.txt" in dry.stdout
    assert "requirements-torch.txt" not in dry.stdout
    assert f"touch {tmp_path / 'venv'}/.study-gpu" in dry.stdout


def test_stack_cpu_without_nvidia_smi(tmp_path):
    stack, line = make_stack(tmp_path, None)
    assert stack == "cpu"
    assert line.startswith("make: STACK=cpu (")


def test_stack_cpu_when_nvidia_smi_fails(tmp_path):
    stack, _ = make_stack(tmp_path, 'echo "NVIDIA-SMI has failed: no driver" >&2\nexit 9\n')
    assert stack == "cpu"


@pytest.mark.parametrize("forced", ["cpu", "gpu", "system"])
def test_stack_override_wins(tmp_path, forced):
    stack, line = make_stack(tmp_path, GPU_LIST if forced == "cpu" else None, STACK=forced)
    assert stack == forced
    assert line.startswith(f"make: STACK={forced} (")


def test_stack_rejects_unknown(tmp_path):
    make = shutil.which("make") or pytest.skip("make not available")
    res = subprocess.run([make, "-s", "print-stack", "STACK=cuda"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert res.returncode != 0 and "use cpu, gpu or system" in res.stderr


# --- (3) the GPU set and the offline bundle agree ------------------------------------------


def test_gpu_set_pins_the_serving_stack():
    pins = read_pins(GPU_SET)
    for name, ver in GPU_PINS.items():
        assert pins.get(name) == ver, f"{GPU_SET.name}: {name} should be =={ver}"
    assert pins["snakemake"] == read_pins(ENVS / "requirements-study.txt")["snakemake"]
    # the CPU set keeps its own torch
    assert read_pins(ENVS / "requirements-torch.txt")["torch"] == "2.13.0"


@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_gpu_set_parses_for_both_pythons(python):
    assert read_pins(GPU_SET, {"python_version": python})["sglang"] == "0.5.16"


def test_gpu_set_and_bundle_agree():
    gpu = read_pins(GPU_SET)  # as the box (CPython 3.12) reads it
    bundle = bundle_pins()
    both = sorted(set(gpu) & set(bundle))
    differ = [
        f"{n}: gpu set {gpu[n]}, bundle {bundle[n][0]}" for n in both if gpu[n] != bundle[n][0]
    ]
    assert not differ, (
        "envs/requirements-gpu*.txt and envs/gpu-offline.txt disagree:\n" + "\n".join(differ)
    )
    assert {"sglang", "sglang-kernel", "flashinfer-python"} <= set(both)


def test_bundle_sglang_closure_is_in_the_gpu_set():
    gpu = read_pins(GPU_SET)
    closure = [
        n
        for n, (_, g) in bundle_pins().items()
        if g in ("serving_sglang", "sgl_kernel", "flashinfer")
    ]
    missing = sorted(n for n in closure if n not in gpu)
    assert not missing, f"bundled for SGLang but not in the GPU set: {missing}"


# --- (4) every bundled wheel suits CPython 3.12 on the box ---------------------------------


def builder_platforms() -> set[str]:
    """The manylinux tags tools/build_gpu_bundle.sh offers pip."""
    text = BUILDER.read_text(encoding="utf-8")
    plats = set(re.findall(r"\b(manylinux(?:1|2010|2014)_x86_64)\b", text))
    m = re.search(r"for \(\(minor = (\d+); minor <= (\d+); minor\+\+\)\)", text)
    assert m, "builder's manylinux_2_N loop not found"
    plats |= {f"manylinux_2_{k}_x86_64" for k in range(int(m.group(1)), int(m.group(2)) + 1)}
    return plats


def test_builder_offers_the_box_tags():
    plats = builder_platforms()
    # sglang 0.5.16's cp312 wheel is manylinux_2_34; the image's glibc is 2.39
    assert {"manylinux_2_34_x86_64", "manylinux_2_17_x86_64", "manylinux_2_39_x86_64"} <= plats
    assert "--python-version 3.12" in BUILDER.read_text(encoding="utf-8")


def wheel_ok_for_box(filename: str, plats: set[str]) -> bool:
    py, abi, plat = filename[:-4].split("-")[-3:]
    pys, abis, platforms = py.split("."), abi.split("."), plat.split(".")
    py_ok = any(p in ("cp312", "py3", "py2.py3") or p.startswith("py3") for p in pys) or any(
        p.startswith("cp3") and int(p[3:]) <= 12 and "abi3" in abis for p in pys
    )
    abi_ok = any(a in ("cp312", "abi3", "none") for a in abis)
    plat_ok = any(p == "any" or p in plats for p in platforms)
    return py_ok and abi_ok and plat_ok


def test_built_bundle_wheels_suit_the_box():
    manifest = REPO / ".gpu-bundle" / "MANIFEST.txt"
    if not manifest.is_file():
        pytest.skip("no .gpu-bundle/MANIFEST.txt here (build it with tools/build_gpu_bundle.sh)")
    plats = builder_platforms()
    files = [
        ln.split("\t")[1]
        for ln in manifest.read_text().splitlines()
        if ln and not ln.startswith("#")
    ]
    bad = [f for f in files if not wheel_ok_for_box(f, plats)]
    assert files and not bad, f"wheels that CPython 3.12 x86_64 (glibc 2.39) cannot install: {bad}"
    names = {norm(f.split("-")[0]) for f in files}
    listed = {n for n, (_, g) in bundle_pins().items()}
    # every wheel comes from the list (split pieces are <name>_splitN)
    stray = sorted(n for n in names if n not in listed and not re.search(r"-split\d+$", n))
    assert not stray, f"bundle wheels not in {BUNDLE_LIST.name}: {stray}"


# --- (2) the GPU set resolves (network) -----------------------------------------------------

NETWORK_STRICT = os.environ.get("STUDY_NETWORK_TESTS") == "1"


def pip(*args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def skip_or_fail(res: subprocess.CompletedProcess, what: str):
    text = res.stdout + res.stderr
    offline = re.search(
        r"NewConnectionError|NameResolutionError|Temporary failure in name resolution|"
        r"Network is unreachable|ConnectTimeout|Max retries exceeded",
        text,
    )
    if offline and not NETWORK_STRICT:
        pytest.skip(f"package index not reachable ({what})")
    raise AssertionError(f"{what} failed:\n{text[-4000:]}")


@pytest.fixture(scope="module")
def sdist_wheels(tmp_path_factory):
    """A find-links folder with the one sdist-only pin (connection-pool) built as a wheel."""
    folder = tmp_path_factory.mktemp("findlinks")
    ver = read_pins(ENVS / "requirements-study.txt").get("connection-pool") or \
        bundle_pins()["connection-pool"][0]  # fmt: skip
    res = pip("wheel", "-q", "--no-deps", "-w", str(folder), f"connection-pool=={ver}")
    if res.returncode:
        skip_or_fail(res, "building connection-pool's wheel")
    return folder


def target_args(python: str, plats: set[str]) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    for p in sorted(plats):
        args += ["--platform", p]
    return args


GPU_SET_PYTHONS = ["3.11", "3.12"]


@pytest.fixture(scope="module")
def gpu_set_reports(tmp_path_factory, sdist_wheels):
    """`make study` STACK=gpu's two pip calls, as dry runs for x86-64 Linux CPython 3.11 and
    3.12: all four at once (each waits on the index most of its time), by (python, call).

    pip reads the wheels' metadata only (the index serves it apart from the wheels), so the
    CUDA wheels' payloads are not downloaded.
    """
    folder = tmp_path_factory.mktemp("gpu_set")
    calls = {}
    for python in GPU_SET_PYTHONS:
        common = ["install", "--dry-run", "--ignore-installed", "-q", "--find-links",
                  str(sdist_wheels), *target_args(python, builder_platforms())]  # fmt: skip
        for call, extra, reqs in [("base", [], GPU_BASE), ("full", ["--no-deps"], GPU_SET)]:
            where = folder / f"py{python}-{call}"
            report = folder / f"py{python}-{call}.json"
            args = [*common, *extra, "--target", str(where), "--report", str(report),
                    "-r", str(reqs)]  # fmt: skip
            calls[python, call] = (report, reqs, args)
    with ThreadPoolExecutor(len(calls)) as pool:
        done = {key: pool.submit(pip, *args) for key, (_, _, args) in calls.items()}
        return {key: (done[key].result(), report, reqs) for key, (report, reqs, _) in calls.items()}


@pytest.mark.parametrize("python", GPU_SET_PYTHONS)
def test_gpu_set_resolves(python, gpu_set_reports):
    """The GPU set resolves for each Python to exactly its pins."""
    resolved = {}
    for call in ("base", "full"):
        res, report, reqs = gpu_set_reports[python, call]
        if res.returncode:
            skip_or_fail(res, f"resolving {reqs.name} ({call}) for {python}")
        for item in json.loads(report.read_text())["install"]:
            resolved[norm(item["metadata"]["name"])] = item["metadata"]["version"]
    for name, ver in GPU_PINS.items():
        assert resolved.get(name) == ver, f"{name}: resolved {resolved.get(name)}, pinned {ver}"
    # pip evaluates the files' python_version markers for the interpreter that runs it
    here = ".".join(map(str, sys.version_info[:2]))
    wanted = read_pins(GPU_SET, {"python_version": here})
    differ = {n: (v, resolved.get(n)) for n, v in wanted.items() if resolved.get(n) != v}
    assert not differ, f"resolved versions differ from the pins: {differ}"


def test_bundle_list_has_cp312_wheels(tmp_path, sdist_wheels):
    """Every pin of envs/gpu-offline.txt has a wheel pip would take for the box (the builder's
    tags), sglang-kernel (repacked by the builder) included."""
    reqs = tmp_path / "bundle.txt"
    reqs.write_text("".join(f"{n}=={v}\n" for n, (v, _) in bundle_pins().items()))
    res = pip("install", "--dry-run", "--ignore-installed", "-q", "--no-deps", "--find-links",
              str(sdist_wheels), *target_args("3.12", builder_platforms()),
              "--target", str(tmp_path / "t"), "--report", str(tmp_path / "r.json"),
              "-r", str(reqs))  # fmt: skip
    if res.returncode:
        skip_or_fail(res, "finding cp312 wheels for the bundle list")
    got = {
        norm(i["metadata"]["name"])
        for i in json.loads((tmp_path / "r.json").read_text())["install"]
    }
    assert got == set(bundle_pins())
