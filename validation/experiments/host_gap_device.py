"""Why does a real Llama-3-8B eager decode step cost the host more than small Llamas say?

The host profile (``gpumodel validate --host-only``) times two small HF Llama models (hidden
1024, 8 x 128 heads, 2 KV heads, batch 1, a 128-token cache cut back after each call) and
prices a decode step as their intercept + slope x 32 layers. On every run the real 8B step
took 20-30% more host time than that (validation/results/steps-h200-run6). This times, in one
process and interleaved rounds, the host seconds per decode forward (perf_counter around
back-to-back calls, no sync inside) of HF Llama models that differ from the small ones in one
thing at a time:

    width   small (hidden 1024, ffn 2816, 8/2 heads) or 8b (hidden 4096, ffn 14336, 32/8 heads)
    layers  2 and 10 (slope and intercept), and the full 32-layer 8B
    cache   crop (same length every call) or grow (one longer every call, as a real decode)
    shape   batch 1 x context 128, batch 8 x context 2048

plus the GPU time of the same calls (CUDA events) to show each is host-bound. Only reads.

    python3 validation/experiments/host_gap_device.py --out host-gap.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

WIDTHS = {
    "small": dict(hidden_size=1024, intermediate_size=2816, num_attention_heads=8,
                  num_key_value_heads=2, vocab_size=1000),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256),
}  # fmt: skip


def build(torch, width: str, layers: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**WIDTHS[width], head_dim=128, num_hidden_layers=layers,
                      attn_implementation="sdpa")  # fmt: skip
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    return cfg, model.eval()


def make_case(torch, cfg, model, batch: int, ctx: int, grow: bool):
    from transformers import DynamicCache

    cache = DynamicCache(config=cfg)
    shape = (batch, cfg.num_key_value_heads, ctx, 128)
    for i in range(cfg.num_hidden_layers):
        cache.update(torch.randn(*shape, device="cuda", dtype=torch.bfloat16),
                     torch.randn(*shape, device="cuda", dtype=torch.bfloat16), i)  # fmt: skip
    ids = torch.randint(0, cfg.vocab_size, (batch, 1), device="cuda")

    @torch.no_grad()
    def call() -> None:
        model(input_ids=ids, past_key_values=cache, use_cache=True)
        if not grow:
            cache.crop(-1)

    return call


def warm_8b_step(torch, batch: int, ctx: int, warm: int = 5):
    """The full 32-layer Llama-3-8B width's decode call (cache cut back after each call),
    called ``warm`` times and synchronised: what the host experiments time."""
    cfg, model = build(torch, "8b", 32)
    step = make_case(torch, cfg, model, batch, ctx, grow=False)
    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    return step


def sample(torch, fn, calls: int) -> tuple[float, float]:
    """(host seconds per call, GPU-event seconds per call) over ``calls`` back-to-back calls."""
    torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    b.record()
    torch.cuda.synchronize()
    return (t1 - t0) / calls, a.elapsed_time(b) / 1e3 / calls


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()
    import torch
    import transformers

    cases = {}
    models = {}
    for width in ("small", "8b"):
        for layers in (2, 10):
            models[(width, layers)] = build(torch, width, layers)
    models[("8b", 32)] = build(torch, "8b", 32)
    for (width, layers), (cfg, model) in models.items():
        shapes = [(1, 128), (8, 2048)]
        for batch, ctx in shapes:
            for grow in (False, True):
                if layers == 32 and not grow and batch == 1:
                    continue
                key = f"{width} L{layers} b{batch} ctx{ctx} {'grow' if grow else 'crop'}"
                cases[key] = make_case(torch, cfg, model, batch, ctx, grow)
    for fn in cases.values():  # warm: cuDNN plans, cuBLAS heuristics, allocator
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    t_start = time.perf_counter()
    for _ in range(args.rounds):
        for key, fn in cases.items():
            samples[key].append(sample(torch, fn, args.calls))
    result = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name(),
        "rounds": args.rounds,
        "calls_per_sample": args.calls,
        "seconds": round(time.perf_counter() - t_start, 1),
        "cases": {},
    }
    for key, s in samples.items():
        host = [h for h, _ in s]
        gpu = [g for _, g in s]
        result["cases"][key] = {
            "host_s_median": statistics.median(host),
            "host_s_min": min(host),
            "host_s_max": max(host),
            "gpu_event_s_median": statistics.median(gpu),
            "host_s_samples": host,
        }
        print(f"{key:34s} host {statistics.median(host) * 1e3:8.3f} ms "
              f"[{min(host) * 1e3:.3f}-{max(host) * 1e3:.3f}]  events "
              f"{statistics.median(gpu) * 1e3:8.3f} ms")  # fmt: skip
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
