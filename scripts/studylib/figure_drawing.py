"""Drawing a figure of the registry (figure_list.py): read its input tables by role, call its
drawing function, save the chart as offline HTML, PNG and Vega-Lite JSON. Rule ``plot``
(scripts/plot_figure.py) and tools/example_report.py both draw through here."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from .core.charts import save_chart
from .core.io import read_json
from .core.table_registry import read_optional

PathLike = str | os.PathLike


def drawing_function(draw: str) -> Callable[..., Any]:
    """The function a registry entry names as ``"module:function"``."""
    module, _, function = draw.partition(":")
    return getattr(importlib.import_module(module), function)


def read_input(paths: PathLike | list[PathLike] | tuple[PathLike, ...] | None) -> Any:
    """One input role as its drawing function takes it: a JSON record as a dict, a table as a
    frame (empty where there is none), several tables as one frame (the non-empty ones
    concatenated)."""
    if paths is None:
        return pd.DataFrame()
    if isinstance(paths, str | os.PathLike):
        return read_json(paths) if Path(paths).suffix == ".json" else read_optional(paths)
    frames = [f for f in map(read_optional, paths) if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def figure_chart(draw: str, inputs: Mapping[str, Any], args: Mapping[str, Any] | None = None):
    """The chart of the function ``draw`` names, from the files of its input roles."""
    tables = {role: read_input(paths) for role, paths in inputs.items()}
    return drawing_function(draw)(**tables, **(args or {}))


def draw_figure(
    draw: str,
    inputs: Mapping[str, Any],
    args: Mapping[str, Any] | None,
    out_html: PathLike,
    out_png: PathLike,
    out_spec: PathLike,
) -> dict[str, Any]:
    """Draw one figure and save it (HTML, PNG, Vega-Lite JSON); returns its spec."""
    return save_chart(figure_chart(draw, inputs, args), out_html, out_png, out_spec)
