"""The study's config (core/config.py, study_config.py): the default config is clean, problems
name their key, the schema's messages, the device the workflow plans for."""

import pytest
from helpers import ROOT, default_config
from studylib.core.config import enabled_backends, schema_problem
from studylib.study_config import check_config


def test_default_config_is_clean():
    assert check_config(default_config()) == []


def test_problems_name_the_key():
    config = default_config()
    torch_cases = config["backends"]["torch"]["cases"]
    torch_cases[0]["op"] = "matmull"
    torch_cases[1]["shapes"] = ["expert_up", "nope"]
    config["backends"]["flashinfer"]["cases"][1]["impls"] = ["cublas", "magic"]
    config["backends"]["flashinfer"]["cases"][0]["dtypes"] = ["bf16"]
    problems = check_config(config)
    assert any("backends.torch.cases[0].op" in p and "matmull" in p for p in problems)
    assert any("backends.torch.cases[1].shapes" in p and "'nope'" in p for p in problems)
    assert any("backends.flashinfer.cases[1].impls" in p and "'magic'" in p for p in problems)
    assert any("backends.flashinfer.cases[0].dtypes" in p and "'bf16'" in p for p in problems)


def test_all_disabled_is_a_problem():
    config = default_config()
    for spec in config["backends"].values():
        spec["enabled"] = False
    assert enabled_backends(config) == []
    assert any("every backend is disabled" in p for p in check_config(config))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s["attention"].pop("context"),
         "config key shapes.attention: 'context' is a required property"),
        (lambda s: s["down"].pop("K"), "config key shapes.down: 'K' is a required property"),
        (lambda s: s.update(tiny={"kind": "attention", "heads": 2, "kv_heads": 1,
                                  "head_dim": 0, "context": 8}),
         "config key shapes.tiny.head_dim: 0 is less than the minimum of 1"),
    ],
)  # fmt: skip
def test_the_schema_requires_each_kinds_keys(change, message):
    config = default_config()
    change(config["shapes"])
    assert schema_problem(config, str(ROOT / "config" / "schema.yaml")) == message


def test_study_device_without_a_gpu_or_with_none_visible(monkeypatch):
    from studylib.core.config import study_device

    assert study_device({"device": "cuda"}) == "cuda"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert study_device({"device": "auto"}) == "cpu"
