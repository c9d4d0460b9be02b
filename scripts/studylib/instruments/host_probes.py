"""What the host and load probes share (tools/decode_load_probe.py, tools/sampler_host_cost.py,
tools/host_launch_rate.py): the order of their alternated arms, the power sampler each arm
runs beside its load, a variant's server arguments with a probe's own, and the host-bound
launch loop."""

from __future__ import annotations

import statistics
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


def probe_tpot(row: dict) -> float | None:
    """An arm's TPOT: the study's, else bench_serving's steady one, else its median."""
    return row.get("tpot_ms") or row.get("bench_tpot_steady_ms") or row.get("bench_tpot_ms")


def round_pairs(rows: list[dict]):
    """Each arm's row beside the same round's row of its level's first arm, both with a TPOT:
    (C, round, row, first arm's row), by C, then round, then the order the arms ran."""
    for c in sorted({r["concurrency"] for r in rows}):
        at_c = [r for r in rows if r["concurrency"] == c]
        first = at_c[0]["arm"]
        for rnd in sorted({r["round"] for r in at_c}):
            base = next((r for r in at_c if r["round"] == rnd and r["arm"] == first), None)
            if base is None or not probe_tpot(base):
                continue
            for r in at_c:
                if r["round"] == rnd and r["arm"] != first and probe_tpot(r):
                    yield c, rnd, r, base


def arm_contrast(rows: list[dict]) -> list[dict]:
    """Each arm at each C over its rounds, beside the level's first arm: the mean TPOT and its
    spread; how closely the client read the engine it ran with (its TPOT times the scheduler's
    rate over C, 1 where the two agree); and for the other arms the ratio of the mean TPOTs with
    one standard error of it (unpaired: the engine's speed moves between the windows of a round
    as much as between rounds), the round-by-round ratios' range and the ratio of the
    scheduler's mean rates. A ratio within a standard error or two of 1 does not tell the two
    loads apart."""
    out = []
    for c in sorted({r["concurrency"] for r in rows}):
        at_c = [r for r in rows if r["concurrency"] == c]
        first = at_c[0]["arm"]
        arms = list(dict.fromkeys(r["arm"] for r in at_c))
        stats = {arm: _arm_stats([r for r in at_c if r["arm"] == arm], c) for arm in arms}
        base = stats[first]
        for arm in arms:
            s = dict(stats[arm], concurrency=c, arm=arm, against=first)
            if arm != first and s["rounds"] and base["rounds"]:
                s["tpot_ratio"] = s["tpot_mean"] / base["tpot_mean"]
                var = sum(x["tpot_sd"] ** 2 / x["rounds"] for x in (s, base) if x["rounds"] > 1)
                s["tpot_ratio_se"] = (var**0.5 / base["tpot_mean"]) if var else None
                per_round = [
                    probe_tpot(r) / probe_tpot(b)
                    for _, _, r, b in round_pairs(at_c)
                    if r["arm"] == arm
                ]
                s["round_ratio_min"] = min(per_round, default=None)
                s["round_ratio_max"] = max(per_round, default=None)
                if s["engine_tok_s_mean"] and base["engine_tok_s_mean"]:
                    s["engine_ratio"] = s["engine_tok_s_mean"] / base["engine_tok_s_mean"]
            out.append(s)
    return out


def _arm_stats(rows: list[dict], c: int) -> dict:
    pairs = [(probe_tpot(r), r.get("server_tok_s")) for r in rows]
    tpots = [tpot for tpot, _ in pairs if tpot]
    rates = [rate for _, rate in pairs if rate]
    reads = [tpot * rate / c / 1000.0 for tpot, rate in pairs if tpot and rate]

    def sd(v):
        return statistics.stdev(v) if len(v) > 1 else 0.0

    return {
        "rounds": len(tpots),
        "tpot_mean": statistics.fmean(tpots) if tpots else None,
        "tpot_sd": sd(tpots),
        "tpot_min": min(tpots, default=None),
        "tpot_max": max(tpots, default=None),
        "engine_tok_s_mean": statistics.fmean(rates) if rates else None,
        "engine_tok_s_min": min(rates, default=None),
        "engine_tok_s_max": max(rates, default=None),
        "reads_engine_mean": statistics.fmean(reads) if reads else None,
        "reads_engine_sd": sd(reads),
    }
