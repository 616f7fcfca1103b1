"""The kernels of an HF step into a StaticCache, against the same step into a DynamicCache.

Experiment for the `hf-static-compiled` runtime's prefill (HF runs it uncompiled): its kernel
list had been checked against decode traces only. The model priced the prefill's attention as
SDPA with the StaticCache's explicit mask over the whole cache (every key block computed, on
repeat_kv'd K/V), 7.2 ms of a Llama-3-8B batch 1 x 2048 prefill where the DynamicCache's causal
attention is 2.7 ms; the unseen static prefills ran within 1-2% of the eager ones. Shapes of its
own (none of the unseen grids'): Llama-3-8B, random weights, bf16, sdpa, prefills of batch
2 x 1024 and 1 x 1536, the cache 64 positions longer than the prompt (as the unseen harness
allocates), and one eager (uncompiled) decode step at batch 4 after 1536 positions.

For each step and cache: the step time (CUDA events, median of 10 after 3 warm-ups) and one
step under torch.profiler: every CUDA kernel's name, count and total GPU time, the attention
kernels (names holding "attention", "flash", "fmha" or "sdpa") apart, and the host ops that say
which SDPA backend ran and whether repeat_kv copied K/V (``aten::clone``). Never scored against.

usage: python3 static_prefill_trace_device.py --out FILE.json [--tiny]
(run 1, 2026-11-30, ``static-prefill-trace.json``: the prefills only, an earlier version of this
script; run 2, ``static-cache-trace.json``: this version)
"""

from __future__ import annotations

import argparse
import json
import statistics

from graph_attention_device import write_json  # this folder (the script's own, on sys.path)

SHAPES = ((2, 1024), (1, 1536))
DECODE_SHAPES = ((4, 1536),)
ROOM = 64
ATTENTION_MARKERS = ("attention", "flash", "fmha", "sdpa", "cudnn")
HOST_OPS = ("aten::expand", "aten::clone", "aten::reshape", "aten::index_copy_", "aten::cat")


def llama_config(tiny: bool):
    from transformers import LlamaConfig

    # Meta Llama-3-8B config.json: hidden 4096, 32 layers, 32 heads, 8 kv heads, ffn 14336,
    # vocab 128256, rope theta 500000
    dims = (dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=512) if tiny
            else dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256))  # fmt: skip
    return LlamaConfig(**dims, rope_theta=500000.0, max_position_embeddings=8192,
                       attn_implementation="sdpa")  # fmt: skip


def kernel_table(prof) -> list[dict]:
    """CUDA kernels of one profiled step: name, count, total us (largest first)."""
    rows: dict[str, list[float]] = {}
    for ev in prof.events():
        if ev.device_type.name != "CUDA":
            continue
        rows.setdefault(ev.name, []).append(ev.device_time)
    table = [{"name": n, "count": len(v), "total_us": sum(v)} for n, v in rows.items()]
    return sorted(table, key=lambda r: -r["total_us"])


def attention_ops(prof) -> dict[str, int]:
    """Counts of the host ops that show how SDPA ran: which backend, and repeat_kv's copies."""
    counts: dict[str, int] = {}
    for ev in prof.events():
        name = ev.name
        if "scaled_dot_product" in name or name in HOST_OPS:
            counts[name] = counts.get(name, 0) + 1
    return counts


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoModelForCausalLM, DynamicCache, StaticCache

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    dev, dtype = ("cuda", torch.bfloat16) if torch.cuda.is_available() else ("cpu", torch.float32)
    cfg = llama_config(args.tiny)
    torch.manual_seed(0)
    torch.set_default_dtype(dtype)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    layers, kvh = cfg.num_hidden_layers, cfg.num_key_value_heads
    hd = cfg.hidden_size // cfg.num_attention_heads
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if dev == "cuda"
           else "cpu", "layers": layers, "points": []}  # fmt: skip
    import transformers

    out["transformers"] = transformers.__version__
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])

    @torch.no_grad()
    def measure(step, **labels) -> None:
        """Time ``step`` (CUDA events, median of 10 after 3 warm-ups), profile one more."""
        for _ in range(3):
            step()
        sync()
        times = []
        for _ in range(10 if dev == "cuda" else 2):
            if dev == "cuda":
                a, e = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                a.record()
                step()
                e.record()
                sync()
                times.append(a.elapsed_time(e) / 1e3)
            else:
                step()
        with profile(activities=acts) as prof:
            step()
            sync()
        table = kernel_table(prof)
        attn = [r for r in table if any(m in r["name"].lower() for m in ATTENTION_MARKERS)]
        point = {**labels, "step_s_median": statistics.median(times) if times else None,
                 "kernels_per_step": sum(r["count"] for r in table),
                 "gpu_us_per_step": sum(r["total_us"] for r in table),
                 "attention": attn, "host_ops": attention_ops(prof),
                 "kernels": table[:40]}  # fmt: skip
        out["points"].append(point)
        print(json.dumps({k: v for k, v in point.items() if k not in ("attention", "kernels")}))
        for r in attn:
            print("   ", r["count"], round(r["total_us"], 1), r["name"][:150])

    def static_cache(b: int, length: int):
        cache = StaticCache(config=cfg, max_cache_len=length + ROOM)
        cache.early_initialization(batch_size=b, num_heads=kvh, head_dim=hd, dtype=dtype,
                                   device=torch.device(dev))  # fmt: skip
        return cache

    def rewind(cache, length: int) -> None:
        for layer in cache.layers:
            layer.cumulative_length.fill_(length)

    for b, s in SHAPES:  # the prompt into an empty cache
        ids = torch.randint(0, cfg.vocab_size, (b, s), device=dev)
        cache = static_cache(b, s)

        def static_prefill(cache=cache, ids=ids):
            rewind(cache, 0)
            model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)

        def dynamic_prefill(ids=ids):
            model(input_ids=ids, past_key_values=DynamicCache(config=cfg), use_cache=True,
                  logits_to_keep=1)  # fmt: skip

        measure(static_prefill, phase="prefill", batch=b, seq=s, cache="static")
        measure(dynamic_prefill, phase="prefill", batch=b, seq=s, cache="dynamic")
    for b, ctx in DECODE_SHAPES:  # one token after ``ctx``, eagerly (no torch.compile)
        prompt = torch.randint(0, cfg.vocab_size, (b, ctx), device=dev)
        token = torch.randint(0, cfg.vocab_size, (b, 1), device=dev)
        cache = static_cache(b, ctx)
        dynamic = DynamicCache(config=cfg)
        with torch.no_grad():
            model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
            model(input_ids=prompt, past_key_values=dynamic, use_cache=True, logits_to_keep=1)

        def static_decode(cache=cache, token=token, ctx=ctx):
            rewind(cache, ctx)
            model(input_ids=token, past_key_values=cache, use_cache=True,
                  cache_position=torch.full((1,), ctx, device=dev))  # fmt: skip

        def dynamic_decode(cache=dynamic, token=token, ctx=ctx):
            extra = cache.get_seq_length() - ctx  # drop the last step's token (negative:
            if extra > 0:  # a count to remove, in every transformers version)
                cache.crop(-extra)
            model(input_ids=token, past_key_values=cache, use_cache=True)

        measure(static_decode, phase="decode", batch=b, context=ctx, cache="static")
        measure(dynamic_decode, phase="decode", batch=b, context=ctx, cache="dynamic")
    write_json(args.out, out)


if __name__ == "__main__":
    main()
