// Input and correctness-check kernels for gpumodel's validation runner
// (gpumodel/validate/cupy_engine.py). Compiled once with the runner's other kernels, so a first
// run on a fresh machine does not wait for CuPy to JIT-compile an elementwise or reduction
// kernel per check. All are grid-stride loops, any grid size is correct.
//   fill_uniform_{f32,f16,bf16}: counter-based (splitmix64) uniform numbers in [lo, hi)
//   gather_{u32,u16}           : out[i] = src[idx[i]], bit-exact (any 4- or 2-byte type)
//   count_nan_f32              : number of NaN elements (unwritten after a 0xFF poison)
//   count_nonfinite_u16        : number of 2-byte floats whose exponent bits are all set
//                                (mask 0x7C00 for fp16, 0x7F80 for bf16)
//   count_ne_f32 / count_ne_u32: elements != a value / bitwise differences between two arrays
//   sum_f64                    : sum of float32 elements accumulated in float64
//   triad_max_err              : max |a - (b + s c)| / |b + s c| in float64, as float bits
//   build_chain                : random cyclic pointer chain for latency.cu's pointer_chase

#define GRID_STRIDE(i, n)                                                              \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);     \
         i += (long long)gridDim.x * blockDim.x)

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ float uniform(unsigned long long seed, long long i, float lo, float hi) {
    const unsigned long long r = mix64(seed ^ mix64((unsigned long long)i));
    const float u = (float)(r >> 40) * (1.0f / 16777216.0f);  // 24 random bits in [0, 1)
    return lo + (hi - lo) * u;
}

extern "C" __global__ void fill_uniform_f32(float* out, long long n, unsigned long long seed,
                                            float lo, float hi) {
    GRID_STRIDE(i, n) out[i] = uniform(seed, i, lo, hi);
}

extern "C" __global__ void fill_uniform_f16(unsigned short* out, long long n,
                                            unsigned long long seed, float lo, float hi) {
    GRID_STRIDE(i, n) {
        const float f = uniform(seed, i, lo, hi);
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
        out[i] = h;
    }
}

extern "C" __global__ void fill_uniform_bf16(unsigned short* out, long long n,
                                             unsigned long long seed, float lo, float hi) {
    GRID_STRIDE(i, n) {
        const float f = uniform(seed, i, lo, hi);
        unsigned short h;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
        out[i] = h;
    }
}

extern "C" __global__ void gather_u32(const unsigned int* src, const long long* idx,
                                      unsigned int* out, long long count) {
    GRID_STRIDE(i, count) out[i] = src[idx[i]];
}

extern "C" __global__ void gather_u16(const unsigned short* src, const long long* idx,
                                      unsigned short* out, long long count) {
    GRID_STRIDE(i, count) out[i] = src[idx[i]];
}

__device__ __forceinline__ void add_count(unsigned long long c, unsigned long long* count) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) c += __shfl_down_sync(0xffffffffu, c, off);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(count, c);
}

extern "C" __global__ void count_nan_f32(const float* a, long long n, unsigned long long* count) {
    unsigned long long c = 0;
    GRID_STRIDE(i, n) c += isnan(a[i]) ? 1ull : 0ull;
    add_count(c, count);
}

extern "C" __global__ void count_nonfinite_u16(const unsigned short* a, long long n,
                                               unsigned int mask, unsigned long long* count) {
    unsigned long long c = 0;
    GRID_STRIDE(i, n) c += ((a[i] & mask) == mask) ? 1ull : 0ull;
    add_count(c, count);
}

extern "C" __global__ void count_ne_f32(const float* a, long long n, float v,
                                        unsigned long long* count) {
    unsigned long long c = 0;
    GRID_STRIDE(i, n) c += (a[i] == v) ? 0ull : 1ull;  // NaN counts as different
    add_count(c, count);
}

extern "C" __global__ void count_ne_u32(const unsigned int* a, const unsigned int* b, long long n,
                                        unsigned long long* count) {
    unsigned long long c = 0;
    GRID_STRIDE(i, n) c += (a[i] != b[i]) ? 1ull : 0ull;
    add_count(c, count);
}

extern "C" __global__ void sum_f64(const float* a, long long n, double* out) {
    double s = 0.0;
    GRID_STRIDE(i, n) s += (double)a[i];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, s);
}

extern "C" __global__ void triad_max_err(const float* a, const float* b, const float* c, float s,
                                         long long n, unsigned int* out_bits) {
    float m = 0.0f;
    GRID_STRIDE(i, n) {
        const double ref = (double)b[i] + (double)s * (double)c[i];
        const double e = fabs((double)a[i] - ref) / (fabs(ref) + 1e-30);
        m = fmaxf(m, isnan(e) ? 3.0e38f : (float)e);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, off));
    // non-negative floats order like their bit patterns as unsigned integers
    if ((threadIdx.x & 31) == 0) atomicMax(out_bits, __float_as_uint(m));
}

extern "C" __global__ void build_chain(unsigned long long* buf, const long long* order,
                                       long long nodes, long long words) {
    GRID_STRIDE(i, nodes) {
        const long long next = order[(i + 1 == nodes) ? 0 : i + 1];
        buf[order[i] * words] = (unsigned long long)(next * words);
    }
}
