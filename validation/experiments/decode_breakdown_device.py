"""Device experiment: where the GPU time of a large-batch HF eager decode step goes.

Why: on every H200 run (steps-h200-run10..13) gpumodel priced the GPU-bound batch-64 decode
points of Llama-3-8B (`hf-eager`, DynamicCache, sdpa) 11-15% slow, where the H100's were within
2-6%. This script runs that step on the local GPU and sums its kernels' time by kind from one
torch.profiler trace, so the model's per-op times (`gpumodel infer ... --runtime hf-eager`) can be
set beside the card's. It imports nothing from gpumodel and fits nothing.

    python validation/experiments/decode_breakdown_device.py --out DIR [--batch 64 --context 4096]

Writes DIR/decode-breakdown.json: unprofiled step times (CUDA events, steps after warm-up), the
profiled step's kernels grouped by name, and the machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections import defaultdict
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig

    dev, dt = "cuda", torch.bfloat16
    # Meta Llama-3-8B's config.json, random weights
    cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      max_position_embeddings=8192, rms_norm_eps=1e-5,
                      rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                      tie_word_embeddings=False, attn_implementation="sdpa")  # fmt: skip
    torch.manual_seed(0)
    torch.set_default_dtype(dt)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dt)
    torch.set_default_dtype(torch.float32)
    b, ctx = a.batch, a.context
    cache = DynamicCache(config=cfg)
    for layer in range(cfg.num_hidden_layers):
        k = torch.randn(b, 8, ctx, 128, device=dev, dtype=dt)
        cache.update(k, torch.randn_like(k), layer)
        del k
    ids = torch.randint(0, cfg.vocab_size, (b, 1), device=dev)

    @torch.no_grad()
    def step() -> None:
        model(input_ids=ids, past_key_values=cache, use_cache=True)
        cache.crop(ctx)  # keep the KV length: every step is the same step

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(a.steps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        step()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e-3)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    by_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            row = by_name[ev.name[:160]]
            row[0] += 1
            row[1] += ev.time_range.elapsed_us() * 1e-6  # a kernel event: its own duration
    kernels = sorted(({"name": k, "calls": v[0], "time_s": v[1]} for k, v in by_name.items()),
                     key=lambda r: -r["time_s"])  # fmt: skip
    out = {
        "what": f"Llama-3-8B hf-eager decode, batch {b}, context {ctx}, DynamicCache, sdpa",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": torch.cuda.get_device_name(),
        "host": platform.processor() or platform.machine(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "step_s": {"median": statistics.median(times), "min": min(times), "max": max(times),
                   "n": len(times)},
        "profiled_gpu_kernel_s": sum(r["time_s"] for r in kernels),
        "kernels": kernels,
    }  # fmt: skip
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "decode-breakdown.json").write_text(json.dumps(out, indent=1))
    print(json.dumps({k: out[k] for k in ("gpu", "step_s", "profiled_gpu_kernel_s")}))
    for r in kernels[:25]:
        print(f"{r['time_s'] * 1e3:9.3f} ms {r['calls']:5d}  {r['name'][:110]}")


if __name__ == "__main__":
    main()
