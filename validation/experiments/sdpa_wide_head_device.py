"""SDPA above head dim 128: which kernels run, and how fast, forward and backward.

Experiment for the attention op's wide-head rules (gpumodel/ops/attention.py). Above head dim 128
the memory-efficient (xFormers/CUTLASS) kernel runs other kernels than below: a forward that
keeps its output accumulator in global memory (``fmha_cutlassF_*_32x128_gmem``) and a backward
for any head dim (``fmha_cutlassB_*_128x64_k65536``); on the H200 fit set of 2026-11-30 that
backward ran 3.8x gpumodel's price at head dim 256. This measures, for shapes of no unseen grid
(the fit set of the wide-head rule, never scored against), bf16 unless named:

- each backend forced (memory-efficient, flash, cuDNN): forward, and the backward alone
  (``torch.autograd.grad`` on a retained graph: dQ, dK, dV, as validate times it), with the
  kernel names of both;
- the default dispatch, and the default dispatch with an explicit boolean causal mask (what HF
  passes with padding or sliding windows): kernel names and times;
- fp16 and fp32 on the memory-efficient kernel for a few shapes.

Times (sdpa_timing.py): CUDA events around a back-to-back loop of at least ``LOOP_S`` of GPU
work, median of ``ROUNDS`` rounds (the unseen harness's in-workload condition, written here on
its own).

usage: python3 sdpa_wide_head_device.py --out FILE.json [--tiny]
"""

from __future__ import annotations

import json
import time

from sdpa_timing import experiment_args, kernel_names, loop_time_s, write_results

# (batch, heads, seq, head_dim, causal): none of these is a shape of validate's or the unseen grids
SHAPES = [(2, 16, 1024, 256, True), (1, 8, 4096, 256, False), (8, 8, 512, 256, True),
          (1, 16, 2048, 256, False), (2, 16, 2048, 192, True), (4, 8, 1024, 192, False),
          (8, 16, 1024, 160, False), (1, 32, 2048, 160, True), (2, 16, 1024, 224, False),
          (4, 8, 2048, 144, True)]  # fmt: skip
OTHER_DTYPES = {(2, 16, 1024, 256, True): ("fp16", "fp32"), (4, 8, 1024, 192, False): ("fp32",),
                (8, 16, 1024, 160, False): ("fp16",)}  # fmt: skip
TINY_SHAPES = [(1, 2, 64, 32, False), (1, 2, 64, 32, True)]


def main() -> int:
    args = experiment_args()

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev = "cuda"
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    backends = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "default": None}  # fmt: skip
    records = []

    def run(shape, backend, dtype="bf16", masked=False):
        b, h, s, d, causal = shape
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=dtypes[dtype], requires_grad=True)
                   for _ in range(3))  # fmt: skip
        kwargs = {"is_causal": causal}
        if masked:  # the same causal (or full) pattern as an explicit boolean mask
            mask = torch.ones(s, s, device=dev, dtype=torch.bool)
            kwargs = {"attn_mask": mask.tril() if causal else mask}

        def fwd():
            if backends[backend] is None:
                return F.scaled_dot_product_attention(q, k, v, **kwargs)
            with sdpa_kernel(backends[backend]):
                return F.scaled_dot_product_attention(q, k, v, **kwargs)

        rec = {"shape": {"batch": b, "heads": h, "seq": s, "head_dim": d}, "causal": causal,
               "dtype": dtype, "backend": backend, "masked": masked}  # fmt: skip
        try:
            rec["kernels"] = kernel_names(torch, fwd)
            with torch.no_grad():
                rec["forward_s"] = loop_time_s(torch, fwd)
            out = fwd()
            dout = torch.randn_like(out)

            def bwd():
                return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

            rec["backward_kernels"] = kernel_names(torch, bwd)
            rec["backward_s"] = loop_time_s(torch, bwd)
        except Exception as exc:  # a backend that refuses the shape is a finding
            rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
        records.append(rec)
        print(json.dumps({k: rec.get(k) for k in ("shape", "causal", "dtype", "backend", "masked",
                                                   "forward_s", "backward_s", "error")}),
              flush=True)  # fmt: skip

    t0 = time.time()
    for shape in TINY_SHAPES if args.tiny else SHAPES:
        for backend in backends:
            run(shape, backend)
        run(shape, "default", masked=True)
        for dtype in OTHER_DTYPES.get(shape, ()):
            run(shape, "efficient", dtype)
    write_results(args.out, torch, records, t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
