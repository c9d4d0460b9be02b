"""The seed write-up's figures set beside this machine's: one answer row per claim of the
seed, each taking its numbers from the answers of the questions before it (or the same
tables they read), so that the seed section never contradicts them."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pandas as pd

from .core.answer_records import ANSWERED, NOT_MEASURED, TIE, UNDECIDED, Answer, Question
from .core.finding_records import (
    _gpu,
    _has,
    _is_cpu,
    _m_list,
    _numeric,
    _plain,
    _sm_arch,
    _span,
    describe_machine,
    fmt_m,
    fmt_ratio,
    num_of,
    text_of,
)
from .core.verdicts import Contender, rank, spread
from .stages.decode.decode_judgements import dummy_weights_note, prep_decode
from .stages.kernel_power.kernel_power_answers import ALL_MODES
from .stages.kernel_power.window_classes import DECODE_GROUP
from .stages.sweep.sweep_thresholds import DECODE_MAX_M
from .study_tables import StudyTables

#: The seed comparison's place among the report's questions, with its title.
SEED_QUESTIONS: dict[Question, str] = {"seed": "The seed's figures beside this machine"}

#: The seed write-up's figures (``seed/fp4-power-pivot.txt``), quoted with their source.
SEED_SOURCE = "seed/fp4-power-pivot.txt, message 876 and the chunk summary it cites"
SEED = {
    "gpu": "NVIDIA RTX PRO 6000 Blackwell",
    "gpus": 8,
    "arch": "sm_120",
    "compute_capability": "12.0",
    "power_limit_w": 600.0,
    "fp4_small_us": (30.0, 42.0),
    "fp4_small_quote": (
        "At those sizes, the FP4 GEMM takes ~30-42 microseconds regardless of problem size"
    ),
    # 512 tokens in flight × top-8 routing over 256 experts, perfectly balanced.
    "decode_concurrency": 512,
    "top_k": 8,
    "experts": 256,
    "tokens_per_expert_quote": "512 * 8 / 256 = 16",
    "decode_w": 235.0,
    "decode_w_quote": "GPUs draw only ~235W out of 600W TDP during inference",
    "sgl_fp4_fails_below_m": 256,
    "sgl_fp4_quote": (
        "sgl_kernel.cutlass_scaled_fp4_mm errors on small batch sizes (M<256) and is actually "
        "slower than flashinfer CUTLASS at larger sizes"
    ),
}
SEED["tokens_per_expert"] = SEED["decode_concurrency"] * SEED["top_k"] / SEED["experts"]
SEED["decode_pct"] = 100.0 * SEED["decode_w"] / SEED["power_limit_w"]
#: Architectures with FP4 tensor cores (Blackwell): FP4 GEMMs run nowhere else.
FP4_ARCHS = ("sm_100", "sm_103", "sm_110", "sm_120", "sm_121")

Q = "seed"
GPUS = "GPUs"
FP4 = f"FP4 GEMMs, M ≤ {DECODE_MAX_M} (seed: 30–42 µs)"
SGL_FP4 = "sgl_kernel FP4 GEMM (seed: fails at M < 256)"
POWER = "decode power (seed: 235 of 600 W)"
EXPERTS = "tokens per expert (seed: 16)"
CITED = (ANSWERED, TIE, UNDECIDED)


def seed_answers(tables: StudyTables, before: Sequence[Answer] = ()) -> list[Answer]:
    """One row per seed claim; ``before``: the answers of the questions before this one
    (compute_answers passes them), whose numbers the rows cite."""
    hardware = tables.hardware
    arch = _sm_arch(_gpu(hardware).get("compute_capability"))
    gpu_less = _is_cpu(hardware, tables.peaks)
    no_fp4 = ("this machine has no GPU" if gpu_less else
              f"FP4 tensor-core GEMMs need sm_100 or sm_120; this GPU is {arch}"
              if arch and arch not in FP4_ARCHS else "")  # fmt: skip
    return [
        _gpus_row(hardware, tables.peaks),
        _fp4_row(no_fp4, before),
        _sgl_row(no_fp4, tables.sweep),
        _power_row(tables.decode, before),
        _experts_row(tables.expert_m, tables.decode, before),
    ]


def _missing(subject: str, why: str, evidence: str = "", lead: bool = False) -> Answer:
    return Answer(Q, subject, NOT_MEASURED, why=why, evidence=evidence, lead=lead,
                  sentence=f"Not measured here: {why}.")  # fmt: skip


def _cite(a: Answer) -> str:
    return f"Q{a.question} {a.subject}: {a.value or a.verdict}"


def _gpus_row(hardware: dict | None, peaks: dict | None) -> Answer:
    seed_hw = (f"{SEED['gpus']}× {SEED['gpu']} ({SEED['arch']}, "
               f"{SEED['power_limit_w']:.0f} W each)")  # fmt: skip
    if hardware is None and peaks is None:
        return _missing(GPUS, "no hardware record (hardware.json)", lead=True)
    gpu, gpus = _gpu(hardware), (hardware or {}).get("gpus") or []
    limit = num_of(gpu.get("power_limit_w"))
    here = describe_machine(hardware, peaks)
    if gpus:  # as the seed's GPUs are named: count, name, architecture, power limit
        bits = [b for b in (_sm_arch(gpu.get("compute_capability")),
                            f"{limit:.0f} W each" if limit > 0 else "") if b]  # fmt: skip
        here = f"{len(gpus)}× {text_of(gpu.get('name')) or 'GPU'}" + (
            f" ({', '.join(bits)})" if bits else ""
        )
    value = f"{limit:.0f} W vs {SEED['power_limit_w']:.0f} W" if limit > 0 else ""
    return Answer(Q, GPUS, ANSWERED, verdict=here, runner_up=seed_hw, value=value,
                  basis="hardware.json", lead=True,
                  sentence=f"The seed ran on {seed_hw}; this machine has {here}.")  # fmt: skip


_M_NUMBERS = re.compile(r"M\s*(?:=|≤|<=)?\s*(\d+)(?:\s*[–-]\s*(\d+))?")


def decode_sized(subject: str) -> bool:
    """Whether an answer's subject is about decode-sized M only ("M ≤ 64", "M 1–64",
    "M = 16"): every M it names is at most :data:`DECODE_MAX_M`."""
    sizes = [int(n) for m in _M_NUMBERS.finditer(subject) for n in m.groups() if n]
    return bool(sizes) and max(sizes) <= DECODE_MAX_M


def _fp4_row(no_fp4: str, before: Sequence[Answer]) -> Answer:
    q1 = [a for a in before if a.question == 1]
    decode = [a for a in q1 if decode_sized(a.subject) and a.status in CITED]
    others = "; ".join(_cite(a) for a in decode if "FP4" not in a.subject.upper())
    if no_fp4:
        return _missing(FP4, no_fp4, evidence=others)
    fp4 = [a for a in decode if "FP4" in a.subject.upper() and a.value]
    if not fp4:
        why = next((a.why for a in q1 if "FP4" in a.subject.upper() and a.why),
                   "question 1 has no decode-sized FP4 answer")  # fmt: skip
        return _missing(FP4, why, evidence=others)
    values = "; ".join(a.value for a in fp4)
    lo, hi = SEED["fp4_small_us"]
    return Answer(Q, FP4, ANSWERED, verdict=values, runner_up=f"seed {lo:.0f}–{hi:.0f} µs",
                  basis="question 1", value=values, evidence="; ".join(map(_cite, fp4)),
                  points=len(fp4),
                  sentence=f"Here decode-sized FP4 GEMMs take {values} (Q1), against the "
                  f"seed's {lo:.0f}–{hi:.0f} µs.")  # fmt: skip


def _time_column(rows: pd.DataFrame) -> str:
    for column in ("cold_us", "graph_us", "eager_us"):
        if column in rows.columns and pd.to_numeric(rows[column], errors="coerce").notna().any():
            return column
    return "eager_us"


def _sgl_row(no_fp4: str, sweep: pd.DataFrame | None) -> Answer:
    if no_fp4:
        return _missing(SGL_FP4, no_fp4)
    if not _has(sweep, "backend", "op", "status", "M"):
        return _missing(SGL_FP4, "no sweep table")
    df = _numeric(sweep, "M", "eager_us", "graph_us", "cold_us", "eager_iqr_us", "graph_iqr_us",
                  "cold_iqr_us")  # fmt: skip
    for c in ("backend", "impl", "op", "status"):
        df[c] = df[c].map(text_of)
    sgl = df[(df["backend"] == "sgl_kernel") & (df["op"] == "cutlass_scaled_fp4_mm")]
    if sgl.empty:
        return _missing(SGL_FP4, "sgl_kernel's cutlass_scaled_fp4_mm is not in this sweep's grid")
    ok = sgl[sgl["status"] == "ok"]
    if ok.empty:
        top = sgl["status"].value_counts().index[0]
        return _missing(SGL_FP4, f"sgl_kernel's FP4 GEMM ran at none of its {len(sgl)} points "
                                 f"({top}; the support matrix says why)")  # fmt: skip
    failed = sgl[sgl["status"] != "ok"]
    grid = sgl["M"]
    fails = (f"fails at {_m_list(failed['M'], grid)}, runs at {_m_list(ok['M'], grid)}"
             if len(failed) else "runs at every M")  # fmt: skip
    fi = df[(df["backend"] == "flashinfer") & (df["impl"] == "cutlass") & (df["op"] == "mm_fp4")
            & (df["status"] == "ok")]  # fmt: skip
    column = _time_column(ok)
    iqr = column.replace("_us", "_iqr_us")
    keys = [k for k in ("shape", "M", "G") if k in df.columns]
    both = ok.merge(fi, on=keys, suffixes=("", "_fi"))
    slower = faster = tied = 0
    for rec in both.to_dict("records"):
        ranking = rank([Contender("sgl", rec[column], spread(rec.get(iqr), rec[column])),
                        Contender("fi", rec[f"{column}_fi"],
                                  spread(rec.get(f"{iqr}_fi"), rec[f"{column}_fi"]))])  # fmt: skip
        if ranking is None:
            continue
        if len(ranking.tied) > 1:
            tied += 1
        elif ranking.tied == ("fi",):
            slower += 1
        else:
            faster += 1
    shared = slower + faster + tied
    mode = column.removesuffix("_us")
    versus = (f"slower than FlashInfer's mm_fp4 at {slower}, faster at {faster}, tied at {tied} "
              f"of {shared} shared sizes ({mode})" if shared else
              "no size shared with FlashInfer's mm_fp4")  # fmt: skip
    return Answer(Q, SGL_FP4, ANSWERED, verdict=f"{fails}; {versus}", basis=mode,
                  value=f"slower at {slower} of {shared}" if shared else "",
                  evidence=f"{len(sgl)} points, {len(ok)} ok", points=len(sgl),
                  sentence=f"Here sgl_kernel's FP4 GEMM {fails}; {versus}.")  # fmt: skip


def _watts(rows: pd.DataFrame) -> str:
    w, p = rows["avg_w_per_gpu"], rows["pct_limit"]
    text = _span(w.min(), w.max(), _plain, " W")
    return text + (f" ({_span(p.min(), p.max(), _plain, ' %')} of the limit)"
                   if p.notna().any() else "")  # fmt: skip


def _power_row(decode: pd.DataFrame | None, before: Sequence[Answer]) -> Answer:
    c = SEED["decode_concurrency"]
    seed = f"{SEED['decode_w']:.0f} W of {SEED['power_limit_w']:.0f} W"
    measured_c = ""
    if _has(decode, "concurrency"):
        d = prep_decode(decode)
        d = d[d["valid"] & d["avg_w_per_gpu"].notna()]
        measured_c = ", ".join(f"{x:.0f}" for x in sorted(set(d["concurrency"].dropna())))
        # The seed's C where it ran, else the largest C decode held here, said as such.
        at_c = c if (d["concurrency"] == c).any() else d["concurrency"].max()
        at = d[d["concurrency"] == at_c]
        if len(at):
            off = at[at["graphs"] == False]  # noqa: E712 - the seed ran with graphs off
            rows, how = (off, "with CUDA graphs off, as the seed ran") if len(off) else (at, "")
            value = _watts(rows)
            # The verdict sets this machine's share of its limit beside the seed's (its own
            # GPUs' limit differs): the number column already holds the watts.
            share = 100 * SEED["decode_w"] / SEED["power_limit_w"]
            p = rows["pct_limit"]
            verdict = (f"{_span(p.min(), p.max(), _plain, ' %')} of the limit (seed: "
                       f"{share:.0f} %)" if p.notna().any()
                       else f"{value} (seed: {SEED['decode_w']:.0f} W)")  # fmt: skip
            where = (
                f"at C = {c}"
                if at_c == c
                else f"at C = {at_c:.0f}, the most requests in flight here (the seed's: {c})"
            )
            return Answer(Q, POWER, ANSWERED, verdict=verdict, runner_up=seed,
                          basis="decode.csv",
                          value=value, points=len(rows), lead=True,
                          evidence=", ".join(sorted(set(rows["variant"].map(text_of)))),
                          sentence=f"Here decode {where} draws {value} per GPU"
                          f"{' ' + how if how else ''}, against the seed's {seed}.")  # fmt: skip
    loops = next((a for a in before if a.question == 3 and a.lead and a.status in CITED
                  and (a.subject == ALL_MODES or a.subject.startswith(DECODE_GROUP))),
                 None)  # fmt: skip
    not_here = f"decode at the seed's C = {c} was not measured here" + (
        f" (decode ran at C = {measured_c})" if measured_c else ""
    )
    if loops is None:
        return _missing(POWER, not_here + ", nor decode-sized kernel loops", lead=True)
    verdict = "no verdict" if loops.status == UNDECIDED else loops.verdict
    return Answer(Q, POWER, loops.status, verdict=loops.verdict, runner_up=seed,
                  margin=loops.margin, noise=loops.noise, noise_from=loops.noise_from,
                  basis="question 3", value=loops.value, evidence=_cite(loops),
                  points=loops.points, why=not_here + ": question 3's decode-sized loops stand in",
                  lead=True,
                  sentence=f"Decode at C = {c} was not measured here; decode-sized GEMM loops "
                  f"draw {loops.value}: {verdict} (Q3).")  # fmt: skip


def _experts_row(expert_m: pd.DataFrame | None, decode: pd.DataFrame | None,
                 before: Sequence[Answer]) -> Answer:  # fmt: skip
    seed = f"{SEED['tokens_per_expert']:.0f} tokens per expert ({SEED['tokens_per_expert_quote']})"
    caveat = _routing_caveat(decode)
    q4 = [a for a in before if a.question == 4]
    cited = next((a for a in q4 if a.lead and a.status in CITED and a.value), None)
    if cited is not None:
        return Answer(Q, EXPERTS, cited.status, verdict=cited.verdict, runner_up=seed,
                      margin=cited.margin, noise=cited.noise, noise_from=cited.noise_from,
                      basis="question 4", value=cited.value, evidence=_cite(cited),
                      points=cited.points, why=caveat,
                      sentence=f"The seed assumed {seed}; here per-expert M is {cited.value} "
                      "(Q4).")  # fmt: skip
    if _has(expert_m, "m", "concurrency"):
        em = _numeric(expert_m, "m", "balanced_m", "concurrency")
        em = em[em["m"].notna() & em["concurrency"].notna()]
        if len(em):
            # The largest concurrency measured: the nearest to the seed's 512 tokens in flight.
            top = em[em["concurrency"] == em["concurrency"].max()]
            c, m, bal = float(top["concurrency"].iloc[0]), top["m"], top["balanced_m"].dropna()
            value = f"M {fmt_m(m.min())}–{fmt_m(m.max())} at C = {c:.0f}"
            against = f" against a balanced {fmt_m(bal.iloc[0])}" if len(bal) else ""
            evidence = (f"busiest expert {fmt_ratio(m.max() / bal.iloc[0])} the balanced M"
                        if len(bal) and bal.iloc[0] > 0 else "")  # fmt: skip
            here = f"{fmt_m(m.min())}–{fmt_m(m.max())} at C = {c:.0f}{against}"
            return Answer(Q, EXPERTS, ANSWERED, verdict=value + against, runner_up=seed,
                          basis="expert_m.csv", value=value, evidence=evidence, points=len(top),
                          why=caveat,
                          sentence=f"The seed assumed {SEED['tokens_per_expert']:.0f} tokens "
                          f"per expert at C = {SEED['decode_concurrency']}; here per-expert M "
                          f"is {here}.")  # fmt: skip
    why = next((a.why for a in q4 if a.status == NOT_MEASURED and a.why),
               "no expert-distribution record here")  # fmt: skip
    return _missing(EXPERTS, why)


def _routing_caveat(decode: pd.DataFrame | None) -> str:
    """What routing the recorded experts saw, where the served weights were random."""
    variants, _ = dummy_weights_note(decode)
    if not variants:
        return ""
    routing = set(decode.get("routing", pd.Series(dtype=object)).map(text_of)) - {""}
    return (
        "random weights routed uniformly (SGLang's switch): balanced by construction"
        if routing == {"uniform"}
        else "random weights: not a trained router's routing"
    )
