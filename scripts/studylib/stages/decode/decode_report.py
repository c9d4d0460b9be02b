"""The decode report sections (questions 4, 5 and 6): the decode table, the CUDA-graphs and
tensor-parallel pairs derived from it, the cross-check, the recorder table and the figures of
each question. The answers themselves come from answers.csv (the report reads them)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ...core.formats import Column, labelled
from ...core.report_cells import (
    clean_text_columns,
    embedded_downloads,
    long_text,
    read_or_derive,
    shown_cell,
)
from ...core.table_registry import read_optional
from ...figure_list import in_section
from .decode_figures import TEXT_COLUMNS as DECODE_TEXT
from .decode_figures import graphs_label
from .decode_judgements import dummy_weights_note, graphs_pairs, invalid_note, tp_pairs
from .decode_judgements import power_sources as decode_power_sources
from .decode_noise import crosscheck_sentence
from .decode_tables import (
    CROSSCHECK_SHOWN,
    DECODE_SHOWN,
    GRAPHS_PAIRS_SHOWN,
    RECORDER_SHOWN,
    TP_PAIRS_SHOWN,
)

#: Figures of the decode section, in order (figure_list.py): question 5's, then the step
#: model's (question 6, shown in its own part); the expert figure (question 4, section
#: "experts") in question 4's.
DECODE_FIGURES = in_section("decode")
STEP_FIGURES = ("step_model",)


#: Decode table columns shown only when the table has a value in them (older tables lack them).
DECODE_OPTIONAL = frozenset(
    {"weights", "cuda_graphs", "hbm_floor_ms", "tpot_over_floor", "idle_w_per_gpu",
     "j_per_token_net", "step_gb", "tok_s_over_c_tpot", "decoding_share", "load_cpu_pct",
     "first_error", "w_gpu_min", "w_gpu_median", "w_gpu_max", "ep", "server_tok_s",
     "delivery_ratio", "server_gc_s", "load_stall_s", "tpot_source", "client_tpot_ms",
     "tpot_ci_pct", "load"}
)  # fmt: skip


def _table(frame: pd.DataFrame, shown: dict[str, Column]) -> dict[str, Any]:
    """A small table's context: its columns (those present) and formatted cells per row."""
    columns = [(c, col) for c, col in labelled(shown) if c in frame.columns]
    rows = [[shown_cell(rec.get(c), col) for c, col in columns] for rec in frame.to_dict("records")]
    return {"columns": [col.label for _, col in columns], "rows": rows}


def decode_section(
    paths: dict[str, Any], charts: list[dict[str, Any]], out_html
) -> dict[str, Any] | None:
    """The decode-power section's context, or None when no decode table was given (``paths``:
    the report's inputs). Per-expert M (``expert_m``) and the expert recorder's cost
    (``decode_recorder``) add their downloads and the recorder-cost table; SGLang's
    bench_serving on the same servers (``decode_crosscheck``) the cross-check table; the
    pairs the aggregate rule derived (``decode_graphs_pairs``, ``decode_tp_pairs``) their
    tables (a folder from before them: paired here by the same rules)."""
    path = paths.get("decode")
    if path is None:
        return None
    expert_m_csv, recorder_csv = paths.get("expert_m"), paths.get("decode_recorder")
    crosscheck_csv = paths.get("decode_crosscheck")
    table = read_optional(path)
    rows = []
    sources: list[str] = []
    no_power_variants: list[str] = []
    dummy: list[str] = []
    dummy_note = ""
    columns = [c for c in labelled(DECODE_SHOWN)
               if c[0] not in DECODE_OPTIONAL
               or (c[0] in table.columns and table[c[0]].notna().any())]  # fmt: skip
    if not table.empty:
        table = clean_text_columns(table.copy(), DECODE_TEXT)
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
                    cells.append(shown_cell(rec.get(column), col))
            rows.append({"cells": cells, "valid": not note, "note": note})
        sources = decode_power_sources(table)
        if "variant" in table.columns and "power_source" in table.columns:
            by_variant = table.groupby("variant")["power_source"].agg(
                lambda s: {v or "none" for v in s}
            )
            no_power_variants = sorted(v for v, src in by_variant.items() if src == {"none"})
        dummy, dummy_note = dummy_weights_note(table)
    pairs = read_or_derive(paths.get("decode_graphs_pairs"), lambda: graphs_pairs(table))
    tp = read_or_derive(paths.get("decode_tp_pairs"), lambda: tp_pairs(table))
    if len(tp):
        tp["cuda_graphs"] = tp["cuda_graphs"].map(graphs_label).str.removeprefix("CUDA graphs ")
    recorder = read_optional(recorder_csv) if recorder_csv is not None else pd.DataFrame()
    if not recorder.empty and "variant" in recorder.columns:
        recorder = clean_text_columns(recorder, ("variant",))
        recorder["_c"] = pd.to_numeric(recorder.get("concurrency"), errors="coerce")
        recorder = recorder.sort_values(["variant", "_c"], kind="stable")
    ratios = pd.to_numeric(recorder.get("tpot_ratio"), errors="coerce") if len(recorder) else None
    check = read_optional(crosscheck_csv) if crosscheck_csv is not None else pd.DataFrame()
    if not check.empty and "variant" in check.columns:
        check = clean_text_columns(check, ("variant", "bench_error"))
        check["_c"] = pd.to_numeric(check.get("concurrency"), errors="coerce")
        check = check.sort_values(["variant", "_c"], kind="stable")
        # The verdict on the two clients, at each C (tables from before the steady TPOT too).
        check["agreement"] = [crosscheck_sentence(r) for r in check.to_dict("records")]
    downloads = embedded_downloads([path, expert_m_csv, recorder_csv, crosscheck_csv], out_html)
    return {
        "columns": [(c, col.label) for c, col in columns],
        "rows": rows,
        "n_invalid": sum(1 for r in rows if not r["valid"]),
        "sources": sources,
        "no_power": bool(rows) and sources == ["none"],
        "no_power_variants": no_power_variants if sources != ["none"] else [],
        "dummy_variants": dummy,
        "dummy_note": dummy_note,
        "pairs": _table(pairs, GRAPHS_PAIRS_SHOWN) if len(pairs) else None,
        "tp": _table(tp, TP_PAIRS_SHOWN) if len(tp) else None,
        "recorder": _table(recorder, RECORDER_SHOWN) if len(recorder) else None,
        "recorder_span": (
            (f"{ratios.min():.2f}×", f"{ratios.max():.2f}×")
            if ratios is not None and ratios.notna().any()
            else None
        ),
        "recorder_given": recorder_csv is not None,
        "crosscheck": _table(check, CROSSCHECK_SHOWN) if len(check) else None,
        # Question 5's figures, and question 6's (the step model) in its own section.
        "charts": sorted(
            (c for c in charts if c["kind"] == "decode" and c["name"] not in STEP_FIGURES),
            key=lambda c: DECODE_FIGURES.index(c["name"]),
        ),
        "step_charts": [c for c in charts if c["kind"] == "decode" and c["name"] in STEP_FIGURES],
        "expert_charts": [c for c in charts if c["kind"] == "experts"],
        "downloads": downloads,
    }
