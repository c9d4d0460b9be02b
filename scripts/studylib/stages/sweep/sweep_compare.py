"""Before and after: the same points of two sweeps side by side, with a signed change.

Points are matched on what they compute (backend, impl, op, dtype, N, K, G, M, and a fused
layer's top_k and routing), not on the shape's name, so a run from before a shape was renamed
still compares. Each point is compared in every timing mode both runs measured; a change
within the larger IQR of the two, or the study's noise floor (``verdicts.NOISE_FLOOR``) of the
baseline, is ``same``. The rankings (sweep_ranking.py) read each point's change as part of its
noise.
"""

from __future__ import annotations

from pathlib import Path

import altair as alt
import pandas as pd

from ...core.charts import M_LABEL_EXPR, backend_scale, no_data_chart, save_chart
from ...core.io import write_frame
from ...core.verdicts import NOISE_FLOOR
from .sweep_plan import baseline_files
from .sweep_schema import POINT_KEYS

KEYS = list(POINT_KEYS)
MODES = ("cold", "graph", "eager")
COLUMNS = [*KEYS, "shape", "mode", "baseline_us", "current_us", "speedup", "change_pct",
           "noise_pct", "verdict", "baseline_device", "current_device"]  # fmt: skip
#: What a file must hold to be compared as a sweep.
NEEDED = ("backend", "impl", "op", "dtype", "M", "status")


class ComparisonRefused(ValueError):
    """Two runs that cannot be compared, or a baseline that is no sweep: one line."""


def load_sweep(source: str | Path) -> pd.DataFrame:
    """A sweep's rows from a file (sweep.csv, a backend's parquet or CSV) or a results folder
    (``tables/sweep.csv``, else every ``sweeps/*.parquet`` or ``sweeps/*.csv``); a file that
    is not a sweep is :class:`ComparisonRefused` naming it and what it lacks."""
    frames = []
    for f in [Path(f) for f in baseline_files(source)]:
        try:
            frame = pd.read_parquet(f) if f.suffix == ".parquet" else pd.read_csv(f)
        except (OSError, ValueError, pd.errors.ParserError, ImportError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ComparisonRefused(f"{f}: not a readable sweep table: {first}") from None
        missing = [c for c in NEEDED if c not in frame.columns]
        if missing or not any(f"{m}_us" in frame.columns for m in MODES):
            lacks = ", ".join(missing) or "a timing column (eager_us, graph_us, cold_us)"
            raise ComparisonRefused(f"{f}: not a sweep (no column {lacks}): give a sweep file, "
                                    "a pattern of them or a results folder")  # fmt: skip
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def device_of(frame: pd.DataFrame) -> tuple[str, str]:
    """(kind, name) of the device a sweep's ok points ran on: ``cuda`` / ``cpu`` and the GPU's
    or CPU's name ("" where the sweep does not say)."""
    ok = frame[frame["status"].astype(str) == "ok"] if "status" in frame.columns else frame

    def one(column: str) -> str:
        values = sorted({str(v) for v in ok.get(column, pd.Series(dtype=str)).dropna()})
        return ", ".join(values)

    return one("device"), one("device_name")


def check_comparable(baseline: pd.DataFrame, current: pd.DataFrame) -> None:
    """Refuse a comparison across device kinds (a CPU run against a GPU's, at 0.004x): times of
    one kind of device against the other are no before-and-after."""
    (kind_a, name_a), (kind_b, name_b) = device_of(baseline), device_of(current)
    if kind_a and kind_b and kind_a != kind_b:
        raise ComparisonRefused(
            f"the baseline ran on {name_a or kind_a} ({kind_a}), this run on {name_b or kind_b} "
            f"({kind_b}): times across device kinds are no before-and-after; compare runs of "
            "one kind of machine"
        )


def ok_points(frame: pd.DataFrame) -> pd.DataFrame:
    """A sweep's ok points with every key column present and of one kind (ints, text)."""
    frame = frame[frame["status"].astype(str) == "ok"].copy()
    for column in KEYS:
        if column not in frame.columns:
            frame[column] = None
    for column in ("N", "K", "G", "M", "top_k"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").fillna(0).astype(int)
    frame["routing"] = frame["routing"].fillna("").astype(str)
    return frame


def compare(baseline: pd.DataFrame, current: pd.DataFrame, min_m: int = 1) -> pd.DataFrame:
    """One row per point ok in both runs and mode timed in both (see the module's doc), with
    the device each run's point ran on."""
    both = ok_points(baseline).merge(ok_points(current), on=KEYS, suffixes=("_a", "_b"))
    both = both[both["M"] >= min_m]
    rows = []
    for rec in both.to_dict("records"):
        for mode in MODES:
            a, b = rec.get(f"{mode}_us_a"), rec.get(f"{mode}_us_b")
            if not (pd.notna(a) and pd.notna(b) and a > 0 and b > 0):
                continue
            iqrs = [rec.get(f"{mode}_iqr_us_{s}") for s in "ab"]
            noise = max([NOISE_FLOOR * a, *(i for i in iqrs if pd.notna(i))])
            verdict = "same" if abs(b - a) <= noise else ("faster" if b < a else "slower")
            rows.append({**{k: rec[k] for k in KEYS}, "shape": rec.get("shape_b"),
                         "mode": mode, "baseline_us": a, "current_us": b, "speedup": a / b,
                         "change_pct": 100 * (a - b) / a, "noise_pct": 100 * noise / a,
                         "verdict": verdict, "baseline_device": rec.get("device_name_a"),
                         "current_device": rec.get("device_name_b")})  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def summary(table: pd.DataFrame) -> list[str]:
    """One line per mode: how many points got faster, slower or stayed, the median change and
    the largest each way; first, where the runs ran on different devices, which."""
    lines = []
    devices = ["baseline_device", "current_device"]
    pairs = table[devices].dropna().drop_duplicates() if set(devices) <= set(table) else table[[]]
    moved = pairs[pairs["baseline_device"] != pairs["current_device"]] if len(pairs) else pairs
    if len(moved):
        a, b = moved.iloc[0]
        lines.append(f"the baseline ran on {a}, this run on {b}: each change includes the "
                     "machine's")  # fmt: skip
    for mode in MODES:
        rows = table[table["mode"] == mode]
        if rows.empty:
            continue
        counts = rows["verdict"].value_counts()
        line = (f"{mode}: {len(rows)} points, {counts.get('faster', 0)} faster, "
                f"{counts.get('slower', 0)} slower, {counts.get('same', 0)} the same within "
                f"noise; median speed-up {rows['speedup'].median():.3f}×")  # fmt: skip
        for word, pick in (("fastest", rows["speedup"].idxmax()),
                           ("slowest", rows["speedup"].idxmin())):  # fmt: skip
            r = rows.loc[pick]
            line += (f"; {word}: {r['backend']} {r['impl']} {r['op']} {r['dtype']} "
                     f"N={r['N']} K={r['K']} M={r['M']} {r['speedup']:.3f}×")  # fmt: skip
        lines.append(line)
    return lines


def speedup_chart(table: pd.DataFrame, title: str = "Before and after: speed-up per point"):
    """Speed-up (baseline ÷ current, log scale; above 1 is faster) against M, one panel per
    timing mode, one line per backend · impl · op · dtype · shape; a rule at 1."""
    if table.empty:
        return no_data_chart(title, "no point is ok in both runs")
    data = table.copy()
    data["series"] = (data["backend"] + " · " + data["impl"] + " · " + data["op"] + " · "
                      + data["dtype"] + " · " + data["shape"].fillna(""))  # fmt: skip
    data["M"] = data["M"].astype(int)
    data = data[["backend", "series", "mode", "M", "N", "K", "speedup", "change_pct",
                 "baseline_us", "current_us", "verdict"]]  # fmt: skip
    modes = [m for m in MODES if m in set(data["mode"])]
    x = alt.X("M:Q", title="M (tokens)", scale=alt.Scale(type="log", base=2, nice=False),
              axis=alt.Axis(labelExpr=M_LABEL_EXPR))  # fmt: skip
    y = alt.Y("speedup:Q", title="speed-up (baseline ÷ current)", scale=alt.Scale(type="log"))
    lines = (
        alt.Chart()
        .mark_line(point=True, strokeWidth=1.2)
        .encode(
            x=x,
            y=y,
            color=alt.Color("backend:N", scale=backend_scale(sorted(set(data["backend"])))),
            detail="series:N",
            tooltip=[
                "series:N",
                "M:Q",
                "N:Q",
                "K:Q",
                alt.Tooltip("speedup:Q", format=".3f"),
                alt.Tooltip("change_pct:Q", format="+.1f", title="change %"),
                alt.Tooltip("baseline_us:Q", format=".4g"),
                alt.Tooltip("current_us:Q", format=".4g"),
                "verdict:N",
            ],  # fmt: skip
        )
    )
    one = alt.Chart().mark_rule(color="#555", strokeDash=[4, 3]).encode(y=alt.datum(1))
    return (
        alt.layer(lines, one, data=data)
        .properties(width=300, height=220)
        .facet(column=alt.Column("mode:N", sort=modes, title=None))
        .properties(title=alt.TitleParams(
            title, subtitle=["above 1: the current run is faster; points ok in both runs"]))
    )  # fmt: skip


def write_comparison(baseline_source, current_source, out_csv, spec_path) -> pd.DataFrame:
    """The per-point table (CSV) and its chart (Vega-Lite JSON, with HTML and PNG beside it)."""
    baseline, current = load_sweep(baseline_source), load_sweep(current_source)
    check_comparable(baseline, current)
    table = compare(baseline, current)
    write_frame(table, out_csv)
    spec_path = Path(spec_path)
    name = spec_path.name.removesuffix(".vl.json")
    save_chart(speedup_chart(table), spec_path.with_name(name + ".html"),
               spec_path.with_name(name + ".png"), spec_path)  # fmt: skip
    return table
