"""Question 6's findings (the sentences of ``compute_findings``, kept until every question
answers through ``study_answers.STAGE_ANSWERS``; the report reads :mod:`.step_model_answers`)."""

from __future__ import annotations

import pandas as pd

from ...core.finding_records import Findings, _numeric
from ..decode.decode_judgements import graphs_flag
from .step_model_build import PROFILE_BASIS, from_profile
from .step_model_targets import (
    COMPONENT_TOLERANCE,
    ENERGY_TOLERANCE,
    GAP_TOLERANCE,
    HIDDEN_GAP_SHARE,
    STEP_MIN_C,
    TPOT_TOLERANCE,
)


def q6_step(table: pd.DataFrame | None) -> Findings:
    out = Findings()
    if table is None or table.empty or "predicted_step_us" not in table.columns:
        out.miss(6, "no step model (results/tables/step_model.csv): it needs a one-GPU SGLang "
                    "decode variant and the sweep's fused-MoE, attention and dense kernels",
                 expected=True)  # fmt: skip
        return out
    df = _numeric(table[table["routing"] == "balanced"], "predicted_us", "measured_us",
                  "predicted_step_us", "tpot_us", "predicted_j_per_token", "j_per_token",
                  "hbm_floor_us", "concurrency")  # fmt: skip
    df["graphs"] = df["cuda_graphs"].map(lambda v: graphs_flag(v) is not False)
    steps = df.drop_duplicates(["variant", "concurrency"]).dropna(subset=["predicted_step_us"])
    if steps.empty:
        missing = sorted({m for m in table["missing"].dropna() if m})
        out.miss(6, "the sweep lacks kernels the step model needs: " + "; ".join(missing[:4]))
        return out
    for variant, g in steps.groupby("variant", sort=True):
        g = g.sort_values("concurrency")
        parts = df[df["variant"] == variant]
        moe = parts[parts["component"] == "moe"].set_index("concurrency")["predicted_us"]
        bits = []
        for _, r in g.iterrows():
            c = int(r["concurrency"])
            ratio = r["predicted_step_us"] / r["tpot_us"] if r["tpot_us"] else float("nan")
            bit = (f"C = {c}: predicted {r['predicted_step_us'] / 1e3:.2f} ms against TPOT "
                   f"{r['tpot_us'] / 1e3:.2f} ms ({ratio:.2f}×)")  # fmt: skip
            if c in moe.index and r["predicted_step_us"]:
                bit += f", MoE {100 * moe[c] / r['predicted_step_us']:.0f} % of it"
            if pd.notna(r["hbm_floor_us"]) and r["hbm_floor_us"] > 0:
                bit += f", TPOT {r['tpot_us'] / r['hbm_floor_us']:.2f}× the HBM floor"
            if pd.notna(r["predicted_j_per_token"]) and pd.notna(r["j_per_token"]):
                bit += (f"; J/token {r['predicted_j_per_token']:.3f} predicted against "
                        f"{r['j_per_token']:.3f}")  # fmt: skip
            bits.append(bit)
        graphs = "CUDA graphs on" if g["graphs"].iloc[0] else "CUDA graphs off"
        ok = g[(g["concurrency"] >= STEP_MIN_C) & g["graphs"]]
        within = (ok["predicted_step_us"] / ok["tpot_us"] - 1).abs() <= TPOT_TOLERANCE
        tail = ""
        if len(ok):
            tail = (f" Within ±{TPOT_TOLERANCE:.0%} of TPOT at {int(within.sum())} of "
                    f"{len(ok)} concurrencies ≥ {STEP_MIN_C}.")  # fmt: skip
            tail += _energy_targets(ok) + _component_targets(parts, ok["concurrency"])
        out.add(6, f"{variant} ({graphs}), the step from the HBM-cold kernel times with "
                   f"balanced routing: " + "; ".join(bits) + "." + tail,
                variant=variant, within=int(within.sum()), points=len(ok))  # fmt: skip
    _launch_gap(out, df)
    return out


def _energy_targets(steps: pd.DataFrame) -> str:
    """How many of these steps' predicted J/token are within ENERGY_TOLERANCE of measured."""
    both = steps.dropna(subset=["predicted_j_per_token", "j_per_token"])
    if both.empty:
        return ""
    ratio = both["predicted_j_per_token"] / both["j_per_token"]
    within = int(((ratio - 1).abs() <= ENERGY_TOLERANCE).sum())
    return f" J/token within ±{ENERGY_TOLERANCE:.0%} at {within} of {len(both)}."


def _component_targets(parts: pd.DataFrame, concurrencies: pd.Series) -> str:
    """How many predicted components are within COMPONENT_TOLERANCE of the profiler's at
    these concurrencies, and which are not (with their ratios)."""
    rows = parts[parts["concurrency"].isin(concurrencies)
                 & from_profile(parts["measured_basis"]) & (parts["measured_us"] > 0)]  # fmt: skip
    rows = rows.dropna(subset=["predicted_us"])
    if rows.empty:
        return ""
    ratio = rows["predicted_us"] / rows["measured_us"]
    off = rows[(ratio - 1).abs() > COMPONENT_TOLERANCE].assign(ratio=ratio)
    # Attention depends on the KV length the profiled steps ran at: say it, or that the
    # profile (older than the column) did not record it.
    context = pd.to_numeric(rows.get("profile_context"), errors="coerce").dropna()
    at = (f"profiled at KV length {context.median():.0f}" if len(context)
          else "KV length of the profile not recorded")  # fmt: skip
    text = (f" Components within ±{COMPONENT_TOLERANCE:.0%} of the profiler's ({at}) at "
            f"{len(rows) - len(off)} of {len(rows)}")  # fmt: skip
    if len(off):
        text += " (not: " + ", ".join(_off_by(r) for _, r in off.iterrows()) + ")"
    # Profiles whose step ran far from TPOT: their other is TPOT less their kernels
    # (step_model.representative); say where, with the profiled step against TPOT.
    adjusted = rows[~from_profile(rows["measured_basis"], whole=True)]
    adjusted = adjusted.drop_duplicates("concurrency")
    if len(adjusted):
        text += "; other is TPOT less the profiled kernels where the profiled step ran " + (
            ", ".join(
                f"{r['profile_step_us'] / r['tpot_us']:.2f}× TPOT (C = {int(r['concurrency'])})"
                for _, r in adjusted.iterrows()
            )  # fmt: skip
        )
    return text + "."


def _off_by(row) -> str:
    """One component outside its tolerance: the ratio, or both times where none is
    predicted (a ratio of 0 says nothing)."""
    where = f"{row['component']} at C = {int(row['concurrency'])}"
    if row["predicted_us"] == 0:
        return f"{where} none predicted against {row['measured_us'] / 1e3:.2f} ms"
    return f"{where} {row['ratio']:.2f}×"


def gap_explained(gap_us: float, predicted_us: float, tpot_on_us: float) -> bool:
    """Whether the predicted graphs-off gap explains the measured one (module constants)."""
    hidden = HIDDEN_GAP_SHARE * tpot_on_us
    if gap_us < hidden:
        return predicted_us < hidden
    return abs(predicted_us / gap_us - 1) <= GAP_TOLERANCE


def _launch_gap(out: Findings, df: pd.DataFrame) -> None:
    """Graphs off against on (same weights, same C): the TPOT gap against the host time the
    model predicts (the step model's graphs-off ``other``) and the profiler's."""
    steps = df.drop_duplicates(["variant", "concurrency"])
    other = df[df["component"] == "other"].set_index(["variant", "concurrency"])
    for weights, g in steps.groupby("weights", sort=True):
        on, off = g[g["graphs"]], g[~g["graphs"]]
        pairs = on.merge(off, on="concurrency", suffixes=("_on", "_off"))
        bits, explained = [], 0
        for _, r in pairs.sort_values("concurrency").iterrows():
            gap = r["tpot_us_off"] - r["tpot_us_on"]
            c = int(r["concurrency"])
            predicted = r["predicted_step_us_off"] - r["predicted_step_us_on"]
            if pd.isna(gap) or pd.isna(predicted):
                continue
            ok = gap_explained(gap, predicted, r["tpot_us_on"])
            explained += ok
            bit = (f"C = {c}: {gap / 1e3:+.2f} ms ({gap / r['tpot_us_on']:+.0%} of TPOT), "
                   f"predicted {predicted / 1e3:+.2f} ms")  # fmt: skip
            measured = other["measured_us"].get((r["variant_off"], c), float("nan"))
            if other["measured_basis"].get((r["variant_off"], c)) == PROFILE_BASIS:
                bit += f", GPU idle or in unmodelled kernels {measured / 1e3:.2f} ms per step"
            bits.append(bit + ("" if ok else " (missed)"))
        if bits:
            out.add(6, f"{weights} weights, CUDA graphs off against on (the host's time beyond "
                       "the kernels, from the sweep's least eager time per call): "
                    + "; ".join(bits) + f". Explained within ±{GAP_TOLERANCE:.0%} (or both "
                    f"under {HIDDEN_GAP_SHARE:.0%} of TPOT) at {explained} of {len(bits)}; "
                    "what the prediction misses is the server's own host work per step "
                    "(Python around the kernels, scheduling, kernels the model leaves out).",
                    weights=weights, explained=explained, points=len(bits))  # fmt: skip
