rule peaks:
    output:
        "results/peaks.json",
    log:
        "results/logs/peaks.log",
    benchmark:
        "results/benchmarks/peaks.tsv"
    priority: KERNEL_JOBS_FIRST
    conda:
        "../envs/gpu.yaml"
    resources:
        gpu=1,
    params:
        device=config["device"],
        versions=versions(),  # a driver, CUDA or torch upgrade measures the peaks again
    script:
        "../scripts/measure_peaks.py"
