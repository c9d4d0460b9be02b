"""The engine interface: how to launch a server, know it is ready, and ask it for decode."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from importlib import metadata

from ..launcher import http_status, run_served_name, url_host

__all__ = ["Engine", "arg_problems", "flag_name", "one_token_completion", "run_served_name",
           "served_names"]  # fmt: skip


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


def served_names(base_url: str, timeout: float = 5.0) -> list[str] | None:
    """The model ids GET /v1/models lists, or None when nothing (valid) answered."""
    try:
        with urllib.request.urlopen(base_url + "/v1/models", timeout=timeout) as response:
            answer = json.loads(response.read())
        return [str(entry["id"]) for entry in answer["data"]]
    except (urllib.error.URLError, OSError, TimeoutError, ValueError, KeyError, TypeError):
        return None


def _without_flag(args: list[str], flag: str) -> list[str]:
    """``args`` less ``flag VALUE...`` / ``flag=VALUE`` (the run sets its own)."""
    out, skipping = [], False
    for arg in args:
        if arg == flag:
            skipping = True
        elif arg.startswith(flag + "="):
            skipping = False
        elif skipping and not arg.startswith("-"):
            continue  # a value of the dropped flag (vLLM takes several names)
        else:
            skipping = False
            out.append(arg)
    return out


def flag_name(arg) -> str | None:
    """The flag an argument names (``--port`` of ``--port`` or ``--port=30001``), or None for
    a value."""
    arg = str(arg)
    return arg.split("=", 1)[0] if arg.startswith("--") and len(arg) > 2 else None


def arg_problems(args: list, study_flags: dict[str, str]) -> list[str]:
    """What is wrong with a server's configured arguments, one line each: a flag the study
    sets itself (``study_flags``: flag -> what sets it), given again, would leave the server
    on a setting the study does not know (a second ``--port``: it listens where the
    readiness probe never looks, until the readiness timeout); a flag given twice (a server
    keeps one of the values, and which is its parser's choice)."""
    problems, seen = [], {}
    for i, arg in enumerate(args):
        flag = flag_name(arg)
        if flag is None:
            continue
        if flag in study_flags:
            problems.append(f"{flag} is set by the study itself ({study_flags[flag]}): "
                            "remove it from args")  # fmt: skip
        elif flag in seen:
            problems.append(f"{flag} is given twice (arguments {seen[flag] + 1} and {i + 1}): "
                            "give it once")  # fmt: skip
        seen.setdefault(flag, i)
    return problems


@dataclass(frozen=True)
class Engine:
    """An OpenAI-compatible inference server.

    ``launch`` is the argv prefix before the configured arguments (``{python}`` is replaced by
    the interpreter running the study); ``model_flag`` names the model argument;
    ``served_name_flag`` sets the name the server answers to (None: it serves the model
    path itself); ``request_extras`` go into every completion request (e.g. ``ignore_eos``)
    so generation runs to the requested length; ``distributions`` are checked in order for
    the version.
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
    # The flag naming the served model (requests' "model"); None: the model path is served.
    served_name_flag: str | None = None
    # The flag that sets the context a request may use, instead of the model's positions.
    context_flag: str | None = None
    # A start whose GPU work waits for a file (its name in the variable ``gate_env``): the
    # argv prefix in place of ``launch``; None: the engine starts only whole.
    gated_launch: tuple[str, ...] | None = None
    gate_env: str | None = None

    def study_flags(self) -> dict[str, str]:
        """Flags every launch sets itself, with the config key (or fact) each comes from."""
        flags = {self.host_flag: "decode.host", self.port_flag: "decode.port"}
        if self.model_flag:
            flags[self.model_flag] = "the variant's model"
        return flags

    def argv(
        self,
        model: str,
        host: str,
        port: int,
        args: list[str],
        python: str | None = None,
        served_name: str | None = None,
        gated: bool = False,
    ) -> list[str]:
        """The launch argv; with ``served_name`` (engines with a ``served_name_flag``) the
        server answers to that name, replacing any configured one; ``gated``: the start that
        waits at its gate (``gated_launch``)."""
        python = python or sys.executable
        if gated and not self.gated_launch:
            raise ValueError(f"engine {self.name} has no gated start")
        launch = self.gated_launch if gated else self.launch
        argv = [part.replace("{python}", python) for part in launch]
        argv += [self.model_flag, model] if self.model_flag else [model]
        argv += [self.host_flag, host, self.port_flag, str(port)]
        args = [str(a) for a in args]
        if served_name and self.served_name_flag:
            args = _without_flag(args, self.served_name_flag)
            args += [self.served_name_flag, served_name]
        return argv + args

    def request_model(self, model: str, served_name: str | None = None) -> str:
        """The "model" of this run's requests: the served name where the engine takes one."""
        return served_name if served_name and self.served_name_flag else model

    def base_url(self, host: str, port: int) -> str:
        """The server's URL from this machine (an IPv6 address in brackets)."""
        return f"http://{url_host(host)}:{port}"

    def ready(
        self, host: str, port: int, model: str | None = None, served_name: str | None = None
    ) -> bool:
        """Ready when the health endpoint answers 200 (SGLang only after its own warm-up)
        and, given ``served_name``, ``/v1/models`` lists it (so the server answering is the
        one this run started); for ``ready_by_completion`` engines, when a 1-token
        completion of the request model returns."""
        base = self.base_url(host, port)
        if self.ready_by_completion:
            request_model = self.request_model(model or "", served_name)
            return one_token_completion(base, request_model) is not None
        if http_status(base + self.health_path) != 200:
            return False
        if served_name and self.served_name_flag:
            return served_name in (served_names(base) or [])
        return True

    def version(self) -> str | None:
        for dist in self.distributions:
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return None
