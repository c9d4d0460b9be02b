import subprocess

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
    outside = subprocess.run(["git", "-C", "/", "rev-parse", "HEAD"], capture_output=True)
    if outside.returncode != 0:  # / is not inside a repository here
        assert git_info("/")["git_commit"] == "abc123"


def test_collect_on_this_machine():
    facts = collect(".")
    assert facts["device"] in ("cpu", "cuda")
    assert facts["host"]["cpu_count"] >= 1
    assert facts["packages"]["torch"]
    if facts["device"] == "cpu":
        assert facts["gpus"] == []
    assert set(package_versions(["definitely-not-installed-pkg"]).values()) == {None}


def test_cpu_peaks_stop_at_the_first_slow_gemm(monkeypatch):
    from studylib.instruments import peaks

    monkeypatch.setattr(peaks, "SLOW_CPU_CALL_S", 0.0)  # every first call counts as slow
    out = peaks.measure_cpu(copy_bytes=1 << 20)
    assert out["gemm_size"] == 256  # the first size only: larger ones were not tried
    assert out["fp32_tflops"] > 0 and out["bf16_tflops"] > 0
