"""The chart kit every figure module draws with: colours and scales per backend and status,
value helpers, strict Vega-Lite data, the empty-figure chart, and saving a chart as offline
HTML, PNG and Vega-Lite JSON.

Charts carry their data inline (no external data files), and the HTML written here embeds the
Vega/Vega-Lite/vega-embed JavaScript bundled by vl-convert, so it opens without any network
access. The figures themselves live in ``sweep_figures``, ``power_figures`` and
``decode_figures``; what a figure shows is decided by the analysis (``findings``).
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from .io import atomic_path, write_text

# ---------------------------------------------------------------------------------------------
# Colours and scales
# ---------------------------------------------------------------------------------------------

BACKEND_COLORS: dict[str, str] = {
    "torch": "#4c78a8",  # blue
    "flashinfer": "#e45756",  # red
    "sgl_kernel": "#54a24b",  # green
}
FALLBACK_COLORS: tuple[str, ...] = ("#b279a2", "#f58518", "#72b7b2", "#9d755d", "#bab0ac")

STATUS_ORDER: tuple[str, ...] = ("ok", "partial", "mismatch", "unsupported", "error")
STATUS_COLORS: dict[str, str] = {
    "ok": "#2ca02c",
    "partial": "#f0a30a",
    "unsupported": "#b0b0b0",
    "error": "#d62728",
    "mismatch": "#8e44ad",
}

VL_VERSION = "v" + alt.SCHEMA_VERSION.lstrip("v").rsplit(".", 1)[0].replace(".", "_")
EMBED_OPTIONS: dict[str, Any] = {
    # No "open in editor" action: it would reach the network.
    "actions": {"export": True, "source": True, "compiled": False, "editor": False},
    "renderer": "svg",
}
_MAX_REASON = 160
#: Axis labels for M: 1 … 512, then 1k, 2k, … (powers of two).
M_LABEL_EXPR = (
    "datum.value >= 1024 ? format(datum.value / 1024, '~g') + 'k' : format(datum.value, '~g')"
)


def backend_color(backend: str) -> str:
    """The fixed colour of a backend; unknown backends get a stable fallback colour."""
    if backend in BACKEND_COLORS:
        return BACKEND_COLORS[backend]
    index = sum(backend.encode()) % len(FALLBACK_COLORS)
    return FALLBACK_COLORS[index]


def backend_scale(backends: Iterable[str] | None = None) -> alt.Scale:
    """Colour scale mapping each backend to its fixed colour (for cross-backend figures)."""
    names = list(dict.fromkeys(backends)) if backends is not None else list(BACKEND_COLORS)
    return alt.Scale(domain=names, range=[backend_color(b) for b in names])


def status_scale() -> alt.Scale:
    return alt.Scale(domain=list(STATUS_ORDER), range=[STATUS_COLORS[s] for s in STATUS_ORDER])


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def has_data(df: pd.DataFrame, column: str) -> bool:
    """Whether ``column`` holds at least one number."""
    return column in df.columns and pd.to_numeric(df[column], errors="coerce").notna().any()


def shorten(text: str, limit: int = _MAX_REASON) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def distinct_reasons(df: pd.DataFrame, limit: int = 5) -> list[str]:
    """Distinct non-empty error texts of the non-ok rows, most frequent first."""
    if df.empty or "error" not in df.columns:
        return []
    bad = df[df["status"].astype(str) != "ok"] if "status" in df.columns else df
    texts = bad["error"].fillna("").astype(str).map(lambda t: " ".join(t.split()))
    texts = texts[texts != ""]
    if texts.empty:
        statuses = sorted(set(bad["status"].astype(str))) if "status" in bad.columns else []
        return [f"status {s} (no message)" for s in statuses]
    counts = texts.value_counts()
    out = [shorten(t) + (f" (×{n})" if n > 1 else "") for t, n in counts.items()]
    if len(out) > limit:
        out = out[:limit] + [f"… and {len(out) - limit} more"]
    return out


def _int_or_none(value: Any) -> int | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else int(f)


def shape_label(shape: Any, n: Any, k: Any, g: Any = None) -> str:
    """Facet title of a shape: ``down · N×K = 6144×2048`` (and ``· G=8`` if grouped)."""
    n_, k_, g_ = _int_or_none(n), _int_or_none(k), _int_or_none(g)
    text = f"{shape} · N×K = {n_ if n_ is not None else '?'}×{k_ if k_ is not None else '?'}"
    if g_ is not None:
        text += f" · G={g_}"
    return text


def log_ticks(values: pd.Series) -> list[float]:
    """1-2-5 ticks covering ``values`` (positive), for readable log axes."""
    v = pd.to_numeric(values, errors="coerce")
    v = v[v > 0]
    if v.empty:
        return []
    lo, hi = math.floor(math.log10(v.min())), math.ceil(math.log10(v.max()))
    ticks = [m * 10.0**e for e in range(lo, hi + 1) for m in (1, 2, 5)]
    inside = [t for t in ticks if v.min() / 2.5 <= t <= v.max() * 2.5]
    if len(inside) > 10:
        inside = [t for t in inside if round(t / 10 ** math.floor(math.log10(t))) == 1]
    return inside


def first_text(df: pd.DataFrame, column: str, default: str = "") -> str:
    if column not in df.columns:
        return default
    values = df[column].dropna().astype(str)
    values = values[values != ""]
    return values.iloc[0] if not values.empty else default


def _text_or_none(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value).strip()
    return text or None


def strict_frame(df: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """Only ``columns`` (those present), numbers as float and text as str or None.

    Vega-Lite specs must be strict JSON. Altair turns NaN into null in float columns, but not
    in object columns that hold numbers (its sanitiser re-infers them as float and keeps NaN),
    so numeric columns stay float here and only text columns are objects.
    """
    out = pd.DataFrame(index=range(len(df)))
    for column in dict.fromkeys(columns):
        if column not in df.columns:
            continue
        values = df[column].reset_index(drop=True)
        numbers = pd.to_numeric(values, errors="coerce")
        if pd.api.types.is_numeric_dtype(values) or (
            values.notna().any() and numbers.notna().sum() == values.notna().sum()
        ):
            out[column] = numbers.astype(float)
        else:
            out[column] = values.map(_text_or_none).astype(object)
    return out


def no_data_chart(title: str, reason: str) -> alt.TopLevelMixin:
    """An empty chart whose title says why there is nothing to draw."""
    return (
        alt.Chart(pd.DataFrame({"x": []}))
        .mark_point()
        .properties(width=300, height=60, title=alt.TitleParams(title, subtitle=[reason]))
    )


# ---------------------------------------------------------------------------------------------
# Saving
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def vega_bundle() -> str:
    """Vega + Vega-Lite + vega-embed as one script (sets window.vegaEmbed), safe in <script>."""
    import vl_convert as vlc

    js = vlc.javascript_bundle(vl_version=VL_VERSION)
    # Never let the bundle close its own <script> element or open an HTML comment.
    return js.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def json_for_script(data: Any) -> str:
    """JSON text that is also safe to place inside an HTML <script> element."""
    text = json.dumps(data, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def chart_spec(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """The Vega-Lite spec of a chart with every dataset inline (no files, no row limit).

    Missing values become JSON null: altair converts NaN itself only for some pandas dtypes
    (a pandas 3 string column kept its NaN on the H200 image and broke the JSON export).
    """
    with alt.data_transformers.enable("default", max_rows=None):
        return _nan_to_null(chart.to_dict())


def _nan_to_null(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_to_null(v) for v in value]
    return value


_STANDALONE_HTML = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.5rem; }}
#vis.vega-embed {{ width: 100%; display: flex; }}
#vis.vega-embed details, #vis.vega-embed details summary {{ position: relative; }}
</style>
<script type="text/javascript">
// vega-embed bundle with Vega-Lite {vl_version} (vl-convert)
{bundle}
</script>
</head>
<body>
<div id="vis"></div>
<noscript>This chart needs JavaScript; see the PNG next to this file.</noscript>
<script type="application/json" id="vis-spec">{spec}</script>
<script type="text/javascript">
{{
  const spec = JSON.parse(document.getElementById("vis-spec").textContent);
  vegaEmbed("#vis", spec, {options}).catch(console.error);
}}
</script>
</body>
</html>
"""


def standalone_html(spec: dict[str, Any], title: str = "chart") -> str:
    """One HTML page that shows ``spec`` offline (JavaScript inlined, JSON escaped)."""
    import html

    return _STANDALONE_HTML.format(
        title=html.escape(title),
        vl_version=VL_VERSION,
        bundle=vega_bundle(),
        spec=json_for_script(spec),
        options=json_for_script(EMBED_OPTIONS),
    )


def _title_of(spec: dict[str, Any]) -> str:
    title = spec.get("title", "chart")
    if isinstance(title, dict):
        title = title.get("text", "chart")
    if isinstance(title, list):
        title = " ".join(map(str, title))
    return str(title)


def save_chart(
    chart: alt.TopLevelMixin,
    html_path: str | os.PathLike,
    png_path: str | os.PathLike,
    spec_path: str | os.PathLike,
) -> dict[str, Any]:
    """Write the chart as offline HTML, PNG (scale 2) and Vega-Lite JSON; returns the spec."""
    import vl_convert as vlc

    spec = chart_spec(chart)
    spec_text = json.dumps(spec, allow_nan=False, indent=1, ensure_ascii=False) + "\n"
    png = vlc.vegalite_to_png(spec, vl_version=VL_VERSION, scale=2)
    with atomic_path(png_path) as tmp:
        Path(tmp).write_bytes(png)
    write_text(html_path, standalone_html(spec, _title_of(spec)))
    write_text(spec_path, spec_text)
    return spec
