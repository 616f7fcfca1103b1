// Helper kernels for gpumodel/validate/timing.py and the launch-overhead measurement.
//   spin_ns        : one thread busy-waits `ns` nanoseconds on the global timer. Queued ahead of
//                    the start event, it keeps the GPU busy while the host enqueues the timed
//                    work, so host-side launch overhead stays out of event-timed intervals.
//   l2_flush_read  : reads a buffer larger than L2 (evicting what was cached) and writes nothing
//                    unless the sum hits an impossible value, so no dirty lines are left behind
//                    whose write-back would be charged to the next timed kernel.
//   empty_kernel   : does nothing; its launch is the cost measured.

extern "C" __global__ void spin_ns(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while ((long long)(t - t0) < ns);
}

extern "C" __global__ void __launch_bounds__(256, 8) l2_flush_read(const float4* __restrict__ buf,
                                         long long n4,
                                         float* __restrict__ sink) {
    float acc = 0.0f;
    const long long stride = (long long)gridDim.x * blockDim.x;
#pragma unroll 4
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        const float4 v = buf[i];
        acc += (v.x + v.y) + (v.z + v.w);
    }
    if (acc == -1.2345e-30f) sink[0] = acc;
}

extern "C" __global__ void empty_kernel() {}
