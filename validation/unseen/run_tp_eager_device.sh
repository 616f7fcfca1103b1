#!/bin/bash
# One device call on nvidia-h200-x2: Llama-3-8B hf-eager decode and prefill at tensor parallel 2
# as HF transformers shards it (multi_gpu_unseen.py --part tp-eager: the host profile first).
# MODE paired (default): each point's one-GPU twin is timed on GPU 0 right after it, in the same
# process (--paired). MODE after (run 1): the same points on one GPU afterwards
# (steps_unseen.py --part decode,prefill on GPU 0), scored with the same host profile.
# Outputs go to $1 (the device's $OUT): log.txt, the traces, tp-eager.tar.gz.
# GRID: multi_gpu_unseen.py's --grid for the tp-eager part (1: runs 1-2; 2: run 3; 3: run 4).
# usage: bash validation/unseen/run_tp_eager_device.sh OUTDIR [TOTAL_S] [MODE] [GRID]
#   (here, before the call: bash validation/park_results.sh park; after it: ... unpark)
set -u
OUT=$1
TOTAL=${2:-570}
MODE=${3:-paired}
GRID=${4:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
W=/tmp/tp_eager_work
rm -rf "$W"; mkdir -p "$W/run"
START=$SECONDS
source "$HERE/step_env.sh"  # unbuffered Python, TEARDOWN_CUPTI=1
multi_gpu_env "$W/env.txt"
python3 -m pip show accelerate transformers 2>/dev/null | grep -E "^(Name|Version)" >>"$W/env.txt"
echo "=== tp-eager (tp 2)" | tee -a "$OUT/log.txt"
if [ "$MODE" = paired ]; then
  timeout -k 10 $((TOTAL - 40)) python3 "$HERE/multi_gpu_unseen.py" --part tp-eager --paired \
    --grid "$GRID" --tag tp-eager --out "$W/run" --budget-s $((TOTAL - 120)) --rounds 4 2>&1 | tee -a "$OUT/log.txt"
else
  timeout -k 10 330 python3 "$HERE/multi_gpu_unseen.py" --part tp-eager --tag tp-eager \
    --out "$W/run" --budget-s 270 --rounds 4 2>&1 | tee -a "$OUT/log.txt"
  left=$((TOTAL - (SECONDS - START) - 25))
  echo "=== one GPU, the same points ($left s)" | tee -a "$OUT/log.txt"
  CUDA_VISIBLE_DEVICES=0 timeout -k 10 "$left" python3 "$HERE/steps_unseen.py" --part decode,prefill \
    --tag tp1-baseline --no-host --out "$W/run" --budget-s $((left - 40)) --rounds 3 2>&1 \
    | tee -a "$OUT/log.txt"
  # the one-GPU run is priced with the host profile measured first in this call
  python3 - "$W/run" <<'PY'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
f = run / "steps-tp1-baseline.json"
if f.exists() and (run / "host-tp-eager.yaml").exists():
    data = json.loads(f.read_text())
    data["host_profile"] = "host-tp-eager.yaml"
    data["host_profile_note"] = "measured by multi_gpu_unseen.py first in the same device call"
    f.write_text(json.dumps(data, indent=1))
PY
fi
mv "$W/run"/trace-*.json.gz "$OUT/" 2>/dev/null
cp "$W/env.txt" "$W/run/"
tar czf "$OUT/tp-eager.tar.gz" -C "$W/run" .
echo "done at $((SECONDS - START)) s" | tee -a "$OUT/log.txt"
ls -la "$OUT" | tee -a "$OUT/log.txt"
