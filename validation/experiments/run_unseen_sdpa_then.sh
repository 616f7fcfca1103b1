#!/bin/bash
# One device call: the host profile and the unseen SDPA grid first (scores only, measured before
# anything of this call is fitted: kernels_unseen.py shares no code with the fit), then one
# fit-set experiment of validation/experiments.
# usage: bash validation/experiments/run_unseen_sdpa_then.sh OUTDIR GRID_SECONDS EXPERIMENT.py OUT.json
# Writes into OUTDIR, flat: env.txt, log.txt, host-before.yaml, unseen.json, nvml_samples.json,
# OUT.json.
set -u
OUT=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/validation/unseen/device_common.sh"
unseen_sdpa "$2"
step timeout 200 python3 "$ROOT/validation/experiments/$3" --out "$OUT/$4"
date -u >>"$OUT/log.txt"
