"""SGLang: ``python -m sglang.launch_server``; ``/health`` is 200 only after its warm-up.

The expert-distribution recorder (server started with
``--expert-distribution-recorder-mode stat``) and the torch profiler (``/start_profile``)
are driven through their HTTP endpoints.
"""

from __future__ import annotations

import json
import urllib.request

from ..server_log import LOG_MS_ENV
from . import sglang_gate
from .base import Engine

#: The study stops a server by SIGTERM to its process group, which SGLang 0.5.16 takes for a
#: child's crash: it slept 5 s "before crash diagnostics" (py-spy dumps and CUDA coredumps of
#: its schedulers, on by default) at every stop, the GPU held idle (stop_s 5.2-6.2 s in 34 of
#: the 35 stops the examples' run.json record). The box has no py-spy; the study keeps the log.
CRASH_DIAGNOSTICS_OFF = {"SGLANG_PYSPY_DUMP_BEFORE_CRASH": "0",
                         "SGLANG_CUDA_COREDUMP_BEFORE_CRASH": "0"}  # fmt: skip

ENGINE = Engine(
    name="sglang",
    launch=("{python}", "-m", "sglang.launch_server"),
    model_flag="--model-path",
    served_name_flag="--served-model-name",
    request_extras={"ignore_eos": True},
    distributions=("sglang",),
    context_flag="--context-length",
    env={**LOG_MS_ENV, **CRASH_DIAGNOSTICS_OFF},
    # SGLang's own server, its scheduler held before its first GPU call (sglang_gate.py).
    gated_launch=("{python}", sglang_gate.__file__),
    gate_env=sglang_gate.GATE_ENV,
)

EXPERT_RECORDER = {
    "start": "/start_expert_distribution_record",
    "stop": "/stop_expert_distribution_record",
    "dump": "/dump_expert_distribution_record",
}


def expert_recorder(base_url: str, action: str, timeout: float = 60.0) -> dict | str:
    """POST one of start / stop / dump to the recorder; the JSON (or text) answer."""
    request = urllib.request.Request(base_url + EXPERT_RECORDER[action], data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read().decode("utf-8", errors="replace")
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return body


def requests_held(base_url: str, timeout: float = 10.0) -> int | None:
    """Requests the server holds, running and waiting, over its data-parallel ranks: GET
    /v1/loads?include=core (srt/entrypoints/v1_loads.py; the older /get_load logs a
    deprecation warning per call). None when it does not answer that."""
    try:
        url = base_url + "/v1/loads?include=core"
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = json.loads(response.read())
        loads = body.get("loads") if isinstance(body, dict) else None
        return sum(int(load.get("num_running_reqs") or 0) + int(load.get("num_waiting_reqs") or 0)
                   for load in loads)  # fmt: skip
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def start_profile(base_url: str, output_dir, num_steps: int, prefix: str, profile_id: str,
                  timeout: float = 60.0) -> str:  # fmt: skip
    """POST /start_profile: torch.profiler over the next ``num_steps`` forward passes, GPU
    kernels only, no stacks or shapes (smaller traces); SGLang stops by itself and each TP
    rank writes ``{prefix}-{profile_id}-TP-{rank}....trace.json.gz`` into ``output_dir``
    (srt/managers/io_struct.py ProfileReq, scheduler_components/profiler_manager.py)."""
    body = json.dumps({
        "output_dir": str(output_dir), "num_steps": int(num_steps), "activities": ["GPU"],
        "profile_prefix": prefix, "profile_id": profile_id, "with_stack": False,
        "record_shapes": False,
    }).encode()  # fmt: skip
    request = urllib.request.Request(base_url + "/start_profile", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read().decode("utf-8", errors="replace")


def stop_profile(base_url: str, timeout: float = 60.0) -> str:
    """POST /stop_profile: end a profile still running (it writes what it recorded)."""
    request = urllib.request.Request(base_url + "/stop_profile", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read().decode("utf-8", errors="replace")
