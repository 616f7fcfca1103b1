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


def traced_prefills(env, plans, out: Path, name: str, rounds: int = 4, seconds: float = 60) -> None:
    """Time each plan's prefill points in rounds, trace one of them, write ``name``.json:
    plans are (model, config, [(batch, seq)...], the (batch, seq) traced)."""
    import torch

    result: dict = {"env": su.env_info(env), "records": [], "traces": []}
    for model_name, cfg, grid, traced in plans:
        model = su.build_causal_lm(env, cfg, torch.bfloat16).eval()
        pts = su.prefill_points_eager(env, model, cfg, grid, model_name)
        su.run_round_robin(env, pts, rounds, 2, 5, su.time.perf_counter() + seconds)
        result["records"] += [p.record() for p in pts]
        p = next(p for p in pts if (p.key["batch"], p.key["seq"]) == traced)
        tag = f"trace-{model_name}-prefill-b{traced[0]}x{traced[1]}"
        result["traces"].append(su.trace_point(env, p, out, tag, False))
        del model, pts, p
        env.fresh_memory()
    (out / f"{name}.json").write_text(json.dumps(result, indent=1, default=str))
    print(su.summary_table(result["records"]))


def traced_prefills_cli(plans_of, name: str, tiny_traced: tuple[int, int], **kw) -> None:
    """``--out DIR [--tiny]``: ``traced_prefills`` of ``plans_of(tiny)`` (tiny: the CPU smoke
    test's grid, 1 x 16 and 2 x 32, tracing ``tiny_traced``)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plans = plans_of(args.tiny)
    if args.tiny:
        plans = [(n, c, [(1, 16), (2, 32)], tiny_traced) for n, c, _, _ in plans]
    traced_prefills(su.Env(args.tiny), plans, out, name, **kw)


def main() -> None:
    traced_prefills_cli(lambda tiny: [
        ("qwen3-8b", su.qwen3_8b_config(tiny), [(1, 512), (1, 1024), (1, 256)], (1, 512)),
        ("phi-3-mini", su.phi3_mini_config(tiny), [(3, 2047), (3, 2046), (1, 4000)], (3, 2047)),
    ], "families-prefill", (1, 16))  # fmt: skip


if __name__ == "__main__":
    main()
