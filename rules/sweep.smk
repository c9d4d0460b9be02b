rule flashinfer_jit:
    output:
        "results/sweeps/flashinfer_jit.json",
    log:
        "results/logs/sweep/flashinfer_jit.log",
    benchmark:
        "results/benchmarks/sweep/flashinfer_jit.tsv"
    # first among the jobs ready at the start: FlashInfer's kernel jobs wait for it
    priority: KERNEL_JOBS_FIRST
    conda:
        "../envs/gpu.yaml"
    # nvcc's parallel builds on a GPU box; elsewhere it builds nothing.
    threads: 8 if STUDY_DEVICE == "cuda" else 1
    params:
        targets=FLASHINFER_JIT_TARGETS,
        versions=versions("flashinfer"),
    script:
        "../scripts/build_flashinfer_jit.py"


rule sweep:
    input:
        jit=flashinfer_jit_input,
    output:
        "results/sweeps/{backend}.parquet",
    log:
        "results/logs/sweep/{backend}.log",
    benchmark:
        "results/benchmarks/sweep/{backend}.tsv"
    priority: sweep_priority
    conda:
        "../envs/gpu.yaml"
    resources:
        gpu=1,
    params:
        plan=backend_plan,
    script:
        "../scripts/run_sweep.py"


rule aggregate:
    input:
        sweeps=expand("results/sweeps/{backend}.parquet", backend=BACKENDS),
        peaks="results/peaks.json",
    output:
        sweep=report(
            "results/tables/sweep.csv",
            caption="../report/captions/sweep_table.rst",
            category="Tables",
            labels={"table": "sweep"},
        ),
        support="results/tables/support.csv",
    log:
        "results/logs/aggregate.log",
    conda:
        "../envs/study.yaml"
    params:
        plans=lambda wildcards: plan_hashes(
            "results/sweeps/{backend}.parquet", backend_plan, BACKENDS
        ),
    script:
        "../scripts/aggregate_sweeps.py"
