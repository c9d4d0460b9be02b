"""tools/decode_load_probe.py's plan and summary (its arms need a GPU server): rounds alternate
the arms' order, and the round-by-round summary sets each arm beside the level's first."""

import importlib.util

from helpers import ROOT


def probe():
    spec = importlib.util.spec_from_file_location("probe", ROOT / "tools" / "decode_load_probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rounds_alternate_the_arms_order():
    p = probe()
    arms = ["study", "bench_sampler", "nosampler"]
    assert [p.round_arms(arms, r) for r in range(3)] == [arms, arms[::-1], arms]


def test_each_arm_runs_its_own_sampler(monkeypatch):
    p = probe()
    monkeypatch.setattr(p, "Sampler", lambda readers, **kwargs: kwargs)
    assert isinstance(p.arm_sampler("nosampler", [], 20), p.NoSampler)
    assert isinstance(p.arm_sampler("bench", [], 20), p.NoSampler)
    assert isinstance(p.arm_sampler("bench_oai", [], 20), p.NoSampler)
    # The decode job's sampler (its sample_hz, GPM on), and the two that each drop a part.
    assert p.arm_sampler("study", [], 20) == {"rate_hz": 20, "gpm": True}
    assert p.arm_sampler("nogpm", [], 20) == {"rate_hz": 20, "gpm": False}
    assert p.arm_sampler("lowrate", [], 20) == {"rate_hz": p.LOW_SAMPLE_HZ, "gpm": True}


def test_each_arm_is_set_beside_the_first_round_by_round(capsys):
    p = probe()
    rows = [  # round 1 ran bench first: the pairing is by round and arm, not by order
        {"arm": "study", "round": 0, "concurrency": 1, "tpot_ms": 14.4, "server_tok_s": 70.0},
        {"arm": "bench", "round": 0, "concurrency": 1, "bench_tpot_ms": 13.2,
         "server_tok_s": 75.0},
        {"arm": "bench", "round": 1, "concurrency": 1, "bench_tpot_ms": 13.0,
         "server_tok_s": 76.0},
        {"arm": "study", "round": 1, "concurrency": 1, "tpot_ms": 14.0, "server_tok_s": 71.0},
    ]  # fmt: skip
    p.print_rounds(rows)
    lines = [line.split() for line in capsys.readouterr().out.splitlines() if "round" in line]
    assert ["bench", "C=1", "round", "0", "0.917", "1.071"] in lines
    assert ["bench", "C=1", "round", "1", "0.929", "1.070"] in lines


def test_server_args_replace_the_variants_values_and_add_new_flags():
    p = probe()
    args = ["--tp", "1", "--max-running-requests", "512", "--cuda-graph-max-bs", "512"]
    # A flag given twice is refused by the study's own check: the probe's value replaces it.
    assert p.with_server_args(args, ["--max-running-requests", "1024", "--disable-cuda-graph",
                                     "--stream-interval", "8"]) == [
        "--tp", "1", "--max-running-requests", "1024", "--cuda-graph-max-bs", "512",
        "--disable-cuda-graph", "--stream-interval", "8"]  # fmt: skip
    assert p.with_server_args(args, []) == args
    # Either spelling of a flag is the same flag.
    assert p.with_server_args(["--tp", "1", "--cuda-graph-max-bs=512"],
                              ["--cuda-graph-max-bs", "1024", "--tp=2"]) == [
        "--tp=2", "--cuda-graph-max-bs", "1024"]  # fmt: skip


def test_the_study_arm_runs_the_decode_jobs_load():
    import yaml

    p = probe()
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["decode"]
    variant = config["variants"]["sglang-fp8-graphs"]
    spec = p.study_spec(config, variant, 1024, 10.0, 0.0)
    # Staggered as the decode job's (its first requests end one after another), not lockstep;
    # a fixed window; the probe's own warm-up floor.
    assert spec.stagger and not spec.preaged and spec.concurrency == 1024
    assert (spec.duration_s, spec.warmup_s, spec.precision) == (10.0, 0.0, 0)
    assert (spec.input_len, spec.output_len, spec.vocab_size) == (128, 1024, 32000)
    # A variant's own preaged wins over decode's.
    aged = p.study_spec(config, {**variant, "preaged": {"cuda": True, "cpu": False}}, 64, 12.0,
                        5.0)  # fmt: skip
    assert aged.preaged and aged.stagger and aged.warmup_s == 5.0


def test_the_oai_arm_posts_where_the_study_does_and_the_others_natively(tmp_path):
    p = probe()
    calls = []

    class Worker:
        def run(self, argv, result_file, timeout_s):
            calls.append((argv, result_file))
            return {"runner_died": False, "bench_error": "stopped here", "t0": 0.0, "t1": 1.0}

    class Args:
        seconds, port = 12.0, 30100

    class Log:
        class server:
            log_path = tmp_path / "server.log"

    (tmp_path / "server.log").write_text("")
    for arm in ("bench", "bench_oai", "bench_sampler"):
        p.bench(Log, Args, 16, 128, 1024, str(tmp_path), 10.0, tmp_path, Worker(), arm)
    backends = [argv[argv.index("--backend") + 1] for argv, _ in calls]
    assert backends == ["sglang", "sglang-oai", "sglang"]
    # Each arm keeps its own result file (its last round's): both endpoints' runs stay to read.
    assert [f.name for _, f in calls] == [
        "bench_c16.jsonl",
        "bench_oai_c16.jsonl",
        "bench_sampler_c16.jsonl",
    ]
