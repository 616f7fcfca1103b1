"""Device-to-device copy: the validation harness's copy kernel variants against cudaMemcpy.

Issue: "the harness's measured copy bandwidth within 5% of the best device-to-device copy you can
get on that GPU". Each variant copies a 1 GiB (and 256 MiB) float4 array; bandwidth counts bytes
read + written; median of 20 CUDA-event-timed runs after warm-up, L2 flushed by the sheer size.
Run on a GPU machine: ``python benchmarks/copy_kernel_variants.py``.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

SRC = r"""
extern "C" __global__ void __launch_bounds__(256, 8) plain(const float4* __restrict__ s, float4* __restrict__ d, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) d[i] = s[i];
}
extern "C" __global__ void __launch_bounds__(256, 8) ilp4(const float4* __restrict__ s, float4* __restrict__ d, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        float4 a = s[i], b = s[i + stride], c = s[i + 2 * stride], e = s[i + 3 * stride];
        d[i] = a; d[i + stride] = b; d[i + 2 * stride] = c; d[i + 3 * stride] = e;
    }
    for (; i < n; i += stride) d[i] = s[i];
}
extern "C" __global__ void __launch_bounds__(256, 8) streaming(const float4* __restrict__ s, float4* __restrict__ d, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) __stcs(&d[i], __ldcs(&s[i]));
}
extern "C" __global__ void __launch_bounds__(256, 8) chunked(const float4* __restrict__ s, float4* __restrict__ d, long long n) {
    // each block copies one contiguous chunk
    const long long per = (n + gridDim.x - 1) / gridDim.x;
    const long long lo = (long long)blockIdx.x * per;
    const long long hi = min(n, lo + per);
    for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) d[i] = s[i];
}
"""


def time_ms(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(times))


def main() -> None:
    mod = cp.RawModule(code=SRC)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), f"{sms} SMs")
    for nbytes in (256 << 20, 1 << 30):
        n4 = nbytes // 16
        src = cp.random.random(nbytes // 4, dtype=cp.float32)
        dst = cp.empty_like(src)
        moved = 2 * nbytes
        ms = time_ms(
            lambda s=src, d=dst, b=nbytes: cp.cuda.runtime.memcpyAsync(
                d.data.ptr, s.data.ptr, b, 3, 0
            )
        )
        best = moved / ms / 1e6
        print(f"{nbytes >> 20} MiB  cudaMemcpy d2d: {best:7.0f} GB/s")
        for name in ("plain", "ilp4", "streaming", "chunked"):
            for blocks_per_sm in (8, 4, 2):
                grid = (sms * blocks_per_sm,)
                k = mod.get_function(name)
                dst.fill(0)
                args = (src, dst, np.int64(n4))
                ms = time_ms(lambda k=k, g=grid, a=args: k(g, (256,), a))
                ok = bool(cp.array_equal(src, dst))
                gbs = moved / ms / 1e6
                print(
                    f"{nbytes >> 20} MiB  {name:9s} {blocks_per_sm} blocks/SM: {gbs:7.0f} GB/s "
                    f"({gbs / best:.3f} of cudaMemcpy) correct={ok}"
                )


if __name__ == "__main__":
    main()
