"""SDPA decode (2026-12-01): the fit set of one query against a KV cache, head dims 64-256.

gpumodel's decode attention (``Attention`` with ``seq=1``) was calibrated by validate at head
dim 128 on the flash and cuDNN kernels; nothing measured it above head dim 128 (Gemma's 256), with
``enable_gqa`` (K/V at their own heads, transformers' path without a mask), or on the
memory-efficient kernel. This times, for shapes of no unseen grid, bf16, each backend (the
default dispatch and each forced): the call eagerly back to back and replayed from a CUDA graph
(its GPU time without launch gaps), with the kernel names of the default dispatch.

usage: python3 sdpa_decode_device.py --out FILE.json [--tiny]
"""

from __future__ import annotations

import time

from sdpa_timing import experiment_args, measure, sdpa_call, write_results

# (batch, heads, kv_heads, kv_seq); each at every head dim of HEAD_DIMS
SHAPES = [(2, 32, 32, 1024), (16, 32, 8, 2048), (4, 16, 16, 8192), (48, 16, 16, 512),
          (1, 8, 1, 16384)]  # fmt: skip
HEAD_DIMS = [64, 128, 160, 256]
BACKENDS = ["default", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"]
TINY_SHAPES = [(1, 2, 2, 64)]


def main() -> int:
    args = experiment_args()

    import torch

    records = []
    t0 = time.time()
    for b, h, hkv, kv in TINY_SHAPES if args.tiny else SHAPES:
        for d in [32] if args.tiny else HEAD_DIMS:
            q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(b, hkv, kv, d, device="cuda", dtype=torch.bfloat16)
                    for _ in range(2))  # fmt: skip
            extra = {"enable_gqa": True} if hkv != h else {}
            for backend in BACKENDS:
                call = sdpa_call(backend, q, k, v, **extra)
                rec = {"shape": {"batch": b, "heads": h, "kv_heads": hkv, "kv_seq": kv,
                                 "head_dim": d}, "backend": backend}  # fmt: skip
                measure(torch, call, rec, records, kernels=backend == "default", eager=True)
    write_results(args.out, torch, records, t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
