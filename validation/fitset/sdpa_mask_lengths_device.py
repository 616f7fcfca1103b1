"""Torch SDPA with an explicit bool mask at key lengths that are and are not multiples of 8,
head dims 96 and 128, batch 1 and 3 (bf16, one GPU): is the masked kernel's rate a function of
the length's alignment? Prompted by Phi-3-mini's 3 x 2047 prompt (1.7x slower per unit of work
than its 1 x 3072 prompt; validation/results/h200-sxm/families-prefill-2026-11-29). Each call
is timed as a back-to-back loop between CUDA events (median of 5 loops of 20 calls), masked and
with ``is_causal``. Fit data for ``gpumodel.ops.attention.CUDNN_MASK_UNALIGNED_FACTOR``.

    python validation/fitset/sdpa_mask_lengths_device.py --out $OUT/sdpa-mask-lengths.json
        [--lengths 2044,2045,2046,2047 --batches 1 --head-dims 128]
"""

from __future__ import annotations

import argparse
import functools
import json


def main() -> None:
    import torch
    import torch.nn.functional as F
    from softmax_rows_device import timed  # this folder (the script's own, on sys.path)

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--lengths", default="2040,2047,2048,2056,3000,3072")
    ap.add_argument("--batches", default="1,3")
    ap.add_argument("--head-dims", default="96,128")
    ap.add_argument("--decode", action="store_true",
                    help="one query per sequence against s keys (an all-true mask) instead")  # fmt: skip
    args = ap.parse_args()
    lengths, batches, dims = ([int(x) for x in a.split(",")]
                              for a in (args.lengths, args.batches, args.head_dims))  # fmt: skip
    rows = []
    for d in dims:
        for b in batches:
            for s in lengths:
                q_len = 1 if args.decode else s
                q = torch.randn(b, 32, q_len, d, device="cuda", dtype=torch.bfloat16)
                k, v = (torch.randn(b, 32, s, d, device="cuda", dtype=torch.bfloat16)
                        for _ in range(2))  # fmt: skip
                mask = torch.ones(q_len, s, device="cuda", dtype=torch.bool).tril(s - q_len)
                sdpa = functools.partial(F.scaled_dot_product_attention, q, k, v)
                t_mask = timed(functools.partial(sdpa, attn_mask=mask.expand(b, 1, q_len, s)))
                # decode: no mask at all (what the same step runs unpadded)
                t_causal = timed(functools.partial(sdpa, is_causal=not args.decode))
                rows.append({"batch": b, "heads": 32, "seq": s, "head_dim": d, "queries": q_len,
                             "masked_s": t_mask, "causal_s": t_causal,
                             "masked_per_dense_work_ns": t_mask / (b * s * s) * 1e9})  # fmt: skip
                print(f"d{d} b{b} s{s}: masked {t_mask * 1e6:8.1f} us, causal "
                      f"{t_causal * 1e6:8.1f} us, masked/causal {t_mask / t_causal:5.2f}, "
                      f"masked ns per b*s^2 {t_mask / (b * s * s) * 1e9:.4f}", flush=True)  # fmt: skip
                del q, k, v, mask, sdpa
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version()}  # fmt: skip
    with open(args.out, "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
