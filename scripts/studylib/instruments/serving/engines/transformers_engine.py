"""transformers' own OpenAI-compatible server: ``transformers serve MODEL`` (fastapi/uvicorn).

It serves a local model on CPU or any GPU (``--device``), with continuous batching and
paged attention under ``--continuous-batching``. Its ``/health`` answers before the model is
loaded (it loads on first use), so readiness is a real 1-token completion. It takes text
prompts only; the study's tokenizer maps the text back to the intended token ids, and the
study's model has no EOS, so no ``ignore_eos`` is needed.
"""

from .base import Engine

ENGINE = Engine(
    name="transformers",
    # The CLI as a module of the study's interpreter: no PATH lookup needed.
    launch=("{python}", "-m", "transformers.cli.transformers", "serve"),
    model_flag=None,  # the model is the positional argument
    served_name_flag=None,  # it serves the model path: requests name the path
    request_extras={},
    distributions=("transformers",),
    prompt_format="text",
    ready_by_completion=True,
    # Never touch a hub: the model is local, and the CLI's update check would reach PyPI.
    env={
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    },
)
