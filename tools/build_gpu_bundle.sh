#!/usr/bin/env bash
# Build the offline wheel bundle for the GPU box ("the H200 image":
# CPython 3.12, x86_64 manylinux, torch 2.11.0+cu130 preinstalled).
#
# Run on an internet-connected x86_64 machine from anywhere in the repo:
#   tools/build_gpu_bundle.sh [--dest DIR] [--part-mib N] [--without GROUP]...
#
#   --dest DIR       output folder (default: <repo>/.gpu-bundle, git-ignored)
#   --part-mib N     max total size of one part folder in MiB (default: 60 less the
#                    repo's tracked files, rounded up: a device call carries the working
#                    tree and one part together, and refused a 40-MiB part beside a 24-MiB
#                    tree, 66.8 MB in all, on 2026-12-05)
#   --without GROUP  leave a group out: snakemake | report | flashinfer | sgl_kernel |
#                    serving | serving_sglang (repeatable, or comma-separated)
#   --list FILE      pinned list (default: <repo>/envs/gpu-offline.txt)
#   --python PY      interpreter whose pip downloads (default: python3)
#
# What it does:
#   1. downloads every pinned wheel of envs/gpu-offline.txt (cp312 manylinux
#      or py3 wheels, --no-deps) into DEST/cache; a wheel already in the cache
#      is not downloaded again; an sdist-only pure-python package is built into
#      a py3-none-any wheel;
#   2. repacks sglang-kernel into a slim wheel: python files, dist-info and the
#      sgl_kernel/sm90/ ops (Hopper) only, with a regenerated RECORD;
#   3. splits any wheel larger than one part (flashinfer-python) into several
#      valid wheels that together install the same files;
#   4. bin-packs all wheels (largest first) into DEST/part1, DEST/part2, ...
#      (each <= --part-mib) and writes DEST/MANIFEST.txt (part, file, bytes,
#      sha256; each part's groups on its total line). The report group goes
#      into parts of its own, after the others: a run without figures or the
#      report (e.g. decode only) can leave those parts behind.
# Wheels must suit the box: CPython 3.12, glibc 2.39, so every manylinux tag up
# to manylinux_2_39 is offered (sglang's cp312 wheel is manylinux_2_34).
# On the GPU box: tools/install_gpu_bundle.sh (see there).
set -euo pipefail

die() { echo "build_gpu_bundle: ERROR: $*" >&2; exit 1; }
log() { echo "build_gpu_bundle: $*"; }

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$REPO/.gpu-bundle"
PART_MIB=""
LIST="$REPO/envs/gpu-offline.txt"
PY="${PYTHON:-python3}"
WITHOUT=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    --dest) [[ $# -ge 2 ]] || die "--dest needs a folder"; DEST="$2"; shift 2 ;;
    --dest=*) DEST="${1#*=}"; shift ;;
    --part-mib) [[ $# -ge 2 ]] || die "--part-mib needs a number"; PART_MIB="$2"; shift 2 ;;
    --part-mib=*) PART_MIB="${1#*=}"; shift ;;
    --without) [[ $# -ge 2 ]] || die "--without needs a group"; IFS=, read -r -a g <<<"$2"; WITHOUT+=("${g[@]}"); shift 2 ;;
    --without=*) IFS=, read -r -a g <<<"${1#*=}"; WITHOUT+=("${g[@]}"); shift ;;
    --list) [[ $# -ge 2 ]] || die "--list needs a file"; LIST="$2"; shift 2 ;;
    --python) [[ $# -ge 2 ]] || die "--python needs an interpreter"; PY="$2"; shift 2 ;;
    -h|--help) sed -n '2,30p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

if [[ -z "$PART_MIB" ]]; then
  # The tree travels with every device call, so a part gets what the tree leaves of the
  # call's 64 (the lent device refused 66.8 MB, a 40-MiB part and a 24-MiB tree): 60 MiB.
  tree_bytes=$(git -C "$REPO" ls-files -z 2>/dev/null | (cd "$REPO" && xargs -0 -r stat -c %s 2>/dev/null) \
    | awk '{s += $1} END {print s + 0}')
  PART_MIB=$(( 60 - (tree_bytes + 1048575) / 1048576 ))
  (( PART_MIB >= 16 )) || die "the repo's tracked files take $(( tree_bytes / 1048576 )) MiB: too little of a 64-MiB device call is left for a part (pass --part-mib)"
  log "part size: $PART_MIB MiB (60 less the repo's tracked $(( (tree_bytes + 1048575) / 1048576 )) MiB)"
fi
[[ "$PART_MIB" =~ ^[0-9]+$ && "$PART_MIB" -ge 1 ]] || die "--part-mib must be a positive integer, got '$PART_MIB'"
for g in "${WITHOUT[@]+"${WITHOUT[@]}"}"; do
  case "$g" in snakemake|report|flashinfer|sgl_kernel|serving|serving_sglang) ;;
    *) die "--without: unknown group '$g' (snakemake|report|flashinfer|sgl_kernel|serving|serving_sglang)" ;; esac
done
[[ -f "$LIST" ]] || die "pinned list not found: $LIST"
command -v "$PY" >/dev/null || die "interpreter not found: $PY"
"$PY" -m pip --version >/dev/null 2>&1 || die "'$PY -m pip' does not work"
mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"
CACHE="$DEST/cache"
mkdir -p "$CACHE" "$CACHE/built" "$CACHE/full" "$CACHE/slim" "$CACHE/split"
PART_BYTES=$((PART_MIB * 1024 * 1024))

# Target: CPython 3.12 on x86_64 manylinux with glibc 2.39 (the image): every
# manylinux tag from manylinux_2_5 (manylinux1) to manylinux_2_39, and the legacy
# aliases manylinux1 / manylinux2010 / manylinux2014.
PLATFORM_ARGS=(--python-version 3.12 --implementation cp)
for p in manylinux1_x86_64 manylinux2010_x86_64 manylinux2014_x86_64; do
  PLATFORM_ARGS+=(--platform "$p")
done
for ((minor = 5; minor <= 39; minor++)); do
  PLATFORM_ARGS+=(--platform "manylinux_2_${minor}_x86_64")
done
PIP_DL=("$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: "${PLATFORM_ARGS[@]}")

HELPER="$(mktemp "${TMPDIR:-/tmp}/build_gpu_bundle.XXXXXX.py")"
trap 'rm -f "$HELPER"' EXIT
cat >"$HELPER" <<'PYEOF'
"""Helpers for tools/build_gpu_bundle.sh (stdlib only)."""
import base64, csv, hashlib, io, math, os, re, shutil, sys, zipfile

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

def parse_wheel_name(fn):
    parts = os.path.basename(fn)[:-4].split("-")
    if len(parts) not in (5, 6):
        raise SystemExit(f"not a wheel file name: {fn}")
    return parts[0], parts[1], "-".join(parts[-3:])

def cmd_list(path, without):
    """Print 'name version group' for each pinned line not in a left-out group."""
    skip = set(filter(None, without.split(",")))
    seen = set()
    for n, raw in enumerate(open(path, encoding="utf-8"), 1):
        line, _, comment = raw.partition("#")
        line = line.strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)", line)
        if not m:
            raise SystemExit(f"{path}:{n}: not 'name==version': {line!r}")
        g = re.search(r"\[([a-z_]+)\]", comment)
        if not g:
            raise SystemExit(f"{path}:{n}: comment lacks a [group] tag")
        name, ver, group = m.group(1), m.group(2), g.group(1)
        if norm(name) in seen:
            raise SystemExit(f"{path}:{n}: duplicate {name}")
        seen.add(norm(name))
        if group not in skip:
            print(name, ver, group)

def cmd_find(folder, name, ver):
    """Print the cached wheel for name==ver, if any."""
    if not os.path.isdir(folder):
        return
    for fn in sorted(os.listdir(folder)):
        if fn.endswith(".whl"):
            n, v, _ = parse_wheel_name(fn)
            if norm(n) == norm(name) and v == ver:
                print(os.path.join(folder, fn))
                return

def cmd_is_pure(path):
    _, _, tags = parse_wheel_name(path)
    py, abi, plat = tags.split("-")
    ok = abi == "none" and plat == "any" and any(t.startswith("py3") for t in py.split("."))
    sys.exit(0 if ok else 1)

def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]

def write_wheel(dst, members, distinfo):
    """members: list of (ZipInfo-or-name, bytes) without RECORD; RECORD is regenerated."""
    tmp = dst + ".tmp"
    rows = []
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zo:
        for info, data in members:
            name = info.filename if isinstance(info, zipfile.ZipInfo) else info
            zi = zipfile.ZipInfo(name, date_time=(info.date_time if isinstance(info, zipfile.ZipInfo) else (2020, 1, 1, 0, 0, 0)))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = info.external_attr if isinstance(info, zipfile.ZipInfo) else (0o644 << 16)
            zo.writestr(zi, data)
            rows.append(record_line(name, data))
        rec = f"{distinfo}/RECORD"
        rows.append([rec, "", ""])
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        zi = zipfile.ZipInfo(rec, date_time=(2020, 1, 1, 0, 0, 0))
        zi.compress_type = zipfile.ZIP_DEFLATED
        zi.external_attr = 0o644 << 16
        zo.writestr(zi, buf.getvalue())
    with zipfile.ZipFile(tmp) as z:
        bad = z.testzip()
        if bad:
            raise SystemExit(f"corrupt member {bad} in {tmp}")
    os.replace(tmp, dst)

def distinfo_of(z):
    d = {n.split("/")[0] for n in z.namelist() if n.split("/")[0].endswith(".dist-info")}
    if len(d) != 1:
        raise SystemExit(f"expected one .dist-info folder, found {sorted(d)}")
    return d.pop()

def cmd_slim_sgl(src, dst):
    """Keep python files, dist-info, sgl_kernel/sm90/* and the tiny spatial_ops ext."""
    kept, dropped = [], []
    with zipfile.ZipFile(src) as z:
        di = distinfo_of(z)
        for info in z.infolist():
            n = info.filename
            if n.endswith("/") or n == f"{di}/RECORD":
                continue
            is_ext = n.endswith((".so", ".pyd")) or ".so." in n
            keep = (not is_ext) or n.startswith("sgl_kernel/sm90/") or \
                re.fullmatch(r"sgl_kernel/spatial_ops[^/]*\.so", n) is not None
            (kept if keep else dropped).append(info)
        names = [i.filename for i in kept]
        if not any(re.fullmatch(r"sgl_kernel/sm90/common_ops[^/]*\.so", n) for n in names):
            raise SystemExit(f"{src}: sgl_kernel/sm90/common_ops*.so not found; layout changed?")
        if not any(n == "sgl_kernel/__init__.py" for n in names):
            raise SystemExit(f"{src}: sgl_kernel/__init__.py not found")
        write_wheel(dst, [(i, z.read(i)) for i in kept], di)
    for i in dropped:
        print(f"  dropped {i.filename} ({i.file_size / 2**20:.1f} MiB)")
    print(f"  kept {len(kept)} files, {sum(i.file_size for i in kept) / 2**20:.1f} MiB uncompressed")

def cmd_split(src, outdir, limit):
    """Split a wheel larger than `limit` bytes into pieces <= limit.

    Piece 1 keeps the original name and dist-info (RECORD lists its own files);
    piece k>=2 is a wheel of a helper distribution '<name>_split<k>' with the
    same version and tags.  Installed together (one pip call, same --target),
    they lay down exactly the files of the original wheel.
    """
    limit = int(limit)
    name, ver, tags = parse_wheel_name(src)
    os.makedirs(outdir, exist_ok=True)
    with zipfile.ZipFile(src) as z:
        di = distinfo_of(z)
        infos = [i for i in z.infolist() if not i.filename.endswith("/") and i.filename != f"{di}/RECORD"]
        meta = [i for i in infos if i.filename.startswith(di + "/")]
        files = sorted((i for i in infos if not i.filename.startswith(di + "/")), key=lambda i: i.filename)
        total = sum(i.compress_size for i in files)
        # A wheel can split between files only: one file past a part never fits (each try
        # at more pieces recompressed the whole wheel again, without end).
        biggest = max(files, key=lambda i: i.compress_size)
        if biggest.compress_size > limit * 0.97:
            sys.exit(f"{os.path.basename(src)}: its file {biggest.filename} alone is "
                     f"{biggest.compress_size / 2**20:.1f} MiB compressed, more than a part "
                     f"({limit / 2**20:.0f} MiB): pass a larger --part-mib (at least "
                     f"{math.ceil(biggest.compress_size / 0.97 / 2**20) + 1}), or --without its group")
        k = max(2, math.ceil(os.path.getsize(src) / (limit * 0.97)))
        while True:
            target = total / k
            pieces, cur, acc = [], [], 0
            for i in files:
                if cur and acc + i.compress_size > target and len(pieces) < k - 1:
                    pieces.append(cur); cur, acc = [], 0
                cur.append(i); acc += i.compress_size
            pieces.append(cur)
            outs = []
            for idx, piece in enumerate(pieces, 1):
                if idx == 1:
                    fn = os.path.basename(src)
                    members = [(i, z.read(i)) for i in meta + piece]
                    pdi = di
                else:
                    pname = f"{name}_split{idx}"
                    pdi = f"{pname}-{ver}.dist-info"
                    fn = f"{pname}-{ver}-{tags}.whl"
                    wheel_txt = z.read(f"{di}/WHEEL")
                    metadata = (f"Metadata-Version: 2.1\nName: {pname}\nVersion: {ver}\n"
                                f"Summary: files {idx}/{len(pieces)} of {name} {ver}, split for transfer; "
                                f"install together with {os.path.basename(src)}\n").encode()
                    members = [(i, z.read(i)) for i in piece] + \
                              [(f"{pdi}/METADATA", metadata), (f"{pdi}/WHEEL", wheel_txt)]
                dst = os.path.join(outdir, fn)
                write_wheel(dst, members, pdi)
                outs.append(dst)
            if all(os.path.getsize(p) <= limit for p in outs):
                break
            for p in outs:
                os.remove(p)
            k += 1
    with open(os.path.join(outdir, "SOURCE"), "w") as f:
        f.write(f"{os.path.basename(src)} {os.path.getsize(src)}\n")
    for p in outs:
        print(p)

LAST_GROUPS = ("report",)  # packed into parts of their own, after the others

def cmd_pack(dest, limit, manifest, *wheels):
    """First-fit decreasing into dest/partN; hard-link (or copy) files there.

    wheels are GROUP=PATH; groups in LAST_GROUPS never share a part with the others.
    """
    limit = int(limit)
    tagged = [w.split("=", 1) for w in wheels]
    parts = []  # [total, [(size, path)], {groups}]
    for last in (False, True):
        items = sorted(((os.path.getsize(w), w, g) for g, w in tagged if (g in LAST_GROUPS) == last),
                       key=lambda t: (-t[0], os.path.basename(t[1])))
        first = len(parts)
        for size, w, g in items:
            if size > limit:
                raise SystemExit(f"{os.path.basename(w)} is {size} bytes > part limit {limit}")
            for p in parts[first:]:
                if p[0] + size <= limit:
                    p[0] += size; p[1].append((size, w)); p[2].add(g); break
            else:
                parts.append([size, [(size, w)], {g}])
    for old in os.listdir(dest):
        if re.fullmatch(r"part\d+", old) and os.path.isdir(os.path.join(dest, old)):
            shutil.rmtree(os.path.join(dest, old))
    lines = ["# part\tfile\tbytes\tsha256",
             f"# {len(parts)} parts, limit {limit} bytes ({limit / 2**20:g} MiB) each; "
             f"install all parts together: tools/install_gpu_bundle.sh"]
    for n, (total, members, groups) in enumerate(parts, 1):
        pdir = os.path.join(dest, f"part{n}")
        os.makedirs(pdir)
        for size, w in members:
            out = os.path.join(pdir, os.path.basename(w))
            try:
                os.link(w, out)
            except OSError:
                shutil.copy2(w, out)
            h = hashlib.sha256(open(w, "rb").read()).hexdigest()
            lines.append(f"part{n}\t{os.path.basename(w)}\t{size}\t{h}")
        lines.append(f"# part{n} total {total} bytes ({total / 2**20:.1f} MiB), {len(members)} wheels, "
                     f"groups: {' '.join(sorted(groups))}")
    with open(manifest, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    {"list": cmd_list, "find": cmd_find, "is_pure": cmd_is_pure, "slim_sgl": cmd_slim_sgl,
     "split": cmd_split, "pack": cmd_pack}[cmd](*args)
PYEOF

helper() { "$PY" "$HELPER" "$@"; }

WITHOUT_CSV="$(IFS=,; echo "${WITHOUT[*]+"${WITHOUT[*]}"}")"
log "list: $LIST${WITHOUT_CSV:+ (without: $WITHOUT_CSV)}"
log "dest: $DEST   part limit: ${PART_MIB} MiB"
ENTRIES="$(helper list "$LIST" "$WITHOUT_CSV")" || die "could not parse $LIST"
[[ -n "$ENTRIES" ]] || die "nothing selected from $LIST"

WHEELS=()
WGROUPS=()   # group of each WHEELS entry
n_cached=0; n_downloaded=0; n_built=0
SGL_VERSION=""
while read -r name ver group; do
  if [[ "$group" == sgl_kernel ]]; then SGL_VERSION="$ver"; continue; fi
  spec="$name==$ver"
  whl="$(helper find "$CACHE" "$name" "$ver")"
  [[ -n "$whl" ]] || whl="$(helper find "$CACHE/built" "$name" "$ver")"
  if [[ -n "$whl" ]]; then
    n_cached=$((n_cached + 1))
  else
    log "downloading $spec"
    if "${PIP_DL[@]}" -d "$CACHE" "$spec"; then
      n_downloaded=$((n_downloaded + 1))
      whl="$(helper find "$CACHE" "$name" "$ver")"
    else
      log "no cp312/py3 manylinux wheel for $spec; building a wheel from its sdist"
      "$PY" -m pip wheel -q --disable-pip-version-check --no-deps --no-binary "$name" -w "$CACHE/built" "$spec" \
        || die "could not get a wheel for $spec"
      whl="$(helper find "$CACHE/built" "$name" "$ver")"
      [[ -n "$whl" ]] || die "pip built no wheel for $spec"
      if ! helper is_pure "$whl"; then
        rm -f "$whl"
        die "$spec has no wheel for the target and builds to a platform wheel here; it cannot be bundled"
      fi
      n_built=$((n_built + 1))
    fi
    [[ -n "$whl" ]] || die "pip reported success but no wheel for $spec is in $CACHE"
  fi
  WHEELS+=("$whl"); WGROUPS+=("$group")
done <<<"$ENTRIES"
log "wheels: ${#WHEELS[@]} (cached: $n_cached, downloaded: $n_downloaded, built from sdist: $n_built)"

if [[ -n "$SGL_VERSION" ]]; then
  slim="$(helper find "$CACHE/slim" sglang-kernel "$SGL_VERSION")"
  if [[ -n "$slim" ]]; then
    log "slim sglang-kernel $SGL_VERSION: cached ($(basename "$slim"))"
  else
    full="$(helper find "$CACHE/full" sglang-kernel "$SGL_VERSION")"
    if [[ -z "$full" ]]; then
      log "downloading sglang-kernel==$SGL_VERSION (large: several hundred MB)"
      "${PIP_DL[@]}" -d "$CACHE/full" "sglang-kernel==$SGL_VERSION" \
        || die "could not download sglang-kernel==$SGL_VERSION"
      full="$(helper find "$CACHE/full" sglang-kernel "$SGL_VERSION")"
      [[ -n "$full" ]] || die "sglang-kernel wheel not found in $CACHE/full after download"
    fi
    slim="$CACHE/slim/$(basename "$full")"
    log "repacking $(basename "$full") -> slim (python files + sgl_kernel/sm90)"
    helper slim_sgl "$full" "$slim" || die "repacking sglang-kernel failed"
  fi
  WHEELS+=("$slim"); WGROUPS+=(sgl_kernel)
fi

# Split wheels that do not fit in one part.
FINAL=()   # GROUP=PATH
for i in "${!WHEELS[@]}"; do
  whl="${WHEELS[i]}"; group="${WGROUPS[i]}"
  size=$(stat -c %s "$whl")
  if (( size <= PART_BYTES )); then FINAL+=("$group=$whl"); continue; fi
  sdir="$CACHE/split/$(basename "$whl" .whl)-max${PART_MIB}"
  if [[ -f "$sdir/SOURCE" && "$(cat "$sdir/SOURCE")" == "$(basename "$whl") $size" ]]; then
    log "split of $(basename "$whl"): cached"
  else
    log "splitting $(basename "$whl") ($((size / 1048576)) MiB > ${PART_MIB} MiB) into valid wheels"
    rm -rf "$sdir"
    helper split "$whl" "$sdir" "$PART_BYTES" >/dev/null || die "splitting $(basename "$whl") failed"
  fi
  while IFS= read -r p; do FINAL+=("$group=$p"); done < <(find "$sdir" -maxdepth 1 -name '*.whl' | sort)
done

log "packing ${#FINAL[@]} wheels into parts of <= ${PART_MIB} MiB"
helper pack "$DEST" "$PART_BYTES" "$DEST/MANIFEST.txt" "${FINAL[@]}" >/dev/null || die "packing failed"
echo
echo "Parts in $DEST:"
for d in "$DEST"/part*/; do
  [[ -d "$d" ]] || continue
  printf '  %-8s %3d wheels  %6.1f MiB  groups: %s\n' "$(basename "$d")" "$(find "$d" -name '*.whl' | wc -l)" \
    "$(du -b --apparent-size -c "$d"*.whl | tail -1 | awk '{print $1 / 1048576}')" \
    "$(grep "^# $(basename "$d") total" "$DEST/MANIFEST.txt" | sed 's/.*groups: //')"
done
echo "Manifest: $DEST/MANIFEST.txt"
echo "Carry each part folder (and MANIFEST.txt) to the GPU box, then run there: tools/install_gpu_bundle.sh"
