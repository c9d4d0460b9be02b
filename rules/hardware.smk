rule hardware:
    output:
        "results/hardware.json",
    log:
        "results/logs/hardware.log",
    conda:
        "../envs/gpu.yaml"
    params:
        repo=workflow.basedir,
        versions=versions("all"),  # an upgrade collects the record again
    script:
        "../scripts/collect_hardware.py"
