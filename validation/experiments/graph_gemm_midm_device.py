"""Decode-step GEMMs at M = 48-224 replayed from a CUDA graph, against the same GEMMs in an eager loop.

Experiment for the mid-M decode steps that stay fast after the DRAM-power term (docs/llm-runtimes.md:
`hf-static-compiled` grid4's batch 96 x 512 -9.7%, `fused-graph` batch 64-96 -6 to -9%, the
Llama-3-70B tp-2 decode at batch 96-128 -6 to -14%). Not the unseen set: its own M values
(none of the unseen grids' batches), Llama-3-8B's four projection shapes, no whole step; never
scored against.

For each M, eight layers of their own bf16 weights (fused QKV 6144 x 4096, o 4096 x 4096, fused
gate/up 28672 x 4096, down 4096 x 14336), ``F.linear`` in layer order:

- ``graph``: captured once in a CUDA graph and replayed; per-kernel GPU durations (CUPTI, via
  torch.profiler), the replay's time (CUDA events), NVML SM clock and power during the replays;
- ``eager``: the same calls issued back to back without a graph, per-kernel durations likewise.

usage: python3 graph_gemm_midm_device.py --out FILE.json [--tiny]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

# this folder (first on sys.path)
from graph_attention_device import Sampler, kernel_durations, write_json

LAYERS = 8
SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
TINY_SHAPES = {"qkv": (96, 64), "o": (64, 64), "gate_up": (256, 64), "down": (64, 128)}
MS = (48, 80, 112, 160, 224)
TINY_MS = (8, 24)


def by_shape(ks: list[tuple[str, float]], names: list[str], splitk: bool = True) -> dict:
    """GEMM kernel durations (µs) grouped by projection in issue order: each call's main kernel
    plus any split-K reduction after it (cuBLAS launches it inside the same call)."""
    out: dict[str, list[float]] = {n: [] for n in names}
    kernels: dict[str, list[str]] = {n: [] for n in names}
    i = -1
    for name, d in ks:
        reduce = "splitKreduce" in name or "reduce_kernel" in name
        if not reduce:
            i += 1
            proj = names[i % len(names)]
            out[proj].append(d)
            kernels[proj].append(name[:90])
        elif i >= 0 and splitk:
            out[names[i % len(names)]][-1] += d
    return {n: {"median_us": statistics.median(v) if v else None, "n": len(v),
                "kernel": max(set(kernels[n]), key=kernels[n].count) if kernels[n] else None}
            for n, v in out.items()}  # fmt: skip


def measure_m(torch, m: int, shapes: dict, reps: int) -> dict:
    dev, dt = "cuda", torch.bfloat16
    names = list(shapes)
    ws = [{n: torch.randn(o, i, device=dev, dtype=dt) * 0.02 for n, (o, i) in shapes.items()}
          for _ in range(LAYERS)]  # fmt: skip
    xs = {n: torch.randn(m, i, device=dev, dtype=dt) for n, (o, i) in shapes.items()}
    outs = {n: torch.empty(m, o, device=dev, dtype=dt) for n, (o, i) in shapes.items()}

    def step():
        for layer in ws:
            for n in names:
                torch.matmul(xs[n], layer[n].t(), out=outs[n])

    with torch.no_grad():
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            step()
            torch.cuda.synchronize()
            with torch.cuda.graph(g, stream=s):
                step()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with Sampler() as samp:
            for _ in range(5):
                g.replay()
            start.record()
            for _ in range(reps):
                g.replay()
            end.record()
            torch.cuda.synchronize()
        replay_us = start.elapsed_time(end) * 1e3 / reps

        def replays():
            for _ in range(3):
                g.replay()

        def eager():
            for _ in range(3):
                step()

        gks = kernel_durations(replays, torch)
        eks = kernel_durations(eager, torch)
        start.record()
        for _ in range(reps):
            step()
        end.record()
        torch.cuda.synchronize()
        eager_us = start.elapsed_time(end) * 1e3 / reps
    return {"m": m, "layers": LAYERS, "shapes": {n: list(v) for n, v in shapes.items()},
            "graph_replay_us": replay_us, "eager_step_us": eager_us,
            "graph": by_shape(gks, names), "eager": by_shape(eks, names),
            "graph_kernels_per_replay": len(gks) / 3, "nvml_graph": samp.summary()}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--budget-s", type=float, default=120.0)
    args = ap.parse_args()
    import torch

    t0 = time.perf_counter()
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
              "cublas": "torch.matmul(x, W.t(), out=)", "points": [], "skipped": []}  # fmt: skip
    shapes = TINY_SHAPES if args.tiny else SHAPES
    for m in TINY_MS if args.tiny else MS:
        if time.perf_counter() - t0 > args.budget_s:
            result["skipped"].append(m)
            continue
        try:
            r = measure_m(torch, m, shapes, 3 if args.tiny else 20)
        except Exception as e:  # record and go on
            r = {"m": m, "error": repr(e)[:400]}
        result["points"].append(r)
        torch.cuda.empty_cache()
        print(json.dumps({"m": m, "graph_replay_us": r.get("graph_replay_us"),
                          "eager_step_us": r.get("eager_step_us"), "error": r.get("error")}),
              flush=True)  # fmt: skip
        write_json(args.out, result)
    result["elapsed_s"] = time.perf_counter() - t0
    write_json(args.out, result)


if __name__ == "__main__":
    sys.exit(main())
