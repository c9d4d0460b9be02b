"""Small NVML helpers shared by the sweep worker and the power sampler."""

from __future__ import annotations

import os
import threading

# nvmlClocksEventReasons bits (formerly "throttle reasons"), as NVML's header names them.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def decode_reasons(mask: int | None) -> list[str]:
    """Names of the set bits of a clocks-event mask (unknown bits as hex)."""
    if not mask:
        return []
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    if unknown:
        names.append(hex(unknown))
    return names


def reason_names(value) -> list[str]:
    """The names in a ``throttle_reasons`` cell ("a,b", a list, '' or NaN): the inverse of
    joining :func:`decode_reasons` with commas."""
    if isinstance(value, list | tuple):
        items = [str(v) for v in value]
    elif isinstance(value, str):
        items = value.split(",")
    else:  # None, NaN, pd.NA: an empty cell
        items = []
    return [i.strip() for i in items if i.strip()]


def handle_for_torch_device(pynvml, index: int = 0):
    """The NVML handle of torch's CUDA device ``index`` (CUDA_VISIBLE_DEVICES aware)."""
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(index).uuid)
        uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        return pynvml.nvmlDeviceGetHandleByUUID(uuid)
    except Exception:  # noqa: BLE001 - fall back to the visible-devices mapping
        pass
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    nvml_index = int(ids[index]) if index < len(ids) and ids[index].isdigit() else index
    return pynvml.nvmlDeviceGetHandleByIndex(nvml_index)


class ClockWatch:
    """Polls one GPU's SM clock and clocks-event reasons while a timed region runs.

    Used as a context manager around sampling; ``result()`` gives the median SM clock and
    the union of reasons seen (idle excluded: it is set between launches, not a slowdown).
    """

    def __init__(self, handle, pynvml, period_s: float = 0.05):
        self.handle = handle
        self.pynvml = pynvml
        self.period_s = period_s
        self.clocks: list[int] = []
        self.mask = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _poll(self) -> None:
        nv = self.pynvml
        try:
            self.clocks.append(nv.nvmlDeviceGetClockInfo(self.handle, nv.NVML_CLOCK_SM))
            self.mask |= nv.nvmlDeviceGetCurrentClocksEventReasons(self.handle)
        except Exception:  # noqa: BLE001 - a field this GPU lacks: keep what we have
            pass

    def _run(self) -> None:
        while not self._stop.is_set():
            self._poll()
            self._stop.wait(self.period_s)

    def __enter__(self):
        self._poll()
        self._thread = threading.Thread(target=self._run, name="clock-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._poll()
        return False

    def result(self) -> dict:
        clocks = sorted(self.clocks)
        reasons = [r for r in decode_reasons(self.mask) if r != "gpu_idle"]
        return {
            "sm_clock_mhz": float(clocks[len(clocks) // 2]) if clocks else None,
            "throttle": ",".join(reasons),
        }


def open_clock_watch_factory(device: str):
    """A callable returning a fresh ClockWatch for torch's device 0, or None without NVML."""
    if device != "cuda":
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = handle_for_torch_device(pynvml, 0)
    except Exception:  # noqa: BLE001 - no NVML: clocks stay empty
        return None
    return lambda: ClockWatch(handle, pynvml)
