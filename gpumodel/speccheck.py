"""Sanity checks on a spec beyond its schema: does a tensor rate look like a sparse figure?

Vendors print 2:4-sparse tensor rates beside (or instead of) dense ones; a sparse number passed
off as dense doubles every compute-bound prediction. Two independent checks:

1. Per-SM rate: dense FP16 tensor FLOP per clock per SM is fixed per architecture (derived from
   the whitepapers: V100 8 tensor cores x 64 FMA x 2 = 1024; A100 4 x 256 x 2 = 2048; H100
   4 x 512 x 2 = 4096; ...). A rate implying more than 1.5x that at the boost clock is suspect.
2. Siblings: on every NVIDIA tensor core since Ampere, tf32 = fp16/2, fp8 = int8 = 2 x fp16,
   bf16 = fp16. A dtype off by 2x from its siblings is suspect.
"""

from __future__ import annotations

from gpumodel.specs import GPUSpec

# dense fp16/bf16 tensor FLOP per clock per SM (whitepapers; derived as above)
TENSOR_FP16_FLOP_PER_CLK_PER_SM = {
    "volta": 1024, "turing": 1024, "ampere": 2048, "ampere-ga10x": 1024, "ada": 1024,
    "hopper": 4096, "blackwell": 8192, "cdna3": 2048, "cdna2": 1024,
}  # fmt: skip
# expected ratio of each dtype's dense tensor rate to fp16's
SIBLING_RATIO = {"bf16": 1.0, "tf32": 0.5, "fp8": 2.0, "int8": 2.0, "fp4": 4.0}


def alias_warnings(spec: GPUSpec) -> list[str]:
    """The aliases of ``spec`` that another spec of the library already has (a copy of a
    shipped file that kept its aliases): the library keeps them for the first spec."""
    from gpumodel.specs import library

    lib = library()
    taken = {a.lower(): i for i, s in lib.specs.items() if i != spec.id for a in (i, *s.aliases)}
    return [f"alias '{a}' is already {taken[a.lower()]}'s: --gpu {a} keeps meaning "
            f"{taken[a.lower()]} (overriding is by id; drop or rename the alias)"
            for a in spec.aliases if a.lower() in taken]  # fmt: skip


def check_spec(spec: GPUSpec) -> list[str]:
    """Warnings (empty when nothing looks off)."""
    warnings: list[str] = alias_warnings(spec)
    fp16 = spec.peak_flops("fp16", "tensor")
    per_clk = TENSOR_FP16_FLOP_PER_CLK_PER_SM.get(spec.architecture.lower())
    if fp16 and per_clk:
        implied = fp16 / (spec.sm_count * spec.boost_clock_hz)
        if implied > 1.5 * per_clk:
            warnings.append(
                f"peak.tensor.fp16 {fp16 / 1e12:.4g} TFLOP/s implies {implied:.0f} FLOP/clk/SM, "
                f"{implied / per_clk:.2g}x the dense {spec.architecture} rate of {per_clk}: "
                "is it the 2:4-sparse figure? Store dense = sparse / 2"
            )
    if fp16:
        for dtype, ratio in SIBLING_RATIO.items():
            rate = spec.peak_flops(dtype, "tensor")
            if rate and not 0.7 < rate / (ratio * fp16) < 1.4:
                kind = "sparse" if rate > ratio * fp16 else "low"
                warnings.append(
                    f"peak.tensor.{dtype} is {rate / fp16:.3g}x fp16, expected {ratio:g}x: "
                    f"looks {kind} (check sparse vs dense, or fp32 vs fp16 accumulate)"
                )
    fp32 = spec.peak_flops("fp32", "vector")
    if fp32 and spec.vendor == "nvidia":
        lanes = fp32 / (2 * spec.sm_count * spec.boost_clock_hz)
        if lanes > 1.2 * 128:
            warnings.append(
                f"peak.vector.fp32 implies {lanes:.0f} FP32 lanes per SM (at most 128 on NVIDIA)"
            )
    if spec.sm_limits and spec.sm_limits.max_warps_per_sm * spec.sm_limits.warp_size != (
        spec.sm_limits.max_threads_per_sm
    ):
        warnings.append("sm_limits: max_warps x warp_size != max_threads")
    return warnings
