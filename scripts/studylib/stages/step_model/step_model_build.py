"""Where a decode step's time and energy go: the kernel tables predict the server (issue 16).

For every one-GPU SGLang decode variant and concurrency C, the predicted step is the sum, over
the served model's layers, of the kernels SGLang runs per layer at C tokens, plus lm_head once:

* ``moe``: SGLang's Triton fused-MoE layer (``fused_moe``) at C tokens over the model's
  experts, with balanced routing and with the recorded expert histogram (both shown);
* ``attention``: SGLang's Triton decode attention at batch C over the configured context;
* ``dense``: the attention's qkv and output projections (an FP8 model's: SGLang's Triton
  block-FP8 GEMM with its activation quantisation), the router (SGLang's runs in fp32:
  the bf16 GEMM of its shape stands in, a few µs), and lm_head once per step.

The shared experts' gate_up and down GEMMs count as ``moe``: SGLang fuses them into the
routed experts' kernel on sm_90, where the profiler sees them (step_components).

Each kernel's time is its HBM-cold time from the sweep (weights streamed every call, as a
decode step runs); a row without a cold time takes its graph time and says so (``basis``).
``other`` is the time the GPU waits for the host: nothing with CUDA graphs (one replay per
step), and with graphs off whatever the host's calls take beyond the kernels. Eager calls are
asynchronous, so the host runs ahead while the GPU works and a step takes the longer of the
two: other = max(host - kernels, 0). A kernel's host cost is taken as its least eager time
per call over the sweep's M (one call timed alone: its launch and its GPU time; at the
smallest M the GPU's part is least, so this bounds the host's from above). Adding each
kernel's eager-less-graph time instead predicted a 3.6 ms gap at C = 64 on the H200 where
the server showed 0.3 ms: at large C the GPU hides the host. The small kernels the model
leaves out (norms, rotary, sampling) and the server's own host work are not predicted: they
are what measured TPOT holds beyond the prediction. The profiler's breakdown of the same
steps (``measured_us``, from ``instruments.serving.profile_traces``) sits beside each
component: its ``other``
is the unmodelled kernels, communication and the GPU's idle gaps together; without a
profile it is TPOT less the predicted kernels (``basis`` says which). A profiled step (the
sum of its parts) longer than TPOT by more than the noise floor (PROFILE_STEP_TOLERANCE) did
not run as the measured window did (the tracer's own host cost, or a load's start with its
prefills, widens the GPU's idle gaps): its kernels stay, and its ``other`` becomes TPOT less
the profiled kernels (``measured_basis`` says so, with the ratio), so that the measured step
is the window's. A profiled step shorter than TPOT stands: tracing does not speed a step up,
so there the window is the one to doubt.

Energy: each component's time at the power of the matching kernel-power loop (nearest M,
cold loops first), the ``other`` time at the GPU's measured idle power, over C tokens.
Tensor-parallel variants are left out: their GEMMs are slices the sweep does not measure.
"""

from __future__ import annotations

import math

import pandas as pd

from ...core.verdicts import NOISE_FLOOR
from ...instruments.step_components import COMPONENTS
from ..decode.decode_judgements import graphs_flag
from .step_model_schema import COLUMNS

#: The step's parts as the model predicts them: the profiler's classes (step_components),
#: whose communication, unmodelled kernels and idle gaps are together the model's ``other``.
MODEL_COMPONENTS = tuple(c for c in COMPONENTS if c != "communication")

#: The served weight type -> the sweep's dtype of its quantised GEMMs.
WEIGHT_DTYPES = {"bf16": "bf16", "fp8": "fp8_e4m3"}

#: Which sweep rows stand for what SGLang 0.5.16 runs on sm_90 (Triton attention backend,
#: Triton fused MoE). A list is tried in order: block-FP8 dense layers run SGLang's Triton
#: block-FP8 GEMM with its activation quantisation (seen in the H200 profile, 2026-12-01);
#: where the sweep lacks it the row-wise FP8 GEMM stands in (same FP8 weights streamed,
#: other scales, no quantisation) and ``basis`` says so.
SERVER_KERNELS = {
    "moe": {"backend": "sgl_kernel", "impl": "triton", "op": "fused_moe"},
    "attention": {"backend": "sgl_kernel", "impl": "triton", "op": "decode_attention",
                  "dtype": "bf16", "shape": "attention"},
    "dense": {"bf16": {"backend": "torch", "impl": "aten", "op": "matmul", "dtype": "bf16"},
              "fp8": [{"backend": "sgl_kernel", "impl": "triton",
                       "op": "fp8_blockwise_scaled_mm", "dtype": "fp8_e4m3"},
                      {"backend": "sgl_kernel", "impl": "cutlass", "op": "fp8_scaled_mm",
                       "dtype": "fp8_e4m3"}]},
}  # fmt: skip
#: Per layer: (shape, count per layer, always bf16). The shared experts' count comes from the
#: model's geometry; the router stays bf16 in an FP8 model (SGLang does not quantise it).
LAYER_DENSE = (("qkv", 1, False), ("o_proj", 1, False), ("router", 1, True))
SHARED_EXPERT_SHAPES = ("gate_up", "down")
LM_HEAD = "lm_head"

#: The kernel-power loops whose watts stand for each component (attention has no loop of
#: its own: the dense GEMM loop of the same weight type stands in).
POWER_PROXY = {"moe": "moe", "attention": "dense", "dense": "dense"}
#: Cold loops first: they stream weights from HBM as a decode step does.
POWER_MODES = ("cold", "graph", "eager")

#: A profiled step (its parts summed) longer than TPOT by more than this did not run as the
#: measured window did: its idle gaps are not the window's (H200, 2026-12-01: 1.89× TPOT at
#: C = 1 with CUDA graphs and 2.07× at C = 256 without, where its kernels alone took 0.86×
#: and 0.97×; 1.15× at C = 1 without graphs, where the tracer's cost per launch widens the
#: host-bound step). Only the measurement's own noise: beyond it, the profile's idle would
#: make its step longer than the window's.
PROFILE_STEP_TOLERANCE = NOISE_FLOOR

#: ``measured_basis`` of a step measured by the profiler; a profile whose idle was set aside
#: (``representative``) says so after it.
PROFILE_BASIS = "profile"


def _rows(sweep: pd.DataFrame, status: str | None = "ok", **match) -> pd.DataFrame:
    ok = sweep[sweep["status"] == status] if status and "status" in sweep else sweep
    for key, value in match.items():
        if value is None:
            continue
        if key in ("M", "G"):
            ok = ok[pd.to_numeric(ok[key], errors="coerce") == value]
        else:
            ok = ok[ok[key].astype(str) == str(value)]
    return ok


def _median(rows: pd.DataFrame, column: str) -> float | None:
    if column not in rows:
        return None
    values = pd.to_numeric(rows[column], errors="coerce").dropna()
    return float(values.median()) if len(values) else None


def kernel_us(sweep: pd.DataFrame, mode: str = "cold", **match) -> tuple[float, str] | None:
    """(µs per call, basis) of the sweep point matching ``match``: its ``mode`` time, else its
    graph time (basis names which); None when the sweep has no such ok point."""
    rows = _rows(sweep, **match)
    for basis in (mode, "graph"):
        us = _median(rows, f"{basis}_us")
        if us is not None:
            return us, basis
    return None


def host_us(sweep: pd.DataFrame, **match) -> float | None:
    """What one eager call of the kernel matching ``match`` (at any M) costs the host, at
    most: its least eager µs per call over the sweep's M (module docstring); None without
    eager times."""
    rows = _rows(sweep, **{key: value for key, value in match.items() if key != "M"})
    if rows.empty or "eager_us" not in rows:
        return None
    per_m = pd.to_numeric(rows["eager_us"], errors="coerce").groupby(rows["M"]).median()
    return float(per_m.min()) if per_m.notna().any() else None


def _label(match: dict) -> str:
    keys = ("backend", "impl", "op", "dtype", "shape", "M", "routing")
    return "/".join(str(match[k]) for k in keys if match.get(k) is not None)


def _missing(sweep: pd.DataFrame, match: dict) -> str:
    """What the step model lacks: the kernel's label, with its point's own error where the
    sweep ran it and it failed (an 80-GB H100 lacked the memory for the FP8 MoE points of an
    earlier release: not the same as a sweep that never asked)."""
    failed = _rows(sweep, status="error", **match) if "error" in sweep else sweep.iloc[:0]
    if failed.empty:
        return _label(match)
    error = str(failed["error"].iloc[0]).split(". ")[0][:120]
    return f"{_label(match)} (its point failed: {error})"


def predict_step(sweep: pd.DataFrame, geometry: dict, weights: str, c: int,
                 routing: str, mode: str = "cold", graphs: bool = True) -> dict:  # fmt: skip
    """Per component (``other`` included): predicted µs per step, the basis used and what
    the sweep lacked."""
    layers = int(geometry["layers"])
    dtype = WEIGHT_DTYPES.get(weights, weights)
    parts = {name: {"us": 0.0, "basis": set(), "missing": []} for name in MODEL_COMPONENTS}
    host = {"us": 0.0, "missing": []}  # the host's time for the modelled calls, graphs off

    def add(component: str, count: float, spec: dict | list, **point) -> None:
        candidates = [{**c, **point} for c in (spec if isinstance(spec, list) else [spec])]
        found, match = next(
            ((f, m) for m in candidates if (f := kernel_us(sweep, mode, **m)) is not None),
            (None, None),
        )
        if found is None:
            parts[component]["missing"].append(_missing(sweep, candidates[0]))
            parts["other"]["missing"].append(_missing(sweep, candidates[0]))
            return
        parts[component]["us"] += count * found[0]
        kernel = _label({**match, "M": None, "shape": None})
        stand_in = "" if match is candidates[0] else f" ({kernel} standing in)"
        parts[component]["basis"].add(found[1] + stand_in)
        if not graphs:
            call = host_us(sweep, **match)
            if call is None:
                host["missing"].append(f"eager times of {_label({**match, 'M': None})}")
            else:
                host["us"] += count * call

    moe = {**SERVER_KERNELS["moe"], "dtype": dtype, "M": c, "G": int(geometry["experts"]),
           "routing": routing}  # fmt: skip
    add("moe", layers, moe)
    add("attention", layers, SERVER_KERNELS["attention"], M=c)
    dense = SERVER_KERNELS["dense"]
    for shape, count, always_bf16 in LAYER_DENSE:
        gemm = dense["bf16"] if always_bf16 else dense.get(weights, dense["bf16"])
        add("dense", layers * count, gemm, shape=shape, M=c)
    shared = int(geometry.get("shared_experts", 0))
    for shape in SHARED_EXPERT_SHAPES if shared else ():
        add("moe", layers * shared, dense.get(weights, dense["bf16"]), shape=shape, M=c)
    add("dense", 1, dense["bf16"], shape=LM_HEAD, M=c)
    if graphs:
        parts["other"]["basis"] = {"one graph replay"}
    else:
        kernels = sum(part["us"] for name, part in parts.items() if name != "other")
        parts["other"]["us"] = max(host["us"] - kernels, 0.0)
        parts["other"]["missing"] += host["missing"]
        parts["other"]["basis"] = {"host: max(least eager - kernels, 0)"}
    out = {}
    for name, part in parts.items():
        complete = not part["missing"]
        out[name] = {"us": part["us"] if complete else math.nan,
                     "basis": "+".join(sorted(part["basis"])) or None,
                     "missing": "; ".join(part["missing"])}  # fmt: skip
    return out


def loop_watts(windows: pd.DataFrame, backend: str, impl: str, op: str, dtype: str,
               m: int) -> float | None:  # fmt: skip
    """Mean W of the kernel-power loop of this kernel at the M nearest ``m`` (log scale),
    cold loops first; None without one."""
    if windows is None or windows.empty:
        return None
    steady = windows[(windows.get("label") == "steady") & (windows.get("status", "ok") == "ok")]
    rows = _rows(steady, backend=backend, impl=impl, op=op, dtype=dtype)
    for mode in POWER_MODES:
        at = rows[rows["mode"] == mode]
        ms = pd.to_numeric(at["M"], errors="coerce").dropna()
        if ms.empty:
            continue
        nearest = min(ms.unique(), key=lambda v: abs(math.log(max(v, 1)) - math.log(max(m, 1))))
        watts = pd.to_numeric(at[ms.reindex(at.index) == nearest]["avg_w"], errors="coerce")
        if watts.notna().any():
            return float(watts.mean())
    return None


def component_watts(windows: pd.DataFrame, weights: str, c: int) -> dict:
    """W per component from the kernel-power loops (see POWER_PROXY)."""
    dtype = WEIGHT_DTYPES.get(weights, weights)
    dense = SERVER_KERNELS["dense"].get(weights, SERVER_KERNELS["dense"]["bf16"])
    dense = dense[-1] if isinstance(dense, list) else dense  # the loop the study runs
    moe = {**SERVER_KERNELS["moe"], "dtype": dtype}
    sources = {"moe": moe, "dense": dense}
    loops = {}
    for name, spec in sources.items():
        loops[name] = loop_watts(windows, spec["backend"], spec["impl"], spec["op"],
                                 spec["dtype"], c)  # fmt: skip
    return {name: loops[proxy] for name, proxy in POWER_PROXY.items()}


def _profile_rows(breakdown: pd.DataFrame | None, variant: str, c: int) -> pd.DataFrame:
    """The breakdown's rows of this variant and C (none without a breakdown)."""
    if breakdown is None or breakdown.empty:
        return pd.DataFrame()
    at_c = pd.to_numeric(breakdown["concurrency"], errors="coerce") == c
    return breakdown[(breakdown["variant"] == variant) & at_c]


def _other_batch(rows: pd.DataFrame, c: int) -> int | None:
    """The batch a profile ran at when its trace says it was not C (requests of another
    load still running), else None."""
    if "batch" not in rows:
        return None
    batch = pd.to_numeric(rows["batch"], errors="coerce").dropna()
    return int(batch.max()) if len(batch) and (batch != c).any() else None


def _prefill_us(rows: pd.DataFrame) -> float | None:
    """The prefill-only kernels' µs in a profile whose window held a prefill pass, else None:
    that pass's GEMMs, MoE and attention then weigh on every part of the decode step (FP8 at
    C = 512 on the H200, 2026-12-04: 9 decode steps among 20 passes, 66 ms "per step" against
    TPOT 16.6 ms)."""
    if "prefill_in_window" not in rows:
        return None
    flagged = rows["prefill_in_window"].astype(str).str.lower() == "true"
    if not flagged.any():
        return None
    return float(pd.to_numeric(rows.loc[flagged, "prefill_us"], errors="coerce").max())


def profile_note(breakdown: pd.DataFrame | None, variant: str, c: int) -> str | None:
    """Why a profile of this variant and C stands aside, or None: it ran another batch than
    C, or a prefill pass fell into its steps."""
    rows = _profile_rows(breakdown, variant, c)
    batch = _other_batch(rows, c)
    if batch is not None:
        return f"profile ran at batch {batch}, not C = {c}: not used"
    prefill = _prefill_us(rows)
    if prefill is not None:
        return (f"a prefill pass fell into the profiled steps ({prefill / 1e3:.1f} ms of "
                "prefill-only kernels): not used")  # fmt: skip
    return None


def profile_context(breakdown: pd.DataFrame | None, variant: str, c: int) -> float:
    """The KV length at the middle of the profiled steps of this variant and C (NaN where
    the breakdown does not say: profiles before 2026-12-01's run 11 ran at the load's start)."""
    rows = _profile_rows(breakdown, variant, c)
    if rows.empty or "context" not in rows:
        return math.nan
    context = pd.to_numeric(rows["context"], errors="coerce").dropna()
    return float(context.mean()) if len(context) else math.nan


def measured_components(breakdown: pd.DataFrame | None, variant: str, c: int) -> dict:
    """The profiler's µs per step per model component, averaged over the job's GPUs:
    unmodelled kernels (``other``), communication and the GPU's idle gaps together are the
    model's ``other``. Empty without a profile of that variant and C, or where it stands
    aside (:func:`profile_note`)."""
    rows = _profile_rows(breakdown, variant, c)
    if rows.empty or profile_note(breakdown, variant, c) is not None:
        return {}
    per_rank = rows.pivot_table(index="rank", columns="component", values="us_per_step",
                                aggfunc="sum").mean()  # fmt: skip
    idle = pd.to_numeric(rows.groupby("rank")["idle_us_per_step"].first(), errors="coerce")
    out = {name: float(per_rank.get(name, 0.0)) for name in MODEL_COMPONENTS if name != "other"}
    out["other"] = float(per_rank.get("other", 0.0) + per_rank.get("communication", 0.0)
                         + (idle.mean() if idle.notna().any() else 0.0))  # fmt: skip
    return out


def from_profile(basis: pd.Series, whole: bool = False) -> pd.Series:
    """Which rows' measured side comes from the profiler (``whole``: with its own idle too,
    not set aside by ``representative``)."""
    basis = basis.fillna("").astype(str)
    return basis == PROFILE_BASIS if whole else basis.str.startswith(PROFILE_BASIS)


def representative(profiled: dict, tpot_us: float) -> tuple[dict, str, float]:
    """The profile's parts as the measured side, its basis, and the profiled step's length.
    A profiled step longer than TPOT by more than PROFILE_STEP_TOLERANCE keeps its kernels;
    its ``other`` becomes what TPOT leaves beyond them (none where the kernels fill it)."""
    step = sum(profiled.values())
    if not (tpot_us > 0) or step / tpot_us - 1 <= PROFILE_STEP_TOLERANCE:
        return profiled, PROFILE_BASIS, step
    kernels = step - profiled["other"]
    basis = (f"{PROFILE_BASIS}; other = TPOT - profiled kernels (profiled step "
             f"{step / 1e3:.2f} ms, {step / tpot_us:.2f}× TPOT)")  # fmt: skip
    return {**profiled, "other": max(tpot_us - kernels, 0.0)}, basis, step


def measured_parts(rows: pd.DataFrame) -> dict[str, float]:
    """The measured side of one variant, C and routing of the step-model table: µs per step
    per component, under :func:`representative`'s rule (a table written under an earlier,
    looser tolerance follows today's: no part exceeds the step). Empty where no profile
    measured the step (its ``other`` is then TPOT less the predicted kernels, not a part)."""
    if rows.empty or not from_profile(rows["measured_basis"]).any():
        return {}
    measured = pd.to_numeric(rows.set_index("component")["measured_us"], errors="coerce")
    parts = {name: float(measured.get(name, 0.0)) for name in MODEL_COMPONENTS}
    parts = {name: us if us == us else 0.0 for name, us in parts.items()}
    tpot_us = float(pd.to_numeric(rows["tpot_us"], errors="coerce").iloc[0])
    return representative(parts, tpot_us)[0]


def step_model(sweep: pd.DataFrame, decode: pd.DataFrame, geometry: dict,
               windows: pd.DataFrame | None = None, breakdown: pd.DataFrame | None = None,
               routings: tuple[str, ...] = ("balanced", "recorded"),
               mode: str = "cold") -> pd.DataFrame:  # fmt: skip
    """The step-model table: one row per (variant, C, routing, component)."""
    rows = []
    if decode is None or decode.empty:
        return pd.DataFrame(columns=COLUMNS)
    gpus = pd.to_numeric(decode.get("gpus"), errors="coerce").fillna(1)
    one_gpu = decode[(decode.get("engine") == "sglang") & (gpus == 1)]
    if "valid" in one_gpu:
        one_gpu = one_gpu[one_gpu["valid"].astype(str).str.lower() == "true"]
    for _, run in one_gpu.iterrows():
        c = int(run["concurrency"])
        weights = str(run.get("weights") or "bf16")
        tpot_us = 1e3 * float(run["tpot_ms"]) if pd.notna(run.get("tpot_ms")) else math.nan
        watts = component_watts(windows, weights, c)
        idle_w = pd.to_numeric(pd.Series([run.get("idle_w_per_gpu")]), errors="coerce")[0]
        profiled = measured_components(breakdown, run["variant"], c)
        profile_basis, profile_step = "", math.nan
        if profiled:
            profiled, profile_basis, profile_step = representative(profiled, tpot_us)
        aside = profile_note(breakdown, run["variant"], c)
        floor = pd.to_numeric(pd.Series([run.get("hbm_floor_ms")]), errors="coerce")[0]
        graphs = graphs_flag(run.get("cuda_graphs")) is not False
        for routing in routings:
            parts = predict_step(sweep, geometry, weights, c, routing, mode, graphs)
            predicted = sum(p["us"] for p in parts.values())
            kernels = predicted - parts["other"]["us"]
            # No profile: the kernels' measured side is unknown; of the rest, what TPOT holds
            # beyond the predicted kernels.
            measured = profiled or {"other": tpot_us - kernels}
            part_w = {name: idle_w if name == "other" else watts.get(name) for name in parts}
            energy = sum(part["us"] * (math.nan if part_w[name] is None else part_w[name])
                         for name, part in parts.items())  # fmt: skip
            j_pred = energy * 1e-6 / c
            j_meas = pd.to_numeric(pd.Series([run.get("j_per_token")]), errors="coerce")[0]
            common = {
                "variant": run["variant"], "weights": weights,
                "cuda_graphs": run.get("cuda_graphs"), "concurrency": c, "routing": routing,
                "predicted_step_us": predicted, "tpot_us": tpot_us,
                "predicted_over_tpot": predicted / tpot_us if tpot_us else math.nan,
                "predicted_j_per_token": j_pred, "j_per_token": j_meas,
                "j_per_token_ratio": j_pred / j_meas if j_meas else math.nan,
                "hbm_floor_us": 1e3 * floor,
                "measured_basis": profile_basis if profiled
                else "; ".join(filter(None, ["TPOT - predicted kernels", aside])),
                "profile_context": profile_context(breakdown, run["variant"], c)
                if profiled else math.nan,
                "profile_step_us": profile_step,
            }  # fmt: skip
            for name in MODEL_COMPONENTS:
                part = parts[name]
                rows.append({**common, "component": name, "predicted_us": part["us"],
                             "measured_us": measured.get(name, math.nan),
                             "basis": part["basis"], "missing": part["missing"],
                             "predicted_w": part_w[name]})  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)
