"""vLLM: ``vllm serve MODEL``; ready when ``/health`` answers 200."""

from .base import Engine

ENGINE = Engine(
    name="vllm",
    launch=("vllm", "serve"),
    model_flag=None,  # the model is vllm serve's positional argument
    served_name_flag="--served-model-name",
    request_extras={"ignore_eos": True},
    distributions=("vllm",),
    context_flag="--max-model-len",
)
