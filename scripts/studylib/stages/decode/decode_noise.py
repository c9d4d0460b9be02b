"""How far a decode window's figures move by themselves: the noise the decode answers (questions
5 and 6) set every margin against, per variant and concurrency C.

A window's TPOT is measured once, so its spread comes from what checked it:

* the cross-check: SGLang's own client (bench_serving) against the same server at the same C
  right after the window (tables/decode_crosscheck.csv); the study's TPOT over bench_serving's
  steady TPOT (``tpot_ratio_steady``, like for like; where that pair disagreed and the two then
  alternated, the ratio of their medians over the rounds, ``tpot_ratio_rounds``) or, in tables
  from before it, its median TPOT (``tpot_ratio``), taken the larger way round. Where the two
  differ by about the engine's own change of speed between the two runs over the same spans
  (``engine_ratio_steady`` or ``engine_ratio``, the scheduler's log), the source says the engine
  itself ran at another speed (:func:`crosscheck_sentence`): the clients read what it did; what
  slowed it (a warm-up, drift, the load) the two runs alone do not say. Where this variant has
  no cross-check at that C, the largest disagreement of another variant of the same engine at
  that C stands in (the engine's own change of speed between two runs is most of it: 5.8 %
  at C = 1 on the H200, 2026-12-02);
* the scheduler's own count: the tokens/s SGLang's scheduler logged over the window against
  the client's;
* the window's own precision: the 95 % confidence interval of its token rate over one-second
  slices (``tpot_ci_pct``, instruments/serving/window_precision), TPOT's to the same relative
  width;
* :data:`~studylib.core.verdicts.NOISE_FLOOR`, below which no decision goes.

J/token adds the energy counter's disagreement with the integrated power samples
(``energy_gap_pct``). The largest of them is the noise; ``source`` says which it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from ...core.finding_records import _ok, field_getter, num_of, text_of
from ...core.verdicts import NOISE_FLOOR, beyond, decision_noise, run_to_run
from ...instruments.serving.bench_serving import BACKENDS
from .decode_judgements import exact_ratio


@dataclass(frozen=True)
class Noise:
    """A noise as a share and where it came from."""

    share: float
    source: str


FLOOR = Noise(NOISE_FLOOR, f"{100 * NOISE_FLOOR:.0f} % floor")


def pct(share: float) -> str:
    """ "5.5 %" below 10 %, "12 %" above."""
    value = 100 * share
    return f"{value:.1f} %" if value < 10 else f"{value:.0f} %"


def largest(*noises: Noise) -> Noise:
    """The largest of ``noises`` (never below the floor): a comparison of two windows uses
    the larger of their spreads."""
    known = [n for n in noises if n is not None and _ok(n.share)]
    return max([FLOOR, *known], key=lambda n: n.share)


#: :func:`crosscheck_ratio`'s name for bench_serving's TPOT over its steady window.
STEADY = "steady TPOT"


def alternated_rounds(row: Any) -> int:
    """How many whole rounds the two clients alternated in (decode_crosscheck.alternate); 0
    where they did not (one pair, or a table from before the rounds)."""
    rounds = num_of(field_getter(row)("rounds"))
    return int(rounds) if _ok(rounds) and rounds >= 2 else 0


def crosscheck_ratio(row: Any) -> tuple[float, str]:
    """The study's TPOT over bench_serving's, and which of bench_serving's TPOTs: the ratio of
    their medians over the alternated rounds where they ran (both clients under the same mix
    of the engine's speeds), else its steady one where the row has it (like for like), else
    its median over the whole run."""
    get = field_getter(row)
    rounds = alternated_rounds(row)
    alternated = num_of(get("tpot_ratio_rounds"))
    if rounds and _ok(alternated):
        return alternated, f"{STEADY} over {rounds} alternated rounds"
    steady = num_of(get("tpot_ratio_steady"))
    if _ok(steady):
        return steady, STEADY
    return num_of(get("tpot_ratio")), "TPOT"


def crosscheck_engine(row: Any) -> float:
    """The scheduler's tok/s during bench_serving over during the study, over the span of the
    TPOT :func:`crosscheck_ratio` uses: the medians over the alternated rounds
    (``engine_ratio_rounds``), bench_serving's steady window (``engine_ratio_steady``) with
    its steady TPOT, else its whole run (``engine_ratio``; a launch-bound engine changed
    speed 1.5x for 30 s within one run on the H200, so a window's TPOT and a whole run's
    rate need not agree)."""
    get = field_getter(row)
    _, which = crosscheck_ratio(row)
    if alternated_rounds(row) and _ok(num_of(get("tpot_ratio_rounds"))):
        return num_of(get("engine_ratio_rounds"))
    steady = num_of(get("engine_ratio_steady"))
    if which == STEADY and _ok(steady):
        return steady
    return num_of(get("engine_ratio"))


def engine_moved(row: Any) -> bool:
    """Whether the two clients' TPOTs differ beyond the noise by about the engine's own change
    of speed between the two runs (:func:`crosscheck_engine`, the scheduler's tok/s during
    bench_serving over during the study) itself beyond the noise, and the TPOT ratio not
    beyond the noise of it (an engine that moved less than the noise explains nothing). Over
    alternated rounds, by the rounds paired one by one (:func:`client_ratio`) within the
    noise: the medians of the two arms can fall in different phases of the engine."""
    ratio, _ = crosscheck_ratio(row)
    noise = decision_noise()
    if not beyond(run_to_run(ratio, 1.0), noise):
        return False
    paired = client_ratio(row)
    if _ok(paired):  # alternated: each round's clients against that round's engine
        return not beyond(run_to_run(paired, 1.0), noise)
    engine = crosscheck_engine(row)
    return beyond(run_to_run(engine, 1.0), noise) and not beyond(run_to_run(ratio, engine), noise)


def client_ratio(row: Any) -> float:
    """Over alternated rounds, the median of each round's TPOT ratio over its engine ratio
    (``client_ratio_rounds``): 1 where each client read the engine's speed of its own
    window, however the engine moved between the arms; NaN without rounds."""
    if not alternated_rounds(row):
        return float("nan")
    return num_of(field_getter(row)("client_ratio_rounds"))


def crosscheck_sentence(row: Any) -> str:
    """The cross-check at one C in words: the two clients agree within the noise, or differ
    and the engine itself ran at another speed by about as much, or differ beyond it."""
    get = field_getter(row)
    ratio, which = crosscheck_ratio(row)
    if not _ok(ratio):
        return ""
    engine = crosscheck_engine(row)
    backend = text_of(get("bench_backend"))
    # Named where it is not the native one (tables before session 37 did not record it).
    where = (f" (its requests on {BACKENDS[backend]})"
             if backend in BACKENDS and backend != "sglang" else "")  # fmt: skip
    said = (f"At C = {num_of(get('concurrency')):.0f} the study's TPOT is {ratio:.3f}× "
            f"bench_serving's {which}{where}")  # fmt: skip
    scheduler = (f"its scheduler {engine:.3f}× as fast during bench_serving"
                 if _ok(engine) else "the scheduler's rate not known")  # fmt: skip
    noise = pct(decision_noise())
    if not beyond(run_to_run(ratio, 1.0), decision_noise()):
        return f"{said}: the two clients agree within the {noise} noise ({scheduler})."
    if engine_moved(row):
        paired = client_ratio(row)
        if _ok(paired):
            return (f"{said} ({scheduler}); round by round, over the engine's own change of "
                    f"speed, {paired:.3f}×: the engine itself ran at other speeds between "
                    "the arms.")  # fmt: skip
        return (f"{said}, about the engine's own change of speed between the two runs "
                f"({scheduler}): the engine itself ran at another speed.")  # fmt: skip
    if not engine_helped(row):
        return (f"{said}, beyond the {noise} noise and not by the engine's change of speed "
                f"({scheduler}).")  # fmt: skip
    paired = client_ratio(row)
    rest, over = (
        (paired, "round by round, over the engine's own change of speed")
        if _ok(paired)
        else (ratio / engine, "over the engine's own change of speed")
    )
    return (f"{said}, beyond the {noise} noise ({scheduler}); {over}, {rest:.3f}×, still "
            "beyond it: the engine itself ran at other speeds under the two clients, and over "
            "its speed the two clients still differ.")  # fmt: skip


def engine_helped(row: Any) -> bool:
    """Whether the engine's own change of speed (:func:`crosscheck_engine`) is beyond the noise
    and on the same side as the TPOT gap, so that it accounts for part of it (bf16 without
    graphs at C = 1 on the H200, 2026-12-04: TPOT 1.139x over three rounds, the scheduler
    1.162x as fast during bench_serving, 0.955x round by round over it)."""
    ratio, _ = crosscheck_ratio(row)
    engine = crosscheck_engine(row)
    if not (_ok(ratio) and _ok(engine)) or not beyond(run_to_run(engine, 1.0), decision_noise()):
        return False
    return (ratio > 1) == (engine > 1)


def _crosscheck_source(row: Any, c: float, variant: str = "") -> str:
    _, which = crosscheck_ratio(row)
    source = f"bench_serving's {which} at C = {c:.0f}" + (f" ({variant})" if variant else "")
    if engine_moved(row):
        paired = client_ratio(row)
        source += (f": the engine itself ran at other speeds between the arms (round by round "
                   f"{paired:.3f}×)" if _ok(paired) else
                   ": the engine itself ran at another speed (scheduler "
                   f"{crosscheck_engine(row):.3f}× during bench_serving)")  # fmt: skip
    return source


def _crosscheck_rows(crosscheck: pd.DataFrame | None) -> pd.DataFrame:
    columns = ["engine", "variant", "concurrency", "disagreement", "row"]
    if crosscheck is None or crosscheck.empty or "tpot_ratio" not in crosscheck.columns:
        return pd.DataFrame(columns=columns)
    check = crosscheck.copy()
    for column in ("engine", "variant", "bench_error"):
        check[column] = check[column].map(text_of) if column in check.columns else ""
    check["concurrency"] = pd.to_numeric(check["concurrency"], errors="coerce")
    check["row"] = check.to_dict("records")
    check["disagreement"] = [run_to_run(crosscheck_ratio(r)[0], 1.0) for r in check["row"]]
    ok = check["disagreement"].notna() & (check["bench_error"] == "")
    return check.loc[ok, columns]


def _crosscheck_noise(checks: pd.DataFrame, engine: str, variant: str, c: float) -> Noise | None:
    at_c = checks[checks["concurrency"] == c]
    own = at_c[at_c["variant"] == variant]
    if len(own):
        worst = own.loc[own["disagreement"].idxmax()]
        return Noise(float(worst["disagreement"]), _crosscheck_source(worst["row"], c))
    other = at_c[at_c["engine"] == engine]
    if other.empty:
        return None
    worst = other.loc[other["disagreement"].idxmax()]
    return Noise(float(worst["disagreement"]),
                 _crosscheck_source(worst["row"], c, worst["variant"]))  # fmt: skip


def _scheduler_noise(row: Any) -> Noise | None:
    get = field_getter(row)
    ratio = exact_ratio(row)
    if _ok(ratio):  # the two counts over the same log lines
        if text_of(get("tpot_source")) == "engine":
            return None  # the row's figures are the scheduler's own
        share = run_to_run(ratio, 1.0)
        return Noise(share, "the scheduler's count against the client's over the same log "
                     "lines") if _ok(share) else None  # fmt: skip
    server = num_of(get("server_tok_s"))
    if not _ok(server):
        server = num_of(get("server_tok_s_median"))
    share = run_to_run(get("output_tok_s"), server)
    return Noise(share, "the scheduler's count against the client's") if _ok(share) else None


def _precision_noise(row: Any) -> Noise | None:
    ci_pct = num_of(field_getter(row)("tpot_ci_pct"))
    if not _ok(ci_pct):
        return None
    return Noise(ci_pct / 100, "the window's own precision (95 % interval of its rate)")


def _energy_noise(row: Any) -> Noise | None:
    gap = num_of(field_getter(row)("energy_gap_pct"))
    if not _ok(gap):
        return None
    return Noise(abs(gap) / 100, "the energy counter against the power samples")


def noise_table(decode: pd.DataFrame | None, crosscheck: pd.DataFrame | None) -> pd.DataFrame:
    """Per variant and C of the decode table: the noise of its TPOT (and tok/s) and of its
    J/token, as :class:`Noise` records (columns ``tpot_noise``, ``j_noise``)."""
    columns = ["variant", "concurrency", "tpot_noise", "j_noise"]
    if decode is None or decode.empty or "variant" not in decode.columns:
        return pd.DataFrame(columns=columns)
    checks = _crosscheck_rows(crosscheck)
    rows = []
    for rec in decode.to_dict("records"):
        c = num_of(rec.get("concurrency"))
        engine, variant = text_of(rec.get("engine")), text_of(rec.get("variant"))
        tpot = largest(_crosscheck_noise(checks, engine, variant, c), _scheduler_noise(rec),
                       _precision_noise(rec))  # fmt: skip
        rows.append({"variant": variant, "concurrency": c, "tpot_noise": tpot,
                     "j_noise": largest(tpot, _energy_noise(rec))})  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def noise_of(noise: pd.DataFrame, variant: str, c: float, kind: str = "tpot") -> Noise:
    """The noise of one variant at one C (:func:`noise_table`); the floor where unknown."""
    at = noise[(noise["variant"] == variant) & (noise["concurrency"] == c)]
    return at[f"{kind}_noise"].iloc[-1] if len(at) else FLOOR
