"""Kernels of one ``hf-static-compiled`` decode step on the GPU, per decoder layer and per step,
from torch.profiler traces (issue 17, item 2: each runtime's kernel list checked on the device).

HF Llama with Llama-3-8B's widths (hidden 4096, 32 query and 8 KV heads, MLP 14336, vocabulary
128256), random bf16 weights, a ``StaticCache`` filled to ``context`` and
``torch.compile(model.forward, mode="reduce-overhead", dynamic=False)`` (the call the unseen-set
script times, validation/unseen/steps_unseen.py). Models of 1 and 2 decoder layers: per layer =
2-layer count minus 1-layer count, per step (outside the layers) = 1-layer count minus one layer.
Kernels are charged to the ``ProfilerStep#N`` whose CPU range holds the launch that ran them
(CUDA-graph kernels carry their graph launch's correlation id; each step is synchronised
before the next, so its kernels end inside its own range). Imports nothing of gpumodel.

    python validation/kernel_lists/hf_static_compiled_trace.py --out DIR [--points 8x2048,32x4096]
        [--arch llama|qwen3|phi3]

``--arch qwen3``: Qwen3-8B's widths (MLP 12288, vocabulary 151936, q/k norms); ``phi3``:
Phi-3-mini's (hidden 3072, 32 heads of 96 and no GQA, MLP 8192, vocabulary 32064, fused
projections, no sliding window: the dense path).

Writes DIR/static-compiled-decode-kernels.json and the traces (gzip).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import datetime as dt
import gzip
import json
import os
import platform
import shutil


def kernels_per_step(path: str) -> list[dict[str, list[float]]]:
    """{kernel name: [durations in us]} for each profiled step of a chrome trace."""
    with open(path, encoding="utf-8") as fh:
        events = json.load(fh)
    events = events["traceEvents"] if isinstance(events, dict) else events
    steps = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events
                   if e.get("cat") == "user_annotation"
                   and str(e.get("name", "")).startswith("ProfilerStep#"))  # fmt: skip
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in events
                 if e.get("cat") in ("cuda_runtime", "cuda_driver")
                 and "correlation" in e.get("args", {})}  # fmt: skip
    starts = [s[0] for s in steps]
    out: list[dict[str, list[float]]] = [collections.defaultdict(list) for _ in steps]
    for e in events:
        if e.get("cat") != "kernel":
            continue
        ts = launch_ts.get(e.get("args", {}).get("correlation"))
        if ts is None:
            continue
        i = bisect.bisect_right(starts, ts) - 1
        if 0 <= i and ts <= steps[i][1]:
            out[i][e["name"]].append(float(e.get("dur", 0.0)))
    return [dict(s) for s in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--points", default="8x2048,32x4096", help="batch x context, comma-separated")
    ap.add_argument("--arch", choices=("llama", "qwen3", "phi3"), default="llama")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile, record_function
    from transformers import (
        AutoModelForCausalLM,
        LlamaConfig,
        Phi3Config,
        Qwen3Config,
        StaticCache,
    )

    points = [tuple(int(v) for v in p.split("x")) for p in args.points.split(",")]
    result: dict = {
        "what": "hf-static-compiled decode: kernels per profiled step, 1- and 2-layer models",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(0),
        "host": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                 "python": platform.python_version()},
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda,
                     "cudnn": torch.backends.cudnn.version(),
                     "transformers": transformers.__version__},
        "points": {},
    }  # fmt: skip
    result["arch"] = args.arch
    for layers in (1, 2):
        if args.arch == "qwen3":
            cfg = Qwen3Config(hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
                              num_key_value_heads=8, head_dim=128, num_hidden_layers=layers,
                              vocab_size=151936, max_position_embeddings=40960,
                              rms_norm_eps=1e-6, tie_word_embeddings=False)  # fmt: skip
        elif args.arch == "phi3":
            cfg = Phi3Config(hidden_size=3072, intermediate_size=8192, num_attention_heads=32,
                             num_key_value_heads=32, num_hidden_layers=layers, vocab_size=32064,
                             max_position_embeddings=4096, rms_norm_eps=1e-5,
                             sliding_window=None, pad_token_id=32000,
                             tie_word_embeddings=False)  # fmt: skip
        else:
            cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                              num_key_value_heads=8, head_dim=128, num_hidden_layers=layers,
                              vocab_size=128256, max_position_embeddings=8192,
                              rope_theta=500000.0, rms_norm_eps=1e-5,
                              tie_word_embeddings=False)  # fmt: skip
        cfg._attn_implementation = "sdpa"
        kv_heads = cfg.num_key_value_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval()
        torch._dynamo.reset()
        compiled = torch.compile(model.forward, mode="reduce-overhead", fullgraph=False,
                                 dynamic=False)  # fmt: skip
        for batch, ctx in points:
            cache = StaticCache(config=cfg, max_cache_len=ctx + 64)
            cache.early_initialization(batch_size=batch, num_heads=kv_heads, head_dim=head_dim,
                                       dtype=torch.bfloat16, device=torch.device("cuda"))  # fmt: skip
            for layer in cache.layers:
                layer.keys.normal_()
                layer.values.normal_()
                layer.cumulative_length.fill_(ctx)
            ids = torch.randint(0, cfg.vocab_size, (batch, 1), device="cuda")

            def step(ids=ids, cache=cache, fn=compiled) -> None:
                torch.compiler.cudagraph_mark_step_begin()
                fn(input_ids=ids, past_key_values=cache, use_cache=True)

            with torch.no_grad():
                for _ in range(4):  # compile, record the graph, replay
                    step()
                torch.cuda.synchronize()
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                for _ in range(10):
                    step()
                end.record()
                torch.cuda.synchronize()
                step_ms = start.elapsed_time(end) / 10
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    for i in range(3):
                        with record_function(f"ProfilerStep#{i}"):
                            step()
                        torch.cuda.synchronize()
                torch.cuda.synchronize()
            name = f"trace-static-decode-L{layers}-b{batch}-ctx{ctx}.json"
            path = os.path.join(args.out, name)
            prof.export_chrome_trace(path)
            per_step = kernels_per_step(path)
            with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.remove(path)
            # the last profiled step (the first may still carry warm-up launches)
            last = per_step[-1] if per_step else {}
            result["points"][f"L{layers} b{batch} ctx{ctx}"] = {
                "layers": layers, "batch": batch, "context": ctx,
                "step_ms_cuda_events": round(step_ms, 4),
                "kernels_per_profiled_step": [sum(len(v) for v in s.values()) for s in per_step],
                "kernels": {k: {"count": len(v), "us_total": round(sum(v), 2)}
                            for k, v in sorted(last.items())},
                "trace": name + ".gz",
            }  # fmt: skip
            print(f"L{layers} b{batch} ctx{ctx}: {step_ms:.3f} ms/step, "
                  f"{sum(len(v) for v in last.values())} kernels", flush=True)  # fmt: skip
            del cache
        del model, compiled
        torch.cuda.empty_cache()
    # per layer and outside the layers, per point
    for batch, ctx in points:
        one = result["points"][f"L1 b{batch} ctx{ctx}"]["kernels"]
        two = result["points"][f"L2 b{batch} ctx{ctx}"]["kernels"]
        layer = {k: {"count": two[k]["count"] - one.get(k, {"count": 0})["count"],
                     "us": round(two[k]["us_total"] - one.get(k, {"us_total": 0})["us_total"], 2)}
                 for k in two}  # fmt: skip
        layer = {k: v for k, v in layer.items() if v["count"]}
        outside = {k: {"count": one[k]["count"] - layer.get(k, {"count": 0})["count"]}
                   for k in one}  # fmt: skip
        result["points"][f"per layer b{batch} ctx{ctx}"] = layer
        result["points"][f"outside layers b{batch} ctx{ctx}"] = {
            k: v for k, v in outside.items() if v["count"]
        }
    with open(os.path.join(args.out, "static-compiled-decode-kernels.json"), "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
