#!/usr/bin/env python3
"""Torch SDPA with an explicit mask against the same shapes without one (bf16, one GPU).

What an HF model runs once a sliding window's keys reach the window, or with padding: a bool
``attn_mask`` (batch, 1, q, kv) instead of ``is_causal``. Per shape, four calls: ``is_causal``,
dense (no mask), a bool causal mask, the same mask as an additive bf16 bias; each timed as a
back-to-back loop between CUDA events (median of 5 loops of 20 calls) and profiled once for the
kernel it runs. Decode shapes (one query) compare no mask with an all-true bool mask.

Fit data for ``gpumodel.ops.attention.CUDNN_MASK_WORK_FACTOR``.

Usage (device): python validation/fitset/sdpa_mask_device.py --out $OUT/sdpa-mask.json
"""

from __future__ import annotations

import argparse
import functools
import json
import time

import torch
import torch.nn.functional as F
from softmax_rows_device import kernels, timed  # this folder (the script's own, on sys.path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--backward", action="store_true",
                    help="time forward + backward of the prefill shapes instead (training)")  # fmt: skip
    args = ap.parse_args()
    if args.backward:
        return backward(args.out)
    dev, dt = "cuda", torch.bfloat16
    heads, d = 32, 128
    rows = []
    t0 = time.perf_counter()
    shapes = [(b, s, s) for b, s in ((1, 1024), (4, 1024), (1, 2048), (2, 2048), (1, 4096),
                                     (2, 4096), (1, 8192))]  # fmt: skip
    shapes += [(b, 1, kv) for b, kv in ((8, 2048), (8, 4096), (32, 4096), (8, 8192))]
    for b, s, kv in shapes:
        q = torch.randn(b, heads, s, d, device=dev, dtype=dt)
        k = torch.randn(b, heads, kv, d, device=dev, dtype=dt)
        v = torch.randn(b, heads, kv, d, device=dev, dtype=dt)
        keep = torch.ones(s, kv, device=dev, dtype=torch.bool).tril(kv - s)
        bool_mask = keep.expand(b, 1, s, kv).contiguous()
        bias = torch.zeros(b, 1, s, kv, device=dev, dtype=dt).masked_fill(~bool_mask, -float("inf"))
        sdpa = functools.partial(F.scaled_dot_product_attention, q, k, v)
        variants = {"dense": sdpa, "bool_mask": functools.partial(sdpa, attn_mask=bool_mask),
                    "bias_mask": functools.partial(sdpa, attn_mask=bias)}  # fmt: skip
        if s > 1:
            variants["is_causal"] = functools.partial(sdpa, is_causal=True)
        for name, fn in variants.items():
            try:
                sec = timed(fn)
                names = kernels(fn)
                err = None
            except RuntimeError as exc:
                sec, names, err = None, [], str(exc)[:300]
            rows.append({"batch": b, "heads": heads, "seq": s, "kv_seq": kv, "head_dim": d,
                         "dtype": "bf16", "variant": name, "seconds": sec, "kernels": names,
                         "error": err})  # fmt: skip
            print(f"b{b} s{s} kv{kv} {name:10s} "
                  f"{'-' if sec is None else f'{sec * 1e6:9.1f} us'}  {names[:2]}", flush=True)  # fmt: skip
        del q, k, v, bool_mask, bias, sdpa, variants
        torch.cuda.empty_cache()
    prop = torch.cuda.get_device_properties(0)
    doc = {"what": __doc__.split("\n")[0], "gpu": prop.name, "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "seconds_total": time.perf_counter() - t0,
           "timer": "CUDA events around 20 back-to-back calls, median of 5 loops",
           "rows": rows}  # fmt: skip
    with open(args.out, "w") as fh:
        json.dump(doc, fh, indent=1)
    return 0


def _forward_backward(qkv: tuple, grad: torch.Tensor, kw: dict) -> None:
    out = F.scaled_dot_product_attention(*qkv, **kw)
    torch.autograd.grad(out, qkv, grad)


def backward(out: str) -> int:
    """Forward + backward (``torch.autograd.grad`` of q, k, v) of the prefill shapes, dense,
    ``is_causal`` and with the additive mask: what an HF training step with padding, or past a
    sliding window, runs."""
    dev, dt, heads, d = "cuda", torch.bfloat16, 32, 128
    rows = []
    for b, s in ((1, 1024), (4, 1024), (1, 2048), (2, 2048), (1, 4096), (2, 4096)):
        q, k, v = (torch.randn(b, heads, s, d, device=dev, dtype=dt, requires_grad=True)
                   for _ in range(3))  # fmt: skip
        grad = torch.randn(b, heads, s, d, device=dev, dtype=dt)
        keep = torch.ones(s, s, device=dev, dtype=torch.bool).tril()
        bias = torch.zeros(b, 1, s, s, device=dev, dtype=dt).masked_fill(~keep, -float("inf"))
        for name, kw in (("dense", {}), ("is_causal", {"is_causal": True}),
                         ("bias_mask", {"attn_mask": bias})):  # fmt: skip
            step = functools.partial(_forward_backward, (q, k, v), grad, kw)
            sec = timed(step)
            names = kernels(step)
            rows.append({"batch": b, "heads": heads, "seq": s, "kv_seq": s, "head_dim": d,
                         "dtype": "bf16", "variant": name, "pass": "forward+backward",
                         "seconds": sec, "kernels": names})  # fmt: skip
            print(f"b{b} s{s} {name:10s} fwd+bwd {sec * 1e6:9.1f} us  {names[:3]}", flush=True)
        del q, k, v, grad, bias, step
        torch.cuda.empty_cache()
    doc = {"what": backward.__doc__.split("\n")[0], "gpu": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "timer": "CUDA events around 20 back-to-back calls, median of 5 loops", "rows": rows}  # fmt: skip
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
