#!/bin/bash
# One device call: the host profile and the unseen GEMMs and convolutions first (scores only,
# measured before anything of this call is fitted), then two fit sets: the conditions run
# (gpumodel.validate.conditions: back-to-back GEMMs of every tensor-core dtype, for the
# per-dtype power of the sustained clock) and the odd-vocabulary LM heads
# (gemm_launches_device.py --set lmhead).
# usage: bash validation/fitset/run_power_lmhead_device.sh OUTDIR
# Writes into OUTDIR, flat: env.txt, log.txt, host-before.yaml, unseen.json, nvml_samples.json,
# conditions-measurements.json, gemm-lmhead.json.
set -u
OUT=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/validation/unseen/device_common.sh"
step python3 -m gpumodel validate --host-only --host-window 30 --host-out "$OUT/host-before.yaml"
W=$(mktemp -d)
step timeout 200 python3 "$ROOT/validation/unseen/kernels_unseen.py" --families gemm,conv2d --out "$W/k"
mv "$W/k/unseen.json" "$OUT/unseen.json"
mv "$W/k/nvml_samples.json" "$OUT/nvml_samples.json"
step timeout 170 python3 -m gpumodel.validate.conditions --out "$OUT/conditions-measurements.json"
step timeout 100 python3 "$ROOT/validation/fitset/gemm_launches_device.py" --set lmhead --out "$OUT/gemm-lmhead.json"
date -u >>"$OUT/log.txt"
