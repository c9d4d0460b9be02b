"""The local random MoE model and its offline tokenizer."""

import pytest

transformers = pytest.importorskip("transformers")

from studylib.serving.model import build_moe_model, build_tokenizer, prompt_text  # noqa: E402

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
    from studylib.serving.engines import engine
    from studylib.serving.launcher import ServerProcess, group_alive
    from studylib.serving.load import LoadSpec, run_load, steady_window, summarize_load
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
        records, active = run_load(eng.base_url("127.0.0.1", port), model, spec,
                                   eng.request_extras, eng.prompt_format)  # fmt: skip
    assert not group_alive(server.proc.pid)
    assert not [r.error for r in records if r.error]
    assert all(r.completion_tokens == 6 for r in records)  # no EOS: always the full length
    summary = summarize_load(records, spec, *steady_window(active, 2))
    assert summary["wrong_length"] == 0 and summary["output_tok_s"] > 0
