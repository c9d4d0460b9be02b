"""The study's HTML report: one self-contained page rendered with Jinja2.

Everything that came from the machine, a library or a log is escaped (autoescape on); charts
are embedded from their Vega-Lite specs with the vega-embed JavaScript inlined once, and the
small tables as data: URI downloads, so the page opens offline with no network request and
has no link that leaves it: it can be mailed on its own.
"""

from __future__ import annotations

import json
import math
import os
import re
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
from markupsafe import Markup

from . import figure_list
from .core.answer_records import NOT_MEASURED, Answer, answers_from_frame, margin_text
from .core.charts import (
    BACKEND_COLORS,
    EMBED_OPTIONS,
    STATUS_COLORS,
    backend_color,
    distinct_reasons,
    json_for_script,
    vega_bundle,
)
from .core.io import read_json, write_text
from .core.report_cells import (
    DASH,
    clean_text_columns,
    dash,
    display_path,
    embedded_downloads,
    is_missing,
    long_text,
    pack,
    payload_id,
)
from .core.table_registry import read_optional
from .core.verdicts import NOISE_FLOOR
from .device_time import provenance_line
from .instruments.hardware import DISTRIBUTION_ALIASES
from .instruments.serving.decode_load import STEADY_FRACTION
from .stages.decode.decode_report import decode_section
from .stages.kernel_power.kernel_power_report import kernel_power_section
from .stages.sweep.sweep_report import (
    compare_section,
    fastest_rankings,
    fastest_table,
    fmt_cell,
    sweep_table,
)
from .study_answers import QUESTION_NAV, QUESTIONS

TEMPLATE = "index.html.j2"
GOOD = ("ok", "mismatch")
#: The reason a GPU-only point gives on a machine without a GPU: an expected gap there.
NO_CUDA = "no CUDA device"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "chart"


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def load_hardware(path: str | os.PathLike | None) -> dict[str, Any]:
    if path is None or not Path(path).exists():
        return {}
    data = read_json(path)
    return data if isinstance(data, dict) else {}


# ---------------------------------------------------------------------------------------------
# Context builders
# ---------------------------------------------------------------------------------------------


def provenance(hw: dict[str, Any], config_hash: str | None, hardware_from: str | None = None,
               peaks_from: str | None = None) -> dict[str, Any]:  # fmt: skip
    host = hw.get("host") if isinstance(hw.get("host"), dict) else {}
    nvml = hw.get("nvml") if isinstance(hw.get("nvml"), dict) else {}
    gpus = [g for g in (hw.get("gpus") or []) if isinstance(g, dict)]
    commit = hw.get("git_commit")
    dirty = hw.get("git_dirty")
    if is_missing(commit):
        git = DASH
    else:
        git = str(commit) + (" (uncommitted changes)" if dirty else "")
        if dirty is None:
            git += " (dirty state unknown)"
    if nvml.get("available") is True:
        nvml_text = "available"
    elif nvml:
        nvml_text = "not available" + (f": {nvml['error']}" if nvml.get("error") else "")
    else:
        nvml_text = DASH
    hw_hash = hw.get("config_hash")
    machine = [
        ("device", dash(hw.get("device"))),
        ("host", dash(host.get("hostname"))),
        ("CPU", dash(host.get("cpu_model"))),
        ("CPU cores", dash(host.get("cpu_count"))),
        ("memory (GiB)", dash(host.get("memory_gib"))),
        ("OS", dash(host.get("os"))),
        ("Python", dash(host.get("python"))),
        ("NVIDIA driver", dash(hw.get("driver_version"))),
        ("CUDA", dash(hw.get("cuda_version"))),
        ("NVML", nvml_text),
    ]
    collected_at = dash(hw.get("collected_at"))
    if hardware_from:
        # An example that kept no hardware record of its own borrows one of the same machine:
        # its commit and time are that other run's, and are said to be.
        borrowed_note = " (the borrowed hardware record's, not this run's)"
        git += borrowed_note if git != DASH else ""
        collected_at += borrowed_note
    run = [
        ("config hash", dash(config_hash)),
        ("git commit", git),
        ("hardware collected at", collected_at),
    ]
    if not is_missing(hw_hash) and not is_missing(config_hash) and hw_hash != config_hash:
        run.append(("hardware collected under config", hw_hash))
    if hardware_from:
        run.append(("hardware record", f"borrowed from {hardware_from} (same kind of machine)"))
    if peaks_from:
        run.append(("peaks record", f"borrowed from {peaks_from} (same kind of machine)"))
    packages = hw.get("packages") if isinstance(hw.get("packages"), dict) else {}
    gpu_columns = [
        ("index", "#"),
        ("name", "name"),
        ("compute_capability", "compute cap."),
        ("sm_count", "SMs"),
        ("memory_total_mib", "memory (MiB)"),
        ("l2_cache_mib", "L2 (MiB)"),
        ("power_limit_w", "power limit (W)"),
        ("max_sm_clock_mhz", "max SM clock (MHz)"),
        ("max_mem_clock_mhz", "max mem clock (MHz)"),
    ]
    return {
        "machine": machine,
        "run": run,
        "gpu_columns": gpu_columns,
        "gpus": [{k: dash(_gpu_value(k, g.get(k))) for k, _ in gpu_columns} for g in gpus],
        **installed_packages(packages),
        "collected": bool(hw),
        "device": dash(hw.get("device")),
        "config_hash": dash(config_hash),
        "collected_at": collected_at,
    }


#: The GPU table's quantities, shown whole (NVML's 143155.9375 MiB as 143,156).
WHOLE_GPU_COLUMNS = ("memory_total_mib", "l2_cache_mib", "power_limit_w", "max_sm_clock_mhz",
                     "max_mem_clock_mhz")  # fmt: skip


def _gpu_value(key: str, value: Any) -> Any:
    """A GPU record's value as the table shows it: its whole quantities rounded, with
    thousands separated; anything else (a compute capability "9.0", a name) as recorded."""
    if key in WHOLE_GPU_COLUMNS and isinstance(value, int | float) and math.isfinite(value):
        return f"{value:,.0f}"
    return value


def installed_packages(packages: dict[str, Any]) -> dict[str, Any]:
    """The hardware record's packages by their installed distribution names, with their
    versions (``packages``), and those not installed (``not_installed``), leaving out a name
    whose other distribution name of the same import is installed (sgl-kernel beside
    sglang-kernel)."""
    installed = {n: v for n, v in packages.items() if not is_missing(v)}
    absent = sorted(n for n in packages if n not in installed
                    and DISTRIBUTION_ALIASES.get(n) not in installed)  # fmt: skip
    return {"packages": sorted(installed.items()), "not_installed": absent}


def machine_has_gpu(hw: dict[str, Any], sweep: pd.DataFrame) -> bool:
    """Whether the study ran on a machine with a GPU: hardware.json's GPUs or device, else
    (no hardware description) any sweep point timed on a CUDA device."""
    if hw:
        gpus = [g for g in (hw.get("gpus") or []) if isinstance(g, dict)]
        return bool(gpus) or str(hw.get("device") or "").startswith("cuda")
    devices = sweep["device"] if "device" in sweep.columns else pd.Series(dtype=str)
    return any(str(d).startswith("cuda") for d in devices)


def expected_gap(group: pd.DataFrame, has_gpu: bool) -> bool:
    """True when every point of ``group`` that did not run is this machine's expected gap:
    unsupported with "no CUDA device" on a machine without a GPU. Errors, mismatches and
    other reasons, or any of them on a GPU machine, are not expected."""
    if has_gpu or group.empty or "status" not in group.columns:
        return False
    status = group["status"].astype(str)
    bad = group[status != "ok"]
    if bad.empty:
        return False
    errors = bad["error"] if "error" in bad.columns else pd.Series("", index=bad.index)
    return bool(
        (bad["status"].astype(str) == "unsupported").all()
        and errors.fillna("").astype(str).str.contains(NO_CUDA, regex=False).all()
    )


def backend_summaries(sweep: pd.DataFrame, has_gpu: bool = True) -> list[dict[str, Any]]:
    """Per backend: point counts by status, and why nothing ran when nothing did
    (``expected``: only because this machine has no GPU, see :func:`expected_gap`)."""
    if sweep.empty or "backend" not in sweep.columns:
        return []
    out = []
    for backend, group in sweep.groupby("backend", sort=True):
        status = group["status"].astype(str) if "status" in group.columns else pd.Series([])
        counts = {s: int((status == s).sum()) for s in ("ok", "unsupported", "error", "mismatch")}
        good = int(status.isin(GOOD).sum())
        devices = sorted(
            {str(d) for d in group.get("device_name", pd.Series(dtype=str)) if not is_missing(d)}
        )
        versions = sorted(
            {
                str(v)
                for v in group.get("library_version", pd.Series(dtype=str))
                if not is_missing(v)
            }
        )
        out.append(
            {
                "backend": str(backend),
                "color": backend_color(str(backend)),
                "points": len(group),
                "counts": counts,
                "good": good,
                "no_success": good == 0,
                "expected": expected_gap(group, has_gpu),
                "reasons": [long_text(r, 300) for r in distinct_reasons(group, limit=8)],
                "device_name": ", ".join(devices) or DASH,
                "library_version": ", ".join(versions) or DASH,
            }
        )
    return out


def support_rows(support: pd.DataFrame) -> list[dict[str, Any]]:
    if support.empty:
        return []
    df = clean_text_columns(support.copy(), ("backend", "impl", "op", "dtype", "status", "reason"))
    keys = [c for c in ("backend", "impl", "op", "dtype") if c in df.columns]
    df = df.sort_values(keys) if keys else df
    rows = []
    for rec in df.to_dict("records"):
        rows.append(
            {
                "backend": rec.get("backend", ""),
                "impl": rec.get("impl", ""),
                "op": rec.get("op", ""),
                "dtype": rec.get("dtype", ""),
                "status": rec.get("status", "") or "unknown",
                "counts": {
                    k: fmt_cell("M", rec.get(k))
                    for k in ("points", "ok", "unsupported", "error", "mismatch")
                },
                "reason": long_text(rec.get("reason", "")),
            }
        )
    return rows


def packed_table(table: dict[str, Any], name: str) -> dict[str, Any]:
    """A table of thousands of rows (the sweep table's context) with its rows packed for the
    page's script to build (report.js, studyFillPacked): the page stays small, and the rows
    it builds are those the template would have written."""
    kinds = {"status": "status", "error": "long"}
    rows = []
    for row in table["rows"]:
        cells = []
        for (column, _), cell in zip(table["columns"], row["cells"], strict=True):
            kind = kinds.get(column, "text")
            if kind == "long":
                cells.append({"kind": kind, "t": cell["long"]["short"],
                              "full": cell["long"]["full"], "k": cell["key"]})  # fmt: skip
            else:
                cells.append({"kind": kind, "t": cell["text"], "k": cell["key"],
                              "num": cell["num"]})  # fmt: skip
        rows.append({"s": row["status"], "f": row["filter"], "c": cells})
    packed = pack(json.dumps(rows, ensure_ascii=False, separators=(",", ":")))
    return {**table, "n_rows": len(rows), "packed_rows": packed,
            "packed_id": payload_id(name, packed)}  # fmt: skip


def spec_data_note(spec: Any) -> tuple[bool, str]:
    """(has_data, note) of a Vega-Lite spec: its top-level ``usermeta.study`` (charts.py's
    no_data_chart sets ``has_data: false`` and a one-line ``note``); without it, has data."""
    meta = spec.get("usermeta") if isinstance(spec, dict) else None
    study = meta.get("study") if isinstance(meta, dict) else None
    if not isinstance(study, dict) or study.get("has_data", True) is not False:
        return True, ""
    note = study.get("note")
    return False, "" if is_missing(note) else " ".join(str(note).split())


def spec_title(spec: Any) -> str:
    """A spec's title text (its first line where it has several), or ""."""
    title = spec.get("title") if isinstance(spec, dict) else None
    if isinstance(title, dict):
        title = title.get("text")
    if isinstance(title, list):
        title = " ".join(map(str, title))
    return "" if is_missing(title) else str(title)


def chart_entries(spec_paths: Iterable[str | os.PathLike], out_html,
                  figures: dict[str, tuple[str, str | None]]) -> list[dict[str, Any]]:  # fmt: skip
    """One entry per spec file, placed by the study's figure list (``figures``: name ->
    (section, backend), figure_list.py); a spec the list lacks goes to "other". A spec
    without data (:func:`spec_data_note`) is not embedded: its entry carries the note only.
    No entry links to the figure files (the page is mailed alone); ``png`` names the PNG."""
    entries = []
    for path in sorted(map(Path, spec_paths or []), key=lambda p: p.name):
        name = path.name.removesuffix(".json").removesuffix(".vl")
        kind, backend = figures.get(name, ("other", None))
        spec = read_json(path)
        has_data, note = spec_data_note(spec)
        entries.append(
            {
                "name": name,
                "kind": kind,
                "backend": backend,
                "div_id": "chart-" + _slug(name),
                "spec_id": None,
                "has_data": has_data,
                "note": note,
                "title": spec_title(spec) or name,
                # Packed (gzip, base64): the page's script unpacks it (report.js).
                "spec_packed": pack(json_for_script(spec)) if has_data else None,
                "png": display_path(path.with_name(name + ".png"), out_html),
            }
        )
    return entries


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


def environment(template_dir: str | os.PathLike) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["dash"] = dash
    return env


def answer_row(answer: Answer) -> dict[str, Any]:
    """One answer as the report's answer tables show it (every cell from answers.csv)."""
    return {
        "subject": answer.subject,
        "status": answer.status,
        "status_class": answer.status.replace(" ", "-"),
        "verdict": answer.verdict,
        "runner_up": answer.runner_up,
        "sentence": answer.sentence,
        "value": answer.value,
        "margin": margin_text(answer),
        "basis": answer.basis,
        "evidence": answer.evidence,
        "why": answer.why,
        "points": answer.points,
    }


def questions_context(answers: list[Answer]) -> list[dict[str, Any]]:
    """Per question, in the report's order: its title, navigation name, anchor, every answer
    row and the lead rows of the first screen (a question with no lead row leads with its
    first row), what was measured before what was not: the default's "CUDA graphs: not
    measured here" stood above question 5's answered throughput and J/token rows."""
    out = []
    for question, title in QUESTIONS.items():
        rows = [a for a in answers if a.question == question]
        lead = [a for a in rows if a.lead] or rows[:1]
        lead.sort(key=lambda a: a.status == NOT_MEASURED)
        nav, anchor, short = QUESTION_NAV[question]
        out.append({
            "question": question, "title": title, "nav": nav, "anchor": anchor, "short": short,
            "rows": [answer_row(a) for a in rows], "lead": [answer_row(a) for a in lead],
        })  # fmt: skip
    return out


#: The report's inputs, by the names of rules/report.smk's REPORT_TABLES (and the
#: comparison's, when a baseline is configured); a missing one is None.
REPORT_INPUTS = ("hardware", "peaks", "answers", "sweep", "support", "fastest", "kernel_power",
                 "kernel_power_classes", "decode", "expert_m", "decode_recorder",
                 "decode_crosscheck", "decode_graphs_pairs", "decode_tp_pairs", "step_model",
                 "compare", "compare_spec", "device_time")  # fmt: skip
#: The stages' report sections: each reads its tables from the inputs, None when absent.
SECTIONS = {"kernel_power": kernel_power_section, "decode": decode_section,
            "compare": compare_section}  # fmt: skip


def build_context(
    paths: dict[str, Any],
    spec_paths,
    out_html,
    config_hash,
    config_yaml_text=None,
    git: dict | None = None,
    figures: dict | None = None,
    hardware_from: str | None = None,
    peaks_from: str | None = None,
) -> dict[str, Any]:
    """``paths``: the report's inputs by name (:data:`REPORT_INPUTS`; absent ones None).
    ``figures``: the study's figure list (figure_list.figures, as the report rule passes
    it); without it, the list for the backends the sweep table holds. A comparison
    (``compare``, ``compare_spec``: a baseline was configured) adds "Before and after"."""
    unknown = sorted(set(paths) - set(REPORT_INPUTS))
    if unknown:
        raise ValueError(f"unknown report inputs {unknown}; known: {', '.join(REPORT_INPUTS)}")
    paths = {name: paths.get(name) for name in REPORT_INPUTS}
    hardware_json, sweep_csv, support_csv = paths["hardware"], paths["sweep"], paths["support"]
    hw = load_hardware(hardware_json)
    if git:
        # The commit the report is rendered from, not the one hardware.json was collected at.
        hw = {**hw, **git}
    sweep = clean_text_columns(
        read_optional(sweep_csv),
        ("backend", "impl", "op", "dtype", "shape", "status", "error", "device_name"),
    )
    support = read_optional(support_csv)
    if figures is None:
        figures = figure_list.figures(
            sorted(sweep["backend"].dropna().unique()) if "backend" in sweep.columns else []
        )
    charts = chart_entries(spec_paths, out_html, figures)
    if paths["compare_spec"] is not None:
        charts += chart_entries([paths["compare_spec"]], out_html, {"compare": ("compare", None)})
    has_gpu = machine_has_gpu(hw, sweep)
    # Every question's answers as the answers rule decided them: nothing is decided here.
    questions = questions_context(answers_from_frame(read_optional(paths["answers"])))
    summaries = backend_summaries(sweep, has_gpu)
    latency = {c["backend"]: c for c in charts if c["kind"] == "latency"}
    backends = sorted(set(latency) | {s["backend"] for s in summaries})
    by_backend = {s["backend"]: s for s in summaries}
    sections = {name: build(paths, charts, out_html) for name, build in SECTIONS.items()}
    kernel_power, decode = sections["kernel_power"], sections["decode"]
    # The rankings per size as rule answers wrote them (an older folder: ranked here).
    fastest = fastest_rankings(paths["fastest"], sweep)
    # The kernel-power and decode tables are offered in their own sections.
    downloads = embedded_downloads([sweep_csv, support_csv, hardware_json], out_html)
    return {
        "title": "GEMM performance study",
        "prov": {
            **provenance(hw, config_hash, hardware_from, peaks_from),
            "device_time": provenance_line(read_optional(paths["device_time"])),
        },
        "config_yaml": config_yaml_text,
        "summaries": summaries,
        "support_chart": next((c for c in charts if c["kind"] == "support"), None),
        "support_rows": support_rows(support),
        "latency": [
            {"backend": b, "chart": latency.get(b), "summary": by_backend.get(b)} for b in backends
        ],
        # Power and decode figures sit in their own sections when those are rendered, else
        # with the others.
        "other_charts": [
            c
            for c in charts
            if c["kind"] == "other"
            or (c["kind"] == "power" and kernel_power is None)
            or (c["kind"] in ("decode", "experts") and decode is None)
        ],
        "kernel_power": kernel_power,
        "decode": decode,
        "compare": sections["compare"],
        "questions": questions,
        # One chart per question on the first screen (figure_list's first_screen), drawn
        # again there: its own section keeps it too.
        "first_charts": [
            {
                **c,
                "div_id": c["div_id"] + "-first",
                "spec_id": c["div_id"],
                "anchor": QUESTION_NAV[q][1],
                "question_label": QUESTION_NAV[q][0],
            }
            for name, q in figure_list.first_screen().items()
            for c in charts
            if c["name"] == name and c["has_data"]
        ],
        "answers": {q["question"]: q for q in questions},
        "noise_floor": NOISE_FLOOR,
        "charts": charts,
        "fastest": fastest_table(fastest),
        "sweep": packed_table(sweep_table(sweep), "sweep-rows"),
        "downloads": downloads,
        "has_gpu": has_gpu,
        "drawn_charts": [c for c in charts if c["has_data"]],
        "vega_js": Markup(vega_bundle()) if any(c["has_data"] for c in charts) else None,
        "embed_options": Markup(json_for_script(EMBED_OPTIONS)),
        "status_colors": STATUS_COLORS,
        "backend_colors": BACKEND_COLORS,
        "steady_fraction": STEADY_FRACTION,
    }


class TemplateProblem(ValueError):
    """A report template that does not render: one line naming the template, its line and
    what is wrong."""


def _template_problem(exc: jinja2.TemplateError, template_dir) -> TemplateProblem:
    """One line for a template's error: its file (relative to the templates), line and
    message; a runtime error (an undefined name) is placed by the template frame it rose in."""
    name, line = getattr(exc, "name", None) or getattr(exc, "filename", None), None
    line = getattr(exc, "lineno", None)
    if line is None:
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if f.filename.endswith(".j2")]  # fmt: skip
        if frames:
            name, line = frames[-1].filename, frames[-1].lineno
    if name and Path(name).is_absolute():
        try:
            name = Path(name).relative_to(Path(template_dir).resolve()).as_posix()
        except ValueError:
            name = Path(name).name
    where = f"report template {name or '?'}" + (f", line {line}" if line else "")
    message = " ".join(str(getattr(exc, "message", None) or exc).split())
    return TemplateProblem(f"{where}: {message}")


#: Beside the report, the last report that rendered: Snakemake deletes a job's output before
#: the job runs, so a failed or interrupted re-render would otherwise leave no report at all.
LAST_GOOD = "last-good.html"


def render_report(out_html: str | os.PathLike, template_dir: str | os.PathLike,
                  **inputs) -> str:  # fmt: skip
    """Render the report to ``out_html`` (atomically), keep a copy as :data:`LAST_GOOD` beside
    it, and return the HTML text. ``inputs`` are :func:`build_context`'s: the tables, figure
    specs and provenance. A template that does not render is :class:`TemplateProblem`."""
    context = build_context(out_html=out_html, **inputs)
    try:
        html = environment(template_dir).get_template(TEMPLATE).render(**context)
    except jinja2.TemplateError as exc:
        raise _template_problem(exc, template_dir) from None
    write_text(out_html, html)
    write_text(Path(out_html).with_name(LAST_GOOD), html)
    return html
