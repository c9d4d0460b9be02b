rule kernel_power:
    output:
        windows="results/kernel_power/{backend}.parquet",
        timeline="results/kernel_power/{backend}_timeline.parquet",
    log:
        "results/logs/kernel_power/{backend}.log",
    benchmark:
        "results/benchmarks/kernel_power/{backend}.tsv"
    conda:
        "../envs/gpu.yaml"
    resources:
        gpu=config["kernel_power"]["gpus"],
    params:
        plan=backend_power_plan,
    script:
        "../scripts/run_kernel_power.py"


rule aggregate_kernel_power:
    input:
        windows=expand("results/kernel_power/{backend}.parquet", backend=POWER_BACKENDS),
    output:
        table=report(
            "results/tables/kernel_power.csv",
            caption="../report/captions/kernel_power_table.rst",
            category="Tables",
            labels={"table": "kernel power"},
        ),
        classes="results/tables/kernel_power_classes.csv",
    log:
        "results/logs/aggregate_kernel_power.log",
    conda:
        "../envs/study.yaml"
    script:
        "../scripts/aggregate_kernel_power.py"


rule plot_power:
    input:
        windows="results/tables/kernel_power.csv",
        timelines=expand(
            "results/kernel_power/{backend}_timeline.parquet", backend=POWER_BACKENDS
        ),
    output:
        html=report(
            "results/figures/power_{power_fig}.html",
            caption="../report/captions/power_figure.rst",
            category="Kernel power",
            labels={"figure": "power {power_fig}"},
        ),
        png="results/figures/power_{power_fig}.png",
        spec="results/figures/power_{power_fig}.vl.json",
    log:
        "results/logs/figures/power_{power_fig}.log",
    wildcard_constraints:
        power_fig="timeline|vs_util",
    conda:
        "../envs/study.yaml"
    params:
        kind=lambda wildcards: {"timeline": "timeline", "vs_util": "power_vs_util"}[
            wildcards.power_fig
        ],
    script:
        "../scripts/plot_power.py"
