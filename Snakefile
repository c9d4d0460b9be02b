# GEMM and power study of MoE inference kernels: hardware -> sweeps -> tables -> figures -> report.
# Usage: `snakemake --cores 8` (everything), `snakemake report` (the HTML report),
# `snakemake --forcerun sweep --allowed-rules sweep ...`: see docs/running.md.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"


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
