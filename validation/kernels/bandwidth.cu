// Streaming-bandwidth kernels for gpumodel's validation runner (gpumodel/validate/families/bandwidth.py).
//
// All four move 16-byte vectors (float4) through a grid-stride loop. The runner launches one
// thread per float4 for write, copy and triad (each thread runs one iteration) and 8 blocks of
// 256 threads per SM for read (its per-block partials). n4 counts float4 elements.
//   bw_read  : sum of all elements (1 add per float): per-block partials, then the last block to
//              finish adds the partials (threadfence-reduction pattern, one launch in all)
//   bw_write : a[i] = v
//   bw_copy  : dst[i] = src[i]
//   bw_triad : a[i] = b[i] + s * c[i]  (STREAM triad: 2 FLOPs per float)

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// Sum over the block; the result is valid in thread 0. blockDim.x must be a multiple of 32.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_partials[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) warp_partials[warp] = v;
    __syncthreads();
    const int nwarps = blockDim.x >> 5;
    v = (threadIdx.x < nwarps) ? warp_partials[threadIdx.x] : 0.0f;
    if (warp == 0) v = warp_sum(v);
    __syncthreads();
    return v;
}

extern "C" __global__ void __launch_bounds__(256, 8) bw_read(const float4* __restrict__ a,
                                   long long n4,
                                   float* __restrict__ partials,
                                   unsigned int* __restrict__ counter,
                                   float* __restrict__ result) {
    float acc = 0.0f;
    const long long stride = (long long)gridDim.x * blockDim.x;
#pragma unroll 4
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        const float4 v = a[i];
        acc += (v.x + v.y) + (v.z + v.w);
    }
    acc = block_sum(acc);
    __shared__ bool is_last;
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = acc;
        __threadfence();
        const unsigned int done = atomicAdd(counter, 1u);
        is_last = (done == gridDim.x - 1);
    }
    __syncthreads();
    if (is_last) {
        float s = 0.0f;
        for (unsigned int b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
            s += ((volatile float*)partials)[b];
        }
        s = block_sum(s);
        if (threadIdx.x == 0) {
            result[0] = s;
            *counter = 0u;  // ready for the next launch
        }
    }
}

extern "C" __global__ void __launch_bounds__(256, 8) bw_write(float4* __restrict__ a, long long n4, float v) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const float4 val = make_float4(v, v, v, v);
#pragma unroll 4
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        a[i] = val;
    }
}

extern "C" __global__ void __launch_bounds__(256, 8) bw_copy(const float4* __restrict__ src,
                                   float4* __restrict__ dst,
                                   long long n4) {
    const long long stride = (long long)gridDim.x * blockDim.x;
#pragma unroll 4
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        dst[i] = src[i];
    }
}

extern "C" __global__ void __launch_bounds__(256, 8) bw_triad(float4* __restrict__ a,
                                    const float4* __restrict__ b,
                                    const float4* __restrict__ c,
                                    float s,
                                    long long n4) {
    const long long stride = (long long)gridDim.x * blockDim.x;
#pragma unroll 4
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        const float4 bv = b[i];
        const float4 cv = c[i];
        a[i] = make_float4(bv.x + s * cv.x, bv.y + s * cv.y, bv.z + s * cv.z, bv.w + s * cv.w);
    }
}
