"""The whole study through Snakemake on this (CPU) machine, in a scratch copy of the repo."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import ROOT, copy_workflow, tiny_config

pytestmark = pytest.mark.e2e
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


def snakemake(workdir, *args, check=True, env=None):
    proc = subprocess.run(
        [SNAKEMAKE, "--cores", "2", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {args} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def planned_jobs(text: str) -> list[dict]:
    """A dry run's jobs: rule, and its input, output, wildcards and priority lines."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:\n)", text):
        rule = re.match(r"(?:local)?rule (\w+):\n", block)
        if rule:
            fields = dict(re.findall(r"^\s+(input|output|wildcards|priority): (.+)$", block,
                                     flags=re.M))  # fmt: skip
            jobs.append({"rule": rule.group(1), **fields})
    return jobs


def planned_outputs(workdir, *args, env=None) -> set[str]:
    """Outputs of the jobs a dry run would execute."""
    proc = snakemake(workdir, "--dry-run", *args, env=env)
    text = proc.stdout + proc.stderr
    if "Nothing to be done" in text:
        return set()
    return {part.strip() for job in planned_jobs(text) if "output" in job
            for part in job["output"].split(",")}  # fmt: skip


def write_config(workdir, config):
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("study")
    copy_workflow(workdir)
    write_config(workdir, tiny_config())
    started = time.monotonic()
    snakemake(workdir)
    print(f"full CPU study: {time.monotonic() - started:.1f} s")
    return workdir


def test_outputs_exist_and_hold_valid_rows(study):
    results = study / "results"
    hardware = yaml.safe_load((results / "hardware.json").read_text())
    assert hardware["device"] == "cpu"
    assert hardware["packages"]["torch"]
    peaks = yaml.safe_load((results / "peaks.json").read_text())
    assert peaks["copy_gbps"] > 0 and peaks["bf16_tflops"] > 0
    for backend in ("torch", "flashinfer", "sgl_kernel"):
        assert (results / "sweeps" / f"{backend}.parquet").stat().st_size > 0
        for ext in ("html", "png", "vl.json"):
            assert (results / "figures" / f"latency_{backend}.{ext}").stat().st_size > 0
    sweep = pd.read_csv(results / "tables" / "sweep.csv", keep_default_na=False)
    required = ["backend", "impl", "op", "dtype", "M", "N", "K", "status", "error", "eager_us"]
    assert set(required) <= set(sweep.columns)
    assert set(sweep["status"]) <= {"ok", "unsupported", "error", "mismatch"}
    torch_rows = sweep[(sweep.backend == "torch") & (sweep.op == "matmul")]
    assert len(torch_rows) == 8 and (torch_rows.status == "ok").all()
    assert (pd.to_numeric(torch_rows.eager_us) > 0).all()
    assert (pd.to_numeric(torch_rows.floor_us) > 0).all()
    assert (pd.to_numeric(torch_rows.efficiency) > 0).all()
    # torch's decode attention (SDPA) runs on a CPU too, in fp32 at B = 1, 4
    attention = sweep[(sweep.backend == "torch") & (sweep.op == "decode_attention")]
    assert attention["M"].tolist() == [1, 4] and (attention.status == "ok").all()
    assert (pd.to_numeric(attention["context"]) == 32).all()
    assert (attention["dtype"] == "fp32").all()
    gpu_only = sweep[(sweep.backend != "torch") | ~sweep.op.isin(["matmul", "decode_attention"])]
    assert len(gpu_only) > 0
    assert {"decode_attention", "fused_moe"} <= set(gpu_only[gpu_only.backend == "sgl_kernel"].op)
    assert (gpu_only.status == "unsupported").all()
    assert (gpu_only.error == "no CUDA device").all()
    support = pd.read_csv(results / "tables" / "support.csv")
    assert set(support.backend) == {"torch", "flashinfer", "sgl_kernel"}
    html = (results / "report" / "index.html").read_text()
    assert "no CUDA device" in html
    assert not re.search(r"""(src|href)=["']https?://""", html)
    power = pd.read_csv(results / "tables" / "kernel_power.csv", keep_default_na=False)
    assert set(power.backend) == {"torch", "flashinfer", "sgl_kernel"}
    assert (power.power_source == "none").all()  # no NVML or RAPL on this machine: no watts
    assert (power.avg_w == "").all()
    idle = power[power["mode"] == "idle"]
    assert len(idle) == 3 and (idle.status == "ok").all()
    cpu_loops = power[
        (power.backend == "torch") & (power["mode"] == "eager") & (power.op == "matmul")
    ]
    assert len(cpu_loops) > 0 and (cpu_loops.status == "ok").all()
    assert (pd.to_numeric(cpu_loops.calls) > 0).all()
    for fig in ("power_timeline", "power_vs_util"):
        assert (results / "figures" / f"{fig}.png").stat().st_size > 0
    assert "Kernel power" in html and "no power was measured" in html
    decode = pd.read_csv(results / "tables" / "decode.csv")
    assert decode["concurrency"].tolist() == [1, 2]
    assert (decode["engine"] == "transformers").all() and (decode["errors"] == 0).all()
    assert (decode["wrong_length"] == 0).all() and (decode["output_tok_s"] > 0).all()
    assert (decode["power_source"] == "none").all() and decode["avg_w_total"].isna().all()
    run = yaml.safe_load((results / "decode" / "transformers" / "run.json").read_text())
    assert run["teardown"]["left_behind"] is False
    assert 'id="decode-power"' in html  # the decode section (its heading: "Decode runs")
    # The answers computed from this run's tables (tables/answers.csv), per study question
    # and beside the seed; this machine's gaps said as not measured here, with why
    answers = pd.read_csv(results / "tables" / "answers.csv", keep_default_na=False)
    answers["question"] = answers["question"].astype(str)
    assert set(answers["question"]) == {"1", "2", "3", "4", "5", "6", "seed"}
    assert 'id="answers"' in html and "Q2. Are decode-sized GEMMs bound" in html
    assert (answers.loc[answers["question"] == "1", "status"].isin(["answered", "tie"])).any()
    power = answers[answers["question"] == "3"]
    assert (power["status"] == "not measured here").all()
    assert power["why"].str.contains("no GPU").all()
    seed = answers[answers["question"] == "seed"].set_index("subject")
    assert "no GPU (CPU:" in seed.loc["GPUs", "sentence"] and "235 of 600 W" in html
    for log in ("hardware.log", "aggregate.log", "report.log", "sweep/torch.log"):
        assert (results / "logs" / log).exists()


def test_snakemake_report_zip(study):
    proc = snakemake(study, "--report", "results/report.zip")
    assert "Report created" in proc.stdout + proc.stderr
    import zipfile

    names = zipfile.ZipFile(study / "results" / "report.zip").namelist()
    assert any(n.endswith("latency_torch.html") for n in names)
    assert any(n.endswith("power_timeline.html") for n in names)


KERNEL_RULES = {"sweep", "kernel_power", "peaks"}
DECODE_RULES = {"decode_model", "decode"}


def test_the_kernel_jobs_take_the_gpu_before_the_decode_jobs(study):
    """The whole run started every sweep, kernel-power and peaks job before any decode job
    (common.smk's KERNEL_JOBS_FIRST): SGLang's server then finds the Triton kernels and JIT
    modules the sgl-kernel jobs compiled. Without the priority this run's scheduler started
    the decode model's job before the last kernel-power job (2026-12-05)."""
    first_run = sorted((study / ".snakemake" / "log").glob("*.snakemake.log"))[0]
    started = re.findall(r"^(?:local)?rule (\w+):$", first_run.read_text(), flags=re.M)
    kernel = [i for i, rule in enumerate(started) if rule in KERNEL_RULES]
    decode = [i for i, rule in enumerate(started) if rule in DECODE_RULES]
    assert len(kernel) >= 7 and decode, started  # 3 sweeps, 3 power jobs, peaks
    assert max(kernel) < min(decode), started


def test_the_gpu_study_builds_the_servers_modules_beside_the_torch_sweep(tmp_path):
    """Planned for a GPU (the default config): one server_jit job per SGLang weights, each
    decode variant waiting for its weights' modules; the torch sweep first among the GPU jobs
    (common.smk's BESIDE_THE_BUILDS), beside the builds."""
    copy_workflow(tmp_path)
    proc = snakemake(tmp_path, "--dry-run", "--config", "device=cuda")
    jobs = planned_jobs(proc.stdout)
    builds = {job["output"] for job in jobs if job["rule"] == "server_jit"}
    assert builds == {"results/decode/server_jit/bf16.json", "results/decode/server_jit/fp8.json"}
    decode = {job["wildcards"]: job["input"] for job in jobs if job["rule"] == "decode"}
    assert "results/decode/server_jit/bf16.json" in decode["variant=sglang-bf16-graphs"]
    assert "results/decode/server_jit/fp8.json" in decode["variant=sglang-fp8-graphs"]
    priority = {job["wildcards"]: int(job.get("priority", 0)) for job in jobs
                if job["rule"] == "sweep"}  # fmt: skip
    assert priority["backend=torch"] > max(
        p for w, p in priority.items() if w != "backend=torch"
    ), priority
    device_time = next(job for job in jobs if job["rule"] == "device_time")
    assert "results/benchmarks/decode/server_jit_bf16.tsv" in device_time["input"]


def test_second_run_does_nothing(study):
    assert planned_outputs(study) == set()
    started = time.monotonic()
    proc = snakemake(study)
    elapsed = time.monotonic() - started
    assert "Nothing to be done" in proc.stdout + proc.stderr
    print(f"no-op rerun: {elapsed:.2f} s")


DOWNSTREAM = {
    "results/tables/sweep.csv",
    "results/tables/support.csv",
    "results/figures/support.html",
    "results/report/index.html",
}


def sweeps_in(outputs):
    return {o for o in outputs if o.startswith("results/sweeps/")}


def test_changing_one_backend_reruns_only_it(study):
    original = tiny_config()
    try:
        config = tiny_config()
        config["backends"]["torch"]["cases"][0]["m"] = {"cuda": [1], "cpu": [1, 2, 16]}
        write_config(study, config)
        planned = planned_outputs(study)
        assert sweeps_in(planned) == {"results/sweeps/torch.parquet"}
        assert DOWNSTREAM <= planned
        assert "results/figures/latency_torch.html" in planned
        assert "results/figures/latency_flashinfer.html" not in planned

        config = tiny_config()
        config["backends"]["flashinfer"]["cases"][0]["impls"] = ["cutlass"]
        write_config(study, config)
        assert sweeps_in(planned_outputs(study)) == {"results/sweeps/flashinfer.parquet"}

        # Kernel-power points of one backend rerun that backend's power job alone.
        config = tiny_config()
        config["kernel_power"]["backends"]["sgl_kernel"][0]["M"] = [16, 32]
        write_config(study, config)
        planned = planned_outputs(study)
        assert {o for o in planned if o.startswith("results/kernel_power/")} == {
            "results/kernel_power/sgl_kernel.parquet",
            "results/kernel_power/sgl_kernel_timeline.parquet",
        }
        assert sweeps_in(planned) == set()

        # Decode settings rerun the decode job (not the model, not a sweep).
        config = tiny_config()
        config["decode"]["concurrency"]["cpu"] = [1, 3]
        write_config(study, config)
        planned = planned_outputs(study)
        assert "results/decode/transformers/summary.csv" in planned
        assert "results/decode/model" not in planned and sweeps_in(planned) == set()

        # A new shape used by sgl_kernel alone touches no other backend.
        config = tiny_config()
        config["shapes"]["extra"] = {"N": 64, "K": 64}
        config["backends"]["sgl_kernel"]["cases"][0]["shapes"].append("extra")
        write_config(study, config)
        assert sweeps_in(planned_outputs(study)) == {"results/sweeps/sgl_kernel.parquet"}
    finally:
        write_config(study, original)
    assert planned_outputs(study) == set()


def test_readme_command_reruns_one_backend(study):
    target = "results/sweeps/flashinfer.parquet"
    planned = planned_outputs(study, "--forcerun", target)
    assert sweeps_in(planned) == {target}
    before = (study / target).stat().st_mtime
    snakemake(study, "--forcerun", target)
    assert (study / target).stat().st_mtime > before
    assert planned_outputs(study) == set()


def test_template_edit_reruns_report_only(study):
    template = next((study / "report" / "templates").glob("*.j2"))
    text = template.read_text()
    try:
        template.write_text(text + "\n{# edited #}\n")
        assert planned_outputs(study) == {"results/report/index.html"}
        started = time.monotonic()
        snakemake(study)
        print(f"report-only rerun: {time.monotonic() - started:.2f} s")
    finally:
        template.write_text(text)
    assert planned_outputs(study) == {"results/report/index.html"}
    snakemake(study)


def test_a_plain_run_rebuilds_what_is_missing(study):
    """Deleted figures and an interrupted sweep (its output gone, its journal kept) are
    rebuilt by a plain run: rule all names every output, not the report alone."""
    results = study / "results"
    moved = {results / "figures": study / "figures.moved",
             results / "sweeps" / "torch.parquet": study / "torch.parquet.moved"}  # fmt: skip
    for src, dst in moved.items():
        src.rename(dst)  # renames keep the mtimes: putting them back restores the state
    try:
        planned = planned_outputs(study)
    finally:
        for src, dst in moved.items():
            dst.rename(src)
    rebuilt = {"results/sweeps/torch.parquet", "results/figures/support.png",
               "results/figures/latency_flashinfer.html", "results/report/index.html"}  # fmt: skip
    assert rebuilt <= planned
    assert sweeps_in(planned) == {"results/sweeps/torch.parquet"}
    assert planned_outputs(study) == set()


def test_a_library_upgrade_reruns_hardware_and_that_backend_only(study, tmp_path):
    """A newer flashinfer (a stand-in dist-info on the path) reruns the hardware record,
    flashinfer's JIT build, sweep and power jobs (and what depends on them), not peaks, the
    other backends or decode."""
    info = tmp_path / "site" / "flashinfer_python-99.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 99.0\n"
    )
    planned = planned_outputs(study, env={"PYTHONPATH": str(tmp_path / "site")})
    assert sweeps_in(planned) == {
        "results/sweeps/flashinfer.parquet",
        "results/sweeps/flashinfer_jit.json",
    }
    assert {o for o in planned if o.startswith("results/kernel_power/")} == {
        "results/kernel_power/flashinfer.parquet",
        "results/kernel_power/flashinfer_timeline.parquet",
    }
    assert "results/hardware.json" in planned and "results/peaks.json" not in planned
    assert not {o for o in planned if o.startswith("results/decode/")}


def test_nested_config_override_and_public_host_warning(study):
    proc = snakemake(study, "--dry-run", "--config", "decode={port: 30117, host: 0.0.0.0}")
    output = proc.stdout + proc.stderr
    assert "config warning: decode.host 0.0.0.0: the decode server listens beyond" in output
    assert "results/decode/transformers/summary.csv" in output  # the port is in its plan


def test_config_strings_stay_strings_on_the_command_line(study):
    """Values typed once, by the schema, from the words given: a quoted "::" was refused as a
    mapping and a quoted "yes" as a boolean (faults.md, issue 33)."""
    quoted = 'decode={host: "::", variants: {transformers: {env: {STUDY_TAG: "yes"}}}}'
    proc = snakemake(study, "--dry-run", "--config", quoted)
    output = proc.stdout + proc.stderr
    assert 'config warning: decode.host "::": the decode server listens beyond' in output
    assert "results/decode/transformers/summary.csv" in output
    proc = snakemake(study, "--dry-run", "--config", "decode={host: ::1}", check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in output
    assert "invalid config: --config decode={host: ::1}: not YAML at column 8" in output


def test_a_damaged_table_stops_the_run_and_keeps_the_report(study, tmp_path):
    results = study / "results"
    hardware, report = results / "hardware.json", results / "report" / "index.html"
    shutil.copy2(hardware, tmp_path / "hardware.json")
    before = report.read_bytes(), report.stat().st_mtime
    hardware.write_text("{garbage")
    try:
        proc = snakemake(study, check=False)
        output = proc.stdout + proc.stderr
        assert proc.returncode != 0
        assert "damaged input: results/hardware.json: not JSON (line 1, column 2" in output
        assert "Traceback" not in output
        assert (report.read_bytes(), report.stat().st_mtime) == before
    finally:
        shutil.copy2(tmp_path / "hardware.json", hardware)
    snakemake(study)  # the check (its output removed by the failure) and the report again
    assert planned_outputs(study) == set()


def test_a_foreign_or_cut_sweep_is_refused_in_one_line(study, tmp_path):
    """The issue's cases: results/sweeps/flashinfer.parquet copied over torch.parquet (rc 0,
    a report with no torch rows and FlashInfer's twice), and torch's sweep cut to 2 rows with
    pandas (passed): each stops the run at the first job that reads it, in one line, and the
    old report stays (faults.md rows 140, 141)."""
    sweeps, report = study / "results" / "sweeps", study / "results" / "report" / "index.html"
    torch = sweeps / "torch.parquet"
    shutil.copy2(torch, tmp_path / "torch.parquet")
    before = report.read_bytes(), report.stat().st_mtime
    damages = {
        "written by sweep flashinfer as sweeps/flashinfer.parquet, not as sweeps/torch.parquet: "
        "another table copied over this one": lambda: shutil.copy(sweeps / "flashinfer.parquet",
                                                                  torch),
        "no writer's record (parquet metadata key study.written), yet written after this "
        "folder's tables began carrying one (results/.records): not written by the study "
        "(rewritten by another program, e.g. pandas, or copied here)":
            lambda: pd.read_parquet(torch).head(2).to_parquet(torch, index=False),
    }  # fmt: skip
    try:
        for message, damage in damages.items():
            damage()
            proc = snakemake(study, check=False)
            output = proc.stdout + proc.stderr
            assert proc.returncode != 0 and "Traceback" not in output
            line = (f"damaged input: results/sweeps/torch.parquet: {message} (delete it and run "
                    "again to rebuild it)")  # fmt: skip
            assert line in output, output
            assert (report.read_bytes(), report.stat().st_mtime) == before
            shutil.copy2(tmp_path / "torch.parquet", torch)
    finally:
        shutil.copy2(tmp_path / "torch.parquet", torch)
    snakemake(study)  # the tables the failed jobs removed, and what follows them, again
    assert planned_outputs(study) == set()


def test_a_second_snakemake_in_the_folder_is_locked_out(study):
    """Another Snakemake holding the folder (its lock file, and the study's runs lock every
    Snakemake of the workflow holds: studylib/snakemake_run.py) stops a second one; its lock
    is not taken for one a killed run left (tests/workflow/test_study_killed.py)."""
    lock = study / ".snakemake" / "locks" / "0.output.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("results/report/index.html\n")
    running = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, time; h = open('.snakemake/study-runs.lock', 'a+'); "
         "fcntl.flock(h, fcntl.LOCK_SH); print('held', flush=True); time.sleep(600)"],
        cwd=study, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert running.stdout.readline().strip() == "held"
        proc = snakemake(study, "--forcerun", "results/report/index.html", check=False)
    finally:
        running.kill()
        running.wait()
        lock.unlink()
    assert proc.returncode != 0
    assert "Directory cannot be locked" in proc.stdout + proc.stderr


BAD_CONFIGS = [
    (lambda c: c.update(colour="blue"), "'colour' was unexpected"),
    (lambda c: c.update(device="tpu"), "config key device: 'tpu' is not one of"),
    (lambda c: c["m_grid"].update(cpu=[0]), "config key m_grid.cpu[0]: 0 is less than"),
    (lambda c: c["shapes"]["down"].update(N="big"), "shapes.down.N: 'big' is not"),
    (
        lambda c: c["backends"]["torch"]["cases"][0].update(dtypes=["bf8"]),
        "backends.torch.cases[0].dtypes[0]: 'bf8' is not one of",
    ),
    (
        lambda c: c["backends"]["torch"]["cases"][0].update(shapes=["nope"]),
        "backends.torch.cases[0].shapes: no shape named 'nope'",
    ),
    (
        lambda c: c["backends"]["flashinfer"]["cases"][0].update(op="mm_fp5"),
        "backends.flashinfer.cases[0].op: 'mm_fp5' is not an op of flashinfer",
    ),
    (lambda c: c["decode"].update(variants={}), "decode.variants: {} removes nothing"),
    (
        lambda c: c["decode"]["variants"]["transformers"]["args"].update(
            cpu=["--device", "cpu", "--port", "30001"]
        ),
        "decode.variants.transformers.args.cpu: --port is set by the study itself (decode.port)",
    ),
]


@pytest.mark.parametrize("mutate, message", BAD_CONFIGS)
def test_bad_config_is_one_clear_message(study, tmp_path, mutate, message):
    config = tiny_config()
    mutate(config)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    proc = snakemake(study, "--dry-run", "--configfile", str(bad), check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert message in output, output
    assert "Traceback" not in output
    assert output.count("invalid config") == 1


BROWSER_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def browser_or_skip():
    """(Playwright's sync API, Debian's Chromium); skipped without them, failed on CI."""
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Chromium (.ci/run does, with apt-get)")
        pytest.skip("Chromium is not installed")
    return sync_api, chromium


def test_report_in_a_real_browser(study):
    """Debian's Chromium driven by Playwright: the report loads without console errors, every
    chart renders (SVG or canvas), no network request is made, no link leaves the page, and
    the sweep table hides unsupported rows until asked and filters by backend."""
    sync_api, chromium = browser_or_skip()
    report = (study / "results" / "report" / "index.html").resolve()
    errors, requests = [], []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=BROWSER_FLAGS)
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(report.as_uri())
            every_chart = "[...document.querySelectorAll('div.chart')]"
            page.wait_for_function(f"{every_chart}.every(d => d.querySelector('svg, canvas'))",
                                   timeout=30_000)  # fmt: skip
            charts = page.evaluate(f"{every_chart}.length")
            no_data = page.locator("p.nodata").count()  # figures with nothing to draw here
            hrefs = page.eval_on_selector_all("a[href]", "a => a.map(e => e.getAttribute('href'))")
            sweep = sweep_table_state(page)
        finally:
            browser.close()
    assert errors == []
    assert [u for u in requests if not u.startswith(("file:", "data:", "blob:"))] == []
    # support, 3 latency, efficiency, launch overhead, 2 power, decode: drawn or noted
    assert charts >= 1 and charts + no_data >= 9
    assert hrefs and [h for h in hrefs if not h.startswith(("#", "data:", "blob:"))] == []
    total, unsupported = sweep["total"], sweep["unsupported"]
    assert total > unsupported > 0  # GPU-only backends are unsupported on a CPU, torch runs
    assert sweep["default"] == total - unsupported
    assert sweep["count_text"].startswith(f"showing {total - unsupported} of {total} rows")
    assert sweep["with_unsupported"] == total
    assert 0 < sweep["one_backend"] == sweep["backend_rows"] < total


def sweep_table_state(page) -> dict:
    """Visible rows of the report's sweep table by default, with "show unsupported" ticked,
    and with the backend filter set to the first backend."""
    rows = "#sweep-table tbody tr"
    visible = f"[...document.querySelectorAll('{rows}')].filter(r => !r.hidden).length"
    box = page.locator("#sweep-filters")
    box.wait_for(state="visible")  # report.js shows the filters once they work
    state = {
        "total": page.locator(rows).count(),
        "unsupported": page.locator(f"{rows}[data-status='unsupported']").count(),
        "default": page.evaluate(visible),
        "count_text": box.locator(".filter-count").inner_text(),
    }
    box.locator("input[data-filter-unsupported]").check()
    state["with_unsupported"] = page.evaluate(visible)
    backend = box.locator("select[data-filter='backend'] option").nth(1).get_attribute("value")
    box.locator("select[data-filter='backend']").select_option(backend)
    state["one_backend"] = page.evaluate(visible)
    state["backend_rows"] = page.locator(f"{rows}[data-backend='{backend}']").count()
    return state


def test_latency_chart_mode_switch_and_legend_highlight_in_a_browser(tmp_path):
    """The H200 example's torch latency figure in Chromium: it opens on cold times, the
    timing-mode radio redraws the lines with another mode's times, and a click on a legend
    entry fades the other implementations."""
    sync_api, chromium = browser_or_skip()
    subprocess.run([sys.executable, str(ROOT / "tools" / "example_report.py"),
                    str(ROOT / "examples" / "h200-2026-12-01-kernels"),
                    "--sweeps", "sweeps/run6_torch.csv", "--out", str(tmp_path)],
                   check=True, capture_output=True)  # fmt: skip
    report = tmp_path / "report" / "index.html"
    chart = "#chart-latency_torch"
    # The implementations' lines (the floor is a line mark of its own, not named lines_*).
    lines = f"[...document.querySelectorAll('{chart} g.mark-line[class*=lines_] path')]"
    errors = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=BROWSER_FLAGS)
        try:
            page = browser.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(report.as_uri())
            page.wait_for_function(f"{lines}.length > 0", timeout=30_000)
            radio = page.locator(f"{chart} input[type=radio]")
            checked = page.locator(f"{chart} input[type=radio]:checked")
            assert radio.count() == 3 and checked.get_attribute("value") == "cold"
            cold = page.evaluate(f"{lines}.map(p => p.getAttribute('d'))")
            page.locator(f"{chart} input[type=radio][value=eager]").check()
            page.wait_for_function(
                f"{lines}.map(p => p.getAttribute('d')).join() !== {json.dumps(','.join(cold))}",
                timeout=10_000,
            )
            # Vega picks the legend entry under the pointer itself (the SVG takes the
            # events): click where the first implementation's symbol is (the floor's is 0th).
            symbol = page.locator(f"{chart} .role-legend-symbol path").nth(1)
            symbol.scroll_into_view_if_needed()
            box = symbol.bounding_box()
            page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.wait_for_function(
                f"{lines}.some(p => parseFloat(p.getAttribute('opacity') ?? '1') < 0.5)",
                timeout=10_000,
            )
            opacities = page.evaluate(f"{lines}.map(p => p.getAttribute('opacity') ?? '1')")
        finally:
            browser.close()
    assert errors == []
    assert "1" in opacities and any(float(o) < 0.5 for o in opacities)
