rule sweep:
    output:
        "results/sweeps/{backend}.parquet",
    log:
        "results/logs/sweep/{backend}.log",
    benchmark:
        "results/benchmarks/sweep/{backend}.tsv"
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
        fastest="results/tables/fastest.csv",
    log:
        "results/logs/aggregate.log",
    conda:
        "../envs/study.yaml"
    script:
        "../scripts/aggregate_sweeps.py"


rule plot_latency:
    input:
        sweep="results/sweeps/{backend}.parquet",
        peaks="results/peaks.json",
    output:
        html=report(
            "results/figures/latency_{backend}.html",
            caption="../report/captions/latency.rst",
            category="Kernel sweeps",
            subcategory="Latency vs M",
            labels={"backend": "{backend}", "figure": "latency vs M"},
        ),
        png="results/figures/latency_{backend}.png",
        spec="results/figures/latency_{backend}.vl.json",
    log:
        "results/logs/figures/latency_{backend}.log",
    conda:
        "../envs/study.yaml"
    script:
        "../scripts/plot_latency.py"


rule plot_support:
    input:
        support="results/tables/support.csv",
    output:
        html=report(
            "results/figures/support.html",
            caption="../report/captions/support.rst",
            category="Kernel sweeps",
            subcategory="Support matrix",
            labels={"figure": "support matrix"},
        ),
        png="results/figures/support.png",
        spec="results/figures/support.vl.json",
    log:
        "results/logs/figures/support.log",
    conda:
        "../envs/study.yaml"
    script:
        "../scripts/plot_support.py"


rule plot_sweep_table:
    input:
        sweep="results/tables/sweep.csv",
    output:
        html=report(
            "results/figures/{figure}.html",
            caption="../report/captions/sweep_figure.rst",
            category="Kernel sweeps",
            subcategory="Across backends",
            labels={"figure": "{figure}"},
        ),
        png="results/figures/{figure}.png",
        spec="results/figures/{figure}.vl.json",
    log:
        "results/logs/figures/{figure}.log",
    wildcard_constraints:
        figure="efficiency|launch_overhead",
    conda:
        "../envs/study.yaml"
    script:
        "../scripts/plot_sweep_table.py"
