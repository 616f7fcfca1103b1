"""How fast do a few NCCL-sized thread blocks copy? A check on the ring's receive-only step.

gpumodel prices the last, receive-only step of each NCCL ring loop at NCCL's per-channel Simple
rate (38.7 GB/s per channel on Hopper, ``gpumodel.model.comm``). If that step were a plain
local copy done by the channels' blocks, C blocks of 512 threads, each thread keeping
8 x 16 bytes in flight (NCCL's ``ncclCollUnroll`` on sm_80+), would copy at about that rate.
This measures such a copy on one GPU for C = 1 .. 32 blocks (a 512 MiB buffer, CUDA events,
median of 7) and prints GB/s per block. Far above 38.7 GB/s means the step's cost is not its copy
(as the one-process NCCL run in validation/results/h200-sxm-x2/drain-test/ also suggests).

    python3 validation/experiments/channel_copy_device.py --out channel-copy.json
"""

from __future__ import annotations

import argparse
import json
import statistics

KERNEL = r"""
extern "C" __global__ void block_copy(const int4* __restrict__ src, int4* __restrict__ dst,
                                      long long n) {
    // Each block walks its own contiguous slice, 8 x 16 B per thread in flight per round.
    const int UNROLL = 8;
    long long per_block = (n + gridDim.x - 1) / gridDim.x;
    long long start = (long long)blockIdx.x * per_block;
    long long end = min(start + per_block, n);
    long long stride = (long long)blockDim.x * UNROLL;
    for (long long base = start + threadIdx.x; base < end; base += stride) {
        int4 v[UNROLL];
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            long long i = base + (long long)u * blockDim.x;
            if (i < end) v[u] = src[i];
        }
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            long long i = base + (long long)u * blockDim.x;
            if (i < end) dst[i] = v[u];
        }
    }
}
"""


def main() -> None:
    import cupy as cp

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--mib", type=int, default=512)
    args = ap.parse_args()
    kernel = cp.RawKernel(KERNEL, "block_copy")
    n16 = args.mib * 2**20 // 16
    src = cp.ones(n16 * 4, dtype=cp.int32)
    dst = cp.zeros_like(src)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    rows = []
    for blocks in (1, 2, 4, 8, 16, 24, 32, 64, 132):
        times = []
        for rep in range(8):
            start.record()
            kernel((blocks,), (512,), (src, dst, cp.int64(n16)))
            stop.record()
            stop.synchronize()
            if rep:  # the first is a warm-up
                times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
        t = statistics.median(times)
        copied = n16 * 16
        row = {"blocks": blocks, "threads": 512, "bytes_copied": copied, "time_s": t,
               "copy_GBps": copied / t / 1e9, "per_block_GBps": copied / t / 1e9 / blocks}  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    assert bool((dst[:16] == 1).all())
    props = cp.cuda.runtime.getDeviceProperties(0)
    info = {"device": props["name"].decode(), "cupy": cp.__version__,
            "driver": cp.cuda.runtime.driverGetVersion()}  # fmt: skip
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"info": info, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
