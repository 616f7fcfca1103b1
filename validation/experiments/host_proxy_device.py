"""Does the host profile's small-model proxy slow down when the real 8B eager step does?

The host profile prices an eager decode step from two small HF Llama models (2 and 10 layers,
``gpumodel.validate.host._hf_model``): step = intercept + 32 x slope. On the H100 VMs the real
Llama-3-8B eager decode step's host time moves between ~21 and ~40 ms within seconds, and a
pure-Python loop slows with it (host_modes_device.py): the vCPU runs slower at times. If the
proxy slows by the same factor at the same moments, a profile is right on average and misses
only by when it sampled; if not, the proxy itself is biased. This interleaves, round by round
in one process, the proxy's calls (10 of each small model) and 5 calls of the full 32-layer
8B-width model (batch 1, a 512-token DynamicCache cut back after each call), each call timed
with perf_counter + synchronize, and records per round the 8B's median call beside the
proxy's prediction of it. Only reads.

    python3 validation/experiments/host_proxy_device.py --out proxy.json --seconds 60
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from host_gap_device import build, make_case
from host_modes_device import probe_s


def timed_calls(torch, fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    import torch

    from gpumodel.validate.host import HF_MODEL_LAYERS, _hf_model

    lo, hi = HF_MODEL_LAYERS
    small = {n: _hf_model(torch, "cuda", n) for n in (lo, hi)}
    cfg, model = build(torch, "8b", 32)
    big = make_case(torch, cfg, model, 1, 512, grow=False)
    for fn in (*small.values(), big):
        for _ in range(5):
            fn()
    torch.cuda.synchronize()
    rounds = []
    t_end = time.perf_counter() + args.seconds
    while time.perf_counter() < t_end:
        t = time.perf_counter()
        s_lo = statistics.median(timed_calls(torch, small[lo], 10))
        s_hi = statistics.median(timed_calls(torch, small[hi], 10))
        b = statistics.median(timed_calls(torch, big, 5))
        layer = max((s_hi - s_lo) / (hi - lo), 0.0)
        step = max(s_lo - lo * layer, 0.0)
        rounds.append({"t": round(t, 4), "small_lo_s": s_lo, "small_hi_s": s_hi, "big_s": b,
                       "proxy_big_s": step + 32 * layer, "probe_s": probe_s()})  # fmt: skip
    ratio = [r["big_s"] / r["proxy_big_s"] for r in rounds]
    bigs = [r["big_s"] for r in rounds]
    his = [r["small_hi_s"] for r in rounds]

    def q(xs, p):
        xs = sorted(xs)
        return xs[int(p * (len(xs) - 1))]

    summary = {
        "rounds": len(rounds),
        "big_ms_p10_p50_p90": [round(q(bigs, p) * 1e3, 3) for p in (0.1, 0.5, 0.9)],
        "small_hi_ms_p10_p50_p90": [round(q(his, p) * 1e3, 3) for p in (0.1, 0.5, 0.9)],
        "big_over_proxy_p10_p50_p90": [round(q(ratio, p), 3) for p in (0.1, 0.5, 0.9)],
        "big_over_its_median_p10_p90": [round(q(bigs, p) / q(bigs, 0.5), 3) for p in (0.1, 0.9)],
        "corr_big_small_hi": round(
            statistics.correlation(bigs, his) if len(rounds) > 2 else float("nan"), 3
        ),
    }
    print(json.dumps(summary), flush=True)
    result = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
              "summary": summary, "rounds": rounds}  # fmt: skip
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
