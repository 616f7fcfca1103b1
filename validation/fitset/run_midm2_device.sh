#!/bin/bash
# One device call: the mid-M GEMM fit set timed in-workload and graph-replayed with its kernels'
# grids (gemm_launches_device.py --set midm2), then the unseen GEMMs (kernels_unseen.py, its own
# script) on the same VM, measured before anything is fitted to the fit set.
# usage: bash validation/fitset/run_midm2_device.sh OUTDIR
#   (here, before the call: bash validation/park_results.sh park; after it: ... unpark)
# Writes into OUTDIR, flat: env.txt, log.txt, gemm-midm2.json, unseen.json, nvml_samples.json.
set -u
OUT=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/validation/unseen/device_common.sh"
step timeout 300 python3 "$ROOT/validation/fitset/gemm_launches_device.py" --set midm2 \
  --out "$OUT/gemm-midm2.json"
W=$(mktemp -d)
step timeout 230 python3 "$ROOT/validation/unseen/kernels_unseen.py" --families gemm --out "$W/k"
mv "$W/k/unseen.json" "$OUT/unseen.json"
mv "$W/k/nvml_samples.json" "$OUT/nvml_samples.json"
date -u >>"$OUT/log.txt"
