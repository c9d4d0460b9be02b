"""Power and utilisation sampling, one sampler for kernel loops and server decode alike.

A :class:`Sampler` polls one reader per device in a background thread (default 20 Hz):
instant and 1-s average power, the energy counter, SM and memory clocks, temperature, power
limit and clocks-event reasons. Where NVML GPM is supported it also takes GPM samples at a
lower rate and turns consecutive pairs (>= 100 ms apart) into SM util, SM occupancy,
any-tensor util and DRAM bandwidth util. Memory is bounded (a ring per device).

Energy of a window is the energy-counter delta over it (the caller synchronises the device
first; the counter, a dear read, is taken about once a second and each edge is reached by
integrating instant power from the last read), cross-checked against the integral of the
instant-power samples; both are reported, with the gap, rather than one hiding the other.
A machine without NVML gets a RAPL reader where ``/sys/class/powercap`` is readable, else
none: rows then say ``power_source: none`` and carry no invented number.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import statistics
import threading
import time
import weakref
from collections import deque
from pathlib import Path

from .nvml import decode_reasons

log = logging.getLogger("study.power")

COUNTER_MODULUS = 2**64  # nvmlDeviceGetTotalEnergyConsumption is an unsigned 64-bit mJ count
GPM_MIN_PAIR_S = 0.1  # NVML's guidance: GPM samples at least 100 ms apart
DEAD_AFTER = 20  # consecutive failed reads before a device is given up on


# ------------------------------------------------------------------------------------------
# Readers: one device each
# ------------------------------------------------------------------------------------------


def _field_value(field) -> float | None:
    """The numeric value of an nvmlFieldValue_t, or None when NVML returned an error."""
    if field.nvmlReturn != 0:
        return None
    value_type = field.valueType
    members = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return float(getattr(field.value, members.get(value_type, "uiVal")))


class NvmlReader:
    """Reads one GPU through pynvml. Fields a GPU lacks come back as None."""

    source = "nvml"

    GPM_METRICS = {
        "sm_util": "NVML_GPM_METRIC_SM_UTIL",
        "sm_occupancy": "NVML_GPM_METRIC_SM_OCCUPANCY",
        "tensor_util": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
        "dram_util": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    }

    def __init__(self, nvml, index: int):
        self.nvml = nvml
        self.index = index
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = nvml.nvmlDeviceGetName(self.handle)
        self.name = name.decode() if isinstance(name, bytes) else name
        # Which chip (two H200s differ by 5-10 % at the cap): runs compare on it.
        try:
            uuid = nvml.nvmlDeviceGetUUID(self.handle)
            self.uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        except Exception:  # noqa: BLE001 - NVMLError, or a binding without the call
            self.uuid = None
        self._gpm = None

    def _try(self, fn, *args):
        try:
            return fn(self.handle, *args)
        except self.nvml.NVMLError:
            return None

    def read(self, slow: bool = True, energy: bool = True) -> dict:
        """Instant and 1-s average power (one batched field query); with ``energy`` the
        energy counter too; with ``slow`` also clocks, temperature, power limit and
        clocks-event reasons (five more calls).

        The energy counter is the expensive read: about 3.9 ms of CPU per call on the H200
        (power fields take 20-75 us), so the sampler reads it about once a second.
        """
        nv = self.nvml
        instant = average = counter = None
        ids = [nv.NVML_FI_DEV_POWER_INSTANT, nv.NVML_FI_DEV_POWER_AVERAGE]
        if energy:
            ids.append(nv.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION)
        try:
            values = [_field_value(f) for f in nv.nvmlDeviceGetFieldValues(self.handle, ids)]
            instant, average = values[0], values[1]
            counter = values[2] if energy else None
        except nv.NVMLError:
            pass
        if average is None:  # older drivers: nvmlDeviceGetPowerUsage is the 1-s average
            average = self._try(nv.nvmlDeviceGetPowerUsage)
        if energy and counter is None:
            counter = self._try(nv.nvmlDeviceGetTotalEnergyConsumption)
        sample = {
            "power_w": instant / 1000 if instant is not None else None,
            "power_avg_w": average / 1000 if average is not None else None,
            "energy_mj": int(counter) if counter is not None else None,
        }
        if slow:
            limit = self._try(nv.nvmlDeviceGetEnforcedPowerLimit)
            # Renamed from "ClocksThrottleReasons" in newer NVML; either is the same mask.
            reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            reasons_fn = reasons_fn or nv.nvmlDeviceGetCurrentClocksThrottleReasons
            sample.update(
                sm_clock_mhz=self._try(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM),
                mem_clock_mhz=self._try(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM),
                temp_c=self._try(nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU),
                power_limit_w=limit / 1000 if limit is not None else None,
                reasons=self._try(reasons_fn),
            )
        if all(v is None for v in sample.values()):
            raise RuntimeError(f"GPU {self.index}: every NVML read failed")
        return sample

    def gpm_supported(self) -> bool:
        try:
            return bool(self.nvml.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice)
        except (self.nvml.NVMLError, AttributeError):
            return False

    def gpm_sample(self):
        sample = self.nvml.nvmlGpmSampleAlloc()
        return self.nvml.nvmlGpmSampleGet(self.handle, sample)

    def gpm_free(self, sample) -> None:
        try:
            self.nvml.nvmlGpmSampleFree(sample)
        except self.nvml.NVMLError:
            pass

    def gpm_metrics(self, first, second) -> dict:
        nv = self.nvml
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self.GPM_METRICS)
        request.sample1 = first
        request.sample2 = second
        names = list(self.GPM_METRICS)
        for i, name in enumerate(names):
            request.metrics[i].metricId = getattr(nv, self.GPM_METRICS[name])
        nv.nvmlGpmMetricsGet(request)
        return {
            name: (request.metrics[i].value if request.metrics[i].nvmlReturn == 0 else None)
            for i, name in enumerate(names)
        }


class RaplReader:
    """CPU package energy from /sys/class/powercap (Intel RAPL); power from counter deltas."""

    source = "rapl"

    def __init__(self, zone: Path):
        self.zone = Path(zone)
        self.index = int(self.zone.name.rsplit(":", 1)[-1]) if ":" in self.zone.name else 0
        self.name = (self.zone / "name").read_text().strip()
        self.max_uj = int((self.zone / "max_energy_range_uj").read_text())
        self._last: tuple[float, int] | None = None

    def read(self, slow: bool = True, energy: bool = True) -> dict:
        now = time.monotonic()
        energy_uj = int((self.zone / "energy_uj").read_text())
        power = None
        if self._last is not None and now > self._last[0]:
            delta = (energy_uj - self._last[1]) % (self.max_uj + 1)
            power = delta / 1e6 / (now - self._last[0])
        self._last = (now, energy_uj)
        return {"power_w": power, "power_avg_w": None, "energy_mj": energy_uj / 1000}

    def gpm_supported(self) -> bool:
        return False


def open_readers(nvml_indices: list[int] | None = None) -> tuple[list, str, str | None]:
    """(readers, power_source, why not NVML) for the GPUs at ``nvml_indices`` (None: all)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        indices = list(range(count)) if nvml_indices is None else nvml_indices
        readers = [NvmlReader(pynvml, i) for i in indices]
        if readers:
            return readers, "nvml", None
        reason = "NVML sees no GPU"
    except Exception as exc:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, ...
        reason = f"{type(exc).__name__}: {exc}"
    zones = sorted(Path("/sys/class/powercap").glob("intel-rapl:[0-9]"))
    readers = []
    for zone in zones:
        try:
            reader = RaplReader(zone)
            reader.read()
            readers.append(reader)
        except (OSError, ValueError):
            continue
    if readers:
        return readers, "rapl", reason
    return [], "none", reason


def visible_nvml_indices() -> list[int] | None:
    """NVML indices of the GPUs CUDA_VISIBLE_DEVICES exposes (None: every GPU)."""

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or visible.strip() == "":
        return None
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if all(v.isdigit() for v in ids):
        return [int(v) for v in ids]
    return None  # UUIDs or MIG names: sample every GPU rather than guess


# ------------------------------------------------------------------------------------------
# The sampler
# ------------------------------------------------------------------------------------------

_LIVE: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    """No sampler thread outlives the interpreter's normal exit."""
    for sampler in list(_LIVE):
        sampler.stop()


class Sampler:
    """Background sampling of every reader; use as a context manager or start()/stop()."""

    def __init__(
        self,
        readers: list,
        rate_hz: float = 20.0,
        slow_every: int = 10,
        energy_period_s: float = 1.0,
        gpm_period_s: float = 1.0,
        max_samples: int = 200_000,
        clock=time.monotonic,
        gpm: bool = True,
    ):
        self.readers = list(readers)
        self.period_s = 1.0 / rate_hz
        # Power and energy every tick (one batched call); clocks, temperature, limit and
        # reasons every `slow_every` ticks (2 Hz at 20 Hz).
        self.slow_every = max(1, slow_every)
        # The energy counter about once a second (its read is ~50x dearer than power's);
        # window energy anchors on these reads and integrates the power samples to the edges.
        self.energy_every = max(1, round(energy_period_s * rate_hz))
        self._ticks = 0
        self.gpm_period_s = max(gpm_period_s, GPM_MIN_PAIR_S)
        self.clock = clock
        self.samples = {r.index: deque(maxlen=max_samples) for r in self.readers}
        self.gpm = {r.index: deque(maxlen=max_samples) for r in self.readers}
        self.errors: list[tuple[float, int, str]] = []
        self.dead: set[int] = set()
        self.cpu_s = 0.0  # CPU time the sampling thread used
        self.wall_s = 0.0
        self._failures = {r.index: 0 for r in self.readers}
        # gpm=False: power, clocks and reasons only (what GPM sampling costs is measured
        # against this: tools/decode_load_probe.py).
        self._gpm_supported = {r.index: bool(gpm) and r.gpm_supported() for r in self.readers}
        self._gpm_last: dict[int, tuple[float, object]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def gpm_supported(self) -> dict[int, bool]:
        return dict(self._gpm_supported)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Sampler:
        if self._thread is not None:
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="power-sampler", daemon=True)
        _LIVE.add(self)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        for index, (_, sample) in list(self._gpm_last.items()):
            reader = self._reader(index)
            if reader is not None:
                reader.gpm_free(sample)
        self._gpm_last.clear()
        _LIVE.discard(self)

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _reader(self, index: int):
        return next((r for r in self.readers if r.index == index), None)

    # -- sampling ---------------------------------------------------------------------------

    def _run(self) -> None:
        cpu0, wall0 = time.thread_time(), time.monotonic()
        next_tick = self.clock()
        next_gpm = next_tick
        try:
            while not self._stop.is_set():
                self.poll()
                now = self.clock()
                if now >= next_gpm:
                    self.poll_gpm()
                    next_gpm = now + self.gpm_period_s
                next_tick += self.period_s
                if next_tick < now:  # fell behind (a slow read): skip, never burst
                    next_tick = now + self.period_s
                self._stop.wait(max(0.0, next_tick - self.clock()))
        except Exception as exc:  # noqa: BLE001 - the sampler must never take the job down
            log.exception("power sampler stopped: %s", exc)
            self.errors.append((self.clock(), -1, f"sampler stopped: {exc}"))
        finally:
            self.cpu_s += time.thread_time() - cpu0
            self.wall_s += time.monotonic() - wall0

    def poll(self) -> None:
        """One sample of every live reader (called by the thread; tests call it directly)."""
        slow = self._ticks % self.slow_every == 0
        energy = self._ticks % self.energy_every == 0
        self._ticks += 1
        for reader in self.readers:
            if reader.index in self.dead:
                continue
            t = self.clock()
            try:
                sample = reader.read(slow=slow, energy=energy)
            except Exception as exc:  # noqa: BLE001 - a device erroring mid-run
                self._failures[reader.index] += 1
                self.errors.append((t, reader.index, f"{type(exc).__name__}: {exc}"))
                if self._failures[reader.index] >= DEAD_AFTER:
                    self.dead.add(reader.index)
                    log.error("GPU %s: %d failed reads in a row, no longer sampled",
                              reader.index, DEAD_AFTER)  # fmt: skip
                continue
            self._failures[reader.index] = 0
            sample["t"] = t
            sample["t_wall"] = time.time()
            with self._lock:
                self.samples[reader.index].append(sample)

    def poll_gpm(self) -> None:
        for reader in self.readers:
            index = reader.index
            if not self._gpm_supported.get(index) or index in self.dead:
                continue
            t = self.clock()
            try:
                sample = reader.gpm_sample()
            except Exception as exc:  # noqa: BLE001
                self.errors.append((t, index, f"GPM sample: {exc}"))
                continue
            previous = self._gpm_last.get(index)
            if previous is None or t - previous[0] < GPM_MIN_PAIR_S:
                if previous is None:
                    self._gpm_last[index] = (t, sample)
                else:
                    reader.gpm_free(sample)  # too close to pair: keep the older one
                continue
            try:
                metrics = reader.gpm_metrics(previous[1], sample)
                with self._lock:
                    self.gpm[index].append({"t0": previous[0], "t1": t, **metrics})
            except Exception as exc:  # noqa: BLE001
                self.errors.append((t, index, f"GPM metrics: {exc}"))
            reader.gpm_free(previous[1])
            self._gpm_last[index] = (t, sample)

    # -- results ----------------------------------------------------------------------------

    def timeline(self) -> list[dict]:
        """Every sample of every device, as flat rows."""
        rows = []
        with self._lock:
            for index, samples in self.samples.items():
                for sample in samples:
                    rows.append({"gpu": index, **sample})
        for row in rows:
            row["reasons_names"] = ",".join(decode_reasons(row.get("reasons")))
        return rows

    def window(self, t0: float, t1: float) -> list[dict]:
        """Statistics of [t0, t1] per device (see :func:`window_stats`).

        Energy and power at the window's edges are interpolated between the samples around
        them, so while running this first waits (a few periods at most) for a sample after t1.
        """
        deadline = self.clock() + 3 * self.period_s + 0.5
        while self.running and self.clock() < deadline and not self._sampled_after(t1):
            time.sleep(self.period_s / 4)
        with self._lock:
            per_gpu = {i: list(s) for i, s in self.samples.items()}
            gpm = {i: list(g) for i, g in self.gpm.items()}
        out = []
        for reader in self.readers:
            stats = window_stats(per_gpu[reader.index], gpm[reader.index], t0, t1)
            out.append({"gpu": reader.index, "gpu_name": reader.name, **stats})
        return out

    def _sampled_after(self, t: float) -> bool:
        with self._lock:
            live = [s for i, s in self.samples.items() if i not in self.dead]
            return all(samples and samples[-1]["t"] >= t for samples in live)

    def cpu_fraction(self) -> float | None:
        """Share of one core the sampling thread used (after stop())."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else None


# ------------------------------------------------------------------------------------------
# Window statistics
# ------------------------------------------------------------------------------------------


def _interp_points(points: list[tuple[float, float]], t: float) -> float | None:
    """Linear interpolation at t between the (time, value) points bracketing it."""
    before = [p for p in points if p[0] <= t]
    after = [p for p in points if p[0] >= t]
    if not before or not after:
        return None
    (ta, va), (tb, vb) = before[-1], after[0]
    if tb == ta:
        return va
    return va + (vb - va) * (t - ta) / (tb - ta)


def _interp(samples: list[dict], key: str, t: float) -> float | None:
    return _interp_points([(s["t"], s[key]) for s in samples if s.get(key) is not None], t)


def _energy_series(samples: list[dict]) -> list[tuple[float, float]]:
    """(t, mJ since the first sample): the counter unwrapped with integer arithmetic, so a
    wrap of the 64-bit counter, and float rounding near 2**64, cost nothing."""
    points = [(s["t"], int(s["energy_mj"])) for s in samples if s.get("energy_mj") is not None]
    series, total = [], 0
    for i, (t, value) in enumerate(points):
        if i:
            total += (value - points[i - 1][1]) % COUNTER_MODULUS
        series.append((t, float(total)))
    return series


def counter_delta_j(samples: list[dict], t0: float, t1: float) -> float | None:
    """Energy-counter delta over [t0, t1] in J, wrap-safe; None when no read precedes t0.

    The counter is read about once a second, so each edge is anchored on the last read
    before it and the instant-power samples are integrated from there to the edge: the
    counter covers the window but for under a read period at each end. Without power
    samples the counter is interpolated linearly between its reads.
    """
    series = _energy_series(samples)

    def energy_at(t: float) -> float | None:
        before = [p for p in series if p[0] <= t]
        if not before:
            return None
        ta, ea = before[-1]
        if ta == t:
            return ea
        extra = integrate_power_j(samples, ta, t)
        if extra is None:
            return _interp_points(series, t)
        return ea + 1000.0 * extra

    e0, e1 = energy_at(t0), energy_at(t1)
    if e0 is None or e1 is None:
        return None
    return (e1 - e0) / 1000.0


def integrate_power_j(samples: list[dict], t0: float, t1: float) -> float | None:
    """Trapezoidal integral of instant power over [t0, t1] (edges interpolated)."""
    inside = [(s["t"], s["power_w"]) for s in samples
              if t0 < s["t"] < t1 and s.get("power_w") is not None]  # fmt: skip
    p0, p1 = _interp(samples, "power_w", t0), _interp(samples, "power_w", t1)
    if p0 is None or p1 is None:
        return None
    points = [(t0, p0), *inside, (t1, p1)]
    return sum(
        (tb - ta) * (pa + pb) / 2 for (ta, pa), (tb, pb) in zip(points, points[1:], strict=False)
    )


def _median(values) -> float | None:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else None


def window_stats(samples: list[dict], gpm: list[dict], t0: float, t1: float) -> dict:
    seconds = t1 - t0
    inside = [s for s in samples if t0 <= s["t"] <= t1]
    energy = counter_delta_j(samples, t0, t1)
    integral = integrate_power_j(samples, t0, t1)
    mask = 0
    for s in inside:
        mask |= int(s.get("reasons") or 0)
    limit = _median(s.get("power_limit_w") for s in inside)
    avg_w = energy / seconds if energy is not None and seconds > 0 else None
    pairs = [g for g in gpm if g["t0"] >= t0 and g["t1"] <= t1]

    def gpm_mean(key):
        values = [g[key] for g in pairs if g.get(key) is not None]
        return sum(values) / len(values) if values else None

    temps = [s["temp_c"] for s in inside if s.get("temp_c") is not None]
    return {
        "seconds": seconds,
        "samples": len(inside),
        "energy_j": energy,
        "energy_j_samples": integral,
        "energy_gap_pct": (100.0 * (integral - energy) / energy)
        if energy and integral is not None
        else None,
        "avg_w": avg_w,
        "avg_w_samples": integral / seconds if integral is not None and seconds > 0 else None,
        "power_limit_w": limit,
        "pct_limit": 100.0 * avg_w / limit if avg_w is not None and limit else None,
        "sm_clock_mhz": _median(s.get("sm_clock_mhz") for s in inside),
        "mem_clock_mhz": _median(s.get("mem_clock_mhz") for s in inside),
        "temp_c_max": max(temps) if temps else None,
        "throttle_reasons": ",".join(r for r in decode_reasons(mask) if r != "gpu_idle"),
        "gpm_pairs": len(pairs),
        "sm_util": gpm_mean("sm_util"),
        "sm_occupancy": gpm_mean("sm_occupancy"),
        "tensor_util": gpm_mean("tensor_util"),
        "dram_util": gpm_mean("dram_util"),
    }
