"""What the host and load probes share (tools/decode_load_probe.py, tools/sampler_host_cost.py,
tools/host_launch_rate.py): the order of their alternated arms, the power sampler each arm
runs beside its load, a variant's server arguments with a probe's own, and the host-bound
launch loop."""

from __future__ import annotations

import time

#: The ``lowrate`` arm's sampler rate (the other sampled arms run at decode.sample_hz).
LOW_SAMPLE_HZ = 2.0
#: Arms that run no sampler.
UNSAMPLED = ("none", "nosampler", "bench")


def round_arms(arms: list[str], rnd: int) -> list[str]:
    """The arms of round ``rnd`` in the order they run: as given, reversed on odd rounds (A B,
    B A, ...), so a drift of the host or the engine weighs on every arm alike."""
    return list(arms) if rnd % 2 == 0 else list(arms)[::-1]


def with_server_args(args: list[str], extra: list[str]) -> list[str]:
    """A variant's server arguments with a probe's ``extra`` ones: a flag the variant already
    gives takes the extra value in place (the study refuses a flag given twice), a new one is
    appended. ``extra``: ``--flag value`` pairs and bare ``--switch`` flags."""
    out = [str(a) for a in args]
    i = 0
    while i < len(extra):
        flag = extra[i]
        value = extra[i + 1] if i + 1 < len(extra) and not extra[i + 1].startswith("--") else None
        i += 2 if value is not None else 1
        if flag in out:
            at = out.index(flag)
            if value is not None and at + 1 < len(out) and not out[at + 1].startswith("--"):
                out[at + 1] = value
            elif value is not None:
                out.insert(at + 1, value)
        else:
            out += [flag] if value is None else [flag, value]
    return out


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
