#!/bin/bash
# One device call on a multi-GPU machine (nvidia-h200-x2): the unseen multi-GPU whole steps
# (multi_gpu_unseen.py: host profile, tensor-parallel fused-graph decode, DDP training), then the
# in-graph collective timing (validation/experiments/nccl_graph_device.py) on the same machine.
# Outputs go to $1 (the device's $OUT) as at most 8 files: log.txt, the traces, one tarball of
# the results, nccl-graph.json.
# usage: bash validation/unseen/run_multi_gpu_device.sh OUTDIR [TOTAL_S] [GRID] [PARTS]
#   (here, before the call: bash validation/park_results.sh park; after it: ... unpark)
set -u
OUT=$1
TOTAL=${2:-540}
GRID=${3:-1}
PARTS=${4:-tp-decode,ddp-train}
HERE=$(cd "$(dirname "$0")" && pwd)
W=/tmp/multi_gpu_work
rm -rf "$W"; mkdir -p "$W"
START=$SECONDS
source "$HERE/step_env.sh"  # unbuffered Python, TEARDOWN_CUPTI=1
multi_gpu_env "$W/env.txt"
BUDGET=$((TOTAL - 140))
echo "=== multi-gpu (budget $BUDGET s)" | tee -a "$OUT/log.txt"
timeout -k 10 $((BUDGET + 60)) python3 "$HERE/multi_gpu_unseen.py" --out "$W/run" \
  --budget-s $((BUDGET - 90)) --rounds 4 --grid "$GRID" --part "$PARTS" 2>&1 | tee -a "$OUT/log.txt"
mv "$W/run"/trace-*.json.gz "$OUT/" 2>/dev/null
cp "$W/env.txt" "$W/run/"
tar czf "$OUT/multi-gpu.tar.gz" -C "$W/run" .
left=$((TOTAL - (SECONDS - START)))
if ((left > 50)); then
  echo "=== nccl graph at $((SECONDS - START)) s" | tee -a "$OUT/log.txt"
  (cd "$HERE/../experiments" && timeout -k 5 $((left - 15)) python3 nccl_graph_device.py \
    --out "$OUT/nccl-graph.json" 2>&1 | tail -5 | tee -a "$OUT/log.txt")
fi
echo "done at $((SECONDS - START)) s" | tee -a "$OUT/log.txt"
ls -la "$OUT" | tee -a "$OUT/log.txt"
