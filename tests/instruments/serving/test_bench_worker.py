"""One bench_serving runner for a job's cross-check runs (BenchWorker, the runner's --serve):
runs reuse the process, a failed run is that run's error and the runner goes on, a run that
hangs is timed out with its runner, and closing leaves no process. bench_serving here is a
stand-in package on the runner's path: its cli_main writes a result line with its pid."""

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import ROOT
from studylib.instruments.serving import bench_serving
from studylib.instruments.serving.bench_serving import BenchWorker, read_bench_result

RUNNER = ROOT / "scripts" / "studylib" / "instruments" / "serving" / "bench_serving.py"

STAND_IN = """
import json, os, sys, time

def get_dataset(*args, **kwargs):
    return []

def cli_main():
    argv = sys.argv[1:]
    out = argv[argv.index("--output-file") + 1]
    if "--fail" in argv:
        print("no server at 127.0.0.1:1")
        sys.exit(3)
    if "--raise" in argv:
        raise RuntimeError("the stand-in broke")
    if "--hang" in argv:
        time.sleep(120)
    if "--crash" in argv:
        os._exit(5)
    result = {"median_tpot_ms": 1.5, "output_throughput": 100.0, "completed": 4,
              "duration": 2.0, "pid": os.getpid(), "argv0": sys.argv[0]}
    with open(out, "a") as f:
        f.write(json.dumps(result) + "\\n")
"""


@pytest.fixture
def worker(tmp_path):
    package = tmp_path / "site" / "sglang" / "benchmark"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "serving.py").write_text(textwrap.dedent(STAND_IN))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    with BenchWorker(tmp_path / "bench_serving.log", env=env) as w:
        yield w
    assert w.proc is None  # closed on leaving the block


def argv(out: Path, *extra: str) -> list[str]:
    return [sys.executable, str(RUNNER), "--backend", "sglang", *extra, "--output-file", str(out)]


def test_runs_share_one_runner_and_a_failure_is_that_runs_error(worker, tmp_path):
    out = tmp_path / "bench.jsonl"
    first = worker.run(argv(out), out, 60)
    assert first["bench_error"] == "" and first["bench_tpot_ms"] == 1.5
    pid = read_bench_result(out)["pid"]
    assert read_bench_result(out)["argv0"] == "sglang.benchmark.serving"
    failed = worker.run(argv(out, "--fail"), out, 60)
    assert failed["bench_error"] == "bench_serving exit 3: no server at 127.0.0.1:1"
    broke = worker.run(argv(out, "--raise"), out, 60)
    assert broke["bench_error"].startswith("bench_serving exit 1: RuntimeError: the stand-in")
    again = worker.run(argv(out), out, 60)
    assert again["bench_error"] == "" and read_bench_result(out)["pid"] == pid
    assert worker.starts == 1
    log = (tmp_path / "bench_serving.log").read_text()
    assert log.count("$ ") == 4  # each run's command line, then its output


def test_a_run_that_hangs_takes_its_runner_and_the_next_starts_another(worker, tmp_path):
    out = tmp_path / "bench.jsonl"
    assert worker.run(argv(out), out, 60)["bench_error"] == ""
    pid = read_bench_result(out)["pid"]
    process = worker.proc
    hung = worker.run(argv(out, "--hang"), out, 1.0)
    assert hung["bench_error"].startswith("bench_serving timed out after 1 s")
    assert worker.proc is None and process.poll() is not None  # killed, not left behind
    assert worker.run(argv(out), out, 60)["bench_error"] == ""
    assert read_bench_result(out)["pid"] != pid and worker.starts == 2


def test_a_runner_that_ends_without_answering_says_so(worker, tmp_path):
    out = tmp_path / "bench.jsonl"
    crashed = worker.run(argv(out, "--crash"), out, 60)
    assert crashed["runner_died"] and crashed["bench_error"].startswith("bench_serving exit 5")
    fine = worker.run(argv(out), out, 60)  # a new runner
    assert not fine["runner_died"] and fine["bench_error"] == "" and worker.starts == 2


def test_closing_ends_the_runner(worker, tmp_path):
    out = tmp_path / "bench.jsonl"
    worker.run(argv(out), out, 60)
    process = worker.proc
    worker.close()
    assert process.poll() == 0  # its input ended: it stopped on its own
    assert not list(tmp_path.glob("*.done"))


def test_the_runner_serves_one_run_per_line(tmp_path, monkeypatch, capsys):
    # In process: the stand-in's module patched in, two lines, each run's exit in its file.
    seen = []

    def cli_main():
        seen.append(list(sys.argv))
        if "--fail" in sys.argv:
            raise SystemExit(2)

    def rows():
        return [type("Row", (), {"output_len": 9})() for _ in range(2)]

    module = type(sys)("serving")
    module.get_dataset, module.cli_main = rows, cli_main
    monkeypatch.setattr(bench_serving, "_bench_module", lambda: module)
    staggered = [bench_serving.FIRST_LENS_FLAG, "3", "--backend", "sglang"]
    lines = [json.dumps({"argv": staggered, "done": str(tmp_path / "a")}),
             json.dumps({"argv": ["--fail"], "done": str(tmp_path / "b")})]  # fmt: skip
    monkeypatch.setattr(sys, "stdin", iter(line + "\n" for line in lines))
    bench_serving.main(["--serve"])
    assert seen == [["sglang.benchmark.serving", "--backend", "sglang"],
                    ["sglang.benchmark.serving", "--fail"]]  # fmt: skip
    assert json.loads((tmp_path / "a").read_text()) == {"rc": 0}
    assert json.loads((tmp_path / "b").read_text()) == {"rc": 2}
    # the staggered run's first lengths did not outlive it: the next run got the module's own
    assert module.get_dataset is rows
