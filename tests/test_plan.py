import copy

from helpers import default_config
from studylib.plan import check_config, enabled_backends, expand_points, stable_hash, sweep_plan


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


def test_plan_is_sliced_per_backend():
    config = default_config()
    before = {b: stable_hash(sweep_plan(config, b)) for b in config["backends"]}
    changed = copy.deepcopy(config)
    changed["backends"]["torch"]["cases"][0]["m"] = {"cuda": [1, 2], "cpu": [3]}
    after = {b: stable_hash(sweep_plan(changed, b)) for b in config["backends"]}
    assert before["torch"] != after["torch"]
    assert before["flashinfer"] == after["flashinfer"]
    assert before["sgl_kernel"] == after["sgl_kernel"]


def test_unused_shape_does_not_touch_a_plan():
    config = default_config()
    before = stable_hash(sweep_plan(config, "torch"))
    config["shapes"]["unused"] = {"N": 8, "K": 8}
    assert stable_hash(sweep_plan(config, "torch")) == before


def test_expand_points_follows_device_and_overrides():
    config = default_config()
    plan = sweep_plan(config, "torch")
    cpu = expand_points(plan, "cpu")
    cuda = expand_points(plan, "cuda")
    matmul_cpu = [p for p in cpu if p["op"] == "matmul"]
    matmul_cuda = [p for p in cuda if p["op"] == "matmul"]
    # fp32 is declared for the CPU only
    assert {p["dtype"] for p in matmul_cpu} == {"bf16", "fp32"}
    assert {p["dtype"] for p in matmul_cuda} == {"bf16"}
    assert {p["M"] for p in matmul_cpu} == set(config["m_grid"]["cpu"])
    assert len(matmul_cuda) == 3 * len(config["m_grid"]["cuda"])
    # grouped cases: their own m grid, one point per G
    grouped = [p for p in cuda if p["op"] == "grouped_mm"]
    assert {p["G"] for p in grouped} == {8, 32, 256}
    assert max(p["M"] for p in grouped) == 256
    assert len(grouped) == 2 * 3 * 9
    fi = expand_points(sweep_plan(config, "flashinfer"), "cuda")
    assert {p["impl"] for p in fi if p["op"] == "mm_fp4"} == {"cutlass", "cudnn", "trtllm", "auto"}
    assert all(p["G"] is None for p in fi if p["op"] != "grouped_mm_bf16")


def test_a_variant_overrides_the_load_settings_and_only_its_own_plan():
    from helpers import ROOT
    from snakemake.utils import validate
    from studylib.plan import decode_plan, resolve_for_device

    config = default_config()
    variants = config["decode"]["variants"]
    variants["two_gpus"] = {"engine": "transformers", "model": "local", "gpus": 2,
                            "concurrency": {"cuda": [16], "cpu": [2]}}  # fmt: skip
    validate(config, str(ROOT / "config" / "schema.yaml"), set_default=True)
    base = resolve_for_device(decode_plan(config, "transformers"), "cuda")
    two = resolve_for_device(decode_plan(config, "two_gpus"), "cuda")
    assert base["concurrency"] == [1, 4, 16, 64, 128, 256] and two["concurrency"] == [16]
    assert two["gpus"] == 2 and two["output_len"] == base["output_len"]


def test_variants_are_planned_where_they_serve():
    from studylib.plan import decode_variants, served_models

    config = default_config()
    assert decode_variants(config, "cpu") == ["transformers"]
    gpu = decode_variants(config, "cuda")
    assert gpu == ["sglang-bf16-graphs", "sglang-bf16-eager", "sglang-fp8-graphs",
                   "sglang-fp8-eager"]  # fmt: skip
    assert served_models(config, "cuda") == ["bf16", "fp8"] and served_models(config, "cpu") == []
    config["decode"]["variants"]["sglang-fp8-eager"]["enabled"] = False
    config["decode"]["variants"]["sglang-fp8-graphs"]["enabled"] = False
    assert served_models(config, "cuda") == ["bf16"]


def test_study_device_without_a_gpu_or_with_none_visible(monkeypatch):
    from studylib.plan import study_device

    assert study_device({"device": "cuda"}) == "cuda"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert study_device({"device": "auto"}) == "cpu"


def test_a_per_device_entry_may_name_one_device():
    from studylib.plan import decode_plan, resolve_for_device

    config = default_config()
    plan = decode_plan(config, "sglang-bf16-eager")
    assert "--disable-cuda-graph" in resolve_for_device(plan, "cuda")["args"]
    assert resolve_for_device(plan, "cpu")["args"] is None
    assert resolve_for_device(plan, "cuda")["min_steady_s"] == 30
