"""tools/decode_load_probe.py's plan and summary (its arms need a GPU server): rounds alternate
the arms' order, and the round-by-round summary sets each arm beside the level's first."""

import importlib.util
import sys

import pytest
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


def test_the_contrast_over_rounds_tells_a_shift_from_the_engines_own_movement():
    p = probe()
    # Six rounds at C = 16: the engine's step moves 10.5-13 ms from window to window under
    # both clients; bench reads 10 % slower in every round, its engine no slower.
    steps = [10.5, 13.0, 11.0, 12.5, 11.5, 12.0]
    rows = []
    for rnd, step in enumerate(steps):
        rows.append({"arm": "study", "round": rnd, "concurrency": 16, "tpot_ms": step,
                     "server_tok_s": 16_000 / step})  # fmt: skip
        rows.append({"arm": "bench", "round": rnd, "concurrency": 16,
                     "bench_tpot_steady_ms": 1.1 * step, "bench_tpot_ms": 99.0,
                     "server_tok_s": 16_000 / step})  # fmt: skip
    study, bench = p.arm_contrast(rows)
    assert (study["arm"], study["rounds"], study["against"]) == ("study", 6, "study")
    assert "tpot_ratio" not in study
    assert study["reads_engine_mean"] == pytest.approx(1.0)
    # The steady TPOT is bench's, not its median; the shift is 10 % in every round and
    # its standard error comes from the arms' spread (unpaired): the steps' variance 0.875 ms²,
    # bench's 1.21 times it, over the study's mean step 11.75 ms: 4.8 %.
    assert bench["tpot_ratio"] == pytest.approx(1.1)
    assert bench["round_ratio_min"] == pytest.approx(1.1)
    assert bench["round_ratio_max"] == pytest.approx(1.1)
    assert bench["tpot_ratio_se"] == pytest.approx(((0.875 + 1.21 * 0.875) / 6) ** 0.5 / 11.75)
    assert bench["engine_ratio"] == pytest.approx(1.0)
    assert bench["reads_engine_mean"] == pytest.approx(1.1)
    # One round: no spread to judge by.
    one = p.arm_contrast([r for r in rows if r["round"] == 0])
    assert one[1]["tpot_ratio_se"] is None and one[1]["tpot_ratio"] == pytest.approx(1.1)


def test_a_finished_probe_csv_is_summarised_again(tmp_path, capsys, monkeypatch):
    p = probe()
    rows = [
        {"arm": "study", "round": 0, "concurrency": 16, "tpot_ms": 11.0, "server_tok_s": 1450.0,
         "errors": 0},
        {"arm": "bench_oai", "round": 0, "concurrency": 16, "bench_tpot_ms": 10.6,
         "bench_tpot_steady_ms": 10.9, "server_tok_s": 1490.0, "error": ""},
    ]  # fmt: skip
    p.write(rows, tmp_path / "probe.csv")
    back = p.read(tmp_path / "probe.csv")
    assert back[0] == rows[0]
    assert back[1]["bench_tpot_steady_ms"] == 10.9 and "error" not in back[1]
    argv = ["decode_load_probe.py", "--summarise", str(tmp_path / "probe.csv")]
    monkeypatch.setattr(sys, "argv", argv)
    assert p.main() == 0
    out = capsys.readouterr().out
    assert "bench_oai      C=16   round 0  0.991  1.028" in out
    assert "over all rounds" in out


@pytest.mark.parametrize(
    "text, said",
    [(None, "No such file"), ("a,b\n1,2\n", "not a probe.csv: no arm, concurrency, round"),
     ("arm,round,concurrency,tpot_ms\nstudy,0,16,fast\n", "line 2: could not convert")],
)  # fmt: skip
def test_a_bad_probe_csv_is_refused_in_one_line(tmp_path, capsys, monkeypatch, text, said):
    p = probe()
    path = tmp_path / "probe.csv"
    if text is not None:
        path.write_text(text)
    monkeypatch.setattr(sys, "argv", ["decode_load_probe.py", "--summarise", str(path)])
    with pytest.raises(SystemExit) as stop:
        p.main()
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("decode_load_probe.py: error: --summarise ") and said in err


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
