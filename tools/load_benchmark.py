#!/usr/bin/env python3
"""Measure the decode load generator itself: its CPU and whether tok/s matches C / TPOT.

    tools/load_benchmark.py [--concurrency 256] [--seconds 10] [--token-delay 0.03]
        [--output-len 256] [--url http://127.0.0.1:30000 --model NAME]

Without --url it starts the stand-in server (tests/standin_server.py: one token every
--token-delay seconds per stream, like a server with that TPOT) and drives it. The targets
(issue: SGLang decode) are the generator's CPU under one core at C = 256 and measured tok/s
within 5 % of C / TPOT. The stand-in is a Python thread-per-stream server sharing the
machine's cores with the generator: on a 2-core box it, not the generator, limits tok/s.
"""

import argparse
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from studylib.instruments.serving.decode_load import (  # noqa: E402
    LoadSpec,
    load_window,
    run_load,
)
from studylib.instruments.serving.engines import engine  # noqa: E402
from studylib.instruments.serving.launcher import ServerProcess  # noqa: E402
from studylib.instruments.serving.load_summary import summarize_load  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--token-delay", type=float, default=0.03)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--url", help="drive this server instead of the stand-in")
    p.add_argument("--model", default="standin")
    p.add_argument("--ready-timeout", type=float, default=60.0,
                   help="seconds the stand-in may take to answer /health")  # fmt: skip
    a = p.parse_args()
    spec = LoadSpec(concurrency=a.concurrency, duration_s=a.seconds, input_len=a.input_len,
                    output_len=a.output_len, vocab_size=1000)  # fmt: skip
    extras = {"ignore_eos": True}
    if a.url:
        load = run_load(a.url, a.model, spec, extras)
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = [sys.executable, str(ROOT / "tests" / "standin_server.py"), "--port", str(port),
                "--token-delay", str(a.token_delay)]  # fmt: skip
        sglang = engine("sglang")
        log = Path("/tmp") / f"load_benchmark_{port}.log"

        def ready():
            return sglang.ready("127.0.0.1", port)

        with ServerProcess(argv, log, ready=ready, ready_timeout_s=a.ready_timeout,
                           poll_s=0.1) as server:  # fmt: skip
            server.wait_ready()
            load = run_load(f"http://127.0.0.1:{port}", a.model, spec, extras)
    window = load_window(load, a.concurrency)  # as decode.py
    s = summarize_load(load.records, spec, *window)

    def show(key: str, spec: str) -> str:
        # TTFT and ITL come from finished requests: none finish in a window shorter than one.
        return "n/a" if s[key] is None else format(s[key], spec)

    print(f"C={a.concurrency} steady {s['steady_s']:.1f} s: {show('output_tok_s', '.0f')} "
          f"tok/s, TPOT {show('tpot_ms', '.2f')} ms, tok/s / (C/TPOT) = "
          f"{show('tok_s_over_c_tpot', '.3f')}, TTFT p50 {show('ttft_p50_ms', '.1f')} ms, "
          f"errors {s['errors']}, generator CPU {load.cpu_pct:.1f} % of one core")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
