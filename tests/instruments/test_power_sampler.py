"""The power sampler, behind a fake NVML: windows, counters, GPM, failures, shutdown."""

import math
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from helpers import ROOT
from studylib.instruments.power_sampler import (
    COUNTER_MODULUS,
    DEAD_AFTER,
    NvmlReader,
    Sampler,
    counter_delta_j,
    integrate_power_j,
    window_stats,
)


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class FakeReader:
    """A GPU drawing ``watts(t)``; its energy counter integrates exactly that."""

    source = "nvml"

    def __init__(self, clock, index=0, watts=lambda t: 100.0, energy0_mj=0.0, gpm=True,
                 reasons=0, fail_from=None):  # fmt: skip
        self.clock, self.index, self.name = clock, index, f"fake{index}"
        self.watts, self.energy_mj, self.last_t = watts, energy0_mj, clock()
        self.gpm, self.reasons, self.fail_from = gpm, reasons, fail_from
        self.freed = 0

    def read(self, slow=True, energy=True):
        t = self.clock()
        if self.fail_from is not None and t >= self.fail_from:
            raise RuntimeError("GPU fell off the bus")
        self.energy_mj = (self.energy_mj + self.watts(t) * (t - self.last_t) * 1000) % (
            COUNTER_MODULUS
        )
        self.last_t = t
        sample = {"power_w": self.watts(t), "power_avg_w": self.watts(t),
                  "energy_mj": int(self.energy_mj) if energy else None}  # fmt: skip
        if slow:
            sample.update(sm_clock_mhz=1980, mem_clock_mhz=3201, temp_c=40 + t % 5,
                          power_limit_w=700.0, reasons=self.reasons)  # fmt: skip
        return sample

    def gpm_supported(self):
        return self.gpm

    def gpm_sample(self):
        return self.clock()

    def gpm_free(self, sample):
        self.freed += 1

    def gpm_metrics(self, first, second):
        return {"sm_util": 80.0, "sm_occupancy": 40.0, "tensor_util": 60.0 if second > 1005 else 0,
                "dram_util": 20.0}  # fmt: skip


def drive(sampler, clock, seconds, dt=0.05):
    end = clock.t + seconds
    while clock.t < end - 1e-9:
        clock.t += dt
        sampler.poll()
        sampler.poll_gpm()


def test_window_energy_counter_and_integral_agree_on_constant_power():
    clock = FakeClock()
    reader = FakeReader(clock, watts=lambda t: 250.0)
    sampler = Sampler([reader], clock=clock)
    sampler.poll()
    drive(sampler, clock, 10)
    (w,) = sampler.window(1002.0, 1008.0)
    assert w["seconds"] == pytest.approx(6.0)
    assert w["energy_j"] == pytest.approx(1500.0, rel=1e-6)
    assert w["energy_j_samples"] == pytest.approx(1500.0, rel=1e-6)
    assert w["avg_w"] == pytest.approx(250.0)
    assert w["pct_limit"] == pytest.approx(250 / 7)
    assert abs(w["energy_gap_pct"]) < 1e-6


def test_gap_is_reported_when_samples_miss_a_spike():
    # A 10 ms 2 kW spike between samples: the counter sees it, 20 Hz samples do not.
    clock = FakeClock()
    reader = FakeReader(clock, watts=lambda t: 100.0)
    sampler = Sampler([reader], clock=clock)
    sampler.poll()
    drive(sampler, clock, 2)
    reader.energy_mj += 2000 * 0.01 * 1000  # the spike's energy lands in the counter
    drive(sampler, clock, 2)
    (w,) = sampler.window(1000.5, 1003.5)
    assert w["energy_j"] == pytest.approx(300 + 20, rel=1e-3)
    assert w["energy_j_samples"] == pytest.approx(300, rel=1e-3)
    assert w["energy_gap_pct"] == pytest.approx(100 * (300 - 320) / 320, rel=1e-2)


def test_counter_wrap():
    samples = [
        {"t": 0.0, "energy_mj": COUNTER_MODULUS - 50_000, "power_w": 100.0},
        {"t": 1.0, "energy_mj": 50_000, "power_w": 100.0},  # wrapped: +100 J
        {"t": 2.0, "energy_mj": 150_000, "power_w": 100.0},
    ]
    assert counter_delta_j(samples, 0.0, 2.0) == pytest.approx(200.0)
    assert counter_delta_j(samples, 0.5, 1.5) == pytest.approx(100.0)
    assert integrate_power_j(samples, 0.0, 2.0) == pytest.approx(200.0)


def test_window_outside_samples_is_none_not_zero():
    samples = [{"t": 1.0, "energy_mj": 0.0, "power_w": 5.0}, {"t": 2.0, "energy_mj": 5.0}]
    stats = window_stats(samples, [], 0.0, 3.0)
    assert stats["energy_j"] is None and stats["avg_w"] is None
    assert stats["energy_j_samples"] is None


def test_reasons_are_decoded_and_idle_excluded():
    clock = FakeClock()
    sampler = Sampler([FakeReader(clock, reasons=0x1 | 0x4 | 0x40)], clock=clock)
    sampler.poll()
    drive(sampler, clock, 1)
    (w,) = sampler.window(1000.1, 1000.9)
    assert w["throttle_reasons"] == "sw_power_cap,hw_thermal_slowdown"
    assert sampler.timeline()[0]["reasons_names"] == "gpu_idle,sw_power_cap,hw_thermal_slowdown"


def test_gpm_pairs_are_100ms_apart_and_averaged_inside_windows():
    clock = FakeClock()
    reader = FakeReader(clock)
    sampler = Sampler([reader], gpm_period_s=0.2, clock=clock)
    sampler.poll()
    drive(sampler, clock, 10, dt=0.05)  # poll_gpm every 50 ms: pairs must still be >= 100 ms
    pairs = list(sampler.gpm[0])
    assert pairs and all(p["t1"] - p["t0"] >= 0.1 - 1e-9 for p in pairs)
    (early,) = sampler.window(1000.0, 1004.0)
    (late,) = sampler.window(1006.0, 1010.0)
    assert early["tensor_util"] == 0 and late["tensor_util"] == 60.0
    assert late["sm_util"] == 80.0 and late["gpm_pairs"] > 0
    assert reader.freed > 0  # unpaired and consumed samples are freed


def test_no_gpm_means_none_not_zero():
    clock = FakeClock()
    sampler = Sampler([FakeReader(clock, gpm=False)], clock=clock)
    sampler.poll()
    drive(sampler, clock, 2)
    (w,) = sampler.window(1000.2, 1001.8)
    assert w["tensor_util"] is None and w["gpm_pairs"] == 0


def test_a_device_failing_mid_run_keeps_the_others_and_its_earlier_samples():
    clock = FakeClock()
    good = FakeReader(clock, index=0)
    bad = FakeReader(clock, index=1, fail_from=1002.0)
    sampler = Sampler([good, bad], clock=clock)
    sampler.poll()
    drive(sampler, clock, 5)
    assert 1 in sampler.dead and 0 not in sampler.dead
    assert len([e for e in sampler.errors if e[1] == 1]) == DEAD_AFTER
    w0, w1 = sampler.window(1000.5, 1001.5)
    # (the counter counts whole mJ, as NVML's does)
    assert w0["avg_w"] == pytest.approx(100.0, rel=1e-4)
    assert w1["avg_w"] == pytest.approx(100.0, rel=1e-4)
    later = sampler.window(1003.0, 1004.0)
    assert later[0]["avg_w"] == pytest.approx(100.0) and later[1]["avg_w"] is None


class FakeNvmlError(Exception):
    pass


class FakeNvml:
    """The pynvml functions NvmlReader uses; `missing` names fields that raise."""

    NVMLError = FakeNvmlError
    NVML_FI_DEV_POWER_INSTANT, NVML_FI_DEV_POWER_AVERAGE = 186, 185
    NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self, missing=()):
        self.missing = set(missing)
        self.field_queries = []
        self.energy_calls = 0

    def _get(self, name, value):
        if name in self.missing or "all" in self.missing:
            raise FakeNvmlError(name)
        return value

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"Fake H200"

    def nvmlDeviceGetUUID(self, h):
        return self._get("uuid", f"GPU-fake-{h}".encode())

    def nvmlDeviceGetFieldValues(self, h, ids):
        class Value:
            uiVal = 0

        class Field:
            def __init__(self, ret, mw):
                self.nvmlReturn, self.valueType, self.value = ret, 1, Value()
                self.value.uiVal = mw

        self._get("fields", None)
        self.field_queries.append(list(ids))
        fields = [
            Field(0, 512_000),
            Field(3 if "average_field" in self.missing else 0, 300_000),
            Field(3 if "energy_field" in self.missing else 0, 123_456),
        ]
        return fields[: len(ids)]

    def nvmlDeviceGetPowerUsage(self, h):
        return self._get("usage", 299_000)

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._get("limit", 700_000)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self.energy_calls += 1
        return self._get("energy", 123_456)

    def nvmlDeviceGetClockInfo(self, h, which):
        return self._get("clock", 1980 if which == 1 else 3201)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._get("temp", 41)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._get("reasons", 0x4)


def test_nvml_reader_fields_and_units():
    sample = NvmlReader(FakeNvml(), 0).read()
    assert sample == {
        "power_w": 512.0, "power_avg_w": 300.0, "energy_mj": 123_456, "sm_clock_mhz": 1980,
        "mem_clock_mhz": 3201, "temp_c": 41, "power_limit_w": 700.0, "reasons": 0x4,
    }  # fmt: skip


def test_nvml_reader_names_its_chip():
    assert NvmlReader(FakeNvml(), 1).uuid == "GPU-fake-1"
    assert NvmlReader(FakeNvml(missing={"uuid"}), 1).uuid is None


def test_nvml_reader_missing_fields_are_none_and_fall_back():
    sample = NvmlReader(
        FakeNvml(missing={"temp", "energy", "energy_field", "average_field"}), 0
    ).read()
    assert sample["temp_c"] is None and sample["energy_mj"] is None
    assert sample["power_avg_w"] == 299.0  # from nvmlDeviceGetPowerUsage
    assert sample["power_w"] == 512.0
    with pytest.raises(RuntimeError, match="every NVML read failed"):
        NvmlReader(FakeNvml(missing={"all", "average_field"}), 0).read()
    # The energy counter comes from the batched field query, or its own call as a fallback.
    assert NvmlReader(FakeNvml(missing={"energy_field"}), 0).read()["energy_mj"] == 123_456


def test_fast_ticks_read_power_only():
    fast = NvmlReader(FakeNvml(), 0).read(slow=False)
    assert set(fast) == {"power_w", "power_avg_w", "energy_mj"}
    nvml = FakeNvml()
    power_only = NvmlReader(nvml, 0).read(slow=False, energy=False)
    assert power_only["energy_mj"] is None and power_only["power_w"] == 512.0
    # the expensive counter is neither in the batched query nor read on its own
    assert nvml.field_queries == [[186, 185]] and nvml.energy_calls == 0
    clock = FakeClock()
    sampler = Sampler([FakeReader(clock)], slow_every=4, clock=clock)
    drive(sampler, clock, 1.0)  # 20 ticks
    slow = [s for s in sampler.samples[0] if "sm_clock_mhz" in s]
    assert len(sampler.samples[0]) == 20 and len(slow) == 5
    (w,) = sampler.window(1000.1, 1000.9)
    assert w["sm_clock_mhz"] == 1980 and w["power_limit_w"] == 700.0


def test_window_right_after_a_loop_waits_for_the_closing_sample():
    # The kernel loop ends between two samples; the window must still get its energy.
    reader = FakeReader(time.monotonic, watts=lambda t: 300.0)
    with Sampler([reader], rate_hz=20) as sampler:
        time.sleep(0.3)
        t0 = time.monotonic()
        time.sleep(0.5)
        t1 = time.monotonic()
        (w,) = sampler.window(t0, t1)
    assert w["energy_j"] == pytest.approx(300 * (t1 - t0), rel=0.02)
    assert w["avg_w"] == pytest.approx(300, rel=0.02)


def test_thread_samples_and_stops_even_when_measured_code_raises():
    reader = FakeReader(time.monotonic)
    sampler = Sampler([reader], rate_hz=50)
    with pytest.raises(ValueError):
        with sampler:
            time.sleep(0.3)
            raise ValueError("the measured code failed")
    assert not sampler.running
    assert not any(t.name == "power-sampler" for t in threading.enumerate())
    assert 5 <= len(sampler.samples[0]) <= 30
    assert sampler.cpu_fraction() is not None


def test_thread_survives_a_reader_that_always_raises():
    clock = time.monotonic
    sampler = Sampler([FakeReader(clock, fail_from=0.0)], rate_hz=200)
    with sampler:
        time.sleep(0.3)
        assert sampler.running
    assert 0 in sampler.dead
    assert not sampler.running


def test_interpreter_exit_stops_the_sampler():
    # atexit runs handlers last-in first-out: the check is registered before the library's
    # own handler exists, so it runs after it.
    code = textwrap.dedent(f"""
        import atexit, sys, time
        state = {{}}
        atexit.register(lambda: print("alive-after-exit:", state["s"].running))
        sys.path.insert(0, {str(ROOT / "scripts")!r})
        sys.path[:0] = [{str(ROOT / "tests")!r}, {str(ROOT / "tests" / "instruments")!r}]
        from test_power_sampler import FakeReader
        from studylib.instruments.power_sampler import Sampler
        state["s"] = Sampler([FakeReader(time.monotonic)], rate_hz=50).start()
        time.sleep(0.1)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "alive-after-exit: False" in proc.stdout


def test_bounded_memory():
    clock = FakeClock()
    sampler = Sampler([FakeReader(clock)], max_samples=100, clock=clock)
    drive(sampler, clock, 20)
    assert len(sampler.samples[0]) == 100
    assert not math.isnan(sampler.window(clock.t - 2, clock.t - 1)[0]["avg_w"])


def test_energy_counter_is_read_once_a_second_and_windows_still_add_up():
    """The counter read costs ~3.9 ms of CPU on the H200: the sampler reads it at 1 Hz and
    reaches each window edge by integrating power from the last read."""
    clock = FakeClock()
    # 100 W, then a 600 W step at t=1002.37 (between two counter reads)
    reader = FakeReader(clock, watts=lambda t: 600.0 if t >= 1002.37 else 100.0)
    sampler = Sampler([reader], rate_hz=20, clock=clock)
    sampler.poll()
    drive(sampler, clock, 6)
    reads = [s for s in sampler.samples[0] if s["energy_mj"] is not None]
    assert len(reads) == 7  # t = 1000 .. 1006, one a second
    assert len(sampler.samples[0]) == 121
    (w,) = sampler.window(1001.5, 1004.25)
    exact = 100 * (2.37 - 1.5) + 600 * (4.25 - 2.37)
    # within one 50 ms power sample of the step
    assert w["energy_j"] == pytest.approx(exact, abs=500 * 0.05)
    assert w["energy_j_samples"] == pytest.approx(exact, abs=500 * 0.05)
