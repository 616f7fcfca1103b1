"""MoE prefill points the model priced 8-14% fast on H200 MoE runs 3-4 (Mixtral-8x7B 2 x 2048
and 3 x 2048, Qwen3-30B-A3B 4 x 2048), timed again on a fresh VM with one trace each: which
kernels take the time the model misses. A diagnostic for the model's next change, not a scored
set. Uses the unseen-steps harness (transformers' default grouped experts).

    python validation/experiments/moe_prefill_traces_device.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unseen"))

import steps_unseen as su


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = su.Env(args.tiny)
    plans = [("mixtral-8x7b", su.mixtral_8x7b_config(args.tiny), [(2, 2048), (3, 2048)], (2, 2048)),
             ("qwen3-30b-a3b", su.qwen3_30b_a3b_config(args.tiny), [(4, 2048), (4, 1024)],
              (4, 2048))]  # fmt: skip
    if args.tiny:
        plans = [(n, c, [(1, 16), (2, 32)], (2, 32)) for n, c, _, _ in plans]
    result: dict = {"env": su.env_info(env), "records": [], "traces": []}
    for name, cfg, grid, traced in plans:
        model = su.build_causal_lm(env, cfg, torch.bfloat16).eval()
        pts = su.prefill_points_eager(env, model, cfg, grid, name)
        su.run_round_robin(env, pts, 3, 2, 5, su.time.perf_counter() + 40)
        result["records"] += [p.record() for p in pts]
        p = next(p for p in pts if (p.key["batch"], p.key["seq"]) == traced)
        tag = f"trace-{name}-prefill-b{traced[0]}x{traced[1]}"
        result["traces"].append(su.trace_point(env, p, out, tag, False))
        del model, pts, p
        env.fresh_memory()
    (out / "moe-prefill.json").write_text(json.dumps(result, indent=1, default=str))
    print(su.summary_table(result["records"]))


if __name__ == "__main__":
    main()
