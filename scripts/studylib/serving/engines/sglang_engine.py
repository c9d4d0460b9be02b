"""SGLang: ``python -m sglang.launch_server``; ``/health`` is 200 only after its warm-up.

The expert-distribution recorder (server started with
``--expert-distribution-recorder-mode stat``) is driven through its HTTP endpoints.
"""

from __future__ import annotations

import json
import urllib.request

from .base import Engine

ENGINE = Engine(
    name="sglang",
    launch=("{python}", "-m", "sglang.launch_server"),
    model_flag="--model-path",
    served_name_flag="--served-model-name",
    request_extras={"ignore_eos": True},
    distributions=("sglang",),
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
