"""SDPA with a few queries per sequence (2026-12-01): the fit set of speculative verification and
chunked prefill against a KV cache.

gpumodel priced FlashAttention-2 at two or more queries as a prefill, its query tiles one per
head and no split over the keys, where flash_api.cpp's ``set_params_splitkv`` splits the keys for
any query length when batch x heads x ceil(queries / 64) blocks leave the GPU idle (and the
seqlen_q / heads swap of GQA applies to one query only). This times, for shapes of no unseen grid,
bf16, non-causal, the query lengths 1-128 against one cache, each with the default dispatch and
FlashAttention-2 forced: the call back to back and replayed from a CUDA graph (its GPU time), with
the kernel names of each call (``flash_fwd_splitkv_kernel`` and its combine kernel, or
``flash_fwd_kernel``).

usage: python3 sdpa_short_query_device.py --out FILE.json [--tiny]
"""

from __future__ import annotations

import time

from sdpa_timing import experiment_args, measure, sdpa_call, write_results

# (batch, heads, kv_heads, kv_seq, head_dim); each at every query length of QUERIES
SHAPES = [(1, 32, 32, 2048, 128), (2, 32, 8, 8192, 128), (4, 16, 16, 4096, 64),
          (16, 32, 32, 1024, 128), (1, 16, 16, 8192, 256)]  # fmt: skip
QUERIES = [1, 2, 3, 4, 8, 16, 32, 64, 65, 128]
BACKENDS = ["default", "FLASH_ATTENTION"]


def main() -> int:
    args = experiment_args()

    import torch

    records = []
    t0 = time.time()
    for b, h, hkv, kv, d in [(1, 2, 2, 64, 32)] if args.tiny else SHAPES:
        k, v = (torch.randn(b, hkv, kv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        extra = {"enable_gqa": True} if hkv != h else {}
        for sq in [1, 2] if args.tiny else QUERIES:
            q = torch.randn(b, h, sq, d, device="cuda", dtype=torch.bfloat16)
            for backend in BACKENDS:
                call = sdpa_call(backend, q, k, v, **extra)
                rec = {"shape": {"batch": b, "heads": h, "kv_heads": hkv, "seq_q": sq,
                                 "kv_seq": kv, "head_dim": d}, "backend": backend}  # fmt: skip
                measure(torch, call, rec, records, kernels=True, eager=True)
    write_results(args.out, torch, records, t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
