rule hardware:
    output:
        "results/hardware.json",
    log:
        "results/logs/hardware.log",
    conda:
        "../envs/sweep.yaml"
    params:
        repo=workflow.basedir,
    script:
        "../scripts/collect_hardware.py"
