import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
from helpers import ROOT
from studylib.instruments import gpu_slots


@pytest.fixture(autouse=True)
def _release():
    yield
    gpu_slots.release_all()


def test_jobs_get_disjoint_gpus_and_wait_for_a_free_one(tmp_path):
    gpus = ["0", "1"]
    first = gpu_slots.acquire(1, gpus, tmp_path)
    # A second job in another process takes the other GPU, then a third has to wait.
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'scripts')!r})\n"
            "from studylib.instruments.gpu_slots import acquire\n"
            f"print(acquire(1, ['0', '1'], __import__('pathlib').Path({str(tmp_path)!r}),"
            " timeout_s=5)[0], flush=True)\n"
            "import time; time.sleep(2)")  # fmt: skip
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    second = other.stdout.readline().strip()
    assert {first[0], second} == {"0", "1"}
    started = time.monotonic()
    third = gpu_slots.acquire(1, gpus, tmp_path, timeout_s=10, poll_s=0.1)
    assert third == [second]  # freed when the other process exited (its locks died with it)
    assert time.monotonic() - started >= 1.0
    other.wait()


def test_a_job_that_yields_goes_after_one_that_takes_the_device_at_once(tmp_path):
    # A job outside Snakemake's count (a decode job whose server started ahead: YIELD_S) takes
    # a device only once it has been free that long, each time: the job Snakemake starts next,
    # which takes it at once, goes first, and the yielding one after it.
    gpu_slots.acquire(1, ["0"], tmp_path)  # the job running now
    got = {}

    def yielding():
        gpu_slots.acquire(1, ["0"], tmp_path, poll_s=0.02, free_for_s=0.5, timeout_s=30)
        got["at"] = time.monotonic()

    thread = threading.Thread(target=yielding)
    thread.start()
    time.sleep(0.2)  # the yielding job waits
    gpu_slots.release_all()  # the running job ends
    gpu_slots.acquire(1, ["0"], tmp_path, poll_s=0.02, timeout_s=5)  # the next one, at once
    assert "at" not in got
    time.sleep(0.3)
    assert "at" not in got
    gpu_slots.release_all()
    released = time.monotonic()
    thread.join(timeout=30)
    assert got["at"] - released >= 0.5


def test_pin_gpus_yields_for_a_job_outside_snakemakes_count(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # restored after: pin_gpus sets it
    monkeypatch.setattr(gpu_slots, "machine_gpus", lambda: ["0"])
    monkeypatch.setattr(gpu_slots, "_acquire_unless_made_meanwhile",
                        lambda count, gpus, job, outputs, free_for_s: seen.append(
                            (count, free_for_s)) or gpus[:count])  # fmt: skip
    gpu_slots.pin_gpus(SimpleNamespace(resources=SimpleNamespace(gpu=1)))
    gpu_slots.pin_gpus(SimpleNamespace(resources=SimpleNamespace(gpu=0)), count=1)
    assert gpu_slots.pin_gpus(SimpleNamespace(resources=SimpleNamespace(gpu=0))) is None
    assert seen == [(1, 0.0), (1, gpu_slots.YIELD_S)]


def test_timeout_and_too_many(tmp_path):
    gpu_slots.acquire(2, ["0", "1"], tmp_path)
    result = {}

    def attempt():
        try:
            gpu_slots.acquire(1, ["0", "1"], tmp_path, timeout_s=0.3, poll_s=0.05)
        except TimeoutError as exc:
            result["error"] = str(exc)

    # flock locks are per open file description: another thread's fresh open still conflicts
    thread = threading.Thread(target=attempt)
    thread.start()
    thread.join()
    assert "no 1 free GPUs" in result["error"]
    with pytest.raises(RuntimeError, match="needs 4 GPUs but this machine offers 2"):
        gpu_slots.acquire(4, ["0", "1"], tmp_path)


def test_pin_gpus_sets_visible_devices(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    ids = gpu_slots.pin_gpus(SimpleNamespace(resources=SimpleNamespace(gpu=1)))
    assert ids in (["2"], ["3"])
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == ids[0]
    assert gpu_slots.pin_gpus(SimpleNamespace(resources=SimpleNamespace(gpu=0))) is None


def test_no_gpu_machine_pins_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_slots.pin_gpus(SimpleNamespace(resources=SimpleNamespace(gpu=1))) is None


def test_side_by_side_jobs_get_distinct_slot_indices(tmp_path, monkeypatch):
    """Decode servers use base port + slot_index(): two running jobs must not share it."""
    monkeypatch.chdir(tmp_path)
    assert gpu_slots.slot_index() == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    first = gpu_slots.pin_gpus(SimpleNamespace(resources=SimpleNamespace(gpu=1)))
    first_slot = gpu_slots.slot_index()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # the next job sees the machine again
    second = gpu_slots.pin_gpus(SimpleNamespace(resources=SimpleNamespace(gpu=1)))
    assert first != second
    assert {first_slot, gpu_slots.slot_index()} == {0, 1}


def test_held_ports_are_distinct_and_skip_a_bound_one(tmp_path):
    # decode.prestart: two jobs' servers wait at their gates side by side, so each takes a
    # port by its lock; one some other process has bound is passed over.
    def bindable(port: int) -> bool:
        return port != 40000

    assert gpu_slots.hold_port(40000, bindable, tmp_path) == 40001
    assert gpu_slots.hold_port(40000, bindable, tmp_path) == 40002
    gpu_slots.release_all()  # the jobs end: their ports are free again
    assert gpu_slots.hold_port(40000, bindable, tmp_path) == 40001
    with pytest.raises(RuntimeError, match="no free port for a server from 40000 to 40002"):
        gpu_slots.hold_port(40000, lambda port: False, tmp_path, span=3)


HOLD = (
    "import sys, time; sys.path.insert(0, {scripts!r})\n"
    "from pathlib import Path\n"
    "from studylib.instruments.gpu_slots import acquire\n"
    "acquire(1, [{device!r}], Path({lock_dir!r}), job='rule sweep of results/sweeps/torch.parquet',"
    " outputs=['results/sweeps/torch.parquet'])\n"
    "print('held', flush=True); time.sleep(60)"
)


def hold(tmp_path, snakemake_id: str, device: str = "cpu") -> subprocess.Popen:
    """Another process holding ``device``, as a job of the Snakemake ``snakemake_id``."""
    import os

    from studylib.instruments.serving.guard import RUN_ENV

    code = HOLD.format(scripts=str(ROOT / "scripts"), lock_dir=str(tmp_path), device=device)
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, RUN_ENV: snakemake_id})  # fmt: skip
    assert other.stdout.readline().strip() == "held"
    return other


def test_a_device_held_by_another_snakemakes_job_stops_the_job_in_one_line(tmp_path, monkeypatch):
    from studylib.instruments.serving.guard import RUN_ENV, cmdline, process_id

    monkeypatch.setenv(RUN_ENV, "1:1")  # this job's Snakemake
    other = hold(tmp_path, process_id())  # a live Snakemake (this test) runs the other
    try:
        started = time.monotonic()
        with pytest.raises(gpu_slots.DeviceBusy) as busy:
            gpu_slots.acquire(1, ["cpu"], tmp_path, timeout_s=60)
        assert time.monotonic() - started < 30  # at once, not after the timeout
        assert str(busy.value) == (
            f"the CPU is held by pid {other.pid} ({cmdline(other.pid)}), rule sweep of "
            f"results/sweeps/torch.parquet, run by Snakemake pid {process_id().split(':')[0]}, "
            "another Snakemake in this folder: two timing jobs on one device spoil both, so "
            "this job stops without measuring; run this again once it has finished"
        )
        # A job of the same Snakemake is waited for (--resources gpu above the GPUs)
        monkeypatch.setenv(RUN_ENV, process_id())
        with pytest.raises(TimeoutError):
            gpu_slots.acquire(1, ["cpu"], tmp_path, timeout_s=0.3, poll_s=0.05)
    finally:
        other.kill()
        other.wait()
    assert gpu_slots.acquire(1, ["cpu"], tmp_path) == ["cpu"]  # free once it is gone


def test_a_job_left_by_a_gone_snakemake_is_named_as_such(tmp_path, monkeypatch):
    from studylib.instruments.serving.guard import RUN_ENV, process_id

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    gone = process_id(child.pid)
    child.kill()
    child.wait()
    monkeypatch.setenv(RUN_ENV, process_id())
    other = hold(tmp_path, gone)
    try:
        assert [d for d, _ in gpu_slots.left_running(tmp_path)] == ["cpu"]
        with pytest.raises(gpu_slots.DeviceBusy, match=(
            f"left running by Snakemake pid {child.pid}, which is gone \\(killed\\?\\): two "
            "timing jobs on one device spoil both, so this job stops without measuring; it "
            f"stops by itself within seconds; or stop it \\(kill {other.pid}\\), then run again"
        )):  # fmt: skip
            gpu_slots.acquire(1, ["cpu"], tmp_path)
    finally:
        other.kill()
        other.wait()
    assert gpu_slots.left_running(tmp_path) == []  # its record stays, its holder is gone


def test_a_cpu_job_holds_the_cpu(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a GPU, but the study runs on the CPU
    smk = SimpleNamespace(resources=SimpleNamespace(gpu=1), config={"device": "cpu"},
                          rule="peaks", output=["results/peaks.json"])  # fmt: skip
    assert gpu_slots.pin_gpus(smk) is None
    record = gpu_slots.holder(tmp_path / ".snakemake" / "gpu-slots" / "cpu.lock")
    assert record["job"] == "rule peaks of results/peaks.json"
    assert record["outputs"] == ["results/peaks.json"]


def test_gpus_held_by_another_snakemakes_jobs(tmp_path, monkeypatch):
    from studylib.instruments.serving.guard import RUN_ENV, cmdline, process_id

    monkeypatch.setenv(RUN_ENV, "1:1")
    first = hold(tmp_path, process_id(), "0")
    try:
        assert gpu_slots.acquire(1, ["0", "1"], tmp_path) == ["1"]  # a free one is taken
        gpu_slots.release_all()
        second = hold(tmp_path, process_id(), "1")
        try:
            with pytest.raises(gpu_slots.DeviceBusy) as busy:
                gpu_slots.acquire(1, ["0", "1"], tmp_path)
            assert str(busy.value).startswith(
                f"GPU 0 is held by pid {first.pid} ({cmdline(first.pid)}), rule sweep of "
                "results/sweeps/torch.parquet, run by Snakemake pid "
            )
            assert f"; GPU 1 is held by pid {second.pid} (" in str(busy.value)
            # held by jobs of this Snakemake: waited for
            monkeypatch.setenv(RUN_ENV, process_id())
            with pytest.raises(TimeoutError):
                gpu_slots.acquire(1, ["0", "1"], tmp_path, timeout_s=0.3, poll_s=0.05)
        finally:
            second.kill()
            second.wait()
    finally:
        first.kill()
        first.wait()


MAKE_THEN_END = (
    "import sys, time; sys.path.insert(0, {scripts!r})\n"
    "from pathlib import Path\n"
    "from studylib.instruments.gpu_slots import acquire\n"
    "acquire(1, ['cpu'], Path('.snakemake/gpu-slots'), job='rule peaks of results/peaks.json',"
    " outputs=['results/peaks.json'])\n"
    "print('held', flush=True); sys.stdin.readline()\n"
    "if {writes}: Path('results').mkdir(); Path('results/peaks.json').write_text('{{}}')\n"
)


@pytest.mark.parametrize("writes", [True, False], ids=["made", "failed"])
def test_a_job_whose_outputs_another_snakemakes_job_is_making_waits_for_it(
    tmp_path, monkeypatch, writes
):
    # Two Snakemakes asked for one target and both jobs started (the check before the first
    # job could not see the other yet): the second waits, rather than fail and have its
    # Snakemake remove the first's finished output; it then measures nothing, or measures
    # the output the first did not make.
    from studylib.instruments.serving.guard import RUN_ENV, process_id

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(RUN_ENV, "1:1")  # this job's Snakemake
    monkeypatch.setattr(gpu_slots, "TWIN_POLL_S", 0.05)
    code = MAKE_THEN_END.format(scripts=str(ROOT / "scripts"), writes=writes)
    other = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=tmp_path,
                             env={**os.environ, RUN_ENV: process_id()})  # fmt: skip
    assert other.stdout.readline().strip() == "held"
    smk = SimpleNamespace(resources=SimpleNamespace(gpu=1), config={"device": "cpu"},
                          rule="peaks", output=["results/peaks.json"])  # fmt: skip
    outcome = []

    def job():
        try:
            outcome.append(gpu_slots.pin_gpus(smk))
        except SystemExit as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=job)
    waiting.start()
    time.sleep(0.3)
    assert waiting.is_alive() and outcome == []  # waits while the other job runs
    other.stdin.write("\n")
    other.stdin.flush()
    other.wait(timeout=30)
    waiting.join(timeout=30)
    if writes:  # made by the other job: this one exits at once, successfully
        assert isinstance(outcome[0], SystemExit) and outcome[0].code == 0
    else:  # the other failed: this one holds the CPU and measures
        assert outcome == [None]
        assert gpu_slots.holder(tmp_path / ".snakemake/gpu-slots/cpu.lock")["pid"] == process_id()


def test_a_device_held_for_other_outputs_still_stops_the_job(tmp_path, monkeypatch):
    from studylib.instruments.serving.guard import RUN_ENV, process_id

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(RUN_ENV, "1:1")
    other = hold(tmp_path / ".snakemake" / "gpu-slots", process_id())  # a sweep's outputs
    try:
        smk = SimpleNamespace(resources=SimpleNamespace(gpu=1), config={"device": "cpu"},
                              rule="peaks", output=["results/peaks.json"])  # fmt: skip
        with pytest.raises(gpu_slots.DeviceBusy):
            gpu_slots.pin_gpus(smk)
    finally:
        other.kill()
        other.wait()
