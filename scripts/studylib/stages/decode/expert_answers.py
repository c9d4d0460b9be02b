"""Question 4 as answers: how decode spreads tokens over the experts, per variant and
concurrency C, against the balanced M (C × top_k / experts; the seed's 16 at C = 512).

SGLang's recorder counts the tokens each expert of each layer received over a window. Even
perfectly uniform routing leaves the busiest of the layers × experts counts above the mean by
chance, less the more tokens were counted: that chance is the noise a verdict of imbalance
must beat (:func:`uniform_spread`). Within it, the routing is balanced (a tie with the
balanced M); beyond it, the busiest expert's M over the balanced M says how far from it.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import pandas as pd

from ...core.answer_records import ANSWERED, TIE, Answer, Question, not_measured
from ...core.finding_records import _has, _numeric, text_of
from ...core.verdicts import NOISE_FLOOR, beyond, decision_noise
from .decode_judgements import DUMMY_ENGINES
from .expert_m import rank_loads

#: The question this module answers, with its title.
EXPERT_QUESTIONS: dict[Question, str] = {
    4: "How are tokens spread over experts during decode, against the balanced assumption?",
}

#: The seed's regime: 512 requests in flight, 512 × 8 / 256 = 16 tokens per expert.
SEED_C = 512
#: The busiest of n uniform counts stays below the uniform spread this often.
UNIFORM_COVERAGE = 0.95


def uniform_spread(tokens: float, counts: int, pick: float) -> float:
    """How far above the mean the busiest of ``counts`` counts lands under uniform routing,
    as a share of the mean, at most once in 20 (:data:`UNIFORM_COVERAGE`). ``tokens``: the
    routed tokens one count's mean is made of (a layer's tokens over its experts); ``pick``:
    the chance that a token goes to one given count (top_k / experts). Each count is then
    binomial: relative spread sqrt((1 - pick) / mean)."""
    if not (tokens > 0 and counts > 0 and 0 < pick < 1):
        return float("nan")
    z = NormalDist().inv_cdf(UNIFORM_COVERAGE ** (1 / counts))
    return z * math.sqrt((1 - pick) / tokens)


def uniform_noise(g: pd.DataFrame, c: float) -> tuple[float, str]:
    """The noise of one variant's per-expert M at one C (its rows of the expert table): how
    far the busiest of its layers × experts counts would sit above balance by chance under
    uniform routing at the token count it recorded (its least-counted layer), never below
    the floor; and where that came from."""
    balanced = float(g["balanced_m"].dropna().iloc[0])
    layers = g["layer"].nunique() if "layer" in g.columns else 1
    experts = g["expert"].nunique() if "expert" in g.columns else int(g["m"].notna().sum())
    if "tokens" not in g.columns or not g["tokens"].notna().any():
        return NOISE_FLOOR, f"{100 * NOISE_FLOOR:.0f} % floor (no token counts)"
    by_layer = g.groupby("layer") if "layer" in g.columns else g.groupby(lambda _: 0)
    mean = float(by_layer["tokens"].sum().min()) / experts
    spread = uniform_spread(mean, layers * experts, balanced / c)
    if not spread > NOISE_FLOOR:
        return NOISE_FLOOR, f"{100 * NOISE_FLOOR:.0f} % floor"
    return decision_noise(spread), (f"uniform routing's busiest of {layers * experts} counts "
                                    f"at {mean:,.0f} tokens each")  # fmt: skip


def _routing(decode: pd.DataFrame | None) -> dict[str, str]:
    """variant -> how its tokens were routed, where its weights were random (else "")."""
    if not _has(decode, "variant"):
        return {}
    out = {}
    for rec in decode.to_dict("records"):
        variant, engine = text_of(rec.get("variant")), text_of(rec.get("engine"))
        kind = text_of(rec.get("model_kind"))
        dummy = kind == "dummy" if kind else engine in DUMMY_ENGINES
        if not dummy:
            continue
        out[variant] = ("SGLang's uniform routing, random weights"
                        if text_of(rec.get("routing")) == "uniform"
                        else "the random weights' own router")  # fmt: skip
    return out


def _per_c(variant: str, c: float, g: pd.DataFrame, routing: str, lead: bool) -> Answer:
    """One variant at one C: the busiest expert against the balanced M, beyond the spread
    uniform routing leaves at this token count or within it."""
    balanced = float(g["balanced_m"].dropna().iloc[0])
    m = g["m"].dropna()
    busiest = float(m.max()) / balanced
    layers = g["layer"].nunique() if "layer" in g.columns else 1
    experts = g["expert"].nunique() if "expert" in g.columns else len(m)
    margin = busiest - 1
    noise, source = uniform_noise(g, c)
    limit = "uniform routing's" if source.startswith("uniform") else "the noise floor's"
    seed = " (the seed's)" if c == SEED_C and abs(balanced - 16) < 1e-9 else ""
    span = f"{m.min():.3g}–{m.max():.3g}"
    if beyond(margin, noise):
        status, verdict = ANSWERED, "imbalanced"
        sentence = (f"{variant} at C = {c:.0f}: routing is imbalanced, the busiest expert gets "
                    f"{busiest:.2f}× the balanced {balanced:.3g}{seed}, beyond {limit} "
                    f"{1 + noise:.2f}×")  # fmt: skip
    else:
        status, verdict = TIE, "balanced"
        sentence = (f"{variant} at C = {c:.0f}: per-expert M is balanced, {span} against the "
                    "balanced "
                    f"{balanced:.3g}{seed}; the busiest's {busiest:.2f}× is within {limit} "
                    f"{1 + noise:.2f}×")  # fmt: skip
    if lead and routing:
        sentence += f" ({routing})"
    share_idle = float((m == 0).mean())
    return Answer(
        4, f"{variant} · C = {c:.0f}", status, verdict=verdict,
        runner_up="balanced" if status == ANSWERED else "", margin=margin, noise=noise,
        noise_from=source, basis="busiest expert's M ÷ balanced M", value=f"{busiest:.2f}×",
        evidence=(f"{layers} layers × {experts} experts; M {span}, median "
                  f"{m.median():.3g}, balanced {balanced:.3g}; {100 * share_idle:.0f} % of "
                  "experts got no token"),
        points=len(m), sentence=sentence + ".", why=routing, lead=lead,
    )  # fmt: skip


def _rank_answers(expert_m: pd.DataFrame, decode: pd.DataFrame | None) -> list[Answer]:
    """Per expert-parallel variant and C: the busiest GPU rank's share of a layer's routed
    tokens against 1 / EP; tensor parallelism alone: equal loads by construction."""
    if not _has(decode, "variant", "gpus"):
        return []
    d = _numeric(decode, "gpus", *(["ep"] if "ep" in decode.columns else []))
    d["variant"] = d["variant"].map(text_of)
    ep = d.groupby("variant")["ep"].max().fillna(1) if "ep" in d.columns else pd.Series(dtype=float)
    gpus = d.groupby("variant")["gpus"].max()
    recorded = sorted(set(expert_m["variant"]) - {""})
    loads = rank_loads(expert_m, {v: int(ep.get(v, 1)) for v in recorded})
    out = []
    for (variant, c), g in loads.groupby(["variant", "concurrency"], sort=True):
        n = int(g["rank"].max()) + 1
        layers = g["layer"].nunique()
        busiest = float(g["over_balanced"].max())
        least = float(g.groupby("layer")["tokens"].sum().min())
        noise = decision_noise(uniform_spread(least / n, n * layers, 1 / n))
        decided = beyond(busiest - 1, noise)
        sentence = (f"At C = {c:.0f}, the busiest of {n} GPUs receives {busiest:.2f}× its "
                    f"1/{n} of a layer's routed tokens"
                    + (", beyond" if decided else ", within")
                    + f" uniform routing's {1 + noise:.2f}×.")  # fmt: skip
        out.append(Answer(4, f"{variant} · EP ranks · C = {c:.0f}", ANSWERED if decided else TIE,
                          verdict="imbalanced" if decided else "balanced", margin=busiest - 1,
                          noise=noise, noise_from="uniform routing at this token count",
                          basis="busiest rank's share × EP", value=f"{busiest:.2f}×",
                          points=len(g), sentence=sentence))  # fmt: skip
    tp_only = [v for v in recorded if gpus.get(v, 1) > 1 and ep.get(v, 1) <= 1]
    if tp_only:
        out.append(Answer(4, "GPU ranks · tensor parallel", ANSWERED, verdict="equal",
                          sentence=f"{', '.join(tp_only)} split every expert over their GPUs "
                          "(TP, no EP): each rank carries every expert's slice, so equal "
                          "loads."))  # fmt: skip
    return out


def _simulated_only(decode: pd.DataFrame | None) -> bool:
    """Whether every SGLang variant of the decode table ran SGLang's uniform routing on random
    weights (what the recorder would record is then the simulation's spread)."""
    if not _has(decode, "engine", "variant"):
        return False
    sglang = {text_of(v) for v, e in zip(decode["variant"], decode["engine"], strict=True)
              if text_of(e) == "sglang"}  # fmt: skip
    routing = _routing(decode)
    return bool(sglang) and all(routing.get(v, "").startswith("SGLang's uniform") for v in sglang)


def _recorder_failure(recorder: pd.DataFrame | None) -> str | None:
    """The recorder pass's first error (tables/decode_recorder.csv: a row per variant and C
    that ran it), or None where it did not run or ran clean."""
    if not _has(recorder, "error"):
        return None
    errors = [text_of(e) for e in recorder["error"] if text_of(e)]
    return errors[0] if errors else None


def expert_answers(expert_m: pd.DataFrame | None, decode: pd.DataFrame | None = None,
                   recorder: pd.DataFrame | None = None) -> list[Answer]:  # fmt: skip
    """Question 4's rows: per variant and C (in order of C), per-expert M against the balanced
    M (the lead rows: each variant's largest C), the seed's C = 512 where no variant ran it,
    then the GPU ranks' loads. ``recorder`` (the recorder pass's table) tells a pass that was
    off from one that failed."""
    if not _has(expert_m, "m", "balanced_m", "concurrency"):
        engines = {text_of(e) for e in decode["engine"]} if _has(decode, "engine") else set()
        why = "no SGLang expert-distribution record"
        if decode is None or decode.empty:
            why = "no decode ran here (no decode table)"
        elif engines and "sglang" not in engines:
            why += f": decode ran through {', '.join(sorted(engines))}, which has no recorder"
        elif (failure := _recorder_failure(recorder)) is not None:
            why += f": the recorder pass failed ({failure})"
        elif _simulated_only(decode):
            why += (": the recorder pass is off in the default, its variants routing by "
                    "SGLang's uniform simulation (expert_distribution turns it on, as "
                    "config/examples/full.yaml does)")  # fmt: skip
        else:
            why += " (tables/expert_m.csv has no rows: the recorder pass did not run)"
        return [not_measured(4, "per-expert M", why, lead=True)]
    df = _numeric(expert_m, "m", "balanced_m", "concurrency", "tokens", "layer", "expert")
    df["variant"] = df["variant"].map(text_of) if "variant" in df.columns else ""
    routing = _routing(decode)
    out = []
    for variant, g in df.groupby("variant", sort=True):
        cs = sorted(c for c in g["concurrency"].dropna().unique()
                    if g.loc[g["concurrency"] == c, "balanced_m"].gt(0).any())  # fmt: skip
        for c in cs:
            rows = g[g["concurrency"] == c]
            out.append(_per_c(variant, c, rows, routing.get(variant, ""), lead=c == cs[-1]))
    if out and not (df["concurrency"] == SEED_C).any():
        top = int(df["concurrency"].max())
        out.append(not_measured(4, f"C = {SEED_C} (the seed's regime)",
                                f"the seed's C = {SEED_C} (16 tokens per expert): the recorder "
                                f"ran up to C = {top}", lead=True))  # fmt: skip
    return out + _rank_answers(df, decode)
