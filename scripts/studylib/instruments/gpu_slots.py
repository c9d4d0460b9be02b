"""Each measuring job holds the devices it uses, across every Snakemake in this folder.

Snakemake counts ``resources: gpu=N`` but does not say which GPUs a job may use, and its
count holds inside one Snakemake only. A job takes N per-GPU lock files (``fcntl.flock``,
released by the kernel when the process exits, even on a crash) under
``.snakemake/gpu-slots/`` and sets ``CUDA_VISIBLE_DEVICES`` to them before anything
initialises CUDA; a job on the CPU (no GPU, or ``device: cpu``) holds ``cpu.lock`` there.
``--resources gpu=K`` caps how many GPU jobs run at once.

Each lock file records its holder: pid, command, job and the Snakemake it belongs to
(``serving.guard.RUN_ENV``). A device held by a job of the same Snakemake is waited for; one
held by a job of another Snakemake (a second run in this folder with other targets, or a job
left running by a Snakemake that was killed) stops the job at once, in one line naming the
holder: two timing jobs on one device spoil both, and Snakemake's one-job-at-a-time rule
does not reach across runs. The one exception: a job of another Snakemake making this job's
very outputs is waited for (``_acquire_unless_made_meanwhile``). The job takes its devices
before it touches anything: stopped there, it has written nothing and removed nothing (the
journal of a killed sweep stays for the rerun).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from .serving.guard import RUN_ENV, cmdline, id_pid, process_alive, process_id

log = logging.getLogger("study.gpu_slots")
LOCK_DIR = Path(".snakemake") / "gpu-slots"
CPU = "cpu"
_HELD: list = []  # open lock files: the locks live as long as this process
_SLOT: list[int] = []  # position of this job's first GPU among the machine's


class DeviceBusy(RuntimeError):
    """A device this job needs is held by a job of another Snakemake (the message names it;
    ``holders``: (device, record) of each such job)."""

    def __init__(self, message: str, holders: list[tuple[str, dict]] = ()):
        super().__init__(message)
        self.holders = list(holders)


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


def lock_path(lock_dir: Path, device: str) -> Path:
    return lock_dir / (f"{CPU}.lock" if device == CPU else f"gpu-{device}.lock")


def device_name(device: str) -> str:
    return "the CPU" if device == CPU else f"GPU {device}"


def holder(path: Path) -> dict | None:
    """The record a lock file's last holder wrote (None: none yet, or unreadable)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8") or "null")
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and "pid" in record else None


def _record(handle, job: str, outputs: list[str]) -> None:
    """Who holds this lock (``holder``): this process, its job and outputs, its Snakemake."""
    record = {"pid": process_id(), "cmd": cmdline(os.getpid()), "job": job,
              "outputs": outputs, "snakemake": os.environ.get(RUN_ENV)}  # fmt: skip
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps(record) + "\n")
    handle.flush()


def _foreign(record: dict | None) -> bool:
    """Held by a live job of another Snakemake. A job of this Snakemake is worth waiting for,
    and so is a holder not recorded yet (it has just taken the lock) or a record left by a
    process that is gone (another job holds the file for a moment while it tries)."""
    return (record is not None and process_alive(record["pid"])
            and record.get("snakemake") != os.environ.get(RUN_ENV))  # fmt: skip


def describe_holder(device: str, record: dict) -> str:
    """'the CPU is held by pid N (command), rule … of …, run by …'."""
    pid = id_pid(record["pid"])
    where = f"pid {pid} ({record.get('cmd') or cmdline(pid)})"
    run = record.get("snakemake")
    if run is None:
        owner = "not run by a Snakemake of this study"
    elif process_alive(run):
        owner = f"run by Snakemake pid {id_pid(run)}, another Snakemake in this folder"
    else:
        owner = f"left running by Snakemake pid {id_pid(run)}, which is gone (killed?)"
    return f"{device_name(device)} is held by {where}, {record.get('job') or 'a job'}, {owner}"


def busy_message(busy: list[tuple[str, dict]]) -> str:
    orphans = [r for _, r in busy if r.get("snakemake") and not process_alive(r["snakemake"])]
    then = (
        f"it stops by itself within seconds; or stop it (kill {id_pid(orphans[0]['pid'])}), "
        "then run again"
        if orphans
        else "run this again once it has finished"
    )
    held = "; ".join(describe_holder(device, record) for device, record in busy)
    return (f"{held}: two timing jobs on one device spoil both, so this job stops without "
            f"measuring; {then}")  # fmt: skip


def acquire(count: int, gpus: list[str], lock_dir: Path = LOCK_DIR, timeout_s: float | None = None,
            poll_s: float = 0.5, job: str = "", outputs: list[str] = (),
            free_for_s: float = 0.0) -> list[str]:  # fmt: skip
    """Lock ``count`` of ``gpus`` (waiting while jobs of this Snakemake hold them); returns
    their ids. Held by another Snakemake's jobs so that ``count`` cannot be had: DeviceBusy.
    ``free_for_s``: take them only once ``count`` have been free that long, each time seen
    (a job that yields to those Snakemake starts: ``YIELD_S``)."""
    if count > len(gpus):
        raise RuntimeError(f"a job needs {count} GPUs but this machine offers {len(gpus)}: {gpus}")
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    free_since = None
    while True:
        taken, busy = [], []
        for gpu in gpus:
            path = lock_path(lock_dir, gpu)
            handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held on purpose
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                busy.append((gpu, holder(path)))
                continue
            taken.append((gpu, handle))
            if len(taken) == count:
                free_since = time.monotonic() if free_since is None else free_since
                if time.monotonic() - free_since < free_for_s:
                    break  # free, but not yet for long enough: give them back and look again
                for _, held in taken:
                    _record(held, job, list(outputs))
                _HELD.extend(h for _, h in taken)
                return [g for g, _ in taken]
        for _, handle in taken:  # not enough free (or not for long enough): give these back
            handle.close()
        if len(taken) < count:
            free_since = None
        foreign = [(gpu, record) for gpu, record in busy if _foreign(record)]
        if len(gpus) - len(foreign) < count:
            raise DeviceBusy(busy_message(foreign), foreign)
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"no {count} free GPUs among {gpus} after {timeout_s} s")
        time.sleep(poll_s)


def release_all() -> None:
    for handle in _HELD:
        handle.close()
    _HELD.clear()
    _SLOT.clear()


#: A job outside Snakemake's count of GPU jobs (``resources: gpu=0``, ``count`` given: a decode
#: job that starts its server before it holds the device) takes its devices only once they
#: have been free this long: after a job's end, the next one Snakemake starts held the device
#: within 1.2-1.9 s on the H200 box (examples/h200-2026-12-06-default), so such a job goes after
#: every measuring job pending, in the order the jobs ran before (their thermal history kept).
YIELD_S = 5.0


def pin_gpus(smk, count: int | None = None) -> list[str] | None:
    """For a Snakemake job with ``resources: gpu=N`` (or ``count``: one outside Snakemake's
    count, which yields, ``YIELD_S``): lock N GPUs, expose only them (None where it runs on the
    CPU: no GPU, or ``device: cpu``; it holds the CPU then)."""
    counted = int(getattr(smk.resources, "gpu", 0) or 0)
    count = counted if count is None else count
    free_for_s = 0.0 if counted else YIELD_S
    if count == 0:
        return None
    config = getattr(smk, "config", None) or {}
    gpus = [] if config.get("device") == CPU else machine_gpus()
    outputs = [str(path) for path in getattr(smk, "output", []) or []]
    job = f"rule {getattr(smk, 'rule', '?')}" + (f" of {outputs[0]}" if outputs else "")
    if not gpus:
        _acquire_unless_made_meanwhile(1, [CPU], job, outputs, free_for_s)
        log.info("holding the CPU (%s)", lock_path(LOCK_DIR, CPU))
        return None
    waiting = time.monotonic()
    ids = _acquire_unless_made_meanwhile(count, gpus, job, outputs, free_for_s)
    _SLOT[:] = [min(gpus.index(g) for g in ids)]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
    log.info("pinned to GPU(s) %s of %s after %.1f s", ",".join(ids), ",".join(gpus),
             time.monotonic() - waiting)  # fmt: skip
    return ids


#: How often a job waiting for its twin (below) looks whether it has ended.
TWIN_POLL_S = 1.0


def _acquire_unless_made_meanwhile(count: int, gpus: list[str], job: str, outputs: list[str],
                                   free_for_s: float = 0.0) -> list[str]:  # fmt: skip
    """``acquire``; where a device is held by another Snakemake's job making these very
    outputs (two Snakemakes asked for one target and the check before their first jobs
    could not see it: the holder had not taken its device yet), wait for that job rather than
    stop: Snakemake removes a failed job's outputs, which would be the other job's finished
    work. Once it has ended, its outputs present: this job exits at once, measuring nothing
    twice; absent (it failed): this job measures them."""
    try:
        return acquire(count, gpus, job=job, outputs=outputs, free_for_s=free_for_s)
    except DeviceBusy as busy:
        twins = [
            r
            for _, r in busy.holders
            if outputs and sorted(r.get("outputs") or []) == sorted(outputs)
        ]
        if not twins:
            raise
        pid = id_pid(twins[0]["pid"])
        log.warning("%s: made now by pid %s (%s), a job of another Snakemake in this folder; "
                    "waiting for it to end rather than measuring it twice", outputs[0], pid,
                    twins[0].get("job") or "a job")  # fmt: skip
        while process_alive(twins[0]["pid"]):
            time.sleep(TWIN_POLL_S)
    if all(Path(path).exists() for path in outputs):
        log.info("%s: made by that job; this one measures nothing", outputs[0])
        raise SystemExit(0)
    log.warning("%s: that job ended without it; this job measures it", outputs[0])
    return acquire(count, gpus, job=job, outputs=outputs, free_for_s=free_for_s)


def running_holders(lock_dir: Path = LOCK_DIR) -> list[tuple[str, dict]]:
    """(device, record) of every device whose recorded holder still runs, by the lock files'
    records (a record of a holder that is gone is left behind and ignored)."""
    found = []
    for path in sorted(lock_dir.glob("*.lock")) if lock_dir.is_dir() else []:
        record = holder(path)
        if record is not None and process_alive(record["pid"]):
            found.append((CPU if path.stem == CPU else path.stem.removeprefix("gpu-"), record))
    return found


def left_running(lock_dir: Path = LOCK_DIR) -> list[tuple[str, dict]]:
    """Devices held by a job whose Snakemake is gone (a job left by a killed run)."""
    return [(device, record) for device, record in running_holders(lock_dir)
            if record.get("snakemake") and not process_alive(record["snakemake"])]  # fmt: skip


#: Where a job whose server starts before it holds its devices (decode.prestart) locks that
#: server's port: two such servers wait at their gates side by side, so the port of the
#: job's slot (``base + slot_index()``, taken only once it holds a device) cannot be theirs.
PORT_LOCK_DIR = Path(".snakemake") / "server-ports"


def hold_port(first: int, bindable: Callable[[int], bool], lock_dir: Path | None = None,
              span: int = 1000) -> int:  # fmt: skip
    """The first port from ``first`` that no other process of this folder holds by its lock
    file and that ``bindable`` finds free now, held (its lock) for this process's life."""
    lock_dir = lock_dir or PORT_LOCK_DIR
    lock_dir.mkdir(parents=True, exist_ok=True)
    for port in range(first, min(first + span, 65536)):
        handle = open(lock_dir / f"port-{port}.lock", "a+", encoding="utf-8")  # noqa: SIM115
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        if not bindable(port):
            handle.close()
            continue
        _record(handle, f"server port {port}", [])
        _HELD.append(handle)
        return port
    raise RuntimeError(f"no free port for a server from {first} to {first + span - 1} "
                       f"(locks under {lock_dir})")  # fmt: skip


def slot_index() -> int:
    """A number no other running GPU job of this workflow on this machine has (0 unpinned).

    The position of the job's first GPU: jobs never share a GPU, so servers of jobs running
    side by side can take ``base port + slot_index()`` without clashing.
    """
    return _SLOT[0] if _SLOT else 0


__all__ = ["DeviceBusy", "acquire", "hold_port", "left_running", "machine_gpus", "pin_gpus",
           "release_all", "running_holders", "slot_index"]  # fmt: skip
