import itertools
import math

import pytest
from studylib.timing import CpuTimer, StopRule, median_rel_stderr, sample_until, summarize


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
