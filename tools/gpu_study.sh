#!/usr/bin/env bash
# Run the study on an offline GPU box that got the wheel bundle (tools/build_gpu_bundle.sh):
# installs it, runs snakemake with any extra arguments, and, when OUT is set, packs
# results/ (tables, figures, report, logs) into $OUT/results.tar.gz.
#   tools/gpu_study.sh --cores 16                  # the full study, in the foreground
#   tools/gpu_study.sh --cores 16 results/tables/sweep.csv
# A box whose commands are cut after some minutes (a lent GPU: 10 per call) runs it
# detached, one command per call:
#   tools/gpu_study.sh --detach --cores 16         # install, start Snakemake in its own
#                                                  # session, return at once
#   tools/gpu_study.sh --wait 540                  # wait up to 540 s for it to end; its state
#   OUT=/some/dir tools/gpu_study.sh --wait 540 --collect
#                                                  # the same, then pack what results/ holds
#                                                  # so far: a box given back before the next
#                                                  # call (the lent one: after 30 s idle) has
#                                                  # lost nothing that a call brought back
#   tools/gpu_study.sh --status                    # its state now: running or its exit, the
#                                                  # seconds since its start, its last lines
#   OUT=/some/dir tools/gpu_study.sh --collect     # pack results/ into $OUT/results.tar.gz;
#                                                  # over GPU_STUDY_PART_MIB (15) it is split
#                                                  # into results.tar.gz.part00, .part01, ...
#                                                  # (a lent box brings back 16 MiB a file;
#                                                  # the whole default's was 20.6 MB):
#                                                  # cat results.tar.gz.part* > results.tar.gz
# A box lost mid-run: carry the last results.tar.gz a --collect brought back to a fresh box
# (beside the repo) and go on from it:
#   tools/gpu_study.sh --resume results.tar.gz --detach --cores 16
#                                                  # unpack it (or its parts, the same name
#                                                  # with .part00, ...), then run what is
#                                                  # missing: the finished jobs' outputs stand,
#                                                  # an unfinished job resumes from its journal
# The detached run's log, start time, process id and exit status are in results/.gpu_study/.
# GPU_STUDY_INSTALLED=1 skips the bundle's install (its packages already importable);
# GPU_STUDY_INSTALL_ARGS passes options to it (--partial: a run with targets that need no
# figures or report, its report parts left behind).
set -uo pipefail
cd "$(dirname "$0")/.."
STATE=results/.gpu_study

# The journals of unfinished jobs (results/**/.*.work) come too: a machine lost mid-job
# (session 22 lost a decode job's four finished levels with theirs) leaves them here, and
# carried back to a fresh box they let the job resume where it stopped.
collect() {
  local out=${OUT:-.} part_mib=${GPU_STUDY_PART_MIB:-15}
  rm -f "$out"/results.tar.gz "$out"/results.tar.gz.part*
  tar czf "$out/results.tar.gz" --exclude=results/decode/model results \
    .snakemake/log 2>/dev/null
  if [ "$(stat -c %s "$out/results.tar.gz")" -gt $(( part_mib * 1048576 )) ]; then
    split -b "${part_mib}M" -d -a 2 "$out/results.tar.gz" "$out/results.tar.gz.part"
    rm "$out/results.tar.gz"
    echo "gpu_study: results.tar.gz split into ${part_mib}-MiB parts; to join them:" \
      "cat results.tar.gz.part* > results.tar.gz"
    ls -la "$out"/results.tar.gz.part*
  else
    ls -la "$out/results.tar.gz"
  fi
}

alive() { [ -f "$STATE/pid" ] && kill -0 "$(cat "$STATE/pid")" 2>/dev/null; }

status() {
  if [ ! -f "$STATE/started" ]; then
    echo "gpu_study: no detached run here (tools/gpu_study.sh --detach starts one)"
    return 2
  fi
  local elapsed=$(( $(date +%s) - $(cat "$STATE/started") ))
  if alive; then
    echo "gpu_study: running, ${elapsed} s since its start (pid $(cat "$STATE/pid"))"
  elif [ -f "$STATE/rc" ]; then
    echo "gpu_study: ended, snakemake exit $(cat "$STATE/rc")"
  else
    echo "gpu_study: gone without an exit status (killed?), ${elapsed} s since its start"
  fi
  tail -n "${GPU_STUDY_LINES:-15}" "$STATE/run.log"
  if alive; then return 3; fi
  [ -f "$STATE/rc" ] && return "$(cat "$STATE/rc")"
  return 1
}

case "${1:-}" in
  --status) status; exit $? ;;
  --collect) collect; exit $? ;;
  --wait)
    limit=${2:?"usage: tools/gpu_study.sh --wait SECONDS [--collect]"}
    end=$(( $(date +%s) + limit ))
    while alive && [ "$(date +%s)" -lt "$end" ]; do sleep 2; done
    status
    rc=$?
    # A box with no detached run (status 2) is a fresh one: nothing of the run is here.
    if [ "${3:-}" = "--collect" ] && [ "$rc" != 2 ]; then collect; fi
    exit $rc ;;
esac

resume=0
if [ "${1:-}" = "--resume" ]; then
  archive=${2:-}
  if [ -n "$archive" ] && [ ! -f "$archive" ] && [ -f "$archive.part00" ]; then
    cat "$archive".part* > "$archive"  # the parts a --collect split it into
  fi
  if [ -z "$archive" ] || [ ! -f "$archive" ]; then
    echo "gpu_study: --resume needs the results.tar.gz a --collect wrote (got '${archive}')" >&2
    exit 2
  fi
  if alive; then
    echo "gpu_study: a detached run is still going (pid $(cat "$STATE/pid")): --status, --wait" >&2
    exit 2
  fi
  if ! tar xzf "$archive"; then
    echo "gpu_study: --resume: $archive is not a results archive of --collect" >&2
    exit 2
  fi
  # The lost box's own run state (its pid, start and exit) is not this box's; its log stays.
  [ -f "$STATE/run.log" ] && mv "$STATE/run.log" results/gpu_study_before_resume.log
  rm -rf "$STATE"
  resume=1
  shift 2
fi

detach=0
if [ "${1:-}" = "--detach" ]; then
  detach=1
  shift
  if alive; then
    echo "gpu_study: a detached run is still going (pid $(cat "$STATE/pid")): --status, --wait" >&2
    exit 2
  fi
fi
if [ "$resume" = 1 ]; then
  # No Snakemake metadata comes with the archive: with its default triggers Snakemake reran
  # finished jobs as if their code had changed (the FlashInfer sweep, peaks and hardware, in
  # a dry run of the 2026-12-04 run's archive); by modification times alone, only what is
  # missing (or older than its inputs) runs.
  set -- --rerun-triggers mtime "$@"
fi
if [ "${GPU_STUDY_INSTALLED:-0}" != 1 ]; then
  # GPU_STUDY_INSTALL_ARGS: the installer's own options, e.g. --partial for a run that
  # needs no figures or report and so left the bundle's report parts behind.
  # shellcheck source=/dev/null,disable=SC2086
  source tools/install_gpu_bundle.sh --no-smoke ${GPU_STUDY_INSTALL_ARGS:-} || {
    echo "gpu_study: the bundle did not install (above); nothing started" >&2
    exit 1
  }
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv 2>/dev/null

if [ "$detach" = 1 ]; then
  mkdir -p "$STATE"
  rm -f "$STATE/rc"
  date +%s > "$STATE/started"
  # Its own session: the command that started it may end (and its group be killed) at once.
  echo "$$" > "$STATE/pid"
  setsid nohup bash -c '
    echo "$$" > "'"$STATE"'/pid"
    start=$(date +%s)
    snakemake "$@"
    rc=$?
    echo "snakemake exit $rc after $(( $(date +%s) - start )) s"
    echo "$rc" > "'"$STATE"'/rc"
  ' gpu_study "$@" > "$STATE/run.log" 2>&1 < /dev/null &
  for _ in $(seq 50); do  # until the detached shell has written its own pid
    [ "$(cat "$STATE/pid")" != "$$" ] && break
    sleep 0.1
  done
  echo "gpu_study: snakemake $* started detached (pid $(cat "$STATE/pid")); its log: $STATE/run.log"
  exit 0
fi

start=$(date +%s)
snakemake "$@"
status=$?
echo "snakemake exit $status after $(( $(date +%s) - start )) s"
if [ -n "${OUT:-}" ]; then
  collect
fi
exit $status
