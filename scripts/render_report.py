# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: render the self-contained HTML report from tables, figures and provenance."""

from studylib import quiet_interrupt  # noqa: F401 - first: Ctrl-C ends the job quietly

# isort: split
import sys
from pathlib import Path

from studylib.instruments.hardware import git_info
from studylib.report import LAST_GOOD, REPORT_INPUTS, TemplateProblem, render_report
from studylib.snakemake_job import setup_logging

log = setup_logging(snakemake)  # noqa: F821
# The config shown in the report: params.config_text, else the snapshot file input.config.
config_text = snakemake.params.get("config_text")  # noqa: F821
config_path = snakemake.input.get("config")  # noqa: F821
if config_text is None and config_path:
    config_text = Path(config_path).read_text(encoding="utf-8")
specs = snakemake.input.get("specs", [])  # noqa: F821
specs = [specs] if isinstance(specs, str) else list(specs)
log.info("report from %d figure specs", len(specs))
out_html = Path(snakemake.output.html)  # noqa: F821
try:
    render_report(
        out_html=out_html,
        template_dir=Path(snakemake.scriptdir).parent / "report" / "templates",  # noqa: F821
        # The declared inputs by name (rules/report.smk's REPORT_TABLES and, with a baseline,
        # the comparison's): each stage's section reads its own.
        paths={name: snakemake.input.get(name) for name in REPORT_INPUTS},  # noqa: F821
        spec_paths=specs,
        config_hash=snakemake.params.get("config_hash"),  # noqa: F821
        config_yaml_text=config_text,
        git=git_info(Path(snakemake.scriptdir).parent),  # noqa: F821
        # The study's figure list (figure_list.py), as the rules built the specs from it.
        figures=snakemake.params.figures,  # noqa: F821
    )
except TemplateProblem as exc:
    kept = out_html.with_name(LAST_GOOD)
    log.error("%s%s", exc, f"; the last report that rendered stays at {kept}" if kept.is_file()
              else "")  # fmt: skip
    sys.exit(1)
