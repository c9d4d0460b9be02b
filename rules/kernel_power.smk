rule kernel_power:
    input:
        jit=flashinfer_jit_input,
    output:
        windows="results/kernel_power/{backend}.parquet",
        timeline="results/kernel_power/{backend}_timeline.parquet",
    log:
        "results/logs/kernel_power/{backend}.log",
    benchmark:
        "results/benchmarks/kernel_power/{backend}.tsv"
    priority: KERNEL_JOBS_FIRST
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
        # the GPUs' maximum SM clocks: a window's clock is held against its GPU's
        hardware="results/hardware.json",
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
    params:
        plans=lambda wildcards: plan_hashes(
            "results/kernel_power/{backend}.parquet",
            backend_power_plan,
            POWER_BACKENDS,
        ),
    script:
        "../scripts/aggregate_kernel_power.py"
