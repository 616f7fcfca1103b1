#!/bin/bash
# One device call: the host profile and the unseen SDPA set first (scores only, measured before
# anything of this call is fitted: kernels_unseen.py shares no code with the fit; it now also
# times twelve decode calls, head dims 64-256), then the decode fit set (sdpa_decode_device.py).
# usage: bash validation/experiments/run_sdpa_decode_device.sh OUTDIR
# Writes into OUTDIR, flat: env.txt, log.txt, host-before.yaml, unseen.json, nvml_samples.json,
# sdpa-decode.json.
set -u
OUT=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/validation/unseen/device_common.sh"
unseen_sdpa 330
step timeout 200 python3 "$ROOT/validation/experiments/sdpa_decode_device.py" \
  --out "$OUT/sdpa-decode.json"
date -u >>"$OUT/log.txt"
