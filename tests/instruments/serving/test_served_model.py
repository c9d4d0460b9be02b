"""The local random MoE model and its offline tokenizer."""

import pytest

transformers = pytest.importorskip("transformers")

from studylib.instruments.serving.served_model import build_moe_model, build_tokenizer, prompt_text  # noqa: E402

TINY = {"vocab_size": 512, "hidden_size": 64, "moe_intermediate_size": 32, "layers": 2,
        "heads": 4, "kv_heads": 2, "experts": 8, "top_k": 2}  # fmt: skip


def test_tokenizer_round_trips_prompts():
    tok = build_tokenizer(512)
    ids = [5, 77, 300, 511]
    assert tok(prompt_text(ids), add_special_tokens=False)["input_ids"] == ids
    assert tok.decode(ids) == "w5 w77 w300 w511"


def test_model_builds_loads_and_never_stops_early(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    facts = build_moe_model(tmp_path / "m", TINY, seed=1, dtype="float32")
    assert facts["experts"] == 8 and facts["parameters"] > 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    tok = AutoTokenizer.from_pretrained(tmp_path / "m")
    assert model.config.num_experts == 8 and model.config.num_experts_per_tok == 2
    ids = tok(prompt_text([10, 20, 30]), return_tensors="pt", add_special_tokens=False)
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    assert out.shape[1] == 3 + 12
    again = build_moe_model(tmp_path / "m2", TINY, seed=1, dtype="float32")
    assert again["parameters"] == facts["parameters"]
    m2 = AutoModelForCausalLM.from_pretrained(tmp_path / "m2")
    assert torch.equal(m2.lm_head.weight, model.lm_head.weight)  # seeded: reproducible


def test_transformers_engine_serves_decode_on_cpu(tmp_path):
    """The whole decode path on this machine: build, launch, ready, load, tear down."""
    import sys

    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from studylib.instruments.serving.decode_load import (
        LoadSpec,
        run_load,
        steady_window,
    )
    from studylib.instruments.serving.engines import engine
    from studylib.instruments.serving.launcher import ServerProcess, group_alive
    from studylib.instruments.serving.load_summary import summarize_load
    from test_serving import free_port

    build_moe_model(tmp_path / "m", TINY, seed=0, dtype="float32")
    eng, port, model = engine("transformers"), free_port(), str(tmp_path / "m")
    argv = eng.argv(model, "127.0.0.1", port, ["--device", "cpu"])
    assert argv[:4] == [sys.executable, "-m", "transformers.cli.transformers", "serve"]
    server = ServerProcess(argv, tmp_path / "server.log", env=eng.env,
                           ready=lambda: eng.ready("127.0.0.1", port, model),
                           ready_timeout_s=120, poll_s=0.5)  # fmt: skip
    spec = LoadSpec(concurrency=2, num_prompts=4, input_len=8, output_len=6, vocab_size=512)
    with server:
        server.wait_ready()
        load = run_load(eng.base_url("127.0.0.1", port), model, spec, eng.request_extras,
                        eng.prompt_format)  # fmt: skip
    records, active = load.records, load.active
    assert not group_alive(server.proc.pid)
    assert not [r.error for r in records if r.error]
    assert all(r.completion_tokens == 6 for r in records)  # no EOS: always the full length
    summary = summarize_load(records, spec, *steady_window(active, 2))
    assert summary["wrong_length"] == 0 and summary["output_tok_s"] > 0


SEED_GEOMETRY = {"architecture": "glm4_moe", "vocab_size": 32000, "hidden_size": 6144,
                 "moe_intermediate_size": 2048, "layers": 4, "heads": 48, "kv_heads": 8,
                 "head_dim": 128, "experts": 256, "top_k": 8, "shared_experts": 1}  # fmt: skip


def test_served_model_is_config_only_and_loads_as_its_architecture(tmp_path):
    import json

    from studylib.instruments.serving.served_model import write_served_model
    from transformers import AutoConfig, AutoTokenizer

    facts = write_served_model(tmp_path / "bf16", SEED_GEOMETRY, "bf16")
    weights = [p for p in (tmp_path / "bf16").iterdir() if p.suffix in (".bin", ".safetensors")]
    assert weights == []
    config = AutoConfig.from_pretrained(tmp_path / "bf16")
    assert config.model_type == "glm4_moe" and config.n_routed_experts == 256
    assert config.num_experts_per_tok == 8 and config.moe_intermediate_size == 2048
    assert config.first_k_dense_replace == 0 and config.eos_token_id is None
    tok = AutoTokenizer.from_pretrained(tmp_path / "bf16")
    assert tok(prompt_text([7, 99]), add_special_tokens=False)["input_ids"] == [7, 99]
    # 4 layers x (256 + 1 shared) experts x 3 x 2048 x 6144 bf16 + attention + embeddings
    assert 78e9 < facts["weight_bytes"] < 80e9
    fp8 = write_served_model(tmp_path / "fp8", SEED_GEOMETRY, "fp8")
    quant = json.loads((tmp_path / "fp8" / "config.json").read_text())["quantization_config"]
    assert quant == {"quant_method": "fp8", "activation_scheme": "dynamic",
                     "weight_block_size": [128, 128]}  # fmt: skip
    assert 0.5 < fp8["weight_bytes"] / facts["weight_bytes"] < 0.51
    qwen = write_served_model(tmp_path / "q", {**SEED_GEOMETRY, "architecture": "qwen3_moe",
                                               "shared_experts": 0}, "bf16")  # fmt: skip
    assert qwen["model_class"] == "Qwen3MoeForCausalLM"
    with pytest.raises(ValueError, match="shared experts"):
        write_served_model(tmp_path / "bad", {**SEED_GEOMETRY, "architecture": "qwen3_moe"},
                           "bf16")  # fmt: skip


def test_step_bytes_grow_with_the_experts_the_routing_touches():
    from studylib.instruments.serving.served_model import experts_touched, step_bytes, weight_bytes

    assert experts_touched(256, 8, 1) == pytest.approx(8)
    assert experts_touched(256, 8, 256) == pytest.approx(256, rel=1e-3)
    w = weight_bytes(SEED_GEOMETRY, "bf16")
    assert w["expert"] == 3 * 2048 * 6144 * 2
    one = step_bytes(SEED_GEOMETRY, "bf16", 1, 0)
    per_layer = w["attention"] + w["router"] + w["shared_experts"] + 8 * w["expert"]
    assert one == pytest.approx(4 * per_layer + w["lm_head"])
    assert step_bytes(SEED_GEOMETRY, "bf16", 256, 256) > 20 * one
    assert step_bytes(SEED_GEOMETRY, "fp8", 16, 256) < step_bytes(SEED_GEOMETRY, "bf16", 16, 256)
