"""The study's tables: each one's columns, their types and its checked reader, in one place.

Writers take their column order from here; readers go through :func:`read_table` and
:func:`read_record`, which stop at a damaged file (truncated, cut mid-line, another table's
file, garbage) with a :class:`DamagedFile` whose message is one line naming the file and what
is wrong, instead of handing half a table or another table's columns to the next stage.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .io import written_record

STATUSES = ("ok", "unsupported", "error", "mismatch")
DTYPES = ("fp32", "bf16", "fp16", "fp8_e4m3", "nvfp4")  # config/schema.yaml's dtype enum
DEVICES = ("cuda", "cpu")
#: Kernel-power window modes (cold: rotating weight sets replayed in one CUDA graph).
MODES = ("idle", "eager", "graph", "cold")

# Column kinds: text, int (whole numbers, may be empty), num (any number, may be empty),
# flag (true/false, may be empty), any (not checked: free-form or another owner's column).
# A fused-MoE point adds its top-k and routing (backends/moe.py); other points leave them empty.
POINT = {"backend": "text", "impl": "text", "op": "text", "dtype": "text", "shape": "text",
         "M": "int", "N": "int", "K": "int", "G": "int", "top_k": "int",
         "routing": "any"}  # fmt: skip

SWEEP = {
    **POINT, "status": "text", "error": "any", "device": "text", "device_name": "any",
    "library_version": "any",
    "eager_us": "num", "eager_iqr_us": "num", "eager_samples": "num",
    "graph_us": "num", "graph_iqr_us": "num", "graph_samples": "num", "graph_calls": "num",
    "graph_fixed_us": "num",
    "cold_us": "num", "cold_iqr_us": "num", "cold_samples": "num", "cold_sets": "num",
    "cold_calls": "num",
    "rel_err": "num", "cos_sim": "num", "all_zero": "flag", "has_nan": "flag", "flops": "num",
    "bytes": "num", "tflops": "num", "gbps": "num", "launch_overhead_us": "num",
    "sm_clock_mhz": "num", "throttle": "any", "first_call_ms": "num", "point_s": "num",
}  # fmt: skip
ROOFLINE = {"compute_floor_us": "num", "memory_floor_us": "num", "floor_us": "num",
            "floor_basis": "any", "efficiency": "num"}  # fmt: skip
SUPPORT = {"backend": "text", "impl": "text", "op": "text", "dtype": "text", "points": "int",
           **{s: "int" for s in STATUSES}, "status": "text", "reason": "any"}  # fmt: skip
WINDOWS = {
    **POINT, "mode": "text", "label": "any", "window": "any", "t_start": "num", "t_end": "num",
    "seconds": "num", "gpu": "int", "gpu_name": "any", "power_source": "text",
    "energy_j": "num", "energy_j_samples": "num", "energy_gap_pct": "num", "avg_w": "num",
    "avg_w_samples": "num", "power_limit_w": "num", "pct_limit": "num", "sm_clock_mhz": "num",
    "mem_clock_mhz": "num", "temp_c_max": "num", "throttle_reasons": "any", "sm_util": "num",
    "sm_occupancy": "num", "tensor_util": "num", "dram_util": "num", "gpm_pairs": "num",
    "samples": "num", "calls": "int", "us_per_call": "num", "status": "text", "error": "any",
    "sampler_cpu_pct": "num", "gpus_running": "int", "calls_per_replay": "num",
    "cold_sets": "num",
}  # fmt: skip


@dataclass(frozen=True)
class Table:
    """One table: what it is, where it lives, its columns (in order) and allowed values."""

    name: str
    what: str
    path: str  # the workflow's path pattern, for messages
    # {column: kind}, or a function giving it (for columns owned elsewhere, read late)
    kinds: dict[str, str] | Callable[[], dict[str, str]]
    values: dict[str, tuple] = field(default_factory=dict)

    @property
    def columns(self) -> dict[str, str]:
        return self.kinds() if callable(self.kinds) else self.kinds


def _decode(name: str, first: tuple = (), last: tuple = ()) -> Callable[[], dict[str, str]]:
    """The columns of a decode table, owned by the serving package (imported only when a
    decode table is read: sweep workers import this module too)."""

    def kinds() -> dict[str, str]:
        from .serving.crosscheck import CROSSCHECK_COLUMNS
        from .serving.decode import BREAKDOWN_COLUMNS, RECORDER_COLUMNS, SUMMARY_COLUMNS
        from .serving.experts import EXPERT_M_COLUMNS

        owned = {"summary": SUMMARY_COLUMNS, "recorder": RECORDER_COLUMNS,
                 "expert_m": EXPERT_M_COLUMNS, "breakdown": BREAKDOWN_COLUMNS,
                 "crosscheck": CROSSCHECK_COLUMNS}[name]  # fmt: skip
        return dict.fromkeys([*first, *owned, *last], "any")

    return kinds


def _step_model() -> dict[str, str]:
    """The step-model table's columns, owned by studylib.step_model."""
    from .step_model import COLUMNS

    return dict.fromkeys(COLUMNS, "any")


def _tables() -> dict[str, Table]:
    status = {"status": STATUSES, "dtype": DTYPES}
    return {
        "sweep": Table("sweep", "a backend's sweep", "results/sweeps/{backend}.parquet",
                       SWEEP, {**status, "device": DEVICES}),
        "sweep_table": Table("sweep_table", "the sweep table", "results/tables/sweep.csv",
                             {**SWEEP, **ROOFLINE}, {**status, "device": DEVICES}),
        "support": Table("support", "the support matrix", "results/tables/support.csv",
                         SUPPORT, {"dtype": DTYPES}),
        "kernel_power": Table("kernel_power", "a backend's kernel-power windows",
                              "results/kernel_power/{backend}.parquet", WINDOWS,
                              {"mode": MODES}),
        "kernel_power_table": Table("kernel_power_table", "the kernel-power table",
                                    "results/tables/kernel_power.csv", WINDOWS,
                                    {"mode": MODES}),
        "timeline": Table("timeline", "a backend's power timeline",
                          "results/kernel_power/{backend}_timeline.parquet", {"backend": "any"}),
        "decode_summary": Table("decode_summary", "a variant's decode summary",
                                "results/decode/{variant}/summary.csv",
                                _decode("summary")),
        "decode_table": Table("decode_table", "the decode table", "results/tables/decode.csv",
                              _decode("summary", last=("hbm_floor_ms", "tpot_over_floor"))),
        "expert_m": Table("expert_m", "a variant's per-expert M",
                          "results/decode/{variant}/expert_m.csv",
                          _decode("expert_m")),
        "expert_m_table": Table("expert_m_table", "the per-expert M table",
                                "results/tables/expert_m.csv",
                                _decode("expert_m", first=("variant",))),
        "recorder": Table("recorder", "a variant's expert-recorder cost",
                          "results/decode/{variant}/recorder.csv",
                          _decode("recorder")),
        "step_model": Table("step_model", "the step-model table",
                            "results/tables/step_model.csv", _step_model),
        "recorder_table": Table("recorder_table", "the decode recorder table",
                                "results/tables/decode_recorder.csv",
                                _decode("recorder", first=("variant",))),
        "crosscheck": Table("crosscheck", "a variant's decode cross-check",
                            "results/decode/{variant}/crosscheck.csv", _decode("crosscheck")),
        "crosscheck_table": Table("crosscheck_table", "the decode cross-check table",
                                  "results/tables/decode_crosscheck.csv",
                                  _decode("crosscheck", first=("variant",))),
        "breakdown": Table("breakdown", "a variant's measured decode-step breakdown",
                           "results/decode/{variant}/breakdown.csv", _decode("breakdown")),
    }  # fmt: skip


#: JSON records: what each is, its required keys and optional ones, with their kinds (num
#: and text may be null).
RECORDS = {
    "peaks": ("this machine's measured peaks", {"copy_gbps": "num"},
              {"device": "text", "bf16_tflops": "num", "fp8_tflops": "num",
               "fp32_tflops": "num", "fp4_tflops": "num"}),
    "hardware": ("the hardware record", {"device": "text", "gpus": "list", "packages": "dict"},
                 {"host": "dict", "driver_version": "text", "cuda_version": "text"}),
}  # fmt: skip


def table(name: str) -> Table:
    return _tables()[name]


def columns(name: str) -> list[str]:
    """A table's columns in the order writers put them."""
    return list(table(name).columns)


class DamagedFile(ValueError):
    """An input file that is not what its table says: the message is one line."""


def _fail(path, problem: str):
    raise DamagedFile(f"{path}: {problem}")


#: Tables already read and checked in this process, by (table, path, size, mtime): a job's
#: inputs are checked before it starts (entry.setup_logging) and then read by the job.
_CHECKED: dict[tuple, pd.DataFrame] = {}


def read_table(name: str, path: str | os.PathLike) -> pd.DataFrame:
    """``path`` read as table ``name``, checked: readable to its end, its columns present and
    each value of its kind; else :class:`DamagedFile`. A file read once and unchanged since
    is not read or checked again (the caller gets its own copy)."""
    spec, path = table(name), Path(path)
    if not path.is_file():
        _fail(path, f"missing ({spec.what} is expected here)")
    stat = path.stat()
    if stat.st_size == 0:
        _fail(path, "empty file (0 bytes): truncated or never finished")
    key = (name, str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _CHECKED:
        frame = _read_parquet(path) if path.suffix == ".parquet" else _read_csv(path)
        check_frame(name, frame, path)
        _check_as_written(path, stat.st_size, len(frame))
        _CHECKED[key] = frame
    return _CHECKED[key].copy()


def _check_as_written(path: Path, size: int, rows: int) -> None:
    """A CSV against its writer's record (io.write_frame), where there is one: a file cut at
    a line end parses as a shorter table and is caught only here."""
    record = written_record(path)
    if path.suffix != ".csv" or not record.is_file():
        return
    try:
        written = json.loads(record.read_text(encoding="utf-8"))
        want_size, want_rows = int(written["bytes"]), int(written["rows"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # an unreadable record says nothing about the table
    if size != want_size:
        _fail(path, f"{size} bytes and {rows} rows where its writer wrote {want_size} bytes and "
                    f"{want_rows} rows: cut at a line end, or changed after it was written; "
                    "rerun the rule that writes it")  # fmt: skip


def _read_parquet(path: Path) -> pd.DataFrame:
    import pyarrow as pa

    try:
        return pd.read_parquet(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        _fail(path, f"not a readable parquet file (truncated or overwritten?): {first}")


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        _fail(path, f"not a text CSV file: {exc.reason} at byte {exc.start}")
    if not text.endswith("\n"):
        # Every writer ends with a newline: a file without one was cut short.
        _fail(path, "the last line is cut short (no newline at the end): the file is truncated")
    # csv, not lines: a quoted field (a library's error message) may hold newlines.
    reader = csv.reader(io.StringIO(text, newline=""))
    width = len(next(reader))
    for row in reader:
        if len(row) != width:
            _fail(path, f"line {reader.line_num} has {len(row)} fields, the header {width}")
    try:
        return pd.read_csv(path, keep_default_na=True)
    except (pd.errors.ParserError, ValueError) as exc:
        _fail(path, f"not a readable CSV file: {str(exc).strip().splitlines()[0]}")


def check_frame(name: str, frame: pd.DataFrame, path) -> None:
    """Columns present, values of their kinds and among the allowed ones."""
    spec = table(name)
    missing = [c for c in spec.columns if c not in frame.columns]
    if missing:
        shown = ", ".join(missing[:6]) + (
            f" (+{len(missing) - 6} more)" if len(missing) > 6 else ""
        )
        guess = _looks_like(frame, exclude=name)
        _fail(path, f"not {spec.what} ({spec.path}): no column {shown}"
              + (f"; it looks like {guess}" if guess else ""))  # fmt: skip
    for column, kind in spec.columns.items():
        bad = _bad_values(frame[column], kind)
        if bad is not None:
            row, value = bad
            _fail(path, f"column {column}, row {row + 1}: {value!r} is not {KIND_WORDS[kind]}")
        allowed = spec.values.get(column)
        if allowed:
            present = frame[column].dropna()
            odd = present[~present.isin(allowed)]
            if len(odd):
                _fail(path, f"column {column}, row {odd.index[0] + 1}: {odd.iloc[0]!r} is not "
                      f"one of {', '.join(allowed)}")  # fmt: skip


KIND_WORDS = {"int": "a whole number", "num": "a number", "flag": "true or false",
              "text": "text", "any": "anything"}  # fmt: skip


def _bad_values(series: pd.Series, kind: str):
    """(row, value) of the first value not of ``kind``, else None (empty cells pass)."""
    if kind == "any":
        return None
    present = series.dropna()
    if kind == "text":
        odd = present[~present.map(lambda v: isinstance(v, str))]
    elif kind in ("num", "int"):
        if pd.api.types.is_bool_dtype(present):
            odd = present
        else:
            numbers = pd.to_numeric(present, errors="coerce")
            odd = present[numbers.isna()]
            if kind == "int" and odd.empty:
                odd = present[(numbers % 1 != 0) & numbers.notna()]
    else:  # flag
        odd = present[~present.isin([True, False, "True", "False", "true", "false"])]
    if odd.empty:
        return None
    value = odd.iloc[0]
    return odd.index[0], value.item() if hasattr(value, "item") else value  # numpy -> Python


def _looks_like(frame: pd.DataFrame, exclude: str) -> str | None:
    """The table whose columns ``frame`` holds (another table's file copied over this one)."""
    for other in _tables().values():
        if other.name != exclude and len(other.columns) > 1:
            if all(c in frame.columns for c in other.columns):
                return f"{other.what} ({other.path})"
    return None


def read_record(name: str, path: str | os.PathLike) -> dict:
    """A JSON record (peaks, hardware) read and checked: a mapping with its keys, each of its
    kind (num and text may be null); else :class:`DamagedFile`."""
    what, required, optional = RECORDS[name]
    path = Path(path)
    if not path.is_file():
        _fail(path, f"missing ({what} is expected here)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        _fail(path, f"not a JSON text file: {exc.reason} at byte {exc.start}")
    except json.JSONDecodeError as exc:
        _fail(path, f"not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})")
    if not isinstance(data, dict):
        _fail(path, f"holds a JSON {type(data).__name__}, not {what}")
    missing = [key for key in required if key not in data]
    if missing:
        _fail(path, f"not {what}: no key {', '.join(missing)}")
    kinds = {"text": str, "num": (int, float), "list": list, "dict": dict}
    for key, kind in {**required, **optional}.items():
        if key not in data:
            continue
        value = data[key]
        nullable = kind in ("text", "num")
        wrong = not isinstance(value, kinds[kind]) or isinstance(value, bool)
        if (value is not None or not nullable) and wrong:
            _fail(path, f"key {key}: {value!r} is not {KIND_WORDS.get(kind, 'a ' + kind)}")
    return data


def kind_of(path: str | os.PathLike) -> tuple[str, str] | None:
    """("table" or "record", name) of a study file, from where it lives; None for others."""
    path = Path(path)
    for name in RECORDS:
        if path.name == f"{name}.json":
            return "record", name
    patterns = {
        spec.name: spec.path.removeprefix("results/")
        .replace("{backend}", "*")
        .replace("{variant}", "*")
        for spec in _tables().values()
    }
    # The longest pattern first: kernel_power/*_timeline.parquet before kernel_power/*.parquet.
    for name, pattern in sorted(patterns.items(), key=lambda item: -len(item[1])):
        if path.match(pattern):
            return "table", name
    return None


def check_inputs(paths) -> dict[str, int]:
    """Every study table or record among ``paths`` read and checked (a job's inputs, before
    it runs): {path: rows}; the first damaged one raises :class:`DamagedFile`."""
    checked = {}
    for path in _flat(paths):
        kind = kind_of(path)
        if kind is None or Path(path).is_dir():
            continue
        if kind[0] == "record":
            read_record(kind[1], path)
            checked[str(path)] = 1
        else:
            checked[str(path)] = len(read_table(kind[1], path))
    return checked


def _flat(paths):
    for item in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        if isinstance(item, (str, os.PathLike)):
            yield item
        else:
            yield from _flat(item)


#: What the findings and the report read, by field of :class:`StudyTables`: (record or table
#: name, its file under the results folder).
STUDY_FILES = {
    "hardware": ("hardware", "hardware.json"),
    "peaks": ("peaks", "peaks.json"),
    "sweep": ("sweep_table", "tables/sweep.csv"),
    "support": ("support", "tables/support.csv"),
    "kernel_power": ("kernel_power_table", "tables/kernel_power.csv"),
    "decode": ("decode_table", "tables/decode.csv"),
    "expert_m": ("expert_m_table", "tables/expert_m.csv"),
    "decode_recorder": ("recorder_table", "tables/decode_recorder.csv"),
    "step_model": ("step_model", "tables/step_model.csv"),
}


@dataclass(frozen=True)
class StudyTables:
    """The study's tables and records, each read once; ``None`` for one that is absent."""

    hardware: dict | None = None
    peaks: dict | None = None
    sweep: pd.DataFrame | None = None
    support: pd.DataFrame | None = None
    kernel_power: pd.DataFrame | None = None
    decode: pd.DataFrame | None = None
    expert_m: pd.DataFrame | None = None
    decode_recorder: pd.DataFrame | None = None
    step_model: pd.DataFrame | None = None

    @classmethod
    def read(cls, paths, checked: bool = True) -> StudyTables:
        """The files of ``paths`` ({field: path}, e.g. a rule's input; absent fields and
        files are ``None``). ``checked``: through the checked readers (a damaged file raises
        :class:`DamagedFile`); else read plainly, as an older run's folder with older
        columns must be, an unreadable file counting as absent."""
        found = {}
        for name, (spec, _) in STUDY_FILES.items():
            path = paths.get(name) if hasattr(paths, "get") else None
            if path is None or not Path(path).is_file():
                continue
            if checked:
                reader = read_record if spec in RECORDS else read_table
                found[name] = reader(spec, path)
            else:
                found[name] = _read_plain(Path(path))
        # An empty per-expert table is no record of the experts.
        if found.get("expert_m") is not None and found["expert_m"].empty:
            found["expert_m"] = None
        return cls(**found)

    @classmethod
    def from_results(cls, results: str | os.PathLike, checked: bool = False) -> StudyTables:
        """The tables of a results folder (``results/`` or a committed example's copy)."""
        results = Path(results)
        return cls.read({name: results / file for name, (_, file) in STUDY_FILES.items()},
                        checked)  # fmt: skip


def _read_plain(path: Path) -> pd.DataFrame | dict | None:
    try:
        if path.suffix == ".json":
            return json.loads(path.read_text())
        return pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError):
        return None


def read_optional(path: str | os.PathLike | None) -> pd.DataFrame:
    """A table the figures and the report draw, read plainly (parquet or CSV); an empty frame
    when there is none to read: no path, no file, an empty file or no header."""
    if path is None or not Path(path).is_file() or Path(path).stat().st_size == 0:
        return pd.DataFrame()
    if Path(path).suffix == ".parquet":
        return pd.read_parquet(path)
    try:
        return pd.read_csv(path, keep_default_na=True)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


# ---------------------------------------------------------------------------------------------
# How columns are shown: the report's tables, the figures' tooltips, the findings' numbers
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """How a column is shown. ``label``: its header in the report's tables (``None``: shown
    only in tooltips); ``fmt``: its cells' format, a spec that Python's ``format`` and Vega's
    d3-format read alike (``None``: text; ``"us"``: :func:`fmt_us` without its unit);
    ``unit``: written after each formatted number; ``tip`` and ``tip_fmt``: the figures'
    tooltip title and format, where they differ from ``label`` and ``fmt``."""

    label: str | None
    fmt: str | None = None
    unit: str = ""
    tip: str | None = None
    tip_fmt: str | None = None

    @property
    def title(self) -> str:
        """The tooltip's title."""
        return self.tip or self.label or ""

    @property
    def tip_format(self) -> str:
        """The tooltip's d3 format ("" for text)."""
        return self.tip_fmt if self.tip_fmt is not None else self.fmt or ""

    def text(self, value: float) -> str:
        """A number as this column's cells show it."""
        return fmt_number(value, self.fmt or ".4g") + self.unit


def fmt_us(us: float, unit: bool = True) -> str:
    """Microseconds with sensible precision: with ``unit`` as the findings write them (in ms
    from 1 ms on), else as a table cell under a "µs" header."""
    if not unit:
        return f"{us:.2f}" if us < 10 else f"{us:.1f}" if us < 100 else f"{us:,.0f}"
    if us >= 10000:
        return f"{us / 1000:.1f} ms"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    if us >= 100:
        return f"{us:.0f} µs"
    if us >= 1:
        return f"{us:.1f} µs"
    return f"{us:.2f} µs"


def fmt_number(value: float, fmt: str) -> str:
    """``value`` in format ``fmt`` (a :class:`Column`'s): "d" whole, "us" microseconds."""
    if fmt == "d":
        return f"{int(value)}"
    if fmt == "us":
        return fmt_us(value, unit=False)
    return format(value, fmt)


def _text(*names: str) -> dict[str, Column]:
    return {name: Column(name) for name in names}


_KEY = _text("backend", "impl", "op", "dtype", "shape")
#: Clocks, clocks-event reasons and GPM utilisation: the same in every power table.
_CLOCKS = {
    "sm_clock_mhz": Column("SM MHz", ".0f", tip="SM clock (MHz)"),
    "throttle_reasons": Column("reasons"),
    "sm_util": Column("SM util %", ".0f", tip="SM util (%)"),
    "tensor_util": Column("tensor util %", ".0f", tip="tensor util (%)"),
    "dram_util": Column("DRAM util %", ".0f", tip="DRAM util (%)"),
}
_ENERGY_GAP = Column("counter vs samples gap %", "+.1f", tip="counter vs samples gap (%)")

#: {table: {column: Column}}, each table's columns in the order its report table shows them
#: (those with no label: tooltips only). Tables beyond :func:`table`'s: the findings' pair
#: tables (``graphs_pairs``, ``tp_pairs``).
SHOWN: dict[str, dict[str, Column]] = {
    "sweep_table": {
        **_KEY, **{c: Column(c, "d") for c in ("M", "N", "K", "G")}, **_text("status"),
        "eager_us": Column("eager µs", "us"),
        "eager_iqr_us": Column("IQR µs", "us", tip="eager IQR (µs)", tip_fmt=".3g"),
        "eager_samples": Column("samples", "d"),
        "graph_us": Column("graph µs", "us", tip="graph (µs)", tip_fmt=".4g"),
        "cold_us": Column("cold µs", "us", tip="cold (µs)", tip_fmt=".4g"),
        "floor_us": Column("floor µs", "us", tip="floor (µs)", tip_fmt=".4g"),
        "launch_overhead_us": Column("launch µs", "us", tip="launch overhead (µs)",
                                     tip_fmt=".3g"),
        "efficiency": Column("efficiency", ".1%"),
        "tflops": Column("TFLOP/s", ",.1f", tip_fmt=".4g"),
        "gbps": Column("GB/s", ",.1f", tip_fmt=".4g"),
        "rel_err": Column("rel. err", ".2e", tip="rel. error"),
        "cos_sim": Column("cos sim", ".6f"),
        "sm_clock_mhz": Column("SM MHz", ".4g", tip="SM clock (MHz)", tip_fmt=".0f"),
        **_text("throttle", "error"),
    },
    "kernel_power_table": {
        **_KEY, "M": Column("M", ".0f", tip_fmt="d"), "gpu": Column("GPU", ".0f", tip_fmt="d"),
        # class early: visible without scrolling the wide table sideways
        **_text("mode", "class"),
        "seconds": Column("seconds", ".1f"),
        "avg_w": Column("avg W", ".1f"),
        "avg_w_samples": Column("avg W (samples)", ".1f"),
        "energy_gap_pct": _ENERGY_GAP,
        "pct_limit": Column("% of limit", ".1f"),
        **_CLOCKS, **_text("why", "status", "error"),
        "window": Column(None, tip="window"),
    },
    "timeline": {
        "t_rel": Column(None, ".2f", tip="t (s)"),
        "power_w": Column(None, ".1f", tip="power (W)"),
        "sm_clock_mhz": _CLOCKS["sm_clock_mhz"],
        "temp_c": Column(None, ".0f", tip="temperature (°C)"),
        "reasons_names": Column(None, tip="reasons"),
    },
    "decode_table": {
        **_text("engine", "variant"),
        "concurrency": Column("concurrency", ".0f", tip_fmt="d"),
        "weights": Column("weights"),
        "cuda_graphs": Column("CUDA graphs"),
        "gpus": Column("GPUs", ".0f", tip_fmt="d"),
        "ep": Column("EP", ".0f"),
        "steady_s": Column("steady s", ".1f", tip="steady window (s)"),
        "valid": Column("valid"),
        "output_tok_s": Column("tok/s", ",.1f", tip="output tok/s"),
        "tpot_ms": Column("TPOT ms", ".2f", tip="TPOT (ms)"),
        "hbm_floor_ms": Column("HBM floor ms", ".2f", tip="HBM floor of a step (ms)"),
        "tpot_over_floor": Column("TPOT ÷ floor", ".2f", tip="TPOT ÷ HBM floor"),
        "itl_p50_ms": Column("ITL p50 ms", ".2f", tip="ITL p50 (ms)"),
        "itl_p99_ms": Column("ITL p99 ms", ".2f", tip="ITL p99 (ms)"),
        "ttft_p50_ms": Column("TTFT p50 ms", ".1f", tip="TTFT p50 (ms)"),
        "avg_w_per_gpu": Column("W/GPU", ".1f", tip="avg W per GPU"),
        **{f"w_gpu_{s}": Column(f"W/GPU {s}", ".1f") for s in ("min", "median", "max")},
        "idle_w_per_gpu": Column("idle W/GPU", ".1f", tip="idle W per GPU"),
        "avg_w_total": Column("W total", ".1f", tip="avg W total"),
        "pct_limit": Column("% of limit", ".1f", tip="% of power limit"),
        "j_per_token": Column("J/token", ".4g", tip="J per output token"),
        "j_per_token_net": Column("J/token net of idle", ".4g", tip="J per token net of idle"),
        "energy_gap_pct": _ENERGY_GAP,
        **_CLOCKS,
        "throttle_reasons": Column("reasons", tip="clocks-event reasons"),
        "step_gb": Column("step GB", ".2f"),
        "tok_s_over_c_tpot": Column("tok/s ÷ (C/TPOT)", ".2f"),
        "decoding_share": Column("share of window decoding", ".2f"),
        "load_cpu_pct": Column("load CPU %", ".0f"),
        "first_error": Column("first error"),
        "graphs": Column(None, tip="CUDA graphs"),
        "validity": Column(None, tip="validity"),
        "requests": Column(None, "d", tip="requests"),
        "power_source": Column(None, tip="power source"),
    },
    # CUDA graphs on against off (findings.graphs_pairs).
    "graphs_pairs": {
        **_text("engine", "weights"), "gpus": Column("GPUs", ".0f"),
        "concurrency": Column("C", ".0f"),
        "tpot_on_ms": Column("TPOT on ms", ".2f"), "tpot_off_ms": Column("TPOT off ms", ".2f"),
        "tpot_ratio": Column("TPOT on÷off", ".2f", "×"),
        "w_on": Column("W/GPU on", ".0f"), "w_off": Column("W/GPU off", ".0f"),
        "w_ratio": Column("W on÷off", ".2f", "×"),
        "j_on": Column("J/token on", ".3g"), "j_off": Column("J/token off", ".3g"),
        "j_ratio": Column("J/token on÷off", ".2f", "×"),
        "j_net_ratio": Column("net J/token on÷off", ".2f", "×"),
        "tok_ratio": Column("tok/s on÷off", ".2f", "×"),
    },
    # One GPU against tensor parallelism (findings.tp_pairs).
    "tp_pairs": {
        **_text("weights"), "cuda_graphs": Column("CUDA graphs"),
        "concurrency": Column("C", ".0f"), "gpus_n": Column("GPUs", ".0f"),
        "tok_s_1": Column("tok/s 1 GPU", ",.0f"), "tok_s_n": Column("tok/s N GPUs", ",.0f"),
        "tok_ratio": Column("tok/s N÷1", ".2f", "×"),
        "tpot_1_ms": Column("TPOT 1 GPU ms", ".2f"),
        "tpot_n_ms": Column("TPOT N GPUs ms", ".2f"),
        "w_1": Column("W/GPU 1 GPU", ".0f"), "w_n": Column("W/GPU N GPUs", ".0f"),
        "w_n_min": Column("min W of N", ".0f"), "w_n_max": Column("max W of N", ".0f"),
        "pct_limit_n": Column("% of limit N", ".0f"),
        "j_1": Column("J/token 1 GPU", ".3g"), "j_n": Column("J/token N GPUs", ".3g"),
        "j_ratio": Column("J/token N÷1", ".2f", "×"),
        "clock_n_mhz": Column("SM MHz N", ".0f"),
        "reasons_1": Column("limits 1 GPU"), "reasons_n": Column("limits N GPUs"),
    },
    # The recorder pass against the main pass.
    "recorder_table": {
        **_text("variant"), "concurrency": Column("C", ".0f"),
        "steady_s": Column("steady s", ".1f"),
        "tpot_ms": Column("TPOT with recorder ms", ".2f"),
        "tpot_ms_off": Column("TPOT without ms", ".2f"),
        "tpot_ratio": Column("TPOT with÷without", ".2f", "×"),
        "output_tok_s": Column("tok/s with", ",.1f"),
        "output_tok_s_off": Column("tok/s without", ",.1f"),
        "avg_w_per_gpu": Column("W/GPU with", ".1f"),
        "avg_w_per_gpu_off": Column("W/GPU without", ".1f"),
        "errors": Column("errors", ".0f"),
    },
}  # fmt: skip


def shown(name: str) -> list[tuple[str, Column]]:
    """Table ``name``'s report columns, in order: (column, :class:`Column`)."""
    return [(c, col) for c, col in SHOWN[name].items() if col.label is not None]


def tips(name: str, columns) -> list[tuple[str, str, str]]:
    """Tooltip rows of ``columns`` of table ``name``: (column, title, d3 format; "" for text)."""
    return [(c, SHOWN[name][c].title, SHOWN[name][c].tip_format) for c in columns]
