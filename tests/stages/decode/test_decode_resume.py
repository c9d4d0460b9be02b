"""A decode job stopped mid-way resumes from its journal: every finished concurrency of every
pass is kept as it was measured, and only what was not finished runs again (issue 33)."""

import json
import time

import pandas as pd
import pytest

pytest.importorskip("fastapi")

import studylib.stages.decode.decode_profile_pass as profile_module  # noqa: E402
import studylib.stages.decode.decode_run as decode  # noqa: E402
from studylib.core.journal import Journal  # noqa: E402
from studylib.stages.decode.decode_run import run_decode  # noqa: E402
from test_decode_run import _profile_plan, _standin_sglang  # noqa: E402
from test_power_sampler import FakeReader  # noqa: E402
from test_serving import free_port  # noqa: E402


class Stopped(BaseException):
    """What a signal raises in the job (guard.protect_job): not an Exception."""


def _plan(**extra) -> dict:
    return {
        "engine": "sglang", "variant": "graphs-off", "model": "standin", "model_kind": "dummy",
        "args": ["--disable-cuda-graph"], "host": "127.0.0.1", "port": free_port(),
        "concurrency": [2, 4], "input_len": 8, "output_len": 12, "min_steady_s": 0.3,
        "expert_distribution_s": 0.2, "idle_s": 0.1, "ready_timeout_s": 30, "sample_hz": 20,
        "vocab_size": 1000, "expert_distribution": True, "top_k": 8, "weights": "bf16", **extra,
    }  # fmt: skip


def _count_and_stop(monkeypatch, name: str, stop_at: int | None, module=decode) -> list[int]:
    """Record the concurrencies ``module.name`` measures; stop the job when it reaches
    ``stop_at`` (None: never)."""
    real, seen = getattr(module, name), []

    def wrapped(pas, c, *args):
        if c == stop_at:
            raise Stopped
        seen.append(c)
        return real(pas, c, *args)

    monkeypatch.setattr(module, name, wrapped)
    return seen


def _stopped_run(monkeypatch, plan: dict, out, name: str, module=decode) -> None:
    """Run ``plan`` until ``module.name`` reaches C = 4, where the job is stopped."""
    with monkeypatch.context() as m:
        _count_and_stop(m, name, stop_at=4, module=module)
        with pytest.raises(Stopped):
            run_decode(plan, out)


def _journal_keys(out) -> list[str]:
    lines = []
    for path in out.parent.glob(f".{out.name}.work/progress-*.jsonl"):
        lines += [json.loads(line)["_key"] for line in path.read_text().splitlines()]
    return lines


def test_a_job_stopped_in_its_main_pass_keeps_the_finished_concurrency(tmp_path, monkeypatch):
    _standin_sglang(monkeypatch)
    plan, out = _plan(), tmp_path / "out"
    _stopped_run(monkeypatch, plan, out, "_one_concurrency")
    assert _journal_keys(out) == ["idle", "main:2"]
    assert not (out / "summary.csv").exists()
    first_server_log = (out / "server.log").read_text()

    measured = _count_and_stop(monkeypatch, "_one_concurrency", stop_at=None)
    summary = run_decode(plan, out)
    assert measured == [4]  # C = 2 was not measured again
    assert summary["concurrency"].tolist() == [2, 4] and summary["valid"].all()
    run = json.loads((out / "run.json").read_text())
    assert run["resumed"] == ["idle", "main:2"]
    requests = pd.read_parquet(out / "requests.parquet")
    assert sorted(set(requests["concurrency"])) == [2, 4]
    assert sorted(set(pd.read_csv(out / "expert_m.csv")["concurrency"])) == [2, 4]
    assert not out.parent.joinpath(".out.work").exists()  # the journal goes with success
    assert first_server_log != (out / "server.log").read_text()  # a new server start


def test_a_server_that_started_before_and_not_now_fails_the_job_and_keeps_the_journal(
    tmp_path, monkeypatch
):
    """A server that does not start is its variant's rows (test_decode_run), unless a stopped
    run's levels were measured on it: then the failure is taken for chance, and the job fails
    with the journal kept for the next run (rows saying it did not start would end the job
    and drop the journal's levels)."""
    from studylib.instruments.serving.launcher import ServerFailed, ServerProcess

    _standin_sglang(monkeypatch)
    plan, out = _plan(expert_distribution=False), tmp_path / "out"
    _stopped_run(monkeypatch, plan, out, "_one_concurrency")

    def fails(self):
        raise ServerFailed("the server exited with code 1 before it was ready: by chance")

    with monkeypatch.context() as m:
        m.setattr(ServerProcess, "wait_ready", fails)
        with pytest.raises(ServerFailed, match="by chance"):
            run_decode(plan, out)
    assert "main:2" in _journal_keys(out) and not (out / "summary.csv").exists()
    summary = run_decode(plan, out)  # the server starts again: C = 2 kept, C = 4 measured
    assert summary["concurrency"].tolist() == [2, 4] and summary["valid"].all()
    assert json.loads((out / "run.json").read_text())["resumed"] == ["idle", "main:2"]


def test_the_kept_row_is_the_row_the_stopped_run_measured(tmp_path, monkeypatch):
    _standin_sglang(monkeypatch)
    plan, out = _plan(expert_distribution=False), tmp_path / "out"
    _stopped_run(monkeypatch, plan, out, "_one_concurrency")
    kept = [json.loads(line) for path in tmp_path.glob(".out.work/progress-*.jsonl")
            for line in path.read_text().splitlines()]  # fmt: skip
    row = next(k["row"] for k in kept if k["_key"] == "main:2")
    summary = run_decode(plan, out).set_index("concurrency")
    for column in ("tpot_ms", "output_tok_s", "steady_s", "requests"):
        assert summary.loc[2, column] == pytest.approx(row[column]), column


def test_a_job_stopped_in_its_recorder_pass_starts_no_main_server(tmp_path, monkeypatch):
    _standin_sglang(monkeypatch)
    plan, out = _plan(), tmp_path / "out"
    _stopped_run(monkeypatch, plan, out, "_recorder_concurrency")
    assert _journal_keys(out) == ["idle", "main:2", "main:4", "recorder:2"]
    main_log = (out / "server.log").read_text()

    main = _count_and_stop(monkeypatch, "_one_concurrency", stop_at=None)
    recorded = _count_and_stop(monkeypatch, "_recorder_concurrency", stop_at=None)
    run_decode(plan, out)
    assert main == [] and recorded == [4]
    assert (out / "server.log").read_text() == main_log  # the main server did not start again
    run = json.loads((out / "run.json").read_text())
    assert "ready_s" not in run and run["resumed"] == ["idle", "main:2", "main:4", "recorder:2"]
    recorder = pd.read_csv(out / "recorder.csv")
    assert recorder["concurrency"].tolist() == [2, 4]
    m = pd.read_csv(out / "expert_m.csv")
    assert m.groupby(["concurrency", "layer"])["m"].sum().round(6).tolist() == [16, 16, 32, 32]


def test_a_finished_profile_is_kept_and_only_the_rest_is_profiled(tmp_path, monkeypatch):
    _standin_sglang(monkeypatch)
    plan, out = _profile_plan(tmp_path, ["--tp", "2", "--token-delay", "0.05"]), tmp_path / "out"
    _stopped_run(monkeypatch, plan, out, "_profile_concurrency", profile_module)
    assert _journal_keys(out) == ["idle", "main:2", "main:4", "profile:2"]

    main = _count_and_stop(monkeypatch, "_one_concurrency", stop_at=None)
    profiled = _count_and_stop(monkeypatch, "_profile_concurrency", stop_at=None,
                               module=profile_module)  # fmt: skip
    run_decode(plan, out)
    assert main == [] and profiled == [4]
    breakdown = pd.read_csv(out / "breakdown.csv")
    assert sorted(set(breakdown["concurrency"])) == [2, 4]
    run = json.loads((out / "run.json").read_text())
    assert sorted({t["concurrency"] for t in run["profile"]["traces"]}) == [2, 4]


def test_another_plan_measures_again(tmp_path, monkeypatch):
    # The journal is keyed by the plan: a changed plan reuses nothing.
    _standin_sglang(monkeypatch)
    plan, out = _plan(expert_distribution=False), tmp_path / "out"
    _stopped_run(monkeypatch, plan, out, "_one_concurrency")
    measured = _count_and_stop(monkeypatch, "_one_concurrency", stop_at=None)
    run_decode({**plan, "output_len": 10}, out)
    assert measured == [2, 4]
    assert "resumed" not in json.loads((out / "run.json").read_text())


def test_a_journal_line_cut_by_a_kill_is_dropped_and_the_next_one_stays_whole(tmp_path):
    journal = Journal(tmp_path / "work", {"plan": 1}, {})
    journal.record("a", {"x": 1})
    with open(journal.path, "a") as out:
        out.write('{"x": 2, "_ke')  # a kill mid-write
    again = Journal(tmp_path / "work", {"plan": 1}, {})
    assert again.reused == ["a"]
    again.record("b", {"x": 3})
    assert sorted(Journal(tmp_path / "work", {"plan": 1}, {}).done) == ["a", "b"]
    again.finish()
    assert not (tmp_path / "work").exists()


def test_the_power_samples_and_windows_of_the_stopped_run_are_kept(tmp_path, monkeypatch):
    # A GPU behind a fake NVML (100 W): the resumed run's windows and power timeline hold the
    # stopped run's idle and C = 2 windows and samples, each once, beside its own.
    _standin_sglang(monkeypatch)
    monkeypatch.setattr(decode, "open_readers",
                        lambda indices: ([FakeReader(time.monotonic)], "nvml", None))  # fmt: skip
    plan, out = _plan(expert_distribution=False), tmp_path / "out"
    _stopped_run(monkeypatch, plan, out, "_one_concurrency")
    resumed_at = time.monotonic()
    summary = run_decode(plan, out)
    assert (summary["avg_w_per_gpu"].round(6) == 100.0).all()
    windows = pd.read_parquet(out / "windows.parquet")
    steady = windows[windows["label"] == "steady"]
    assert (windows["label"] == "idle").sum() == 1 and steady["concurrency"].tolist() == [2, 4]
    timeline = pd.read_parquet(out / "power_timeline.parquet")
    assert (timeline["t"] < resumed_at).any() and (timeline["t"] > resumed_at).any()
    assert not timeline.duplicated(["gpu", "t"]).any()
    assert timeline["t"].is_monotonic_increasing
