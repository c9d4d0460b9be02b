# The tables and records the report reads.
REPORT_TABLES = {
    "hardware": "results/hardware.json",
    "peaks": "results/peaks.json",
    "sweep": "results/tables/sweep.csv",
    "support": "results/tables/support.csv",
    "kernel_power": "results/tables/kernel_power.csv",
    "kernel_power_classes": "results/tables/kernel_power_classes.csv",
    "decode": "results/tables/decode.csv",
    "expert_m": "results/tables/expert_m.csv",
    "decode_recorder": "results/tables/decode_recorder.csv",
    "decode_crosscheck": "results/tables/decode_crosscheck.csv",
    "decode_graphs_pairs": "results/tables/decode_graphs_pairs.csv",
    "decode_tp_pairs": "results/tables/decode_tp_pairs.csv",
    "step_model": "results/tables/step_model.csv",
}


# Checked in a job of their own: Snakemake deletes a job's old output when the job starts,
# so a damaged table must stop the run before the report job, keeping the old report.
rule check_report_inputs:
    input:
        **REPORT_TABLES,
    output:
        "results/tables/checked.json",
    log:
        "results/logs/check_report_inputs.log",
    conda:
        "../envs/study.yaml"
    script:
        "../scripts/check_tables.py"


if config["compare_baseline"]:

    rule compare:
        input:
            sweep="results/tables/sweep.csv",
            baseline=COMPARE_BASELINE_FILES,
        output:
            table="results/tables/compare.csv",
            spec="results/figures/compare.vl.json",
            html="results/figures/compare.html",
            png="results/figures/compare.png",
        log:
            "results/logs/compare.log",
        conda:
            "../envs/study.yaml"
        params:
            baseline=config["compare_baseline"],
        script:
            "../scripts/compare_runs.py"


# Every question decided once, from every table: the report (and anything else that speaks of
# a question) reads these rows and decides nothing itself. The rankings per size that questions
# 1 and 2 state (fastest.csv) are written here too: their noise needs the comparison.
rule answers:
    input:
        **REPORT_TABLES,
        **COMPARE_TABLE,
    output:
        answers="results/tables/answers.csv",
        fastest="results/tables/fastest.csv",
    log:
        "results/logs/answers.log",
    conda:
        "../envs/study.yaml"
    script:
        "../scripts/write_answers.py"


# Where the measuring jobs' time went: inside measurement, or starts, builds and waits.
rule device_time:
    input:
        unpack(device_time_inputs),
    output:
        "results/tables/device_time.csv",
    log:
        "results/logs/device_time.log",
    conda:
        "../envs/study.yaml"
    script:
        "../scripts/write_device_time.py"


rule report:
    input:
        **REPORT_TABLES,
        **COMPARE_INPUTS,
        device_time="results/tables/device_time.csv",
        answers="results/tables/answers.csv",
        fastest="results/tables/fastest.csv",
        checked="results/tables/checked.json",
        specs=FIGURE_SPECS,
        # A template edit re-renders the report alone.
        templates=REPORT_TEMPLATES,
    output:
        html=report(
            "results/report/index.html",
            caption="../report/captions/study_report.rst",
            category="Study report",
            labels={"page": "HTML report"},
        ),
    log:
        "results/logs/report.log",
    conda:
        "../envs/study.yaml"
    params:
        config_hash=CONFIG_HASH,
        config_text=CONFIG_TEXT,
        figures=FIGURES,
    script:
        "../scripts/render_report.py"
