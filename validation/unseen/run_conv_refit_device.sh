#!/bin/bash
# One device call: validate's conv2d family (fit data: cudnn.benchmark on from the first
# convolution), then the unseen convolutions in a fresh process between it and nothing else
# (kernels_unseen.py shares no code with the fit; it is scored, never fitted to).
# usage: bash validation/unseen/run_conv_refit_device.sh OUTDIR
# Writes into OUTDIR, flat (the device returns at most 8 files): env.txt, log.txt,
# conv-calibration.yaml, validate-conv-report.md, host-before.yaml, unseen.json,
# nvml_samples.json.
set -u
OUT=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/validation/unseen/device_common.sh"
W=$(mktemp -d)
step python3 -m gpumodel validate --families conv2d --no-torch --no-host --no-progress \
  --out "$OUT/conv-calibration.yaml" --report "$W/rep"
mv "$W/rep/report.md" "$OUT/validate-conv-report.md"
step python3 -m gpumodel validate --host-only --host-window 20 --host-out "$OUT/host-before.yaml"
step python3 "$ROOT/validation/unseen/kernels_unseen.py" --families conv2d --out "$W/k"
mv "$W/k/unseen.json" "$OUT/unseen.json"
mv "$W/k/nvml_samples.json" "$OUT/nvml_samples.json"
date -u >>"$OUT/log.txt"
