"""What a server start compiled, read from the JIT caches' own files between launch and ready.

A server's first start on a fresh box compiles its kernels while the GPU waits: on the H200
(2026-12-04, examples/h200-2026-12-04-jit-default) the bf16 SGLang server spent 73 s on its
first prefill graph, the FP8 one on a box where nothing had run 119 s, and the same FP8
server after the sgl-kernel jobs and the bf16 server (whose compiles it found) 3 s. The
start's wall time is the study's (``ready_s``); this says how much of it was building,
without touching the server: each cache's folders that gained files during the start, one
per kernel or module, and the span of their files' times.

- Triton (``TRITON_CACHE_DIR``, else ``$TRITON_HOME/.triton/cache``): one folder per kernel;
  triton/compiler/compiler.py writes its ``.source`` once the kernel's IR is made and its
  ``.json`` after the last stage, so the span is that kernel's compile (its AST lowering
  aside). Any other new folder (a kernel launcher's or Triton's own CUDA utilities' ``.so``,
  an autotuning record) is a helper, its seconds not known.
- SGLang's JIT kernels (tvm-ffi, ``TVM_FFI_CACHE_DIR``, else ``~/.cache/tvm-ffi``) and
  FlashInfer's (``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer``): one folder per module,
  its ``build.ninja`` written before ninja runs and the module's ``.so`` last. A new folder
  with neither is a helper, no build (every H200 server start wrote one, FlashInfer's
  ``tmp``).

The seconds are a floor: what a build did before its first file (and a launcher's compile)
is not in them.

The caches are shared, so a JIT job beside the start (rule server_jit of the other weights,
in a run of decode targets alone) lands its modules in them too: on the H200
(examples/h200-2026-12-06-c1024) the bf16 start's record counted 13.1 s of the FP8 job's
``per_token_group_quant_8bit_v2``. Each row keeps when its files landed (``landed_at``), and
``less_beside`` takes out of a start's record the modules such a job built while they landed,
by its own record (its rows' ``finished_at``), once both are written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

#: The caches a server start may build into, by the name the job's record gives them.
CACHES = ("triton", "sglang_jit", "flashinfer")
#: A JIT job's record (rule flashinfer_jit's, rule server_jit's): its lists of module rows
#: and the cache each list builds into.
JOB_CACHES = {"modules": "flashinfer", "flashinfer": "flashinfer", "sglang": "sglang_jit"}
#: How far a file's time and a clock read in another process may lie apart (file systems
#: that keep times to the second).
CLOCK_SLACK_S = 2.0


def cache_roots(env: Mapping[str, str]) -> dict[str, Path]:
    """Each cache's folder for a process with environment ``env`` (as each library reads
    its own variables)."""
    home = Path(env.get("HOME") or Path.home())
    triton_home = Path(env.get("TRITON_HOME") or home)
    triton = env.get("TRITON_CACHE_DIR") or str(triton_home / ".triton" / "cache")
    tvm_ffi = env.get("TVM_FFI_CACHE_DIR") or str(home / ".cache" / "tvm-ffi")
    flashinfer = Path(env.get("FLASHINFER_WORKSPACE_BASE") or home) / ".cache" / "flashinfer"
    return {"triton": Path(triton).expanduser(), "sglang_jit": Path(tvm_ffi).expanduser(),
            "flashinfer": flashinfer.expanduser()}  # fmt: skip


def _files(root: Path) -> dict[str, float]:
    """Every file under ``root`` (relative path -> modification time); none if it is not
    there. Triton's temporary folders (``tmp.pid_*``) are passing writes, not entries."""
    found = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith("tmp.")]
        for name in names:
            path = Path(folder) / name
            try:
                found[str(path.relative_to(root))] = path.stat().st_mtime
            except OSError:  # removed while walking: a cache's own clean-up
                continue
    return found


def snapshot(roots: Mapping[str, Path]) -> dict[str, dict[str, float]]:
    """The caches' files before the start."""
    return {cache: _files(root) for cache, root in roots.items()}


def _unit_seconds(cache: str, folder: str, files: dict[str, float]
                  ) -> tuple[str, str, float | None]:  # fmt: skip
    """A folder's new files -> (kind, name, seconds its build took by their times): a Triton
    kernel is named by its function, a module by its folder."""
    names = {Path(f).name: t for f, t in files.items()}
    if cache == "triton":
        kernels = [n for n in names if n.endswith(".json") and not n.startswith("__grp__")
                   and not n.endswith(".autotune.json")]  # fmt: skip
        if kernels:
            name = kernels[0].removesuffix(".json")
            source = [t for n, t in names.items() if n.endswith(".source")]
            spent = names[kernels[0]] - min(source) if source else None
            return "kernel", name, spent
        return "helper", next(iter(names)), None
    built = [t for n, t in names.items() if n.endswith(".so")]
    if not built and "build.ninja" not in names:
        return "helper", Path(folder).name, None
    started = [t for n, t in names.items() if not n.endswith(".so")]
    spent = max(built) - min(started) if built and started else None
    return "module", Path(folder).name, spent


def builds_since(roots: Mapping[str, Path], before: Mapping[str, Mapping[str, float]]
                 ) -> list[dict]:  # fmt: skip
    """One row per kernel or module a cache gained (or rebuilt) since ``before``: cache,
    kind (kernel, helper, module), name, seconds (None: not known from its files),
    landed_at (its last file's time, seconds since the epoch)."""
    rows = []
    for cache, root in roots.items():
        old = before.get(cache, {})
        new = {f: t for f, t in _files(root).items() if old.get(f) != t}
        folders: dict[str, dict[str, float]] = {}
        for path, mtime in new.items():
            folders.setdefault(str(Path(path).parent), {})[path] = mtime
        for folder, files in sorted(folders.items()):
            kind, name, spent = _unit_seconds(cache, folder, files)
            seconds = None if spent is None else round(max(spent, 0.0), 2)
            rows.append({"cache": cache, "kind": kind, "name": name, "seconds": seconds,
                         "landed_at": round(max(files.values()), 1)})  # fmt: skip
    return rows


def summary(rows: list[dict]) -> dict:
    """A start's builds: seconds known in all and, per cache, the count of each kind, their
    seconds and, per kernel or module name (a Triton kernel's repeats over its
    specialisations), how many, their seconds and when the last landed: what a build ahead
    of the start would have to make."""
    out: dict = {"seconds": round(sum(r["seconds"] or 0 for r in rows), 2), "caches": {}}
    for cache in CACHES:
        mine = [r for r in rows if r["cache"] == cache]
        if not mine:
            continue
        kinds: dict[str, int] = {}
        names: dict[str, dict] = {}
        for r in mine:
            kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
            if r["kind"] != "helper":
                entry = names.setdefault(r["name"], {"count": 0, "seconds": 0.0})
                entry["count"] += 1
                entry["seconds"] = round(entry["seconds"] + (r["seconds"] or 0), 2)
                if r.get("landed_at") is not None:
                    entry["landed_at"] = max(entry.get("landed_at", 0.0), r["landed_at"])
        out["caches"][cache] = {"built": kinds,
                                "seconds": round(sum(r["seconds"] or 0 for r in mine), 2),
                                "names": dict(sorted(names.items()))}  # fmt: skip
    return out


def job_builds(job: str, record: Mapping) -> list[dict]:
    """A JIT job's record as the modules it built: job, cache, module, seconds, finished_at
    (a record written before jobs kept the time has none, and matches nothing)."""
    return [{"job": job, "cache": cache, "module": row["module"], "seconds": row["seconds"],
             "finished_at": row.get("finished_at")}
            for key, cache in JOB_CACHES.items() for row in record.get(key) or []
            if row.get("status") == "built"]  # fmt: skip


def less_beside(record: dict | None, beside: Sequence[Mapping]) -> tuple[dict | None, list]:
    """A start's record less the modules a JIT job beside it built (job_builds' rows): the
    same name in the same cache, landed while that job built it. -> (the start's own record,
    the rows taken out: cache, module, seconds, count, job)."""
    if not record or not record.get("caches") or not beside:
        return record, []
    own = {**record, "caches": {}}
    taken = []
    for cache, entry in record["caches"].items():
        names = dict(entry.get("names", {}))
        mine = []
        for name, unit in entry.get("names", {}).items():
            job = _builder(cache, name, unit.get("landed_at"), beside)
            if job is not None:
                del names[name]
                mine.append({"cache": cache, "module": name, "seconds": unit["seconds"],
                             "count": unit["count"], "job": job})  # fmt: skip
        if not mine:
            own["caches"][cache] = entry
            continue
        taken += mine
        # JIT jobs build modules: what is left of the cache's count and seconds is the start's.
        built = {**entry.get("built", {})}
        built["module"] = built.get("module", 0) - sum(t["count"] for t in mine)
        built = {kind: n for kind, n in built.items() if n > 0}
        if built:
            seconds = round(entry["seconds"] - sum(t["seconds"] for t in mine), 2)
            own["caches"][cache] = {**entry, "built": built, "names": names,
                                    "seconds": max(seconds, 0.0)}  # fmt: skip
    if taken:
        own["seconds"] = round(max(record["seconds"] - sum(t["seconds"] for t in taken), 0.0), 2)
    return own, taken


def _builder(cache: str, name: str, landed_at: float | None,
             beside: Sequence[Mapping]) -> str | None:  # fmt: skip
    """The job beside a start that built this module while it landed, if one did."""
    if landed_at is None:
        return None
    for row in beside:
        done = row.get("finished_at")
        if row["cache"] != cache or row["module"] != name or done is None:
            continue
        if done - row["seconds"] - CLOCK_SLACK_S <= landed_at <= done + CLOCK_SLACK_S:
            return row["job"]
    return None


def said(record: dict | None) -> str:
    """A start's builds as the job's log and the device-time table say them."""
    if not record or not record.get("caches"):
        return "nothing built"
    parts = []
    for cache, entry in record["caches"].items():
        counts = ", ".join(f"{n} {kind}{'s' if n != 1 else ''}"
                           for kind, n in sorted(entry["built"].items()))  # fmt: skip
        parts.append(f"{cache} {counts} ({entry['seconds']:.0f} s)")
    return f"built {record['seconds']:.0f} s: " + "; ".join(parts)
