#!/bin/bash
# One device call: the fit set of the strided elementwise families first (`gpumodel validate
# --families strided_elementwise`: casts, broadcasts and rotate_half's cat, PyTorch's
# non-vectorised kernels), then unseen whole steps (`steps_unseen.py`, which shares no code with
# the fit): HF Llama-3-8B eager prefill and the two HF training steps, each in its own process
# with its own host profile. Nothing of this call is fitted before the steps are measured.
# usage: bash validation/fitset/run_strided_device.sh OUTDIR [TOTAL_S]
# Writes into OUTDIR, flat (the device returns at most 8 files): log.txt,
# validate-strided.yaml, validate-strided-report.md, prefill.tar.gz, train.tar.gz and the
# profiler traces the steps recorded (trace-*.json.gz; env.txt is inside the tarballs).
set -u
OUT=$1
TOTAL=${2:-560}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
START=$SECONDS
source "$ROOT/validation/unseen/device_common.sh"
W=$(mktemp -d)
mv "$OUT/env.txt" "$W/env.txt"
step timeout 120 python3 -m gpumodel validate --families strided_elementwise --no-host \
  --no-torch --no-progress --out "$OUT/validate-strided.yaml" --report "$W/r"
mv "$W/r/report.md" "$OUT/validate-strided-report.md"
steps() {  # name, parts, seconds (capped by what is left), host window seconds
  local name=$1 parts=$2 secs=$3 window=$4
  local left=$((TOTAL - (SECONDS - START)))
  ((secs > left)) && secs=$left
  if ((secs < 60)); then echo "skip $name: $left s left" | tee -a "$OUT/log.txt"; return; fi
  mkdir -p "$W/$name"
  echo "=== $name ($parts) budget $secs s at $((SECONDS - START)) s" | tee -a "$OUT/log.txt"
  timeout -k 10 "$secs" python3 "$ROOT/validation/unseen/steps_unseen.py" --part "$parts" \
    --tag "$name" --budget-s $((secs - 25)) --host-window "$window" --out "$W/$name" 2>&1 |
    tail -40 >>"$OUT/log.txt"
  mv "$W/$name"/trace-*.json.gz "$OUT/" 2>/dev/null
  cp "$W/env.txt" "$W/$name/"
  tar czf "$OUT/$name.tar.gz" -C "$W/$name" .
}
steps prefill prefill 190 30
steps train train 230 30
echo "done at $((SECONDS - START)) s" | tee -a "$OUT/log.txt"
