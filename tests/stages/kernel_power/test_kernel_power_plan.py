"""The kernel-power plan and its config checks (stages/kernel_power/kernel_power_plan.py)."""

from collections import Counter

from helpers import default_config
from studylib.stages.kernel_power.kernel_power_answers import MIN_WINDOWS
from studylib.stages.kernel_power.kernel_power_plan import kernel_power_plan
from studylib.stages.kernel_power.window_classes import window_group
from studylib.study_config import check_config


def test_kernel_power_points_are_checked_for_their_shape_kind_too():
    config = default_config()
    config["kernel_power"]["backends"]["torch"][0]["shape"] = "attention"
    assert check_config(config) == [
        "kernel_power.backends.torch[0].shape: 'attention' is an attention shape (kind: "
        "attention) but torch matmul is a GEMM and takes GEMM shapes (N, K)"
    ]
    config = default_config()
    config["kernel_power"]["backends"]["sgl_kernel"].append(
        {"op": "decode_attention", "dtype": "bf16", "impl": "triton", "shape": "attention",
         "M": [16]})  # fmt: skip
    assert check_config(config) == []
    (loop,) = [p for p in kernel_power_plan(config, "sgl_kernel")["points"]
               if p["op"] == "decode_attention"]  # fmt: skip
    geometry = (loop["M"], loop["N"], loop["K"], loop["heads"], loop["context"])
    assert geometry == (16, 6144, 640, 48, 640)


def test_the_defaults_loops_leave_every_question_3_group_two_windows_on_an_h200():
    """The default's kernel-power plan is cut to a few loops (issue 34); on an H200 that
    refuses FP4 and has no FlashInfer fused-MoE module, each group question 3 answers still
    gets the two windows a verdict needs (fewer: undecided, "one window")."""
    config = default_config()
    groups = Counter()
    for backend in ("torch", "flashinfer", "sgl_kernel"):
        plan = kernel_power_plan(config, backend)
        for point in plan["points"]:
            refused = point["dtype"] == "nvfp4" or (backend, point["op"]) == (
                "flashinfer", "fused_moe")  # fmt: skip
            if refused or "cuda" not in point.get("devices", ["cuda"]):
                continue
            for mode in point.get("modes") or plan["modes"]:
                row = {**point, "mode": mode, "label": "steady", "status": "ok",
                       "power_source": "nvml", "avg_w": 500.0}  # fmt: skip
                groups[window_group(row)] += 1
    assert len(groups) >= 8, groups  # decode per mode, prefill, experts per dtype and size
    assert min(groups.values()) >= MIN_WINDOWS, groups
