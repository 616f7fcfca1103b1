"""Which SDPA kernel an fp32 model with grouped K/V heads runs, as HF calls it (``enable_gqa``),
and what it keeps for backward.

Experiment for the fp32 training policy: an fp32 HF Llama step with grouped K/V heads (the
1.1B model of the unseen set) ran 19% slower and held 41-50% more memory than priced with the
memory-efficient kernel, while GPT-2 (no grouped heads) matched (steps-h200-train-fp32-run1).
Fit set, none of the unseen shapes: for (batch, heads, kv heads, seq, head dim) below, fp32
``F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)`` forward and
backward: the CUDA kernel names (torch.profiler), the time (CUDA events, median of 5 loops) and
the memory autograd keeps after the forward (``memory_allocated`` before the backward less
before the forward, less the output); the same with K/V repeated to every head (no
``enable_gqa``), and with the memory-efficient backend forced on the grouped call.

usage: python3 sdpa_gqa_fp32_device.py --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import statistics

SHAPES = [(1, 32, 4, 1024, 64), (2, 16, 4, 1536, 64), (1, 32, 8, 1024, 128), (4, 12, 4, 512, 64)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    def timed(fn) -> float:
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        out = []
        for _ in range(5):
            a.record()
            for _ in range(5):
                fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 5e3)
        return statistics.median(out)

    recs = []
    for b, h, kvh, s, d in SHAPES:
        for mode in ("gqa", "repeated", "gqa efficient"):
            q = torch.randn(b, h, s, d, device="cuda", requires_grad=True)
            n = kvh if mode != "repeated" else h
            k = torch.randn(b, n, s, d, device="cuda", requires_grad=True)
            v = torch.randn(b, n, s, d, device="cuda", requires_grad=True)
            kw = {"is_causal": True, "enable_gqa": mode != "repeated"}
            rec = {"shape": [b, h, kvh, s, d], "mode": mode}
            try:
                def fwd(q=q, k=k, v=v, kw=kw, mode=mode):
                    if mode == "gqa efficient":
                        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                            return F.scaled_dot_product_attention(q, k, v, **kw)
                    return F.scaled_dot_product_attention(q, k, v, **kw)

                def both(fwd=fwd):
                    o = fwd()
                    o.sum().backward()

                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    both()
                    torch.cuda.synchronize()
                rec["kernels"] = sorted({e.name[:120] for e in prof.events()
                                         if "CUDA" in str(e.device_type)})[:30]  # fmt: skip
                torch.cuda.synchronize()
                before = torch.cuda.memory_allocated()
                o = fwd()
                torch.cuda.synchronize()
                rec["saved_bytes"] = torch.cuda.memory_allocated() - before - o.numel() * 4
                del o
                with torch.no_grad():
                    rec["forward_s"] = timed(fwd)
                rec["forward_backward_s"] = timed(both)
            except Exception as exc:
                rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
            recs.append(rec)
            print(json.dumps({k: rec.get(k) for k in ("shape", "mode", "saved_bytes", "forward_s",
                                                      "forward_backward_s", "error")}), flush=True)  # fmt: skip
            q = k = v = None
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    with open(args.out, "w") as f:
        json.dump({"env": env, "records": recs}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
