#!/usr/bin/env python3
"""Which kernels cuDNN runs for ResNet's stem (3 input channels) in each layout and precision.

A device experiment (2026-12-01): F.conv2d(3 -> 64, 7x7, stride 2, pad 3) on 224x224 images,
NCHW and channels-last, bf16 / TF32 / fp32, batches 1, 8, 32 and 128, with
``torch.backends.cudnn.benchmark = True`` (set before the first convolution, as a tuned job
does). For each point: the median of 50 back-to-back calls timed with CUDA events, and a
torch.profiler record of 3 calls giving every kernel a call launches, with its GPU time. The
model prices an NCHW bf16/TF32 stem as transposes around the channels-last kernel; the
validate records say otherwise at batch 1 (NCHW as fast as channels-last, no transposes' cost)
and at 32-128 (NCHW 1.4x channels-last, more than the transposes' traffic). This records what
runs, for the rule to be written from; it is a fit set, never an unseen one.

usage (device): python validation/experiments/stem_kernels_device.py --out $OUT/stem-kernels.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time


def main() -> None:
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    records = []
    t_start = time.time()
    for dtype_name in ("bf16", "tf32", "fp32"):
        dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
        torch.backends.cudnn.allow_tf32 = dtype_name == "tf32"
        for layout in ("nchw", "channels_last"):
            for batch in (1, 8, 32, 128):
                x = torch.randn(batch, 3, 224, 224, device=dev, dtype=dtype)
                w = torch.randn(64, 3, 7, 7, device=dev, dtype=dtype)
                if layout == "channels_last":
                    x = x.to(memory_format=torch.channels_last)
                    w = w.to(memory_format=torch.channels_last)
                for _ in range(5):  # benchmark mode tries its algorithms on the first call
                    F.conv2d(x, w, stride=2, padding=3)
                torch.cuda.synchronize()
                times = []
                for _ in range(5):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    for _ in range(10):
                        F.conv2d(x, w, stride=2, padding=3)
                    b.record()
                    b.synchronize()
                    times.append(a.elapsed_time(b) / 10 * 1e-3)
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(3):
                        F.conv2d(x, w, stride=2, padding=3)
                    torch.cuda.synchronize()
                kernels = [{"name": e.name, "us": e.device_time}
                           for e in prof.events() if e.device_time > 0]  # fmt: skip
                records.append({"dtype": dtype_name, "layout": layout, "batch": batch,
                                "time_s_median": statistics.median(times), "times_s": times,
                                "kernels_per_call": len(kernels) / 3,
                                "kernels": kernels[: len(kernels) // 3 or len(kernels)]})  # fmt: skip
                print(f"{dtype_name} {layout} b{batch}: {statistics.median(times) * 1e6:.1f} us, "
                      f"{len(kernels) / 3:g} kernels a call: "
                      + "; ".join(f"{k['name'][:60]} {k['us']:.1f}" for k in records[-1]["kernels"]),
                      flush=True)  # fmt: skip
    doc = {"what": __doc__.split("\n")[0], "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "host": platform.node(), "seconds": time.time() - t_start, "records": records}  # fmt: skip
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
