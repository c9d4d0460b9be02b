import itertools
import math

import pytest
from studylib.instruments.timing import (
    CpuTimer,
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
