"""Does the host profile's own torch.compile step inflate its eager figures?

`gpumodel validate --host-only` compiles a small module (torch.compile reduce-overhead) before
its interleaved rounds. This measures the profile in fresh child processes with and without
that compile step, alternately, and the full Llama-3-8B eager decode forward (batch 8, 2048
tokens, the cache cut back after each call) in a fresh process, as a user's step. Only reads.

    python3 validation/experiments/profile_order_device.py --out order.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

PROFILE = """
import json, sys
from gpumodel.validate.host import measure_host_profile
p = measure_host_profile(compile_step={compile})
print(json.dumps({{k: p[k] for k in ("hf_model_step_s", "hf_model_layer_s",
                                     "hf_decoder_layer_s", "host_drift") if k in p}}))
"""

STEP = """
import json, statistics, sys
sys.path.insert(0, "validation/experiments")
import torch
from host_gap_device import build, make_case, sample
cfg, model = build(torch, "8b", 32)
step = make_case(torch, cfg, model, 8, 2048, grow=False)
for _ in range(3):
    step()
host = [sample(torch, step, 10)[0] for _ in range(7)]
print(json.dumps({"host_s_median": statistics.median(host), "host_s": host}))
"""


def child(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--pairs", type=int, default=2)
    args = ap.parse_args()
    runs = []
    for i in range(args.pairs):
        for compile_step in (True, False):
            r = child(PROFILE.format(compile=compile_step))
            r["compile_step"] = compile_step
            runs.append(r)
            print(f"profile compile={compile_step}: layer {r['hf_model_layer_s'] * 1e6:.0f} us, "
                  f"own {r['hf_model_step_s'] * 1e6:.0f} us, drift {r.get('host_drift')}",
                  flush=True)  # fmt: skip
        s = child(STEP)
        s["step"] = i
        runs.append(s)
        print(f"8B decode forward b8 x 2048, fresh process: {s['host_s_median'] * 1e3:.2f} ms",
              flush=True)  # fmt: skip
    with open(args.out, "w") as f:
        json.dump(runs, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
