"""The decode stage's plans (stages/decode/decode_plan.py): a variant's settings, where it is
planned, per-device entries."""

from helpers import ROOT, default_config
from studylib.core.config import merged_config, read_config_file
from studylib.stages.decode.decode_plan import counted_gpus
from studylib.stages.decode.decode_server import load_specs, warmup_floor


def test_a_variant_overrides_the_load_settings_and_only_its_own_plan():
    from snakemake.utils import validate
    from studylib.stages.decode.decode_plan import decode_plan, resolve_for_device

    config = default_config()
    variants = config["decode"]["variants"]
    variants["two_gpus"] = {"engine": "transformers", "model": "local", "gpus": 2,
                            "concurrency": {"cuda": [16], "cpu": [2]},
                            "preaged": {"cuda": True, "cpu": False}}  # fmt: skip
    validate(config, str(ROOT / "config" / "schema.yaml"), set_default=True)
    base = resolve_for_device(decode_plan(config, "transformers"), "cuda")
    two = resolve_for_device(decode_plan(config, "two_gpus"), "cuda")
    assert base["concurrency"] == [1, 16, 64, 256, 512] and two["concurrency"] == [16]
    assert two["gpus"] == 2 and two["output_len"] == base["output_len"]
    # Its own preaged reaches its load, and only its own: a pre-aged job beside a plain one.
    specs = {name: load_specs({**plan, "vocab_size": 1000}, 16, 30.0)[1]
             for name, plan in (("two", two), ("base", base))}  # fmt: skip
    assert specs["two"].preaged and specs["two"].stagger and not specs["base"].preaged


def test_variants_are_planned_where_they_serve():
    from studylib.stages.decode.decode_plan import decode_variants, served_models

    config = default_config()
    assert decode_variants(config, "cpu") == ["transformers"]
    # The default serves the two with CUDA graphs (issue 34's 20 minutes); the others are off.
    assert decode_variants(config, "cuda") == ["sglang-bf16-graphs", "sglang-fp8-graphs"]
    assert served_models(config, "cuda") == ["bf16", "fp8"] and served_models(config, "cpu") == []
    # config/examples/full.yaml turns every variant on, and the recorder pass.
    full = merged_config(config, read_config_file(ROOT / "config/examples/full.yaml"))
    assert decode_variants(full, "cuda") == ["sglang-bf16-graphs", "sglang-bf16-eager",
                                             "sglang-fp8-graphs", "sglang-fp8-eager"]  # fmt: skip
    assert full["decode"]["variants"]["sglang-bf16-graphs"]["expert_distribution"]
    # Its windows run 30 s, the default's precision rule replayed on each, not changed.
    assert full["decode"]["full_length_s"]["cuda"] == 30
    assert config["decode"]["full_length_s"]["cuda"] == 0
    for key in ("tpot_ci_pct", "shortest_steady_s", "min_steady_s"):
        assert full["decode"][key] == config["decode"][key]
    assert not config["decode"]["variants"]["sglang-bf16-graphs"]["expert_distribution"]
    config["decode"]["variants"]["sglang-fp8-graphs"]["enabled"] = False
    assert served_models(config, "cuda") == ["bf16"]


def test_variants_without_cuda_graphs_sample_at_the_rate_that_left_their_engine_alone():
    # On the H200 a 20-Hz sampler slowed SGLang's eager step at C = 1 (the study's TPOT 1.066x
    # that of bench_serving without a sampler) and a 2-Hz one did not (0.989x), the probe's
    # lowrate arm: examples/h200-2026-12-04-sampler-arms. Every variant without graphs, in the
    # default and in every example config, samples at that rate; the others at decode's.
    from studylib.instruments.host_probes import LOW_SAMPLE_HZ
    from studylib.stages.decode.decode_plan import decode_plan, resolve_for_device

    config = default_config()
    examples = sorted((ROOT / "config" / "examples").glob("*.yaml"))
    eager_names = set()
    for path in [None, *examples]:
        merged = config if path is None else merged_config(config, read_config_file(path))
        for name in merged["decode"]["variants"]:
            plan = resolve_for_device(decode_plan(merged, name), "cuda")
            eager = "--disable-cuda-graph" in [str(a) for a in plan.get("args") or []]
            want = LOW_SAMPLE_HZ if eager else merged["decode"]["sample_hz"]
            assert plan["sample_hz"] == want, (path, name)
            if eager:
                eager_names.add(name)
    # The default's two, h200-x2's TP2 one and the seed's GLM-5 server.
    assert {
        "sglang-bf16-eager",
        "sglang-fp8-eager",
        "sglang-fp8-eager-tp2",
        "seed-graphs-off",
    } <= eager_names


def test_a_server_capped_below_the_largest_concurrency_is_refused_by_name():
    from studylib.stages.decode.decode_plan import check_decode

    config = default_config()
    assert check_decode(config) == []
    variants = config["decode"]["variants"]
    variants["sglang-bf16-graphs"]["concurrency"] = {"cuda": [512, 1024], "cpu": [1]}
    variants["sglang-bf16-eager"].update(enabled=True,
                                         concurrency={"cuda": [1024], "cpu": [1]})  # fmt: skip
    problems = check_decode(config)
    key = "decode.variants.sglang-bf16-graphs.args.cuda"
    assert problems == [
        f"{key}: --max-running-requests 512 is below the variant's largest concurrency (1024): "
        "SGLang would queue the rest and no window would hold 1024 in flight; give it at "
        "least 1024",
        f"{key}: --cuda-graph-max-bs 512 is below the variant's largest concurrency (1024): "
        "its steps would run without CUDA graphs; give it at least 1024",
        # Without graphs only the running requests cap a step.
        "decode.variants.sglang-bf16-eager.args.cuda: --max-running-requests 512 is below the "
        "variant's largest concurrency (1024): SGLang would queue the rest and no window would "
        "hold 1024 in flight; give it at least 1024",
    ]
    # config/examples/h200-c1024.yaml sizes both graphs servers for its 1,024.
    c1024 = merged_config(default_config(),
                          read_config_file(ROOT / "config/examples/h200-c1024.yaml"))  # fmt: skip
    assert check_decode(c1024) == []
    assert max(c1024["decode"]["concurrency"]["cuda"]) == 1024


def test_a_per_device_entry_may_name_one_device():
    from studylib.stages.decode.decode_plan import decode_plan, resolve_for_device

    config = default_config()
    plan = decode_plan(config, "sglang-bf16-eager")
    assert "--disable-cuda-graph" in resolve_for_device(plan, "cuda")["args"]
    assert resolve_for_device(plan, "cpu")["args"] is None
    assert resolve_for_device(plan, "cuda")["min_steady_s"] == 20


def test_weights_a_gpu_cannot_hold_beside_a_kv_cache_are_known_before_the_start():
    """The seed's bf16 model (79.1 GB, 73.7 GiB) on an 80-GB H100 (81,559 MiB): SGLang stopped
    at start ("Loaded weights leave no GPU memory for the KV cache", 2026-12-06); on an H200
    (143,771 MiB), over two H100s, or in FP8 it runs."""
    from studylib.stages.decode.decode_plan import weights_problem

    bf16, h100, h200 = 79_115_059_200, 81_559, 143_771
    args = ["--tp", "1", "--mem-fraction-static", "0.85"]
    why = weights_problem("sglang", args, bf16, h100)
    assert why.startswith("its weights do not fit: 73.7 GiB per GPU (79.1 GB over 1 GPU)")
    assert "the 67.7 GiB --mem-fraction-static 0.85 leaves of the GPU's 79.6 GiB" in why
    assert weights_problem("sglang", args, bf16, h200) is None
    assert weights_problem("sglang", ["--tp-size", "2", *args[2:]], bf16, h100) is None
    assert weights_problem("sglang", args, bf16 / 2, h100) is None  # FP8: half the bytes
    # without the fraction flag only weights beyond the whole GPU are refused
    assert weights_problem("sglang", [], bf16, h100) is None
    assert "against all of the GPU's 79.6 GiB" in weights_problem("sglang", [], 90e9, h100)
    assert "(90.0 GB over 2 GPUs)" in weights_problem(
        "vllm", ["--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.5"], 90e9, h100
    )
    # unknown weights, unknown GPU, an engine without the flag: no verdict, the start decides
    assert weights_problem("sglang", args, None, h100) is None
    assert weights_problem("sglang", args, bf16, None) is None
    assert weights_problem("transformers", args, bf16, h100) is None


def test_the_engines_warm_up_comes_before_a_servers_first_window_only_where_asked():
    plan = {"input_len": 8, "output_len": 64, "vocab_size": 1000, "stagger": True,
            "warmup_s": 15.0}  # fmt: skip
    # Without warmup_later_s every window waits warmup_s (the default, as before).
    assert load_specs(plan, 16, 20.0, first=False)[1].warmup_s == 15.0
    later = {**plan, "warmup_later_s": 0.0}
    assert load_specs(later, 16, 20.0, first=True)[1].warmup_s == 15.0
    assert load_specs(later, 16, 20.0, first=False)[1].warmup_s == 0.0
    # Lockstep: a later window's warm-up is then the short requests, not a timed load.
    lockstep = {**later, "stagger": False}
    warm, _ = load_specs(lockstep, 16, 20.0, first=False)
    assert not warm.duration_s and warm.output_len == 16
    assert load_specs(lockstep, 16, 20.0, first=True)[0].duration_s == 15.0
    assert (warmup_floor(later, True), warmup_floor(later, False)) == (15.0, 0.0)


def test_the_preaged_arms_serve_as_the_default_does():
    # config/examples/preaged.yaml compares two servers of the same arguments: a pre-aged arm
    # whose args drifted from the default's would compare servers, not warm-ups.
    config = default_config()
    arms = merged_config(config, read_config_file(ROOT / "config/examples/preaged.yaml"))
    variants = arms["decode"]["variants"]
    for weights in ("bf16", "fp8"):
        aged, plain = (
            variants[f"sglang-{weights}-graphs-preaged"],
            variants[f"sglang-{weights}-graphs"],
        )
        assert aged["args"] == plain["args"] and aged["weights"] == plain["weights"] == weights
        assert aged["preaged"]["cuda"] and not arms["decode"]["preaged"]["cuda"]
    assert arms["decode"]["warmup_later_s"]["cuda"] == 0


def test_a_prestarted_variant_counts_no_gpu_in_snakemakes_resources():
    # decode.prestart: the job starts its server before it holds the device, so Snakemake must
    # not count it as a GPU job (it would wait for the job before it); it takes the GPU itself.
    config = {"decode": {"prestart": {"cuda": True, "cpu": False},
                         "variants": {"s": {"engine": "sglang", "gpus": 2},
                                      "t": {"engine": "transformers"}}}}  # fmt: skip
    assert counted_gpus(config, "s", "cuda") == 0
    assert counted_gpus(config, "s", "cpu") == 2
    assert counted_gpus(config, "t", "cuda") == 1  # no gated start: counted as before
    assert counted_gpus({"decode": {**config["decode"], "prestart": {"cuda": False}}}, "s",
                        "cuda") == 2  # fmt: skip
