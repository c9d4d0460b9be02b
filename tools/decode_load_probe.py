#!/usr/bin/env python3
"""What each part of the decode load costs: one server, the load's parts switched on and off.

    tools/decode_load_probe.py --variant sglang-bf16-graphs --model results/decode/served_model/bf16
        [--level 1] [--level 256:study,nousage,bench] [--seconds 12] [--rounds 2]
        [--server-args "--max-running-requests 1024 --cuda-graph-max-bs 1024"] --out DIR
    tools/decode_load_probe.py --summarise DIR/probe.csv

Starts the variant's server once (its config args; --server-args replace the values of flags
it gives and add the others), then at each level's C, for each round, runs the level's arms
(all of them when it names none) in turn and writes one row per arm to DIR/probe.csv:
- study: the study's load (the decode job's: staggered where the config says, usage
  statistics in every chunk; --warmup-s its warm-up floor) with the power sampler (NVML at the
  variant's sample_hz, GPM on) running, as the decode job runs it;
- nosampler / nogpm / lowrate: the same load with no sampler / the sampler without GPM / the
  sampler at 2 Hz instead of the variant's sample_hz (the energy counter still once a
  second, GPM on);
- nousage: the load without per-chunk usage statistics (one token per chunk counted);
- bench / bench_sampler: SGLang's bench_serving (instruments.serving.bench_serving) without /
  with the sampler, on SGLang's native /generate;
- bench_oai: bench_serving without the sampler on /v1/completions, the study's own endpoint
  (with study and bench: whether the endpoint or the study's client moves the engine).
Each row: the client's TPOT and tok/s (bench_serving's: its median TPOT and its steady one, over
a window as long as the study's after its admission), the scheduler's tok/s over the same window
with 0.85 C to C running (its log), the load's CPU; the study's arms also the client's count over
the scheduler's whole log lines (``delivery_ratio``), its step (``server_step_ms``), the
server's long garbage collections and the load's own stalls (server_log, load_summary). The
arms alternate within a round, and odd rounds run them in reverse (A B, B A, A B, ...), so a
drift of the engine's speed over the rounds weighs on every arm alike; the summary then sets
each arm beside the first one round by round, with the scheduler's own rate in each: whether
a client slows the engine (the scheduler slower under it), or only reads it differently (the
same scheduler rate, another TPOT); and over all rounds each arm's mean TPOT beside the first
arm's with one standard error of their ratio (host_probes.arm_contrast): without CUDA graphs
the engine's own speed moves between windows by more than the effects asked about, and the
error says how many rounds it takes. --summarise prints the same from a finished probe.csv.
"""

import argparse
import csv
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import yaml  # noqa: E402
from studylib.instruments.host_probes import (  # noqa: E402
    LOW_SAMPLE_HZ,  # noqa: F401 - the lowrate arm's rate, read by its test
    arm_contrast,
    probe_tpot,
    round_arms,
    round_pairs,
    sampler_settings,
    with_server_args,
)
from studylib.instruments.power_sampler import Sampler, open_readers, visible_nvml_indices  # noqa: E402
from studylib.instruments.serving.bench_serving import (  # noqa: E402
    BenchWorker,
    bench_prompts,
    bench_serving_argv,
    run_bench_serving,
)
from studylib.instruments.serving.bench_steady import bench_steady  # noqa: E402
from studylib.instruments.serving.decode_load import (  # noqa: E402
    STEADY_FRACTION,
    LoadSpec,
    load_window,
)
from studylib.instruments.serving.engines import engine  # noqa: E402
from studylib.instruments.serving.load_summary import (  # noqa: E402
    decode_token_counter,
    summarize_load,
)
from studylib.instruments.serving.server_log import server_window_of  # noqa: E402
from studylib.stages.decode.decode_server import ServerPass, load_specs  # noqa: E402

ARMS = ("study", "nosampler", "nogpm", "lowrate", "nousage", "bench", "bench_oai", "bench_sampler")


class NoSampler:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", default="sglang-bf16-graphs")
    p.add_argument("--model", help="the served model folder (config-only)")
    p.add_argument("--config", default=str(ROOT / "config" / "config.yaml"))
    p.add_argument(
        "--level",
        action="append",
        default=[],
        help="C, or C:arm,arm (repeatable; default 1 and 256 with every arm)",
    )
    p.add_argument("--seconds", type=float, default=12.0)
    p.add_argument("--warmup-s", type=float, default=0.0,
                   help="each study arm's warm-up floor (the decode job's: decode.warmup_s); "
                        "a staggered load also waits for its first requests to end")  # fmt: skip
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--server-args", default="", help="extra server arguments, one string")
    p.add_argument("--port", type=int, default=30100)
    p.add_argument("--out")
    p.add_argument("--summarise", metavar="CSV", help="print a finished probe.csv's summary")
    a = p.parse_args()
    if a.summarise:
        try:
            rows = read(Path(a.summarise))
        except (OSError, ValueError) as exc:
            p.error(f"--summarise {a.summarise}: {exc}")
        print_summary(rows)
        print_rounds(rows)
        print_contrast(rows)
        return 0
    if not a.model or not a.out:
        p.error("--model and --out are needed to run a probe (or --summarise CSV)")
    levels = []
    for text in a.level or ["1", "256"]:
        c, _, names = text.partition(":")
        arms = names.split(",") if names else list(ARMS)
        unknown = sorted(set(arms) - set(ARMS))
        if unknown:
            p.error(f"--level {text}: unknown arms {unknown}; known: {', '.join(ARMS)}")
        levels.append((int(c), arms))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load(Path(a.config).read_text())["decode"]
    variant = config["variants"][a.variant]
    sample_hz = variant.get("sample_hz", config["sample_hz"])  # the decode job's rate
    args = with_server_args(variant["args"]["cuda"], a.server_args.split())
    model = str(Path(a.model).resolve())
    input_len, output_len = config["input_len"]["cuda"], config["output_len"]["cuda"]
    plan = {"engine": "sglang", "variant": a.variant, "model": model, "model_kind": "dummy",
            "args": args, "env": variant.get("env") or {}, "routing": variant.get("routing"),
            "host": "127.0.0.1", "port": a.port, "ready_timeout_s": 900}  # fmt: skip
    pas = ServerPass(plan, engine("sglang"), out, "server.log")
    readers, source, why = open_readers(visible_nvml_indices())
    print(f"power source {source} {why or ''}; server args {' '.join(args)}", flush=True)
    rows = []
    # One bench_serving runner for every bench arm: its imports (17-21 s a run on the H200)
    # paid once, so rounds are short against the host's phases of seconds.
    with pas.server, BenchWorker(out / "bench_serving.log") as worker:
        print(f"ready after {pas.server.wait_ready():.0f} s", flush=True)
        for c, arms in levels:
            spec = study_spec(config, variant, c, a.seconds, a.warmup_s)
            warm = LoadSpec(concurrency=c, input_len=input_len, output_len=16, num_prompts=c,
                            vocab_size=config["model"]["cuda"]["vocab_size"], seed=c)  # fmt: skip
            pas.load(warm)
            tpot_guess = None
            for rnd in range(a.rounds):
                for arm in round_arms(arms, rnd):
                    sampler = arm_sampler(arm, readers, sample_hz)
                    row = {"arm": arm, "round": rnd, "concurrency": c}
                    with sampler:
                        if arm.startswith("bench"):
                            row.update(bench(pas, a, c, input_len, output_len, model,
                                             tpot_guess, out, worker, arm))  # fmt: skip
                        else:
                            row.update(study(pas, spec, arm))
                    tpot_guess = tpot_guess or row.get("tpot_ms") or row.get("bench_tpot_ms")
                    print(row, flush=True)
                    rows.append(row)
                    write(rows, out / "probe.csv")
    print_summary(rows)
    print_rounds(rows)
    print_contrast(rows)
    return 0


def study_spec(config: dict, variant: dict, c: int, seconds: float, warmup_s: float) -> LoadSpec:
    """The decode job's steady load at C (decode_server.load_specs: staggered and pre-aged as
    the config and the variant say), with the probe's warm-up floor (its arms follow one
    another on a warm server) and a fixed window of ``seconds``."""

    def on_cuda(key):
        by_device = variant.get(key) or config.get(key) or {}
        return by_device.get("cuda") if isinstance(by_device, dict) else by_device

    plan = {"input_len": config["input_len"]["cuda"], "output_len": config["output_len"]["cuda"],
            "vocab_size": config["model"]["cuda"]["vocab_size"], "stagger": on_cuda("stagger"),
            "preaged": on_cuda("preaged"), "warmup_s": warmup_s}  # fmt: skip
    return load_specs(plan, c, seconds)[1]


def arm_sampler(arm: str, readers, sample_hz: float):
    """The sampler an arm runs beside its load: none, or the decode job's (``sample_hz``),
    without GPM or slower where the arm says so."""
    settings = sampler_settings(arm, sample_hz)
    return NoSampler() if settings is None else Sampler(readers, **settings)


def study(pas, spec, arm):
    if arm == "nousage":
        spec = LoadSpec(**{**spec.__dict__, "usage_per_chunk": False})
    load = pas.load(spec)
    window = load_window(load, spec.concurrency)
    if window is None:
        return {"error": "no steady window"}
    s = summarize_load(load.records, spec, *window, load.stalls)
    c = spec.concurrency
    server = server_window_of(pas.server.log_path, *window, math.ceil(STEADY_FRACTION * c), c,
                              received=decode_token_counter(load.records))  # fmt: skip
    return {"tpot_ms": s["tpot_ms"], "output_tok_s": s["output_tok_s"],
            "steady_s": s["steady_s"], "errors": s["errors"],
            "server_tok_s": server["server_tok_s"], "server_running_min":
            server["server_running_min"], "load_cpu_pct": load.cpu_pct,
            "delivery_ratio": server["delivery_ratio"],
            "server_step_ms": server["server_step_ms"], "server_gc_s": server["server_gc_s"],
            "load_stall_s": s["load_stall_s"]}  # fmt: skip


def bench_backend(arm: str) -> str:
    """bench_serving's backend (bench_serving.BACKENDS) for a bench arm: /v1/completions for
    ``bench_oai``, SGLang's native /generate for the others."""
    return "sglang-oai" if arm == "bench_oai" else "sglang"


def bench(pas, a, c, input_len, output_len, model, tpot_guess, out, worker, arm="bench"):
    prompts = bench_prompts(c, a.seconds, output_len, tpot_guess)
    result_file = out / f"{arm}_c{c}.jsonl"
    argv = bench_serving_argv(sys.executable, "127.0.0.1", a.port, model, c, input_len,
                              output_len, prompts, c, result_file,
                              backend=bench_backend(arm))  # fmt: skip
    r = worker.run(argv, result_file, 600)
    if r.pop("runner_died"):  # its runner ended without answering: once in its own process
        r = run_bench_serving(argv, result_file, 600, out / "bench_serving.log")
    # Like for like with the study's arm: its TPOT over a window as long as the study's after
    # its admission (not its wave's start prefills, nor its warm-up request), and the
    # scheduler's rate over that window with 0.85 C to C running.
    steady = bench_steady(r.pop("details", {}), c, output_len, r["t1"], a.seconds) or {}
    span = steady.get("span") or (r["t0"], r["t1"])
    server = server_window_of(pas.server.log_path, *span, math.ceil(STEADY_FRACTION * c), c)
    return {"tpot_ms": None, "bench_tpot_ms": r.get("bench_tpot_ms"),
            "bench_tpot_steady_ms": steady.get("tpot_ms"),
            "bench_output_tok_s": r.get("bench_output_tok_s"), "bench_prompts": prompts,
            "bench_duration_s": r.get("bench_duration_s"), "error": r.get("bench_error"),
            "server_tok_s": server["server_tok_s"],
            "server_running_min": server["server_running_min"]}  # fmt: skip


FIELDS = ["arm", "round", "concurrency", "tpot_ms", "output_tok_s", "steady_s", "errors",
          "server_tok_s", "server_running_min", "load_cpu_pct", "delivery_ratio",
          "server_step_ms", "server_gc_s", "load_stall_s", "bench_tpot_ms",
          "bench_tpot_steady_ms", "bench_output_tok_s", "bench_prompts", "bench_duration_s",
          "error"]  # fmt: skip


def write(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def read(path: Path) -> list[dict]:
    """A probe.csv's rows with their numbers as numbers (empty cells left out)."""

    def value(text):
        try:
            return int(text)
        except ValueError:
            return float(text)

    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"arm", "round", "concurrency"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"not a probe.csv: no {', '.join(sorted(missing))} column")
        rows = []
        for line, r in enumerate(reader, start=2):
            try:
                rows.append({k: (v if k in ("arm", "error") else value(v))
                             for k, v in r.items() if v not in ("", None)})  # fmt: skip
            except ValueError as exc:
                raise ValueError(f"line {line}: {exc}") from None
        return rows


def print_rounds(rows):
    """Round by round, each arm's TPOT and scheduler rate over the first arm's."""
    print("\nround by round, over the level's first arm: arm, C, round, TPOT ratio, "
          "scheduler tok/s ratio")  # fmt: skip
    for c, rnd, r, base in round_pairs(rows):
        rates = r.get("server_tok_s"), base.get("server_tok_s")
        engine = rates[0] / rates[1] if all(rates) else None
        ratio = probe_tpot(r) / probe_tpot(base)
        print(
            f"{r['arm']:14s} C={c:<4d} round {rnd}  {ratio:.3f}  "
            + (f"{engine:.3f}" if engine else "-")
        )


def print_summary(rows):
    print("\nmedian over rounds: arm, C, client TPOT ms, bench TPOT ms, bench steady TPOT ms, "
          "client tok/s, scheduler tok/s")  # fmt: skip
    keys = sorted({(r["concurrency"], r["arm"]) for r in rows})

    def med(rs, k):
        v = [r[k] for r in rs if r.get(k)]
        return f"{statistics.median(v):.3f}" if v else "-"

    for c, arm in keys:
        rs = [r for r in rows if r["concurrency"] == c and r["arm"] == arm]
        print(
            f"{arm:14s} C={c:<4d} {med(rs, 'tpot_ms'):>8s} {med(rs, 'bench_tpot_ms'):>8s} "
            f"{med(rs, 'bench_tpot_steady_ms'):>8s} "
            f"{med(rs, 'output_tok_s'):>10s} {med(rs, 'server_tok_s'):>10s}"
        )


def print_contrast(rows):
    print("\nover all rounds, beside the level's first arm: arm, C, rounds, TPOT ms mean ± sd, "
          "ratio of means ± 1 se, round by round, scheduler tok/s mean (min-max) and ratio, "
          "TPOT x scheduler tok/s / C")  # fmt: skip

    def f(v, fmt):
        return format(v, fmt) if v is not None else "-"

    for s in arm_contrast(rows):
        ratio = "first" if s["arm"] == s["against"] else (
            f"{f(s.get('tpot_ratio'), '.3f')} ± {f(s.get('tpot_ratio_se'), '.3f')}  "
            f"{f(s.get('round_ratio_min'), '.3f')}-{f(s.get('round_ratio_max'), '.3f')}"
        )  # fmt: skip
        print(
            f"{s['arm']:14s} C={s['concurrency']:<4d} {s['rounds']:2d}  "
            f"{f(s['tpot_mean'], '.3f')} ± {f(s['tpot_sd'], '.3f')}  {ratio}  "
            f"{f(s['engine_tok_s_mean'], '.0f')} ({f(s['engine_tok_s_min'], '.0f')}-"
            f"{f(s['engine_tok_s_max'], '.0f')}) {f(s.get('engine_ratio'), '.3f')}  "
            f"{f(s['reads_engine_mean'], '.3f')} ± {f(s['reads_engine_sd'], '.3f')}"
        )


if __name__ == "__main__":
    sys.exit(main())
