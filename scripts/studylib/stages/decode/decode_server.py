"""One server start of a decode variant (its argv, env, served name and log), the wait for it to
drop a finished load's requests, and a warmed-up steady load at one C against it."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

from ...instruments.gpu_slots import hold_port, machine_gpus
from ...instruments.serving.decode_load import (
    LoadControl,
    LoadSpec,
    level_window,
    load_window,
    run_load,
)
from ...instruments.serving.engines.base import arg_problems, run_served_name
from ...instruments.serving.engines.sglang_engine import (
    requests_held,
)
from ...instruments.serving.engines.sglang_gate import WAITING as GATE_WAITING
from ...instruments.serving.launcher import ServerFailed, ServerProcess, check_port_free
from ...instruments.serving.server_log import graph_captures
from ...instruments.serving.start_builds import (
    builds_since,
    cache_roots,
    said,
    snapshot,
    summary,
)
from .decode_judgements import NOT_STARTED
from .decode_plan import DUMMY_ARGS, RECORDER_ARGS, context_problem, served_positions, study_flags
from .decode_schema import LOAD_LOCKSTEP, LOAD_STAGGERED, cuda_graphs, expert_parallel
from .expert_m import RECORDER_DIR_ENV

log = logging.getLogger("study.decode")


UNIFORM_ROUTING_ENV = "SGLANG_SIMULATE_UNIFORM_EXPERTS"


class ServerPass:
    """One server start of a variant: its argv, env, served name and log."""

    def __init__(self, plan: dict, eng, out_dir: Path, log_name: str, recorder: bool = False,
                 shared_experts: int = 0, gate: Path | None = None):  # fmt: skip
        """``gate``: the file a gated start (:func:`prestart_problem`) waits for."""
        self.plan, self.eng = plan, eng
        self.host, self.port = plan["host"], int(plan["port"])
        self.base_url = eng.base_url(self.host, self.port)
        self.served_name = run_served_name(plan["variant"])
        args = [str(a) for a in plan.get("args") or []]
        self.check(args, recorder)
        if plan.get("model_kind") == "dummy" and plan["engine"] == "sglang":
            args += DUMMY_ARGS  # random weights: nothing to load or carry
        self.env = {**eng.env, **{k: str(v) for k, v in (plan.get("env") or {}).items()}}
        if plan.get("routing") == "uniform" and plan["engine"] == "sglang":
            # The router of random weights reads far fewer experts than a trained one (on the
            # H200, TPOT fell far below the uniform-routing HBM floor); SGLang's benchmark
            # switch spreads tokens uniformly over the experts. The recorder pass, when on,
            # records the routing the variant runs.
            self.env[UNIFORM_ROUTING_ENV] = "1"
        if recorder:
            # SGLang records per-layer per-expert token counts only when started this way,
            # and writes its dumps into the folder this variable names.
            # An unbounded buffer: the counts cover every step of the window (the default
            # keeps the last 1000, a fraction of a second at C = 1 with CUDA graphs).
            args += RECORDER_ARGS
            if shared_experts:
                # SGLang fuses shared experts into the routed ones on sm_80+ and hands their
                # ids (>= the routed count) to the recorder, whose per-expert buffer they
                # overrun: a device-side assert on the H200 (2026-11-30). Unfused, the routed
                # counts are the same.
                args += ["--disable-shared-experts-fusion"]
            self.record_dir = out_dir / "expert_record"
            self.record_dir.mkdir(parents=True, exist_ok=True)
            self.env[RECORDER_DIR_ENV] = str(self.record_dir.resolve())
        self.argv = eng.argv(plan["model"], self.host, self.port, args, python=sys.executable,
                             served_name=self.served_name, gated=gate is not None)  # fmt: skip
        # The JIT caches the server's processes build into, as their environment names them.
        self.cache_roots = cache_roots({**os.environ, **self.env})
        self.caches_before: dict = {}
        # Steady loads run on this server so far: the first one's warm-up is the engine's own
        # (warmup_s), every later one's its load's (warmup_later_s).
        self.loads_run = 0
        self.server = ServerProcess(
            self.argv,
            out_dir / log_name,
            ready=lambda: eng.ready(self.host, self.port, plan["model"], self.served_name),
            env=self.env,
            ready_timeout_s=plan["ready_timeout_s"],
            stop_grace_s=plan.get("stop_grace_s", 30),
            gate=None if gate is None else (eng.gate_env, gate),
        )

    def check(self, args: list[str], recorder: bool) -> None:
        """ServerFailed, one line, before anything starts (the idle window, the server) where
        the server would not start as planned: arguments that repeat a flag or set one the
        study sets (a second --port: the readiness probe would wait its whole timeout at the
        wrong port), a context beyond the model's positions, or (the main pass) a port in
        use."""
        plan = self.plan
        problems = arg_problems(args, study_flags(self.eng, plan.get("model_kind"), recorder))
        if problems:
            raise ServerFailed(f"variant {plan['variant']}: args: {'; '.join(problems)}")
        served = served_positions(self.eng, args, plan.get("model_kind"), plan.get("model"),
                                  None)  # fmt: skip
        if plan.get("input_len") and plan.get("output_len"):
            problem = context_problem(int(plan["input_len"]), int(plan["output_len"]), served)
            if problem:
                raise ServerFailed(f"variant {plan['variant']}: {problem}")
        if not recorder:
            check_port_free(self.host, self.port)

    def note_caches(self) -> None:
        """The JIT caches' files before the start (start_builds): before it, or a gated start's
        before its gate opens (it builds nothing before: the modules other jobs build in the
        shared caches while it waits are theirs; on an H100, 2026-12-06, 9.1 of the 9.8 s a
        start waiting 366 s claimed)."""
        server = self.server
        if server.proc is None or (server.gate is not None and server.gate_record is None):
            self.caches_before = snapshot(self.cache_roots)

    def start_record(self) -> dict:
        """Once ready: what the start compiled (start_builds.summary, from the caches' files
        since note_caches) and its CUDA-graph captures' seconds by the server's own log."""
        record = summary(builds_since(self.cache_roots, self.caches_before))
        try:
            record["captures_s"] = graph_captures(self.server.log_path.read_text(errors="replace"))
        except OSError:
            record["captures_s"] = {}
        captures = ", ".join(f"{phase} {s:.0f} s" for phase, s in record["captures_s"].items())
        log.info("the server's start: %s%s", said(record),
                 f"; CUDA graphs captured: {captures}" if captures else "")  # fmt: skip
        return record

    def start_early(self, hold_device) -> dict:
        """A gated start (``gate``): start the server, its CPU part beside whatever holds the
        device, then ``hold_device()`` (the job's wait for it; the server is stopped should
        that fail). Whether the server was at its gate by then (its CPU part all done), and
        the GPU memory its processes held (NVML: none, where the gate kept it off the GPU)."""
        self.server.start()
        try:
            hold_device()
        except BaseException:
            self.server.stop()
            raise
        return {"at_gate": GATE_WAITING in self.server.log_path.read_text(errors="replace"),
                "gpu_memory_at_gate": self.server.gpu_memory()}  # fmt: skip

    def load(self, spec: LoadSpec, control: LoadControl | None = None):
        model = self.eng.request_model(self.plan["model"], self.served_name)
        # A carried level waits for the server to drop the requests the step down cancelled.
        held = partial(requests_held, self.base_url) if self.plan["engine"] == "sglang" else None
        return run_load(self.base_url, model, spec, self.eng.request_extras,
                        self.eng.prompt_format, control, held)  # fmt: skip


def prestart_problem(plan: dict, eng, machine_gpus: list[str], resumed: bool) -> str | None:
    """Why this job starts its server only once it holds the device, else None: with
    ``prestart``, SGLang's server starts gated (engines/sglang_gate.py) before the job waits
    for its GPUs, its imports and processes (about 45 s of each start on the H200, the GPU
    idle) beside the job before it."""
    if not plan.get("prestart"):
        return "off (decode.prestart)"
    if not eng.gated_launch:
        return f"the {eng.name} engine has no gated start"
    if resumed:
        return "a resumed job (its journal may leave no level to measure)"
    gpus = int(plan.get("gpus") or 1)
    if len(machine_gpus) != gpus:
        return (f"the job runs on {gpus} of the machine's {len(machine_gpus)} GPUs, which ones "
                "known only once it holds them")  # fmt: skip
    return None


def main_pass_server(plan: dict, eng, out_dir: Path, hold_device, resumed: bool,
                     too_big: bool) -> tuple[dict, ServerPass, dict]:  # fmt: skip
    """The main pass's server, before the job holds its device (``hold_device``: waits for
    it, returns the port offset of its slot; None: held already): started gated where
    :func:`prestart_problem` allows (and its weights fit), else constructed once the device
    is held. The plan with its port, the pass, and run.json's ``prestart`` record."""
    if hold_device is None:
        return plan, ServerPass(plan, eng, out_dir, "server.log"), {"prestart": False}
    if too_big:  # its rows say why; it measures nothing, so it waits for no device
        record = {"prestart": False, "why_not": "its weights do not fit the GPU"}
        return plan, ServerPass(plan, eng, out_dir, "server.log"), record
    began = time.monotonic()
    gpus = machine_gpus()
    problem = prestart_problem(plan, eng, gpus, resumed)
    if problem:
        plan = {**plan, "port": int(plan["port"]) + hold_device()}
        record = {"prestart": False, "why_not": problem, "device_wait_s": time.monotonic() - began}
        return plan, ServerPass(plan, eng, out_dir, "server.log"), record
    # Past the slots' ports (base + slot, taken with a device): another job's early server
    # may wait at its gate beside this one.
    host, first = plan["host"], int(plan["port"]) + len(gpus)
    plan = {**plan, "port": hold_port(first, lambda port: _bindable(host, port))}
    gate = Path(tempfile.mkdtemp(prefix="study-gate-")) / "open"
    main = ServerPass(plan, eng, out_dir, "server.log", gate=gate)
    log.info("starting the server ahead of the device, gated: it waits at %s", gate)
    record = main.start_early(hold_device)
    waited = time.monotonic() - began
    log.info("the device held after %.1f s; the server %s, holding %s of GPU memory", waited,
             "was at its gate" if record["at_gate"] else "had not reached its gate",
             f"{sum(m['bytes'] or 0 for m in record['gpu_memory_at_gate']) / 2**20:.0f} MiB"
             if record["gpu_memory_at_gate"] else "none")  # fmt: skip
    return plan, main, {"prestart": True, **record, "device_wait_s": waited}


def _bindable(host: str, port: int) -> bool:
    try:
        check_port_free(host, port)
    except ServerFailed:
        return False
    return True


#: How long to wait for the server to drop a finished load's cancelled requests.
DRAIN_TIMEOUT_S = 60.0


def drain_server(pas: ServerPass, timeout: float = DRAIN_TIMEOUT_S) -> int | None:
    """Wait until the server holds no request (SGLang: /v1/loads), so that the requests the
    previous load cancelled at its window's end do not run in the next one: SGLang drops a
    cancelled stream's request only when it notices the closed connection, and on the H200
    (2026-12-01) a profile started at once after the C = 64 window ran at batch 80 for
    C = 16. Returns the requests still held at the end (None: the engine does not say)."""
    if pas.plan["engine"] != "sglang":
        return None
    deadline = time.monotonic() + timeout
    while True:
        held = requests_held(pas.base_url)
        if not held:
            return held
        if time.monotonic() >= deadline:
            log.warning("the server still holds %d requests after %.0f s: the next load "
                        "runs beside them", held, timeout)  # fmt: skip
            return held
        time.sleep(0.25)


#: The warm-up's prompts are drawn from their own seed: with the steady load's, SGLang's
#: prefix cache would hold the steady load's first prompts and skip their prefill.
WARMUP_SEED_OFFSET = 1_000_003


def warmup_floor(plan: dict, first: bool) -> float:
    """Seconds of the steady load itself before a window: ``warmup_s`` before the first window
    on a server (the engine's own warm-up), ``warmup_later_s`` before each later one (absent:
    ``warmup_s``), where the engine has run loads already and a staggered load's own start
    brings its steady state (load_stagger)."""
    later = plan.get("warmup_later_s")
    return float((plan.get("warmup_s") if first or later is None else later) or 0)


def load_record(plan: dict) -> dict:
    """How each window reached its steady state (load_stagger), for run.json: the table's
    ``load`` says the window's shape; whether the first requests were pre-aged and the
    warm-ups' floors, here."""
    return {
        "stagger": bool(plan.get("stagger")),
        "preaged": bool(plan.get("preaged")),
        "warmup_s": warmup_floor(plan, True),
        "warmup_later_s": warmup_floor(plan, False),
    }


def carried_levels(plan: dict, crosscheck_skipped: dict | None) -> bool | str:
    """Whether the main pass measures its levels as one load's carried levels (issue 34,
    ``carried_levels``): from the highest C down, each level keeping an evenly aged subset of
    the streams before it (LoadSpec.then), so only the first level waits output_len steps for
    its staggered steady state. True; False where not asked; or why not (run.json's load)."""
    if not plan.get("carried_levels"):
        return False
    if crosscheck_skipped is None:
        return ("not carried: the cross-check runs bench_serving on the same server right "
                "after each window, and the next window starts a load of its own")  # fmt: skip
    return True


def load_specs(plan: dict, c: int, seconds: float, precise: bool = False, first: bool = True
               ) -> tuple[LoadSpec | None, LoadSpec]:  # fmt: skip
    """The warm-up and the timed steady load, ``precise``: ending once its TPOT is known to
    ``tpot_ci_pct`` after ``shortest_steady_s`` (``seconds`` the longest; the main pass's
    windows); ``first``: the server's first window (:func:`warmup_floor`). The warm-up holds
    the steady load itself, C full-length requests in flight, for its floor: ``warmup_s``
    before the server's first window (on the H200, 2026-12-02, after a warm-up
    of one 16-token request, SGLang's own rate over the last third of a C = 1 window's log
    lines was 1.37x that over its first, and 675 tok/s 30 s later against 551 in the window:
    the engine was still warming up inside it), ``warmup_later_s`` before each later one; without
    a floor, C short requests (or
    ``warmup_requests``). With ``stagger`` the warm-up is the steady load's own start, its
    first requests staggered (load_stagger; ``preaged``: their prompts holding their age's
    context), and there is no separate warm-up (None)."""
    common = {"concurrency": c, "input_len": plan["input_len"], "vocab_size": plan["vocab_size"]}
    warm_s = warmup_floor(plan, first)
    seed = c + WARMUP_SEED_OFFSET
    if plan.get("stagger"):
        warm, common = None, {**common, "stagger": True, "warmup_s": warm_s,
                              "preaged": bool(plan.get("preaged"))}  # fmt: skip
    elif warm_s > 0:
        warm = LoadSpec(**common, seed=seed, output_len=plan["output_len"], duration_s=warm_s)
    else:
        warm = LoadSpec(**common, seed=seed, output_len=min(plan["output_len"], 16),
                        num_prompts=max(plan.get("warmup_requests") or c, 1))  # fmt: skip
    ci_pct = float(plan.get("tpot_ci_pct") or 0) if precise else 0.0
    # never longer than the window itself (a quick run's shorter min_steady_s)
    shortest = min(float(plan.get("shortest_steady_s") or seconds), seconds)
    rule = {"precision": ci_pct / 100, "shortest_s": shortest} if ci_pct else {}
    return warm, LoadSpec(**common, seed=c, output_len=plan["output_len"], duration_s=seconds,
                          **rule)  # fmt: skip


def steady_load(pas: ServerPass, c: int, seconds: float, sampler, windows: list, label: str,
                precise: bool = False, then: tuple[int, ...] = ()):  # fmt: skip
    """Warm up, then hold C in flight for ``seconds`` (``precise``: at most, see load_specs):
    the load and its steady window. ``then``: carried levels after it (LoadSpec.then), each
    window ``warmup_later_s`` at least after its step down."""
    drain_server(pas)
    warm, spec = load_specs(pas.plan, c, seconds, precise, first=pas.loads_run == 0)
    if then:
        spec = replace(spec, then=tuple(then), settle_s=warmup_floor(pas.plan, False))
    pas.loads_run += 1
    t_warm = time.monotonic()
    if warm is not None:
        pas.load(warm)
        windows += [{"label": f"{label}warmup", "concurrency": c, **w}
                    for w in sampler.window(t_warm, time.monotonic())]  # fmt: skip
        drain_server(pas)  # a timed warm-up's requests are cut at its end
    log.info("C=%d: %s pass %s; its window runs %s%s", c, label.rstrip("-") or "main",
             "warmed up" if warm is not None else "staggered, warming up in the load",
             f"{spec.shortest_s:g}-{seconds:g} s, until its TPOT is known to "
             f"{100 * spec.precision:g} %" if spec.precision else f"{seconds:g} s",
             f"; then C = {', '.join(map(str, then))} carried on its streams" if then
             else "")  # fmt: skip
    load = pas.load(spec)
    if warm is None and load.admitted is not None:  # the load's own warm-up, before its window
        windows += [{"label": f"{label}warmup", "concurrency": c, **w}
                    for w in sampler.window(t_warm, load.admitted)]  # fmt: skip
    return spec, load, level_window(load, 0) if then else load_window(load, c)


def not_started(exc: ServerFailed, model_facts: dict | None) -> str:
    """One line on a server that did not start: the server's own reason, and the weights the
    study served where it built the model (what an out-of-memory start needs to be read)."""
    text = f"{NOT_STARTED}: {str(exc).splitlines()[0]}"
    weight_bytes = (model_facts or {}).get("weight_bytes")
    if weight_bytes:
        text += (f" (the served model's weights: {weight_bytes / 2**30:.1f} GiB, "
                 "study_model.json)")  # fmt: skip
    return text


def not_started_row(plan: dict, c: int, source: str, why: str) -> dict:
    """The summary row of concurrency ``c`` where the variant's server did not start."""
    return {"engine": plan["engine"], "variant": plan["variant"],
            "model_kind": plan.get("model_kind"), "weights": plan.get("weights"),
            "routing": plan.get("routing"),
            "cuda_graphs": cuda_graphs(plan["engine"], plan.get("args") or []),
            "ep": expert_parallel(plan["engine"], plan.get("args") or []),
            "concurrency": c, "power_source": source, "steady_s": 0.0, "valid": False,
            "requests": 0, "errors": 0, "first_error": why,
            "load": LOAD_STAGGERED if plan.get("stagger") else LOAD_LOCKSTEP}  # fmt: skip
