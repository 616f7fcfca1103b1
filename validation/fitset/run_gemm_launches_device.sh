#!/bin/bash
# One device call: the host profile, then the eager-GEMM fit set (gemm_launches_device.py), then
# the unseen GEMMs (kernels_unseen.py, its own script; measured before any rule was fitted).
# usage: bash validation/fitset/run_gemm_launches_device.sh OUTDIR
# Writes into OUTDIR, flat: env.txt, log.txt, host-before.yaml, gemm-launches.json, unseen.json,
# nvml_samples.json.
set -u
OUT=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/validation/unseen/device_common.sh"
# a 30 s window (the CLI default is 60): runs 21-24 (H100) and 12-13 (H200) used 0, and on two
# VMs the rounds alone caught a slow first minute (docs/kernel-conditions.md)
step python3 -m gpumodel validate --host-only --host-window 30 --host-out "$OUT/host-before.yaml"
step timeout 240 python3 "$ROOT/validation/fitset/gemm_launches_device.py" --out "$OUT/gemm-launches.json"
W=$(mktemp -d)
step timeout 200 python3 "$ROOT/validation/unseen/kernels_unseen.py" --families gemm --out "$W/k"
mv "$W/k/unseen.json" "$OUT/unseen.json"
mv "$W/k/nvml_samples.json" "$OUT/nvml_samples.json"
date -u >>"$OUT/log.txt"
