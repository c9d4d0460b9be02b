"""Render the study's report from a committed example's tables (no GPU, no Snakemake).

    python3 tools/example_report.py examples/h200-2026-12-01-kernels \\
        --sweeps 'sweeps/run6_*.csv' --out /tmp/h200-report [--baseline 'sweeps/*.csv']

Reads the example's sweep CSVs (the pattern, relative to the example), its ``peaks.json``,
``hardware.json`` (or ``--hardware``: an example that kept none takes the record of the same
machine from another) and, where present, its kernel-power windows
(``kernel_power/windows.csv``, else ``tables/kernel_power.csv``), ``tables/decode.csv``,
``tables/expert_m.csv`` and ``tables/step_model.csv``; writes under OUT the tables
(``tables/sweep.csv``, ``support.csv``), every figure of the registry
(``studylib/figure_list.py``) whose tables the example has, drawn by the functions rule
``plot`` calls (examples keep no power timelines: no timeline figure), and
``report/index.html``, as the workflow's own steps would. ``--baseline`` (a pattern in the
example, or a path) adds "Before and after". Prints the report's path.
"""

import argparse
import glob
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from studylib.core.io import write_frame  # noqa: E402
from studylib.core.table_registry import read_optional  # noqa: E402
from studylib.figure_drawing import draw_figure  # noqa: E402
from studylib.figure_list import (  # noqa: E402
    BACKEND_SWEEP,
    DECODE_TABLE,
    EXPERT_M_TABLE,
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
from studylib.stages.decode.decode_judgements import graphs_pairs, tp_pairs  # noqa: E402
from studylib.stages.kernel_power.window_classes import classify_windows  # noqa: E402
from studylib.stages.sweep.sweep_aggregate import aggregate  # noqa: E402
from studylib.stages.sweep.sweep_compare import write_comparison  # noqa: E402
from studylib.stages.sweep.sweep_ranking import write_fastest  # noqa: E402
from studylib.study_answers import write_answers  # noqa: E402
from studylib.study_tables import StudyTables  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("example", type=Path, help="an examples/ folder")
    parser.add_argument("--sweeps", default="sweeps/*.csv", help="pattern of its sweep files")
    parser.add_argument("--out", type=Path, required=True, help="folder to write into")
    parser.add_argument("--baseline", help="a pattern (in the example) or path to compare with")
    parser.add_argument("--hardware", type=Path,
                        help="hardware.json to use (default: the example's own)")  # fmt: skip
    args = parser.parse_args()

    example, out = args.example, args.out
    hardware = args.hardware or example / "hardware.json"
    if not hardware.is_file():
        # Without it every sentence would describe a machine without a GPU.
        print(f"example_report: no hardware record {hardware}: pass --hardware with one of "
              "the same machine (e.g. examples/h200-2026-12-01-kernels/hardware.json)",
              file=sys.stderr)  # fmt: skip
        return 2
    files = sorted(glob.glob(str(example / args.sweeps)))
    if not files:
        print(f"example_report: {example / args.sweeps} matches no file", file=sys.stderr)
        return 2
    for sub in ("sweeps", "tables", "figures", "report"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    rows = pd.concat([pd.read_csv(f) for f in files], ignore_index=True)
    parts = []
    for backend, frame in rows.groupby("backend"):
        path = out / "sweeps" / f"{backend}.parquet"
        frame.to_parquet(path, index=False)
        parts.append(path)
    peaks = example / "peaks.json"
    tables = {name: out / "tables" / f"{name}.csv" for name in ("sweep", "support")}
    aggregate(parts, peaks, tables["sweep"], tables["support"])
    inputs = {"hardware": hardware, "peaks": peaks, **tables}
    windows = next((w for w in (example / "kernel_power" / "windows.csv",
                                example / "tables" / "kernel_power.csv") if w.is_file()),
                   None)  # fmt: skip
    if windows is not None:
        inputs["kernel_power"] = windows
        # Classified as the aggregate rule does (one rule: window_classes).
        inputs["kernel_power_classes"] = out / "tables" / "kernel_power_classes.csv"
        write_frame(classify_windows(read_optional(windows)), inputs["kernel_power_classes"])
    for name, file in (("decode", "decode.csv"), ("expert_m", "expert_m.csv"),
                       ("step_model", "step_model.csv"), ("decode_recorder", "decode_recorder.csv"),
                       ("decode_crosscheck", "decode_crosscheck.csv")):  # fmt: skip
        if (example / "tables" / file).is_file():
            inputs[name] = example / "tables" / file
    if "decode" in inputs:
        # The pairs as the aggregate rule derives them.
        decode = read_optional(inputs["decode"])
        for name, derive in (("decode_graphs_pairs", graphs_pairs), ("decode_tp_pairs", tp_pairs)):
            inputs[name] = out / "tables" / f"{name}.csv"
            write_frame(derive(decode), inputs[name])
    # The workflow's files, where this example keeps them; examples keep no power timelines.
    located = {
        PEAKS: peaks, SWEEP_TABLE: tables["sweep"], SUPPORT_TABLE: tables["support"],
        KERNEL_POWER_TABLE: inputs.get("kernel_power"), DECODE_TABLE: inputs.get("decode"),
        EXPERT_M_TABLE: inputs.get("expert_m"), STEP_MODEL_TABLE: inputs.get("step_model"),
        **{BACKEND_SWEEP.format(backend=p.stem): p for p in parts},
    }  # fmt: skip
    specs = []
    # Every figure of the registry whose tables the example has, drawn as rule plot draws it.
    for name, figure in study_figures(sorted(p.stem for p in parts)).items():
        paths = {role: [located.get(p) for p in value] if isinstance(value, tuple)
                 else located.get(value) for role, value in figure.inputs.items()}  # fmt: skip
        if any(not p or (isinstance(p, list) and None in p) for p in paths.values()):
            continue
        files = {kind: out / path.removeprefix("results/")
                 for kind, path in figure_files(name).items()}  # fmt: skip
        draw_figure(figure.draw, paths, figure.args, files["html"], files["png"], files["spec"])
        specs.append(files["spec"])
    compare = {}
    if args.baseline:
        # A path as given, else relative to the example; load_sweep reads patterns too.
        baseline = args.baseline if Path(args.baseline).exists() else example / args.baseline
        compare = {"compare": out / "tables" / "compare.csv",
                   "compare_spec": out / "figures" / "compare.vl.json"}  # fmt: skip
        write_comparison(baseline, tables["sweep"], compare["compare"],
                         compare["compare_spec"])  # fmt: skip
    # Every question decided once, and the rankings per size, as rule answers does.
    inputs["answers"] = out / "tables" / "answers.csv"
    inputs["fastest"] = out / "tables" / "fastest.csv"
    study = StudyTables.read({**inputs, **compare})
    write_answers(study, inputs["answers"])
    write_fastest(study.sweep, study.compare, inputs["fastest"])
    html = out / "report" / "index.html"
    render_report(
        out_html=html,
        template_dir=ROOT / "report" / "templates",
        paths={**inputs, **compare},
        spec_paths=specs,
        config_hash=f"example {example.name}",
        figures=figures(sorted(p.stem for p in parts)),
    )
    print(html)
    return 0


if __name__ == "__main__":
    sys.exit(main())
