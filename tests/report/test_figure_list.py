"""The figure registry (studylib/figure_list.py): every figure declared once, drawn by rule plot
through scripts/plot_figure.py, its caption rendered by Snakemake's report as its own file."""

import inspect
import runpy
from types import SimpleNamespace

import jinja2
import pandas as pd
import pytest
from helpers import ROOT
from snakemake.iocontainers import InputFiles, Log, OutputFiles, Params, Wildcards
from studylib.core.table_registry import RECORDS, registered_tables
from studylib.figure_drawing import drawing_function, read_input
from studylib.figure_list import (
    BACKEND_SWEEP,
    BACKEND_TIMELINE,
    caption_template,
    figures,
    in_section,
    study_figures,
)
from test_sweep_figures import check_outputs

BACKENDS = ("torch", "flashinfer", "sgl_kernel")
REGISTRY = study_figures(BACKENDS, ("torch", "sgl_kernel"))


def test_the_report_places_the_figures_as_before():
    """The report rule's ``figures`` param: the same value as before the registry."""
    assert figures(["torch", "flashinfer"]) == {
        "backends": ("fastest", None), "bound": ("bound", None),
        "support": ("support", None), "efficiency": ("other", None),
        "launch_overhead": ("other", None), "power_verdicts": ("power", None),
        "power_timeline": ("power", None),
        "power_vs_util": ("power", None), "decode": ("decode", None),
        "decode_latency": ("decode", None), "decode_frontier": ("decode", None),
        "step_model": ("decode", None), "experts": ("experts", None),
        "latency_torch": ("latency", "torch"), "latency_flashinfer": ("latency", "flashinfer"),
    }  # fmt: skip
    assert in_section("decode") == ("decode", "decode_latency", "decode_frontier", "step_model")
    assert in_section("power") == ("power_verdicts", "power_timeline", "power_vs_util")


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_figure_is_drawn_by_a_function_of_its_roles_with_a_caption(name):
    figure = REGISTRY[name]
    assert (ROOT / figure.caption).is_file()
    parameters = inspect.signature(drawing_function(figure.draw)).parameters
    assert set(figure.inputs) | set(figure.args) <= set(parameters)
    required = {n for n, p in parameters.items() if p.default is inspect.Parameter.empty}
    assert required <= set(figure.inputs) | set(figure.args)
    assert figure.category and figure.labels["figure"]


def test_every_input_is_a_registered_table_or_record():
    """The registry names its inputs' paths (it imports no table schema: the Snakefile reads
    it); they are the table registry's paths, the ones the rules write."""
    paths = {t.path for t in registered_tables()} | {f"results/{n}.json" for n in RECORDS}
    assert {BACKEND_SWEEP, BACKEND_TIMELINE} <= paths
    for figure in REGISTRY.values():
        for value in (*figure.inputs.values(), figure.after):
            for path in [value] if isinstance(value, str) else value:
                for backend in BACKENDS:
                    path = path.replace(f"/{backend}.", "/{backend}.")
                    path = path.replace(f"/{backend}_", "/{backend}_")
                assert path in paths, (figure.name, path)


def test_one_backends_latency_figure_reads_that_backends_sweep_alone():
    figure = REGISTRY["latency_flashinfer"]
    assert figure.inputs == {"sweep": "results/sweeps/flashinfer.parquet",
                             "peaks": "results/peaks.json"}  # fmt: skip
    assert figure.args == {"backend": "flashinfer"}
    assert figure.labels == {"backend": "flashinfer", "figure": "latency vs M"}
    # The power figures are redrawn with the timelines of the backends with power points.
    timelines = ("results/kernel_power/torch_timeline.parquet",
                 "results/kernel_power/sgl_kernel_timeline.parquet")  # fmt: skip
    assert REGISTRY["power_timeline"].inputs["timeline"] == timelines
    assert REGISTRY["power_vs_util"].after == timelines


def test_the_caption_template_renders_each_figures_caption_as_its_file_does():
    """Snakemake renders a rule's one caption file with trim_blocks and lstrip_blocks, its
    links to the report's sections appended (here: LINKS)."""
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    links = "\n\n.. _LINKS: here\n"
    template = env.from_string(caption_template(REGISTRY.values(), ROOT) + links)
    for name, figure in REGISTRY.items():
        smk = SimpleNamespace(wildcards=SimpleNamespace(figure=name),
                              params=SimpleNamespace(args=figure.args))  # fmt: skip
        own = env.from_string((ROOT / figure.caption).read_text() + links).render(snakemake=smk)
        assert template.render(snakemake=smk) == own, name
        assert own.strip()
    smk = SimpleNamespace(wildcards=SimpleNamespace(figure="latency_torch"),
                          params=SimpleNamespace(args={"backend": "torch"}))  # fmt: skip
    assert "for the **torch**" in template.render(snakemake=smk)


def test_read_input_reads_a_record_a_table_or_several(tmp_path):
    (tmp_path / "peaks.json").write_text('{"copy_gbps": 1.0}')
    frames = [pd.DataFrame({"t": [1.0]}), pd.DataFrame(), pd.DataFrame({"t": [2.0]})]
    for i, frame in enumerate(frames):
        frame.to_parquet(tmp_path / f"{i}.parquet")
    assert read_input(tmp_path / "peaks.json") == {"copy_gbps": 1.0}
    assert read_input(tmp_path / "0.parquet")["t"].tolist() == [1.0]
    several = read_input([tmp_path / f"{i}.parquet" for i in range(3)])
    assert several["t"].tolist() == [1.0, 2.0]
    assert read_input([]).empty and read_input(None).empty


def run_entry(tmp_path, name: str, inputs: dict) -> dict:
    """scripts/plot_figure.py as rule plot runs it for figure ``name``."""
    figure = REGISTRY[name]
    stem = tmp_path / name
    smk = type("Smk", (), {})()
    smk.input = InputFiles(fromdict=inputs)
    smk.output = OutputFiles(
        fromdict={"html": f"{stem}.html", "png": f"{stem}.png", "spec": f"{stem}.vl.json"}
    )
    smk.wildcards = Wildcards(fromdict={"figure": name})
    smk.params = Params(
        fromdict={"draw": figure.draw, "roles": list(figure.inputs), "args": figure.args}
    )
    smk.log = Log()
    smk.rule = "plot"
    runpy.run_path(str(ROOT / "scripts" / "plot_figure.py"), init_globals={"snakemake": smk})
    return check_outputs(tmp_path, name)


def test_the_entry_script_draws_a_figure_from_one_table_or_several(tmp_path):
    from test_decode_figures import make_expert_m
    from test_kernel_power_figures import make_timeline, make_windows

    windows = make_windows()
    csv = tmp_path / "kernel_power.csv"
    windows.to_csv(csv, index=False)
    timelines = []
    for backend, group in make_timeline(windows).groupby("backend"):
        timelines.append(str(tmp_path / f"{backend}_timeline.parquet"))
        group.to_parquet(timelines[-1])
    spec = run_entry(tmp_path, "power_timeline", {"windows": str(csv), "timeline": timelines})
    assert len(spec["vconcat"]) == 2  # a panel per backend
    make_expert_m().to_csv(tmp_path / "expert_m.csv", index=False)
    spec = run_entry(tmp_path, "experts", {"expert_m": str(tmp_path / "expert_m.csv")})
    assert len(spec["vconcat"]) == 2
