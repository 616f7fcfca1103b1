#!/usr/bin/env python3
"""Kernels one eager SDPA call launches, per backend, pass and mask (the host floor's launch
count, ``Attention.host_launches``), and the host time of each calling pattern at one small
shape, measured in the same process.

Each case is one ``F.scaled_dot_product_attention`` call (or the backward of one, through
``torch.autograd.grad`` on its retained graph) at SDPA's default dispatch or with one backend
forced by ``sdpa_kernel``. Recorded per case: every GPU kernel event of one profiled call, in
order, with repeats (the count is the number of launches; ``kernel_names`` in sdpa_timing.py
keeps distinct names only), after a warm-up call. Host time per call: perf_counter around
back-to-back calls without synchronisation, median of rounds (the host profile's method,
written here on its own).

Standalone: imports nothing from gpumodel. Run on the device:

    python validation/experiments/sdpa_launches_device.py --out $OUT/sdpa-launches.json
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdpa_timing import experiment_args, gpu_events, write_results

# (label, batch, heads, kv_heads, query length, key length, head dim)
SHAPES = [
    ("decode b1 h8 kv128 hd64 (the host probe's)", 1, 8, 8, 1, 128, 64),
    ("decode b1 llama3-8b 2k", 1, 32, 8, 1, 2048, 128),
    ("decode b16 h8 kv1k hd128 (b x kv heads 128)", 16, 8, 8, 1, 1024, 128),
    ("decode b64 llama3-8b 1k", 64, 32, 8, 1, 1024, 128),
    ("decode b4 gpt2 1k hd64 (b x kv heads 48)", 4, 12, 12, 1, 1024, 64),
    ("prefill b1 h8 128 hd64", 1, 8, 8, 128, 128, 64),
    ("prefill b1 h16 1k hd128", 1, 16, 16, 1024, 1024, 128),
]
BACKENDS = ("default", "flash", "cudnn", "efficient")


def kernel_events(torch, fn) -> list[str]:
    """Every GPU kernel (and memset/memcpy) event of one call of ``fn``, in order."""
    evs = sorted(gpu_events(torch, fn), key=lambda ev: ev.time_range.start)
    return [ev.name[:90] for ev in evs]


def host_s(torch, fn, calls: int = 200, rounds: int = 7) -> float:
    """Median over rounds of host seconds per call, back to back, no sync inside."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls)
        torch.cuda.synchronize()
    return statistics.median(out)


def main() -> int:
    args = experiment_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    started = time.time()
    dev, dt = "cuda", torch.bfloat16
    forced = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
              "efficient": SDPBackend.EFFICIENT_ATTENTION}  # fmt: skip
    records: list[dict] = []
    timed: list = []  # host times after every profiled call: the profiler slows the host
    shapes = SHAPES[:2] if args.tiny else SHAPES
    for label, b, h, hkv, s, kv, d in shapes:
        q = torch.randn(b, h, s, d, device=dev, dtype=dt)
        k, v = (torch.randn(b, hkv, kv, d, device=dev, dtype=dt) for _ in range(2))
        mask = torch.ones(b, 1, s, kv, dtype=torch.bool, device=dev)
        mask[::2, :, :, : kv // 8] = False
        gqa = {"enable_gqa": True} if hkv != h else {}
        for backend in BACKENDS:
            for masked in (False, True):
                extra = {**gqa, **({"attn_mask": mask} if masked else {})}

                def fwd(q=q, k=k, v=v, backend=backend, extra=extra):
                    if backend == "default":
                        return F.scaled_dot_product_attention(q, k, v, **extra)
                    with sdpa_kernel(forced[backend]):
                        return F.scaled_dot_product_attention(q, k, v, **extra)

                rec = {"label": label, "shape": [b, h, hkv, s, kv, d], "backend": backend,
                       "mask": masked}  # fmt: skip
                try:
                    with torch.no_grad():
                        rec["forward_kernels"] = kernel_events(torch, fwd)
                    timed.append((rec, "forward_host_s", fwd))
                    if s > 1:  # the backward of a prefill call (training)
                        leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]
                        out = fwd(*leaves)
                        dout = torch.randn_like(out)

                        def bwd(out=out, leaves=leaves, dout=dout):
                            return torch.autograd.grad(out, leaves, dout, retain_graph=True)

                        rec["backward_kernels"] = kernel_events(torch, bwd)
                        timed.append((rec, "backward_host_s", bwd))
                except Exception as exc:  # a refusal is a finding
                    rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
                records.append(rec)
                print(rec.get("error") or f"{label} {backend} mask={masked}: "
                      f"fwd {len(rec['forward_kernels'])} bwd "
                      f"{len(rec.get('backward_kernels', []))}", flush=True)  # fmt: skip
    # host times in a process the profiler already touched: relative figures only (the host
    # profile, measured in its own process before this, holds the absolute ones)
    for rec, key, fn in timed:
        try:
            grad = torch.enable_grad() if key == "backward_host_s" else torch.no_grad()
            with grad:
                rec[key] = host_s(torch, fn, calls=50 if key == "backward_host_s" else 200)
        except Exception as exc:
            rec[key + "_error"] = f"{type(exc).__name__}: {exc}"[:200]
    write_results(args.out, torch, records, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
