"""The gated SGLang start (engines/sglang_gate.py) against a stand-in of the few SGLang modules
it calls: its scheduler, spawned as SGLang spawns it, imports, waits at the gate, and starts only
once the gate file exists; without the gate variable it starts at once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import wait_for
from studylib.instruments.serving.engines import sglang_gate

# SGLang's pieces as the gate uses them: launch_server spawns the scheduler function it is
# given (multiprocessing's spawn, as SGLang sets it) and waits for it; the scheduler writes a
# file (its first GPU call, here).
STAND_IN = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/plugins.py": "def load_plugins():\n    pass\n",
    "sglang/srt/utils.py": "def kill_process_tree(pid, include_parent=True):\n    pass\n",
    "sglang/srt/server_args.py": """
        import types

        def prepare_server_args(argv):
            return types.SimpleNamespace(marker=argv[argv.index("--marker") + 1])
    """,
    "sglang/srt/managers/__init__.py": "",
    "sglang/srt/managers/scheduler.py": """
        import pathlib, time

        def run_scheduler_process(server_args, rank):
            pathlib.Path(server_args.marker).write_text(f"{rank} {time.time()}")
    """,
    "sglang/srt/entrypoints/__init__.py": "",
    "sglang/srt/entrypoints/http_server.py": """
        import multiprocessing as mp

        def launch_server(server_args, run_scheduler_process_func):
            mp.set_start_method("spawn", force=True)
            proc = mp.Process(target=run_scheduler_process_func, args=(server_args, 0))
            proc.start()
            proc.join()
            raise SystemExit(proc.exitcode)
    """,
}


@pytest.fixture
def stand_in(tmp_path):
    for name, text in STAND_IN.items():
        path = tmp_path / "site" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def start(stand_in: Path, gate: Path | None) -> tuple[subprocess.Popen, Path, Path]:
    marker, log = stand_in / "scheduler_started", stand_in / "server.log"
    env = {**os.environ, "PYTHONPATH": str(stand_in / "site")}
    env.pop(sglang_gate.GATE_ENV, None)
    if gate is not None:
        env[sglang_gate.GATE_ENV] = str(gate)
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, sglang_gate.__file__, "--marker", str(marker)],
                                stdout=out, stderr=subprocess.STDOUT, env=env)  # fmt: skip
    return proc, marker, log


def test_the_scheduler_waits_at_the_gate_until_its_file_exists(stand_in):
    gate = stand_in / "gate"
    proc, marker, log = start(stand_in, gate)
    try:
        wait_for(lambda: sglang_gate.WAITING in log.read_text(), "the scheduler reached the gate")
        assert proc.poll() is None
        assert not marker.exists()  # imported, spawned, and held: nothing past the gate ran
        gate.touch()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    assert marker.read_text().startswith("0 ")
    assert sglang_gate.OPENED in log.read_text()


def test_without_the_gate_variable_the_server_starts_at_once(stand_in):
    proc, marker, log = start(stand_in, None)
    assert proc.wait(timeout=60) == 0
    assert marker.exists()
    assert "study gate" not in log.read_text()


def test_a_gate_wait_ends_when_the_launcher_is_gone(tmp_path):
    # The waiter notes its parent, says so, and waits; the parent exits once it has said so:
    # the waiter's parent changes, and its wait ends with status 1 instead of holding a server
    # nobody will open.
    ready, status = tmp_path / "waiting", tmp_path / "status"
    waiter = textwrap.dedent(f"""
        import os, pathlib, sys
        sys.path.insert(0, {str(Path(sglang_gate.__file__).parent)!r})
        import sglang_gate
        parent = os.getppid()
        pathlib.Path({str(ready)!r}).touch()
        try:
            sglang_gate.wait_for_gate(pathlib.Path({str(tmp_path / "never")!r}), parent)
        except SystemExit as exc:
            pathlib.Path({str(status)!r}).write_text(str(exc.code))
    """)
    launcher = textwrap.dedent(f"""
        import pathlib, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", {waiter!r}])
        while not pathlib.Path({str(ready)!r}).exists():
            time.sleep(0.02)
    """)
    subprocess.run([sys.executable, "-c", launcher], check=True, timeout=60)
    wait_for(lambda: status.exists() and status.read_text(), "the orphaned wait ended")
    assert status.read_text() == "1"
