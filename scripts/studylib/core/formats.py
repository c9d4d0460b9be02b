"""How numbers and columns are shown: the report's tables, the figures' tooltips and the
answers' sentences share these formats (:class:`Column`, :func:`fmt_us`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """How a column is shown. ``label``: its header in the report's tables (``None``: shown
    only in tooltips); ``fmt``: its cells' format, a spec that Python's ``format`` and Vega's
    d3-format read alike (``None``: text; ``"us"``: :func:`fmt_us` without its unit);
    ``unit``: written after each formatted number; ``tip`` and ``tip_fmt``: the figures'
    tooltip title and format, where they differ from ``label`` and ``fmt``."""

    label: str | None
    fmt: str | None = None
    unit: str = ""
    tip: str | None = None
    tip_fmt: str | None = None

    @property
    def title(self) -> str:
        """The tooltip's title."""
        return self.tip or self.label or ""

    @property
    def tip_format(self) -> str:
        """The tooltip's d3 format ("" for text)."""
        return self.tip_fmt if self.tip_fmt is not None else self.fmt or ""

    def text(self, value: float) -> str:
        """A number as this column's cells show it."""
        return fmt_number(value, self.fmt or ".4g") + self.unit


def fmt_us(us: float, unit: bool = True) -> str:
    """Microseconds with sensible precision: with ``unit`` as the answers write them (in ms
    from 1 ms on), else as a table cell under a "µs" header."""
    if not unit:
        return f"{us:.2f}" if us < 10 else f"{us:.1f}" if us < 100 else f"{us:,.0f}"
    if us >= 10000:
        return f"{us / 1000:.1f} ms"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    if us >= 100:
        return f"{us:.0f} µs"
    if us >= 1:
        return f"{us:.1f} µs"
    return f"{us:.2f} µs"


def fmt_number(value: float, fmt: str) -> str:
    """``value`` in format ``fmt`` (a :class:`Column`'s): "d" whole, "us" microseconds."""
    if fmt == "d":
        return f"{int(value)}"
    if fmt == "us":
        return fmt_us(value, unit=False)
    return format(value, fmt)


def tooltips(shown: dict[str, Column], columns) -> list[tuple[str, str, str]]:
    """Tooltip rows of ``columns`` of a table shown as ``shown`` ({column: Column}): (column,
    title, d3 format; "" for text)."""
    return [(c, shown[c].title, shown[c].tip_format) for c in columns]


def labelled(shown: dict[str, Column]) -> list[tuple[str, Column]]:
    """The report's columns of a table shown as ``shown``, in order: (column, Column); those
    without a label are shown in tooltips only."""
    return [(c, col) for c, col in shown.items() if col.label is not None]


def shown_as_text(*names: str) -> dict[str, Column]:
    """Text columns shown under their own names."""
    return {name: Column(name) for name in names}


#: A point's key columns, shown as text in every table of points.
KEY_SHOWN = shown_as_text("backend", "impl", "op", "dtype", "shape")
#: Clocks, clocks-event reasons and GPM utilisation: the same in every power table.
CLOCKS_SHOWN = {
    "sm_clock_mhz": Column("SM MHz", ".0f", tip="SM clock (MHz)"),
    "throttle_reasons": Column("reasons"),
    "sm_util": Column("SM util %", ".0f", tip="SM util (%)"),
    "tensor_util": Column("tensor util %", ".0f", tip="tensor util (%)"),
    "dram_util": Column("DRAM util %", ".0f", tip="DRAM util (%)"),
}
ENERGY_GAP_SHOWN = Column("counter vs samples gap %", "+.1f", tip="counter vs samples gap (%)")


def error_line(exc: BaseException, limit: int = 500) -> str:
    """An exception as one row's error: its type and its message's last line (a build tool's
    long output ends with what failed)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:limit]
