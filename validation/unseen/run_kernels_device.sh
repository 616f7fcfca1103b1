#!/bin/bash
# One device call: unseen kernel families between two host profiles, a second copy sample, and
# validate's own host copies last (fit data for a later pool, never scored against this call).
# usage: bash validation/unseen/run_kernels_device.sh OUTDIR [FAMILIES]   (default conv2d,copy)
# Writes into OUTDIR, flat (the device returns at most 8 files): env.txt, log.txt,
# host-before.yaml, unseen.json, nvml_samples.json, unseen-copies-2.json, host-copies.json,
# host-after.yaml. kernels_unseen.py's --out is a folder; its files are moved up.
set -u
OUT=$1
FAM=${2:-conv2d,copy}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/validation/unseen/device_common.sh"
step python3 -m gpumodel validate --host-only --host-window 30 --host-out "$OUT/host-before.yaml"
W=$(mktemp -d)
step python3 "$ROOT/validation/unseen/kernels_unseen.py" --families "$FAM" --out "$W/first"
mv "$W/first/unseen.json" "$OUT/unseen.json"
mv "$W/first/nvml_samples.json" "$OUT/nvml_samples.json"
step python3 "$ROOT/validation/unseen/kernels_unseen.py" --families copy --out "$W/second"
mv "$W/second/unseen.json" "$OUT/unseen-copies-2.json"
step python3 "$ROOT/validation/experiments/host_copies_device.py" measure \
  --out "$OUT/host-copies.json"
step python3 -m gpumodel validate --host-only --host-window 0 --host-out "$OUT/host-after.yaml"
date -u >>"$OUT/log.txt"
