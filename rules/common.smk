import sys
from pathlib import Path
from types import SimpleNamespace

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import validate
from snakemake_interface_executor_plugins.settings import ExecMode

# The study's library lives under scripts/ beside the entry scripts.
sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))

from studylib.core.io import stable_hash  # noqa: E402
from studylib.figure_list import (  # noqa: E402
    figures,
    spec_path,
    study_figures,
    write_caption_template,
)
from studylib.instruments.hardware import job_versions, nvml_driver  # noqa: E402
from studylib.core.config_cli import (  # noqa: E402
    CliValueError,
    apply_cli_values,
    cli_values,
)
from studylib.core.config import (  # noqa: E402
    ConfigFileError,
    config_keys,
    config_text,
    config_warnings,
    empty_overrides,
    enabled_backends,
    key_problems,
    read_config_file,
    schema_problem,
    strict_schema_problem,
    study_device,
)
from studylib.core.results_folder import results_problems  # noqa: E402
from studylib.stages.decode.decode_plan import (  # noqa: E402
    counted_gpus,
    decode_plan,
    decode_variants,
    served_models,
)
from studylib.stages.kernel_power.kernel_power_plan import (  # noqa: E402
    kernel_power_plan,
)
from studylib.stages.sweep.sweep_plan import (  # noqa: E402
    baseline_files,
    flashinfer_jit_targets,
    own_results_problem,
    sweep_plan,
)
from studylib.study_config import check_config  # noqa: E402
from studylib.device_time import DECODE_FILES as DEVICE_TIME_DECODE_FILES  # noqa: E402
from studylib.snakemake_run import (  # noqa: E402
    check_before_jobs,
    join_run,
    pass_interrupts_on,
    term_stops_gracefully,
)

# This Snakemake named to its jobs (each dies with it and records it beside the device it
# holds), and Snakemake's locks left by a killed run removed when no other Snakemake runs here
# (studylib/snakemake_run.py).
for _line in join_run(main=workflow.exec_mode == ExecMode.DEFAULT):
    logger.warning(_line)


# Before the first job, before Snakemake removes the outputs of the jobs it will run: a
# measuring job of another Snakemake making one of them stops the run here; one left running
# by a killed Snakemake is waited for, else the run stops here.
onstart:
    _busy = check_before_jobs(
        {str(f) for job in workflow.dag.needrun_jobs() for f in job.output},
        say=logger.warning,
    )
    if _busy:
        raise WorkflowError(_busy)
    pass_interrupts_on()  # `kill -INT` of Snakemake reaches its jobs, as Ctrl-C does
    term_stops_gracefully(workflow.scheduler)  # `kill -TERM` never hangs Snakemake


SCHEMA = str(Path(workflow.basedir) / "config" / "schema.yaml")

# Snakemake 9 plans the study with --cores 0 (make study CORES=0) and then waits for a core
# that never comes, printing nothing more.
if workflow.resource_settings.cores == 0:
    raise WorkflowError(
        "--cores 0 runs no job: Snakemake would plan the study and wait for a core forever; "
        "give --cores 1 or more, or --cores all (make study CORES=8)"
    )

# --config values typed once, by the schema, from the words given (Snakemake's own reading
# drops quotes and leaves nested values strings): a quoted "0755" stays a string.
try:
    apply_cli_values(config, cli_values(workflow.config_settings.config_args, SCHEMA))
except CliValueError as exc:
    raise WorkflowError(f"invalid config: {exc}") from None
# Keys that are no names (123:, on:) would fail deep in the workflow as a Python error.
_problems = key_problems(config)
if _problems:
    raise WorkflowError("invalid config: " + "; ".join(_problems))
# An override's `{}` removes nothing from the merged config: say so rather than ignore it.
# Every config file is read again by the study's reader: a key given twice (which YAML keeps
# the last of, silently) is refused with its lines.
_CONFIG_KEYS = config_keys(SCHEMA)
try:
    read_config_file(Path(workflow.basedir, "config", "config.yaml"), _CONFIG_KEYS)
    _overrides = [
        (str(path), read_config_file(path, _CONFIG_KEYS))
        for path in workflow.config_settings.configfiles or []
    ]
except ConfigFileError as exc:
    raise WorkflowError(str(exc)) from None
_overrides.append(("--config", workflow.config_settings.config or {}))
_problems = [
    f"{source}: {problem}"
    for source, override in _overrides
    for problem in empty_overrides(override, config)
]
if _problems:
    raise WorkflowError("invalid config: " + "; ".join(_problems))
# One clear message naming the bad key, before any job runs.
try:
    validate(config, SCHEMA, set_default=True)
except WorkflowError:
    raise WorkflowError(f"invalid config: {schema_problem(config, SCHEMA)}") from None
# What JSON Schema lets through: M: 1.0 (a float reaching the kernels), .nan, .inf.
_problem = strict_schema_problem(config, SCHEMA)
if _problem:
    raise WorkflowError(f"invalid config: {_problem}")
_problems = check_config(config)
if _problems:
    raise WorkflowError("invalid config: " + "; ".join(_problems))
for _warning in config_warnings(config):
    logger.warning(f"config warning: {_warning}")

BACKENDS = enabled_backends(config)
# The device the DAG is planned for (auto: a GPU that NVML sees): it picks the decode
# variants (SGLang on GPUs, transformers on CPUs by default).
STUDY_DEVICE = study_device(config)
DECODE_VARIANTS = decode_variants(config, STUDY_DEVICE)
SERVED_MODELS = served_models(config, STUDY_DEVICE)
# Backends with kernel-power points (and enabled).
POWER_BACKENDS = [b for b in BACKENDS if config["kernel_power"]["backends"].get(b)]
CONFIG_HASH = stable_hash(config)
CONFIG_TEXT = config_text(config)
# Entries of results/ no job can read or replace (a link that loops or points nowhere, a
# folder where a file goes): one line each, before Snakemake plans (and trips over) them.
_problems = results_problems(
    "results", [f"results/decode/{variant}" for variant in DECODE_VARIANTS]
)
if _problems:
    raise WorkflowError("results folder: " + "; ".join(_problems))
# Every figure of the study (studylib/figure_list.py), drawn by rule plot (rules/figures.smk);
# FIGURES places each in the report, FIGURE_SPECS are what the report embeds and `all` builds
# (each with its HTML and PNG).
STUDY_FIGURES = study_figures(BACKENDS, POWER_BACKENDS)
FIGURES = figures(BACKENDS)
FIGURE_SPECS = [spec_path(name) for name in FIGURES]
# A configured baseline (compare_baseline) adds rule compare and the report's "Before and
# after" section; its files are inputs, so a new baseline reruns the comparison.
COMPARE_INPUTS = {}
COMPARE_TABLE = {}
if config["compare_baseline"]:
    try:
        COMPARE_BASELINE_FILES = baseline_files(config["compare_baseline"])
    except FileNotFoundError as exc:
        raise WorkflowError(f"invalid config: compare_baseline: {exc}") from None
    _problem = own_results_problem(COMPARE_BASELINE_FILES)
    if _problem:
        raise WorkflowError(f"invalid config: compare_baseline: {_problem}")
    COMPARE_TABLE = {"compare": "results/tables/compare.csv"}
    COMPARE_INPUTS = {
        **COMPARE_TABLE,
        "compare_spec": "results/figures/compare.vl.json",
    }
REPORT_TEMPLATES = sorted(
    str(path) for path in (Path(workflow.basedir) / "report" / "templates").glob("*")
)


wildcard_constraints:
    backend="|".join(BACKENDS),
    variant="|".join(DECODE_VARIANTS) or "no-variant",
    weights="bf16|fp8",


# The driver, CUDA and library versions the measurements depend on: a params rerun trigger
# (an upgrade reruns hardware, peaks and the upgraded backend's sweep and power jobs only).
DRIVER = nvml_driver()


def versions(backend=None):
    return job_versions(backend, DRIVER)


def backend_plan(wildcards):
    """Only this backend's slice of the config and versions: their change reruns this
    backend alone (and keys its sweep journal: points measured by other versions are not
    reused)."""
    return {
        **sweep_plan(config, wildcards.backend),
        "versions": versions(wildcards.backend),
    }


def plan_hashes(pattern, plan, names):
    """{path: plan hash} of a measuring rule's outputs (``pattern`` of one wildcard, ``plan``
    its params.plan function): its aggregate refuses a table written for another plan.
    """
    key = pattern.split("{")[1].split("}")[0]
    return {
        pattern.format(**{key: name}): stable_hash(plan(SimpleNamespace(**{key: name})))
        for name in names
    }


# The GPU's order: the kernel jobs (sweeps, kernel power, peaks, and the FlashInfer JIT build
# FlashInfer's jobs wait for) before the decode servers.
# The sgl-kernel jobs compile SGLang's own Triton kernels and JIT modules into the caches its
# server reads at start: on the H200 (2026-12-04, examples/h200-2026-12-04-jit-default) the
# FP8 server that Snakemake started after them (and the bf16 server) captured its prefill
# graphs in 10 s, the same server on a box where nothing had run in 131 s, and the bf16
# server, started before them, in 82 s (73 s of them on its first graph's size).
KERNEL_JOBS_FIRST = 1
# The first GPU job runs beside the CPU's JIT builds (rules flashinfer_jit, server_jit): the
# sweep that compiles least on the CPU goes first. On the H200 (2026-12-05,
# examples/h200-2026-12-05-partial) the sgl-kernel sweep, which compiles SGLang's Triton
# kernels, ran first, beside the FlashInfer build: its FP4 points' refusals (an import and a
# search, no GPU work) took 13.5 s against 7.5 s on 2026-12-04 with no build beside it, the
# job 139 s against 89, and the FlashInfer build 125 s against 85 s beside the torch sweep.
BESIDE_THE_BUILDS = "torch"


def sweep_priority(wildcards):
    return KERNEL_JOBS_FIRST + (wildcards.backend == BESIDE_THE_BUILDS)


# FlashInfer's JIT modules, built on the CPU before its GPU jobs and beside another's (rule
# flashinfer_jit: about 79 s of an H200's idle time at the FlashInfer sweep's first calls).
FLASHINFER_JIT_TARGETS = flashinfer_jit_targets(config)


def flashinfer_jit_input(wildcards):
    """FlashInfer's jobs wait for its modules' build, which reruns only with what reruns
    them (flashinfer's version, its sweep's ops)."""
    if wildcards.backend != "flashinfer" or not FLASHINFER_JIT_TARGETS:
        return []
    return [rules.flashinfer_jit.output[0]]


def backend_power_plan(wildcards):
    return {
        **kernel_power_plan(config, wildcards.backend),
        "versions": versions(wildcards.backend),
    }


def study_outputs(wildcards):
    """Every output of the study, so that a plain run rebuilds whatever is missing: without
    them, Snakemake skips a missing file when what is built from it looks up to date."""
    models = {
        path
        for variant in DECODE_VARIANTS
        for path in decode_inputs(SimpleNamespace(variant=variant)).values()
    }
    # Every figure in its three files.
    figures = [
        spec.removesuffix(".vl.json") + ext
        for spec in FIGURE_SPECS
        for ext in (".html", ".png", ".vl.json")
    ]
    return [
        *rules.hardware.output,
        *rules.peaks.output,
        *expand(rules.sweep.output, backend=BACKENDS),
        *expand(list(rules.kernel_power.output), backend=POWER_BACKENDS),
        *sorted(models),
        *expand(list(rules.decode.output), variant=DECODE_VARIANTS),
        *rules.aggregate.output,
        *rules.aggregate_kernel_power.output,
        *rules.aggregate_decode.output,
        *rules.step_model.output,
        *figures,
        *rules.check_report_inputs.output,
        *rules.answers.output,
        *rules.device_time.output,
        *rules.report.output,
    ]


def device_time_inputs(wildcards):
    """Each measuring job's records and Snakemake's benchmark file of it (rule device_time)."""
    decode_files = DEVICE_TIME_DECODE_FILES
    # The JIT builds beside the GPU jobs, stated apart: each record and its benchmark file.
    builds = {
        path: expand(rules.server_jit.benchmark, weights=Path(path).stem)[0]
        for variant in DECODE_VARIANTS
        for key, path in decode_inputs(SimpleNamespace(variant=variant)).items()
        if key == "jit"
    }
    if FLASHINFER_JIT_TARGETS:
        builds[rules.flashinfer_jit.output[0]] = rules.flashinfer_jit.benchmark
    return {
        "sweeps": expand("results/sweeps/{backend}.parquet", backend=BACKENDS),
        "power": expand(
            "results/kernel_power/{backend}.parquet", backend=POWER_BACKENDS
        ),
        "decode": [
            f"results/decode/{v}/{f}" for v in DECODE_VARIANTS for f in decode_files
        ],
        "benchmarks": [
            *expand("results/benchmarks/sweep/{backend}.tsv", backend=BACKENDS),
            *expand("results/benchmarks/kernel_power/{b}.tsv", b=POWER_BACKENDS),
            *expand("results/benchmarks/decode/{variant}.tsv", variant=DECODE_VARIANTS),
            "results/benchmarks/peaks.tsv",
        ],
        "builds": list(builds),
        "build_benchmarks": list(builds.values()),
    }


def step_geometry():
    """The served model's geometry on the study's device (the step model's layers, experts
    and shared experts)."""
    model = config["decode"].get("model", {})
    return model.get(STUDY_DEVICE, model) if isinstance(model, dict) else {}


def variant_decode_plan(wildcards):
    return decode_plan(config, wildcards.variant)


def decode_gpus(wildcards):
    return counted_gpus(config, wildcards.variant, STUDY_DEVICE)


def decode_inputs(wildcards):
    """The model the study builds for the variant: the local model with weights (transformers
    engine) or the config-only model of the variant's weight type (dummy weights)."""
    variant = config["decode"]["variants"][wildcards.variant]
    if variant["model"] == "local":
        return {"model": "results/decode/model"}
    if variant["model"] == "dummy":
        model = {"model": f"results/decode/served_model/{variant['weights']}"}
        if variant["engine"] == "sglang":
            # the modules its start would build (rule server_jit), built on the CPU first
            model["jit"] = f"results/decode/server_jit/{variant['weights']}.json"
        return model
    return {}


def figure_inputs(wildcards):
    """The figure's tables by role, and the files it is redrawn after (``after``)."""
    figure = STUDY_FIGURES[wildcards.figure]
    return {
        **{role: list(paths) if isinstance(paths, tuple) else paths
           for role, paths in figure.inputs.items()},
        **({"after": list(figure.after)} if figure.after else {}),
    }  # fmt: skip


def figure_report(attribute):
    """The figure's report category, subcategory or labels, for report()."""
    return lambda wildcards: getattr(STUDY_FIGURES[wildcards.figure], attribute)


# Snakemake takes one caption file per rule: the registry's captions in one template, each
# rendered for its own figures, written beside Snakemake's own records (figure_list.py).
FIGURE_CAPTION = write_caption_template(
    STUDY_FIGURES.values(),
    workflow.basedir,
    Path(".snakemake", "study", "figure_captions.rst"),
)
