"""Grouped GEMMs as HF transformers 5 runs a mixture of experts (``experts_implementation=
"grouped_mm"``, its default on CUDA): tokens routed top-k by random logits, sorted by expert,
one ``torch._grouped_mm`` per projection over the experts' stacked weights (HF passes the
[E, N, K] parameter transposed). Timed for Mixtral-8x7B's experts (8 of 4096 x 14336, top-2)
and Qwen3-30B-A3B's (128 of 2048 x 768, top-8) from 1 to 16384 tokens, beside one cuBLAS
``torch.mm`` per active expert at the mean rows per expert (the same work as dense GEMMs).
Each call timed as a back-to-back loop between CUDA events (median of 5 loops of 20 calls).
Fit data for ``gpumodel.llm.layers`` grouped experts (not an unseen set).

    python validation/fitset/grouped_mm_device.py --out $OUT/grouped-mm.json
"""

from __future__ import annotations

import argparse
import functools
import json
import math

CONFIGS = {  # name: (experts, hidden, expert ffn, top_k)
    "mixtral-8x7b": (8, 4096, 14336, 2),
    "qwen3-30b-a3b": (128, 2048, 768, 8),
}
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def grouped_mm(x, w, offs):
    import torch

    fn = getattr(torch.nn.functional, "grouped_mm", None) or torch._grouped_mm
    return fn(x, w, offs=offs)


def main() -> None:
    import torch
    from softmax_rows_device import timed  # this folder (the script's own, on sys.path)

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    torch.manual_seed(0)
    rows = []
    for name, (e, h, f, k) in CONFIGS.items():
        w_gu = torch.randn(e, 2 * f, h, device="cuda", dtype=torch.bfloat16)
        w_d = torch.randn(e, h, f, device="cuda", dtype=torch.bfloat16)
        for t in tokens:
            logits = torch.randn(t, e, device="cuda")
            ids = torch.topk(logits.softmax(-1), k, dim=-1).indices.reshape(-1)
            ids_sorted, _ = torch.sort(ids)
            counts = torch.histc(ids_sorted.int(), bins=e, min=0, max=e - 1)
            offs = torch.cumsum(counts, 0, dtype=torch.int32)
            s = t * k
            x = torch.randn(s, h, device="cuda", dtype=torch.bfloat16)
            y = torch.randn(s, f, device="cuda", dtype=torch.bfloat16)
            c = counts.tolist()
            active = sum(1 for n in c if n > 0)
            mean_rows = math.ceil(s / active)
            t_gu = timed(functools.partial(grouped_mm, x, w_gu.transpose(-2, -1), offs))
            t_d = timed(functools.partial(grouped_mm, y, w_d.transpose(-2, -1), offs))
            xm, ym = x[:mean_rows], y[:mean_rows]
            t_gu_dense = timed(functools.partial(torch.mm, xm, w_gu[0].t())) * active
            t_d_dense = timed(functools.partial(torch.mm, ym, w_d[0].t())) * active
            rows.append({"model": name, "experts": e, "hidden": h, "ffn": f, "top_k": k,
                         "tokens": t, "slots": s, "active": active, "max_rows": max(c),
                         "mean_rows": mean_rows, "gate_up_s": t_gu, "down_s": t_d,
                         "gate_up_dense_s": t_gu_dense, "down_dense_s": t_d_dense})  # fmt: skip
            print(f"{name} T{t:6d} active {active:3d} rows {mean_rows:5d} (max {max(c):5d}): "
                  f"gate_up {t_gu * 1e6:9.1f} us (dense {t_gu_dense * 1e6:9.1f}), down "
                  f"{t_d * 1e6:9.1f} us (dense {t_d_dense * 1e6:9.1f})", flush=True)  # fmt: skip
            del x, y, logits
        del w_gu, w_d
        torch.cuda.empty_cache()
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "timer": "back-to-back loop of 20 calls between CUDA events, median of 5 loops",
            "routing": "top-k of softmax(randn logits): near-uniform, as a random-weight router"}  # fmt: skip
    with open(args.out, "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
