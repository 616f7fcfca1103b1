"""Which kernel SDPA runs in fp32 (and fp64), and how fast, against the same shapes in bf16.

Experiment for the attention op's dtype rules (gpumodel/ops/attention.py): PyTorch's SDPA runs
FlashAttention-2 and cuDNN in fp16/bf16 only (sdp_utils.cpp); fp32 goes to the memory-efficient
(xFormers/CUTLASS) kernel, which on sm80+ multiplies fp32 as three TF32 products
(``OpMultiplyAddFastF32``, gemm_kernel_utils.h), and fp64 to the math backend. gpumodel priced
``dtype=fp32`` under ``impl=flash`` at the FP32 lanes' rate. This measures, for shapes of no
unseen grid (the fit set of the fp32 rule, never scored against):

- ``fp32``: default dispatch (TF32 off and on), the memory-efficient backend forced, the math
  backend forced; kernel names from torch.profiler for the default call;
- ``bf16`` with the memory-efficient backend forced, the reference for the same kernel's rate;
- forward + backward (``torch.autograd.grad``) of the memory-efficient kernel, fp32 and bf16;
- ``fp64`` default dispatch on the smaller shapes.

Times (sdpa_timing.py): CUDA events around a back-to-back loop of at least ``LOOP_S`` of GPU
work, median of ``ROUNDS`` rounds (the unseen harness's in-workload condition, written here on
its own).

usage: python3 sdpa_dtypes_device.py --out FILE.json [--tiny]
"""

from __future__ import annotations

import json
import time

from sdpa_timing import experiment_args, kernel_names, loop_time_s, write_results

# (batch, heads, seq, head_dim, causal): none of these is a shape of validate's or the unseen grids
SHAPES = [(1, 16, 512, 64, False), (4, 16, 1024, 64, True), (2, 32, 1024, 128, False),
          (1, 32, 2048, 128, True), (8, 12, 256, 64, False), (2, 8, 4096, 128, True),
          (1, 16, 2048, 256, False), (4, 32, 512, 128, False), (16, 16, 512, 64, True),
          (1, 32, 4096, 64, False)]  # fmt: skip
TINY_SHAPES = [(1, 2, 64, 32, False), (1, 2, 64, 32, True)]
FP64_MAX_SCORES = 2 * 32 * 1024 * 1024  # batch x heads x seq^2: the math backend's score tensor


def main() -> int:
    args = experiment_args()

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev = "cuda"
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp64": torch.float64}
    records = []

    def sdpa(q, k, v, causal, backend=None):
        if backend is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def run(shape, mode, dtype, backend=None, tf32=False, backward=False):
        b, h, s, d, causal = shape
        torch.backends.cuda.matmul.allow_tf32 = tf32
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=dtypes[dtype],
                               requires_grad=backward) for _ in range(3))  # fmt: skip
        rec = {"shape": {"batch": b, "heads": h, "seq": s, "head_dim": d}, "causal": causal,
               "mode": mode, "dtype": dtype, "tf32": tf32,
               "backend": getattr(backend, "name", "default")}  # fmt: skip
        try:
            fwd = lambda: sdpa(q, k, v, causal, backend)  # noqa: E731
            rec["kernels"] = kernel_names(torch, fwd)
            with torch.no_grad():
                rec["forward_s"] = loop_time_s(torch, fwd)
            if backward:
                go = torch.randn_like(q)

                def both():
                    out = sdpa(q, k, v, causal, backend)
                    return torch.autograd.grad(out, (q, k, v), go)

                rec["forward_backward_s"] = loop_time_s(torch, both)
                rec["backward_kernels"] = kernel_names(torch, both)
        except Exception as exc:  # a backend that refuses the dtype is a finding
            rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
        records.append(rec)
        print(json.dumps({k: rec.get(k) for k in ("shape", "mode", "forward_s",
                                                   "forward_backward_s", "error")}), flush=True)  # fmt: skip

    t0 = time.time()
    eff, math_be = SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH
    for shape in TINY_SHAPES if args.tiny else SHAPES:
        run(shape, "fp32 default", "fp32")
        run(shape, "fp32 default tf32", "fp32", tf32=True)
        run(shape, "fp32 efficient", "fp32", eff, backward=True)
        run(shape, "bf16 efficient", "bf16", eff, backward=True)
        run(shape, "fp32 flash (expected refusal)", "fp32", SDPBackend.FLASH_ATTENTION)
        run(shape, "fp32 cudnn (expected refusal)", "fp32", SDPBackend.CUDNN_ATTENTION)
        b, h, s, _, _ = shape
        if b * h * s * s <= FP64_MAX_SCORES:
            run(shape, "fp32 math", "fp32", math_be)
            run(shape, "fp64 default", "fp64")
    write_results(args.out, torch, records, t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
