"""The engine interface: how to launch a server, know it is ready, and ask it for decode."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from importlib import metadata

from ..launcher import http_status


def one_token_completion(base_url: str, model: str, timeout: float = 60.0) -> str | None:
    """The text of a real 1-token completion, or None when the server cannot give one yet."""
    body = json.dumps({"model": model, "prompt": "w5 w6", "max_tokens": 1, "temperature": 0})
    request = urllib.request.Request(
        base_url + "/v1/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
        return answer["choices"][0].get("text", "")
    except (urllib.error.URLError, OSError, TimeoutError, ValueError, KeyError, IndexError):
        return None


@dataclass(frozen=True)
class Engine:
    """An OpenAI-compatible inference server.

    ``launch`` is the argv prefix before the configured arguments (``{python}`` is replaced by
    the interpreter running the study); ``model_flag`` names the model argument;
    ``request_extras`` go into every completion request (e.g. ``ignore_eos``) so generation
    runs to the requested length; ``distributions`` are checked in order for the version.
    """

    name: str
    launch: tuple[str, ...]
    model_flag: str | None
    host_flag: str = "--host"
    port_flag: str = "--port"
    health_path: str = "/health"
    request_extras: dict = field(default_factory=dict)
    distributions: tuple[str, ...] = ()
    # "ids": prompts are sent as token-id lists; "text": as text the model's tokenizer maps
    # back to those ids (servers that only take strings).
    prompt_format: str = "ids"
    # Ready only when a real 1-token completion returns (for servers whose /health answers
    # before the model is loaded).
    ready_by_completion: bool = False
    # Environment every launch of this engine gets (before the variant's own `env`).
    env: dict = field(default_factory=dict)

    def argv(self, model: str, host: str, port: int, args: list[str], python: str | None = None):
        python = python or sys.executable
        argv = [part.replace("{python}", python) for part in self.launch]
        argv += [self.model_flag, model] if self.model_flag else [model]
        argv += [self.host_flag, host, self.port_flag, str(port)]
        return argv + [str(a) for a in args]

    def base_url(self, host: str, port: int) -> str:
        return f"http://{host}:{port}"

    def ready(self, host: str, port: int, model: str | None = None) -> bool:
        """Ready when the health endpoint answers 200 (SGLang only after its own warm-up),
        or, for ``ready_by_completion`` engines, when a 1-token completion returns."""
        if not self.ready_by_completion:
            return http_status(self.base_url(host, port) + self.health_path) == 200
        return one_token_completion(self.base_url(host, port), model or "") is not None

    def version(self) -> str | None:
        for dist in self.distributions:
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return None
