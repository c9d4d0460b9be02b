import copy

import pytest
from helpers import ROOT, default_config
from studylib.plan import (
    check_config,
    enabled_backends,
    expand_points,
    schema_problem,
    stable_hash,
    sweep_plan,
)


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
    # bf16 names its CPU sizes only (slow without bf16 instructions); the GPU keeps m_grid
    assert {p["M"] for p in matmul_cpu if p["dtype"] == "bf16"} == {1, 16}
    assert len(matmul_cuda) == 3 * len(config["m_grid"]["cuda"])
    # grouped cases: their own m grid, one point per G
    grouped = [p for p in cuda if p["op"] == "grouped_mm"]
    assert {p["G"] for p in grouped} == {8, 32, 256}
    assert max(p["M"] for p in grouped) == 256
    assert len(grouped) == 2 * 3 * 9
    fi = expand_points(sweep_plan(config, "flashinfer"), "cuda")
    assert {p["impl"] for p in fi if p["op"] == "mm_fp4"} == {"cutlass", "cudnn", "trtllm", "auto"}
    assert all(p["G"] is None for p in fi if p["op"] not in ("grouped_mm_bf16", "fused_moe"))


def test_a_case_m_naming_one_device_keeps_the_grid_for_the_other():
    config = default_config()
    config["backends"]["torch"]["cases"][0]["m"] = {"cuda": [3, 5]}
    assert check_config(config) == []
    case = sweep_plan(config, "torch")["cases"][0]
    assert case["m"] == {"cuda": [3, 5], "cpu": config["m_grid"]["cpu"]}
    config["backends"]["torch"]["cases"][0]["m"] = {}
    problem = schema_problem(config, str(ROOT / "config" / "schema.yaml"))
    assert "backends.torch.cases[0].m" in problem


def test_fused_moe_points_carry_their_layer_and_routing():
    config = default_config()
    plan = sweep_plan(config, "sgl_kernel")
    fused = [p for p in expand_points(plan, "cuda") if p["op"] == "fused_moe"]
    # 2 dtypes x 2 routings x the case's M grid, all of one layer of 256 experts, top-8
    m_grid = next(c for c in plan["cases"] if c["op"] == "fused_moe")["m"]["cuda"]
    assert len(fused) == 2 * 2 * len(m_grid)
    assert {(p["G"], p["top_k"], p["N"], p["K"]) for p in fused} == {(256, 8, 6144, 2048)}
    assert {p["routing"] for p in fused} == {"balanced", "recorded"}
    # The recorded shares travel in the plan (a new recording reruns the sweep), not the rows.
    shares = plan["moe"]["expert_shares"]
    assert len(shares) == 256 and abs(sum(shares) - 1) < 1e-5
    assert all("expert_shares" not in p for p in fused)
    # Other ops have no routing, and a plan without fused ops has no moe slice.
    assert all("routing" not in p for p in expand_points(plan, "cuda") if p["op"] != "fused_moe")
    config["backends"]["sgl_kernel"]["cases"] = [
        c for c in config["backends"]["sgl_kernel"]["cases"] if c["op"] != "fused_moe"
    ]
    assert "moe" not in sweep_plan(config, "sgl_kernel")


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c["moe"].update(top_k=300), "moe.top_k (300) exceeds"),
        (lambda c: c["moe"].update(expert_histogram=None), "names no file"),
        (lambda c: c["moe"].update(expert_histogram="nope.csv"), "moe.expert_histogram nope.csv"),
        (lambda c: c["moe"].update(expert_histogram="config/config.yaml"), "not a readable CSV"),
        (
            lambda c: c["moe"].update(
                expert_histogram="examples/h200x2-2026-11-30-uniform/tables/decode.csv"
            ),
            "no expert, tokens column",
        ),  # fmt: skip
        (lambda c: c["backends"]["torch"]["cases"][-1].update(groups=[8, 256]), "one MoE layer"),
    ],
)
def test_bad_moe_settings_are_named(change, message):
    config = default_config()
    change(config)
    problems = check_config(config)
    assert any(message in p for p in problems), problems


def test_expert_histogram_with_another_expert_count_is_refused(tmp_path):
    histogram = tmp_path / "expert_m.csv"
    histogram.write_text("expert,tokens\n" + "".join(f"{e},{e + 1}\n" for e in range(64)))
    config = default_config()
    config["moe"]["expert_histogram"] = str(histogram)
    assert any("has 64 experts" in p for p in check_config(config))


def test_a_variant_overrides_the_load_settings_and_only_its_own_plan():
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
