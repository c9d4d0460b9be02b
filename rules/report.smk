rule report:
    input:
        hardware="results/hardware.json",
        peaks="results/peaks.json",
        sweep="results/tables/sweep.csv",
        support="results/tables/support.csv",
        kernel_power="results/tables/kernel_power.csv",
        decode="results/tables/decode.csv",
        expert_m="results/tables/expert_m.csv",
        decode_recorder="results/tables/decode_recorder.csv",
        specs=[
            "results/figures/support.vl.json",
            "results/figures/efficiency.vl.json",
            "results/figures/launch_overhead.vl.json",
            "results/figures/power_timeline.vl.json",
            "results/figures/power_vs_util.vl.json",
            "results/figures/decode.vl.json",
            "results/figures/decode_latency.vl.json",
            "results/figures/decode_frontier.vl.json",
            "results/figures/experts.vl.json",
            *expand("results/figures/latency_{backend}.vl.json", backend=BACKENDS),
        ],
        # A template edit re-renders the report alone.
        templates=REPORT_TEMPLATES,
    output:
        html="results/report/index.html",
    log:
        "results/logs/report.log",
    conda:
        "../envs/study.yaml"
    params:
        config_hash=CONFIG_HASH,
        config_text=CONFIG_TEXT,
    script:
        "../scripts/render_report.py"
