"""The study's HTML report: one self-contained page rendered with Jinja2.

Everything that came from the machine, a library or a log is escaped (autoescape on); charts
are embedded from their Vega-Lite specs with the vega-embed JavaScript inlined once, so the
page opens offline with no network request.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
from markupsafe import Markup

from .charts import (
    BACKEND_COLORS,
    EMBED_OPTIONS,
    STATUS_COLORS,
    backend_color,
    distinct_reasons,
    json_for_script,
    vega_bundle,
)
from .decode_figures import graphs_label
from .findings import QUESTIONS, dummy_weights_note, graphs_pairs, tp_pairs
from .findings.decode import invalid_note
from .findings.decode import power_sources as decode_power_sources
from .findings.sweep import fastest_per_size
from .findings.windows import CLASSES, CLASSIFICATION_RULE, classify_windows
from .io import read_json, write_text
from .power_figures import CLASS_COLORS
from .tables import SHOWN, Column, fmt_us, read_optional, shown

TEMPLATE = "index.html.j2"
DASH = "—"
LONG_TEXT = 120

#: Sweep table columns always shown; the others only when they hold data.
ALWAYS_SHOWN = {"backend", "impl", "op", "dtype", "shape", "M", "N", "K", "status", "eager_us"}
GOOD = ("ok", "mismatch")

#: Figure specs shown in the kernel-power section (when it is rendered), in this order.
POWER_FIGURES: tuple[str, ...] = ("power_timeline", "power_vs_util")
#: Figure specs shown in the decode-power section (when it is rendered), in this order; the
#: expert figure (question 4) sits in its own subsection.
DECODE_FIGURES: tuple[str, ...] = ("decode", "decode_latency", "decode_frontier", "experts")
EXPERT_FIGURES: tuple[str, ...] = ("experts",)
#: Decode table columns shown only when the table has them (older tables lack them).
DECODE_OPTIONAL = frozenset(
    {"weights", "cuda_graphs", "hbm_floor_ms", "tpot_over_floor", "idle_w_per_gpu",
     "j_per_token_net", "step_gb", "tok_s_over_c_tpot", "decoding_share", "load_cpu_pct",
     "first_error", "w_gpu_min", "w_gpu_median", "w_gpu_max", "ep"}
)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Small formatting helpers
# ---------------------------------------------------------------------------------------------


def is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    if isinstance(value, str) and value.strip() == "":
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def dash(value: Any) -> Any:
    """The value, or an em dash when it is missing."""
    return DASH if is_missing(value) else value


def _sweep_column(column: str) -> Column:
    return SHOWN["sweep_table"].get(column) or Column(column, ".4g")


def _parse_cell(column: str, value: Any) -> float | str | None:
    """None when missing; text for text columns and non-numbers; else the number."""
    if is_missing(value):
        return None
    if _sweep_column(column).fmt is None:
        return str(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def fmt_cell(column: str, value: Any) -> str:
    """Readable text for a sweep-table cell ('' when missing)."""
    v = _parse_cell(column, value)
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if column == "efficiency" and v > 2:  # not a fraction: shown plainly
        return f"{v:.2f}"
    return _sweep_column(column).text(v)


def sort_key(column: str, value: Any) -> str:
    """Value used by the table's client-side sort (numbers as plain decimals)."""
    v = _parse_cell(column, value)
    if v is None:
        return ""
    return v if isinstance(v, str) else repr(v)


def long_text(text: Any, limit: int = LONG_TEXT) -> dict[str, Any]:
    """A message split for display: short head, and the full text when it is long."""
    full = "" if is_missing(text) else str(text)
    one_line = " ".join(full.split())
    if len(one_line) <= limit and "\n" not in full.strip():
        return {"short": one_line, "full": None}
    return {"short": one_line[: limit - 1] + "…", "full": full}


def relative_link(target: str | os.PathLike, out_html: str | os.PathLike) -> str:
    """Path of ``target`` relative to the report's folder, with forward slashes."""
    base = Path(out_html).resolve().parent
    return Path(os.path.relpath(Path(target).resolve(), base)).as_posix()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "chart"


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def _clean_text_columns(df: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    for column in columns:
        if column in df.columns:
            df[column] = df[column].fillna("").astype(str)
    return df


def load_hardware(path: str | os.PathLike | None) -> dict[str, Any]:
    if path is None or not Path(path).exists():
        return {}
    data = read_json(path)
    return data if isinstance(data, dict) else {}


# ---------------------------------------------------------------------------------------------
# Context builders
# ---------------------------------------------------------------------------------------------


def provenance(hw: dict[str, Any], config_hash: str | None) -> dict[str, Any]:
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
    run = [
        ("config hash", dash(config_hash)),
        ("git commit", git),
        ("hardware collected at", dash(hw.get("collected_at"))),
    ]
    if not is_missing(hw_hash) and not is_missing(config_hash) and hw_hash != config_hash:
        run.append(("hardware collected under config", hw_hash))
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
        "gpus": [{k: dash(g.get(k)) for k, _ in gpu_columns} for g in gpus],
        "packages": [(name, dash(v)) for name, v in sorted(packages.items())],
        "collected": bool(hw),
        "device": dash(hw.get("device")),
        "config_hash": dash(config_hash),
        "collected_at": dash(hw.get("collected_at")),
    }


def backend_summaries(sweep: pd.DataFrame) -> list[dict[str, Any]]:
    """Per backend: point counts by status, and why nothing ran when nothing did."""
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
                "reasons": [long_text(r, 300) for r in distinct_reasons(group, limit=8)],
                "device_name": ", ".join(devices) or DASH,
                "library_version": ", ".join(versions) or DASH,
            }
        )
    return out


def support_rows(support: pd.DataFrame) -> list[dict[str, Any]]:
    if support.empty:
        return []
    df = _clean_text_columns(support.copy(), ("backend", "impl", "op", "dtype", "status", "reason"))
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


def fastest_table(sweep: pd.DataFrame) -> dict[str, Any] | None:
    """The fastest implementations per (dtype, shape, M), as findings rank them, laid out as
    a pivot: the ranking time in each cell, eager and graph beside it."""
    ranked = fastest_per_size(sweep)
    if ranked is None:
        return None
    ms = ranked["ms"]
    rows = []
    for row in ranked["rows"]:
        cells = []
        for m in ms:
            cell = row["cells"].get(m)
            if cell is None:
                cells.append(None)
                continue
            beside = [f"{mode} {fmt_us(cell[f'{mode}_us'], False)}" for mode in ("graph", "eager")
                      if mode != row["basis"] and not math.isnan(cell[f"{mode}_us"])]  # fmt: skip
            cells.append({"who": " = ".join(cell["who"]), "op": cell["op"],
                          "us": fmt_us(cell["us"], False), "beside": ", ".join(beside),
                          "color": backend_color(cell["backend"])})  # fmt: skip
        rows.append({"dtype": row["dtype"], "shape": row["shape"], "basis": row["basis"],
                     "contenders": row["contenders"], "cells": cells})  # fmt: skip
    return {"ms": ms, "rows": rows, "rule": ranked["rule"]}


def sweep_table(sweep: pd.DataFrame) -> dict[str, Any]:
    if sweep.empty:
        return {"columns": [], "rows": []}
    columns = [
        (c, col.label)
        for c, col in shown("sweep_table")
        if c in sweep.columns and (c in ALWAYS_SHOWN or sweep[c].replace("", pd.NA).notna().any())
    ]
    rows = []
    for rec in sweep.to_dict("records"):
        cells = []
        for column, _ in columns:
            value = rec.get(column)
            cell = {"key": sort_key(column, value), "num": _sweep_column(column).fmt is not None}
            if column == "error":
                cell["long"] = long_text(value, 80)
            else:
                cell["text"] = fmt_cell(column, value)
            cells.append(cell)
        rows.append({"status": str(rec.get("status", "")), "cells": cells})
    return {"columns": columns, "rows": rows}


def _kp_cell(value: Any, col: Column) -> dict[str, Any]:
    if is_missing(value):
        return {"text": "", "key": "", "num": col.fmt is not None}
    if col.fmt is None:
        return {"text": str(value), "key": str(value), "num": False}
    try:
        v = float(value)
    except (TypeError, ValueError):
        return {"text": str(value), "key": str(value), "num": False}
    return {"text": col.text(v), "key": repr(v), "num": True}


def kernel_power_section(
    path: str | os.PathLike | None, charts: list[dict[str, Any]], out_html
) -> dict[str, Any] | None:
    """The kernel-power section's context, or None when no table was given."""
    if path is None:
        return None
    windows = read_optional(path)
    columns = shown("kernel_power_table")
    if not windows.empty and "gpu" in windows.columns:
        if pd.to_numeric(windows["gpu"], errors="coerce").nunique() <= 1:
            columns = [c for c in columns if c[0] != "gpu"]
    rows = []
    no_power: list[str] = []
    sources: list[str] = []
    if not windows.empty:
        windows = _clean_text_columns(
            classify_windows(windows),
            ("backend", "impl", "op", "dtype", "shape", "mode", "throttle_reasons", "status")
            + ("error", "power_source", "why", "class"),
        )
        for rec in windows.to_dict("records"):
            cells = []
            for column, col in columns:
                value = rec.get(column)
                if column == "error":
                    cells.append({"long": long_text(value, 80), "key": str(value or "")})
                else:
                    cells.append(_kp_cell(value, col))
            rows.append(
                {"cells": cells, "class": rec["class"], "status": str(rec.get("status", ""))}
            )
        sources = sorted({s or "none" for s in windows["power_source"]})
        if "backend" in windows.columns:
            by_backend = windows.groupby("backend")["power_source"].agg(
                lambda s: {v or "none" for v in s}
            )
            no_power = sorted(b for b, v in by_backend.items() if v == {"none"})
    counts = {}
    for row in rows:
        counts[row["class"]] = counts.get(row["class"], 0) + 1
    return {
        "rule": list(CLASSIFICATION_RULE),
        "columns": [(c, col.label) for c, col in columns],
        "rows": rows,
        "class_counts": [
            (c, counts[c], CLASS_COLORS.get(c, "#ccc"))
            for c in sorted(counts, key=lambda c: CLASSES.index(c) if c in CLASSES else 99)
        ],
        "class_colors": CLASS_COLORS,
        "sources": sources,
        "no_nvml": bool(rows) and sources == ["none"],
        "no_power_backends": no_power if sources != ["none"] else [],
        "charts": sorted(
            (c for c in charts if c["kind"] == "power"),
            key=lambda c: POWER_FIGURES.index(c["name"]),
        ),
        "link": relative_link(path, out_html),
    }


def _table(frame: pd.DataFrame, name: str) -> dict[str, Any]:
    """A small table's context: its columns (those present) and formatted cells per row."""
    columns = [(c, col) for c, col in shown(name) if c in frame.columns]
    rows = [[_kp_cell(rec.get(c), col) for c, col in columns] for rec in frame.to_dict("records")]
    return {"columns": [col.label for _, col in columns], "rows": rows}


def decode_section(
    path: str | os.PathLike | None,
    charts: list[dict[str, Any]],
    out_html,
    expert_m_csv: str | os.PathLike | None = None,
    recorder_csv: str | os.PathLike | None = None,
) -> dict[str, Any] | None:
    """The decode-power section's context, or None when no decode table was given.

    ``expert_m_csv`` (per-expert M) and ``recorder_csv`` (what SGLang's expert recorder cost)
    add their links and the recorder-cost table."""
    if path is None:
        return None
    table = read_optional(path)
    rows = []
    sources: list[str] = []
    no_power_variants: list[str] = []
    dummy: list[str] = []
    dummy_note = ""
    columns = [c for c in shown("decode_table")
               if c[0] not in DECODE_OPTIONAL or c[0] in table.columns]  # fmt: skip
    if not table.empty:
        table = _clean_text_columns(
            table.copy(),
            ("engine", "variant", "power_source", "throttle_reasons", "weights", "first_error"),
        )
        if "concurrency" in table.columns:
            table["_c"] = pd.to_numeric(table["concurrency"], errors="coerce")
            sort = [c for c in ("engine", "variant", "_c") if c in table.columns]
            table = table.sort_values(sort, kind="stable")
        for rec in table.to_dict("records"):
            note = invalid_note(rec)
            cells = []
            for column, col in columns:
                if column == "valid":
                    text = "yes" if not note else note.replace("invalid: ", "no: ", 1)
                    cells.append({"text": text, "key": "1" if not note else "0", "num": False})
                elif column == "cuda_graphs":
                    text = graphs_label(rec.get(column)).removeprefix("CUDA graphs ")
                    cells.append({"text": text, "key": text, "num": False})
                elif column == "first_error":
                    cells.append({"long": long_text(rec.get(column), 80),
                                  "key": str(rec.get(column) or "")})  # fmt: skip
                else:
                    cells.append(_kp_cell(rec.get(column), col))
            rows.append({"cells": cells, "valid": not note, "note": note})
        sources = decode_power_sources(table)
        if "variant" in table.columns and "power_source" in table.columns:
            by_variant = table.groupby("variant")["power_source"].agg(
                lambda s: {v or "none" for v in s}
            )
            no_power_variants = sorted(v for v, src in by_variant.items() if src == {"none"})
        dummy, dummy_note = dummy_weights_note(table)
    pairs = graphs_pairs(table) if not table.empty else pd.DataFrame()
    tp = tp_pairs(table) if not table.empty else pd.DataFrame()
    if len(tp):
        tp["cuda_graphs"] = tp["cuda_graphs"].map(graphs_label).str.removeprefix("CUDA graphs ")
    recorder = read_optional(recorder_csv) if recorder_csv is not None else pd.DataFrame()
    if not recorder.empty and "variant" in recorder.columns:
        recorder = _clean_text_columns(recorder, ("variant",))
        recorder["_c"] = pd.to_numeric(recorder.get("concurrency"), errors="coerce")
        recorder = recorder.sort_values(["variant", "_c"], kind="stable")
    ratios = pd.to_numeric(recorder.get("tpot_ratio"), errors="coerce") if len(recorder) else None
    links = [(label, relative_link(p, out_html)) for label, p in (
        ("decode.csv", path), ("expert_m.csv", expert_m_csv),
        ("decode_recorder.csv", recorder_csv)) if p is not None]  # fmt: skip
    return {
        "columns": [(c, col.label) for c, col in columns],
        "rows": rows,
        "n_invalid": sum(1 for r in rows if not r["valid"]),
        "sources": sources,
        "no_power": bool(rows) and sources == ["none"],
        "no_power_variants": no_power_variants if sources != ["none"] else [],
        "dummy_variants": dummy,
        "dummy_note": dummy_note,
        "pairs": _table(pairs, "graphs_pairs") if len(pairs) else None,
        "tp": _table(tp, "tp_pairs") if len(tp) else None,
        "recorder": _table(recorder, "recorder_table") if len(recorder) else None,
        "recorder_span": (
            (f"{ratios.min():.2f}×", f"{ratios.max():.2f}×")
            if ratios is not None and ratios.notna().any()
            else None
        ),
        "recorder_given": recorder_csv is not None,
        "charts": sorted(
            (c for c in charts if c["kind"] == "decode" and c["name"] not in EXPERT_FIGURES),
            key=lambda c: DECODE_FIGURES.index(c["name"]),
        ),
        "expert_charts": [
            c for c in charts if c["kind"] == "decode" and c["name"] in EXPERT_FIGURES
        ],
        "link": relative_link(path, out_html),
        "links": links,
    }


def chart_entries(spec_paths: Iterable[str | os.PathLike], out_html) -> list[dict[str, Any]]:
    """One entry per spec file; its kind from the name (``latency_<backend>``, ``support``, …)."""
    entries = []
    for path in sorted(map(Path, spec_paths or []), key=lambda p: p.name):
        name = path.name.removesuffix(".json").removesuffix(".vl")
        if name == "support":
            kind, backend = "support", None
        elif name.startswith("latency_"):
            kind, backend = "latency", name.removeprefix("latency_")
        elif name in POWER_FIGURES:
            kind, backend = "power", None
        elif name in DECODE_FIGURES:
            kind, backend = "decode", None
        else:
            kind, backend = "other", None
        stem = path.with_name(name)
        links = [
            (label, relative_link(stem.with_suffix(suffix), out_html))
            for label, suffix in (("interactive HTML", ".html"), ("PNG", ".png"))
            if stem.with_suffix(suffix).exists()
        ]
        links.append(("Vega-Lite spec", relative_link(path, out_html)))
        entries.append(
            {
                "name": name,
                "kind": kind,
                "backend": backend,
                "div_id": "chart-" + _slug(name),
                "spec_json": Markup(json_for_script(read_json(path))),
                "links": links,
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


def findings_context(findings) -> list[dict] | None:
    """Per question: its title, the sentences computed from the data, and what is missing."""
    if findings is None:
        return None
    out = []
    for question, title in QUESTIONS.items():
        found, missing = findings.for_question(question)
        out.append({
            "question": question,
            "title": title,
            "texts": [f.text for f in found],
            "missing": [m.text for m in missing],
        })  # fmt: skip
    return out


def build_context(
    hardware_json,
    sweep_csv,
    support_csv,
    spec_paths,
    out_html,
    config_hash,
    config_yaml_text=None,
    git: dict | None = None,
    kernel_power_csv=None,
    decode_csv=None,
    findings=None,
    expert_m_csv=None,
    decode_recorder_csv=None,
) -> dict[str, Any]:
    hw = load_hardware(hardware_json)
    if git:
        # The commit the report is rendered from, not the one hardware.json was collected at.
        hw = {**hw, **git}
    sweep = _clean_text_columns(
        read_optional(sweep_csv),
        ("backend", "impl", "op", "dtype", "shape", "status", "error", "device_name"),
    )
    support = read_optional(support_csv)
    charts = chart_entries(spec_paths, out_html)
    summaries = backend_summaries(sweep)
    latency = {c["backend"]: c for c in charts if c["kind"] == "latency"}
    backends = sorted(set(latency) | {s["backend"] for s in summaries})
    by_backend = {s["backend"]: s for s in summaries}
    kernel_power = kernel_power_section(kernel_power_csv, charts, out_html)
    decode = decode_section(decode_csv, charts, out_html, expert_m_csv, decode_recorder_csv)
    table_links = [
        (label, relative_link(path, out_html))
        for label, path in (
            ("sweep.csv", sweep_csv),
            ("support.csv", support_csv),
            ("hardware.json", hardware_json),
            ("kernel_power.csv", kernel_power_csv),
            ("decode.csv", decode_csv),
            ("expert_m.csv", expert_m_csv),
            ("decode_recorder.csv", decode_recorder_csv),
        )
        if path is not None
    ]
    return {
        "title": "GEMM performance study",
        "prov": provenance(hw, config_hash),
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
            or (c["kind"] == "decode" and decode is None)
        ],
        "kernel_power": kernel_power,
        "decode": decode,
        "findings": findings_context(findings),
        "charts": charts,
        "fastest": fastest_table(sweep),
        "sweep": sweep_table(sweep),
        "table_links": table_links,
        "vega_js": Markup(vega_bundle()) if charts else None,
        "embed_options": Markup(json_for_script(EMBED_OPTIONS)),
        "status_colors": STATUS_COLORS,
        "backend_colors": BACKEND_COLORS,
    }


def render_report(
    hardware_json: str | os.PathLike,
    sweep_csv: str | os.PathLike,
    support_csv: str | os.PathLike,
    spec_paths: list,
    out_html: str | os.PathLike,
    config_hash: str | None,
    template_dir: str | os.PathLike,
    config_yaml_text: str | None = None,
    git: dict | None = None,
    kernel_power_csv: str | os.PathLike | None = None,
    decode_csv: str | os.PathLike | None = None,
    findings=None,
    expert_m_csv: str | os.PathLike | None = None,
    decode_recorder_csv: str | os.PathLike | None = None,
) -> str:
    """Render the report to ``out_html`` (atomically) and return the HTML text.

    ``kernel_power_csv`` (the kernel-power windows table) adds the "Kernel power" section;
    without it the report is rendered as before. ``decode_csv`` (the decode table, one row
    per server variant and concurrency) likewise adds the "Decode power" section;
    ``expert_m_csv`` and ``decode_recorder_csv`` add the per-expert M table's link and the
    expert recorder's cost to it.
    """
    context = build_context(
        hardware_json,
        sweep_csv,
        support_csv,
        spec_paths,
        out_html,
        config_hash,
        config_yaml_text,
        git,
        kernel_power_csv,
        decode_csv,
        findings,
        expert_m_csv,
        decode_recorder_csv,
    )
    html = environment(template_dir).get_template(TEMPLATE).render(**context)
    write_text(out_html, html)
    return html
