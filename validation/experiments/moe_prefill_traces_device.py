"""MoE prefill points the model priced 8-14% fast on H200 MoE runs 3-4 (Mixtral-8x7B 2 x 2048
and 3 x 2048, Qwen3-30B-A3B 4 x 2048), timed again on a fresh VM with one trace each: which
kernels take the time the model misses. A diagnostic for the model's next change, not a scored
set. Uses the unseen-steps harness (transformers' default grouped experts).

    python validation/experiments/moe_prefill_traces_device.py --out DIR
"""

from __future__ import annotations

import argparse
from pathlib import Path

from families_prefill_traces_device import su, traced_prefills  # this folder (first on sys.path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plans = [("mixtral-8x7b", su.mixtral_8x7b_config(args.tiny), [(2, 2048), (3, 2048)], (2, 2048)),
             ("qwen3-30b-a3b", su.qwen3_30b_a3b_config(args.tiny), [(4, 2048), (4, 1024)],
              (4, 2048))]  # fmt: skip
    if args.tiny:
        plans = [(n, c, [(1, 16), (2, 32)], (2, 32)) for n, c, _, _ in plans]
    traced_prefills(su.Env(args.tiny), plans, out, "moe-prefill", rounds=3, seconds=40)


if __name__ == "__main__":
    main()
