"""The sweep worker: a child process that measures one point at a time.

A CUDA trap poisons the process's CUDA context, a segfault kills it and a hang never
returns, so points run here, not in the Snakemake job: the parent (``sweep_run.py``) records
such a point as ``error`` and starts a fresh worker for the rest.

Protocol: the parent writes one JSON object per line on stdin (``{"point": {...}}``); the
worker answers one JSON line per message on the file descriptor given by ``--result-fd``
(stdout and stderr stay free for the libraries' own chatter, which goes to the job's log).
The first answer is the hello: the backend's environment on this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import sys
import time
import traceback

from .backends import adapter
from .backends.backend_interface import Unsupported
from .device import device_name, resolve_device
from .nvml import open_clock_watch_factory
from .serving.guard import die_with_parent
from .timing import (
    LaunchLead,
    StopRule,
    cold_rounds,
    graph_calls,
    replay_target_us,
    sample_until,
    summarize,
    timer_for,
)

#: More than this still allocated on the GPU when a point begins, beyond what the last
#: collection could not free (nothing of an earlier point should be), gets a garbage
#: collection (a reference cycle holding its tensors) and a line in the log saying what that
#: freed. On an 80-GB H100 (the whole study, 2026-12-06) the FP8 fused-MoE points found 25-30
#: GiB allocated beyond their own weights, and failed for memory; an H200's 141 GB had hidden
#: it. What a collection cannot free stays the floor: the next run (2026-12-06) found 30.0 GiB
#: held from SGLang's first fused-MoE point on and 1.0-1.1 GiB in every torch and FlashInfer
#: worker, and collecting again before each of 683 points cost the FlashInfer sweep 20 s.
LEFTOVER_BYTES = 1 << 30

# Tests inject faults with {"op:M": "segfault" | "hang" | "raise" | "exit" | "cuda_trap"}.
FAULTS_ENV = "STUDY_INJECT_FAULTS"


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text[:4000]


def compare(out, ref) -> dict:
    """Correctness metrics of ``out`` against the fp64 reference."""
    import torch

    out64 = out.double()
    ref64 = ref.double()
    diff = torch.linalg.vector_norm(out64 - ref64).item()
    ref_norm = torch.linalg.vector_norm(ref64).item()
    out_norm = torch.linalg.vector_norm(out64).item()
    dot = (out64 * ref64).sum().item()
    return {
        "rel_err": diff / ref_norm if ref_norm > 0 else float("inf"),
        "cos_sim": dot / (out_norm * ref_norm) if out_norm > 0 and ref_norm > 0 else 0.0,
        "all_zero": bool(out_norm == 0.0),
        "has_nan": bool(torch.isnan(out64).any().item() or torch.isinf(out64).any().item()),
    }


def verdict(metrics: dict, dtype: str, check: dict) -> str | None:
    """Why the result is wrong, or None."""
    if metrics["has_nan"]:
        return "output has NaN or Inf"
    if metrics["all_zero"]:
        return "output is all zeros"
    cos_min = check.get("cos_sim_min", {}).get(dtype)
    if cos_min is not None and metrics["cos_sim"] < cos_min:
        return f"cosine similarity {metrics['cos_sim']:.4f} < {cos_min}"
    err_max = check.get("rel_err_max", {}).get(dtype)
    if err_max is not None and metrics["rel_err"] > err_max:
        return f"relative error {metrics['rel_err']:.3g} > {err_max}"
    return None


def inject_fault(point: dict) -> None:
    spec = os.environ.get(FAULTS_ENV)
    if not spec:
        return
    fault = json.loads(spec).get(f"{point['op']}:{point['M']}")
    if fault == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif fault == "hang":
        time.sleep(3600)
    elif fault == "slow":  # a JIT build or autotuning: one worker prepares a second late
        time.sleep(1.0)
    elif fault == "raise":
        raise RuntimeError("injected fault")
    elif fault == "exit":
        os._exit(7)
    elif fault == "cuda_trap":
        import torch

        # An out-of-bounds gather trips a device-side assert: the CUDA context is poisoned.
        torch.zeros(4, device="cuda")[torch.tensor([1 << 20], device="cuda")].sum().item()


class Measurer:
    def __init__(self, backend: str, device: str, plan: dict):
        self.module = adapter(backend)
        self.device = device
        self.timing = plan["timing"]
        self.check = plan["check"]
        self.moe = plan.get("moe", {})
        self.rule = StopRule.from_config(self.timing, device)
        self.timer = timer_for(device)
        self.clock_watch = open_clock_watch_factory(device)
        self.l2_bytes = 0
        self.uncollectable = 0  # bytes the last collection left allocated (collect_leftovers)
        self._graph_fixed_us: float | None = None
        if device == "cuda":
            import torch

            self.l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size

    def resolved(self, point: dict) -> dict:
        """The point with what its row leaves out: a recorded routing's expert shares."""
        if point.get("routing") == "recorded":
            return {**point, "expert_shares": self.moe.get("expert_shares")}
        return point

    def context_alive(self) -> bool:
        """False when a CUDA error poisoned this process (the parent then restarts us)."""
        if self.device != "cuda":
            return True
        import torch

        try:
            torch.cuda.synchronize()
            return True
        except Exception:  # noqa: BLE001 - any failure here means the context is gone
            return False

    def sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def measure(self, point: dict) -> dict:
        started = time.monotonic()
        self.collect_leftovers(point)
        try:
            inject_fault(point)
            row = self._measure(point)
        except Exception as exc:  # noqa: BLE001 - one point's failure is a result
            row = self.failure(exc)
        row["point_s"] = time.monotonic() - started
        return row

    def allocated_bytes(self) -> int | None:
        if self.device != "cuda":
            return None
        import torch

        try:
            return torch.cuda.memory_allocated()
        except Exception:  # noqa: BLE001 - a poisoned context: the parent restarts the worker
            return None

    def collect_leftovers(self, point: dict) -> None:
        """Before a point: GPU memory still allocated from earlier ones (LEFTOVER_BYTES beyond
        what the last collection left) gets a garbage collection, and a line in the log saying
        what it freed; what it could not free is the next point's floor."""
        held = self.allocated_bytes()
        if held is None:
            return
        floor = min(self.uncollectable, held)  # a holder let go lowers it
        self.uncollectable = floor
        if held <= floor + LEFTOVER_BYTES:
            return
        gc.collect()
        now = self.allocated_bytes()
        left = held if now is None else now
        self.uncollectable = left
        what = f"{point.get('impl')} {point.get('op')} {point.get('dtype')} M={point.get('M')}"
        print(f"worker: {held / 2**30:.1f} GiB still allocated before {what}; "
              f"{left / 2**30:.1f} GiB after a garbage collection", file=sys.stderr,
              flush=True)  # fmt: skip

    def failure(self, exc: Exception) -> dict:
        """The row of a point that raised: unsupported (the library or arch says no) or error;
        ``fatal`` when the exception left the CUDA context unusable."""
        if isinstance(exc, Unsupported):
            return {"status": "unsupported", "error": str(exc)}
        classify = getattr(self.module, "is_unsupported_error", None)
        if classify is not None and classify(exc):
            row = {"status": "unsupported", "error": describe(exc)}
        else:
            traceback.print_exc()
            row = {"status": "error", "error": describe(exc)}
        row["fatal"] = not self.context_alive()
        return row

    def _measure(self, point: dict) -> dict:
        # Where a point's time goes besides its samples (issue 34): preparing its inputs
        # (FlashInfer's fused-MoE autotuning included), the first call, the reference check.
        started = time.monotonic()
        prepared = self.module.prepare(self.resolved(point), self.device)
        self.sync()
        prepare_s = time.monotonic() - started
        started = time.monotonic()
        out = prepared.run()  # the first call pays JIT builds and autotuning, untimed
        self.sync()
        first_call_ms = (time.monotonic() - started) * 1e3
        started = time.monotonic()
        metrics = compare(out, prepared.reference())
        del out
        self.sync()
        check_s = time.monotonic() - started
        wrong = verdict(metrics, point["dtype"], self.check)
        for _ in range(self.timing["warmup_iters"]):
            prepared.run()
        self.sync()
        row = {
            "status": "mismatch" if wrong else "ok",
            "error": wrong or "",
            **metrics,
            "flops": prepared.flops,
            "bytes": prepared.bytes,
            "first_call_ms": first_call_ms,
            "prepare_s": prepare_s,
            "check_s": check_s,
        }
        watch = self.clock_watch() if self.clock_watch else None
        with watch or contextlib.nullcontext():
            eager = sample_until(lambda: self.timer.eager(prepared.run), self.rule)
            row.update(summarize(eager, "eager"))
            if self.device == "cuda":
                row["graph_fixed_us"] = self.graph_fixed_us()
                row.update(self._graph(prepared.run, "graph"))
                # Such a call's cold graph is its graph: its samples are taken once.
                if self.streams_from_hbm(prepared):
                    row.update(self.cold_as_graph(row))
                else:
                    row.update(self._cold(prepared))
        if watch:
            row.update(watch.result())
        return row

    def sustain(self, point: dict, mode: str, seconds: float, barrier=None) -> dict:
        """Run one point back to back for ``seconds`` (eager launches or graph replays).

        Returns the loop's span on the host's monotonic clock (shared with the parent's power
        sampler), bracketed by device synchronisation, and the number of calls made.
        ``barrier``: called once everything is prepared; it returns the monotonic time at
        which to start, so that workers on several GPUs run the same loop at the same time.
        """
        started = time.monotonic()
        self.collect_leftovers(point)
        try:
            inject_fault(point)
            if mode in ("graph", "cold") and self.device != "cuda":
                # Said before preparing: a CPU point's first calls can take seconds.
                raise Unsupported(f"{mode} mode needs CUDA")
            prepared = self.module.prepare(self.resolved(point), self.device)
            prepared.run()  # JIT builds and autotuning before the window
            for _ in range(self.timing["warmup_iters"]):
                prepared.run()
            self.sync()
            if mode in ("graph", "cold"):
                graph, calls_per_step, extra = (
                    self._graph_of(prepared.run) if mode == "graph" else self._cold_graph(prepared)
                )
                step = graph.replay
            else:
                step, calls_per_step, extra = prepared.run, 1, {}
            # The first step, timed (the timer synchronises): it sizes LaunchLead's marks. Off
            # CUDA each step is synchronous: no lead to keep.
            step_s = self.timer.eager(step) / 1e6
            self.sync()
            lead = (
                LaunchLead(step_s, self.timer.torch.cuda.Event) if self.device == "cuda" else None
            )
            if barrier is not None:
                start_at = barrier()
                time.sleep(max(0.0, start_at - time.monotonic()))
            t0 = time.monotonic()
            steps = 0
            # The device runs back to back as a caller's loop would, never waiting for the
            # host; the host stays at most LaunchLead's lead ahead of it, so the final sync,
            # which closes the window, comes when its seconds are up.
            while time.monotonic() - t0 < seconds:
                step()
                steps += 1
                if lead is not None:
                    lead.after_step()
            self.sync()
            t1 = time.monotonic()
            calls = steps * calls_per_step
            row = {
                "status": "ok",
                "error": "",
                "t_start": t0,
                "t_end": t1,
                "calls": calls,
                "us_per_call": (t1 - t0) * 1e6 / calls,
                "calls_per_replay": calls_per_step if mode != "eager" else None,
                "cold_sets": extra.get("cold_sets"),
            }
        except Exception as exc:  # noqa: BLE001 - one point's failure is a result
            row = self.failure(exc)
        row["point_s"] = time.monotonic() - started
        return row

    def graph_fixed_us(self) -> float:
        """The fixed cost of one replay (an empty graph's), measured once per worker."""
        if self._graph_fixed_us is None:
            self._graph_fixed_us = self.timer.fixed_cost()
        return self._graph_fixed_us

    def _graph_of(self, fn):
        """A graph of ``fn`` with enough calls that a replay lasts the target time."""
        fixed = self.graph_fixed_us()
        calls = graph_calls(self.timer.probe(fn, fixed), replay_target_us(fixed))
        return self.timer.capture(fn, calls), calls, {"graph_calls": calls}

    def _graph(self, fn, prefix: str) -> dict:
        """Replay captured calls per sample: kernel time without launch cost."""
        graph, calls, _ = self._graph_of(fn)
        try:
            samples = sample_until(self.timer.replay_sampler(graph, calls), self.rule)
        finally:
            del graph
        return {**summarize(samples, prefix), f"{prefix}_calls": calls}

    def streams_from_hbm(self, prepared) -> bool:
        """One call moves at least ``cold_l2_multiple`` x the L2 (a fused-MoE layer, 256
        experts' weights, a large GEMM): graph replays already read it from HBM every call."""
        multiple = self.timing["cold_l2_multiple"]
        return bool(self.l2_bytes) and prepared.bytes >= multiple * self.l2_bytes

    @staticmethod
    def cold_as_graph(row: dict) -> dict:
        """Cold mode of a call that streams from HBM by itself: its graph replays, one set."""
        if "graph_us" not in row:
            return {}
        return {"cold_us": row["graph_us"], "cold_iqr_us": row["graph_iqr_us"],
                "cold_samples": row["graph_samples"], "cold_sets": 1,
                "cold_calls": row["graph_calls"]}  # fmt: skip

    def _cold_sets(self, prepared) -> list:
        """Input sets totalling >= cold_l2_multiple x L2, a run callable each."""
        if prepared.variants is None or not self.l2_bytes:
            raise Unsupported("cold mode needs input sets and a GPU's L2 size")
        multiple = self.timing["cold_l2_multiple"]
        sets = int(min(max(-(-multiple * self.l2_bytes // max(prepared.bytes, 1)), 2), 512))
        return prepared.variants(sets)

    def _cold_graph(self, prepared):
        """A graph that passes over every input set ``rounds`` times: weights from HBM on
        every call, and a replay long enough for the target time. A call that streams from
        HBM by itself is its own graph, over its one set."""
        if self.streams_from_hbm(prepared):
            graph, calls, _ = self._graph_of(prepared.run)
            return graph, calls, {"cold_sets": 1, "cold_calls": calls}
        runs = self._cold_sets(prepared)

        def one_pass():
            for run in runs:
                run()

        self.sync()
        fixed = self.graph_fixed_us()
        rounds = cold_rounds(self.timer.probe(one_pass, fixed, calls=1), replay_target_us(fixed))
        graph = self.timer.capture(one_pass, rounds)
        calls = rounds * len(runs)
        return graph, calls, {"cold_sets": len(runs), "cold_calls": calls}

    def _cold(self, prepared) -> dict:
        """Graph replay over input sets totalling >= cold_l2_multiple x L2: weights from HBM."""
        try:
            graph, calls, extra = self._cold_graph(prepared)
        except Unsupported:
            return {}
        try:
            samples = sample_until(self.timer.replay_sampler(graph, calls), self.rule)
        finally:
            del graph
        return {**summarize(samples, "cold"), **extra}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--plan", required=True, help="path of the plan JSON")
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--parent", help="the job's process id (serving.guard.process_id)")
    args = parser.parse_args(argv)
    # The worker runs in its own session, so the job can kill its whole group, and so the
    # signals that stop the job (a Snakemake run ended by SIGTERM) never reach it; busy in a
    # loop it reads its closed stdin only when the loop ends. On the H200 (2026-12-01) a
    # kernel-power worker outlived its killed job and looped on the GPU beside the next job.
    # A job that died while this worker started (--parent gone) ends it at once.
    die_with_parent(signal.SIGKILL, args.parent)
    results = os.fdopen(args.result_fd, "w", buffering=1, encoding="utf-8")

    def send(obj: dict) -> None:
        results.write(json.dumps(obj, default=str) + "\n")
        results.flush()

    with open(args.plan, encoding="utf-8") as f:
        plan = json.load(f)
    module = adapter(args.backend)
    device, unusable = resolve_device(plan["device"])
    hello = {"device": device, "device_name": device_name(device)}
    try:
        hello.update(module.environment(device))
    except Exception as exc:  # noqa: BLE001 - recorded on every row
        hello.update({"library_version": None, "unsupported": describe(exc)})
    if unusable:
        hello["unsupported"] = unusable
    send({"hello": hello})
    if hello.get("unsupported"):
        return 0
    measurer = Measurer(args.backend, device, plan)
    for line in sys.stdin:
        message = json.loads(line)
        if "point" in message:
            row = measurer.measure(message["point"])
        elif "loop" in message:
            barrier = None
            if message.get("barrier"):

                def barrier():
                    send({"ready": True})  # the parent answers {"go": <monotonic start>}
                    return float(json.loads(sys.stdin.readline())["go"])

            row = measurer.sustain(message["loop"], message["mode"], message["seconds"],
                                   barrier)  # fmt: skip
        else:
            break
        send(row)
        if row.get("fatal"):
            return 3  # poisoned context: the parent starts a fresh worker
    return 0


if __name__ == "__main__":
    sys.exit(main())
