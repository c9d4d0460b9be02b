"""A measured breakdown of decode steps from SGLang's profiler traces.

``POST /start_profile`` with ``num_steps`` makes SGLang (0.5.16: srt/managers/
scheduler_components/profiler_manager.py) profile its next ``num_steps`` forward passes with
torch.profiler and stop by itself; each TP rank then writes one Chrome trace,
``{profile_prefix}-{profile_id}-TP-{rank}[-DP-..][-PP-..][-EP-..].trace.json.gz``
(``_stop_profile``), with every GPU kernel as an event ``{"ph": "X", "cat": "kernel",
"name", "ts", "dur"}`` (µs), CUDA-graph replays included (CUPTI records each kernel of a
replayed graph).

Per rank, :func:`rank_breakdown` gives:

- ``steps``: decode steps in the trace, the count of the kernel that runs once per layer per
  decode step (step_components.DECODE_STEP_KERNEL, the Triton decode attention's stage 2)
  over the model's layers. Counting a kernel of the step itself, rather than trusting the
  requested ``num_steps``, stays right when a prefill pass takes some of the profiled
  passes (a prefill pass runs the extend attention instead).
- per component (step_components.COMPONENTS): kernel µs per step and kernels per step;
- ``busy_us_per_step``: the union of all kernel intervals (any stream) over the steps;
- ``span_us_per_step``: first kernel start to last kernel end over the steps;
- ``idle_us_per_step = span - busy``: the GPU waiting on the host (launches, scheduling);
- ``prefill_us``: total time of prefill-only kernels in the trace; non-zero means a prefill
  pass fell into the window (``prefill_in_window``), whose kernels then weigh on the
  per-step figures.

Component times add up to more than ``busy`` where kernels overlap on several streams.
A trace that cannot be read or holds no decode step raises :class:`TraceError` (one line
naming the file): the decode results stand without a breakdown.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..step_components import (
    COMPONENTS,
    classify,
    is_decode_step_kernel,
    is_prefill_only,
)

#: The rank's figures in a breakdown row (the rest: the variant's, the component's).
RANK_COLUMNS = ["steps", "batch", "span_us_per_step", "busy_us_per_step", "idle_us_per_step",
                "prefill_us", "prefill_in_window"]  # fmt: skip

TRACE_NAME = re.compile(r"-TP-(?P<rank>\d+)(-[A-Z]+-\d+)*\.trace\.json(\.gz)?$")


class TraceError(ValueError):
    """A trace that gives no breakdown: the message is one line naming the file.
    ``incomplete``: it could not be read to its end (perhaps still being written)."""

    def __init__(self, message: str, incomplete: bool = False):
        super().__init__(message)
        self.incomplete = incomplete


@dataclass(frozen=True)
class Kernel:
    name: str
    ts: float  # start, µs
    dur: float  # µs
    grid: tuple[int, ...] | None = None  # launch grid, where the trace records it

    @property
    def end(self) -> float:
        return self.ts + self.dur


def trace_files(folder: str | Path, prefix: str, profile_id: str) -> dict[int, Path]:
    """{TP rank: trace file} of one profile in ``folder`` (any DP/PP/EP suffix)."""
    found = {}
    for path in sorted(Path(folder).glob(f"{prefix}-{profile_id}-TP-*.trace.json*")):
        match = TRACE_NAME.search(path.name)
        if match:
            found.setdefault(int(match["rank"]), path)
    return found


def read_kernels(path: str | Path) -> list[Kernel]:
    """The GPU kernels of a (gzipped) Chrome trace, by start time; TraceError if it cannot be
    read (truncated, not JSON, not a trace) or holds no kernel."""
    path = Path(path)

    def unreadable(exc, incomplete: bool):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        why = "truncated or still being written" if incomplete else "damaged"
        return TraceError(f"{path}: not a readable trace ({why}): {first}", incomplete)

    # A gzip file being written (torch.profiler gzips into the final name) is short of its
    # end: incomplete, read again later. A whole gzip that is not a trace, or a .gz file
    # that is no gzip at all, will not get better.
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise unreadable(exc, incomplete=True) from None
    zipped = raw[:2] == b"\x1f\x8b"
    if len(raw) < 2 or (zipped and len(raw) < 18):
        raise unreadable(EOFError(f"{len(raw)} bytes"), incomplete=True)
    if path.suffix == ".gz" and not zipped:
        raise unreadable(ValueError("not gzip data"), incomplete=False)
    try:
        raw = gzip.decompress(raw) if zipped else raw
    except EOFError as exc:
        raise unreadable(exc, incomplete=True) from None
    except (OSError, ValueError) as exc:  # gzip.BadGzipFile, zlib.error
        raise unreadable(exc, incomplete=False) from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise unreadable(exc, incomplete=not zipped) from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{path}: no traceEvents list: not a Chrome trace of torch.profiler")
    kernels = []
    for event in events:
        if not isinstance(event, dict) or event.get("cat") != "kernel" or event.get("ph") != "X":
            continue
        try:
            grid = (event.get("args") or {}).get("grid")
            grid = tuple(int(g) for g in grid) if isinstance(grid, list) else None
            kernels.append(Kernel(str(event["name"]), float(event["ts"]), float(event["dur"]),
                                  grid))  # fmt: skip
        except (KeyError, TypeError, ValueError):
            raise TraceError(f"{path}: a kernel event without name, ts or dur: "
                             f"{str(event)[:200]}") from None  # fmt: skip
    if not kernels:
        raise TraceError(f"{path}: no GPU kernel events (cat 'kernel') in {len(events)} events: "
                         "was the GPU activity recorded?")  # fmt: skip
    return sorted(kernels, key=lambda k: (k.ts, k.end))


def busy_us(kernels: list[Kernel]) -> float:
    """The length of the union of the kernels' intervals (overlapping streams count once)."""
    total, start, end = 0.0, None, None
    for k in sorted(kernels, key=lambda k: k.ts):
        if end is None or k.ts > end:
            if end is not None:
                total += end - start
            start, end = k.ts, k.end
        else:
            end = max(end, k.end)
    return total + (end - start if end is not None else 0.0)


def rank_breakdown(kernels: list[Kernel], layers: int, where: str = "trace") -> dict:
    """One rank's decode-step breakdown (see the module docstring): ``steps``, the
    :data:`RANK_COLUMNS` and ``components`` {component: {us_per_step, kernels_per_step}}."""
    if layers < 1:
        raise ValueError(f"layers must be at least 1, got {layers}")
    marks = sum(1 for k in kernels if is_decode_step_kernel(k.name))
    if not marks:
        raise TraceError(f"{where}: no decode step (no _fwd_kernel_stage2 of the Triton decode "
                         f"attention among {len(kernels)} kernels): another attention backend, "
                         "or only prefill passes profiled")  # fmt: skip
    steps = marks / layers
    # The Triton decode stage-2 kernel launches one block row per sequence (grid = batch,
    # heads): the batch the profiled steps ran, whatever the load meant to hold.
    batches = sorted(k.grid[0] for k in kernels if is_decode_step_kernel(k.name) and k.grid)
    batch = batches[len(batches) // 2] if batches else None
    time = dict.fromkeys(COMPONENTS, 0.0)
    count = dict.fromkeys(COMPONENTS, 0)
    prefill = 0.0
    for k in kernels:
        component = classify(k.name)
        time[component] += k.dur
        count[component] += 1
        if is_prefill_only(k.name):
            prefill += k.dur
    span = max(k.end for k in kernels) - min(k.ts for k in kernels)
    busy = busy_us(kernels)
    return {
        "steps": steps,
        "batch": batch,
        "span_us_per_step": span / steps,
        "busy_us_per_step": busy / steps,
        "idle_us_per_step": (span - busy) / steps,
        "prefill_us": prefill,
        "prefill_in_window": prefill > 0,
        "components": {
            c: {"us_per_step": time[c] / steps, "kernels_per_step": count[c] / steps}
            for c in COMPONENTS
        },
    }


def breakdown_rows(by_rank: dict[int, dict], common: dict) -> list[dict]:
    """Long rows: one per (rank, component), each with the rank's figures and ``common``."""
    rows = []
    for rank, result in sorted(by_rank.items()):
        figures = {key: result[key] for key in RANK_COLUMNS}
        for component in COMPONENTS:
            rows.append({**common, "rank": rank, "component": component, **figures,
                         **result["components"][component]})  # fmt: skip
    return rows
