"""Config -> the sweep's plans (stages/sweep/sweep_plan.py): sliced per backend, points per
device, shapes of each kind, fused-MoE points and their checks."""

import copy

import pytest
from helpers import ROOT, default_config
from studylib.core.config import schema_problem
from studylib.core.io import stable_hash
from studylib.stages.sweep.sweep_plan import expand_points, sweep_plan
from studylib.study_config import check_config


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
    # the seed's GEMM shapes (the decode projections' cases have their own grid, below)
    seed_shapes = {"down", "gate_up", "dense_square"}
    matmul_cpu = [p for p in cpu if p["op"] == "matmul" and p["shape"] in seed_shapes]
    matmul_cuda = [p for p in cuda if p["op"] == "matmul" and p["shape"] in seed_shapes]
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


DECODE_C = {"cuda": [1, 4, 16, 64, 128, 256, 512], "cpu": [1, 4]}


PROJECTIONS = {"qkv": (8192, 6144), "o_proj": (6144, 6144), "router": (256, 6144),
               "lm_head": (32000, 6144)}  # fmt: skip


def test_decode_projections_run_at_the_decode_concurrencies():
    config = default_config()
    for name, (n, k) in PROJECTIONS.items():
        assert (config["shapes"][name]["N"], config["shapes"][name]["K"]) == (n, k)
        assert config["shapes"][name]["note"]
    kinds = {}
    for backend in ("torch", "sgl_kernel"):
        plan = sweep_plan(config, backend)
        for device in ("cuda", "cpu"):
            for p in expand_points(plan, device):
                if p["shape"] in PROJECTIONS:
                    key = (backend, p["op"], p["dtype"], device)
                    kinds.setdefault(key, set()).add((p["shape"], p["M"]))
    everything = {(s, m) for s in PROJECTIONS for m in DECODE_C["cuda"]}
    # Every C the decode stage serves has its step's projections and attention timed: the
    # step model predicts no step whose parts the sweep lacks (C = 512 had none, 2026-12-04).
    assert set(config["decode"]["concurrency"]["cuda"]) <= set(DECODE_C["cuda"])
    attention = {(b, p["M"]) for b in ("torch", "flashinfer", "sgl_kernel")
                 for p in expand_points(sweep_plan(config, b), "cuda")
                 if p["op"] == "decode_attention"}  # fmt: skip
    assert attention == {(b, m) for b in ("torch", "flashinfer", "sgl_kernel")
                         for m in DECODE_C["cuda"]}  # fmt: skip
    assert kinds[("torch", "matmul", "bf16", "cuda")] == everything
    assert kinds[("torch", "scaled_mm", "fp8_e4m3", "cuda")] == everything
    assert kinds[("sgl_kernel", "fp8_scaled_mm", "fp8_e4m3", "cuda")] == everything
    # A CPU runs them in fp32 at two sizes only (bf16 there takes seconds per call).
    assert kinds[("torch", "matmul", "fp32", "cpu")] == {(s, m) for s in PROJECTIONS
                                                         for m in DECODE_C["cpu"]}  # fmt: skip
    assert ("torch", "matmul", "bf16", "cpu") not in kinds


def test_attention_points_carry_their_geometry():
    config = default_config()
    assert config["shapes"]["attention"] == {
        "kind": "attention", "heads": 48, "kv_heads": 8, "head_dim": 128, "context": 640,
        "note": config["shapes"]["attention"]["note"]}  # fmt: skip
    seen = {}
    for backend in ("torch", "flashinfer", "sgl_kernel"):
        plan = sweep_plan(config, backend)
        for device in ("cuda", "cpu"):
            points = [p for p in expand_points(plan, device) if p["op"] == "decode_attention"]
            for p in points:
                # M is the batch, N = heads x head_dim, K = the context; no groups
                assert (p["shape"], p["N"], p["K"], p["G"]) == ("attention", 48 * 128, 640, None)
                geometry = (p["heads"], p["kv_heads"], p["head_dim"], p["context"])
                assert geometry == (48, 8, 128, 640)
                assert "top_k" not in p and "routing" not in p
            seen[(backend, device)] = sorted((p["impl"], p["dtype"], p["M"]) for p in points)
    for device, grid in DECODE_C.items():
        assert seen[("sgl_kernel", device)] == [("triton", "bf16", m) for m in grid]
        assert seen[("flashinfer", device)] == [("fa2", "bf16", m) for m in grid]
    # torch: bf16 on a GPU, fp32 on a CPU (as its matmul cases)
    assert seen[("torch", "cuda")] == [("sdpa", "bf16", m) for m in DECODE_C["cuda"]]
    assert seen[("torch", "cpu")] == [("sdpa", "fp32", m) for m in DECODE_C["cpu"]]
    # GEMM points carry no attention keys
    gemm = [p for p in expand_points(sweep_plan(config, "torch"), "cuda") if p["op"] == "matmul"]
    assert gemm and not any("heads" in p or "context" in p for p in gemm)


def test_gemm_shapes_resolve_as_before_the_attention_kind():
    """A GEMM shape's resolved form (and so every GEMM case's plan and its Snakemake params)
    is what it was before attention shapes existed."""
    plan = sweep_plan(default_config(), "torch")
    resolved = {s["name"]: s for case in plan["cases"] for s in case["shapes"]}
    assert resolved["down"] == {"name": "down", "N": 6144, "K": 2048}
    assert resolved["attention"] == {"name": "attention", "kind": "attention", "N": 6144,
                                     "K": 640, "heads": 48, "kv_heads": 8, "head_dim": 128,
                                     "context": 640}  # fmt: skip


def test_an_interleaved_attention_shape_reaches_its_points_and_only_its_own():
    config = default_config()
    i = _case_index(config, "sgl_kernel", "decode_attention")
    before = sweep_plan(config, "sgl_kernel")
    config["backends"]["sgl_kernel"]["cases"][i]["shapes"] = ["attention", "attention_interleaved"]
    assert check_config(config) == []
    points = [p for p in expand_points(sweep_plan(config, "sgl_kernel"), "cuda")
              if p["op"] == "decode_attention"]  # fmt: skip
    layouts = {(p["shape"], p.get("interleaved")) for p in points}
    assert layouts == {("attention", None), ("attention_interleaved", 512)}
    # The contiguous shape's plan is what it was: its sweep does not rerun for the new key.
    config["backends"]["sgl_kernel"]["cases"][i]["shapes"] = ["attention"]
    assert stable_hash(sweep_plan(config, "sgl_kernel")) == stable_hash(before)


def _case_index(config, backend, op):
    return next(i for i, c in enumerate(config["backends"][backend]["cases"]) if c["op"] == op)


def test_an_attention_shape_on_a_gemm_op_is_refused_naming_the_case():
    config = default_config()
    config["backends"]["torch"]["cases"][0]["shapes"] = ["down", "attention"]
    assert check_config(config) == [
        "backends.torch.cases[0].shapes: 'attention' is an attention shape (kind: attention) "
        "but torch matmul is a GEMM and takes GEMM shapes (N, K)"
    ]


def test_a_gemm_shape_on_decode_attention_is_refused_naming_the_case():
    config = default_config()
    i = _case_index(config, "sgl_kernel", "decode_attention")
    config["backends"]["sgl_kernel"]["cases"][i]["shapes"] = ["attention", "down"]
    assert check_config(config) == [
        f"backends.sgl_kernel.cases[{i}].shapes: 'down' is a GEMM shape (N, K) but sgl_kernel "
        "decode_attention is decode attention and takes attention shapes (kind: attention, "
        "with heads, kv_heads, head_dim, context)"
    ]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s["attention"].update(N=6144),
         "shapes.attention: an attention shape derives N (heads x head_dim) and K (context); "
         "remove N"),
        (lambda s: s["down"].update(heads=4),
         "shapes.down: heads belong to an attention shape: add kind: attention (and drop N, K), "
         "or remove them"),
        (lambda s: s["attention"].update(kv_heads=5),
         "shapes.attention.heads (48) is not a multiple of kv_heads (5)"),
        (lambda s: s["attention"].update(interleaved=641),
         "shapes.attention.interleaved (641) is more than the context (640 tokens)"),
        (lambda s: s["down"].update(interleaved=4),
         "shapes.down: interleaved belong to an attention shape: add kind: attention (and "
         "drop N, K), or remove them"),
    ],
)  # fmt: skip
def test_a_shape_with_the_other_kinds_keys_is_refused(change, message):
    config = default_config()
    change(config["shapes"])
    assert message in check_config(config)


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
