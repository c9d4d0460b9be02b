# Every figure of the study, drawn by one rule: the figure (its inputs, drawing function,
# caption and report category) is declared once in scripts/studylib/figure_list.py; the
# helpers (inputs, report category, the caption template) are in common.smk.
rule plot:
    input:
        unpack(figure_inputs),
    output:
        html=report(
            "results/figures/{figure}.html",
            caption=str(FIGURE_CAPTION),
            category=figure_report("category"),
            subcategory=figure_report("subcategory"),
            labels=figure_report("labels"),
        ),
        png="results/figures/{figure}.png",
        spec="results/figures/{figure}.vl.json",
    log:
        "results/logs/figures/{figure}.log",
    wildcard_constraints:
        figure="|".join(STUDY_FIGURES),
    conda:
        "../envs/study.yaml"
    params:
        # A figure's own slice of the registry: a change to one figure reruns it alone.
        draw=lambda wildcards: STUDY_FIGURES[wildcards.figure].draw,
        roles=lambda wildcards: list(STUDY_FIGURES[wildcards.figure].inputs),
        args=lambda wildcards: STUDY_FIGURES[wildcards.figure].args,
    script:
        "../scripts/plot_figure.py"
