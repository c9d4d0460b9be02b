# GEMM and power study of MoE inference kernels: hardware -> sweeps -> tables -> figures -> report.
# Usage: `snakemake --cores 8` (everything), `snakemake report` (the HTML report),
# `snakemake --forcerun sweep --allowed-rules sweep ...`: see docs/running.md.
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

min_version("9.0")

# Snakemake reads the config and writes results/ relative to the folder it runs in: run from
# elsewhere (snakemake -s path/Snakefile), it names no config but a path it checked.
if (
    not Path("config/config.yaml").is_file()
    and Path(workflow.basedir, "config").is_dir()
):
    raise WorkflowError(
        f"run the study from its own folder: this folder ({Path.cwd()}) has no "
        f"config/config.yaml, and its results would be written here; cd {workflow.basedir} "
        "and run snakemake there"
    )


configfile: "config/config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"


# On a cluster (profiles/slurm) the rules that only read tables and write tables, figures or
# the report run where Snakemake runs: each takes seconds, and as cluster jobs they spent
# most of their time queued and polled (docs/cluster.md). The measuring and building rules
# are cluster jobs.
localrules:
    all,
    aggregate,
    aggregate_kernel_power,
    aggregate_decode,
    step_model,
    plot,
    check_report_inputs,
    answers,
    device_time,
    report,


# Every output, not the report alone: a plain run rebuilds anything missing or interrupted.
rule all:
    default_target: True
    input:
        study_outputs,


include: "rules/hardware.smk"
include: "rules/peaks.smk"
include: "rules/sweep.smk"
include: "rules/kernel_power.smk"
include: "rules/decode.smk"
include: "rules/step_model.smk"
include: "rules/figures.smk"
include: "rules/report.smk"
