// Kernels whose resource use spans the occupancy limits, for gpumodel.validate.occupancy_check.
//
// Nothing here is launched: the check compiles variants, reads each kernel's real register
// count and static shared memory (cuFuncGetAttribute NUM_REGS / SHARED_SIZE_BYTES) and asks the
// driver's cuOccupancyMaxActiveBlocksPerMultiprocessor for many block sizes and dynamic
// shared-memory sizes. Variants come from compile options:
//   --maxrregcount=N        caps registers per thread (occ_heavy wants ~N_ACC + 10 registers)
//   -DSTATIC_SMEM_BYTES=B   static __shared__ bytes (multiple of 4, at most 48 KiB)
//   -DN_ACC=K               live accumulators in occ_heavy (register demand)
//   -DVARIANT_TAG=T         makes otherwise identical sources distinct modules
// The bodies are still correct code, so a launch would run (n > 0, out and in of n floats).

#ifndef STATIC_SMEM_BYTES
#define STATIC_SMEM_BYTES 0
#endif
#ifndef N_ACC
#define N_ACC 160
#endif
#ifndef VARIANT_TAG
#define VARIANT_TAG 0
#endif

#if STATIC_SMEM_BYTES > 0
#define STATIC_FLOATS (STATIC_SMEM_BYTES / 4)
#endif

// Few registers; optional static shared memory; touches dynamic shared memory.
extern "C" __global__ void occ_light(float* __restrict__ out, const float* __restrict__ in, int n) {
    extern __shared__ float dyn[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = in[i % n] + (float)VARIANT_TAG;
#if STATIC_SMEM_BYTES > 0
    __shared__ float tile[STATIC_FLOATS];
    tile[threadIdx.x % STATIC_FLOATS] = v;
    __syncthreads();
    v += tile[(threadIdx.x + 1) % STATIC_FLOATS];
#endif
    if (n < 0) {  // never true; keeps the dynamic array referenced
        dyn[threadIdx.x] = v;
        v = dyn[threadIdx.x ^ 1];
    }
    if (i < n) out[i] = v;
}

// Register pressure: N_ACC accumulators that are all live across a loop.
extern "C" __global__ void occ_heavy(float* __restrict__ out, const float* __restrict__ in, int n) {
    extern __shared__ float dyn[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc[N_ACC];
#pragma unroll
    for (int j = 0; j < N_ACC; ++j) acc[j] = in[(i + j * 977) % n];
    for (int it = 0; it < (n & 7) + 2; ++it) {
#pragma unroll
        for (int j = 0; j < N_ACC; ++j) acc[j] = fmaf(acc[j], acc[(j + 1) % N_ACC], 1.0f);
    }
    float s = (float)VARIANT_TAG;
#pragma unroll
    for (int j = 0; j < N_ACC; ++j) s += acc[j];
#if STATIC_SMEM_BYTES > 0
    __shared__ float tile[STATIC_FLOATS];
    tile[threadIdx.x % STATIC_FLOATS] = s;
    __syncthreads();
    s += tile[(threadIdx.x + 1) % STATIC_FLOATS];
#endif
    if (n < 0) {
        dyn[threadIdx.x] = s;
        s = dyn[threadIdx.x ^ 1];
    }
    if (i < n) out[i] = s;
}

// __launch_bounds__(256, 4): at most 256 threads, and the compiler keeps registers low enough
// for 4 blocks per SM (65536 / (256 x 4) = 64 registers).
extern "C" __global__ void __launch_bounds__(256, 4)
occ_bounded(float* __restrict__ out, const float* __restrict__ in, int n) {
    extern __shared__ float dyn[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc[N_ACC];
#pragma unroll
    for (int j = 0; j < N_ACC; ++j) acc[j] = in[(i + j * 131) % n];
    for (int it = 0; it < (n & 3) + 2; ++it) {
#pragma unroll
        for (int j = 0; j < N_ACC; ++j) acc[j] = fmaf(acc[j], acc[(j + 3) % N_ACC], 0.5f);
    }
    float s = (float)VARIANT_TAG;
#pragma unroll
    for (int j = 0; j < N_ACC; ++j) s += acc[j];
    if (n < 0) {
        dyn[threadIdx.x] = s;
        s = dyn[threadIdx.x ^ 1];
    }
    if (i < n) out[i] = s;
}

// __launch_bounds__(96): an odd per-kernel thread limit (3 warps).
extern "C" __global__ void __launch_bounds__(96)
occ_bounded96(float* __restrict__ out, const float* __restrict__ in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 2.0f + (float)VARIANT_TAG;
}
