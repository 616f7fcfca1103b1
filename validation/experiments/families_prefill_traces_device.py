"""Two prefill points of the families set that the model missed on H200 run 2 and 3 (Qwen3-8B
at 1 x 512: 59.9 ms measured, 35.4 priced; Phi-3-mini at 3 x 2047, its window: 156.3 ms, 139.7
priced), timed again on a fresh VM beside neighbours that were priced well, each traced once.
A diagnostic for the model's next change, not a scored set. Uses the unseen-steps harness.

    python validation/experiments/families_prefill_traces_device.py --out DIR
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
    plans = [("qwen3-8b", su.qwen3_8b_config(args.tiny), [(1, 512), (1, 1024), (1, 256)], (1, 512)),
             ("phi-3-mini", su.phi3_mini_config(args.tiny), [(3, 2047), (3, 2046), (1, 4000)],
              (3, 2047))]  # fmt: skip
    if args.tiny:
        plans = [(n, c, [(1, 16), (2, 32)], (1, 16)) for n, c, _, _ in plans]
    result: dict = {"env": su.env_info(env), "records": [], "traces": []}
    for name, cfg, grid, traced in plans:
        model = su.build_causal_lm(env, cfg, torch.bfloat16).eval()
        pts = su.prefill_points_eager(env, model, cfg, grid, name)
        su.run_round_robin(env, pts, 4, 2, 5, su.time.perf_counter() + 60)
        result["records"] += [p.record() for p in pts]
        p = next(p for p in pts if (p.key["batch"], p.key["seq"]) == traced)
        tag = f"trace-{name}-prefill-b{traced[0]}x{traced[1]}"
        result["traces"].append(su.trace_point(env, p, out, tag, False))
        del model, pts
        env.fresh_memory()
    (out / "families-prefill.json").write_text(json.dumps(result, indent=1, default=str))
    print(su.summary_table(result["records"]))


if __name__ == "__main__":
    main()
