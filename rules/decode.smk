rule decode_model:
    output:
        directory("results/decode/model"),
    log:
        "results/logs/decode/model.log",
    benchmark:
        "results/benchmarks/decode/model.tsv"
    conda:
        "../envs/gpu.yaml"
    resources:
        gpu=1,
    params:
        geometry=config["decode"].get("model", {}),
        device=config["device"],
    script:
        "../scripts/build_decode_model.py"


rule served_model:
    output:
        directory("results/decode/served_model/{weights}"),
    log:
        "results/logs/decode/served_model_{weights}.log",
    conda:
        "../envs/study.yaml"
    params:
        geometry=config["decode"].get("model", {}),
        device=STUDY_DEVICE,
    script:
        "../scripts/write_served_model.py"


rule server_jit:
    input:
        model="results/decode/served_model/{weights}",
    output:
        "results/decode/server_jit/{weights}.json",
    log:
        "results/logs/decode/server_jit_{weights}.log",
    benchmark:
        "results/benchmarks/decode/server_jit_{weights}.tsv"
    # beside the first GPU jobs, long before a decode server starts
    priority: KERNEL_JOBS_FIRST
    conda:
        "../envs/gpu.yaml"
    # nvcc's parallel builds on a GPU box; elsewhere it builds nothing.
    threads: 4 if STUDY_DEVICE == "cuda" else 1
    params:
        versions=versions("all"),
    script:
        "../scripts/build_server_jit.py"


rule decode:
    input:
        unpack(decode_inputs),
    output:
        summary="results/decode/{variant}/summary.csv",
        requests="results/decode/{variant}/requests.parquet",
        windows="results/decode/{variant}/windows.parquet",
        timeline="results/decode/{variant}/power_timeline.parquet",
        server_log="results/decode/{variant}/server.log",
        run="results/decode/{variant}/run.json",
        expert_m="results/decode/{variant}/expert_m.csv",
        recorder="results/decode/{variant}/recorder.csv",
        breakdown="results/decode/{variant}/breakdown.csv",
        crosscheck="results/decode/{variant}/crosscheck.csv",
    log:
        "results/logs/decode/{variant}.log",
    benchmark:
        "results/benchmarks/decode/{variant}.tsv"
    conda:
        "../envs/gpu.yaml"
    resources:
        gpu=decode_gpus,
    params:
        plan=variant_decode_plan,
    script:
        "../scripts/run_decode.py"


rule aggregate_decode:
    input:
        summaries=expand(
            "results/decode/{variant}/summary.csv", variant=DECODE_VARIANTS
        ),
        expert_m=expand(
            "results/decode/{variant}/expert_m.csv", variant=DECODE_VARIANTS
        ),
        recorder=expand(
            "results/decode/{variant}/recorder.csv", variant=DECODE_VARIANTS
        ),
        crosscheck=expand(
            "results/decode/{variant}/crosscheck.csv", variant=DECODE_VARIANTS
        ),
        peaks="results/peaks.json",
    output:
        decode=report(
            "results/tables/decode.csv",
            caption="../report/captions/decode_table.rst",
            category="Tables",
            labels={"table": "decode"},
        ),
        expert_m="results/tables/expert_m.csv",
        recorder="results/tables/decode_recorder.csv",
        graphs_pairs="results/tables/decode_graphs_pairs.csv",
        tp_pairs="results/tables/decode_tp_pairs.csv",
        crosscheck=report(
            "results/tables/decode_crosscheck.csv",
            caption="../report/captions/decode_crosscheck.rst",
            category="Tables",
            labels={"table": "decode cross-check"},
        ),
    log:
        "results/logs/aggregate_decode.log",
    conda:
        "../envs/study.yaml"
    params:
        plans=lambda wildcards: plan_hashes(
            "results/decode/{variant}/summary.csv",
            variant_decode_plan,
            DECODE_VARIANTS,
        ),
    script:
        "../scripts/aggregate_decode.py"
