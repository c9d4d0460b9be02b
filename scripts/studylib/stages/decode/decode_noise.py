"""How far a decode window's figures move by themselves: the noise the decode answers (questions
5 and 6) set every margin against, per variant and concurrency C.

A window's TPOT is measured once, so its spread comes from what checked it:

* the cross-check: SGLang's own client (bench_serving) against the same server at the same C
  right after the window (tables/decode_crosscheck.csv); the study's TPOT over bench_serving's
  median TPOT, taken the larger way round. Where this variant has no cross-check at that C,
  the largest disagreement of another variant of the same engine at that C stands in (the
  engine's own drift between two runs is most of it: 5.8 % at C = 1 on the H200, 2026-12-02);
* the scheduler's own count: the tokens/s SGLang's scheduler logged over the window against
  the client's;
* :data:`~studylib.core.verdicts.NOISE_FLOOR`, below which no decision goes.

J/token adds the energy counter's disagreement with the integrated power samples
(``energy_gap_pct``). The largest of them is the noise; ``source`` says which it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from ...core.finding_records import _ok, field_getter, num_of, text_of
from ...core.verdicts import NOISE_FLOOR, run_to_run


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


def _crosscheck_rows(crosscheck: pd.DataFrame | None) -> pd.DataFrame:
    if crosscheck is None or crosscheck.empty or "tpot_ratio" not in crosscheck.columns:
        return pd.DataFrame(columns=["engine", "variant", "concurrency", "disagreement"])
    check = crosscheck.copy()
    for column in ("engine", "variant", "bench_error"):
        check[column] = check[column].map(text_of) if column in check.columns else ""
    check["concurrency"] = pd.to_numeric(check["concurrency"], errors="coerce")
    ratio = pd.to_numeric(check["tpot_ratio"], errors="coerce")
    check["disagreement"] = [run_to_run(r, 1.0) for r in ratio]
    ok = check["disagreement"].notna() & (check["bench_error"] == "")
    return check.loc[ok, ["engine", "variant", "concurrency", "disagreement"]]


def _crosscheck_noise(checks: pd.DataFrame, engine: str, variant: str, c: float) -> Noise | None:
    at_c = checks[checks["concurrency"] == c]
    own = at_c[at_c["variant"] == variant]
    if len(own):
        return Noise(float(own["disagreement"].max()), f"bench_serving's TPOT at C = {c:.0f}")
    other = at_c[at_c["engine"] == engine]
    if other.empty:
        return None
    worst = other.loc[other["disagreement"].idxmax()]
    return Noise(float(worst["disagreement"]),
                 f"bench_serving's TPOT at C = {c:.0f} ({worst['variant']})")  # fmt: skip


def _scheduler_noise(row: Any) -> Noise | None:
    get = field_getter(row)
    server = num_of(get("server_tok_s"))
    if not _ok(server):
        server = num_of(get("server_tok_s_median"))
    share = run_to_run(get("output_tok_s"), server)
    return Noise(share, "the scheduler's count against the client's") if _ok(share) else None


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
        tpot = largest(_crosscheck_noise(checks, engine, variant, c), _scheduler_noise(rec))
        rows.append({"variant": variant, "concurrency": c, "tpot_noise": tpot,
                     "j_noise": largest(tpot, _energy_noise(rec))})  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def noise_of(noise: pd.DataFrame, variant: str, c: float, kind: str = "tpot") -> Noise:
    """The noise of one variant at one C (:func:`noise_table`); the floor where unknown."""
    at = noise[(noise["variant"] == variant) & (noise["concurrency"] == c)]
    return at[f"{kind}_noise"].iloc[-1] if len(at) else FLOOR
