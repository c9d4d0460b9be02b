"""The engine interface: how to launch a server, know it is ready, and ask it for decode."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from importlib import metadata

from ..launcher import http_status


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

    def argv(self, model: str, host: str, port: int, args: list[str], python: str | None = None):
        python = python or sys.executable
        argv = [part.replace("{python}", python) for part in self.launch]
        argv += [self.model_flag, model] if self.model_flag else [model]
        argv += [self.host_flag, host, self.port_flag, str(port)]
        return argv + [str(a) for a in args]

    def base_url(self, host: str, port: int) -> str:
        return f"http://{host}:{port}"

    def ready(self, host: str, port: int) -> bool:
        """Ready when the health endpoint answers 200 (SGLang only after its own warm-up)."""
        return http_status(self.base_url(host, port) + self.health_path) == 200

    def version(self) -> str | None:
        for dist in self.distributions:
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return None
