"""cuDNN's masked SDPA backward (2026-12-01): the fit set of its work factor and of its odd key
length.

SDPA given a boolean ``attn_mask`` runs cuDNN's biased kernels on an H100/H200. The model priced
their backward at CUDNN_MASK_BACKWARD_WORK_FACTOR x the dense backward's work, fitted on
forward + backward less a forward timed apart (validation/results/h200-sxm/sdpa-mask-2026-11-29),
and priced an odd key length's penalty in the forward only. The unseen H200 run 32 found the
masked backward 7-32% slower than priced. This measures, for shapes of no unseen grid, bf16,
the default dispatch: the same call dense (no mask), causal (``is_causal``) and with the causal
pattern as a boolean mask, at an even key length and the odd one below it; forward and the
backward alone (``torch.autograd.grad`` on a retained graph), kernel names of the masked calls.

usage: python3 sdpa_mask_backward_device.py --out FILE.json [--tiny]
"""

from __future__ import annotations

import json
import time

from sdpa_timing import experiment_args, kernel_names, loop_time_s, write_results

# (batch, heads, seq, head_dim): even key lengths; each is also run at seq - 1
SHAPES = [(1, 32, 1024, 128), (4, 16, 2048, 64), (2, 16, 1536, 128), (1, 8, 4096, 256),
          (2, 16, 2048, 192), (8, 32, 512, 128), (1, 32, 3072, 128)]  # fmt: skip
TINY_SHAPES = [(1, 2, 64, 32)]


def main() -> int:
    args = experiment_args()

    import torch
    import torch.nn.functional as F

    records = []
    t0 = time.time()
    for b, h, s0, d in TINY_SHAPES if args.tiny else SHAPES:
        for s in (s0, s0 - 1):
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16,
                                   requires_grad=True) for _ in range(3))  # fmt: skip
            mask = torch.ones(s, s, device="cuda", dtype=torch.bool).tril()
            for mode, kwargs in (("dense", {}), ("causal", {"is_causal": True}),
                                 ("masked", {"attn_mask": mask})):  # fmt: skip
                def fwd(kwargs=kwargs, q=q, k=k, v=v):
                    return F.scaled_dot_product_attention(q, k, v, **kwargs)

                rec = {"shape": {"batch": b, "heads": h, "seq": s, "head_dim": d}, "mode": mode}
                try:
                    if mode == "masked":
                        rec["kernels"] = kernel_names(torch, fwd)
                    with torch.no_grad():
                        rec["forward_s"] = loop_time_s(torch, fwd)
                    out = fwd()
                    dout = torch.randn_like(out)

                    def bwd(out=out, dout=dout, leaves=(q, k, v)):
                        return torch.autograd.grad(out, leaves, dout, retain_graph=True)

                    if mode == "masked":
                        rec["backward_kernels"] = kernel_names(torch, bwd)
                    rec["backward_s"] = loop_time_s(torch, bwd)
                except Exception as exc:  # a refusal is a finding
                    rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
                records.append(rec)
                print(json.dumps({k: rec.get(k) for k in ("shape", "mode", "forward_s",
                                                           "backward_s", "error")}), flush=True)  # fmt: skip
    write_results(args.out, torch, records, t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
