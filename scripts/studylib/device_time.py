"""Where the measuring jobs' time went (issue 34): per job that holds the study's device (a
backend's sweep and kernel-power loops, the peaks, a decode variant), its wall time from
Snakemake's benchmark file and the seconds of it spent inside measurement, from the job's
own records; the rest is starts, builds and waits, the parts the records name stated apart
(``starts_s``: server starts; ``builds_s``: first calls, JIT builds and autotuning;
``warmups_s``: decode warm-ups). One row per job and a total row:
results/tables/device_time.csv, shown in the report's provenance.

What counts as measurement, per job:

``sweep``         each sampled point's time (ok, mismatch) less its first call (JIT builds,
                  autotuning) and its preparation (``prepare_s``: inputs, FlashInfer's
                  fused-MoE autotuning): the check against the reference, the warm-up and
                  the timed samples; unsupported and error points are outside
``kernel_power``  its windows: the idle baseline and every sustained loop
``decode``        the steady windows of its main and recorder passes, SGLang's bench_serving
                  runs beside them and its idle baseline, of its time holding the device (its
                  wall time less its wait for it: a server started ahead, decode.prestart,
                  waits beside the job before); outside: the server's start
                  (``ready_s``; the JIT builds its caches' files show inside it, in
                  ``builds_s``: instruments/serving/start_builds.py, less a JIT job's
                  beside it, by that job's record), warm-ups, drains,
                  ramp-downs, profile traces
``peaks``         not split (it records no windows): its whole time is left out of the
                  measured share and said so

The JIT builds ahead (rule flashinfer_jit: FlashInfer's kernel jobs' modules; rule
server_jit: an SGLang server's) hold no device: they build on the CPU beside the GPU jobs, so
each one's row (stage ``builds``, its modules' seconds in ``builds_s``) states those builds
apart and stays out of the total.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from .core.io import read_json
from .core.table_registry import Table, read_optional, read_table, register_tables
from .instruments.serving.start_builds import JOB_CACHES, job_builds, less_beside, said

COLUMNS = {"job": "text", "stage": "text", "wall_s": "num", "measuring_s": "num",
           "share": "num", "starts_s": "num", "builds_s": "num", "warmups_s": "num",
           "outside": "any"}  # fmt: skip
#: The parts of a job's time outside measurement its records name, each a column.
PARTS = {"starts_s": "server starts", "builds_s": "JIT builds and first calls",
         "warmups_s": "warm-ups"}  # fmt: skip
DEVICE_TIME = Table("device_time", "the measuring jobs' device time",
                    "results/tables/device_time.csv", COLUMNS)  # fmt: skip
register_tables(DEVICE_TIME)

TOTAL = "all measuring jobs"
#: The stage of a job that builds beside the device, outside the total.
BESIDE = "builds"
#: A decode variant's files the account reads (results/decode/{variant}/), in this order.
DECODE_FILES = ("summary.csv", "recorder.csv", "crosscheck.csv", "windows.parquet", "run.json")


def wall_s(benchmark) -> float | None:
    """A job's wall time from Snakemake's benchmark file (its last run's ``s``)."""
    path = Path(benchmark)
    if not path.exists():
        return None
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    try:
        return float(rows[-1]["s"]) if rows else None
    except (KeyError, ValueError):
        return None


def _column(frame: pd.DataFrame, column: str) -> pd.Series:
    """``column`` as numbers, 0 where missing or not a number (a frame without it: all 0)."""
    values = frame[column] if column in frame else pd.Series(0.0, index=frame.index)
    return pd.to_numeric(values, errors="coerce").fillna(0)


#: The sweep statuses whose points took samples (a mismatch ran and was timed, then failed
#: its check).
SAMPLED = ("ok", "mismatch")


def _sampled(sweep: pd.DataFrame) -> pd.Series:
    """The points that took samples. One that never did (unsupported, error) measured
    nothing, however long it took: on the H200 (session 23) a worker's first FlashInfer point,
    refused on sm_90, took 40 s (the library's first use) and its first sgl-kernel point 7 s."""
    if "status" not in sweep:
        return pd.Series(True, index=sweep.index)
    return sweep["status"].isin(SAMPLED)


def sweep_measuring(sweep: pd.DataFrame) -> tuple[float, str]:
    """Seconds of a sweep inside its points' measurement, and what the rest holds (a sweep
    without ``prepare_s``, before session 20, counts its preparation in). Its first calls:
    :func:`sweep_builds`."""
    sampled = _sampled(sweep)
    point, prepare = _column(sweep, "point_s"), _column(sweep, "prepare_s")
    first = _column(sweep, "first_call_ms") / 1e3
    prepared = f"preparing inputs {prepare.sum():.0f} s; " if prepare.sum() > 0 else ""
    unsampled = point[~sampled].sum()
    refused = (f"points that sampled nothing (unsupported, errors) {unsampled:.0f} s; "
               if unsampled > 0 else "")  # fmt: skip
    return float((point - first - prepare).clip(lower=0)[sampled].sum()), (
        f"first calls (JIT builds, autotuning) {sweep_builds(sweep):.0f} s; {prepared}{refused}"
        "worker starts, imports, untimed points"
    )


def sweep_builds(sweep: pd.DataFrame) -> float:
    """Seconds of a sweep's first calls (JIT builds, autotuning) at the points that sampled."""
    return float((_column(sweep, "first_call_ms") / 1e3)[_sampled(sweep)].clip(lower=0).sum())


def _one_device(windows: pd.DataFrame) -> pd.DataFrame:
    """Each window once: the rows of the first GPU where several GPUs ran it (a CPU's rows
    name none)."""
    if "gpu" not in windows or windows["gpu"].isna().all():
        return windows
    return windows[windows["gpu"] == windows["gpu"].min()]


def _seconds(frame: pd.DataFrame, column: str) -> float:
    return float(_column(frame, column).clip(lower=0).sum())


def kernel_power_measuring(windows: pd.DataFrame) -> tuple[float, str]:
    """Seconds of a kernel-power job inside its windows (each window once, however many GPUs
    ran it)."""
    return _seconds(_one_device(windows), "seconds"), "preparing each point, cooldowns, starts"


def decode_measuring(summary: pd.DataFrame, recorder: pd.DataFrame, crosscheck: pd.DataFrame,
                     windows: pd.DataFrame, run: dict, beside: Sequence[dict] = ()
                     ) -> tuple[float, str]:  # fmt: skip
    """Seconds of a decode job inside measurement: the steady windows of its main and
    recorder passes, bench_serving's runs, the cross-check's alternated rounds after its first
    pair and its idle baseline (a window only where a power reader sampled it). ``beside``:
    the JIT jobs' built modules (start_builds.job_builds), not the server start's."""
    idle = _one_device(windows)
    idle = idle[idle["label"].astype(str) == "idle"] if "label" in idle else idle.iloc[0:0]
    measured = (_seconds(summary, "steady_s") + _seconds(recorder, "steady_s")
                + _seconds(crosscheck, "bench_duration_s") + _seconds(crosscheck, "rounds_s")
                + _seconds(idle, "seconds"))  # fmt: skip
    start = run.get("ready_s")
    started = ""
    if isinstance(start, int | float):
        builds, taken = less_beside(run.get("start_builds"), beside)
        others = "".join(f"; {t['module']} ({t['seconds']:.0f} s) was {t['job']}'s, beside it"
                         for t in taken)  # fmt: skip
        early = run.get("start") or {}
        ahead = ""
        if early.get("prestart") and early.get("before_gate_s"):
            ahead = (f" from its gate, opened {early['before_gate_s']:.0f} s into a start made "
                     "ahead of the device")  # fmt: skip
        started = (f"server start {start:.0f} s{ahead}"
                   + (f" ({said(builds)}{others})" if builds else "") + "; ")  # fmt: skip
    return measured, f"{started}warm-ups, drains, ramp-downs, profile traces"


#: A decode job's server starts and what each compiled (start_builds), in its run record.
STARTS = {"ready_s": "start_builds", "recorder_ready_s": "recorder_start_builds"}


def decode_parts(windows: pd.DataFrame, run: dict, beside: Sequence[dict] = ()) -> dict[str, float]:
    """A decode job's server starts (its main and recorder passes' ``ready_s``) less the JIT
    builds their caches' files show (``builds_s``, stated apart; a JIT job's beside the start,
    by ``beside``, not among them: the start waited for none of it), and its warm-ups (its
    windows labelled ``*warmup``, each once)."""
    starts = builds = 0.0
    for ready, built in STARTS.items():
        if isinstance(run.get(ready), int | float):
            starts += float(run[ready])
            own, _ = less_beside(run.get(built), beside)
            builds += float((own or {}).get("seconds") or 0.0)
    warm = _one_device(windows)
    if "label" in warm:
        warm = warm[warm["label"].astype(str).str.endswith("warmup")]
    else:
        warm = warm.iloc[0:0]
    builds = min(builds, starts)
    return {"starts_s": starts - builds, "builds_s": builds or None,
            "warmups_s": _seconds(warm, "seconds")}  # fmt: skip


def decode_wall(benchmark, run: dict) -> float | None:
    """A decode job's time holding its device: its wall time less its wait for the device
    (run.json's ``start``: a job whose server starts ahead waits beside the job before it)."""
    wall = wall_s(benchmark)
    waited = (run.get("start") or {}).get("device_wait_s")
    return wall - waited if wall is not None and isinstance(waited, int | float) else wall


def _row(job: str, stage: str, wall: float | None, measuring: float | None, outside: str,
         **parts: float):  # fmt: skip
    share = min(measuring / wall, 1.0) if wall and measuring is not None else None
    return {"job": job, "stage": stage, "wall_s": wall, "measuring_s": measuring,
            "share": share, **{k: parts.get(k) for k in PARTS}, "outside": outside}  # fmt: skip


def build_row(job: str, path, benchmark) -> dict:
    """A JIT build's row (rule flashinfer_jit's ``modules``, rule server_jit's ``flashinfer``
    and ``sglang``): the modules it built (not found in the cache) and their seconds, beside
    the device."""
    record = read_json(path)
    modules = [m for key in JOB_CACHES for m in record.get(key, [])]
    built = [m for m in modules if m.get("status") == "built"]
    failed = [m for m in modules if m.get("status") == "failed"]
    said = ", ".join(f"{m.get('kernel') or m['module'].split('_dtype_')[0]} {m['seconds']:.0f} s"
                     for m in built)  # fmt: skip
    outside = (f"JIT modules built on the CPU beside the GPU jobs: {said or 'none'}"
               f" ({len(modules) - len(built) - len(failed)} already built or skipped"
               + (f", {len(failed)} failed: built at its first call instead" if failed else "")
               + ")")  # fmt: skip
    return _row(job, BESIDE, wall_s(benchmark), None, outside,
                builds_s=sum(m["seconds"] for m in built))  # fmt: skip


def device_time(sweeps: dict, kernel_power: dict, decode: dict,
                benchmarks: dict, builds: dict | None = None) -> pd.DataFrame:  # fmt: skip
    """The device-time table. ``sweeps`` and ``kernel_power``: backend -> its table's path;
    ``decode``: variant -> its DECODE_FILES' paths, in that order; ``benchmarks``: job name
    (``sweep/torch``, ``decode/<variant>``, ``peaks``) -> its benchmark file; ``builds``:
    a JIT build's job name (``sweep/flashinfer_jit``, ``decode/server_jit_bf16``) -> its
    record, each one's row stated apart (BESIDE)."""
    rows = []
    # What the JIT jobs built, so that a server start beside one is not charged with it.
    beside = [row for job, path in (builds or {}).items()
              for row in job_builds(job, read_json(path))]  # fmt: skip
    for backend, path in sweeps.items():
        sweep = read_table("sweep", path)
        measuring, outside = sweep_measuring(sweep)
        rows.append(_row(f"sweep/{backend}", "sweep", wall_s(benchmarks[f"sweep/{backend}"]),
                         measuring, outside, builds_s=sweep_builds(sweep)))  # fmt: skip
    for backend, path in kernel_power.items():
        measuring, outside = kernel_power_measuring(read_table("kernel_power", path))
        rows.append(
            _row(
                f"kernel_power/{backend}",
                "kernel_power",
                wall_s(benchmarks[f"kernel_power/{backend}"]),
                measuring,
                outside,
            )
        )
    if "peaks" in benchmarks:
        rows.append(_row("peaks", "peaks", wall_s(benchmarks["peaks"]), None,
                         "not split: the peaks job records no windows"))  # fmt: skip
    for variant, files in decode.items():
        summary, recorder, crosscheck, windows, run = files
        windows, run = pd.read_parquet(windows), read_json(run)
        measuring, outside = decode_measuring(
            read_optional(summary), read_optional(recorder), read_optional(crosscheck),
            windows, run, beside)  # fmt: skip
        rows.append(_row(f"decode/{variant}", "decode",
                         decode_wall(benchmarks[f"decode/{variant}"], run), measuring, outside,
                         **decode_parts(windows, run, beside)))  # fmt: skip
    split = [r for r in rows if r["wall_s"] and r["measuring_s"] is not None]
    unsplit = sum(r["wall_s"] or 0 for r in rows if r["measuring_s"] is None)
    for job, record in (builds or {}).items():
        rows.append(build_row(job, record, benchmarks.get(job)))
    total_wall = sum(r["wall_s"] for r in split)
    parts = {k: sum(r[k] or 0 for r in split) for k in PARTS}
    named = [f"{label} {parts[k]:.0f} s" for k, label in PARTS.items() if parts[k] > 0]
    total = _row(
        TOTAL,
        "all",
        total_wall or None,
        sum(r["measuring_s"] for r in split),
        f"{total_wall - sum(r['measuring_s'] for r in split):.0f} s outside measurement"
        + (f", of it {', '.join(named)}" if named else "")
        + (f"; {unsplit:.0f} s of jobs not split (peaks) left out" if unsplit else ""),
        **parts,
    )
    return pd.DataFrame([*rows, total], columns=list(COLUMNS))


def provenance_line(table: pd.DataFrame) -> str | None:
    """The provenance's sentence: the measured share of the measuring jobs' time, and the job
    with the most time outside measurement."""
    if table.empty or TOTAL not in set(table["job"]):
        return None
    total = table[table["job"] == TOTAL].iloc[0]
    if pd.isna(total["share"]):
        return None
    jobs = table[(table["job"] != TOTAL) & table["share"].notna()]
    jobs = jobs.assign(rest=jobs["wall_s"] - jobs["measuring_s"]).sort_values("rest")
    most = jobs.iloc[-1] if not jobs.empty else None
    worst = (f"; most outside in {most['job']}: {most['rest']:.0f} of its {most['wall_s']:.0f} s "
             f"({most['outside']})" if most is not None else "")  # fmt: skip
    return (f"{100 * total['share']:.0f} % of the measuring jobs' {total['wall_s']:.0f} s was "
            f"inside measurement ({total['outside']}){worst}")  # fmt: skip
