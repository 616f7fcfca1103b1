// Pointer-chase latency kernel for gpumodel's validation runner (gpumodel/validate/families/latency.py).
//
// One thread follows a random cyclic permutation: buf[p] holds the index (in 8-byte words) of
// the next node, so every load depends on the one before and nothing overlaps. `warm` steps
// first (to load the cache levels the working set fits in), then `steps` timed steps between two
// reads of the SM cycle counter (clock64) and of the global nanosecond timer.
// out[0] = cycles, out[1] = nanoseconds, out[2] = final index (keeps the chain live).

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void pointer_chase(const unsigned long long* buf,
                                         long long warm,
                                         long long steps,
                                         unsigned long long start,
                                         long long* out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    unsigned long long p = start;
    for (long long i = 0; i < warm; ++i) p = buf[p];
    const unsigned long long g0 = global_ns();
    const long long c0 = clock64();
#pragma unroll 8
    for (long long i = 0; i < steps; ++i) p = buf[p];
    const long long c1 = clock64();
    const unsigned long long g1 = global_ns();
    out[0] = c1 - c0;
    out[1] = (long long)(g1 - g0);
    out[2] = (long long)p;
}
