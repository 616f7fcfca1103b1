#!/usr/bin/env python3
"""Fit data (device): which kernel PyTorch's softmax and log_softmax take over a long row, and
their forward and backward times, around the limits that decide it (a block holds the row in
registers up to 9,216 columns, else in shared memory while it fits and is whole 16-byte
vectors; any other row is read three times: ``gpumodel.ops.Softmax.reads_per_element``).

Each point: the forward's and the backward's kernel names from ``torch.profiler``, and their
times by CUDA events over back-to-back loops (median of 5 loops of 20 calls) on ~64M-element
inputs, large enough that no L2 holds them. Standalone: imports torch only.

usage: python validation/fitset/softmax_rows_device.py OUT.json
"""

from __future__ import annotations

import json
import platform
import statistics
import sys

import torch
import torch.nn.functional as F

ELEMENTS = 1 << 26
COLUMNS = {
    "fp32": (8192, 9216, 10240, 12_000, 12_256, 16_384, 32_000, 50_257, 128_256),
    "bf16": (8192, 10_001, 16_384, 24_504, 24_512, 32_000, 50_257, 128_256),
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def timed(fn, loops: int = 5, calls: int = 20) -> float:
    """Median seconds per call."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(loops):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(times)


def kernels(fn) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})


def short(names: list[str]) -> list[str]:
    return [n.split("<")[0].split("::")[-1] for n in names]


def point(kind: str, rows: int, cols: int, dtype: str) -> dict:
    x = torch.randn(rows, cols, device="cuda", dtype=DTYPES[dtype])
    forward = F.log_softmax if kind == "log_softmax" else F.softmax
    y = forward(x, dim=-1)
    dy = torch.randn_like(y)
    backward = (torch.ops.aten._log_softmax_backward_data if kind == "log_softmax"
                else torch.ops.aten._softmax_backward_data)  # fmt: skip

    def fwd():
        return forward(x, dim=-1)

    def bwd():
        return backward(dy, y, -1, x.dtype)

    row = {"op": kind, "rows": rows, "cols": cols, "dtype": dtype,
           "forward_kernels": kernels(fwd), "backward_kernels": kernels(bwd),
           "forward_s": timed(fwd), "backward_s": timed(bwd)}  # fmt: skip
    return row


def main() -> int:
    out = sys.argv[1]
    props = torch.cuda.get_device_properties(0)
    result = {
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "shared_memory_per_block": getattr(props, "shared_memory_per_block", None),
        "host": platform.node(), "points": [],
    }  # fmt: skip
    for dtype, cols_list in COLUMNS.items():
        for cols in cols_list:
            for kind in ("softmax", "log_softmax"):
                row = point(kind, max(1, ELEMENTS // cols), cols, dtype)
                result["points"].append(row)
                torch.cuda.empty_cache()
                print(f"{kind} {row['rows']}x{cols} {dtype}: fwd {row['forward_s'] * 1e6:.1f} us "
                      f"{short(row['forward_kernels'])}, bwd {row['backward_s'] * 1e6:.1f} us "
                      f"{short(row['backward_kernels'])}", flush=True)  # fmt: skip
    # the losses of the training fit set and the unseen steps (HF: fp32 logits)
    for rows, cols in ((4096, 50_257), (8192, 32_000), (4096, 128_256), (8192, 128_256)):
        result["points"].append(point("log_softmax", rows, cols, "fp32"))
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
