rule sweep:
    output:
        "results/sweeps/{backend}.parquet",
    log:
        "results/logs/sweep/{backend}.log",
    params:
        plan=backend_plan,
    resources:
        gpu=1,
    script:
        "../scripts/run_sweep.py"
