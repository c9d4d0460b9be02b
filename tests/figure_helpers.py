"""Drawing a registry figure in a test, apart from tests/helpers.py: these need altair, which
a GPU box without the bundle's report group lacks (tests/gpu import helpers there)."""

from studylib.figure_drawing import draw_figure
from studylib.figure_list import study_figures


def draw(name: str, inputs: dict, stem) -> dict:
    """Draw the registry's figure ``name`` (studylib/figure_list.py) from these files by
    role, as rule plot does, into ``stem``.html, .png and .vl.json; returns its spec."""
    backends = [name.removeprefix("latency_")] if name.startswith("latency_") else []
    figure = study_figures(backends)[name]
    return draw_figure(figure.draw, inputs, figure.args, f"{stem}.html", f"{stem}.png",
                       f"{stem}.vl.json")  # fmt: skip
