#!/bin/bash
# One device call: the full `gpumodel validate` run, timed (issue 16's benchmark: under 5 minutes
# on an H100), then, in fresh processes, the unseen kernel set (validation/unseen/
# run_kernels_device.sh: convolutions and copies between two host profiles) and, with what time
# is left, the fit benchmark (serial against the machine's cores, on this run's measurements).
# usage: bash benchmarks/run_validate_full_device.sh OUTDIR [TOTAL_S]
# (here, before the call: bash validation/park_results.sh park; after it: ... unpark)
# Writes three tarballs and log.txt into OUTDIR (the device returns at most 8 files).
set -u
OUT=$1
TOTAL=${2:-585}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
START=$SECONDS
V=$(mktemp -d)
K=$(mktemp -d)
B=$(mktemp -d)
export PYTHONUNBUFFERED=1
echo "validate at $(date -u +%T)" | tee -a "$OUT/log.txt"
t0=$SECONDS
python3 -m gpumodel validate --no-host --no-progress --out "$V/calibration.yaml" --report "$V" \
  >"$V/validate-log.txt" 2>&1
echo "rc=$? wall_s=$((SECONDS - t0))" | tee "$V/time.txt" | tee -a "$OUT/log.txt"
tail -4 "$V/validate-log.txt" | tee -a "$OUT/log.txt"
tar czf "$OUT/validate.tar.gz" -C "$V" .
echo "unseen kernels at $(date -u +%T)" | tee -a "$OUT/log.txt"
timeout -k 10 $((TOTAL - (SECONDS - START) - 20)) \
  bash "$ROOT/validation/unseen/run_kernels_device.sh" "$K" conv2d,copy
tar czf "$OUT/kernels.tar.gz" -C "$K" .
left=$((TOTAL - (SECONDS - START) - 10))
if ((left > 60)); then
  echo "fit benchmark at $(date -u +%T), $left s left" | tee -a "$OUT/log.txt"
  timeout -k 5 "$left" python3 "$ROOT/benchmarks/bench_validate_fit.py" "$V/calibration.yaml" \
    --out "$B/bench-validate-fit.json" 2>&1 | tail -15 | tee -a "$OUT/log.txt"
  tar czf "$OUT/bench.tar.gz" -C "$B" .
fi
echo "done at $((SECONDS - START)) s" | tee -a "$OUT/log.txt"
