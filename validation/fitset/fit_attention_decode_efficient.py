#!/usr/bin/env python3
"""Fit ``EFFICIENT_DECODE_CYCLES_PER_KEY`` and ``EFFICIENT_DECODE_BLOCKS_PER_SM``
(gpumodel/ops/attention.py): the memory-efficient SDPA kernel's decode as a serial loop.

The fit set: validation/results/h200-sxm/sdpa-decode-efficient-2026-12-01 (experiments/
sdpa_decode_efficient_device.py): the kernel forced, one query per sequence, blocks (batch x
heads) 8-2048, KV 512-16K, head dims 64/128/256, bf16 and fp32, replayed from a CUDA graph.
Per kernel (dtype class x head-dim class), the H200's shipped calibration prices each point
without the loop (its floor and its bandwidth-bound core), then the loop's SM cycles per key
and blocks per SM are scanned (cycles 20-600 in 1% steps, blocks per SM 0.5-4 in 0.05 steps)
for the smallest mean |log error| of floor + max(core, loop) (a median let half the
points of a kernel go). The unseen SDPA rows are never
read.

    PYTHONPATH=. python validation/fitset/fit_attention_decode_efficient.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import gpumodel as gm  # noqa: E402
from gpumodel.calibration import default_calibration  # noqa: E402
from gpumodel.ops import attention  # noqa: E402

FIT_SET = (ROOT / "validation/results/h200-sxm/sdpa-decode-efficient-2026-12-01/"
           "sdpa-decode-efficient.json")  # fmt: skip
FLOOR_TERMS = ("launch floor", "in-graph floor", "first DRAM load")
CYCLES = 20.0 * 1.01 ** np.arange(345)  # 20 ... ~620
PER_SM = np.arange(0.5, 4.0001, 0.05)


def points() -> dict[tuple[str, int], list[tuple[gm.ops.Attention, float]]]:
    out: dict[tuple[str, int], list] = {}
    for r in json.loads(FIT_SET.read_text())["records"]:
        if "graph_s" not in r:
            continue
        s = r["shape"]
        op = gm.ops.Attention(batch=s["batch"], heads=s["heads"], seq=1, kv_seq=s["kv_seq"],
                              head_dim=s["head_dim"], dtype=r["dtype"], impl="efficient")  # fmt: skip
        out.setdefault(attention.efficient_decode_key(r["dtype"], s["head_dim"]), []).append(
            (op, r["graph_s"]))
    return out


def parts(op, gpu, cal) -> tuple[float, float]:
    """(floor, core) of the point priced without the loop."""
    p = gm.predict(op, gpu, cal, condition="in-graph")
    floor = sum(t.value for k in p.kernels for t in k.terms if t.name in FLOOR_TERMS)
    return floor, p.time_s - floor


def main() -> int:
    gpu = gm.get_gpu("h200")
    cal = default_calibration(gpu)
    shipped = (dict(attention.EFFICIENT_DECODE_CYCLES_PER_KEY),
               dict(attention.EFFICIENT_DECODE_BLOCKS_PER_SM))
    for key in attention.EFFICIENT_DECODE_CYCLES_PER_KEY:  # priced without the loop
        attention.EFFICIENT_DECODE_CYCLES_PER_KEY[key] = 0.0
    fitted = {}
    for key, data in sorted(points().items()):
        floor, core = np.array([parts(op, gpu, cal) for op, _ in data]).T
        meas = np.array([t for _, t in data])
        keys = np.array([op.n_kv_seq for op, _ in data], dtype=float)
        blocks = np.array([op.batch * op.heads for op, _ in data], dtype=float)
        # every (cycles, blocks per SM) at once: points on the last axis
        waves = np.maximum(1.0, blocks / (PER_SM[None, :, None] * gpu.sm_count))
        loop = CYCLES[:, None, None] * keys / gpu.boost_clock_hz * waves
        err = np.abs(np.log((floor + np.maximum(core, loop)) / meas))
        score = np.mean(err, axis=-1)
        i, j = np.unravel_index(np.argmin(score), score.shape)
        before = np.mean(np.abs(np.log((floor + core) / meas)))
        fitted[key] = (round(float(CYCLES[i]), 1), round(float(PER_SM[j]), 2))
        print(f"{key}: {len(data)} points; mean |log error| without the loop {100 * before:.1f}% -> "
              f"{100 * score[i, j]:.1f}% (max {100 * err[i, j].max():.1f}%) at "
              f"{fitted[key][0]} cycles a key, {fitted[key][1]} blocks per SM")
    attention.EFFICIENT_DECODE_CYCLES_PER_KEY.update(shipped[0])
    print("fitted:", fitted)
    print("shipped:", {k: (shipped[0][k], shipped[1][k]) for k in shipped[0]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
