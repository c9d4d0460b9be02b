"""SGLang's server started ahead of its GPU: it imports and starts its processes on the CPU
while another job holds the GPU, and its scheduler waits at a gate before it touches the GPU.

Run as a script in place of ``python -m sglang.launch_server`` (the same arguments), with
``STUDY_START_GATE`` naming a file: the server goes on once that file exists. Without the
variable it is SGLang's own HTTP server, unchanged.

Why: on the H200 (examples/h200-2026-12-06-default) each server start took 72-78 s, of which
the launching process's imports took 21-22 s and the spawned scheduler's 24-27 s before its
first GPU call, the GPU idle meanwhile. SGLang 0.5.16's ``http_server.launch_server`` takes the
scheduler process's function (``run_scheduler_process_func``, there for private forks); the one
passed here imports SGLang's scheduler (the child's imports), then waits for the gate, then runs
SGLang's own. SGLang's launcher reads the GPU's memory through nvidia-smi (NVML), not CUDA.

Only this file's standard-library imports run at its top: SGLang's spawned processes import it
again as their main module (multiprocessing's spawn), the detokenizer included.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

#: The file whose existence opens the gate.
GATE_ENV = "STUDY_START_GATE"
#: What the scheduler prints at the gate (the server's log: the study reads when it got there).
WAITING = "study gate: the scheduler has imported SGLang and waits for"
OPENED = "study gate: open after"
POLL_S = 0.05


def wait_for_gate(gate: Path, parent: int | None = None, poll_s: float = POLL_S) -> float:
    """Wait until ``gate`` exists; the seconds waited. A launcher gone meanwhile (this
    process's parent no longer ``parent``, by default the one it has now) ends the wait with
    exit status 1: no server to start for."""
    parent = os.getppid() if parent is None else parent
    t0 = time.monotonic()
    while not gate.exists():
        if os.getppid() != parent:
            print("study gate: the launching process is gone; not starting", file=sys.stderr,
                  flush=True)  # fmt: skip
            raise SystemExit(1)
        time.sleep(poll_s)
    return time.monotonic() - t0


def _say(text: str) -> None:
    """A line stamped as SGLang stamps its own (SGLANG_LOG_MS: local time to the millisecond)."""
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    print(f"[{stamp}.{int(now * 1000) % 1000:03d}] {text}", file=sys.stderr, flush=True)


def gated_scheduler(*args, **kwargs):
    """SGLang's scheduler process, held at the gate once its imports are done."""
    # Imported here, not at the top: only the scheduler's process pays for it, before the gate.
    from sglang.srt.managers.scheduler import run_scheduler_process

    gate = os.environ.get(GATE_ENV)
    if gate:
        _say(f"{WAITING} {gate}")
        _say(f"{OPENED} {wait_for_gate(Path(gate)):.2f} s")
    return run_scheduler_process(*args, **kwargs)


def main(argv: list[str]) -> None:
    """SGLang's ``launch_server`` main for its default HTTP server, with the gated scheduler."""
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    load_plugins()
    server_args = prepare_server_args(argv)
    other = [flag for flag in ("encoder_only", "smg_grpc_mode", "use_ray")
             if getattr(server_args, flag, False)]  # fmt: skip
    if other:
        raise SystemExit(f"study gate: only SGLang's HTTP server starts gated, not with {other}")
    try:
        launch_server(server_args, run_scheduler_process_func=gated_scheduler)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


if __name__ == "__main__":
    main(sys.argv[1:])
