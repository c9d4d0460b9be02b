"""Shared test fixtures' building blocks."""

import base64
import json
import re
import shutil
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def default_config() -> dict:
    """The repository's default config with the schema's defaults filled in."""
    from studylib.core.config import load_config

    return load_config(ROOT / "config" / "config.yaml")


#: The tiny config's decode attention shape: 4 query heads on 2 KV heads of 16, 32 tokens.
TINY_ATTENTION = {"kind": "attention", "heads": 4, "kv_heads": 2, "head_dim": 16, "context": 32}
#: The default config's shapes of the decode step's dense projections (tiny_config drops the
#: cases that name them: the same ops run on its two GEMM shapes).
DECODE_PROJECTIONS = {"qkv", "o_proj", "router", "lm_head"}


def tiny_config() -> dict:
    """A CPU study that runs in seconds: two M values, two GEMM shapes and a small attention
    shape, quick timing."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["shapes"] = {"down": {"N": 256, "K": 128}, "gate_up": {"N": 128, "K": 256},
                        "attention": dict(TINY_ATTENTION)}  # fmt: skip
    config["m_grid"] = {"cuda": [1, 16], "cpu": [1, 16]}
    # Updated, not replaced: the keys left (cold mode's cold_l2_multiple) are the study's own
    # (a GPU test's cold loop failed on the missing key on an H100).
    config["timing"].update({
        "warmup_iters": 1, "min_samples": 5, "max_samples": 50, "min_time_s": 0.0,
        "max_time_s": {"cuda": 0.05, "cpu": 0.05}, "rel_noise": 0.05, "point_timeout_s": 60,
    })  # fmt: skip
    for spec in config["backends"].values():
        spec["cases"] = [c for c in spec["cases"] if not DECODE_PROJECTIONS & set(c["shapes"])]
        for case in spec["cases"]:
            attention = case["op"] == "decode_attention"
            case["shapes"] = ["attention"] if attention else ["down", "gate_up"]
    config["kernel_power"].update(
        seconds={"cuda": 1, "cpu": 0.3}, idle_s={"cuda": 1, "cpu": 0.3},
        cooldown_s={"cuda": 0.5, "cpu": 0.1},
    )  # fmt: skip
    for points in config["kernel_power"]["backends"].values():
        for point in points:
            point["M"] = [16]
    config["decode"].update(
        concurrency={"cuda": [1], "cpu": [1, 2]}, output_len={"cuda": 16, "cpu": 12},
        input_len={"cuda": 8, "cpu": 8}, idle_s={"cuda": 1, "cpu": 0.3},
        min_steady_s={"cuda": 1, "cpu": 0.3},
    )  # fmt: skip
    config["decode"]["model"]["cpu"] = {
        "vocab_size": 512, "hidden_size": 64, "moe_intermediate_size": 32, "layers": 1,
        "heads": 4, "kv_heads": 2, "experts": 8, "top_k": 2,
    }  # fmt: skip
    return config


def fake_module(monkeypatch, name: str, **functions):
    """Install a module ``name`` holding ``functions`` for the test's duration."""
    import sys
    import types

    module = types.ModuleType(name)
    for attr, fn in functions.items():
        setattr(module, attr, fn)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def pin_sgl_versions(monkeypatch) -> None:
    """The sgl_kernel adapter sees sglang-kernel 0.4.5 and SGLang 0.5.16, whatever is
    installed, and has announced and searched no op yet (find() answers once per process;
    each test fakes its own modules)."""
    from studylib.instruments.backends import sgl_kernel_backend as sgl

    monkeypatch.setattr(sgl, "_announced", set())
    monkeypatch.setattr(sgl, "_searched", {})
    versions = {"sglang-kernel": "0.4.5", "sglang": "0.5.16"}
    monkeypatch.setattr(sgl, "distribution_version", lambda *n: versions.get(n[0]))


def report_paths(kw: dict) -> dict:
    """The report inputs among a test's keyword arguments (decode=..., kernel_power=...),
    popped from ``kw``: the rest go to render_report as they are."""
    from studylib.report import REPORT_INPUTS

    return {name: kw.pop(name) for name in list(kw) if name in REPORT_INPUTS}


def packed_payloads(html: str) -> dict[str, bytes]:
    """The report's packed payloads (report_cells.pack), unpacked, by their element's id or
    data-chart name."""
    from studylib.core.report_cells import unpack

    out = {}
    for attrs, text in re.findall(
        r'<script type="application/x-study-packed"([^>]*)>([^<]*)</script>', html
    ):
        key = re.search(r'(?:id|data-chart)="([^"]+)"', attrs).group(1)
        out[key] = unpack(text)
    return out


def embedded_file(html: str, name: str) -> bytes:
    """The bytes of the page's download ``name``: a base64 data: URI, or a packed payload the
    page's script turns into a blob."""
    match = re.search(rf'href="data:[^;"]+;charset=utf-8;base64,([^"]+)" download="{name}"', html)
    if match:
        return base64.b64decode(match.group(1))
    match = re.search(rf'data-packed="([^"]+)" download="{re.escape(name)}"', html)
    assert match, f"no embedded download {name}"
    return packed_payloads(html)[match.group(1)]


def packed_rows(html: str, table_id: str) -> list[dict]:
    """The rows of a table the page's script builds from packed JSON (the sweep table)."""
    body = re.search(rf'<table[^>]*id="{table_id}".*?<tbody data-packed-rows="([^"]+)">', html,
                     re.S)  # fmt: skip
    assert body, f"no packed table {table_id}"
    return json.loads(packed_payloads(html)[body.group(1)])


#: What a scratch copy of the workflow needs (the end-to-end tests run it there).
WORKFLOW_FILES = ["Snakefile", "rules", "scripts", "config", "report", "profiles", "envs"]


def copy_workflow(folder: Path) -> Path:
    """The workflow's files copied into ``folder`` (no caches), to run Snakemake there."""
    for name in WORKFLOW_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, folder / name)
    return folder


def wait_for(predicate, what: str, timeout_s: float = 60.0) -> None:
    """Poll ``predicate`` until it holds; fail naming ``what`` after ``timeout_s`` (a bound for
    a stalled machine, not a timing the test asserts)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
