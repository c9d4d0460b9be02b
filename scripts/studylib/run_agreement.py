"""Two runs of the study side by side (issue 34): does a shortened run answer as a full-length
run does, within the rankings' tolerance?

* Rankings, per size and mode (the rows of ``tables/fastest.csv``, ranked again from each run's
  sweep by ``sweep_ranking``): ``same`` where both runs name the same leaders (one winner, or
  the same tied set); ``consistent`` where their leaders overlap (one run's winner is among the
  other's tied leaders: the two differ by no more than the noise either run saw); ``differs``
  where no leader is shared. The leader's time is compared too: its change against the larger
  noise of the two rankings.
* Decode, per variant and C (``tables/decode.csv``): TPOT, tok/s, W per GPU and J/token, each
  ``same`` when the two differ by no more than the rows' noise (the larger window precision,
  ``tpot_ci_pct``, of the two; never below the floor, ``verdicts.decision_noise``). Each row
  says whether the two ran on the same GPU (``hardware.json``'s UUIDs, else those the decode
  jobs sampled, ``run.json``'s ``gpus``): on the H200, two chips drew 8-9 % apart on the
  same FP8 decode at the same 1980 MHz (2026-12-04), so watts that differ between chips say
  nothing of the windows' length.

* Within one full-length run (``decode.full_length_s``, config/examples/full.yaml): each
  decode window against the window the shortened study's precision rule would have ended,
  replayed on the same requests and samples (the ``shortened_*`` columns,
  decode_run.shortened_figures; decode_judgements.shortened_rows), with the same test
  (decode_judgements.figures_differ, as question 5's answer on them): one chip, one server,
  one load, so only the window's length differs.

``tools/run_agreement.py`` is its entry: two results folders in (or one, ``--within``), the
tables and a summary out.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .core.finding_records import _span
from .core.io import read_json
from .core.verdicts import beyond, decision_noise, run_to_run
from .stages.decode.decode_judgements import DECODE_FIGURES, figures_differ, shortened_rows
from .stages.sweep.sweep_compare import KEYS, ComparisonRefused, load_sweep, ok_points
from .stages.sweep.sweep_ranking import fastest_frame, rank_sweep
from .study_tables import StudyTables

RANK_KEYS = ["family", "dtype", "shape", "M", "mode"]
DECODE_KEYS = ["variant", "concurrency"]
#: The chips each decode row ran on, and their idle watts (a chip's own draw, per GPU).
CHIP_COLUMNS = ["gpus_a", "gpus_b", "idle_w_per_gpu_a", "idle_w_per_gpu_b", "chips"]
RANK_COLUMNS = [*RANK_KEYS, "leaders_a", "leaders_b", "fastest_us_a", "fastest_us_b",
                "change", "noise", "agreement", "time"]  # fmt: skip
DECODE_COLUMNS = [*DECODE_KEYS, *(f"{c}_{s}" for c in DECODE_FIGURES.values() for s in "ab"),
                  "noise", "differs", "agreement", *CHIP_COLUMNS]  # fmt: skip


def leaders(row) -> tuple[str, ...]:
    """A ranking's leaders: its tied set, else its one winner."""
    tied = str(row.get("tied") or "")
    return tuple(tied.split(" = ")) if tied else (str(row["fastest"]),)


def _agreement(a: tuple[str, ...], b: tuple[str, ...]) -> str:
    if set(a) == set(b):
        return "same"
    return "consistent" if set(a) & set(b) else "differs"


def ranking_agreement(sweep_a: pd.DataFrame | None, sweep_b: pd.DataFrame | None) -> pd.DataFrame:
    """Per size and mode ranked in both runs: the leaders of each, the leader's time in each,
    and whether they agree (module docstring)."""
    if sweep_a is None or sweep_b is None:
        return pd.DataFrame(columns=RANK_COLUMNS)
    # Only the points both runs measured: a contender one run lacks (a module not built there)
    # is no disagreement between their rankings.
    keyed = [ok_points(s).reset_index() for s in (sweep_a, sweep_b)]
    common = keyed[0][KEYS].merge(keyed[1][KEYS]).drop_duplicates()
    frames = [fastest_frame(rank_sweep(s.loc[k.merge(common, on=KEYS)["index"]]))
              for s, k in zip((sweep_a, sweep_b), keyed, strict=True)]  # fmt: skip
    if any(f is None or f.empty for f in frames):
        return pd.DataFrame(columns=RANK_COLUMNS)
    both = frames[0].merge(frames[1], on=RANK_KEYS, suffixes=("_a", "_b"))
    rows = []
    for rec in both.to_dict("records"):
        ours = {k: rec[k] for k in RANK_KEYS}
        a = leaders({"tied": rec["tied_a"], "fastest": rec["fastest_a"]})
        b = leaders({"tied": rec["tied_b"], "fastest": rec["fastest_b"]})
        change = run_to_run(rec["fastest_us_a"], rec["fastest_us_b"])
        noise = decision_noise(rec["noise_a"], rec["noise_b"])
        rows.append({**ours, "leaders_a": " = ".join(a), "leaders_b": " = ".join(b),
                     "fastest_us_a": rec["fastest_us_a"], "fastest_us_b": rec["fastest_us_b"],
                     "change": change, "noise": noise, "agreement": _agreement(a, b),
                     "time": "differs" if beyond(change, noise) else "same"})  # fmt: skip
    return pd.DataFrame(rows, columns=RANK_COLUMNS)


def decode_agreement(decode_a: pd.DataFrame | None, decode_b: pd.DataFrame | None
                     ) -> pd.DataFrame:  # fmt: skip
    """Per variant and C valid in both runs: the decode figures of each and whether they agree
    within the rows' noise (module docstring)."""
    if decode_a is None or decode_b is None or decode_a.empty or decode_b.empty:
        return pd.DataFrame(columns=DECODE_COLUMNS)

    def valid(frame: pd.DataFrame) -> pd.DataFrame:
        if "valid" in frame:
            frame = frame[frame["valid"].astype(str).str.lower() == "true"]
        frame = frame.copy()
        ci = frame["tpot_ci_pct"] if "tpot_ci_pct" in frame else float("nan")
        frame["tpot_ci_pct"] = pd.to_numeric(ci, errors="coerce")
        for column in ("load", "gpus", "idle_w_per_gpu"):  # absent: older tables, no record
            if column not in frame:
                frame[column] = None
        return frame[[*DECODE_KEYS, *DECODE_FIGURES.values(), "tpot_ci_pct", "load", "gpus",
                      "idle_w_per_gpu"]]  # fmt: skip

    both = valid(decode_a).merge(valid(decode_b), on=DECODE_KEYS, suffixes=("_a", "_b"))
    rows = []
    compared = [*DECODE_FIGURES.values(), "tpot_ci_pct"]
    for rec in both.to_dict("records"):
        noise, differs = figures_differ(*({c: rec[f"{c}_{s}"] for c in compared} for s in "ab"))
        loads = [rec["load_a"], rec["load_b"]]
        if all(isinstance(x, str) and x for x in loads) and loads[0] != loads[1]:
            # Not the same measurement: a staggered window holds lone prefills (decode_schema).
            differs.insert(0, f"load ({loads[0]} | {loads[1]})")
        rows.append({**{k: rec[k] for k in DECODE_KEYS},
                     **{f"{c}_{s}": rec[f"{c}_{s}"] for c in DECODE_FIGURES.values() for s in "ab"},
                     "noise": noise, "differs": ", ".join(differs),
                     "agreement": "differs" if differs else "same",
                     **{f"{c}_{s}": rec[f"{c}_{s}"] for c in ("gpus", "idle_w_per_gpu")
                        for s in "ab"},
                     "chips": chips(rec["gpus_a"], rec["gpus_b"])})  # fmt: skip
    return pd.DataFrame(rows, columns=DECODE_COLUMNS)


def chips(gpus_a, gpus_b) -> str:
    """``same`` or ``different`` GPUs by their UUIDs; ``unknown`` where a run kept none."""
    if not isinstance(gpus_a, str) or not isinstance(gpus_b, str) or not gpus_a or not gpus_b:
        return "unknown"
    return "same" if gpus_a == gpus_b else "different"


def gpu_ids(folder) -> str | None:
    """The UUIDs of the GPUs a run's ``hardware.json`` lists (joined by +), else those its
    decode jobs sampled (each ``decode/*/run.json``'s ``gpus``: a run of decode targets alone
    writes no hardware record), else None."""
    hardware = _record(Path(folder) / "hardware.json")
    if hardware is not None:
        ids = [str(g.get("uuid")) for g in hardware.get("gpus") or [] if g.get("uuid")]
    else:
        ids = []
        for path in sorted(Path(folder).glob("decode/*/run.json")):
            sampled = (_record(path) or {}).get("gpus") or []
            ids += [str(g) for g in sampled if g and str(g) not in ids]
    return "+".join(ids) or None


def _record(path: Path) -> dict | None:
    """A JSON record, or None where it is missing, unreadable or not an object."""
    try:
        record = read_json(path)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def run_tables(folder) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """A run's sweep and decode table: a results folder's ``tables/``, else (a committed
    example) its sweep files (sweep_compare.load_sweep) and its variants'
    ``decode/*/summary.csv``; a sweep file or a pattern of them is that sweep alone."""
    folder = Path(folder)
    if not folder.is_dir():
        return load_sweep(folder), None  # FileNotFoundError naming it where there is none
    tables = StudyTables.from_results(folder)
    sweep, decode = tables.sweep, tables.decode
    if sweep is None:
        try:
            sweep = load_sweep(folder)
        except (ComparisonRefused, FileNotFoundError, ValueError):
            sweep = None
    if decode is None:
        parts = [pd.read_csv(f, comment="#") for f in sorted(folder.glob("decode/*/summary.csv"))]
        decode = pd.concat(parts, ignore_index=True) if parts else None
    if decode is not None:
        decode = decode.assign(gpus=gpu_ids(folder))
    return sweep, decode


def reference_tables(folders) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """A full-length reference pieced from several runs, in order of priority: the sweep of the
    first that has one (sweeps of different runs are not mixed: their rankings would), and
    each decode variant and C from the first run that has it (the committed full-length
    decode runs each hold some variants and C)."""
    sweep, decodes = None, []
    for folder in folders:
        one_sweep, one_decode = run_tables(folder)
        sweep = sweep if sweep is not None else one_sweep
        if one_decode is not None and not one_decode.empty:
            decodes.append(one_decode)
    if not decodes:
        return sweep, None
    decode = pd.concat(decodes, ignore_index=True).drop_duplicates(DECODE_KEYS, keep="first")
    return sweep, decode.reset_index(drop=True)


def compare_runs(folder_a, folder_b, also=()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ranking and decode agreement of two runs' folders (:func:`run_tables`); ``also``:
    more full-length runs that complete ``folder_a`` (:func:`reference_tables`)."""
    (sweep_a, decode_a), (sweep_b, decode_b) = (reference_tables([folder_a, *also]),
                                                run_tables(folder_b))  # fmt: skip
    return ranking_agreement(sweep_a, sweep_b), decode_agreement(decode_a, decode_b)


def within_run(folder) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One full-length run's decode windows against their shortened selves: the agreement
    table (:func:`decode_agreement`, side a the full window, b the shortened one) and the
    rows compared (their lengths)."""
    full, short = shortened_rows(run_tables(folder)[1])
    if full.empty:
        return pd.DataFrame(columns=DECODE_COLUMNS), full
    return decode_agreement(full, short).assign(chips="same"), full  # one run, one chip


def within_summary(agreement: pd.DataFrame, full: pd.DataFrame) -> list[str]:
    """The within-run agreement in a few lines: the windows' lengths, the count that agree,
    each row that differs."""
    if agreement.empty:
        return ["decode: no valid window states a shortened one (a run with "
                "decode.full_length_s, config/examples/full.yaml, does)"]  # fmt: skip
    seconds = pd.to_numeric(full["steady_s"], errors="coerce")
    short = pd.to_numeric(full["shortened_steady_s"], errors="coerce")
    same = int((agreement["agreement"] == "same").sum())
    full_s = _span(seconds.min(), seconds.max(), "{:.0f}".format, " s")
    short_s = _span(short.min(), short.max(), "{:.1f}".format, " s")
    lines = [f"decode, one run: {_windows_said(agreement)}, full windows of {full_s} "
             f"against the shortened rule's {short_s} (total {short.sum():.0f} of "
             f"{seconds.sum():.0f} s): {same} agree on TPOT, tok/s, W and J/token within the "
             "noise"]  # fmt: skip
    for rec in agreement[agreement["agreement"] == "differs"].to_dict("records"):
        lines.append(f"  differs: {rec['variant']} C = {rec['concurrency']:g}: "
                     f"{rec['differs']} (noise {100 * rec['noise']:.1f} %)")  # fmt: skip
    return lines


def _windows_said(frame: pd.DataFrame) -> str:
    """How many windows (a variant at one C each) and of how many variants: "5 windows of
    1 variant"."""
    variants = frame["variant"].nunique()
    return (f"{len(frame)} window{'s' * (len(frame) != 1)} of {variants} "
            f"variant{'s' * (variants != 1)}")  # fmt: skip


def _watts(value) -> str:
    """A table's watts as "80.2", or "?" where a run's table has none."""
    number = pd.to_numeric(pd.Series([value]), errors="coerce").iloc[0]
    return "?" if pd.isna(number) else f"{number:.1f}"


def summary(ranks: pd.DataFrame, decode: pd.DataFrame) -> list[str]:
    """The agreement in a few lines: counts, then each ranking and decode row that differs."""
    lines = []
    if ranks.empty:
        lines.append("rankings: no size and mode ranked in both runs")
    else:
        counts = ranks["agreement"].value_counts()
        moved = int((ranks["time"] == "differs").sum())
        lines.append(f"rankings: {len(ranks)} sizes and modes in both runs: "
                     f"{counts.get('same', 0)} same leaders, {counts.get('consistent', 0)} "
                     f"consistent (leaders overlap), {counts.get('differs', 0)} differ; the "
                     f"leader's time beyond the noise at {moved}")  # fmt: skip
        for rec in ranks[ranks["agreement"] == "differs"].to_dict("records"):
            lines.append(f"  differs: {rec['dtype']} {rec['shape']} M = {rec['M']} "
                         f"{rec['mode']}: {rec['leaders_a']} | {rec['leaders_b']}")  # fmt: skip
    if decode.empty:
        lines.append("decode: no variant and C valid in both runs")
    else:
        same = int((decode["agreement"] == "same").sum())
        lines.append(f"decode: {_windows_said(decode)} valid in both runs: {same} agree on "
                     f"TPOT, tok/s, W and J/token within the noise")  # fmt: skip
        for rec in decode[decode["agreement"] == "differs"].to_dict("records"):
            chip = ""
            if rec["chips"] == "different":
                idle = " | ".join(_watts(rec[f"idle_w_per_gpu_{s}"]) for s in "ab")
                chip = f"; another GPU, idle {idle} W"
            lines.append(f"  differs: {rec['variant']} C = {rec['concurrency']:g}: "
                         f"{rec['differs']} (noise {100 * rec['noise']:.1f} %{chip})")  # fmt: skip
        other = int((decode["chips"] == "different").sum())
        if other:
            lines.append(f"chips: {other} of {len(decode)} decode rows compare two GPUs "
                         "(their UUIDs): their W and J/token differ by the chips as "
                         "well as by the runs")  # fmt: skip
    return lines
