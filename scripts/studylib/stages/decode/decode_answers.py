"""Question 5 as answers (:class:`~studylib.core.answer_records.Answer` rows): how CUDA graphs,
weights, tensor parallelism and concurrency change decode TPOT and energy per token.

Every comparison pairs two valid windows at one C (invalid windows never answer) and counts
only beyond the noise of both (:mod:`.decode_noise`): "CUDA graphs cut TPOT by 28 % at
C = 16" needs a 28 % gap above that noise, else the two tie there. Lead rows (the report's
first screen): the CUDA-graphs answer per weights on one GPU, the most throughput and the
least energy per token.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import pandas as pd

from ...core.answer_records import (
    ANSWERED,
    NOT_MEASURED,
    TIE,
    UNDECIDED,
    Answer,
    Question,
    not_measured,
)
from ...core.finding_records import _ok, _span, num_of
from ...core.verdicts import Contender, beyond, gap, rank
from .decode_judgements import (
    DECODE_FIGURES,
    NOT_STARTED,
    by_concurrency,
    figures_differ,
    graphs_flag,
    graphs_pairs,
    invalid_note,
    prep_decode,
    shortened_rows,
    start_failure,
    tp_pairs,
    weights_name,
)
from .decode_noise import Noise, largest, noise_of, noise_table, pct

#: The question this module answers, with its title.
DECODE_QUESTIONS: dict[Question, str] = {
    5: "How do server settings and concurrency change decode throughput and energy per token?",
}

LOWER, HIGHER = "lower", "higher"


@dataclass(frozen=True)
class Change:
    """One measure of two windows at one C: ``new`` (graphs on, FP8, TP) over ``old``."""

    c: int
    new: float
    old: float
    noise: Noise

    @property
    def ratio(self) -> float:
        return self.new / self.old if self.old > 0 else float("nan")

    @property
    def margin(self) -> float:
        """How far apart, as a share of the smaller."""
        return gap(max(self.new, self.old), min(self.new, self.old))

    @property
    def verdict(self) -> str:
        if not beyond(self.margin, self.noise.share):
            return TIE
        return LOWER if self.new < self.old else HIGHER

    @property
    def by(self) -> str:
        """ "87 %" (a cut) or "12 %" / "3.2×" (a rise)."""
        if self.verdict == LOWER:
            return f"{100 * (1 - self.ratio):.0f} %"
        return f"{self.ratio:.1f}×" if self.ratio >= 2 else f"{100 * (self.ratio - 1):.0f} %"


def changes(pairs: pd.DataFrame, new: str, old: str, noise: pd.DataFrame, new_variant: str,
            old_variant: str, kind: str) -> list[Change]:  # fmt: skip
    """Per C of ``pairs`` where both values are known: the change of ``new`` over ``old``."""
    out = []
    for _, p in pairs.sort_values("concurrency").iterrows():
        a, b = num_of(p[new]), num_of(p[old])
        if not (_ok(a) and _ok(b) and a > 0 and b > 0):
            continue
        c = int(p["concurrency"])
        n = largest(noise_of(noise, p[new_variant], c, kind),
                    noise_of(noise, p[old_variant], c, kind))  # fmt: skip
        out.append(Change(c, a, b, n))
    return out


def _cs(cs: Iterable[int]) -> str:
    cs = list(cs)
    return ", ".join(map(str, cs[:-1])) + f" and {cs[-1]}" if len(cs) > 1 else str(cs[0])


def _runs(steps: list[Change]) -> list[list[Change]]:
    """Consecutive C (in the order measured) with the same verdict, as runs."""
    runs: list[list[Change]] = []
    for s in steps:
        if runs and runs[-1][-1].verdict == s.verdict:
            runs[-1].append(s)
        else:
            runs.append([s])
    # Up to three are clearer one by one ("87 % at C = 1 and 11 % at C = 16").
    return [part for r in runs for part in ([r] if len(r) > 3 else [[s] for s in r])]


def _run_by(run: list[Change]) -> str:
    """How much a run of C changes the measure: "84 %", "27–84 %", "1.5–3.2×"."""
    if len(run) == 1:
        return run[0].by
    ratios = [s.ratio for s in run]
    if run[0].verdict == LOWER:
        lo, hi = 100 * (1 - max(ratios)), 100 * (1 - min(ratios))
    elif max(ratios) >= 2:
        return f"{min(ratios):.1f}–{max(ratios):.1f}×"
    else:
        lo, hi = 100 * (min(ratios) - 1), 100 * (max(ratios) - 1)
    return f"{lo:.0f} %" if round(lo) == round(hi) else f"{lo:.0f}–{hi:.0f} %"


def _run_cs(run: list[Change]) -> str:
    return f"C = {run[0].c}" if len(run) == 1 else f"C = {run[0].c}–{run[-1].c}"


def per_c_text(steps: list[Change], measure: str = "") -> str:
    """ "cut TPOT by 11–87 % at C = 1–16; tie at C = 64–256" (consecutive C with the same
    verdict merged; without ``measure``: "cut by ...", for a second measure after its name)."""
    runs = _runs(steps)
    parts = []
    for verdict, verb in ((LOWER, "cut"), (HIGHER, "raise")):
        hit = [f"{_run_by(r)} at {_run_cs(r)}" for r in runs if r[0].verdict == verdict]
        if hit:
            parts.append(f"{verb} {measure} by ".replace("  ", " ")
                         + (", ".join(hit[:-1]) + " and " + hit[-1] if len(hit) > 1
                            else hit[0]))  # fmt: skip
    ties = [_run_cs(r).removeprefix("C = ") for r in runs if r[0].verdict == TIE]
    if ties:
        tie = "tie" if parts or not measure else f"tie on {measure}"
        parts.append(f"{tie} at C = {', '.join(ties)}")
    return "; ".join(parts)


def with_energy(sentence: str, energy: list[Change]) -> str:
    """A comparison's TPOT sentence with its J/token clause (where J/token was measured)."""
    return sentence + (f". J/token: {per_c_text(energy)}" if energy else "") + "."


def _evidence(steps: list[Change], unit: str, digits: int) -> str:
    return "; ".join(f"C = {s.c}: {s.new:.{digits}f} against {s.old:.{digits}f} {unit} "
                     f"({s.ratio:.2f}×, noise {pct(s.noise.share)}: {s.noise.source})"
                     for s in steps)  # fmt: skip


def _decided(steps: list[Change]) -> Change | None:
    """The widest change beyond its noise (the margin a summary row reports), else None."""
    hit = [s for s in steps if s.verdict != TIE]
    return max(hit, key=lambda s: s.margin) if hit else None


def _summary(question_subject: str, sentence: str, steps: list[Change], energy: list[Change],
             verdict: str, runner_up: str, lead: bool, basis: str = "TPOT") -> Answer:  # fmt: skip
    """A comparison over its shared C as one row, by ``basis`` (``steps``): answered when
    some C differs beyond noise (the widest such margin), else a tie (the widest margin
    against its noise)."""
    best = _decided(steps)
    shown = best or max(steps, key=lambda s: s.margin)
    unit, digits = ("ms", 2) if basis == "TPOT" else ("J", 3)
    return Answer(
        5, question_subject, ANSWERED if best else TIE,
        # The winner with where it wins: one C may favour it and another not.
        verdict=f"{verdict}: {per_c_text(steps, basis)}" if best else f"{verdict} = {runner_up}",
        runner_up=runner_up if best else "", margin=shown.margin, noise=shown.noise.share,
        noise_from=shown.noise.source, basis=basis, value=f"{basis} {shown.ratio:.2f}× at "
        f"C = {shown.c}", evidence=f"{basis} " + _evidence(steps, unit, digits)
        + ("; J/token " + _evidence(energy, "J", 3) if energy else ""),
        points=len(steps), sentence=sentence, lead=lead,
    )  # fmt: skip


def _graphs_answers(decode: pd.DataFrame, noise: pd.DataFrame, engines: int) -> list[Answer]:
    """CUDA graphs on against off, per engine, weights and GPU count: a row per C both ran
    validly, and one summary row (a lead row for one GPU)."""
    out: list[Answer] = []
    pairs = graphs_pairs(decode)
    for (engine, weights, gpus), g in pairs.groupby(["engine", "weights", "gpus"], sort=True):
        on, off = g["variant_on"].iloc[0], g["variant_off"].iloc[0]
        tpot = changes(g, "tpot_on_ms", "tpot_off_ms", noise, "variant_on", "variant_off", "tpot")
        energy = changes(g, "j_on", "j_off", noise, "variant_on", "variant_off", "j")
        if not tpot:
            continue
        where = f"{weights_name(weights)}" + (f" · {gpus} GPUs" if gpus > 1 else "")
        if engines > 1:
            where = f"{engine} · {where}"
        j_by_c = {s.c: s for s in energy}
        for s in tpot:
            j = j_by_c.get(s.c)
            if s.verdict == TIE:
                text = (f"At C = {s.c}, graphs on and off tie on TPOT ({s.new:.2f} against "
                        f"{s.old:.2f} ms)")  # fmt: skip
            else:
                verb = "cut" if s.verdict == LOWER else "raise"
                text = (f"At C = {s.c}, CUDA graphs {verb} TPOT by {s.by} ({s.old:.2f} → "
                        f"{s.new:.2f} ms)")  # fmt: skip
            if j is not None:
                text += (
                    "; J/token ties"
                    if j.verdict == TIE
                    else f"; J/token {'falls' if j.verdict == LOWER else 'rises'} by {j.by}"
                )
            winner = {LOWER: "graphs on", HIGHER: "graphs off"}.get(s.verdict, "graphs on = off")
            out.append(Answer(
                5, f"CUDA graphs · {where} · C = {s.c}", ANSWERED if s.verdict != TIE else TIE,
                verdict=winner, runner_up="" if s.verdict == TIE else
                ("graphs off" if s.verdict == LOWER else "graphs on"),
                margin=s.margin, noise=s.noise.share, noise_from=s.noise.source, basis="TPOT",
                value=f"on {s.new:.2f}, off {s.old:.2f} ms", points=2, sentence=text + ".",
                evidence=f"{on} / {off}: TPOT {_evidence([s], 'ms', 2)}"
                + (f"; J/token {_evidence([j], 'J', 3)}" if j else ""),
            ))  # fmt: skip
        out.append(_summary(f"CUDA graphs · {where}",
                            f"CUDA graphs ({where}) {per_c_text(tpot, 'TPOT')}.", tpot, energy,
                            "graphs on", "graphs off", lead=gpus == 1))  # fmt: skip
        if energy:
            out.append(_summary(f"CUDA graphs · {where} · J/token",
                                f"CUDA graphs ({where}) {per_c_text(energy, 'J/token')}.",
                                energy, [], "graphs on", "graphs off", lead=False,
                                basis="J/token"))  # fmt: skip
    return out


def _weights_answers(df: pd.DataFrame, noise: pd.DataFrame, engines: int) -> list[Answer]:
    """Each weight type against BF16 (or the first), per engine, graphs setting and GPUs; a
    pair one side of which has no valid window is not measured, and says why (on an 80-GB
    H100 the bf16 server does not start)."""
    out = []
    ran = df[df["weights"] != ""].assign(gpus=df["gpus"].fillna(1))
    for (engine, graphs, gpus), g_ran in ran.groupby(["engine", "graphs", "gpus"], sort=True,
                                                     dropna=False):  # fmt: skip
        g = g_ran[g_ran["valid"] & g_ran["output_tok_s"].notna()]
        weights = sorted(set(g["weights"]))
        planned = sorted(set(g_ran["weights"]))
        if len(weights) < 2 <= len(planned):
            out += _weights_not_measured(g_ran, weights, planned, (engine, graphs, gpus), engines)
        if len(weights) < 2:
            continue
        base = "bf16" if "bf16" in weights else weights[0]
        old_v = sorted(set(g.loc[g["weights"] == base, "variant"]))[0]
        old = by_concurrency(g[g["variant"] == old_v])
        for other in (w for w in weights if w != base):
            new_v = sorted(set(g.loc[g["weights"] == other, "variant"]))[0]
            new = by_concurrency(g[g["variant"] == new_v])
            shared = sorted(set(old.index) & set(new.index))
            pairs = pd.DataFrame({
                "concurrency": shared, "new_v": new_v, "old_v": old_v,
                "tpot_new": [new.loc[c, "tpot_ms"] for c in shared],
                "tpot_old": [old.loc[c, "tpot_ms"] for c in shared],
                "j_new": [new.loc[c, "j_per_token"] for c in shared],
                "j_old": [old.loc[c, "j_per_token"] for c in shared]})  # fmt: skip
            tpot = changes(pairs, "tpot_new", "tpot_old", noise, "new_v", "old_v", "tpot")
            energy = changes(pairs, "j_new", "j_old", noise, "new_v", "old_v", "j")
            if not tpot:
                continue
            where = _where(engine, graphs, gpus, engines)
            name, base_name = weights_name(other), weights_name(base)
            sentence = with_energy(f"{name} against {base_name} weights "
                                   f"({where.lstrip(', ')}): {per_c_text(tpot, 'TPOT')}",
                                   energy)  # fmt: skip
            subject = f"{name} against {base_name} ·{where.lstrip(',')}".rstrip(" ·")
            out.append(_summary(subject, sentence, tpot, energy, name, base_name,
                                lead=False))  # fmt: skip
    return out


def _where(engine, graphs, gpus: float, engines: int) -> str:
    """A weights pair's setting: ", graphs on", ", 2 GPUs", the engine where several ran."""
    flag = graphs_flag(graphs)
    where = "" if flag is None else f", graphs {'on' if flag else 'off'}"
    where += f", {gpus:.0f} GPUs" if gpus > 1 else ""
    return (f"{engine}" if engines > 1 else "") + where


def _weights_not_measured(rows: pd.DataFrame, measured: list[str], planned: list[str],
                          setting: tuple, engines: int) -> list[Answer]:  # fmt: skip
    """Each weights pair of one setting that lacks a side: why (its server did not start,
    else no valid window). The server's own reason is the variant's row's (_variant_answers),
    a sentence of its own: said once, not again here."""
    base = "bf16" if "bf16" in planned else planned[0]
    where = _where(*setting, engines)
    out = []
    for other in (w for w in planned if w != base):
        missing = [w for w in (base, other) if w not in measured]
        if not missing:
            continue
        why = []
        for weights in missing:
            for variant, g in rows[rows["weights"] == weights].groupby("variant", sort=True):
                started = not start_failure(g)
                why.append(f"{variant}: " + ("no valid window" if started
                                             else f"{NOT_STARTED} (its row says why)"))  # fmt: skip
        name, base_name = weights_name(other), weights_name(base)
        subject = f"{name} against {base_name} ·{where.lstrip(',')}".rstrip(" ·")
        out.append(not_measured(5, subject, "; ".join(why)))
    return out


def _tp_answers(decode: pd.DataFrame, noise: pd.DataFrame) -> list[Answer]:
    """Tensor parallelism against one GPU, per engine, weights and graphs setting."""
    out = []
    pairs = tp_pairs(decode)
    keys = ["engine", "weights", "cuda_graphs", "variant_n"]
    for (_engine, weights, graphs, variant), g in pairs.groupby(keys, sort=True, dropna=False):
        n = int(g["gpus_n"].iloc[0])
        tpot = changes(g, "tpot_n_ms", "tpot_1_ms", noise, "variant_n", "variant_1", "tpot")
        energy = changes(g, "j_n", "j_1", noise, "variant_n", "variant_1", "j")
        if not tpot:
            continue
        flag = graphs_flag(graphs)
        where = weights_name(weights) + ("" if flag is None else
                                         f", graphs {'on' if flag else 'off'}")  # fmt: skip
        sentence = with_energy(f"{n} GPUs (TP) against one ({where}): "
                               f"{per_c_text(tpot, 'TPOT')}", energy)  # fmt: skip
        out.append(_summary(f"TP{n} against 1 GPU · {variant}", sentence, tpot, energy,
                            f"{n} GPUs", "1 GPU", lead=False))  # fmt: skip
    return out


def _largest_valid(g: pd.DataFrame) -> pd.Series | None:
    valid = g[g["valid"] & g["output_tok_s"].notna()]
    return None if valid.empty else valid.sort_values("concurrency").iloc[-1]


def _variant_answers(df: pd.DataFrame) -> list[Answer]:
    """Per variant: throughput, TPOT, J/token and watts at its largest valid C; its invalid
    windows by C with their first cause (never a result)."""
    out = []
    for variant, g in df.groupby("variant", sort=True):
        g = g.sort_values("concurrency")
        bad = [(int(r["concurrency"]), invalid_note(r).removeprefix("invalid: ").split("; ")[0])
               for _, r in g.iterrows() if not r["valid"]]  # fmt: skip
        why = "; ".join(f"invalid at C = {c}: {cause}" for c, cause in bad)
        why = start_failure(g) or why  # once, with the server's reason, not once per C
        top = _largest_valid(g)
        if top is None:
            out.append(Answer(5, variant, NOT_MEASURED, why=why or "no valid window",
                              sentence=f"No valid window: {why or 'none measured'}."))  # fmt: skip
            continue
        c = int(top["concurrency"])
        bits = [f"{top['output_tok_s']:,.0f} tok/s"]
        if _ok(top["tpot_ms"]):
            bits.append(f"TPOT {top['tpot_ms']:.2f} ms")
        if _ok(top["j_per_token"]):
            bits.append(f"{top['j_per_token']:.3g} J/token")
        if _ok(top["avg_w_per_gpu"]):
            w = f"{top['avg_w_per_gpu']:.0f} W per GPU"
            bits.append(w + (f" ({top['pct_limit']:.0f} % of the limit)"
                             if _ok(top["pct_limit"]) else ""))  # fmt: skip
        sentence = f"{variant} at C = {c} (its largest valid C): " + ", ".join(bits) + "."
        if bad:
            sentence += f" {'; '.join(f'Invalid at C = {c}: {cause}' for c, cause in bad)}."
        # The verdict cell: where its number was read and what else it drew there (a lone
        # variant leads question 5, and an empty verdict there read as no answer).
        verdict = f"C = {c}" + (": " + ", ".join(bits[1:]) if len(bits) > 1 else "")
        out.append(Answer(5, variant, ANSWERED, verdict=verdict, basis="tok/s", value=bits[0],
                          sentence=sentence, why=why, points=int(g["valid"].sum()),
                          evidence="; ".join(f"C = {r['concurrency']:.0f}: "
                                             f"{r['output_tok_s']:,.0f} tok/s"
                                             for _, r in g[g["valid"]].iterrows())))  # fmt: skip
    return out


def _shared_c(ok: pd.DataFrame) -> tuple[int | None, dict[str, list[int]]]:
    """The C at which the most variants ran validly (``ok``: their valid windows with the
    measure), the largest such C, and each variant's valid Cs: throughput at C = 512 against
    another variant's at C = 16 says nothing about the two, so the headlines compare one C."""
    cs = {v: sorted(int(c) for c in g["concurrency"]) for v, g in ok.groupby("variant", sort=True)}
    counts = ok.groupby("concurrency")["variant"].nunique()
    if counts.empty or counts.max() < 2:
        return None, cs
    return int(max(counts[counts == counts.max()].index)), cs


def _headline(df: pd.DataFrame, noise: pd.DataFrame, column: str, subject: str, unit: str,
              better: str, invert: bool) -> Answer | None:  # fmt: skip
    """The variant with the most throughput (``invert``: higher is better) or the least
    J/token at the one C most variants ran validly (:func:`_shared_c`), against the next
    beyond the noise; undecided where no two variants share a valid C."""
    ok = df[df["valid"] & df[column].notna() & (df[column] > 0)]
    c, cs = _shared_c(ok)
    if c is None:
        if len(cs) < 2:
            return None
        ran = "; ".join(f"{v}: C = {_cs(v_cs)}" for v, v_cs in cs.items())
        why = f"no two variants ran validly at one C ({ran}): {unit} is compared at one C only"
        return Answer(5, subject, UNDECIDED, why=why, basis=f"{unit} at one shared C",
                      sentence=f"{better.capitalize()}: not decided here: {why}.",
                      lead=True)  # fmt: skip
    at_c = ok[ok["concurrency"] == c]
    contenders = []
    for variant, g in at_c.groupby("variant", sort=True):
        top = g.iloc[0]
        n = noise_of(noise, variant, c, "j" if column == "j_per_token" else "tpot")
        value = 1 / top[column] if invert else top[column]
        contenders.append(Contender(variant, value, n.share, (top, n)))
    ranking = rank(contenders)
    if ranking is None:
        return None
    tied = [x for x in ranking.order if x.who in ranking.tied]
    fmt = (lambda x: f"{x:,.0f}") if invert else (lambda x: f"{x:.3g}")
    values = [x.row[0][column] for x in tied]
    lo, hi = min(values), max(values)
    value = f"{fmt(lo)}–{fmt(hi)} {unit}" if fmt(lo) != fmt(hi) else f"{fmt(lo)} {unit}"
    names = _cs(x.who for x in tied)
    sentence = (
        f"{better.capitalize()}: {names}{' tie' if len(tied) > 1 else ''} at {value} (C = {c})"
    )
    if ranking.runner_up is not None and len(tied) == 1:
        r = ranking.runner_up
        sentence += f"; next {r.who}, {fmt(r.row[0][column])}"
    left_out = [v for v in cs if v not in at_c["variant"].values]
    if left_out:
        sentence += f"; not compared: {_cs(left_out)} (no valid window at C = {c})"
    noise_src = max((x.row[1] for x in tied), key=lambda n: n.share).source
    return Answer(5, subject, ranking.status, verdict=" = ".join(ranking.tied),
                  runner_up=ranking.runner_up.who if ranking.runner_up else "",
                  margin=ranking.margin, noise=ranking.noise, noise_from=noise_src,
                  basis=f"{unit} at C = {c}, the C most variants ran validly", value=value,
                  evidence="; ".join(f"{x.who}: {fmt(x.row[0][column])} {unit}"
                                     for x in ranking.order),
                  points=len(ranking.order), sentence=sentence + ".", lead=True)  # fmt: skip


#: Question 5's row on a full-length run's own windows against their shortened selves.
SHORTENED = "shortened windows"


def _shortened_answers(decode: pd.DataFrame) -> list[Answer]:
    """A full-length run's (decode.full_length_s) check of the shortened study: each valid
    window against the window the study's precision rule would have ended, replayed on the
    same requests and samples, compared on DECODE_FIGURES within the larger precision of the
    two (never below the floor); none where no row states a shortened window."""
    full, short = shortened_rows(decode)
    if full.empty:
        return []
    differ = []
    for a, b in zip(full.to_dict("records"), short.to_dict("records"), strict=True):
        noise, names = figures_differ(a, b)
        if names:
            differ.append(f"{a['variant']} C = {num_of(a['concurrency']):.0f}: "
                          f"{', '.join(names)} beyond {pct(noise)}")  # fmt: skip
    n, same = len(full), len(full) - len(differ)
    lengths = pd.to_numeric(full["steady_s"], errors="coerce")
    ended = pd.to_numeric(full["shortened_steady_s"], errors="coerce")
    figures = ", ".join(DECODE_FIGURES)
    full_s = _span(lengths.min(), lengths.max(), "{:.0f}".format, " s")
    ended_s = _span(ended.min(), ended.max(), "{:.1f}".format, " s")
    sentence = (f"The study's precision rule, replayed on each full-length window ({full_s}), "
                f"would have ended them after {ended_s}; the shorter windows' {figures} agree "
                f"with the full ones' within the noise at {same} of {n}")  # fmt: skip
    sentence += f" (not: {'; '.join(differ)})." if differ else "."
    return [Answer(5, SHORTENED, ANSWERED, verdict=f"agree at {same} of {n}",
                   value=f"{same} of {n}", basis=figures, points=n,
                   evidence=f"{ended.sum():.0f} of {lengths.sum():.0f} s of windows",
                   sentence=sentence,
                   why="decode.full_length_s: the rule replayed on each window's own requests "
                   "and samples (tools/run_agreement.py --within)")]  # fmt: skip


def decode_answers(decode: pd.DataFrame | None,
                   crosscheck: pd.DataFrame | None = None) -> list[Answer]:  # fmt: skip
    """Question 5's rows, lead rows first: the CUDA-graphs summaries, the most throughput and
    the least J/token (at one shared C); then CUDA graphs per C, weights and TP against one
    GPU, each variant at its largest valid C."""
    if decode is None or decode.empty or "concurrency" not in decode.columns:
        return [not_measured(5, "decode", "no decode ran here (no decode table)",
                             lead=True)]  # fmt: skip
    df = prep_decode(decode)
    noise = noise_table(df, crosscheck)
    engines = df["engine"].nunique()
    graphs = _graphs_answers(decode, noise, engines)
    heads = [_headline(df, noise, "output_tok_s", "most throughput", "tok/s",
                       "most throughput", invert=True)]  # fmt: skip
    powered = df["j_per_token"].notna().any()
    if powered:
        heads.append(_headline(df, noise, "j_per_token", "least energy per token", "J/token",
                               "least energy per token", invert=False))  # fmt: skip
    variants = _variant_answers(df)
    # One variant, or one measured validly (the others' servers did not start, or ran no
    # valid window): its own row leads, no contest to headline.
    answered = [a for a in variants if a.status == ANSWERED]
    lone = variants if len(variants) == 1 else answered if len(answered) == 1 else []
    if lone:
        variants = [replace(a, lead=True) if a is lone[0] else a for a in variants]
        heads = []
    out = [a for a in graphs if a.lead] + [h for h in heads if h is not None]
    if not powered:
        out.append(not_measured(5, "energy per token", "no power was measured here "
                                "(power_source none): J/token and watts not reported"))  # fmt: skip
    if not graphs and df["graphs"].notna().any():
        why = "no weights ran validly with CUDA graphs both on and off at a shared C"
        if not (df["graphs"] == False).any():  # noqa: E712 - a flag column with None cells
            why = ("no variant ran without CUDA graphs (the default serves the two with them; "
                   "config/examples/full.yaml adds the two without)")  # fmt: skip
        out.insert(0, not_measured(5, "CUDA graphs", why, lead=True))
    out += [a for a in graphs if not a.lead]
    out += _weights_answers(df, noise, engines) + _tp_answers(decode, noise)
    return out + variants + _shortened_answers(decode)
