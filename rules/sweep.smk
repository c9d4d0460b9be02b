rule sweep:
    output:
        "results/sweeps/{backend}.parquet",
    log:
        "results/logs/sweep/{backend}.log",
    benchmark:
        "results/benchmarks/sweep/{backend}.tsv"
    conda:
        "../envs/sweep.yaml"
    resources:
        gpu=1,
    params:
        plan=backend_plan,
    script:
        "../scripts/run_sweep.py"
