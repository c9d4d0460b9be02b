"""The study's load checked by an independent client: SGLang's own ``bench_serving``.

``python -m sglang.bench_serving`` (the client SGLang's benchmarks use) runs against the same
server, right after the study's window at each C: random token ids of the study's input
length (``--dataset-name random-ids --tokenize-prompt``, exact lengths), the study's output
length with EOS ignored, ``--max-concurrency C`` and enough prompts for the study's window,
in whole waves of C and at least :data:`MIN_WAVES` (at high C one wave outlasts the window,
and a run of one wave is all start burst). Its median TPOT (per request: (latency - TTFT) /
(output tokens - 1)), median ITL and output tok/s stand beside the study's in
``decode_crosscheck.csv``. That median TPOT is not like for like at high C: the first wave's
C requests start at once, and an early request's TPOT holds the others' prefills (on the
H200 at C = 512, 1.3 s of median TTFT). So bench_serving also writes its per-request details
(``--output-details``), from which :mod:`.bench_steady` computes its TPOT over its steady
part as the study computes its own. This module runs as bench_serving's runner script too,
so it imports nothing of the study's.

Where the study's load staggers its first requests (``decode.stagger``), bench_serving's must
too, or the two clients drive different workloads: staggered, the replacements of finished
requests arrive one at a time and the engine prefills each alone (on the H200, bf16 eager at
C = 256: 506 prefill batches for 506 requests in the study's minute, 20 for 515 in
bench_serving's), and with the seed's MoE one 128-token prefill streams nearly every expert's
weights, as long as a decode step; in lockstep waves C prefills share one pass. The
scheduler's own rate was 10.4k tok/s under the staggered load and 12.5-13.2k under
bench_serving's waves, a quarter apart. So the runner takes the first C output lengths
(``--study-first-output-lens``) and gives them to bench_serving's first C random-ids rows;
its requests then end one after another as the study's do.

A job's runs share one runner process (:class:`BenchWorker`, ``--serve``): each run's start
took 17-21 s on the H200 box (its server log: from the drain before a run to the run's first
request; Python, bench_serving's imports, its tokenizer and prompts), five times per variant;
kept alive between runs (blocked on its input, no CPU), the runner pays the interpreter and
the imports once. It starts at the first run, after the first window, never during one.

bench_serving imports Hugging Face ``datasets`` at start, for its MMMU dataset alone. An
offline box does not carry that library's closure (pyarrow, fsspec, multiprocess, xxhash,
...), so when it is missing this module, run as a script, puts a stand-in in its place that
refuses to load any dataset, and runs bench_serving with ``HF_HUB_OFFLINE=1`` (the tokenizer
is the served model's local folder: without it each start retries the hub for a minute).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path

#: The fewest waves of C prompts one cross-check sends: with one, its first wave's start
#: burst (C prefills at once) is the whole run.
MIN_WAVES = 2
#: The most prompts one cross-check sends (a slow server at C = 1 would otherwise get many).
MAX_WAVES = 64
#: How long one bench_serving run may take beyond its expected time.
TIMEOUT_MARGIN_S = 120.0


def bench_prompts(concurrency: int, seconds: float, output_len: int, tpot_ms: float | None,
                  staggered: bool = False) -> int:  # fmt: skip
    """Whole waves of C prompts lasting about ``seconds`` at the study's TPOT, never fewer
    than :data:`MIN_WAVES` (that many when the TPOT is unknown or one wave already lasts
    that long) nor more than :data:`MAX_WAVES`; staggered, one wave more: the staggered
    first wave, before the steady part (:mod:`.bench_steady`)."""
    if not tpot_ms or tpot_ms <= 0:
        waves = MIN_WAVES
    else:
        request_s = output_len * tpot_ms / 1e3
        waves = max(MIN_WAVES, min(MAX_WAVES, math.ceil(seconds / request_s)))
    return concurrency * (waves + int(staggered))


def bench_timeout_s(prompts: int, concurrency: int, output_len: int,
                    tpot_ms: float | None) -> float:  # fmt: skip
    """How long one run may take: its waves one after the other at the study's TPOT (100 ms
    where unknown), twice, and :data:`TIMEOUT_MARGIN_S` for its start (imports, tokenizer)."""
    waves = math.ceil(prompts / concurrency)
    expected_s = waves * output_len * (tpot_ms or 100.0) / 1e3
    return 2 * expected_s + TIMEOUT_MARGIN_S


#: The runner's own flag (not bench_serving's): the first requests' output lengths, comma-separated.
FIRST_LENS_FLAG = "--study-first-output-lens"
#: bench_serving's backends the cross-check runs, by the endpoint their requests go to: SGLang's
#: native one (token ids as the study's prompts are) and the OpenAI one the study's own load
#: posts to. SGLang 0.5.16 takes token-id prompts (``--tokenize-prompt``) on the native one
#: only: the OpenAI one sends the same random ids as text, which the server tokenizes again.
BACKENDS = {"sglang": "/generate", "sglang-oai": "/v1/completions"}
#: Backends whose per-request ``itls`` hold one gap per streamed chunk, not per token (SGLang
#: 0.5.16's ``async_request_openai_completions``; the native one splits a chunk's gap over its
#: tokens). With ``--stream-interval 8`` a chunk holds about 8 tokens: their median ITL is a
#: chunk's gap (on an H100 at C = 1,024 FP8: 185 ms against a TPOT of 27 ms).
PER_CHUNK_GAPS = frozenset({"sglang-oai"})


def bench_serving_argv(python: str, host: str, port: int, model_dir: str, concurrency: int,
                       input_len: int, output_len: int, num_prompts: int, seed: int,
                       output_file: str | Path, first_output_lens: list[int] | None = None,
                       backend: str = "sglang") -> list[str]:  # fmt: skip
    """This module as bench_serving's runner, with bench_serving's arguments; with
    ``first_output_lens``, its first requests' output lengths (a staggered load's);
    ``backend``: one of :data:`BACKENDS`."""
    if backend not in BACKENDS:
        raise ValueError(f"bench_serving backend {backend!r}: one of {', '.join(BACKENDS)}")
    first = [FIRST_LENS_FLAG, ",".join(map(str, first_output_lens))] if first_output_lens else []
    ids = ["--tokenize-prompt"] if backend == "sglang" else []
    return [python, str(Path(__file__).resolve()), *first,
            "--backend", backend, "--host", str(host), "--port", str(port),
            "--model", str(model_dir), "--tokenizer", str(model_dir),
            "--dataset-name", "random-ids", *ids,
            "--random-input-len", str(input_len), "--random-output-len", str(output_len),
            "--random-range-ratio", "1.0", "--num-prompts", str(num_prompts),
            "--max-concurrency", str(concurrency), "--request-rate", "inf",
            "--seed", str(seed), "--warmup-requests", "1", "--disable-tqdm",
            # Per-request ttfts, itls, output_lens, errors in the result line (SGLang 0.5.16,
            # python/sglang/benchmark/serving.py: "--output-details", result_details).
            "--output-details", "--output-file", str(output_file)]  # fmt: skip


def bench_env(base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    return env


def read_bench_result(path: str | Path) -> dict:
    """The last JSON line bench_serving appended to its output file."""
    lines = [ln for ln in Path(path).read_text().splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"{path}: bench_serving wrote no result")
    return json.loads(lines[-1])


def _without_texts(path: Path, result: dict) -> None:
    """The result line without the generated texts (megabytes of random tokens at C = 512
    that nothing reads); its per-request timings stay."""
    if "generated_texts" in result:
        kept = {k: v for k, v in result.items() if k != "generated_texts"}
        path.write_text(json.dumps(kept) + "\n")


#: The per-request arrays of bench_serving's ``--output-details`` that the steady TPOT reads,
#: and the run's ``backend``, which says how its ``itls`` were kept (:data:`PER_CHUNK_GAPS`).
DETAIL_KEYS = ("ttfts", "itls", "output_lens", "errors", "backend")


def run_bench_serving(argv: list[str], output_file: str | Path, timeout_s: float,
                      log_path: str | Path) -> dict:  # fmt: skip
    """Run bench_serving; its numbers as ``bench_*`` fields, its per-request ``details``
    (:data:`DETAIL_KEYS`, empty without them) and the run's monotonic span (``t0``, ``t1``),
    or ``bench_error`` naming what went wrong (the log's last line)."""
    output_file = Path(output_file)
    output_file.unlink(missing_ok=True)
    t0 = time.monotonic()
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(argv)}\n")
        log.flush()
        try:
            done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=bench_env(),
                                  timeout=timeout_s, check=False)  # fmt: skip
            rc = done.returncode
        except subprocess.TimeoutExpired:
            rc = None
    return _run_result(rc, t0, time.monotonic(), output_file, timeout_s, log_path)


def _run_result(rc: int | None, t0: float, t1: float, output_file: Path, timeout_s: float,
                log_path: str | Path) -> dict:  # fmt: skip
    """A run's fields from its exit (None: timed out), span, result file and log."""
    out = {"t0": t0, "t1": t1}
    if rc != 0:
        tail = Path(log_path).read_text(errors="replace").strip().splitlines()[-1:] or [""]
        why = f"timed out after {timeout_s:.0f} s" if rc is None else f"exit {rc}"
        return {**out, "bench_error": f"bench_serving {why}: {tail[0][:300]}"}
    try:
        result = read_bench_result(output_file)
    except (OSError, ValueError) as exc:
        return {**out, "bench_error": f"{type(exc).__name__}: {exc}"}
    _without_texts(output_file, result)
    return {**out, "details": {k: result[k] for k in DETAIL_KEYS if k in result},
            "bench_tpot_ms": result.get("median_tpot_ms"),
            "bench_output_tok_s": result.get("output_throughput"),
            "bench_ttft_ms": result.get("median_ttft_ms"),
            # A chunk's gap is no token's: no ITL to set beside a TPOT.
            "bench_itl_ms": (None if result.get("backend") in PER_CHUNK_GAPS
                             else result.get("median_itl_ms")),
            "bench_completed": result.get("completed"),
            "bench_duration_s": result.get("duration"), "bench_error": ""}  # fmt: skip


#: How long a closing runner may take to end on its own before it is killed.
CLOSE_WAIT_S = 5.0


class BenchWorker:
    """One runner process (this module with ``--serve``) for a job's bench_serving runs: each
    run a line on its input (the arguments and a file to write its exit to), its output into
    the log. A run that times out kills the runner (the next run starts a new one), as does
    :meth:`close`: no process outlives the job's cross-check. ``run`` answers as
    :func:`run_bench_serving` does."""

    def __init__(self, log_path: str | Path, env: dict | None = None):
        self.log_path = Path(log_path)
        self.env = bench_env(env)
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _start(self, python: str, script: str) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115 - the child's
            try:
                self.proc = subprocess.Popen([python, script, "--serve"], stdin=subprocess.PIPE,
                                             stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                             text=True)  # fmt: skip
            finally:
                log.close()  # the child keeps its own descriptor
            self.starts += 1
        return self.proc

    def run(self, argv: list[str], output_file: str | Path, timeout_s: float) -> dict:
        """``argv`` as :func:`bench_serving_argv` gives it (python, this runner, arguments)."""
        output_file = Path(output_file)
        output_file.unlink(missing_ok=True)
        done = output_file.with_name(output_file.name + ".done")
        done.unlink(missing_ok=True)
        with open(self.log_path, "a", encoding="utf-8") as log:
            log.write(f"$ {' '.join(argv)}\n")
        t0 = time.monotonic()
        rc: int | None = None
        died = False
        try:
            proc = self._start(argv[0], argv[1])
            proc.stdin.write(json.dumps({"argv": argv[2:], "done": str(done)}) + "\n")
            proc.stdin.flush()
            while time.monotonic() - t0 < timeout_s:
                if done.exists():
                    rc = int(json.loads(done.read_text())["rc"])
                    break
                if proc.poll() is not None:  # the runner itself ended, the run unanswered
                    rc, died = (proc.returncode or 1), True
                    break
                time.sleep(0.1)
        except OSError as exc:  # the runner gone before it read the line (a broken pipe)
            with open(self.log_path, "a", encoding="utf-8") as log:
                log.write(f"the runner could not take the run: {exc}\n")
            rc, died = 1, True
        if rc is None:
            self.kill()  # a run that hangs takes its runner with it
        done.unlink(missing_ok=True)
        result = _run_result(rc, t0, time.monotonic(), output_file, timeout_s, self.log_path)
        # ``runner_died``: the runner ended without answering (not bench_serving's own exit):
        # the caller may run it once on its own (run_bench_serving).
        return {**result, "runner_died": died}

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.stdin.close()  # its loop ends at the end of its input
        except OSError:
            pass
        try:
            proc.wait(timeout=CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _datasets_stand_in() -> types.ModuleType:
    module = types.ModuleType("datasets")

    def load_dataset(*args, **kwargs):
        raise RuntimeError("Hugging Face datasets is not installed here: the study's "
                           "cross-check runs bench_serving's random-ids dataset only")  # fmt: skip

    module.load_dataset = load_dataset
    return module


def split_first_lens(argv: list[str]) -> tuple[list[str], list[int]]:
    """bench_serving's arguments without the runner's :data:`FIRST_LENS_FLAG`, and its lengths."""
    if FIRST_LENS_FLAG not in argv:
        return argv, []
    at = argv.index(FIRST_LENS_FLAG)
    if at + 1 >= len(argv):
        raise SystemExit(f"{FIRST_LENS_FLAG} needs comma-separated output lengths")
    try:
        lengths = [int(x) for x in argv[at + 1].split(",")]
    except ValueError:
        raise SystemExit(f"{FIRST_LENS_FLAG}: not whole numbers: {argv[at + 1]!r}") from None
    if any(n < 1 for n in lengths):
        raise SystemExit(f"{FIRST_LENS_FLAG}: an output length below 1: {argv[at + 1]!r}")
    return argv[:at] + argv[at + 2 :], lengths


def with_first_lengths(get_dataset, lengths: list[int]):
    """``get_dataset`` whose first rows ask for ``lengths`` output tokens (bench_serving
    sends its rows in order and its ``--max-concurrency`` slots take them first come)."""

    def staggered(*args, **kwargs):
        rows = get_dataset(*args, **kwargs)
        if len(rows) < len(lengths):
            raise ValueError(f"{len(rows)} prompts for {len(lengths)} staggered first requests")
        for row, n in zip(rows, lengths, strict=False):
            row.output_len = n
        return rows

    return staggered


def _bench_module():
    """SGLang's bench_serving module, imported as its runner imports it: without this folder on
    the path (run as a script it is sys.path[0], and its modules (profile, model, load) would
    shadow the standard library's and SGLang's) and with a stand-in for a missing
    ``datasets``. sglang.bench_serving is the deprecated name of sglang.benchmark.serving
    (0.5.16)."""
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != here]
    if importlib.util.find_spec("datasets") is None:
        sys.modules["datasets"] = _datasets_stand_in()
    return importlib.import_module("sglang.benchmark.serving")


def _run_once(module, get_dataset, argv: list[str]) -> None:
    """One bench_serving command line (its cli_main parses sys.argv), the runner's first
    output lengths applied to a fresh copy of ``get_dataset``."""
    argv, lengths = split_first_lens(argv)
    sys.argv = ["sglang.benchmark.serving", *argv]
    # run_benchmark calls the name it imported (SGLang 0.5.16, benchmark/serving.py); a run
    # without first lengths gets the module's own back (a served runner's earlier run may
    # have patched it).
    if lengths:
        module.get_dataset = with_first_lengths(get_dataset, lengths)
    elif get_dataset is not None:
        module.get_dataset = get_dataset
    module.cli_main()


def main(argv: list[str]) -> None:
    """bench_serving's command line, with a stand-in for a missing ``datasets`` and the
    runner's first output lengths applied; ``--serve``: one run per input line (BenchWorker)."""
    if argv == ["--serve"]:
        serve()
        return
    module = _bench_module()
    _run_once(module, getattr(module, "get_dataset", None), argv)


def serve() -> None:
    """Runs for :class:`BenchWorker` until its input ends: per line, {"argv", "done"}; the
    run's exit (0, or the code it stopped with) goes to ``done`` once its output is out."""
    module = _bench_module()
    get_dataset = getattr(module, "get_dataset", None)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            _run_once(module, get_dataset, request["argv"])
            rc = 0
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception:  # noqa: BLE001 - one run's failure is its exit; the runner goes on
            traceback.print_exc()
            rc = 1
        sys.stdout.flush()
        sys.stderr.flush()
        done = Path(request["done"])
        part = done.with_name(done.name + ".part")
        part.write_text(json.dumps({"rc": rc}))
        part.replace(done)


if __name__ == "__main__":
    main(sys.argv[1:])
