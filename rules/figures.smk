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


rule plot_decode:
    input:
        decode="results/tables/decode.csv",
    output:
        html=report(
            "results/figures/decode.html",
            caption="../report/captions/decode.rst",
            category="Decode power",
            labels={"figure": "decode power vs concurrency"},
        ),
        png="results/figures/decode.png",
        spec="results/figures/decode.vl.json",
    log:
        "results/logs/figures/decode.log",
    conda:
        "../envs/study.yaml"
    script:
        "../scripts/plot_decode.py"


rule plot_decode_views:
    input:
        decode="results/tables/decode.csv",
    output:
        html=report(
            "results/figures/decode_{decode_fig}.html",
            caption="../report/captions/decode_views.rst",
            category="Decode power",
            labels={"figure": "decode {decode_fig}"},
        ),
        png="results/figures/decode_{decode_fig}.png",
        spec="results/figures/decode_{decode_fig}.vl.json",
    log:
        "results/logs/figures/decode_{decode_fig}.log",
    wildcard_constraints:
        decode_fig="latency|frontier",
    conda:
        "../envs/study.yaml"
    params:
        kind=lambda wildcards: f"decode_{wildcards.decode_fig}",
    script:
        "../scripts/plot_decode.py"


rule plot_experts:
    input:
        expert_m="results/tables/expert_m.csv",
    output:
        html=report(
            "results/figures/experts.html",
            caption="../report/captions/experts.rst",
            category="Decode power",
            labels={"figure": "per-expert M"},
        ),
        png="results/figures/experts.png",
        spec="results/figures/experts.vl.json",
    log:
        "results/logs/figures/experts.log",
    conda:
        "../envs/study.yaml"
    params:
        kind="experts",
    script:
        "../scripts/plot_decode.py"
