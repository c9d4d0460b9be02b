#!/usr/bin/env python3
"""Start SGLang once on a config-only model of the study's geometry and ask one completion.

    tools/sglang_smoke.py [--architecture glm4_moe|qwen3_moe] [--weights bf16|fp8]
        [--layers 1] [--port 30100] [-- extra sglang args]

A quick check on a new GPU box that SGLang serves the architecture with random weights
before the study's decode jobs run (its runtime builds are cached for them). Prints the
ready time, the completion and the teardown; exits non-zero with the server log's tail.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from studylib.core.config import load_config  # noqa: E402
from studylib.instruments.serving.engines import engine  # noqa: E402
from studylib.instruments.serving.engines.base import one_token_completion, run_served_name  # noqa: E402
from studylib.instruments.serving.launcher import ServerFailed, ServerProcess  # noqa: E402
from studylib.instruments.serving.served_model import write_served_model  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--architecture", default="glm4_moe")
    p.add_argument("--weights", default="bf16")
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--port", type=int, default=30100)
    p.add_argument("extra", nargs="*")
    a = p.parse_args()
    config = load_config(ROOT / "config" / "config.yaml")
    geometry = {**config["decode"]["model"]["cuda"], "layers": a.layers,
                "architecture": a.architecture}  # fmt: skip
    if a.architecture == "qwen3_moe":
        geometry["shared_experts"] = 0
    variant = config["decode"]["variants"]["sglang-bf16-graphs"]
    model = Path(tempfile.mkdtemp(prefix="sglang-smoke-"))
    write_served_model(model, geometry, a.weights)
    eng = engine("sglang")
    name = run_served_name("smoke")
    args = [*variant["args"]["cuda"], "--load-format", "dummy", *a.extra]
    argv = eng.argv(str(model), "127.0.0.1", a.port, args, served_name=name)
    log = model / "server.log"
    t0 = time.monotonic()
    try:

        def ready():
            return eng.ready("127.0.0.1", a.port, str(model), name)

        with ServerProcess(argv, log, ready=ready, env=eng.env, ready_timeout_s=900) as server:
            ready = server.wait_ready()
            text = one_token_completion(eng.base_url("127.0.0.1", a.port), name)
            print(f"smoke {a.architecture} {a.weights} x{a.layers}: ready after {ready:.1f} s, "
                  f"completion {text!r}")  # fmt: skip
        print(f"teardown {server.stop_result}, total {time.monotonic() - t0:.1f} s")
        return 0 if text is not None else 1
    except ServerFailed as exc:
        print(f"smoke {a.architecture} {a.weights}: FAILED {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
