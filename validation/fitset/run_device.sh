#!/bin/bash
# One device call: the training-step fit set with the host profile measured in the same call
# (each in its own process, TEARDOWN_CUPTI=1 as the clean 2026-11-25 set), then, in the time
# left, the unseen training steps (validation/unseen/steps_unseen.py --part train, its own
# processes and host profile; scored apart, never fitted to). Writes at most 4 files to $1:
# log.txt, fitset.tar.gz (train-fitset.json, summary.md, host.yaml, host.log, env.txt) and
# train.tar.gz + the unseen part's trace (the device returns at most 8 files from $OUT).
# usage: bash validation/fitset/run_device.sh OUTDIR [TOTAL_S]
#   (here, before the call: bash validation/park_results.sh park; after it: ... unpark)
set -u
OUT=$1
TOTAL=${2:-560}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
W=/tmp/fitset_work
rm -rf "$W"; mkdir -p "$W/fit" "$W/train"
START=$SECONDS
source "$ROOT/validation/unseen/step_env.sh"  # also sets TEARDOWN_CUPTI=1 (why: there)
step_env "$W/fit/env.txt"

echo "=== host profile at $((SECONDS - START)) s" | tee -a "$OUT/log.txt"
timeout -k 10 170 python3 -m gpumodel validate --host-only --host-window 30 --no-progress \
  --host-out "$W/fit/host.yaml" >"$W/fit/host.log" 2>&1
tail -12 "$W/fit/host.log" >>"$OUT/log.txt"

FIT=$((TOTAL - (SECONDS - START) - 200))  # leave 200 s for the unseen training part
((FIT > 300)) && FIT=300
echo "=== fit set, budget $FIT s at $((SECONDS - START)) s" | tee -a "$OUT/log.txt"
timeout -k 10 $((FIT + 20)) python3 "$HERE/train_fitset.py" --out "$W/fit" --budget-s "$FIT" \
  >>"$OUT/log.txt" 2>&1
rm -f "$W/fit"/traces-*.tar  # the kernel counts come from the committed 2026-11-24 traces
tar czf "$OUT/fitset.tar.gz" -C "$W/fit" .

LEFT=$((TOTAL - (SECONDS - START)))
if ((LEFT >= 120)); then
  echo "=== unseen training steps, budget $LEFT s at $((SECONDS - START)) s" | tee -a "$OUT/log.txt"
  timeout -k 10 "$LEFT" python3 "$ROOT/validation/unseen/steps_unseen.py" --part train \
    --tag train --budget-s $((LEFT - 25)) --host-window 30 --out "$W/train" >>"$OUT/log.txt" 2>&1
  mv "$W/train"/trace-*.json.gz "$OUT/" 2>/dev/null
  cp "$W/fit/env.txt" "$W/train/"
  tar czf "$OUT/train.tar.gz" -C "$W/train" .
else
  echo "skip unseen training steps: $LEFT s left" | tee -a "$OUT/log.txt"
fi
echo "done at $((SECONDS - START)) s" | tee -a "$OUT/log.txt"
ls -la "$OUT" | tee -a "$OUT/log.txt"
