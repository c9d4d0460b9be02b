"""Questions 1 and 2 from the sweep table: the fastest backend per size and the failures,
then launch cost against memory against math at decode sizes."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from ...core.finding_records import (
    DTYPE_NAMES,
    FP4_DTYPES,
    Findings,
    Question,
    _dtype_name,
    _has,
    _impl_label,
    _m_list,
    _message,
    _numeric,
    _ok,
    _plain,
    _span,
    fmt_pct,
    fmt_ratio,
    fmt_us,
    num_of,
    text_of,
)
from ...instruments.peaks import PEAK_FOR_DTYPE
from .sweep_ranking import _mode, _prep_sweep, _time_basis, fastest
from .sweep_thresholds import (
    DECODE_M,
    DECODE_MAX_M,
    EXPERT_NK,
    EXPERT_SHAPE,
    EXPERT_SHAPE_BEFORE,
    FLAT_FACTOR,
    LAUNCH_BOUND_SHARE,
    NEAR_FLOOR,
    PREFILL_MIN_M,
)

#: The questions the sweep answers (the report's numbering), with their titles.
SWEEP_QUESTIONS: dict[Question, str] = {
    1: "Which backend is fastest at each GEMM size, and which fail where?",
    2: "Are decode-sized GEMMs bound by launch cost, by memory or by the math?",
}

# ---------------------------------------------------------------------------------------------
# Sweep helpers
# ---------------------------------------------------------------------------------------------


def pick_expert_shape(sweep: pd.DataFrame) -> str | None:
    """The expert shape: ``down`` (or its earlier name ``expert_up``) when present, else the
    shape with (N, K) = (6144, 2048), else the largest-N shape with K = 2048, else the first
    shape named ``expert…``, else the most common shape (single GEMMs, not grouped rows)."""
    if not _has(sweep, "shape"):
        return None
    df = sweep
    if "G" in df.columns:
        df = df[pd.to_numeric(df["G"], errors="coerce").isna()]
    shapes = [s for s in df["shape"].map(text_of).unique() if s]
    if not shapes:
        return None
    for name in (EXPERT_SHAPE, EXPERT_SHAPE_BEFORE):
        if name in shapes:
            return name
    if "N" in df.columns and "K" in df.columns:
        geo = _numeric(df, "N", "K")[["shape", "N", "K"]].drop_duplicates()
        exact = geo[(geo["N"] == EXPERT_NK[0]) & (geo["K"] == EXPERT_NK[1])]
        if len(exact):
            return text_of(exact["shape"].iloc[0])
        k2048 = geo[geo["K"] == EXPERT_NK[1]].sort_values("N", ascending=False)
        if len(k2048):
            return text_of(k2048["shape"].iloc[0])
    named = [s for s in shapes if s.startswith("expert")]
    if named:
        return sorted(named)[0]
    return text_of(df["shape"].map(text_of).value_counts().index[0])


def _shape_geometry(df: pd.DataFrame, shape: str) -> str:
    rows = df[df["shape"] == shape]
    if rows.empty or not (_has(rows, "N", "K")):
        return shape
    n, k = num_of(rows["N"].iloc[0]), num_of(rows["K"].iloc[0])
    if math.isnan(n) or math.isnan(k):
        return shape
    return f"{shape} (N = {n:.0f}, K = {k:.0f})"


def _expert_rows(sweep: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """ok single-GEMM rows of the expert shape, and the shape's name."""
    shape = pick_expert_shape(sweep)
    if shape is None:
        return sweep.iloc[0:0], None
    df = sweep[(sweep["shape"] == shape) & sweep["G"].isna() & (sweep["status"] == "ok")]
    return df, shape


def _best(rows: pd.DataFrame, column: str) -> pd.Series | None:
    rows = rows[rows[column].notna()]
    if rows.empty:
        return None
    return rows.loc[rows[column].idxmin()]


# ---------------------------------------------------------------------------------------------
# Question 1: fastest backend per size class; failures with their own error
# ---------------------------------------------------------------------------------------------


def q1_backends(sweep: pd.DataFrame | None, peaks: dict | None = None) -> Findings:
    out = Findings()
    if not _has(sweep, "backend", "status"):
        out.miss(1, "no sweep table (results/tables/sweep.csv): the sweep stage has not run")
        return out
    df = _prep_sweep(sweep)
    rows, shape = _expert_rows(df)
    if shape is None or rows.empty:
        out.miss(1, "no sweep point ran (status ok) at the expert shape: no timing to rank")
    else:
        _q1_fastest(out, rows, shape, df)
    _q1_moe_layers(out, df)
    _q1_failures(out, df)
    _q1_fp4(out, df, peaks)
    return out


def _q1_moe_layers(out: Findings, df: pd.DataFrame) -> None:
    """Whole MoE layers (rows with a routing): per dtype, the fastest implementation per token
    count under the ranking rule, and what recorded routing changes against balanced."""
    if "routing" not in df.columns:
        return
    layers = df[(df["status"] == "ok") & df["routing"].map(text_of).ne("")].copy()
    if layers.empty:
        return
    layers["routing"] = layers["routing"].map(text_of)
    layers["who"] = layers.apply(_impl_label, axis=1)
    first = layers.iloc[0]
    geometry = (f"{first['G']:.0f} experts, top-{num_of(first.get('top_k')):.0f}, "
                f"N = {first['N']:.0f}, K = {first['K']:.0f}")  # fmt: skip
    for dtype in sorted(layers["dtype"].unique()):
        sub = layers[(layers["dtype"] == dtype) & (layers["routing"] == "balanced")]
        if sub.empty:
            continue
        column = _time_basis(sub)
        wins: dict[str, list[float]] = {}
        # Token counts grouped by who won there, smallest first: a tie is named as one.
        by_winners: dict[tuple[str, ...], list[float]] = {}
        for m, at_m in sub.groupby("M"):
            won = fastest(at_m, column)
            names = tuple(sorted(won[0])) if won is not None else ()
            for name in names:
                wins.setdefault(name, []).append(float(m))
            if names:
                by_winners.setdefault(names, []).append(float(m))
        ranked = sorted(wins.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        ms = sorted(sub["M"].unique())
        order = sorted(by_winners.items(), key=lambda kv: min(kv[1]))
        parts = [f"{' and '.join(names)}{' tied' if len(names) > 1 else ''} at "
                 f"{_m_list(at, sub['M'])}" for names, at in order]  # fmt: skip
        text = (f"Whole MoE layers ({geometry}), {_dtype_name(dtype)}, balanced routing, "
                f"ranked by {_mode(column)} time over {len(ms)} token counts: fastest "
                + "; ".join(parts))  # fmt: skip
        numbers = {"dtype": dtype, "basis": _mode(column), "token_counts": len(ms),
                   "wins": {name: len(at) for name, at in ranked}}  # fmt: skip
        recorded = layers[(layers["dtype"] == dtype) & (layers["routing"] == "recorded")]
        pairs = sub.merge(recorded, on=["backend", "impl", "op", "M"], suffixes=("", "_rec"))
        pairs = pairs[pairs[column].notna() & pairs[f"{column}_rec"].notna()]
        if not pairs.empty:
            change = 100 * (pairs[f"{column}_rec"] / pairs[column] - 1)
            text += (f"; recorded routing changes their times by {change.min():+.0f} to "
                     f"{change.max():+.0f} % (median {change.median():+.1f} %)")  # fmt: skip
            numbers.update(recorded_change_min_pct=float(change.min()),
                           recorded_change_max_pct=float(change.max()))  # fmt: skip
        out.add(1, text + ".", **numbers)


def _q1_fastest(out: Findings, rows: pd.DataFrame, shape: str, df: pd.DataFrame) -> None:
    geometry = _shape_geometry(df, shape)
    classes = (
        ("decode-sized", f"M ≤ {DECODE_MAX_M}", rows["M"] <= DECODE_MAX_M),
        ("prefill-sized", f"M ≥ {PREFILL_MIN_M}", rows["M"] >= PREFILL_MIN_M),
    )
    for dtype in sorted(rows["dtype"].unique(), key=lambda d: list(DTYPE_NAMES).index(d)
                        if d in DTYPE_NAMES else 99):  # fmt: skip
        for cls, cond_text, cond in classes:
            sub = rows[cond & (rows["dtype"] == dtype)].copy()
            if sub.empty:
                out.miss(1, f"{_dtype_name(dtype)} {cls} ({cond_text}): no point ran on {shape}")
                continue
            column = _time_basis(sub)
            sub["who"] = sub.apply(_impl_label, axis=1)
            ms = sorted(sub["M"].unique())
            # A size's fastest, alone or tied: every tied implementation shares that win.
            wins: dict[str, int] = {}
            ties: dict[str, list[set[str]]] = {}
            for m in ms:
                won = fastest(sub[sub["M"] == m], column)
                for name in won[0] if won is not None else []:
                    wins[name] = wins.get(name, 0) + 1
                    if len(won[0]) > 1:
                        ties.setdefault(name, []).append(set(won[0]) - {name})
            if not wins:
                continue
            ranked = sorted(wins.items(), key=lambda kv: (-kv[1], kv[0]))
            winner, n_win = ranked[0]
            w_times = sub[sub["who"] == winner][column]
            candidates = sub["who"].nunique()
            partners = sorted(set().union(*ties.get(winner, [set()])))
            tied_text = (f", tied with {' or '.join(partners)} at {len(ties[winner])} of them"
                         if partners else "")  # fmt: skip
            times = f"{_mode(column)} {_span(w_times.min(), w_times.max(), fmt_us)}"
            if candidates == 1:
                text = (
                    f"{_dtype_name(dtype)}, {cls} ({cond_text}) on {geometry}: only {winner}"
                    f" ran ({times} over {len(ms)} size{'s' if len(ms) != 1 else ''})"
                )
            else:
                text = (
                    f"{_dtype_name(dtype)}, {cls} ({cond_text}) on {geometry}: fastest is "
                    f"{winner} at {n_win} of {len(ms)} sizes ({times}){tied_text}, among "
                    f"{candidates} implementations that ran"
                )
            numbers = {
                "dtype": dtype, "size_class": cls, "basis": _mode(column), "winner": winner,
                "wins": n_win, "sizes": len(ms), "candidates": candidates, "tied_with": partners,
                "tied_sizes": len(ties.get(winner, [])),
                "winner_min_us": float(w_times.min()), "winner_max_us": float(w_times.max()),
            }  # fmt: skip
            others = [(name, n) for name, n in ranked[1:] if name not in partners]
            if others:
                second, n2 = others[0]
                text += f"; {second} is fastest at {n2}"
                numbers.update(runner_up=second, runner_up_wins=n2)
            out.add(1, text + ".", **numbers)


def _q1_failures(out: Findings, df: pd.DataFrame) -> None:
    bad = df[df["status"].isin(["unsupported", "error", "mismatch"])]
    if bad.empty:
        out.add(1, f"Every one of the {len(df)} sweep points ran and matched its reference.",
                points=len(df), failed=0)  # fmt: skip
        return
    # One finding per (status, first message); the combos that share it are listed together.
    groups: dict[tuple[str, str], list[dict]] = {}
    for (backend, impl, op, dtype), g in bad.groupby(["backend", "impl", "op", "dtype"]):
        full = df[(df["backend"] == backend) & (df["impl"] == impl) & (df["op"] == op)
                  & (df["dtype"] == dtype)]  # fmt: skip
        for status, gs in g.groupby("status"):
            message = _message(gs["error"].iloc[0])
            if status == "mismatch" and not message and "rel_err" in gs.columns:
                message = f"relative error up to {gs['rel_err'].max():.3g}"
            ok_ms = full[full["status"] == "ok"]["M"]
            combo = {
                "who": _impl_label(gs.iloc[0]), "dtype": dtype, "count": len(gs),
                "points": len(full), "ms": sorted(gs["M"].dropna().unique()),
                "ok_ms": sorted(ok_ms.dropna().unique()), "ok": len(ok_ms),
                "messages": gs["error"].nunique(),
            }  # fmt: skip
            groups.setdefault((status, message), []).append(combo)
    for (status, message), combos in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        count = sum(c["count"] for c in combos)
        if len(combos) == 1:
            c = combos[0]
            where = _m_list(c["ms"])
            if c["ok_ms"] and c["ms"] and max(c["ms"]) < min(c["ok_ms"]):
                where = f"below M = {int(min(c['ok_ms']))} ({where}; ok from there on)"
            elif c["ok_ms"]:
                where += f" (ok at {len(c['ok_ms'])} other sizes)"
            text = (
                f"{c['who']} ({_dtype_name(c['dtype'])}): {status} at {c['count']} of "
                f"{c['points']} points, {where}"
            )
            numbers = {"who": c["who"], "dtype": c["dtype"], "status": status,
                       "count": c["count"], "points": c["points"],
                       "ok_points": c["ok"]}  # fmt: skip
        else:
            text = (f"{status} at {count} points of {len(combos)} implementations: "
                    f"{_combo_names(combos)}")  # fmt: skip
            numbers = {"status": status, "count": count, "combos": len(combos),
                       "who": [c["who"] for c in combos]}  # fmt: skip
        if message:
            text += f" — “{message}”"
        extra = max(c["messages"] for c in combos) - 1
        if extra > 0:
            text += f" (+{extra} other message{'s' if extra > 1 else ''})"
        out.add(1, text + ".", message=message, **numbers)


#: Beyond this many implementations sharing one reason, a finding counts them per backend.
MAX_NAMED = 4


def _combo_names(combos: list[dict]) -> str:
    """The implementations that share a reason: named while few, else counted per backend."""
    if len(combos) <= MAX_NAMED:
        return ", ".join(f"{c['who']} ({_dtype_name(c['dtype'])})" for c in combos)
    per_backend: dict[str, int] = {}
    for c in combos:
        backend = c["who"].split("·")[0].split(" ")[0]
        per_backend[backend] = per_backend.get(backend, 0) + 1
    return ", ".join(f"{backend} ({n})" for backend, n in sorted(per_backend.items()))


def _q1_fp4(out: Findings, df: pd.DataFrame, peaks: dict | None) -> None:
    fp4 = df[df["dtype"].isin(FP4_DTYPES)]
    if fp4.empty:
        out.miss(1, "no FP4 point in the sweep: FP4 status unknown (not in the configured grid)")
        return
    ok = fp4[fp4["status"] == "ok"]
    statuses = fp4["status"].value_counts()
    peak_err = _message((peaks or {}).get("fp4_error"))
    if ok.empty:
        counts = ", ".join(f"{n} {s}" for s, n in statuses.items())
        text = f"FP4: none of the {len(fp4)} FP4 GEMM points ran here ({counts})"
        if peak_err:
            text += f"; the FP4 peak could not be measured either (“{peak_err}”)"
        out.add(1, text + ".", fp4_points=len(fp4), fp4_ok=0, fp4_peak_error=peak_err)
        return
    impls = sorted(ok.apply(_impl_label, axis=1).unique())
    text = f"FP4: {len(ok)} of {len(fp4)} FP4 points ran, through {', '.join(impls)}"
    peak = num_of((peaks or {}).get("fp4_tflops"))
    if _ok(peak):
        text += f"; measured FP4 peak {peak:.0f} TFLOP/s"
    out.add(1, text + ".", fp4_points=len(fp4), fp4_ok=len(ok), fp4_impls=impls,
            fp4_peak_tflops=peak if _ok(peak) else None)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Question 2: launch cost vs HBM vs math at decode sizes
# ---------------------------------------------------------------------------------------------


def q2_bounds(sweep: pd.DataFrame | None, peaks: dict | None = None) -> Findings:
    out = Findings()
    if not _has(sweep, "backend", "status", "M"):
        out.miss(2, "no sweep table (results/tables/sweep.csv): the sweep stage has not run")
        return out
    df = _prep_sweep(sweep)
    rows, shape = _expert_rows(df)
    if shape is None or rows.empty:
        out.miss(2, "no sweep point ran (status ok) at the expert shape")
        return out
    geometry = _shape_geometry(df, shape)
    _q2_decode(out, rows, geometry)
    _q2_prefill(out, rows, geometry, peaks)
    _q2_flat(out, rows, geometry)
    return out


def _decode_m(rows: pd.DataFrame) -> float | None:
    ms = sorted(rows["M"].dropna().unique())
    if not ms:
        return None
    if DECODE_M in ms:
        return float(DECODE_M)
    small = [m for m in ms if m <= DECODE_MAX_M]
    pool = small or ms
    return float(min(pool, key=lambda m: abs(m - DECODE_M)))


def _q2_decode(out: Findings, rows: pd.DataFrame, geometry: str) -> None:
    """At the decode M: the fastest eager call's launch cost (eager − graph) and the fastest
    kernel's graph-replayed (and cold) time against the roofline floor."""
    m = _decode_m(rows)
    if m is None:
        return
    at = rows[rows["M"] == m]
    if not at["graph_us"].notna().any():
        out.miss(2, f"no graph-replayed times at M = {m:.0f} (CUDA graphs need a GPU): launch "
                    "cost cannot be separated from kernel time", expected=True)  # fmt: skip
    for dtype in [d for d in DTYPE_NAMES if d in set(at["dtype"])]:
        sub = at[at["dtype"] == dtype]
        be, bg = _best(sub, "eager_us"), _best(sub, "graph_us")
        if be is None and bg is None:
            continue
        numbers: dict[str, Any] = {"dtype": dtype, "M": m}
        parts: list[str] = []
        verdicts: list[str] = []
        head = f"At M = {m:.0f} on {geometry}"
        if be is not None:
            who, eager, graph = _impl_label(be), num_of(be["eager_us"]), num_of(be["graph_us"])
            numbers.update(who=who, eager_us=eager)
            if _ok(graph):
                launch = num_of(be.get("launch_overhead_us"))
                if not _ok(launch):
                    launch = eager - graph
                share = launch / eager if eager > 0 else float("nan")
                same = bg is not None and _impl_label(bg) == who
                parts.append(
                    f"the fastest {_dtype_name(dtype)} call ({who}) takes {fmt_us(eager)} eager, "
                    f"of which {fmt_us(launch)} ({fmt_pct(100 * share)}) is launch cost"
                    + ("" if same else f" (graph-replayed {fmt_us(graph)})")
                )
                numbers.update(graph_us=graph, launch_us=launch, launch_share=share)
                verdicts.append("launch-bound when called eagerly" if share >= LAUNCH_BOUND_SHARE
                                else "not launch-bound")  # fmt: skip
            else:
                parts.append(f"the fastest {_dtype_name(dtype)} call ({who}) takes "
                             f"{fmt_us(eager)} eager")  # fmt: skip
        kernel = bg if bg is not None else be
        column = "graph_us" if bg is not None else "eager_us"
        t, floor = num_of(kernel[column]), num_of(kernel["floor_us"])
        basis = text_of(kernel.get("floor_basis")).split(" ")[0] or "roofline"
        if _ok(floor) and floor > 0 and _ok(t):
            ratio = t / floor
            kwho = _impl_label(kernel)
            against = f"{fmt_ratio(ratio)} the {basis} floor of {fmt_us(floor)}"
            if bg is None and parts:
                parts[-1] += f", {against}"
            elif bg is None:
                parts.append(f"the fastest call ({kwho}) takes {fmt_us(t)} eager, {against}")
            else:
                what = (
                    "its kernel"
                    if be is not None and kwho == _impl_label(be)
                    else (f"the fastest kernel ({kwho})")
                )
                parts.append(f"{what} replays in {fmt_us(t)}, {against}")
            numbers.update(kernel_who=kwho, kernel_us=t, floor_us=floor, floor_basis=basis,
                           over_floor=ratio, over_floor_basis=_mode(column))  # fmt: skip
            cold = num_of(kernel["cold_us"])
            if _ok(cold):
                parts[-1] += (f" (with weights streamed from memory, cold, {fmt_us(cold)}: "
                              f"{fmt_ratio(cold / floor)})")  # fmt: skip
                numbers.update(cold_us=cold, cold_over_floor=cold / floor)
            if ratio <= NEAR_FLOOR:
                verdicts.append(f"the {'kernel' if bg is not None else 'call'} is {basis}-bound")
            else:
                verdicts.append(f"the {'kernel' if bg is not None else 'call'} runs well above "
                                "its floor (fixed per-kernel overhead)")  # fmt: skip
        text = head + ", " + "; ".join(parts)
        if verdicts:
            text += ": " + "; ".join(verdicts)
        numbers["verdict"] = "; ".join(verdicts)
        out.add(2, text + ".", **numbers)


def _q2_prefill(out: Findings, rows: pd.DataFrame, geometry: str, peaks: dict | None) -> None:
    big = rows[rows["M"] >= PREFILL_MIN_M]
    if big.empty:
        out.miss(2, f"no prefill-sized point (M ≥ {PREFILL_MIN_M}) ran: efficiency at large M "
                    "not computed")  # fmt: skip
        return
    if not peaks:
        out.miss(2, "no peaks.json: efficiency against the measured peak not computed")
        return
    for dtype in [d for d in DTYPE_NAMES if d in set(big["dtype"])]:
        sub = big[big["dtype"] == dtype]
        key = PEAK_FOR_DTYPE.get(dtype, "")
        peak = num_of(peaks.get(key))
        if not _ok(peak) or peak <= 0:
            out.miss(2, f"{_dtype_name(dtype)}: no measured peak ({key or 'no peak key'}) to "
                        "compare prefill-sized GEMMs with")  # fmt: skip
            continue
        column = _time_basis(sub)
        pcts: dict[int, float] = {}
        best_at: dict[int, pd.Series] = {}
        for m, g in sub.groupby("M"):
            g = g[g["flops"].notna() & g[column].notna()]
            if g.empty:
                continue
            rate = g["flops"] / (g[column] * 1e6)  # TFLOP/s
            i = rate.idxmax()
            pcts[int(m)] = 100 * rate[i] / peak
            best_at[int(m)] = g.loc[i].copy()
            best_at[int(m)]["rate"] = rate[i]
        if not pcts:
            continue
        top_m = max(pcts)
        b = best_at[top_m]
        text = (
            f"At M = {top_m} on {geometry}, the fastest {_dtype_name(dtype)} GEMM "
            f"({_impl_label(b)}, {_mode(column)} {fmt_us(b[column])}) reaches "
            f"{b['rate']:.0f} TFLOP/s, {fmt_pct(pcts[top_m])} of the measured "
            f"{_dtype_name(dtype)} peak of {peak:.0f} TFLOP/s"
        )
        if len(pcts) > 1:
            text += (f" ({_span(min(pcts.values()), max(pcts.values()), _plain, ' %')} over "
                     f"M {min(pcts)}–{top_m})")  # fmt: skip
        out.add(2, text + ".", dtype=dtype, M=top_m, who=_impl_label(b), tflops=float(b["rate"]),
                peak_tflops=peak, pct_peak=pcts[top_m], pct_by_m=pcts)  # fmt: skip


def _q2_flat(out: Findings, rows: pd.DataFrame, geometry: str) -> None:
    """Per implementation: the largest M up to which eager time stays within FLAT_FACTOR of
    its value at the smallest M."""
    flat: dict[str, dict[str, Any]] = {}
    for _, g in rows.groupby(["backend", "impl", "op", "dtype"]):
        g = g[g["eager_us"].notna()].sort_values("M")
        if len(g) < 2:
            continue
        who = f"{_impl_label(g.iloc[0])} ({_dtype_name(g['dtype'].iloc[0])})"
        base_m, base = float(g["M"].iloc[0]), float(g["eager_us"].iloc[0])
        flat_to, first_out = base_m, None
        for m, t in zip(g["M"].iloc[1:], g["eager_us"].iloc[1:], strict=True):
            if t > FLAT_FACTOR * base:
                first_out = (float(m), float(t))
                break
            flat_to = float(m)
        flat[who] = {"base_m": base_m, "base_us": base, "flat_to_m": flat_to,
                     "first_out": first_out, "max_m": float(g["M"].iloc[-1])}  # fmt: skip
    if not flat:
        return
    parts = []
    for who, f in sorted(flat.items(), key=lambda kv: (kv[1]["flat_to_m"], kv[0])):
        if f["first_out"] is None:
            parts.append(f"{who} flat over the whole range to M = {f['max_m']:.0f} "
                         f"({fmt_us(f['base_us'])} at M = {f['base_m']:.0f})")  # fmt: skip
        elif f["flat_to_m"] == f["base_m"]:
            # Out of the band at its second size already: not flat anywhere.
            m_out, t_out = f["first_out"]
            parts.append(f"{who} not flat ({fmt_us(f['base_us'])} at M = {f['base_m']:.0f}, "
                         f"{fmt_us(t_out)} at M = {m_out:.0f})")  # fmt: skip
        else:
            m_out, t_out = f["first_out"]
            parts.append(f"{who} flat to M = {f['flat_to_m']:.0f} ({fmt_us(f['base_us'])}; "
                         f"{fmt_us(t_out)} at M = {m_out:.0f})")  # fmt: skip
    text = (
        f"Eager time on {geometry} stays flat (within {FLAT_FACTOR:g}× of its smallest-M "
        f"value) up to: " + "; ".join(parts)
    )
    out.add(2, text + ".", flat_to_m={k: v["flat_to_m"] for k, v in flat.items()})
