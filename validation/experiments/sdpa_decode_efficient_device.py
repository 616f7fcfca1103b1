"""The memory-efficient SDPA kernel's decode (2026-12-01): its fit set.

SDPA runs the memory-efficient (xFormers/CUTLASS) kernel for fp32 tensors (a model loaded
without a 16-bit dtype) and on GPUs before sm80. With one query per sequence, unseen H200 runs 34
and 35 found it up to 79% slower than priced when few blocks run: each block of one query walks
the whole KV cache in key tiles, one after another. This times it, forced, for shapes of no
unseen grid: blocks (batch x heads) 8-2048, KV 512-16K, head dims 64/128/256, bf16 and fp32, K/V
at the query heads; replayed from a CUDA graph (GPU time), with the kernel's name.

usage: python3 sdpa_decode_efficient_device.py --out FILE.json [--tiny]
"""

from __future__ import annotations

import time

from sdpa_timing import experiment_args, measure, write_results

# (batch, heads): batch x heads thread blocks of one query each
BLOCKS = [(1, 8), (1, 32), (4, 32), (16, 32), (64, 32)]
KV = [512, 4096, 16384]
HEAD_DIMS = [64, 128, 256]
DTYPES = ["bf16", "fp32"]


def main() -> int:
    args = experiment_args()

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    records = []
    t0 = time.time()
    dts = {"bf16": torch.bfloat16, "fp32": torch.float32}
    grid = ([(1, 2, 64, 32, "bf16")] if args.tiny else
            [(b, h, kv, d, dt) for dt in DTYPES for d in HEAD_DIMS for b, h in BLOCKS for kv in KV])  # fmt: skip
    for b, h, kv, d, dt in grid:
        if b * h * kv * d * 4 * 2 > 8e9:  # K and V beyond 8 GB: skipped
            continue
        q = torch.randn(b, h, 1, d, device="cuda", dtype=dts[dt])
        k, v = (torch.randn(b, h, kv, d, device="cuda", dtype=dts[dt]) for _ in range(2))

        def call(q=q, k=k, v=v):
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v)

        rec = {"shape": {"batch": b, "heads": h, "kv_seq": kv, "head_dim": d}, "dtype": dt}
        measure(torch, call, rec, records)
        del q, k, v
    write_results(args.out, torch, records, t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
