"""A stand-in inference server following SGLang's / vLLM's HTTP contract, for tests.

    python tests/standin_server.py --port P [--ready-after S] [--ignore-sigterm]
        [--exit-before-ready CODE] [--crash-after-requests N] [--spawn-child]
        [--served-model-name NAME]

GET /health: 503 until --ready-after seconds have passed, then 200. GET /v1/models: the
served name (--served-model-name, else --model-path) as {"data": [{"id": NAME}]}.
POST /v1/completions: an OpenAI completion of max_tokens tokens (streamed as SSE when
"stream" is true), stopping early at "EOS" unless ignore_eos is set; a request naming
another model gets 404, as from vLLM. POST /start|stop|dump_expert_distribution_record:
SGLang's recorder (the dump gives per-layer per-expert token counts; --crash-when-recording
kills the server when recording starts). POST /start_profile: SGLang's profiler with
num_steps; here a "step" is one streamed token of any request, and after num_steps of them
each TP rank (--tp / --tp-size) gets a synthetic trace (tests/synthetic_trace.py) of
num_steps decode steps of the model's layers (num_hidden_layers of --model-path's
config.json, else 2), named as SGLang names it; the log says how many tokens the streams
had sent when it started (the fewest). --profile-prefill puts a prefill pass in it,
--profile-garbage writes a file that is no trace; with --profile-never a profile never
ends by itself. POST /stop_profile ends a running profile (writing its trace, unless
--profile-never). GET /v1/loads: the requests streaming now, as SGLang's num_running_reqs;
the trace's decode kernel records that count as its batch when the profile starts.
--prefill-delay S: a streamed request's prefill holds the one engine for S seconds before
its first token, stalling every stream. --tokens-per-chunk K sends K tokens per chunk (as
SGLang does when its HTTP side falls behind); with stream_options.continuous_usage_stats
every chunk carries the tokens so far, unless --no-usage-stats. --linger-cancelled S: a
request whose client went away still counts for S seconds, as SGLang keeps a cancelled
stream's request until it notices the closed connection. --decode-log-tok-s R: every 0.25 s
the log gets a line as SGLang's scheduler writes every 40 decode steps, claiming R generated
tokens/s over the requests streaming now; --decode-log-counted: the tokens it streamed since
the line before, as SGLang's scheduler counts its decode steps' tokens. With
STUDY_START_GATE naming a file (a gated start, engines/sglang_gate.py) it prints the gate's
waiting line and goes on (binds, and counts --ready-after) only once that file exists.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from synthetic_trace import write_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from studylib.instruments.serving.engines.sglang_gate import (  # noqa: E402
    GATE_ENV,
    wait_for_gate,
)
from studylib.instruments.serving.engines.sglang_gate import WAITING as GATE_WAITING  # noqa: E402

STATE = {
    "requests": 0,
    "recording": False,
    "tokens": 0,
    "decoded": 0,
    "profile": None,
    "held": 0,
    "held_most": 0,  # the most held since the last decode line (its #running-req)
    "streams": {},
    "prompts": {},
}  # streams: tokens sent so far per streaming request; prompts: their prompts' lengths
LOCK = threading.Lock()
# One engine: a prefill (--prefill-delay) holds it, and every stream's next token waits for
# it, as a server's decode steps wait behind the prefills of newly admitted requests.
ENGINE = threading.Lock()
# --max-running: the slots of the requests streaming at once (None: no limit).
RUNNING: threading.Semaphore | None = None


def model_layers(model_path: str) -> int:
    try:
        return int(json.loads((Path(model_path) / "config.json").read_text())["num_hidden_layers"])
    except (OSError, ValueError, KeyError, TypeError):
        return 2


def write_profile(profile: dict, args) -> None:
    """The trace files SGLang's _stop_profile writes, one per TP rank."""
    folder = Path(profile["output_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(args.tp):
        prefix = f"{profile['prefix']}-" if profile["prefix"] else ""
        name = f"{prefix}{profile['id']}-TP-{rank}"
        name += f"-EP-{rank}" if args.ep_size > 1 else ""
        path = folder / f"{name}.trace.json.gz"
        if args.profile_garbage:
            path.write_bytes(b"not a trace")
        else:
            write_trace(path, profile["steps"], model_layers(args.model_path), ranks=args.tp,
                        prefill_after=1 if args.profile_prefill else None,
                        batch=profile["batch"])  # fmt: skip
    print(f"standin: profile {profile['id']} written to {folder}", flush=True)


def count_token(args) -> None:
    """One streamed token: one step of a running profile (--profile-never: one that never
    reaches its last step)."""
    with LOCK:
        STATE["tokens"] += 1
        profile = STATE["profile"]
        if profile is None or args.profile_never:
            return
        if STATE["tokens"] - profile["start"] < profile["steps"]:
            return
        STATE["profile"] = None
    write_profile(profile, args)


def decode_log(tok_s: float | None) -> None:
    """SGLang's periodic decode line (scheduler_components/metrics_reporter.py), stamped to
    the millisecond under SGLANG_LOG_MS=1 as SGLang's are. ``tok_s``: the rate claimed;
    None: the tokens streamed since the line before (each request's first aside, as
    SGLang's decode steps count) over the time since it."""
    ms = os.environ.get("SGLANG_LOG_MS") == "1"
    last = time.time()
    while True:
        time.sleep(0.25)
        with LOCK:
            now, made, running = time.time(), STATE["decoded"], STATE["held_most"]
            STATE["decoded"], STATE["held_most"] = 0, STATE["held"]
        # The batch the interval ran (not the moment's: a finished stream's replacement not
        # yet arrived would read C - 1 at random, and a test of C kept running would flake).
        if running:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
            stamp += f".{int(now * 1000) % 1000:03d}" if ms else ""
            rate = tok_s if tok_s is not None else made / (now - last)
            print(f"[{stamp}] Decode batch, #running-req: {running}, #token: 0, token "
                  f"usage: 0.00, cuda graph: True, gen throughput (token/s): {rate:.2f}, "
                  "#queue-req: 0", flush=True)  # fmt: skip
        last = now


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-path", default="standin")
    parser.add_argument("--served-model-name")
    parser.add_argument("--ready-after", type=float, default=0.0)
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--crash-diagnostics", action="store_true")
    parser.add_argument("--exit-before-ready", type=int)
    parser.add_argument("--crash-after-requests", type=int)
    parser.add_argument("--spawn-child", action="store_true")
    parser.add_argument("--token-delay", type=float, default=0.001)
    parser.add_argument("--prefill-delay", type=float, default=0.0)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--no-usage-stats", action="store_true")
    parser.add_argument("--eos-after", type=int, default=3)
    parser.add_argument("--expert-distribution-recorder-mode")
    # With the recorder on, die at the first recorded request as SGLang did on the H200 when
    # fused shared-expert ids overran the recorder's buffer (a CUDA device-side assert).
    parser.add_argument("--crash-when-recording", action="store_true")
    parser.add_argument("--tp", "--tp-size", dest="tp", type=int, default=1)
    parser.add_argument("--ep-size", type=int, default=1)
    parser.add_argument("--profile-prefill", action="store_true")
    parser.add_argument("--profile-garbage", action="store_true")
    parser.add_argument("--profile-never", action="store_true")
    parser.add_argument("--linger-cancelled", type=float, default=0.0)
    # At most this many requests stream at once; the others wait, queued (a server's
    # --max-running-requests): 0, no limit.
    parser.add_argument("--max-running", type=int, default=0)
    parser.add_argument("--decode-log-tok-s", type=float)
    parser.add_argument("--decode-log-counted", action="store_true")
    # Compile one "kernel" into Triton's cache (TRITON_CACHE_DIR) at start, as Triton lays
    # it out (its .source, 0.5 s later its .json), and log SGLang's graph-capture line.
    parser.add_argument("--compile-at-start", action="store_true")
    args, _ = parser.parse_known_args()
    global RUNNING
    RUNNING = threading.Semaphore(args.max_running) if args.max_running > 0 else None
    served_name = args.served_model_name or args.model_path
    started = time.monotonic()
    print(f"standin: starting on {args.host}:{args.port}", flush=True)
    gate = os.environ.get(GATE_ENV)
    if gate:
        # A gated start (engines/sglang_gate.py): nothing past this line before the gate opens.
        print(f"{GATE_WAITING} {gate}", flush=True)
        wait_for_gate(Path(gate))
        print(f"standin: past the gate at {time.time():.3f}", flush=True)
        started = time.monotonic()  # --ready-after counts from here, as SGLang's GPU work does
    if os.environ.get("SGLANG_SIMULATE_UNIFORM_EXPERTS") == "1":
        print("standin: uniform expert routing", flush=True)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, lambda *a: print("standin: ignoring SIGTERM", flush=True))
    if args.crash_diagnostics:
        # SGLang 0.5.16 takes the study's SIGTERM for a child's crash and, with its crash
        # diagnostics on (the default), sleeps 5 s before dumping them.
        def crashed(*_):
            if any(
                os.environ.get(k, "1") != "0"
                for k in ("SGLANG_PYSPY_DUMP_BEFORE_CRASH", "SGLANG_CUDA_COREDUMP_BEFORE_CRASH")
            ):
                print("Sleeping 5 seconds before crash diagnostics", flush=True)
                time.sleep(5)
            os._exit(0)

        signal.signal(signal.SIGTERM, crashed)
    if args.spawn_child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        print(f"standin: child pid {child.pid}", flush=True)
    if args.decode_log_tok_s is not None or args.decode_log_counted:
        threading.Thread(target=decode_log, args=(args.decode_log_tok_s,), daemon=True).start()
    if args.compile_at_start:
        kernel = Path(os.environ["TRITON_CACHE_DIR"]) / "STANDINKEY"
        kernel.mkdir(parents=True, exist_ok=True)
        now = time.time()
        for ext, at in (("source", now - 0.5), ("json", now)):
            (kernel / f"standin_kernel.{ext}").write_text("{}")
            os.utime(kernel / f"standin_kernel.{ext}", (at, at))
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        print(f"[{stamp}] Capture target decode CUDA graph end. elapsed=0.50 s, mem usage=0.00 "
              "GB, avail mem=1.00 GB.", flush=True)  # fmt: skip
    if args.exit_before_ready is not None:
        time.sleep(0.3)
        print("standin: fatal: out of GPU memory (simulated)", flush=True)
        return args.exit_before_ready

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _json(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                ready = time.monotonic() - started >= args.ready_after
                self._json(200 if ready else 503, {"ready": ready})
            elif self.path.startswith("/v1/loads"):
                self._json(200, {"loads": [{"dp_rank": 0, "num_running_reqs": STATE["held"],
                                            "num_waiting_reqs": 0}]})  # fmt: skip
            elif self.path == "/v1/models":
                self._json(
                    200, {"object": "list", "data": [{"id": served_name, "object": "model"}]}
                )
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            payload = json.loads(self.rfile.read(length) or b"{}")
            if self.path.endswith("_expert_distribution_record"):
                action = self.path.strip("/").split("_")[0]
                STATE["recording"] = action == "start"
                if STATE["recording"] and args.crash_when_recording:
                    print("ScatterGatherKernel.cu:163: Assertion `idx_dim >= 0 && idx_dim < "
                          "index_size` failed. (simulated)", flush=True)  # fmt: skip
                    os._exit(134)
                if action == "dump":
                    self._json(200, {"logical_count": [[5, 0, 11], [2, 14, 0]]})
                else:
                    self._json(200, {"ok": True, "action": action})
                return
            if self.path == "/start_profile":
                with LOCK:
                    if STATE["profile"] is not None:
                        self._json(500, {"error": "Profiling is already in progress."})
                        return
                    STATE["profile"] = {
                        "output_dir": payload.get("output_dir") or "/tmp",
                        "steps": int(payload.get("num_steps") or 1),
                        "prefix": payload.get("profile_prefix") or "",
                        "id": payload.get("profile_id") or str(time.time()),
                        "start": STATE["tokens"],
                        "batch": STATE["held"],
                    }  # fmt: skip
                streamed = min(STATE["streams"].values(), default=0)
                prompts = sorted(set(STATE["prompts"].values()))
                print(f"standin: profiling {payload} after {streamed} tokens per stream, "
                      f"prompts of {prompts} tokens", flush=True)  # fmt: skip
                body = b"Start profiling.\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if self.path == "/stop_profile":
                with LOCK:
                    profile, STATE["profile"] = STATE["profile"], None
                if profile is None:
                    self._json(500, {"error": "Profiling is not in progress."})
                    return
                print(f"standin: profile {profile['id']} stopped", flush=True)
                if not args.profile_never:
                    write_profile(profile, args)
                self._json(200, {"ok": True})
                return
            if self.path != "/v1/completions":
                self._json(404, {"error": "not found"})
                return
            if payload.get("model") not in (None, served_name):
                self._json(404, {"error": f"the model {payload['model']!r} does not exist"})
                return
            STATE["requests"] += 1
            if args.crash_after_requests and STATE["requests"] > args.crash_after_requests:
                # Once the requests already streaming have ended: exactly N are answered,
                # whatever the machine's speed (a crash mid-stream took a third one along).
                deadline = time.monotonic() + 10
                while STATE["streams"] and time.monotonic() < deadline:
                    time.sleep(0.002)
                print("standin: crashing during load (simulated)", flush=True)
                os._exit(9)
            n = int(payload.get("max_tokens", 16))
            if not payload.get("ignore_eos"):
                n = min(n, args.eos_after)
            if not payload.get("stream"):
                time.sleep(args.token_delay * n)
                self._json(200, {"choices": [{"text": "x" * n, "finish_reason": "length"}],
                                 "usage": {"completion_tokens": n}})  # fmt: skip
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            key = object()
            with LOCK:
                STATE["held"] += 1
                STATE["held_most"] = max(STATE["held_most"], STATE["held"])
                STATE["streams"][key] = 0
                prompt = payload.get("prompt")
                STATE["prompts"][key] = len(prompt) if isinstance(prompt, list | str) else 0
            admitted = RUNNING is None or RUNNING.acquire()
            try:
                if args.prefill_delay:
                    with ENGINE:
                        time.sleep(args.prefill_delay)
                options = payload.get("stream_options") or {}
                continuous = options.get("continuous_usage_stats") and not args.no_usage_stats
                sent = 0
                for i in range(n):
                    time.sleep(args.token_delay)
                    with ENGINE:
                        pass
                    count_token(args)
                    if i:
                        with LOCK:
                            STATE["decoded"] += 1
                    if (i + 1) % args.tokens_per_chunk and i < n - 1:
                        continue  # held back: sent with the next ones in one chunk
                    chunk = {
                        "choices": [
                            {
                                "text": "x" * (i + 1 - sent),
                                "index": 0,
                                "finish_reason": "length" if i == n - 1 else None,
                            }
                        ]
                    }
                    if continuous or i == n - 1:
                        chunk["usage"] = {"completion_tokens": i + 1}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    sent = STATE["streams"][key] = i + 1
                self.wfile.write(b"data: [DONE]\n\n")
            except OSError:  # the client went away: held a while longer, as by SGLang
                time.sleep(args.linger_cancelled)
            finally:
                if RUNNING is not None and admitted:
                    RUNNING.release()
                with LOCK:
                    STATE["held"] -= 1
                    STATE["streams"].pop(key, None)
                    STATE["prompts"].pop(key, None)

    ThreadingHTTPServer.request_queue_size = 1024  # hundreds of clients connect at once
    if ":" in args.host:  # an IPv6 address (::1, ::)
        ThreadingHTTPServer.address_family = socket.AF_INET6
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("standin: serving", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
