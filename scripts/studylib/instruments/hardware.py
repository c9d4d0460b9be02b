"""What the study ran on: GPUs, driver, CUDA, library versions, host, git commit."""

from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = [
    "torch", "flashinfer-python", "sglang-kernel", "sgl-kernel", "sglang", "vllm",
    "transformers", "triton", "snakemake", "pandas", "altair", "nvidia-ml-py",
]  # fmt: skip


#: Distribution names of one import under an older and a newer name (sgl_kernel was published
#: as sgl-kernel, then as sglang-kernel): where one is installed, the other's absence says
#: nothing.
DISTRIBUTION_ALIASES = {"sgl-kernel": "sglang-kernel", "sglang-kernel": "sgl-kernel"}


def package_versions(names=PACKAGES) -> dict:
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


# What a backend's measurements depend on besides the driver and CUDA: its libraries.
BACKEND_PACKAGES = {
    "torch": ["torch"],
    "flashinfer": ["torch", "flashinfer-python"],
    # The adapter finds the FP4 kernels in sgl-kernel or SGLang's JIT kernels (STUDY.md).
    "sgl_kernel": ["torch", "sglang-kernel", "sgl-kernel", "sglang"],
}


def nvml_driver() -> str | None:
    """The NVIDIA driver's version, without torch (None without a driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library or no driver: a machine without a GPU
        return None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        return driver.decode() if isinstance(driver, bytes) else driver
    finally:
        pynvml.nvmlShutdown()


def cuda_packages() -> dict:
    """The CUDA runtime wheels installed here (torch's own version names its CUDA build)."""
    return package_versions(_cuda_runtime_names())


@functools.cache
def _cuda_runtime_names() -> tuple[str, ...]:
    # One scan of every installed distribution per process: a DAG build asks for each job's
    # versions (16 times in the default), and each scan took 0.14 s on a 2-core CI machine.
    return tuple(sorted(
        dist.metadata["Name"]
        for dist in metadata.distributions()
        if (dist.metadata["Name"] or "").lower().startswith("nvidia-cuda-runtime")
    ))  # fmt: skip


def job_versions(backend: str | None = None, driver: str | None = None) -> dict:
    """The versions a job's results depend on, cheap enough for every DAG build (no torch
    import): the driver, the CUDA runtime wheels and the libraries of ``backend`` (torch's
    alone for None; every backend's for "all")."""
    if backend == "all":
        names = list(dict.fromkeys(n for names in BACKEND_PACKAGES.values() for n in names))
    else:
        names = BACKEND_PACKAGES.get(backend, ["torch"])
    return {"driver": driver, **cuda_packages(), **package_versions(names)}


def host_info() -> dict:
    cpu_model = platform.processor() or None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory_gib = None
    try:
        memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        pass
    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "memory_gib": round(memory_gib, 1) if memory_gib else None,
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def git_info(repo: str | os.PathLike = ".") -> dict:
    def git(*args):
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10
        )

    # A copy of the working tree without .git, or with a stale one (a lent GPU box's copy
    # carried a .git of an earlier commit, 2026-12-03, and read as dirty), is told its commit:
    # the variable wins over git.
    told = os.environ.get("STUDY_GIT_COMMIT") or None
    if told:
        return {"git_commit": told, "git_dirty": None}
    fallback = {"git_commit": None, "git_dirty": None}
    try:
        commit = git("rev-parse", "HEAD")
        if commit.returncode != 0:
            return fallback
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return {"git_commit": commit.stdout.strip(), "git_dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return fallback


def nvml_gpus() -> tuple[dict, list[dict], str | None]:
    """(nvml status, per-GPU NVML facts, driver version)."""
    try:
        import pynvml
    except ImportError as exc:
        return {"available": False, "error": f"nvidia-ml-py not installed: {exc}"}, [], None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError on machines without a driver
        return {"available": False, "error": f"{type(exc).__name__}: {exc}"}, [], None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpu = {"index": index}
            readers = {
                "name": lambda h: pynvml.nvmlDeviceGetName(h),
                "uuid": lambda h: pynvml.nvmlDeviceGetUUID(h),
                "power_limit_w": lambda h: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
                "max_sm_clock_mhz": lambda h: pynvml.nvmlDeviceGetMaxClockInfo(
                    h, pynvml.NVML_CLOCK_SM
                ),
                "max_mem_clock_mhz": lambda h: pynvml.nvmlDeviceGetMaxClockInfo(
                    h, pynvml.NVML_CLOCK_MEM
                ),
                "memory_total_mib": lambda h: pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**20,
                "pci_bus_id": lambda h: pynvml.nvmlDeviceGetPciInfo(h).busId,
                "compute_capability": lambda h: "{}.{}".format(
                    *pynvml.nvmlDeviceGetCudaComputeCapability(h)
                ),
            }
            for key, read in readers.items():
                try:
                    value = read(handle)
                    gpu[key] = value.decode() if isinstance(value, bytes) else value
                except Exception:  # noqa: BLE001 - a field this GPU lacks stays null
                    gpu[key] = None
            gpus.append(gpu)
        return {"available": True, "error": None}, gpus, driver
    finally:
        pynvml.nvmlShutdown()


def smallest_gpu_memory_mib(indices: list[int] | None) -> float | None:
    """The smallest total memory (MiB) of the GPUs at these NVML indices (None: every GPU);
    None without NVML."""
    _, gpus, _ = nvml_gpus()
    sizes = [gpu["memory_total_mib"] for gpu in gpus if gpu.get("memory_total_mib")
             and (indices is None or gpu["index"] in indices)]  # fmt: skip
    return min(sizes) if sizes else None


def torch_gpus() -> tuple[list[dict], str | None]:
    try:
        import torch
    except ImportError:
        return [], None
    gpus = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            gpus.append(
                {
                    "index": index,
                    "name": props.name,
                    "compute_capability": f"{props.major}.{props.minor}",
                    "sm_count": props.multi_processor_count,
                    "memory_total_mib": props.total_memory / 2**20,
                    "l2_cache_mib": getattr(props, "L2_cache_size", 0) / 2**20 or None,
                }
            )
    return gpus, torch.version.cuda


def collect(repo: str | os.PathLike = ".") -> dict:
    nvml, nvml_list, driver = nvml_gpus()
    torch_list, cuda_version = torch_gpus()
    # torch numbers devices as CUDA_VISIBLE_DEVICES shows them; NVML sees every GPU.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = []
    for tgpu in torch_list:
        match = next((g for g in nvml_list if g.get("name") == tgpu["name"]), {})
        if visible:
            ids = [v.strip() for v in visible.split(",")]
            if tgpu["index"] < len(ids) and ids[tgpu["index"]].isdigit():
                nvml_index = int(ids[tgpu["index"]])
                match = next((g for g in nvml_list if g["index"] == nvml_index), match)
        elif tgpu["index"] < len(nvml_list):
            match = nvml_list[tgpu["index"]]
        gpus.append({**{k: v for k, v in match.items() if k != "index"}, **tgpu})
    return {
        "device": "cuda" if gpus else "cpu",
        "host": host_info(),
        "gpus": gpus,
        "nvml": nvml,
        "nvml_gpus": nvml_list,
        "driver_version": driver,
        "cuda_version": cuda_version,
        "packages": package_versions(),
        "cuda_visible_devices": visible,
        **git_info(Path(repo)),
        "collected_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
