#!/usr/bin/env bash
# Run the study on an offline GPU box that got the wheel bundle (tools/build_gpu_bundle.sh):
# installs it, runs snakemake with any extra arguments, and, when OUT is set, packs
# results/ (tables, figures, report, logs) into $OUT/results.tar.gz.
#   tools/gpu_study.sh --cores 16                  # the full study
#   tools/gpu_study.sh --cores 16 results/tables/sweep.csv
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=/dev/null
source tools/install_gpu_bundle.sh --no-smoke || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv
start=$(date +%s)
snakemake "$@"
status=$?
echo "snakemake exit $status after $(( $(date +%s) - start )) s"
if [ -n "${OUT:-}" ]; then
  tar czf "$OUT/results.tar.gz" --exclude="*.work" --exclude=results/decode/model results .snakemake/log 2>/dev/null
  ls -la "$OUT"
fi
exit $status
