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
