"""Question 6 as answers: where a decode step's time goes, from the step model (the kernel
tables' prediction against the server, :mod:`.step_model_build`).

Per variant and C the model explains TPOT when its prediction lies within
:data:`~.step_model_targets.TPOT_TOLERANCE` of it by more than TPOT's own noise (the decode
answers' noise, :mod:`..decode.decode_noise`); outside by more than that noise it does not;
in between it is undecided. Components are judged against the profiler's, the host time of
a step without CUDA graphs against the graphs-off gap in TPOT. Every part of a step is stated
against the step it is part of, and none exceeds it (:func:`.step_model_build.measured_parts`).
"""

from __future__ import annotations

import pandas as pd

from ...core.answer_records import ANSWERED, TIE, UNDECIDED, Answer, Question, not_measured
from ...core.finding_records import _numeric
from ...core.verdicts import NOISE_FLOOR, beyond, within_tolerance
from ..decode.decode_answers import Change
from ..decode.decode_judgements import graphs_flag, weights_name
from ..decode.decode_noise import Noise, largest, noise_of, noise_table
from .step_model_build import MODEL_COMPONENTS, measured_parts
from .step_model_targets import (
    COMPONENT_TOLERANCE,
    ENERGY_TOLERANCE,
    GAP_TOLERANCE,
    STEP_MIN_C,
    TPOT_TOLERANCE,
)

#: The question the step model answers (the report's numbering), with its title.
STEP_MODEL_QUESTIONS: dict[Question, str] = {
    6: "Where do a decode step's time and energy go: kernels, launches or the host?",
}

COMPONENT_NAMES = {"moe": "the fused MoE", "attention": "attention", "dense": "the dense GEMMs",
                   "other": "idle or unmodelled kernels"}  # fmt: skip
VERDICTS = {"within": "explained", "outside": "not explained", "undecided": "undecided"}


def step_points(table: pd.DataFrame) -> pd.DataFrame:
    """One row per variant and C of the step-model table (balanced routing): TPOT, the
    predicted step and parts, the measured parts (:func:`measured_parts`; empty without a
    profile) and the measured step they sum to, all in µs."""
    df = _numeric(table, "concurrency", "predicted_us", "measured_us", "predicted_step_us",
                  "tpot_us", "predicted_j_per_token", "j_per_token")  # fmt: skip
    df = df[df["routing"] == "balanced"]
    rows = []
    for (variant, c), g in df.groupby(["variant", "concurrency"], sort=True):
        first = g.iloc[0]
        if pd.isna(first["predicted_step_us"]) or not first["tpot_us"] > 0:
            continue
        measured = measured_parts(g)
        rows.append({
            "variant": variant, "concurrency": int(c), "weights": str(first["weights"]),
            "graphs": graphs_flag(first["cuda_graphs"]) is not False,
            "tpot_us": float(first["tpot_us"]), "predicted_us": float(first["predicted_step_us"]),
            "predicted": g.set_index("component")["predicted_us"].to_dict(),
            "measured": measured, "measured_us": sum(measured.values()) if measured else None,
            "j_predicted": first["predicted_j_per_token"], "j_measured": first["j_per_token"],
        })  # fmt: skip
    return pd.DataFrame(rows)


def _ms(us: float) -> str:
    return f"{us / 1e3:.2f}"


def _ms_signed(us: float) -> str:
    return f"{us / 1e3:+.2f}".replace("-", "−")


def _pm(share: float) -> str:
    """A tolerance as "±20 %"."""
    return f"±{100 * share:.0f} %"


def _counts(judged: list[str], n: int) -> str:
    """ "at 5 of 8 points, outside at 2, undecided at 1"."""
    text = f"at {judged.count('within')} of {n} points"
    for verdict in ("outside", "undecided"):
        if judged.count(verdict):
            text += f", {verdict} at {judged.count(verdict)}"
    return text


def _signed(share: float) -> str:
    return f"{100 * share:+.0f} %".replace("-", "−")


def _tpot_answer(p: pd.Series, noise: Noise) -> Answer:
    """One variant at one C: the predicted step against TPOT."""
    error = p["predicted_us"] / p["tpot_us"] - 1
    judged, margin = within_tolerance(error, TPOT_TOLERANCE, noise.share)
    verdict = VERDICTS[judged]
    sentence = (f"Predicted {_ms(p['predicted_us'])} ms against TPOT {_ms(p['tpot_us'])} ms "
                f"({_signed(error)}): {verdict}"
                + (f" within {_pm(TPOT_TOLERANCE)}" if judged == "within" else
                   f" beyond {_pm(TPOT_TOLERANCE)}" if judged == "outside" else
                   f" at {_pm(TPOT_TOLERANCE)}"))  # fmt: skip
    if p["measured"]:
        moe = p["measured"].get("moe", 0.0)
        sentence += (f". The fused MoE takes {_ms(moe)} ms of the {_ms(p['measured_us'])} ms "
                     "measured step")  # fmt: skip
        sentence += _past_the_step(p, noise)
    evidence = "; ".join(
        f"{name}: predicted {_ms(p['predicted'].get(name, float('nan')))} ms"
        + (f", measured {_ms(p['measured'][name])} ms" if p["measured"] else "")
        for name in MODEL_COMPONENTS
    )  # fmt: skip
    if pd.notna(p["j_predicted"]) and pd.notna(p["j_measured"]):
        evidence += f"; J/token predicted {p['j_predicted']:.3g}, measured {p['j_measured']:.3g}"
    graphs = "graphs on" if p["graphs"] else "graphs off"
    return Answer(
        6, f"{p['variant']} · C = {p['concurrency']}", UNDECIDED if judged == "undecided"
        else ANSWERED, verdict=verdict, margin=margin, noise=noise.share,
        noise_from=f"TPOT: {noise.source}", basis=f"TPOT ({graphs})",
        value=f"{_ms(p['predicted_us'])} vs {_ms(p['tpot_us'])} ms", evidence=evidence,
        points=1, sentence=sentence + ".",
    )  # fmt: skip


def _past_the_step(p: pd.Series, noise: Noise) -> str:
    """Where TPOT runs past the profiled decode step beyond TPOT's noise: the time per token
    outside the steps the profile timed, and the model against the step it does predict (at
    C = 512 on an H100, 2026-12-06: TPOT 22.91 ms, the profiled step 18.47 ms, the model
    17.64 ms; "undecided" against TPOT alone did not say the step itself was explained)."""
    past = _over_step(p, noise.share)
    if past is None:
        return ""
    over, model = past
    return (
        f"; TPOT runs {_signed(over)} past it, {_ms(p['tpot_us'] - p['measured_us'])} ms a token "
        "outside the decode steps the profile timed (SGLang runs the replacement "
        "requests' prefills between them), which the model does not predict; against "
        f"the profiled step the model is {_signed(model)}"
    )


def _over_step(p: pd.Series, noise_share: float) -> tuple[float, float] | None:
    """How far TPOT runs past the profiled decode step, and the model against that step
    (shares), where TPOT runs past it beyond ``noise_share``; else None."""
    step = p["measured_us"]
    if not step or not beyond(p["tpot_us"] / step - 1, noise_share):
        return None
    return p["tpot_us"] / step - 1, p["predicted_us"] / step - 1


def _component_answer(points: pd.DataFrame, name: str) -> Answer | None:
    """One component over every profiled point: predicted against the profiler's."""
    judged = []
    for _, p in points.iterrows():
        if not p["measured"] or not p["measured"].get(name, 0) > 0:
            continue
        predicted, measured = p["predicted"].get(name, float("nan")), p["measured"][name]
        error = predicted / measured - 1
        verdict, _ = within_tolerance(error, COMPONENT_TOLERANCE, NOISE_FLOOR)
        judged.append((verdict, error, predicted, measured, p))
    if not judged:
        return None
    within = [j for j in judged if j[0] == "within"]
    outside = [j for j in judged if j[0] == "outside"]
    label = COMPONENT_NAMES[name]
    sentence = (f"{label[0].upper()}{label[1:]}: predicted within {_pm(COMPONENT_TOLERANCE)} of "
                f"the profiler's {_counts([j[0] for j in judged], len(judged))}")  # fmt: skip
    if outside:
        verdict, error, predicted, measured, p = max(
            outside, key=lambda j: (abs(j[1]), abs(j[3] - j[2]))
        )
        at = f"{p['variant']} C = {p['concurrency']}"
        sentence += (f"; worst: none predicted against {_ms(measured)} ms at {at}"
                     if predicted == 0 else f"; worst {_signed(error)} at {at}")  # fmt: skip
    return Answer(
        6, f"component · {name}", UNDECIDED if len(within) + len(outside) < len(judged)
        else ANSWERED, verdict=count_verdict(len(within), len(judged), "within", "outside",
                              len(judged) - len(within) - len(outside)),
        noise=NOISE_FLOOR, noise_from=f"{100 * NOISE_FLOOR:.0f} % floor (the profiler's "
        "components carry no spread)", basis="predicted ÷ profiled",
        value=f"{len(within)} of {len(judged)}", points=len(judged), sentence=sentence + ".",
        evidence="; ".join(f"{j[4]['variant']} C = {j[4]['concurrency']}: {_ms(j[2])} against "
                           f"{_ms(j[3])} ms" for j in judged),
    )  # fmt: skip


def _energy_answer(points: pd.DataFrame, noise: pd.DataFrame) -> Answer | None:
    both = points.dropna(subset=["j_predicted", "j_measured"])
    both = both[both["j_measured"] > 0]
    if both.empty:
        return None
    judged = [within_tolerance(p["j_predicted"] / p["j_measured"] - 1, ENERGY_TOLERANCE,
                               noise_of(noise, p["variant"], p["concurrency"], "j").share)[0]
              for _, p in both.iterrows()]  # fmt: skip
    within = judged.count("within")
    return Answer(
        6, "energy per token", ANSWERED if "undecided" not in judged else UNDECIDED,
        verdict=count_verdict(within, len(judged), "within", "outside",
                              judged.count("undecided")), basis="J/token",
        value=f"{within} of {len(judged)}", points=len(judged),
        sentence=(f"Predicted J/token (kernel-loop watts, idle watts for the rest) is within "
                  f"{_pm(ENERGY_TOLERANCE)} of measured {_counts(judged, len(judged))}."),
        evidence="; ".join(f"{p['variant']} C = {p['concurrency']}: {p['j_predicted']:.3g} "
                           f"against {p['j_measured']:.3g} J" for _, p in both.iterrows()),
    )  # fmt: skip


def _gap_answers(points: pd.DataFrame, noise: pd.DataFrame) -> list[Answer]:
    """Per weights: the graphs-off step against the graphs-on one at each shared C where
    the two differ beyond their noise, the model's predicted host time against that gap; and
    one lead row per weights."""
    out = []
    for weights, g in points.groupby("weights", sort=True):
        on, off = g[g["graphs"]], g[~g["graphs"]]
        pairs = on.merge(off, on="concurrency", suffixes=("_on", "_off"))
        rows, ties = [], []
        for _, r in pairs.sort_values("concurrency").iterrows():
            c = int(r["concurrency"])
            n = largest(noise_of(noise, r["variant_on"], c), noise_of(noise, r["variant_off"], c))
            # The same decision as question 5's CUDA-graphs row at this C.
            if Change(c, r["tpot_us_on"], r["tpot_us_off"], n).verdict == TIE:
                ties.append(c)
                continue
            gap = r["tpot_us_off"] - r["tpot_us_on"]
            predicted = r["predicted_us_off"] - r["predicted_us_on"]
            # TPOT's noise (a share of the graphs-on step) as a share of the gap.
            gap_noise = Noise(n.share * r["tpot_us_on"] / abs(gap), f"TPOT: {n.source}")
            judged, margin = within_tolerance(predicted / gap - 1, GAP_TOLERANCE, gap_noise.share)
            verdict = {"within": "explained", "outside": "missed"}.get(judged, "undecided")
            sentence = (f"Without CUDA graphs a step takes {_ms(abs(gap))} ms "
                        f"{'longer' if gap > 0 else 'less'} "
                        f"({_ms(r['tpot_us_off'])} against {_ms(r['tpot_us_on'])} ms); the model "
                        f"predicts {_ms(predicted)} ms more: {verdict}")  # fmt: skip
            measured = r["measured_off"]
            if measured:
                sentence += (f". Idle or unmodelled: {_ms(measured['other'])} ms of the "
                             f"{_ms(r['measured_us_off'])} ms measured step")  # fmt: skip
            rows.append((c, gap, predicted, verdict))
            out.append(Answer(
                6, f"host time · {weights_name(weights)} · C = {c}",
                UNDECIDED if judged == "undecided" else ANSWERED, verdict=verdict,
                margin=margin, noise=gap_noise.share, noise_from=gap_noise.source,
                basis="graphs-off TPOT − graphs-on TPOT", value=f"{_ms(gap)} ms",
                evidence=f"{r['variant_off']} against {r['variant_on']}; predicted steps "
                f"{_ms(r['predicted_us_off'])} and {_ms(r['predicted_us_on'])} ms",
                points=2, sentence=sentence + ".",
            ))  # fmt: skip
        if not rows:
            continue
        explained = sum(v == "explained" for *_, v in rows)
        cs = ", ".join(str(c) for c, *_ in rows)
        sentence = (f"{weights_name(weights)} without CUDA graphs: "
                    + ", ".join(_ms_signed(gap) for _, gap, _, _ in rows)
                    + f" ms per step at C = {cs}; the model predicts "
                    + ", ".join(_ms_signed(p) for _, _, p, _ in rows)
                    + f" ms ({explained} of {len(rows)} within {_pm(GAP_TOLERANCE)})")  # fmt: skip
        if ties:
            sentence += f"; tie at C = {', '.join(map(str, ties))}"
        out.insert(0, Answer(
            6, f"host time · {weights_name(weights)}",
            UNDECIDED if any(v == "undecided" for *_, v in rows) else ANSWERED,
            verdict=count_verdict(explained, len(rows), "explained", "not explained",
                                  sum(v == "undecided" for *_, v in rows)),
            basis="graphs-off gap",
            value=f"{explained} of {len(rows)} explained", points=len(rows),
            sentence=sentence + ".", lead=True,
        ))  # fmt: skip
    return out


def _graphed_summary(answers: list[Answer], points: pd.DataFrame) -> Answer | None:
    """The lead row: with CUDA graphs at C ≥ STEP_MIN_C, how often the model explains TPOT
    and how much of the measured step the fused MoE takes."""
    graphed = points[points["graphs"] & (points["concurrency"] >= STEP_MIN_C)]
    if graphed.empty:
        return None
    by_subject = {a.subject: a for a in answers}
    verdicts = [by_subject[f"{p['variant']} · C = {p['concurrency']}"].verdict
                for _, p in graphed.iterrows()]  # fmt: skip
    explained = verdicts.count("explained")
    sentence = (f"With CUDA graphs at C ≥ {STEP_MIN_C} the model explains TPOT within "
                f"{_pm(TPOT_TOLERANCE)} at {explained} of {len(verdicts)} points")  # fmt: skip
    # The points left out, under their own verdict: an undecided one is not a miss.
    missed: dict[str, list[str]] = {}
    for (_, p), v in zip(graphed.iterrows(), verdicts, strict=True):
        if v != "explained":
            missed.setdefault(v, []).append(
                f"{p['variant']} C = {p['concurrency']} "
                f"({_signed(p['predicted_us'] / p['tpot_us'] - 1)})"
            )
    if missed:
        sentence += " (" + "; ".join(f"{v}: {', '.join(items)}"
                                     for v, items in sorted(missed.items())) + ")"  # fmt: skip
    shares = [p["measured"].get("moe", 0.0) / p["measured_us"]
              for _, p in graphed.iterrows() if p["measured"] and p["measured_us"]]  # fmt: skip
    if shares:
        lo, hi = min(shares), max(shares)
        span = (f"{100 * lo:.0f} %" if round(100 * lo) == round(100 * hi)
                else f"{100 * lo:.0f}–{100 * hi:.0f} %")  # fmt: skip
        sentence += f"; the fused MoE is {span} of the measured step"
    past = [(p, _over_step(p, by_subject[f"{p['variant']} · C = {p['concurrency']}"].noise))
            for _, p in graphed.iterrows()]  # fmt: skip
    past = [(p, over) for p, over in past if over is not None]
    if past:
        models = sorted(model for _, (_, model) in past)
        span = (_signed(models[0]) if round(100 * models[0]) == round(100 * models[-1])
                else f"{_signed(models[0])} to {_signed(models[-1])}")  # fmt: skip
        sentence += ("; TPOT runs past the profiled decode step at "
                     + ", ".join(f"{p['variant']} C = {p['concurrency']} ({_signed(over)})"
                                 for p, (over, _) in past)
                     + f", where the model is {span} from that step")  # fmt: skip
    return Answer(
        6, "step model · graphs on", UNDECIDED if "undecided" in verdicts else ANSWERED,
        verdict=count_verdict(explained, len(verdicts), "explained", "not explained",
                              verdicts.count("undecided")),
        basis="TPOT",
        value=f"{explained} of {len(verdicts)}", points=len(verdicts),
        sentence=sentence + ".", lead=True,
    )  # fmt: skip


def count_verdict(hits: int, of: int, yes: str, no: str, undecided: int = 0) -> str:
    """A verdict over several points: ``yes`` at all of them, ``no`` at none, else how many;
    a point the noise left ``undecided`` is neither, and is said (was: counted as ``no``)."""
    if not undecided:
        if hits == of:
            return f"{yes} ({hits} of {of})" if of > 1 else yes
        if hits == 0:
            return f"{no} (0 of {of})" if of > 1 else no
        return f"{yes} at {hits} of {of}"
    missed = of - hits - undecided
    parts = [f"{yes} at {hits} of {of}" if hits else "",
             f"{no} at {missed} of {of}" if missed else "",
             f"undecided at {undecided}"]  # fmt: skip
    return ", ".join(part for part in parts if part)


def step_answers(step_model: pd.DataFrame | None, decode: pd.DataFrame | None = None,
                 crosscheck: pd.DataFrame | None = None) -> list[Answer]:  # fmt: skip
    """Question 6's rows: lead rows (graphed steps explained, host time per weights), then per
    variant and C, per component and energy."""
    if step_model is None or step_model.empty or "predicted_step_us" not in step_model.columns:
        why = ("no step model: it needs a one-GPU SGLang decode variant and the sweep's "
               "fused-MoE, attention and dense kernels")  # fmt: skip
        if decode is None or decode.empty:
            why = "no decode ran here (no decode table)"
        return [not_measured(6, "step model", why, lead=True)]
    points = step_points(step_model)
    if points.empty:
        missing = sorted({m for m in step_model.get("missing", pd.Series()).dropna() if m})
        return [not_measured(6, "step model", "the sweep lacks kernels the step model needs: "
                             + "; ".join(missing[:4]), lead=True)]  # fmt: skip
    noise = noise_table(decode, crosscheck)
    per_point = [_tpot_answer(p, noise_of(noise, p["variant"], p["concurrency"]))
                 for _, p in points.iterrows()]  # fmt: skip
    lead = [a for a in (_graphed_summary(per_point, points),) if a is not None]
    gaps = _gap_answers(points, noise)
    components = [_component_answer(points, name) for name in MODEL_COMPONENTS]
    return (lead + [a for a in gaps if a.lead] + per_point + [a for a in gaps if not a.lead]
            + [a for a in components if a is not None]
            + [a for a in (_energy_answer(points, noise),) if a is not None])  # fmt: skip
