"""Every figure of the study, once: its name and the report section that shows it, in the
report's order. ``rules/common.smk`` builds the figure outputs (``FIGURE_SPECS``) from it and
the report places each figure by it, so a figure is added or moved here and nowhere else.
(No heavy imports: the Snakefile reads this on every run.)"""

from __future__ import annotations

#: (name, section) in the report's order; each backend's latency figure follows, see below.
FIGURES: tuple[tuple[str, str], ...] = (
    ("support", "support"),
    ("efficiency", "other"),
    ("launch_overhead", "other"),
    ("power_timeline", "power"),
    ("power_vs_util", "power"),
    ("decode", "decode"),
    ("decode_latency", "decode"),
    ("decode_frontier", "decode"),
    ("step_model", "decode"),
    ("experts", "experts"),
)
LATENCY = "latency"


def figures(backends) -> dict[str, tuple[str, str | None]]:
    """name -> (section, backend or None) of every figure of a study with these backends."""
    return {
        **{name: (section, None) for name, section in FIGURES},
        **{f"latency_{backend}": (LATENCY, backend) for backend in backends},
    }


def spec_path(name: str) -> str:
    """Where a figure's Vega-Lite spec is written (its HTML and PNG sit beside it)."""
    return f"results/figures/{name}.vl.json"


def in_section(section: str) -> tuple[str, ...]:
    """The names of the figures a section shows, in order."""
    return tuple(name for name, s in FIGURES if s == section)
