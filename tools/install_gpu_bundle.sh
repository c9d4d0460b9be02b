#!/usr/bin/env bash
# Install the offline wheel bundle (built by tools/build_gpu_bundle.sh) on the
# GPU box, from the repo root, without any network:
#
#   tools/install_gpu_bundle.sh [--bundle DIR] [--target DIR] [--python PY]
#                               [--partial] [--no-smoke]
#   source tools/install_gpu_bundle.sh ...   # same, and exports PYTHONPATH/PATH
#
#   --bundle DIR  bundle folder holding part1/, part2/, ... (default .gpu-bundle)
#   --target DIR  pip --target folder (default /tmp/site)
#   --python PY   interpreter of the image (default python3)
#   --partial     install even when MANIFEST.txt lists parts/wheels not present
#   --no-smoke    skip the import smoke check
#
# BUNDLE/aot/NAME.so (FlashInfer modules built ahead, tools/prebuild_flashinfer_moe.py
# --cross) go where FlashInfer loads them without a build.
#
# It runs
#   PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
#       --target DIR BUNDLE/part*/*.whl
# (adding --upgrade when DIR already has files, so a re-run replaces them; not at all
# when DIR already holds this very bundle: see below),
# patches the installed SGLang when it is bundled (see below), prints the
# `export PYTHONPATH=...` line, then imports snakemake (required), altair,
# vl_convert (required when bundled) and flashinfer, sgl_kernel, sglang, sglang.srt.entrypoints.http_server
# (if bundled; errors are printed, not fatal, since they need the GPU libraries).
#
# The one patch: SGLang 0.5.16 pins transformers 5.12.1, the image has 5.17, which
# ships the qwen3_asr model type itself; sglang/srt/configs/qwen3_asr.py registers it
# again with AutoConfig at import time and raises ValueError ("'qwen3_asr' is already
# used by a Transformers config"), so no sglang.srt module imports. The installer adds
# exist_ok=True to those two AutoConfig.register calls in the installed file
# (tools/patches/sglang_qwen3_asr_exist_ok.py): idempotent, and it stops the install
# with an error if the lines are not found (a different SGLang: review the patch).

_gpu_bundle_main() (
  set -euo pipefail
  die() { echo "install_gpu_bundle: ERROR: $*" >&2; exit 1; }
  log() { echo "install_gpu_bundle: $*"; }

  local bundle=.gpu-bundle target=/tmp/site py=python3 partial=0 smoke=1
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --bundle) [[ $# -ge 2 ]] || die "--bundle needs a folder"; bundle="$2"; shift 2 ;;
      --bundle=*) bundle="${1#*=}"; shift ;;
      --target) [[ $# -ge 2 ]] || die "--target needs a folder"; target="$2"; shift 2 ;;
      --target=*) target="${1#*=}"; shift ;;
      --python) [[ $# -ge 2 ]] || die "--python needs an interpreter"; py="$2"; shift 2 ;;
      --partial) partial=1; shift ;;
      --no-smoke) smoke=0; shift ;;
      -h|--help) sed -n '2,30p' "${BASH_SOURCE[0]}"; exit 0 ;;
      *) die "unknown argument: $1 (see --help)" ;;
    esac
  done

  local here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  command -v "$py" >/dev/null || die "interpreter not found: $py"
  [[ -d "$bundle" ]] || die "bundle folder not found: $bundle (run from the repo root, or pass --bundle)"
  shopt -s nullglob
  local wheels=("$bundle"/part*/*.whl)
  shopt -u nullglob
  [[ ${#wheels[@]} -gt 0 ]] || die "no $bundle/part*/*.whl found: carry the part folders first"

  # Completeness check against the manifest (if it was carried too).
  local manifest="$bundle/MANIFEST.txt"
  if [[ -f "$manifest" ]]; then
    local missing=0 part file size _sha
    while IFS=$'\t' read -r part file size _sha; do
      [[ -z "$part" || "$part" == \#* ]] && continue
      if [[ ! -f "$bundle/$part/$file" ]]; then
        echo "  missing: $part/$file" >&2; missing=$((missing + 1))
      elif [[ "$(stat -c %s "$bundle/$part/$file")" != "$size" ]]; then
        echo "  wrong size: $part/$file" >&2; missing=$((missing + 1))
      fi
    done <"$manifest"
    if (( missing > 0 )); then
      (( partial )) || die "$missing wheel(s) of $manifest are missing or truncated (carry every part, or pass --partial: through tools/gpu_study.sh, GPU_STUDY_INSTALL_ARGS=--partial)"
      log "WARNING: $missing wheel(s) missing; installing what is there (--partial)"
    else
      log "manifest check: all wheels present"
    fi
  else
    log "WARNING: $manifest not found; cannot check that every part was carried"
  fi

  mkdir -p "$target"
  target="$(cd "$target" && pwd)"
  # The same bundle installed here already (a second tools/gpu_study.sh on one box) is
  # kept: pip rewrites every file, new times and all, and ninja then rebuilds FlashInfer's
  # JIT modules from their "newer" sources (on the H200 a second run's FP8 server start
  # rebuilt `norm`, 23.6 s: examples/h200-2026-12-06-c1024).
  local stamp="$target/.gpu-bundle-installed" wanted w
  wanted="$(for w in "${wheels[@]}"; do echo "$(basename "$w") $(stat -c %s "$w")"; done | sort)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]]; then
    log "the same ${#wheels[@]} wheels are installed in $target already: kept as they are"
  else
    rm -f "$stamp"
    local upgrade=()
    if [[ -n "$(ls -A "$target" 2>/dev/null)" ]]; then upgrade=(--upgrade); fi
    log "installing ${#wheels[@]} wheels into $target"
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      "${upgrade[@]+"${upgrade[@]}"}" --target "$target" "${wheels[@]}" \
      || die "pip install failed"

    # SGLang 0.5.16 with transformers >= 5.13: see the header (idempotent, checked edit).
    if [[ -d "$target/sglang" ]]; then
      local patched
      patched="$("$py" "$here/patches/sglang_qwen3_asr_exist_ok.py" "$target")" \
        || die "patching sglang for transformers >= 5.13 failed (see above)"
      log "$patched"
    fi
    echo "$wanted" >"$stamp"
  fi

  # FlashInfer modules built ahead on another host (tools/prebuild_flashinfer_moe.py
  # --cross writes BUNDLE/aot/NAME.so): installed where FlashInfer loads a module without
  # building it (flashinfer/jit/env.py, FLASHINFER_AOT_DIR/NAME/NAME.so).
  shopt -s nullglob
  local so name
  for so in "$bundle"/aot/*.so; do
    [[ -d "$target/flashinfer" ]] || die "$so: flashinfer is not installed in $target"
    name="$(basename "$so" .so)"
    mkdir -p "$target/flashinfer/data/aot/$name"
    cp "$so" "$target/flashinfer/data/aot/$name/$name.so"
    log "FlashInfer module $name installed prebuilt ($(du -h "$so" | cut -f1))"
  done
  shopt -u nullglob

  echo "export PYTHONPATH=$target\${PYTHONPATH:+:\$PYTHONPATH}"
  echo "export PATH=$target/bin:\$PATH"

  if (( smoke )); then
    log "smoke check"
    PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" "$py" - "$target" <<'PYEOF' || die "smoke check failed"
import importlib, importlib.metadata as md, os, sys, traceback
target = sys.argv[1]
def version(mod, dist):
    v = getattr(mod, "__version__", None)
    if v is None:
        try:
            v = md.version(dist)
        except Exception:
            v = "?"
    return v
failed = 0
# Image packages the bundle relies on, with the lowest versions checked to work
# (pydantic 2.14 imports typing_extensions.Sentinel: needs >= 4.14).
for dist, need in [("typing-extensions", (4, 14)), ("packaging", (24, 0)), ("jinja2", (3, 0)),
                   ("pyyaml", (6, 0)), ("requests", (2, 8)), ("attrs", (22, 2)), ("wrapt", (1, 15))]:
    try:
        v = md.version(dist)
    except md.PackageNotFoundError:
        print(f"  warn  image lacks {dist}")
        continue
    nums = tuple(int(x) for x in (v.split(".") + ["0"])[:2] if x.isdigit())
    if nums < need:
        print(f"  warn  image has {dist} {v}; the bundle needs >= {'.'.join(map(str, need))}")
for mod, dist, required in [("snakemake", "snakemake", True), ("snakemake.api", "snakemake", True),
                            # the report group: required when bundled (--without report leaves it out)
                            ("altair", "altair", "bundled"),
                            ("vl_convert", "vl-convert-python", "bundled"),
                            ("flashinfer", "flashinfer-python", False), ("sgl_kernel", "sglang-kernel", False),
                            # transformers serve (the decode engine here) needs these three
                            ("fastapi", "fastapi", False), ("uvicorn", "uvicorn", False),
                            ("openai", "openai", False),
                            # SGLang's server (decode engine 'sglang'); needs the CUDA image
                            ("sglang", "sglang", False),
                            ("sglang.srt.entrypoints.http_server", "sglang", False)]:
    if required is not True and not os.path.isdir(os.path.join(target, mod.split(".")[0])):
        print(f"  skip  {mod}: not in the bundle")
        continue
    required = bool(required)
    try:
        m = importlib.import_module(mod)
        print(f"  ok    import {mod} {version(m, dist)}  ({os.path.dirname(m.__file__)})")
    except BaseException as e:  # noqa: BLE001 - report, keep going
        msg = "".join(traceback.format_exception_only(type(e), e)).strip().splitlines() or [repr(e)]
        print(f"  {'FAIL' if required else 'warn'}  import {mod}: {msg[0]}")
        for line in msg[1:12]:
            print(f"        {line}")
        failed += required
sys.exit(1 if failed else 0)
PYEOF
    local out
    if out="$(PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" "$py" -m snakemake --version 2>&1)"; then
      log "snakemake CLI: $out"
    else
      echo "$out" | tail -5 >&2
      die "'$py -m snakemake --version' failed"
    fi
  fi
  log "done; to use it: export PYTHONPATH=$target\${PYTHONPATH:+:\$PYTHONPATH}"
)

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
  # Sourced: install, then export into the calling shell.
  _gpu_bundle_target=/tmp/site
  _gpu_bundle_args=("$@")
  for ((_i = 0; _i < ${#_gpu_bundle_args[@]}; _i++)); do
    case "${_gpu_bundle_args[_i]}" in
      --target) _gpu_bundle_target="${_gpu_bundle_args[_i + 1]:-}" ;;
      --target=*) _gpu_bundle_target="${_gpu_bundle_args[_i]#*=}" ;;
    esac
  done
  # A failed install returns its status to the caller (`source ... || exit 1`): a plain
  # `if` here returned 0, and tools/gpu_study.sh went on to start a Snakemake not installed.
  _gpu_bundle_rc=0
  _gpu_bundle_main "$@" || _gpu_bundle_rc=$?
  if (( _gpu_bundle_rc == 0 )) && [[ -d "$_gpu_bundle_target" ]]; then
    _gpu_bundle_target="$(cd "$_gpu_bundle_target" && pwd)"
    export PYTHONPATH="$_gpu_bundle_target${PYTHONPATH:+:$PYTHONPATH}"
    export PATH="$_gpu_bundle_target/bin:$PATH"
    echo "install_gpu_bundle: exported PYTHONPATH=$PYTHONPATH"
  fi
  unset _gpu_bundle_target _gpu_bundle_args _i
  return "$_gpu_bundle_rc"
else
  _gpu_bundle_main "$@"
fi
