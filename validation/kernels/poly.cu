// Roofline polynomial kernels for gpumodel's validation runner (gpumodel/validate/families/poly.py).
//
// compute_k_terms is the seed kernel (shared/seeds/000_*, "Roofline Analysis Polynomial Kernel")
// unchanged: b[i] = a[i] + a[i]^2 + ... + a[i]^k, one thread per element, k iterations of
// `result += power; power *= x` = 2k FLOPs per element, 4 bytes read + 4 bytes written.
// Separate add and multiply: at most half the FP32 (FMA) peak.
//
// compute_k_terms_fma is the FMA variant: Horner's rule, k fused multiply-adds (2k FLOPs) per
// element, b[i] = x * (1 + x + ... + x^(k-1)) = the same polynomial. The final `* x` is one
// extra multiply per element, outside the count. k is a run-time argument, so neither loop can
// be folded at compile time. Unrolled by 16 so the loop's own counter and branch take few issue
// slots (unrolled by 4 it reached ~56% of the FMA peak on an H100, loop overhead included).

extern "C" __global__ void compute_k_terms(const float* __restrict__ a,
                                           float* __restrict__ b,
                                           int n,
                                           int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = a[i];
        float result = 0.0f;
        float power = x;
        for (int j = 0; j < k; ++j) {
            result += power;
            power *= x;
        }
        b[i] = result;
    }
}

extern "C" __global__ void compute_k_terms_fma(const float* __restrict__ a,
                                               float* __restrict__ b,
                                               int n,
                                               int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = a[i];
        float result = 0.0f;
#pragma unroll 16
        for (int j = 0; j < k; ++j) {
            result = fmaf(result, x, 1.0f);
        }
        b[i] = result * x;
    }
}
