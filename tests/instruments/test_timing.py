import itertools
import math

import pytest
from studylib.instruments.timing import (
    LAUNCH_LEAD_S,
    CpuTimer,
    LaunchLead,
    StopRule,
    median_rel_stderr,
    needed_stderr,
    sample_until,
    summarize,
)


def test_rel_stderr_needs_samples_and_shrinks_with_n():
    assert median_rel_stderr([1.0, 2.0, 3.0]) == math.inf
    noisy = [10.0, 11.0, 9.0, 10.5, 9.5, 10.2, 9.8, 10.1]
    assert 0 < median_rel_stderr(noisy * 16) < median_rel_stderr(noisy)


def test_constant_samples_stop_at_minimums():
    rule = StopRule(min_samples=16, max_samples=1000, min_time_s=0.0, max_time_s=10, rel_noise=0.01)
    samples = sample_until(lambda: 5.0, rule)
    assert len(samples) == 16


def test_noisy_samples_run_to_max_samples():
    values = itertools.cycle([1.0, 100.0])
    rule = StopRule(min_samples=4, max_samples=50, min_time_s=0.0, max_time_s=10, rel_noise=1e-6)
    assert len(sample_until(lambda: next(values), rule)) == 50


def test_max_time_bounds_sampling():
    import time

    rule = StopRule(min_samples=3, max_samples=10**6, min_time_s=0, max_time_s=0.05, rel_noise=0)
    start = time.monotonic()
    samples = sample_until(lambda: time.sleep(0.001) or 1.0, rule)
    # Without the time bound this would take 10**6 ms; 5 s leaves room for a loaded machine.
    assert time.monotonic() - start < 5
    assert 3 <= len(samples) < 10**6


def test_min_samples_is_a_floor_past_max_time():
    import time

    rule = StopRule(min_samples=6, max_samples=100, min_time_s=0, max_time_s=0.001)
    assert len(sample_until(lambda: time.sleep(0.002) or 1.0, rule)) == 6


def test_summarize_median_and_iqr():
    stats = summarize([1.0, 2.0, 3.0, 4.0, 100.0], "eager")
    assert stats["eager_us"] == 3.0
    assert stats["eager_samples"] == 5
    assert stats["eager_iqr_us"] > 0
    assert summarize([], "eager") == {}


def test_cpu_timer_measures_microseconds():
    import time

    us = CpuTimer().eager(lambda: time.sleep(0.002))
    assert 1500 < us < 50_000


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_stop_rule_from_config_picks_device_limit(device):
    timing = {
        "min_samples": 3, "max_samples": 9, "min_time_s": 0.0,
        "max_time_s": {"cuda": 2.0, "cpu": 0.5}, "rel_noise": 0.1,
    }  # fmt: skip
    rule = StopRule.from_config(timing, device)
    assert rule.max_time_s == timing["max_time_s"][device]


def test_replay_sampler_gives_one_replay_per_sample_timed_in_batches():
    from studylib.instruments.timing import CudaTimer

    timer = CudaTimer.__new__(CudaTimer)  # no CUDA here: the batches come from a stand-in
    batches = []

    def replays(graph, calls, count):
        batches.append(count)
        return [100.0 * len(batches) + i for i in range(count)]

    timer.replays = replays
    take = timer.replay_sampler(object(), calls=4, batch=3)
    assert [take() for _ in range(5)] == [100.0, 101.0, 102.0, 200.0, 201.0]
    assert batches == [3, 3]


def test_a_call_that_streams_several_l2s_is_cold_in_graph_mode():
    from studylib.instruments.backends.backend_interface import Prepared
    from studylib.instruments.worker import Measurer

    measurer = Measurer.__new__(Measurer)
    measurer.l2_bytes, measurer.timing = 60 << 20, {"cold_l2_multiple": 4}
    big = Prepared(run=None, reference=None, flops=1.0, bytes=4 * (60 << 20))
    small = Prepared(run=None, reference=None, flops=1.0, bytes=4 * (60 << 20) - 1)
    assert measurer.streams_from_hbm(big) and not measurer.streams_from_hbm(small)
    row = {"graph_us": 5.0, "graph_iqr_us": 0.1, "graph_samples": 16, "graph_calls": 200}
    cold = Measurer.cold_as_graph(row)
    assert cold == {"cold_us": 5.0, "cold_iqr_us": 0.1, "cold_samples": 16, "cold_sets": 1,
                    "cold_calls": 200}  # fmt: skip
    assert Measurer.cold_as_graph({}) == {}  # no graph time: no cold time either


def test_the_cold_graph_of_a_call_that_streams_several_l2s_is_its_own_graph():
    """The power loops' cold mode and the sweep's use one rule: no second input set."""
    from studylib.instruments.backends.backend_interface import Prepared
    from studylib.instruments.worker import Measurer

    measurer = Measurer.__new__(Measurer)
    measurer.l2_bytes, measurer.timing = 60 << 20, {"cold_l2_multiple": 4}
    measurer._graph_of = lambda fn: ("graph", 3, {"graph_calls": 3})

    def no_sets(count):
        raise AssertionError("no input sets for a call that streams from HBM")

    big = Prepared(run=None, reference=None, flops=1.0, bytes=4 * (60 << 20), variants=no_sets)
    assert measurer._cold_graph(big) == ("graph", 3, {"cold_sets": 1, "cold_calls": 3})


def test_a_point_wider_than_the_ranking_floor_needs_its_median_only_to_a_third_of_its_spread():
    # A ranking never resolves below the spread of the points it compares (3 % at least), so
    # a point of 10 % spread stops once its median is known to a third of that, not to 1 %.
    assert needed_stderr(0.02, 0.01) == 0.01
    assert needed_stderr(0.12, 0.01) == pytest.approx(0.04)
    wide = itertools.cycle([90.0, 95.0, 100.0, 105.0, 110.0])  # IQR / median 10 %
    tight = itertools.cycle([98.0, 99.0, 100.0, 101.0, 102.0])  # 2 %
    rule = StopRule(min_samples=10, max_samples=5000, min_time_s=0.0, max_time_s=60,
                    rel_noise=0.001)  # fmt: skip
    n_wide = len(sample_until(lambda: next(wide), rule))
    n_tight = len(sample_until(lambda: next(tight), rule))
    # By the rule alone the wide point needed 0.0929 / sqrt(n) <= 0.001: 8,630 samples.
    assert 700 <= n_wide <= 900 and n_wide < 5000
    assert 300 <= n_tight <= 400  # 0.0186 / sqrt(n) <= 0.001: unchanged


class QueuedDevice:
    """A host issuing steps of ``host_s`` each to a device that runs them in order, ``device_s``
    each, as a launch queue does: its events complete when the work before them has."""

    def __init__(self, host_s: float, device_s: float):
        self.host_s, self.device_s = host_s, device_s
        self.host = self.free = self.idle = 0.0
        self.events = 0

    def step(self):
        self.host += self.host_s
        if self.free and self.host > self.free:  # the device waited for the host
            self.idle += self.host - self.free
        self.free = max(self.free, self.host) + self.device_s

    def event(self):
        device = self
        device.events += 1

        class Event:
            def record(self):
                self.done = device.free

            def synchronize(self):
                device.host = max(device.host, self.done)

        return Event()

    def sustain(self, seconds: float, lead: LaunchLead | None) -> float:
        """The loop of Worker.sustain: steps until the host's clock passes ``seconds``; the
        window's end (the final synchronise)."""
        while self.host < seconds:
            self.step()
            if lead is not None:
                lead.after_step()
        return max(self.host, self.free)


@pytest.mark.parametrize("device_s", [0.0013, 0.0063])  # the H200's graph replays of 2026-12-04
def test_a_sustained_loop_of_graph_replays_ends_with_its_seconds(device_s):
    # The host launches a replay in 10 µs, the device takes 1.3-6.3 ms for it. Unbounded, the
    # host's 4 s queue 400-1600 s of work here (a real queue, ~1000 launches deep, held
    # 1.3-6.3 s); bounded, the window ends within the lead and one step of its 4 s, and the
    # device never waits for the host.
    free = QueuedDevice(10e-6, device_s)
    assert free.sustain(4.0, None) > 400
    device = QueuedDevice(10e-6, device_s)
    lead = LaunchLead(device_s, device.event)
    end = device.sustain(4.0, lead)
    assert 4.0 <= end <= 4.0 + LAUNCH_LEAD_S + 2 * device_s
    assert device.idle == 0.0


def test_a_launch_bound_loop_is_left_alone():
    # Eager launches of a 5-µs kernel at 12 µs each: the device keeps up, so no wait ever
    # happens, and events are few (one per 2 ms of steps) so they cost the host nothing.
    device = QueuedDevice(12e-6, 5e-6)
    lead = LaunchLead(12e-6, device.event)
    end = device.sustain(1.0, lead)
    assert end == pytest.approx(1.0, abs=1e-4)
    assert device.events <= 1.0 / 0.002 + 1
    assert LaunchLead(12e-6, None).make_event is None  # off CUDA: nothing recorded
