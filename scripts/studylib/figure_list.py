"""Every figure of the study, once: its name, the tables it is drawn from (paths by role), the
report section that shows it, its caption and the function that draws it. ``rules/figures.smk``
builds rule ``plot`` (one job per figure) and the figure outputs (``FIGURE_SPECS``) from it,
``tools/example_report.py`` draws through it, and the report places each figure by it: a
figure is added or moved here and nowhere else.

A drawing function takes one keyword per input role (the table read: a frame, the peaks a
dict, a list of paths their frames concatenated; figure_drawing.py) and the figure's ``args``,
and returns a chart. It is named as ``"module:function"`` so that this module imports no
plotting library: the Snakefile reads it on every run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .core.io import write_text

#: The report section of the per-backend latency figures (``latency_<backend>``).
LATENCY = "latency"
SWEEP_TABLE = "results/tables/sweep.csv"
SUPPORT_TABLE = "results/tables/support.csv"
KERNEL_POWER_TABLE = "results/tables/kernel_power.csv"
KERNEL_POWER_CLASSES_TABLE = "results/tables/kernel_power_classes.csv"
DECODE_TABLE = "results/tables/decode.csv"
EXPERT_M_TABLE = "results/tables/expert_m.csv"
STEP_MODEL_TABLE = "results/tables/step_model.csv"
PEAKS = "results/peaks.json"
BACKEND_SWEEP = "results/sweeps/{backend}.parquet"
BACKEND_TIMELINE = "results/kernel_power/{backend}_timeline.parquet"
FIGURES_DIR = "results/figures"
CAPTIONS = "report/captions"


@dataclass(frozen=True)
class Figure:
    """One figure: results/figures/<name>.html, .png and .vl.json."""

    name: str
    #: The report section that shows it (report.py places it by this).
    section: str
    #: role -> path, or a tuple of paths (read as one frame); the drawing function's keywords.
    inputs: dict[str, str | tuple[str, ...]]
    #: ``"module:function"``: tables in (one keyword per role, then ``args``), chart out.
    draw: str
    #: Its file under report/captions/, relative to the repository (a Jinja template, as
    #: Snakemake renders captions: ``snakemake.wildcards.figure`` names the figure).
    caption: str
    #: The Snakemake report's category, subcategory and ``figure`` label.
    category: str
    subcategory: str | None = None
    label: str = ""
    #: Constant keywords of the drawing function (e.g. the backend of a latency figure).
    args: dict[str, str] = field(default_factory=dict)
    #: Files it is redrawn after but does not read (inputs of its job, not of the function).
    after: tuple[str, ...] = ()
    #: The backend of a per-backend figure, else None.
    backend: str | None = None
    #: The question whose answer this figure shows on the report's first screen (one per
    #: question), else None.
    first_screen: int | None = None

    @property
    def labels(self) -> dict[str, str]:
        """Its labels in the Snakemake report."""
        return (
            {"backend": self.backend, "figure": self.label}
            if self.backend
            else {"figure": self.label}
        )


SWEEPS, POWER, DECODE = "Kernel sweeps", "Kernel power", "Decode power"
SWEEP_FIGURES = "studylib.stages.sweep.sweep_figures"
SWEEP_TABLE_FIGURES = "studylib.stages.sweep.sweep_table_figures"
SWEEP_ANSWER_FIGURES = "studylib.stages.sweep.sweep_answer_figures"
#: The report sections of questions 1 and 2's charts (sections/kernels.html.j2 shows them).
FASTEST, BOUND = "fastest", "bound"
POWER_FIGURES = "studylib.stages.kernel_power.kernel_power_figures"
DECODE_FIGURES = "studylib.stages.decode.decode_figures"
DECODE_VIEW_FIGURES = "studylib.stages.decode.decode_view_figures"
EXPERT_FIGURES = "studylib.stages.decode.expert_figures"
STEP_MODEL_FIGURE = "studylib.stages.step_model.step_model_figure"


def _declared(backends, power_backends) -> tuple[Figure, ...]:
    """Every figure of a study with these backends (and these with kernel-power points), in
    the report's order; each backend's latency figure last."""
    timelines = tuple(BACKEND_TIMELINE.format(backend=b) for b in power_backends)
    # The windows with their group, limit and class (the aggregate rule classifies them once).
    windows = {"windows": KERNEL_POWER_CLASSES_TABLE}
    decode = {"decode": DECODE_TABLE}
    return (
        Figure("backends", FASTEST, {"sweep": SWEEP_TABLE},
               f"{SWEEP_ANSWER_FIGURES}:backends_chart", f"{CAPTIONS}/backends.rst",
               SWEEPS, "Across backends", "backends", first_screen=1),
        Figure("bound", BOUND, {"sweep": SWEEP_TABLE},
               f"{SWEEP_ANSWER_FIGURES}:bound_chart", f"{CAPTIONS}/bound.rst",
               SWEEPS, "Across backends", "time over floor", first_screen=2),
        Figure("support", "support", {"support": SUPPORT_TABLE},
               f"{SWEEP_TABLE_FIGURES}:support_chart", f"{CAPTIONS}/support.rst",
               SWEEPS, "Support matrix", "support matrix"),
        Figure("efficiency", "other", {"sweep": SWEEP_TABLE},
               f"{SWEEP_TABLE_FIGURES}:efficiency_chart", f"{CAPTIONS}/sweep_figure.rst",
               SWEEPS, "Across backends", "efficiency"),
        Figure("launch_overhead", "other", {"sweep": SWEEP_TABLE},
               f"{SWEEP_TABLE_FIGURES}:launch_overhead_chart", f"{CAPTIONS}/sweep_figure.rst",
               SWEEPS, "Across backends", "launch_overhead"),
        Figure("power_verdicts", "power", windows,
               f"{POWER_FIGURES}:power_verdicts_chart", f"{CAPTIONS}/power_figure.rst",
               POWER, label="power per group of loops", first_screen=3),
        Figure("power_timeline", "power", {**windows, "timeline": timelines},
               f"{POWER_FIGURES}:power_timeline_chart", f"{CAPTIONS}/power_figure.rst",
               POWER, label="power timeline"),
        # Not drawn from the timelines, but redrawn with them (as it always was).
        Figure("power_vs_util", "power", windows,
               f"{POWER_FIGURES}:power_vs_util_chart", f"{CAPTIONS}/power_figure.rst",
               POWER, label="power vs_util", after=timelines),
        Figure("decode", "decode", decode,
               f"{DECODE_FIGURES}:decode_chart", f"{CAPTIONS}/decode.rst",
               DECODE, label="decode power vs concurrency", first_screen=5),
        Figure("decode_latency", "decode", decode,
               f"{DECODE_VIEW_FIGURES}:decode_latency_chart", f"{CAPTIONS}/decode_views.rst",
               DECODE, label="decode latency"),
        Figure("decode_frontier", "decode", decode,
               f"{DECODE_VIEW_FIGURES}:decode_frontier_chart", f"{CAPTIONS}/decode_views.rst",
               DECODE, label="decode frontier"),
        Figure("step_model", "decode", {"step_model": STEP_MODEL_TABLE},
               f"{STEP_MODEL_FIGURE}:step_chart", f"{CAPTIONS}/step_model.rst",
               DECODE, label="decode step model", first_screen=6),
        Figure("experts", "experts", {"expert_m": EXPERT_M_TABLE},
               f"{EXPERT_FIGURES}:experts_chart", f"{CAPTIONS}/experts.rst",
               DECODE, label="per-expert M", first_screen=4),
        *(
            Figure(f"latency_{b}", LATENCY,
                   {"sweep": BACKEND_SWEEP.format(backend=b), "peaks": PEAKS},
                   f"{SWEEP_FIGURES}:latency_figure", f"{CAPTIONS}/latency.rst",
                   SWEEPS, "Latency vs M", "latency vs M", args={"backend": b}, backend=b)
            for b in backends
        ),
    )  # fmt: skip


def study_figures(backends, power_backends=()) -> dict[str, Figure]:
    """name -> :class:`Figure` of every figure of a study with these backends (and these
    with kernel-power points: the power figures read their timelines), in the report's order."""
    return {figure.name: figure for figure in _declared(backends, power_backends)}


def figures(backends) -> dict[str, tuple[str, str | None]]:
    """name -> (section, backend or None) of every figure of a study with these backends:
    where the report places each."""
    return {name: (f.section, f.backend) for name, f in study_figures(backends).items()}


def first_screen() -> dict[str, int]:
    """name -> question of the figures the report's first screen shows, in question order."""
    chosen = [(f.first_screen, f.name) for f in _declared((), ()) if f.first_screen]
    return {name: q for q, name in sorted(chosen)}


def figure_files(name: str) -> dict[str, str]:
    """A figure's three files by kind (html, png, spec)."""
    base = f"{FIGURES_DIR}/{name}"
    return {"html": f"{base}.html", "png": f"{base}.png", "spec": f"{base}.vl.json"}


def spec_path(name: str) -> str:
    """Where a figure's Vega-Lite spec is written (its HTML and PNG sit beside it)."""
    return figure_files(name)["spec"]


def in_section(section: str) -> tuple[str, ...]:
    """The names of the figures a section shows, in order (the per-backend ones aside)."""
    return tuple(f.name for f in _declared((), ()) if f.section == section)


def caption_template(figures: Iterable[Figure], root: str | os.PathLike) -> str:
    """One caption template for rule ``plot`` (Snakemake takes one caption file per rule):
    each figure's caption file under ``root``, shown for that figure alone. With Snakemake's
    ``trim_blocks``, a figure's caption renders exactly as its own file would."""
    names: dict[str, list[str]] = {}
    for figure in figures:
        names.setdefault(figure.caption, []).append(figure.name)
    parts = []
    for caption, shown in names.items():
        text = (Path(root) / caption).read_text(encoding="utf-8")
        parts.append(f"{{% if snakemake.wildcards.figure in {shown!r} %}}\n{text}"
                     f"{'' if text.endswith(chr(10)) else chr(10)}{{% endif %}}\n")  # fmt: skip
    return "".join(parts)


def write_caption_template(figures: Iterable[Figure], root, path: str | os.PathLike) -> Path:
    """:func:`caption_template` at ``path`` (written atomically, and only when it changed):
    the one caption file of rule ``plot``, read where Snakemake writes its report."""
    text, target = caption_template(figures, root), Path(path).absolute()
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        write_text(target, text)
    return target
