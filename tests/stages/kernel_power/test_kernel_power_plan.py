"""The kernel-power plan and its config checks (stages/kernel_power/kernel_power_plan.py)."""

from helpers import default_config
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
    from studylib.stages.kernel_power.kernel_power_plan import kernel_power_plan

    (loop,) = [p for p in kernel_power_plan(config, "sgl_kernel")["points"]
               if p["op"] == "decode_attention"]  # fmt: skip
    geometry = (loop["M"], loop["N"], loop["K"], loop["heads"], loop["context"])
    assert geometry == (16, 6144, 640, 48, 640)
