#!/bin/bash
# One device call: host profile + unseen whole-step workloads, each part in its own process
# (each process measures the host first), all inside ~570 s. Outputs go to $1 (the device's $OUT)
# as at most 8 files: log.txt, 4 gzipped traces, 3 tarballs (results JSON, host YAML, summary).
# The device returns at most 8 files from $OUT: write nothing else there.
# usage: bash validation/unseen/run_device.sh OUTDIR [TOTAL_S] [all|static|fused|train-fused|arch|padded|families|families2|families3|family-train|moe|moe2|moe3|moe4|moe-qwen|moe-train|moe-train2|moe-train3|moe-train4|train-fp32|train-fp32-2|graph2|graph2-static|grid3-static|grid4-static]
#   (here, before the call: bash validation/park_results.sh park; after it: ... unpark)
#   static: only the hf-static-compiled part, with its wide grid (6 compiled decode points and
#   4 prefill points; each compile takes ~35 s, too many to share a call with the other parts)
#   fused: only the fused-graph decode part (fused_engine.py, a vLLM-style stand-in)
#   train-fused: the training part, then the fused-graph part (~350 s)
#   arch: other architectures (Llama-2-7B decode, prefill, bf16 training; Mistral-7B decode,
#   prefill), ~300 s
#   padded: Llama-3-8B eager decode and prefill of left-padded batches (an explicit mask)
#   families: Qwen2.5-7B, Qwen3-8B, Phi-3-mini eager decode and prefill, ~230 s
#   families2, families3: the same models at run 2's / run 3's points (--families-grid 2 / 3)
#   family-train: Qwen3-0.6B amp/bf16 and Phi-3-mini bf16 training, Qwen3-8B hf-static-compiled
#   train-fp32: GPT-2 small and the 1.1B model trained in fp32 (no autocast), TF32 off and on
#   moe: Mixtral-8x7B and Qwen3-30B-A3B eager decode and prefill, grouped_mm and loop experts
#   moe-qwen: the moe part's Qwen3-30B-A3B alone; moe2..moe4: run 2's..run 4's points
#   moe-train: small MoE training steps (Qwen3-MoE 1.9B amp/bf16, Mixtral-layout 3.6B bf16/amp),
#   then hf-static-compiled decode of Qwen3-30B-A3B and Mixtral-8x7B; moe-train2..4: run 2's..4's points
#   graph2: hf-static-compiled decode (4 points, traced at 16 x 1024), then fused-graph decode
#   (8 points, traced at 16 x 3072): graph-replayed traces and the points to score them on;
#   graph2-static: its static part alone, with the whole call's time for the compiles
#   grid3-static: five new hf-static-compiled decode points (2026-11-30), nothing traced
#   grid4-static: four more (2026-11-30, written before the repeat_kv copy-rate change)
set -u
OUT=$1
TOTAL=${2:-570}
PLAN=${3:-all}
HERE=$(cd "$(dirname "$0")" && pwd)
S=$HERE/steps_unseen.py
W=/tmp/steps_work
rm -rf "$W"; mkdir -p "$W"
START=$SECONDS
source "$HERE/step_env.sh"  # also sets TEARDOWN_CUPTI=1 (why: there)
step_env "$W/env.txt"

part() {  # name, parts, seconds, host window seconds
  local name=$1 parts=$2 secs=$3 window=$4 extra=${5:-}
  local left=$((TOTAL - (SECONDS - START)))
  ((secs > left)) && secs=$left
  if ((secs < 60)); then echo "skip $name: $left s left" | tee -a "$OUT/log.txt"; return; fi
  mkdir -p "$W/$name"
  echo "=== $name ($parts) budget $secs s at $((SECONDS - START)) s" | tee -a "$OUT/log.txt"
  timeout -k 10 "$secs" python3 "$S" --part "$parts" --tag "$name" --budget-s $((secs - 25)) \
    --host-window "$window" --out "$W/$name" $extra 2>&1 | tee -a "$OUT/log.txt"
  mv "$W/$name"/trace-*.json.gz "$OUT/" 2>/dev/null
  cp "$W/env.txt" "$W/$name/"
  tar czf "$OUT/$name.tar.gz" -C "$W/$name" .
}

# the host profile samples the host's speed for a window after its rounds (validate
# --host-window): 60 s before the eager decode/prefill points, whose host time it prices
# most; 30 s before the others, to stay inside one device call
if [ "$PLAN" = static ]; then
  part static static $((TOTAL - 20)) 60 "--static-grid wide --rounds 5"
elif [ "$PLAN" = fused ]; then
  part fused fused $((TOTAL - 20)) 30
elif [ "$PLAN" = arch ]; then
  part arch arch $((TOTAL - 20)) 60
elif [ "$PLAN" = padded ]; then
  part padded padded $((TOTAL - 20)) 60
elif [ "$PLAN" = families ]; then
  part families families $((TOTAL - 20)) 60
elif [[ $PLAN =~ ^families[23]$ ]]; then
  part families families $((TOTAL - 20)) 60 "--families-grid ${PLAN#families}"
elif [ "$PLAN" = moe ]; then
  part moe moe $((TOTAL - 20)) 60
elif [[ $PLAN =~ ^moe[234]$ ]]; then
  part moe moe $((TOTAL - 20)) 60 "--moe-grid ${PLAN#moe}"
elif [ "$PLAN" = moe-qwen ]; then
  part moe moe $((TOTAL - 20)) 60 "--moe-models qwen3-30b-a3b"
elif [ "$PLAN" = moe-train ]; then
  part moe-train moe-train $((TOTAL - 20)) 30
elif [[ $PLAN =~ ^moe-train[234]$ ]]; then
  part moe-train moe-train $((TOTAL - 20)) 30 "--moe-grid ${PLAN#moe-train}"
elif [ "$PLAN" = family-train ]; then
  part family-train family-train $((TOTAL - 20)) 30
elif [ "$PLAN" = train-fp32 ]; then  # 2026-11-30: fp32 training, TF32 off and on
  part train-fp32 train-fp32 $((TOTAL - 20)) 30
elif [ "$PLAN" = train-fp32-2 ]; then  # its second grid, after the fp32 policy's model
  part train-fp32 train-fp32 $((TOTAL - 20)) 30 "--fp32-grid 2"
elif [ "$PLAN" = graph2 ]; then
  part static static 300 30 "--static-grid graph2"
  part fused fused $((TOTAL - 20 - (SECONDS - START))) 30 "--fused-grid 2"
elif [ "$PLAN" = grid3-static ]; then  # 2026-11-30: five new compiled decode points
  part static static $((TOTAL - 20)) 30 "--static-grid grid3 --rounds 4"
elif [ "$PLAN" = grid4-static ]; then  # 2026-11-30: four more compiled decode points
  part static static $((TOTAL - 20)) 30 "--static-grid grid4 --rounds 4"
elif [ "$PLAN" = graph2-static ]; then  # graph2's run 1 compiled one static point in 300 s
  part static static $((TOTAL - 20)) 30 "--static-grid graph2"
elif [ "$PLAN" = train-fused ]; then
  part train train 200 30
  part fused fused $((TOTAL - 20 - (SECONDS - START))) 30
else
  part llama-eager decode,prefill 250 60
  part train train 200 30
  part static static 400 30
fi
echo "done at $((SECONDS - START)) s" | tee -a "$OUT/log.txt"
ls -la "$OUT" | tee -a "$OUT/log.txt"
