import subprocess

import pytest
from studylib.core.journal import Journal
from studylib.instruments import peaks
from studylib.instruments.hardware import collect, git_info, package_versions


def test_git_info_of_a_repo_and_of_a_plain_folder(tmp_path, monkeypatch):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=a@b", "-c", "user.name=a",
                    "commit", "-q", "--allow-empty", "-m", "x"], check=True)  # fmt: skip
    info = git_info(tmp_path)
    assert len(info["git_commit"]) == 40 and info["git_dirty"] is False
    plain = tmp_path / "copy"
    plain.mkdir()
    monkeypatch.delenv("STUDY_GIT_COMMIT", raising=False)
    assert git_info(plain)["git_commit"] in (None, info["git_commit"])
    monkeypatch.setenv("STUDY_GIT_COMMIT", "abc123")
    assert git_info(plain) == {"git_commit": "abc123", "git_dirty": None}
    # Told its commit, a copy with a .git of another commit (a stale one) reads the told one.
    assert git_info(tmp_path) == {"git_commit": "abc123", "git_dirty": None}


def test_collect_on_this_machine():
    facts = collect(".")
    assert facts["device"] in ("cpu", "cuda")
    assert facts["host"]["cpu_count"] >= 1
    assert facts["packages"]["torch"]
    if facts["device"] == "cpu":
        assert facts["gpus"] == []
    assert set(package_versions(["definitely-not-installed-pkg"]).values()) == {None}


def test_cpu_peaks_stop_at_the_first_slow_gemm(monkeypatch):
    monkeypatch.setattr(peaks, "SLOW_CPU_CALL_S", 0.0)  # every first call counts as slow
    out = peaks.measure_cpu(copy_bytes=1 << 20)
    assert out["gemm_size"] == 256  # the first size only: larger ones were not tried
    assert out["fp32_tflops"] > 0 and out["bf16_tflops"] > 0


class Stopped(BaseException):
    """What a signal raises in the job (guard.protect_job)."""


def test_a_stopped_peaks_job_keeps_the_ceilings_it_measured(tmp_path):
    # The journal keeps each ceiling as it ends; the rerun measures only the rest.
    calls = []

    def ceiling(name, value, stop=False):
        def measure_one():
            if stop:
                raise Stopped
            calls.append(name)
            return {name: value, "gemm_size": 256 if name == "fp32_tflops" else 0}

        return (name, measure_one)

    first = [ceiling("fp32_tflops", 1.5), ceiling("copy_gbps", 9.0, stop=True)]
    with pytest.raises(Stopped):
        peaks.measure_ceilings(first, Journal(tmp_path / "work", {"device": "cpu"}, {}))
    journal = Journal(tmp_path / "work", {"device": "cpu"}, {})
    assert journal.reused == ["fp32_tflops"]
    out = peaks.measure_ceilings([ceiling("fp32_tflops", 7.0), ceiling("copy_gbps", 9.0)], journal)
    assert calls == ["fp32_tflops", "copy_gbps"]  # fp32 measured once, by the stopped job
    assert out == {"fp32_tflops": 1.5, "gemm_size": 256, "copy_gbps": 9.0}
    # Another plan (a torch upgrade) reuses nothing.
    assert Journal(tmp_path / "work", {"device": "cpu", "versions": {"torch": "x"}}, {}).done == {}
