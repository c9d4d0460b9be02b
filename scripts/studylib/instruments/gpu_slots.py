"""Pin each GPU job to GPUs no other job of the workflow is using.

Snakemake counts ``resources: gpu=N`` but does not say which GPUs a job may use. A job takes
N per-GPU lock files (``fcntl.flock``, released by the kernel when the process exits, even
on a crash) under ``.snakemake/gpu-slots/`` and sets ``CUDA_VISIBLE_DEVICES`` to them before
anything initialises CUDA. ``--resources gpu=K`` caps how many GPU jobs run at once.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from pathlib import Path

log = logging.getLogger("study.gpu_slots")
LOCK_DIR = Path(".snakemake") / "gpu-slots"
_HELD: list = []  # open lock files: the locks live as long as this process
_SLOT: list[int] = []  # position of this job's first GPU among the machine's


def machine_gpus() -> list[str]:
    """The GPU ids a job may choose from: CUDA_VISIBLE_DEVICES if set, else every NVML GPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [v.strip() for v in visible.split(",") if v.strip()]
    try:
        import pynvml

        pynvml.nvmlInit()
        return [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # noqa: BLE001 - no NVML, no GPU to pin
        return []


def acquire(count: int, gpus: list[str], lock_dir: Path = LOCK_DIR, timeout_s: float | None = None,
            poll_s: float = 0.5) -> list[str]:  # fmt: skip
    """Lock ``count`` of ``gpus`` (waiting while others hold them); returns their ids."""
    if count > len(gpus):
        raise RuntimeError(f"a job needs {count} GPUs but this machine offers {len(gpus)}: {gpus}")
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        taken = []
        for gpu in gpus:
            handle = open(lock_dir / f"gpu-{gpu}.lock", "a+")  # noqa: SIM115 - held on purpose
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            taken.append((gpu, handle))
            if len(taken) == count:
                _HELD.extend(h for _, h in taken)
                return [g for g, _ in taken]
        for _, handle in taken:  # not enough free: give these back and wait
            handle.close()
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"no {count} free GPUs among {gpus} after {timeout_s} s")
        time.sleep(poll_s)


def release_all() -> None:
    for handle in _HELD:
        handle.close()
    _HELD.clear()
    _SLOT.clear()


def pin_gpus(smk) -> list[str] | None:
    """For a Snakemake job with ``resources: gpu=N``: lock N GPUs, expose only them."""
    count = int(getattr(smk.resources, "gpu", 0) or 0)
    gpus = machine_gpus()
    if count == 0 or not gpus:
        return None
    ids = acquire(count, gpus)
    _SLOT[:] = [min(gpus.index(g) for g in ids)]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
    log.info("pinned to GPU(s) %s of %s", ",".join(ids), ",".join(gpus))
    return ids


def slot_index() -> int:
    """A number no other running GPU job of this workflow on this machine has (0 unpinned).

    The position of the job's first GPU: jobs never share a GPU, so servers of jobs running
    side by side can take ``base port + slot_index()`` without clashing.
    """
    return _SLOT[0] if _SLOT else 0


__all__ = ["acquire", "machine_gpus", "pin_gpus", "release_all", "slot_index"]
