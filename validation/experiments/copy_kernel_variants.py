"""Device-to-device copy: the validation harness's copy kernel variants against cudaMemcpy.

Variants: plain grid-stride float4; four loads in flight; streaming cache hints; one contiguous
chunk per block; eight streaming loads in flight; contiguous 8 KiB per warp; one element per
thread over a grid that covers the array (no grid-stride loop), as CuPy's elementwise kernels. Issue: "the
harness's measured copy bandwidth within 5% of the best device-to-device copy you can get on
that GPU". Each variant copies a 1 GiB (and 256 MiB) float4 array; bandwidth counts bytes
read + written; median of 20 CUDA-event-timed runs after warm-up, L2 flushed by the sheer size.
Run on a GPU machine: ``python validation/experiments/copy_kernel_variants.py``.
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
extern "C" __global__ void __launch_bounds__(256, 4) ilp8cs(const float4* __restrict__ s, float4* __restrict__ d, long long n) {
    // eight streaming (evict-first) 16-byte loads in flight per thread, then their stores
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 7 * stride < n; i += 8 * stride) {
        float4 v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __ldcs(&s[i + j * stride]);
#pragma unroll
        for (int j = 0; j < 8; ++j) __stcs(&d[i + j * stride], v[j]);
    }
    for (; i < n; i += stride) __stcs(&d[i], __ldcs(&s[i]));
}
extern "C" __global__ void __launch_bounds__(256, 4) warpchunk(const float4* __restrict__ s, float4* __restrict__ d, long long n) {
    // each warp copies contiguous 8 KiB chunks: 16 loads of 16 B per lane in flight, then stores
    const int lane = threadIdx.x & 31;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    const long long chunks = n / 512;
    for (long long c = warp; c < chunks; c += warps) {
        const long long base = c * 512 + lane;
        float4 v[16];
#pragma unroll
        for (int j = 0; j < 16; ++j) v[j] = __ldcs(&s[base + j * 32]);
#pragma unroll
        for (int j = 0; j < 16; ++j) __stcs(&d[base + j * 32], v[j]);
    }
    for (long long i = chunks * 512 + warp * 32 + lane; i < n; i += warps * 32) d[i] = s[i];
}
extern "C" __global__ void __launch_bounds__(256) onepass(const float4* __restrict__ s, float4* __restrict__ d, long long n) {
    // one 16-byte element per thread, one thread per element: the block scheduler walks memory
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = s[i];
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
        ms = time_ms(lambda s=src, d=dst: cp.copyto(d, s))
        print(
            f"{nbytes >> 20} MiB  cupy.copyto (CuPy's elementwise kernel): "
            f"{moved / ms / 1e6:7.0f} GB/s ({moved / ms / 1e6 / best:.3f} of cudaMemcpy)"
        )
        k = mod.get_function("onepass")
        dst.fill(0)
        args = (src, dst, np.int64(n4))
        ms = time_ms(lambda k=k, a=args, g=((n4 + 255) // 256,): k(g, (256,), a))
        gbs = moved / ms / 1e6
        print(
            f"{nbytes >> 20} MiB  onepass   one float4 per thread, {(n4 + 255) // 256} blocks: "
            f"{gbs:7.0f} GB/s ({gbs / best:.3f} of cudaMemcpy) correct={bool(cp.array_equal(src, dst))}"
        )
        for name in ("plain", "ilp4", "streaming", "chunked", "ilp8cs", "warpchunk"):
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
