"""Render the study's report from a committed example's tables (no GPU, no Snakemake).

    python3 tools/example_report.py examples/h200-2026-12-01-kernels/run14-15 \\
        --sweeps 'sweeps/*.csv' --baseline 'back_to_back/run14_*.csv' --out /tmp/h200

Each example's README gives the command that renders its report. Reads, where the example
keeps them:
- its sweep CSVs (``--sweeps``, a pattern relative to the example; default ``sweeps/*.csv``,
  else a results folder's ``sweeps/*.parquet``; an example without any, decode only, renders
  without the kernel questions' tables; a folder that kept only its sweep table passes
  ``--sweeps tables/sweep.csv``: its rows are the sweep's, the roofline is computed again)
  with ``peaks.json``;
- ``hardware.json`` (or ``--hardware``: an example that kept none borrows the record of the
  same kind of machine from another, and the report's provenance says so; ``--peaks``
  likewise);
- its kernel-power windows (``kernel_power/windows.csv``, else ``tables/kernel_power.csv``);
- the decode tables (``tables/decode.csv``, ``expert_m.csv``, ``decode_recorder.csv``,
  ``decode_crosscheck.csv``), else each variant's files under ``decode/`` (``summary.csv``,
  ``expert_m.csv``, ``recorder.csv``, ``crosscheck.csv``) aggregated as rule
  ``aggregate_decode`` does;
- ``tables/step_model.csv`` and ``tables/device_time.csv`` (the provenance's device time).
Writes under OUT the tables (``tables/sweep.csv``, ``support.csv``, ``answers.csv``, ...),
the Vega-Lite spec of every figure of the registry (``studylib/figure_list.py``) whose tables
the example has, drawn by the functions rule ``plot`` calls (``--png`` adds each figure's PNG
and HTML, as rule ``plot`` writes them; the report needs only the specs), and
``report/index.html``, as the workflow's own steps would. ``--baseline`` (a pattern in the
example, or a path) adds "Before and after". Prints the report's path.

The tables must be of today's schema: ``tools/migrate_example.py`` brings an older example's
up to it (each example's README says when it was migrated).
"""

import argparse
import glob
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from studylib.core.charts import chart_spec  # noqa: E402
from studylib.core.io import write_frame, write_text  # noqa: E402
from studylib.core.table_registry import DamagedFile, read_table  # noqa: E402
from studylib.figure_drawing import draw_figure, figure_chart  # noqa: E402
from studylib.figure_list import (  # noqa: E402
    BACKEND_SWEEP,
    DECODE_TABLE,
    EXPERT_M_TABLE,
    KERNEL_POWER_CLASSES_TABLE,
    KERNEL_POWER_TABLE,
    PEAKS,
    STEP_MODEL_TABLE,
    SUPPORT_TABLE,
    SWEEP_TABLE,
    figure_files,
    figures,
    study_figures,
)
from studylib.report import render_report  # noqa: E402
from studylib.stages.decode.decode_aggregate import decode_table, with_variant  # noqa: E402
from studylib.stages.decode.decode_judgements import graphs_pairs, tp_pairs  # noqa: E402
from studylib.stages.decode.decode_schema import (  # noqa: E402
    CROSSCHECK_COLUMNS,
    RECORDER_COLUMNS,
)
from studylib.stages.decode.expert_m import EXPERT_M_COLUMNS  # noqa: E402
from studylib.stages.kernel_power.window_classes import classify_windows  # noqa: E402
from studylib.stages.sweep.sweep_aggregate import aggregate  # noqa: E402
from studylib.stages.sweep.sweep_compare import (  # noqa: E402
    ComparisonRefused,
    write_comparison,
)
from studylib.stages.sweep.sweep_ranking import write_fastest  # noqa: E402
from studylib.study_answers import write_answers  # noqa: E402
from studylib.study_tables import StudyTables  # noqa: E402

DEFAULT_SWEEPS = "sweeps/*.csv"
#: A results folder's sweeps (rule sweep's), read where the default pattern finds none.
RESULTS_SWEEPS = "sweeps/*.parquet"
#: The decode tables an example keeps under tables/, by report input: (file, the per-variant
#: file under decode/<variant>/ it aggregates, that table's columns).
DECODE_FILES = {
    "decode": ("decode.csv", "summary.csv", None),
    "expert_m": ("expert_m.csv", "expert_m.csv", EXPERT_M_COLUMNS),
    "decode_recorder": ("decode_recorder.csv", "recorder.csv", RECORDER_COLUMNS),
    "decode_crosscheck": ("decode_crosscheck.csv", "crosscheck.csv", CROSSCHECK_COLUMNS),
}  # fmt: skip


class Refused(Exception):
    """An example this tool cannot render as asked: one line for the user."""


def borrowed(given: Path | None, own: Path) -> tuple[Path | None, str | None]:
    """A record (hardware, peaks): the one given (borrowed, named) or the example's own."""
    if given is not None:
        if not given.is_file():
            raise Refused(f"no file {given}")
        return given, str(given)
    return (own, None) if own.is_file() else (None, None)


def sweep_files(example: Path, pattern: str | None) -> list[str]:
    """The sweep files of ``pattern``; without one, the default pattern's files, else a
    results folder's (``sweeps/*.parquet``), if any (an example of decode alone has none)."""
    files = sorted(glob.glob(str(example / (pattern or DEFAULT_SWEEPS))))
    if pattern and not files:
        raise Refused(f"{example / pattern} matches no file")
    if not pattern and not files:
        files = sorted(glob.glob(str(example / RESULTS_SWEEPS)))
    return files


def read_sweep(path: str) -> pd.DataFrame:
    """One sweep file: a CSV (an example's) or a parquet file (a results folder's, as the
    sweep rule writes it); Refused naming a file that is neither."""
    try:
        return pd.read_parquet(path) if path.endswith(".parquet") else pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Refused(f"{path}: not a readable sweep file ({why})") from None


def split_by_backend(files: list[str], out: Path) -> list[Path]:
    """The sweep rows as the sweep rule writes them: one parquet file per backend."""
    rows = pd.concat([read_sweep(f) for f in files], ignore_index=True)
    if "backend" not in rows.columns:
        raise Refused(f"{files[0]}: not a sweep (no column backend)")
    parts = []
    for backend, frame in rows.groupby("backend"):
        path = out / "sweeps" / f"{backend}.parquet"
        write_frame(frame, path, f"example_report {backend}")
        parts.append(path)
    return parts


def sweep_tables(parts: list[Path], peaks: Path, out: Path) -> dict[str, Path]:
    """The sweep table, support matrix and fastest table, as rule aggregate writes them."""
    tables = {name: out / "tables" / f"{name}.csv" for name in ("sweep", "support")}
    aggregate(parts, peaks, tables["sweep"], tables["support"])
    return tables


def kernel_power_tables(example: Path, hardware: Path, out: Path) -> dict[str, Path]:
    """The kernel-power windows and their classes (one rule: window_classes, which reads the
    GPUs' maximum clocks from the hardware record)."""
    windows = next((w for w in (example / "kernel_power" / "windows.csv",
                                example / "tables" / "kernel_power.csv") if w.is_file()),
                   None)  # fmt: skip
    if windows is None:
        return {}
    classes = out / "tables" / "kernel_power_classes.csv"
    write_frame(classify_windows(read_table("kernel_power_table", windows),
                                 json.loads(hardware.read_text())), classes)  # fmt: skip
    return {"kernel_power": windows, "kernel_power_classes": classes}


def decode_tables(example: Path, peaks: Path | None, out: Path) -> dict[str, Path]:
    """The decode tables the example keeps; where it kept only each variant's files, those
    aggregated as rule aggregate_decode aggregates them; the pairs derived from the decode
    table as that rule derives them."""
    found = {name: example / "tables" / kept for name, (kept, _, _) in DECODE_FILES.items()
             if (example / "tables" / kept).is_file()}  # fmt: skip
    summaries = sorted((example / "decode").glob("*/summary.csv"))
    if "decode" not in found and summaries:
        record = json.loads(peaks.read_text()) if peaks else None
        found["decode"] = out / "tables" / "decode.csv"
        write_frame(decode_table([read_table("decode_summary", p) for p in summaries], record),
                    found["decode"])  # fmt: skip
        for name, (kept, per_variant, columns) in DECODE_FILES.items():
            files = {p.parent.name: p.parent / per_variant for p in summaries}
            frames = {v: pd.read_csv(f) for v, f in files.items() if f.is_file()}
            if columns is not None and frames:
                found[name] = out / "tables" / kept
                write_frame(with_variant(frames, columns), found[name])
    if "decode" in found:
        decode = read_table("decode_table", found["decode"])
        for name, derive in (("decode_graphs_pairs", graphs_pairs), ("decode_tp_pairs", tp_pairs)):
            found[name] = out / "tables" / f"{name}.csv"
            write_frame(derive(decode), found[name])
    return found


def draw_figures(located: dict, backends: list[str], out: Path, png: bool) -> list[Path]:
    """Every figure of the registry whose tables the example has, drawn as rule plot draws
    it; returns the spec files."""
    specs = []
    for name, figure in study_figures(backends).items():
        paths = {role: [located.get(p) for p in value] if isinstance(value, tuple)
                 else located.get(value) for role, value in figure.inputs.items()}  # fmt: skip
        if any(not p or (isinstance(p, list) and None in p) for p in paths.values()):
            continue
        files = {kind: out / path.removeprefix("results/")
                 for kind, path in figure_files(name).items()}  # fmt: skip
        if png:
            draw_figure(figure.draw, paths, figure.args, files["html"], files["png"],
                        files["spec"])  # fmt: skip
        else:
            # The spec alone, as save_chart writes it: a PNG costs seconds per figure and the
            # report embeds the spec.
            spec = chart_spec(figure_chart(figure.draw, paths, figure.args))
            text = json.dumps(spec, allow_nan=False, indent=1, ensure_ascii=False)
            write_text(files["spec"], text + "\n")
        specs.append(files["spec"])
    return specs


def render(args: argparse.Namespace) -> Path:
    example, out = args.example, args.out
    if not example.is_dir():
        raise Refused(f"no example folder {example}")
    if out.exists() and not out.is_dir():
        raise Refused(f"--out {out} is a file, not a folder to write into")
    if out.resolve() == example.resolve():
        raise Refused(f"--out {out} is the example itself: its own tables (tables/sweep.csv, "
                      "...) would be overwritten by the rendered ones; give another "
                      "folder")  # fmt: skip
    hardware, hardware_from = borrowed(args.hardware, example / "hardware.json")
    if hardware is None:
        # Without it every sentence would describe a machine without a GPU.
        raise Refused(f"no hardware record {example / 'hardware.json'}: pass --hardware with "
                      "one of the same machine (e.g. "
                      "examples/h200-2026-12-01-kernels/hardware.json)")  # fmt: skip
    peaks, peaks_from = borrowed(args.peaks, example / "peaks.json")
    files = sweep_files(example, args.sweeps)
    if args.baseline and not files:
        raise Refused("--baseline compares sweeps: this example renders none")
    if files and peaks is None:
        raise Refused(f"no peaks record {example / 'peaks.json'} for the sweeps' roofline: "
                      "pass --peaks with one of the same machine")  # fmt: skip
    for sub in ("sweeps", "tables", "figures", "report"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    parts = split_by_backend(files, out) if files else []
    tables = sweep_tables(parts, peaks, out) if parts else {}
    inputs = {"hardware": hardware, "peaks": peaks, **tables}
    inputs.update(kernel_power_tables(example, hardware, out))
    inputs.update(decode_tables(example, peaks, out))
    for name in ("step_model", "device_time"):
        if (example / "tables" / f"{name}.csv").is_file():
            inputs[name] = example / "tables" / f"{name}.csv"
    # The workflow's files, where this example keeps them; examples keep no power timelines.
    located = {
        PEAKS: peaks, SWEEP_TABLE: tables.get("sweep"), SUPPORT_TABLE: tables.get("support"),
        KERNEL_POWER_TABLE: inputs.get("kernel_power"), DECODE_TABLE: inputs.get("decode"),
        KERNEL_POWER_CLASSES_TABLE: inputs.get("kernel_power_classes"),
        EXPERT_M_TABLE: inputs.get("expert_m"), STEP_MODEL_TABLE: inputs.get("step_model"),
        **{BACKEND_SWEEP.format(backend=p.stem): p for p in parts},
    }  # fmt: skip
    backends = sorted(p.stem for p in parts)
    specs = draw_figures(located, backends, out, args.png)
    if args.baseline:
        # A path as given, else relative to the example; load_sweep reads patterns too.
        baseline = args.baseline if Path(args.baseline).exists() else example / args.baseline
        inputs["compare"] = out / "tables" / "compare.csv"
        inputs["compare_spec"] = out / "figures" / "compare.vl.json"
        try:
            write_comparison(baseline, tables["sweep"], inputs["compare"],
                             inputs["compare_spec"])  # fmt: skip
        except (FileNotFoundError, ComparisonRefused) as exc:
            raise Refused(f"--baseline {exc}") from None
    # Every question decided once, and the rankings per size, as rule answers does.
    inputs["answers"] = out / "tables" / "answers.csv"
    study = StudyTables.read(inputs)
    write_answers(study, inputs["answers"])
    if study.sweep is not None:
        inputs["fastest"] = out / "tables" / "fastest.csv"
        write_fastest(study.sweep, study.compare, inputs["fastest"])
    html = out / "report" / "index.html"
    render_report(
        out_html=html,
        template_dir=ROOT / "report" / "templates",
        paths={name: path for name, path in inputs.items() if path is not None},
        spec_paths=specs,
        config_hash=f"example {example.name}",
        figures=figures(backends),
        hardware_from=hardware_from,
        peaks_from=peaks_from,
    )
    return html


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("example", type=Path, help="an examples/ folder")
    parser.add_argument("--sweeps", help=f"pattern of its sweep files (default {DEFAULT_SWEEPS}, "
                        "where it matches any)")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="folder to write into")
    parser.add_argument("--baseline", help="a pattern (in the example) or path to compare with")
    parser.add_argument("--hardware", type=Path,
                        help="hardware.json to use (default: the example's own)")  # fmt: skip
    parser.add_argument("--peaks", type=Path,
                        help="peaks.json to use (default: the example's own)")  # fmt: skip
    parser.add_argument("--png", action="store_true",
                        help="also write each figure's PNG and HTML (slow)")  # fmt: skip
    args = parser.parse_args()
    try:
        print(render(args))
    except Refused as refused:
        print(f"example_report: {refused}", file=sys.stderr)
        return 2
    except DamagedFile as damaged:
        # A record given that is another (--hardware peaks.json), or a damaged table.
        print(f"example_report: damaged input: {damaged}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
