rule hardware:
    output:
        "results/hardware.json",
    log:
        "results/logs/hardware.log",
    params:
        repo=workflow.basedir,
    script:
        "../scripts/collect_hardware.py"
