"""The report's cells: how a value reads (formats from the shown columns, missing values as a
dash, long messages split), tables embedded as downloads, and paths shown relative to the
report. Each stage's report section (``stages/<stage>/<stage>_report.py``) builds on these."""

from __future__ import annotations

import base64
import gzip
import hashlib
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from .formats import Column
from .table_registry import read_optional

DASH = "—"


LONG_TEXT = 120


#: Tables up to this size are embedded in the page as downloads (data: URIs); larger ones are
#: named as paths.
EMBED_LIMIT = 2 * 1024 * 1024


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


def fmt_sig(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant figures, never in exponent notation, thousands
    separated: 0.0123, 1.23, 123, 12,300."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    decimals = digits - 1 - math.floor(math.log10(abs(value)))
    rounded = round(value, decimals)
    # Rounding may carry into one more digit (9.996 -> 10.0): drop one decimal then.
    if math.floor(math.log10(abs(rounded))) > math.floor(math.log10(abs(value))):
        decimals -= 1
    return f"{rounded:,.{max(decimals, 0)}f}"


def fmt_sig_us(value: float) -> str:
    """Microseconds: 3 significant figures, 4 from 1,000 µs on (0.512, 12.3, 456, 1,235)."""
    return fmt_sig(value, 4 if abs(value) >= 999.5 else 3)


def long_text(text: Any, limit: int = LONG_TEXT) -> dict[str, Any]:
    """A message split for display: short head, and the full text when it is long."""
    full = "" if is_missing(text) else str(text)
    one_line = " ".join(full.split())
    if len(one_line) <= limit and "\n" not in full.strip():
        return {"short": one_line, "full": None}
    return {"short": one_line[: limit - 1] + "…", "full": full}


def display_path(target: str | os.PathLike, out_html: str | os.PathLike) -> str:
    """``target`` as a reader finds it beside the report: relative to the folder that holds
    the report's folder's parent (``results/tables/sweep.csv`` for
    ``results/report/index.html``), with forward slashes; else its name."""
    target = Path(target).resolve()
    base = Path(out_html).resolve().parent.parent.parent
    try:
        return target.relative_to(base).as_posix()
    except ValueError:
        return target.name


def fmt_size(n_bytes: int) -> str:
    if n_bytes < 1024:
        return f"{n_bytes} B"
    if n_bytes < 1024 * 1024:
        return f"{n_bytes / 1024:.0f} KB"
    return f"{n_bytes / 1024 / 1024:.1f} MB"


MIME = {".csv": "text/csv", ".json": "application/json"}
#: Downloads larger than this are packed (gzip, base64) and unpacked by the page's script
#: when it loads, rather than written as a data: URI (a 600 KB sweep table packs to ~100 KB).
PACK_FROM = 64 * 1024


def pack(data: bytes | str) -> str:
    """``data`` gzipped (no timestamp: the same input packs the same) and base64-encoded: a
    payload the report's script unpacks (report.js, ``unpack``). Base64 is safe inside any
    HTML element."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def unpack(text: str) -> bytes:
    """The bytes :func:`pack` packed."""
    return gzip.decompress(base64.b64decode(text))


def payload_id(name: str, text: str) -> str:
    """An element id for a packed payload, stable for the same content."""
    digest = hashlib.sha1(text.encode("ascii")).hexdigest()[:10]
    return "packed-" + "".join(c if c.isalnum() else "-" for c in name) + "-" + digest


def embedded_download(
    target: str | os.PathLike, out_html: str | os.PathLike, limit: int = EMBED_LIMIT
) -> dict[str, Any] | None:
    """A table offered from inside the page: ``href`` a data: URI of the file's bytes when
    it is at most ``limit`` bytes, else None (the page names ``path`` instead, since a link
    to a file beside the report breaks when the page is mailed). None when it does not exist.
    """
    path = Path(target)
    if not path.is_file():
        return None
    size = path.stat().st_size
    mime = MIME.get(path.suffix.lower(), "text/plain")
    href, packed, packed_id = None, None, None
    if PACK_FROM < size <= limit:
        packed = pack(path.read_bytes())
        packed_id = payload_id(path.name, packed)
    elif size <= limit:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        href = f"data:{mime};charset=utf-8;base64,{data}"
    return {
        "name": path.name,
        "path": display_path(path, out_html),
        "href": href,
        "packed": packed,
        "id": packed_id,
        "mime": mime,
        "size": fmt_size(size),
    }


def embedded_downloads(targets: Iterable, out_html) -> list[dict[str, Any]]:
    """:func:`embedded_download` of each target given (None skipped) that exists."""
    out = [embedded_download(t, out_html) for t in targets if t is not None]
    return [d for d in out if d is not None]


def clean_text_columns(df: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    for column in columns:
        if column in df.columns:
            df[column] = df[column].fillna("").astype(str)
    return df


def shown_cell(value: Any, col: Column) -> dict[str, Any]:
    if is_missing(value):
        return {"text": "", "key": "", "num": col.fmt is not None}
    if col.fmt is None:
        return {"text": str(value), "key": str(value), "num": False}
    try:
        v = float(value)
    except (TypeError, ValueError):
        return {"text": str(value), "key": str(value), "num": False}
    return {"text": col.text(v), "key": repr(v), "num": True}


def read_or_derive(path: str | os.PathLike | None, derive) -> pd.DataFrame:
    """A table an aggregate rule derived, read from ``path``; where a results folder predates
    it (``path`` None), ``derive()``: the same rule, run here."""
    return read_optional(path) if path is not None else derive()
