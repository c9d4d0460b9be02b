"""An SGLang server's JIT modules built ahead on the CPU (rule server_jit): which modules a
served model's start builds, and each build's outcome, with SGLang's generators replaced by
stand-ins that write a module's files as tvm-ffi lays them out."""

import json
import os
import sys
import types

import pytest
from helpers import ROOT
from studylib.instruments.backends import flashinfer_jit
from studylib.instruments.serving import sglang_jit

#: The study's served model on a GPU (the default config's glm4_moe geometry), as
#: write_served_model writes its config.json.
GLM = {"num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
       "hidden_size": 6144, "partial_rotary_factor": 0.5, "torch_dtype": "bfloat16"}  # fmt: skip


#: The FP8 server's own builds on a box where no kernel job had run (activation bf16 and
#: the v2 quantization bf16 -> FP8, examples/h200-2026-12-05-full-length).
V2 = {"kernel": "per_token_group_quant_8bit_v2", "in_dtype": "bfloat16",
      "out_dtype": "float8_e4m3fn"}  # fmt: skip


def test_the_modules_follow_the_served_model():
    """The H200's bf16 start built norm, clamp_position int64, fused_rope (NeoX, 64 dims,
    bf16) and kvcache (2,048-byte rows) for this model (examples/h200-2026-12-05-partial);
    on a box without kernel jobs the FP8 start built activation and the v2 quantization."""
    wanted = sglang_jit.targets(GLM)
    assert wanted["flashinfer"] == [{"op": "rmsnorm", "impl": "flashinfer", "dtype": "bfloat16"}]
    assert wanted["sglang"] == [
        {"kernel": "clamp_position", "dtype": "int64"},
        {"kernel": "fused_rope", "is_neox": True, "rope_dim": 64, "dtype": "bfloat16"},
        {"kernel": "kvcache", "row_bytes": 2048},
        {"kernel": "activation", "dtype": "bfloat16"}]  # fmt: skip
    # No head_dim, no partial rotary factor: hidden / heads, every dimension rotated.
    plain = {"num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128,
             "torch_dtype": "float16"}  # fmt: skip
    rope, kv, act = sglang_jit.targets(plain)["sglang"][1:]
    assert (rope["rope_dim"], rope["dtype"], kv["row_bytes"]) == (32, "float16", 128)
    assert act == {"kernel": "activation", "dtype": "float16"}
    # FlashInfer's generator for it is the one rule flashinfer_jit knows.
    assert ("rmsnorm", "flashinfer") in flashinfer_jit.MODULES
    # Block-FP8 weights quantize the bf16 activations to FP8 in groups of the block's width
    # (the v2 kernel for 16-128); FP8 without blocks, or wider ones, take other kernels.
    fp8 = dict(GLM, quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]})
    assert sglang_jit.targets(fp8)["sglang"] == wanted["sglang"] + [V2]
    for quant in ({"quant_method": "fp8"}, {"quant_method": "fp8", "weight_block_size": [1, 256]},
                  {"quant_method": "awq", "weight_block_size": [128, 128]}):  # fmt: skip
        assert sglang_jit.targets(dict(GLM, quantization_config=quant)) == wanted


def test_the_written_served_model_gives_the_same_modules(tmp_path):
    """From the config.json the study writes for the default GPU geometry."""
    import yaml
    from studylib.instruments.serving.served_model import write_served_model

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    write_served_model(tmp_path, config["decode"]["model"]["cuda"], "bf16")
    written = json.loads((tmp_path / "config.json").read_text())
    assert sglang_jit.targets(written) == sglang_jit.targets(GLM)
    write_served_model(tmp_path / "fp8", config["decode"]["model"]["cuda"], "fp8")
    written = json.loads((tmp_path / "fp8" / "config.json").read_text())
    assert sglang_jit.targets(written)["sglang"][-1] == V2


@pytest.fixture
def fake_sglang(monkeypatch, tmp_path):
    """SGLang's arch override and generators: each generator writes its module's folder
    (build.ninja, then the .so) under TVM_FFI_CACHE_DIR unless it is there."""
    cache = tmp_path / "tvm-ffi"
    monkeypatch.setenv("TVM_FFI_CACHE_DIR", str(cache))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "before")  # restored after the test
    calls = {"override": [], "generated": []}
    arch = types.ModuleType("sglang.jit_kernel.utils.arch")

    class Override:
        def __init__(self, major, minor, suffix):
            calls["override"].append((major, minor, suffix))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    arch.override_jit_cuda_arch = Override
    arch._cuda_arch_suffix = lambda major, minor: "a" if major >= 9 else ""

    def generator(kernel):
        def generate(*args):
            calls["generated"].append((kernel, args))
            if kernel == "kvcache" and args[0] % 4:
                raise RuntimeError("ninja: build stopped: subcommand failed.\nrow_bytes")
            folder = cache / f"sgl_kernel_jit_{kernel}_{'_'.join(map(str, args))}__arch_9.0a"
            if not (folder / "m.so").exists():
                folder.mkdir(parents=True)
                (folder / "build.ninja").write_text("")
                (folder / "m.so").write_text("")
            if kernel == "clamp_position" and args[0] is None:
                raise OSError("libcuda.so.1: cannot open shared object file")
            return object()

        return generate

    utils = types.ModuleType("sglang.jit_kernel.utils")
    utils.is_arch_support_pdl = lambda: True  # sm_90 and later
    modules = {"sglang.jit_kernel.utils.arch": arch, "sglang.jit_kernel.utils": utils}
    for kernel, (name, function, _) in sglang_jit.GENERATORS.items():
        module = types.ModuleType(name)
        setattr(module, function, generator(kernel))
        modules[name] = module
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return calls


def test_each_module_is_built_then_found_cached(fake_sglang):
    wanted = sglang_jit.targets(GLM)["sglang"]
    rows = sglang_jit.build(wanted, ["9.0", "9.0"])
    assert [(r["kernel"], r["arch"], r["status"]) for r in rows] == [
        ("clamp_position", "9.0a", "built"), ("fused_rope", "9.0a", "built"),
        ("kvcache", "9.0a", "built"), ("activation", "9.0a", "built")]  # fmt: skip
    assert rows[2]["module"] == "sgl_kernel_jit_kvcache_2048__arch_9.0a"
    # When each ended, so that a server start beside the job knows its modules (start_builds).
    assert all(r["finished_at"] > 1.7e9 for r in rows)
    assert rows[1]["arguments"] == {"is_neox": True, "rope_dim": 64, "dtype": "bfloat16"}
    # The generators got SGLang's own argument types, under the GPUs' architecture once.
    import torch

    assert fake_sglang["generated"][1] == ("fused_rope", (True, 64, torch.bfloat16))
    assert fake_sglang["override"] == [(9, 0, "a")]
    # The build never sees the GPU another job is measuring on.
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    again = sglang_jit.build(wanted, ["9.0"])
    assert [r["status"] for r in again] == ["cached"] * 4
    # The FP8 quantization's module: bf16 in, FP8 out, with PDL as SGLang asks on sm_90.
    v2 = sglang_jit.build([V2], ["9.0"])[0]
    assert v2["status"] == "built"
    assert fake_sglang["generated"][-1] == (
        "per_token_group_quant_8bit_v2",
        (torch.bfloat16, torch.float8_e4m3fn, True),
    )
    assert all(r["module"] == "-" for r in again)
    # A second architecture is left to the server's start, said so.
    mixed = sglang_jit.build(wanted[:1], ["9.0", "10.0"])
    assert [(r["arch"], r["status"]) for r in mixed] == [("9.0a", "cached"), ("10.0a", "skipped")]


def test_a_failed_or_unknown_module_is_a_row_not_a_stop(fake_sglang, monkeypatch):
    rows = sglang_jit.build([{"kernel": "kvcache", "row_bytes": 2050}], ["9.0"])
    assert rows[0]["status"] == "failed"
    assert rows[0]["error"] == "RuntimeError: row_bytes"
    # Built, then not loadable without a GPU: built all the same, and said.
    monkeypatch.setattr(sglang_jit, "_dtype", lambda name: None)
    rows = sglang_jit.build([{"kernel": "clamp_position", "dtype": "int64"}], ["9.0"])
    assert rows[0]["status"] == "built" and rows[0]["module"].startswith("sgl_kernel_jit_clamp")
    assert (
        rows[0]["error"] == "built; loading it here failed: OSError: libcuda.so.1: "
        "cannot open shared object file"
    )
    # A generator this SGLang does not have: skipped, the server's start builds it.
    monkeypatch.delattr(sys.modules["sglang.jit_kernel.rope"], "_jit_fused_rope_module")
    rows = sglang_jit.build([{"kernel": "fused_rope", "is_neox": True, "rope_dim": 64,
                              "dtype": "bfloat16"}], ["9.0"])  # fmt: skip
    assert rows[0]["status"] == "skipped" and "the server's start builds it" in rows[0]["error"]
    # No GPU that NVML sees: nothing is imported or built.
    monkeypatch.setitem(sys.modules, "sglang.jit_kernel.utils.arch", None)
    rows = sglang_jit.build([{"kernel": "clamp_position", "dtype": "int64"}], [])
    assert rows[0]["status"] == "skipped" and rows[0]["error"] == "no GPU that NVML sees"
    # An SGLang that cannot target an architecture: every target skipped, with the reason.
    rows = sglang_jit.build([{"kernel": "clamp_position", "dtype": "int64"}], ["9.0"])
    assert rows[0]["status"] == "skipped" and "cannot target an architecture" in rows[0]["error"]
    # One whose import breaks (a GPU query at import, with none visible): a row, not a stop.
    broken = types.ModuleType("sglang.jit_kernel.utils.arch")
    broken.__getattr__ = lambda name: (_ for _ in ()).throw(RuntimeError("No CUDA GPUs"))
    monkeypatch.setitem(sys.modules, "sglang.jit_kernel.utils.arch", broken)
    rows = sglang_jit.build([{"kernel": "clamp_position", "dtype": "int64"}], ["9.0"])
    assert rows[0]["status"] == "skipped" and "RuntimeError: No CUDA GPUs" in rows[0]["error"]
