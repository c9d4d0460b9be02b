"""Every committed example renders (issue 30): each README under examples/ gives one
tools/example_report.py command, and that command, read from the README (so the README cannot
drift), renders the example's report on the CPU; the examples' derived tables are of today's
schema, and the migration that brought them there (studylib.example_migration) keeps every
value a run wrote."""

import shlex
import subprocess
import sys

import pandas as pd
import pytest
from helpers import ROOT
from studylib.core.table_registry import DamagedFile, read_table
from studylib.example_migration import DERIVED, migrate_example

#: Every example: a folder under examples/ with a README.
EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("**/README.md"))
COMMAND = (".venv/bin/python", "tools/example_report.py")
QUESTIONS = ("1", "2", "3", "4", "5", "6", "seed")


def readme_commands(readme) -> list[list[str]]:
    """The example_report commands a page gives (continuation lines joined), as argv."""
    commands, lines = [], readme.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        text = lines[i].strip()
        if text.startswith(" ".join(COMMAND)):
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text[:-1].rstrip() + " " + lines[i].strip()
            commands.append(shlex.split(text))
        i += 1
    return commands


def name(example) -> str:
    return str(example.relative_to(ROOT / "examples"))


def test_every_example_readme_gives_one_command_for_itself():
    assert len(EXAMPLES) >= 9, EXAMPLES  # the 7 examples, runs 14-15 and run 12
    for example in EXAMPLES:
        commands = readme_commands(example / "README.md")
        assert len(commands) == 1, f"{name(example)}: {len(commands)} example_report commands"
        argv = commands[0]
        assert tuple(argv[:2]) == COMMAND and argv[2] == str(example.relative_to(ROOT))
        assert "--out" in argv


def test_the_status_page_lists_each_examples_command():
    listed = readme_commands(ROOT / "docs" / "status.md")
    for example in EXAMPLES:
        assert readme_commands(example / "README.md")[0] in listed, name(example)


def answered_questions(example, out) -> set[str]:
    """The questions whose tables this render had: each must say something beyond 'not
    measured here'."""
    tables = out / "tables"

    def rows(*paths) -> bool:
        return any(p.is_file() and len(pd.read_csv(p)) for p in paths)

    def predicted_step(path) -> bool:  # a step model whose sweep had the kernels it needs
        return path.is_file() and pd.read_csv(path)["predicted_step_us"].notna().any()

    has = {"1": (tables / "sweep.csv").is_file(), "2": (tables / "sweep.csv").is_file(),
           "3": (tables / "kernel_power_classes.csv").is_file(),
           "4": rows(example / "tables" / "expert_m.csv", tables / "expert_m.csv"),
           "5": (tables / "decode_graphs_pairs.csv").is_file(),
           "6": predicted_step(example / "tables" / "step_model.csv")}  # fmt: skip
    return {q for q, present in has.items() if present}


@pytest.mark.parametrize("example", EXAMPLES, ids=name)
def test_the_readme_command_renders_the_report(example, example_render):
    run = example_render(example)
    argv, out = run.argv, run.out
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr + run.stdout
    html = out / "report" / "index.html"
    assert run.stdout.strip().splitlines()[-1] == str(html)
    text = html.read_text(encoding="utf-8")
    assert text.rstrip().endswith("</html>")
    for record in ("--hardware", "--peaks"):
        if record in argv:
            # A borrowed hardware or peaks record is named in the report's provenance.
            assert f"borrowed from {argv[argv.index(record) + 1]}" in text
    if "--hardware" in argv:  # its commit and time are not this run's, and say so
        assert (
            "collected " in text
            and "(the borrowed hardware record&#39;s, not this run&#39;s)" in text
        )
    answers = pd.read_csv(out / "tables" / "answers.csv", dtype={"question": str})
    assert set(QUESTIONS) <= set(answers["question"])
    for question in answered_questions(example, out):
        statuses = set(answers.loc[answers["question"] == question, "status"])
        assert statuses - {"not measured here"}, f"question {question}: {statuses}"


def test_every_examples_derived_tables_are_of_todays_schema():
    for example in EXAMPLES:
        for file, table in DERIVED.items():
            if (example / file).is_file():
                read_table(table, example / file)  # DamagedFile: run tools/migrate_example.py


# ---------------------------------------------------------------------------------------------
# The migration
# ---------------------------------------------------------------------------------------------

#: An older decode table: no ep or routing column; a floor computed for every row.
OLD_DECODE = """\
engine,variant,cuda_graphs,concurrency,gpus,tpot_ms,output_tok_s,step_gb,hbm_floor_ms,tpot_over_floor
sglang,one,True,1,1,1.40,706.51234567890123,3.83254528,0.8946183413111914,1.5649
sglang,two,False,16,2,8.00,1000,10.5,2.4858224272241687,3.2182
"""


def old_example(tmp_path, decode: str = OLD_DECODE):
    example = tmp_path / "example"
    (example / "tables").mkdir(parents=True)
    (example / "runs").mkdir()
    (example / "tables" / "decode.csv").write_text(decode)
    (example / "runs" / "one.run.json").write_text('{"argv": ["python", "--tp", "1"]}')
    (example / "runs" / "two.run.json").write_text('{"argv": ["python", "--ep-size", "2"]}')
    return example


def test_a_migrated_decode_table_keeps_every_value_and_says_what_its_records_say(tmp_path):
    example = old_example(tmp_path)
    done = migrate_example(example)
    assert [m.table for m in done] == ["decode_table"]
    path = example / "tables" / "decode.csv"
    table = read_table("decode_table", path)  # today's schema
    text = pd.read_csv(path, dtype=str, keep_default_na=False).set_index("variant")
    # Every value as the run wrote it, to the last digit.
    assert text.loc["one", "output_tok_s"] == "706.51234567890123"
    assert text.loc["one", "tpot_ms"] == "1.40" and text.loc["one", "cuda_graphs"] == "True"
    # ep from each variant's argv; routing and weights: the settings' defaults.
    assert list(text["ep"]) == ["1", "2"]
    assert list(text["routing"]) == ["model", "model"] and list(text["weights"]) == ["bf16"] * 2
    assert "ep" in done[0].derived and "routing" in done[0].derived
    # The floor is uniform routing's: emptied for the model's router.
    assert table[["step_gb", "hbm_floor_ms", "tpot_over_floor"]].isna().all(axis=None)
    assert done[0].dropped
    # Columns no record says are added empty, and listed.
    assert "decoding_share" in done[0].added_empty and table["decoding_share"].isna().all()


def test_a_uniform_routing_floor_stays_and_migrating_twice_changes_nothing(tmp_path):
    decode = OLD_DECODE.replace("gpus,", "gpus,routing,").replace(",1,1,1.40", ",1,1,uniform,1.40")
    decode = decode.replace(",16,2,8.00", ",16,2,model,8.00")
    example = old_example(tmp_path, decode)
    migrate_example(example)
    path = example / "tables" / "decode.csv"
    text = pd.read_csv(path, dtype=str, keep_default_na=False).set_index("variant")
    assert text.loc["one", "hbm_floor_ms"] == "0.8946183413111914"
    assert text.loc["two", "hbm_floor_ms"] == ""
    before = path.read_bytes()
    assert migrate_example(example) == []
    assert path.read_bytes() == before


def test_a_table_of_another_kind_is_not_migrated(tmp_path):
    example = old_example(tmp_path, OLD_DECODE.replace("tpot_ms,", "tpot_s,"))
    with pytest.raises(DamagedFile, match="tpot_s"):
        migrate_example(example)


# ---------------------------------------------------------------------------------------------
# What example_report refuses
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--sweeps", "sweeps/none_*.csv"], "matches no file"),
        (["--baseline", "sweeps/torch.csv"], "--baseline compares sweeps"),
        (["--hardware", "no/such/hardware.json"], "no file no/such/hardware.json"),
    ],
)
def test_example_report_refuses_in_one_line(tmp_path, extra, says):
    example = "examples/h200-2026-12-02-decode"  # decode only: no sweeps
    run = subprocess.run([sys.executable, "tools/example_report.py", example, *extra,
                          "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and says in run.stderr, run.stderr
