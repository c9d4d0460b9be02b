# Where a decode step's time and energy go: the kernel tables predict the server's step.
rule step_model:
    input:
        sweep="results/tables/sweep.csv",
        decode="results/tables/decode.csv",
        kernel_power="results/tables/kernel_power.csv",
        breakdowns=expand(
            "results/decode/{variant}/breakdown.csv", variant=DECODE_VARIANTS
        ),
    output:
        table=report(
            "results/tables/step_model.csv",
            caption="../report/captions/step_model.rst",
            category="Tables",
            labels={"table": "step model"},
        ),
    log:
        "results/logs/step_model.log",
    conda:
        "../envs/study.yaml"
    params:
        geometry=step_geometry(),
        mode="cold",
    script:
        "../scripts/build_step_model.py"
