#!/bin/bash
# One device call: the host profile and the unseen SDPA set first (scores only, measured before
# anything of this call is fitted: kernels_unseen.py shares no code with the fit), then the fit
# set: `gpumodel validate --families attention` (flash, cuDNN, memory-efficient and math
# backends; head dims 128 and 64), whose calibration carries its measurements for the refit.
# usage: bash validation/fitset/run_attention_device.sh OUTDIR
# Writes into OUTDIR, flat: env.txt, log.txt, host-before.yaml, unseen.json, nvml_samples.json,
# validate-attention.yaml, validate-attention-report.md.
set -u
OUT=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/validation/unseen/device_common.sh"
unseen_sdpa 200
W=$(mktemp -d)
step timeout 220 python3 -m gpumodel validate --families attention --no-host --no-torch \
  --no-progress --out "$OUT/validate-attention.yaml" --report "$W/r"
mv "$W/r/report.md" "$OUT/validate-attention-report.md"
date -u >>"$OUT/log.txt"
