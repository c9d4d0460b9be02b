"""What the host and load probes share (tools/decode_load_probe.py, tools/sampler_host_cost.py,
tools/host_launch_rate.py): the order of their alternated arms, the power sampler each arm
runs beside its load, a variant's server arguments with a probe's own, and the host-bound
launch loop."""

from __future__ import annotations

import time

from .serving.engines.base import flag_name

#: The ``lowrate`` arm's sampler rate (the other sampled arms run at decode.sample_hz).
LOW_SAMPLE_HZ = 2.0
#: Arms that run no sampler.
UNSAMPLED = ("none", "nosampler", "bench", "bench_oai")


def round_arms(arms: list[str], rnd: int) -> list[str]:
    """The arms of round ``rnd`` in the order they run: as given, reversed on odd rounds (A B,
    B A, ...), so a drift of the host or the engine weighs on every arm alike."""
    return list(arms) if rnd % 2 == 0 else list(arms)[::-1]


def with_server_args(args: list, extra: list[str]) -> list[str]:
    """A variant's server arguments with a probe's ``extra`` ones: a flag the variant already
    gives (``--flag value`` or ``--flag=value``) takes the extra one's place, with its values
    (the study refuses a flag given twice); a new one is appended."""
    merged: dict[str, list[str]] = {}
    for group in _flag_groups(args) + _flag_groups(extra):
        merged[flag_name(group[0]) or group[0]] = group  # a key kept keeps its place
    return [arg for group in merged.values() for arg in group]


def _flag_groups(argv: list) -> list[list[str]]:
    """The argv as [flag, its values...] groups, in order."""
    groups: list[list[str]] = []
    for arg in map(str, argv):
        if flag_name(arg) or not groups:
            groups.append([arg])
        else:
            groups[-1].append(arg)
    return groups


def sampler_settings(arm: str, sample_hz: float) -> dict | None:
    """The Sampler's settings an arm runs (None: no sampler): the decode job's (``sample_hz``,
    GPM on), without GPM (``nogpm``) or at 2 Hz (``lowrate``)."""
    if arm in UNSAMPLED:
        return None
    return {"rate_hz": LOW_SAMPLE_HZ if arm == "lowrate" else sample_hz, "gpm": arm != "nogpm"}


def launch_rate(x, seconds: float, torch) -> float:
    """Launches per second, over ``seconds``, of a tiny in-place add on ``x`` launched 50 times
    then synchronised, over and over: the speed a launch-bound engine can run at."""
    t0, launches = time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        for _ in range(50):
            x.add_(1)
        torch.cuda.synchronize()
        launches += 50
    return launches / (time.monotonic() - t0)
