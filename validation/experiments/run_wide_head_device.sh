#!/bin/bash
# One device call: the host profile and the unseen SDPA set first (scores only, measured before
# anything of this call is fitted: kernels_unseen.py shares no code with the fit; it now also
# times the backward of seven training shapes, head dims 64-256), then the wide-head fit set
# (sdpa_wide_head_device.py).
# usage: bash validation/experiments/run_wide_head_device.sh OUTDIR
# Writes into OUTDIR, flat: env.txt, log.txt, host-before.yaml, unseen.json, nvml_samples.json,
# sdpa-wide-head.json.
set -u
OUT=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/validation/unseen/device_common.sh"
unseen_sdpa 260
step timeout 200 python3 "$ROOT/validation/experiments/sdpa_wide_head_device.py" \
  --out "$OUT/sdpa-wide-head.json"
date -u >>"$OUT/log.txt"
