"""The chart kit every figure module draws with: colours and scales per backend and status,
value helpers, strict Vega-Lite data, the empty-figure chart, and saving a chart as offline
HTML, PNG and Vega-Lite JSON.

Charts carry their data inline (no external data files), and the HTML written here embeds the
Vega/Vega-Lite/vega-embed JavaScript bundled by vl-convert, so it opens without any network
access. The figures themselves live in each stage (``stages/<stage>/*_figure*.py``) and
in ``decode_figures``; what a figure shows is decided by the stages' judgements.
"""

from __future__ import annotations

import functools
import html
import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd
import vl_convert as vlc

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


#: One colour per backend · impl, in the backend's hue family (torch blues, FlashInfer reds
#: and oranges, sgl-kernel greens); no colour serves two pairs. Impls not listed here take the
#: next free shade of their family (:data:`FAMILY_SHADES`), then of :data:`FALLBACK_COLORS`.
IMPL_COLORS: dict[tuple[str, str], str] = {
    ("torch", "aten"): "#1f5fa8",  # blue
    ("torch", "per_tensor"): "#74b3e8",  # sky blue
    ("torch", "rowwise"): "#08306b",  # navy
    ("torch", "grouped_mm"): "#17a2b8",  # teal
    ("torch", "sdpa"): "#4b3fb5",  # indigo
    ("flashinfer", "cublas"): "#d62728",  # red
    ("flashinfer", "cublaslt"): "#ff7f0e",  # orange
    ("flashinfer", "cudnn"): "#8c1c13",  # maroon
    ("flashinfer", "cutlass"): "#f2a65a",  # sand
    ("flashinfer", "tinygemm"): "#c51b7d",  # crimson pink
    ("flashinfer", "trtllm"): "#b8860b",  # dark gold
    ("flashinfer", "auto"): "#fb9a99",  # salmon
    ("flashinfer", "fa2"): "#e377c2",  # orchid
    ("sgl_kernel", "cutlass"): "#2ca02c",  # green
    ("sgl_kernel", "triton"): "#0b5d1e",  # dark green
}
#: Spare shades per backend family, for impls that :data:`IMPL_COLORS` does not list.
FAMILY_SHADES: dict[str, tuple[str, ...]] = {
    "torch": ("#4c78a8", "#9ecae1", "#2171b5", "#5b5fc7", "#0570b0"),
    "flashinfer": ("#e45756", "#a6501a", "#fdae6b", "#e7298a", "#cb181d"),
    "sgl_kernel": ("#98df8a", "#66a61e", "#1b9e77", "#74c476", "#31a354"),
}


def _spare_shades(backend: str) -> tuple[str, ...]:
    return FAMILY_SHADES.get(backend, FALLBACK_COLORS)


def impl_color(backend: str, impl: str) -> str:
    """The fixed colour of one backend · impl pair (its backend's hue family).

    Listed pairs never share a colour; an unlisted impl gets a stable spare shade of its
    family (:func:`impl_scale` also keeps those apart within one figure).
    """
    backend, impl = str(backend), str(impl)
    if (backend, impl) in IMPL_COLORS:
        return IMPL_COLORS[(backend, impl)]
    shades = _spare_shades(backend)
    return shades[sum(f"{backend}/{impl}".encode()) % len(shades)]


def impl_scale(pairs: Iterable[tuple[str, str]], label=None) -> alt.Scale:
    """Colour scale of the backend · impl ``pairs``, one distinct colour per pair.

    ``label(backend, impl)`` names a pair in the data (default ``"backend · impl"``; a
    one-backend chart may use the impl alone).
    """
    label = label or series_label
    pairs = list(dict.fromkeys((str(b), str(i)) for b, i in pairs))
    used = {IMPL_COLORS[p] for p in pairs if p in IMPL_COLORS}
    colors = []
    for backend, impl in pairs:
        color = impl_color(backend, impl)
        if (backend, impl) not in IMPL_COLORS:
            free = [c for c in (*_spare_shades(backend), *FALLBACK_COLORS) if c not in used]
            color = color if color not in used else (free[0] if free else color)
            used.add(color)
        colors.append(color)
    return alt.Scale(domain=[label(b, i) for b, i in pairs], range=colors)


def series_label(backend: str, impl: str) -> str:
    """The name of a backend · impl series in figures and legends."""
    return f"{backend} · {impl}"


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


def log_ticks_between(lo: float, hi: float, fewest: int = 3) -> list[float]:
    """Round ticks inside [lo, hi] (positive) for a log axis: 1-2-5 per decade, finer
    (1, 1.5, 2, 3, 4, 5, 6, 8) where that gives fewer than ``fewest``, powers of ten alone
    where 1-2-5 gives more than 10. Ticks outside the domain would be drawn on its edge."""
    if not (lo > 0 and hi > lo and math.isfinite(hi)):
        return []
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    ticks: list[float] = []
    for mantissas in ((1, 2, 5), (1, 1.5, 2, 3, 4, 5, 6, 8)):
        ticks = [float(f"{m * 10.0**e:.6g}") for e in decades for m in mantissas]
        ticks = [t for t in ticks if lo <= t <= hi]
        if len(ticks) >= fewest:
            break
    if len(ticks) > 10:
        ticks = [t for t in ticks if math.log10(t).is_integer()]
    return ticks


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


#: The top-level ``usermeta`` key a figure without data carries: ``{"study": {"has_data":
#: false, "note": <one line>}}``. The report reads it to show the note instead of an empty
#: chart; a figure without the key has data.
USERMETA_KEY = "study"


def no_data_panel(title: str, reason: str, **title_options: Any) -> alt.Chart:
    """An empty panel whose title says why there is nothing to draw, for use inside a
    figure that has data elsewhere (no ``usermeta``: Vega-Lite allows it at the top only)."""
    reason = shorten(reason, 300)
    return (
        alt.Chart(pd.DataFrame({"x": []}))
        .mark_point()
        .properties(
            width=300,
            height=60,
            title=alt.TitleParams(title, subtitle=[reason], anchor="start", **title_options),
        )
    )


def no_data_chart(title: str, reason: str, **title_options: Any) -> alt.Chart:
    """The whole figure when it has nothing to draw: an empty chart whose title says why,
    marked for the report with ``usermeta: {"study": {"has_data": false, "note": reason}}``."""
    note = shorten(reason, 300)
    return no_data_panel(title, note, **title_options).properties(
        usermeta={USERMETA_KEY: {"has_data": False, "note": note}}
    )


def figure_has_data(spec: dict[str, Any]) -> bool:
    """Whether a saved figure's spec has data (it lacks the no-data ``usermeta`` mark)."""
    meta = (spec.get("usermeta") or {}).get(USERMETA_KEY) or {}
    return meta.get("has_data", True) is not False


class SpecChart:
    """A finished Vega-Lite spec where a chart is expected: :func:`chart_spec` and
    :func:`save_chart` take it like an altair chart (``to_dict`` gives a copy of the spec).

    For figures assembled from many panels: altair deep-copies a whole concat tree for each
    selection it lifts to the top, which took ~20 s for one backend's latency figure.
    """

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec

    def to_dict(self, **_kwargs: Any) -> dict[str, Any]:
        return json.loads(json.dumps(self.spec, allow_nan=True))


def view_spec(chart: alt.TopLevelMixin) -> dict[str, Any]:
    """A chart's spec as a view to nest in a hand-built spec (no schema, config or datasets:
    its data must be named, from the top-level ``datasets``)."""
    spec = chart.to_dict(validate=False)
    for key in ("$schema", "config", "datasets"):
        spec.pop(key, None)
    return spec


# ---------------------------------------------------------------------------------------------
# Saving
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def vega_bundle() -> str:
    """Vega + Vega-Lite + vega-embed as one script (sets window.vegaEmbed), safe in <script>."""
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
    spec = chart_spec(chart)
    spec_text = json.dumps(spec, allow_nan=False, indent=1, ensure_ascii=False) + "\n"
    png = vlc.vegalite_to_png(spec, vl_version=VL_VERSION, scale=2)
    with atomic_path(png_path) as tmp:
        Path(tmp).write_bytes(png)
    write_text(html_path, standalone_html(spec, _title_of(spec)))
    write_text(spec_path, spec_text)
    return spec
