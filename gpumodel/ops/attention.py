"""Scaled-dot-product attention: fused (FlashAttention-2 or cuDNN) or naive (three kernels)."""

from __future__ import annotations

import math
from dataclasses import replace as dc_replace
from typing import Any, ClassVar, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from gpumodel._validators import SeqTokens, Size
from gpumodel.errors import SpecError, UnsupportedError
from gpumodel.model.scheduling import TileWork
from gpumodel.ops.base import (
    Dtype,
    ExecUnit,
    FlopPart,
    GemmShape,
    KernelWork,
    Op,
    at_most,
    element_bytes,
    is_array,
    matmul_unit,
    uniform,
    vector_unit,
)
from gpumodel.specs import GPUSpec

SOFTMAX_FLOPS_PER_SCORE = 5.0  # max, subtract, exp, sum, scale
# The exponential runs on the special function units, 16 per clock per SM against the tensor
# cores' 4096 bf16 FLOP on Hopper: at head dim 128 a score's one exponential takes half as long
# as the 512 FLOP of its two products (FlashAttention-3, Shah et al. 2024, section 3.1), at head
# dim 64 as long. Where the GPU has an SFU rate
# (``specs.SFU_RESULTS_PER_CLK_PER_SM``) the exponential is priced there and the other 4 FLOPs of
# a score on the FP32 lanes; elsewhere all 5 on the FP32 lanes.
EXP_PER_SCORE = 1.0
# Head dims a fused kernel is built for: the matrix products run at the next multiple (K in
# whole tiles). FlashAttention-2 rounds to 32 up to 128, to 64 above (flash_api.cpp,
# head_size_rounded: 144 and 160 run its 192 kernel, 224 its 256 one; on an H200 they ran 1.2x
# and 1.14x slower per FLOP than 192 and 256, validation/results/h200-sxm/sdpa-wide-head-2026-11-30);
# cuDNN's Hopper kernels run 64 or 128 wide (kernel names
# ..._64x128x64_... at head dim 64, ..._64x128x128_... at 80, 96 and 128,
# validation/results/unseen-h200-run16); xFormers' kernels behind SDPA's memory-efficient
# backend are built for at most 64 or 128 (kMaxK), and loop over wider heads unpadded.
HEAD_DIM_TILE = {"flash": 32, "cudnn": 64, "efficient": 64}
FLASH_WIDE_HEAD_DIM_TILE = 64
# cuDNN's forward given a mask (its biased kernel) runs head dims above 128 as 256: on the H200's
# wide-head fit set its time per score was 4.1-5.0 ns at every head dim from 144 to 256
# (validation/results/h200-sxm/sdpa-wide-head-2026-11-30); its backward showed no such step.
# Priced as work (zeros multiplied still draw the power the clock model counts)
CUDNN_MASK_WIDE_HEAD_DIM = 256
# Query and key rows per thread block of each fused kernel, for the last, partial tiles (tile
# quantization in M and N). FlashAttention-2's forward: 128 queries x 128 keys up to head dim
# 64, 128 x 64 above (flash_fwd_launch_template.h, sm80 kernels, what PyTorch runs on sm90;
# above head dim 128 with 8 warps and 128-160 KB of shared memory, one block per SM:
# ``FLASH_WIDE_BLOCKS_PER_SM``);
# cuDNN's Hopper kernels: 64 x 128 (..._64x128x{64,128}_... kernel names); xFormers'
# memory-efficient kernels: 64 x 64 up to head dim 64, 64 x 128 up to 128, 32 x 128 above
# (fmha_cutlassF_*_64x64_rf, _64x128_rf, _32x128_gmem).
def block_rows(impl: str, head_dim: int) -> tuple[int, int]:
    """(queries, keys) per thread block of ``impl``'s forward kernel at ``head_dim``."""
    if impl == "flash":
        return FLASH_BLOCK_M, 128 if uniform(head_dim <= 64) else 64
    if impl == "cudnn":
        return 64, 128
    if uniform(head_dim <= 64):
        return 64, 64
    return (64, 128) if uniform(head_dim <= 128) else (32, 128)


# Thread blocks of 64 queries of cuDNN's and the memory-efficient kernels that share an SM, for
# their tail (the last blocks of a causal kernel finish alone). Chosen on validate's points with
# the diagonal below (validation/fitset/fit_attention_causal.py, mean |log error| of cuDNN /
# memory-efficient points): 1 block 5.3% / 5.5%, 2 blocks 5.4% / 6.4%, 4 blocks 7.2% / 7.5%,
# no tail model 5.8% / 6.1%.
LIBRARY_BLOCKS_PER_SM = 1


# A causal fused kernel computes each query tile's diagonal key tile whole and masks it, which
# costs more than the half of it the exact count holds: extra work per query tile, in 128 x 128
# tiles of scores, per kernel. Fitted on validate's prefill and backward points (H200: flash,
# cuDNN, memory-efficient, head dims 64 and 128; H100: flash and cuDNN, 128) by
# validation/fitset/fit_attention_causal.py.
CAUSAL_DIAGONAL_EXTRA_TILES = {"flash": 1.75, "cudnn": 2.0, "efficient": 1.0}
# cuDNN's forward kernel given an explicit mask (SDPA's ``attn_mask``, which torch hands it as an
# additive bias) runs the same kernel name at about half its dense rate: 1.87-2.05x the time of
# the same call without a mask over 7 prefill shapes (1-4 x 32 heads x 1K-8K, head dim 128,
# bf16), mean 1.95; with one query (decode, memory-bound) 1.00-1.02x. H200, torch 2.11, cuDNN
# 9.19 (validation/results/h200-sxm/sdpa-mask-2026-11-29). Priced as that much more computed
# work per score (the speed of light still counts the exact scores).
CUDNN_MASK_WORK_FACTOR = 1.95
# ... and 1.62x that again at an odd key length (the bool mask's rows then at odd byte offsets):
# per unit of work, 12 odd lengths (2041-2047, 2501; batch 1 and 3, head dims 96 and 128) ran
# 1.56-1.69x the next even one, mean 1.62, while every even length (2040-2048, 2500, 2502,
# 3000, 3072) ran at the dense-mask rate, their tiles aside. H200, torch 2.11
# (validation/results/h200-sxm/sdpa-mask-lengths-2026-11-29, fitset/sdpa_mask_lengths_device.py).
# Prefill only: the backward and one-query (decode) calls were not measured at odd lengths.
CUDNN_MASK_UNALIGNED_FACTOR = 1.62
CUDNN_MASK_KEY_ALIGN = 2
# Its backward kernel likewise: forward + backward with the mask 1.70-1.79x dense over 5
# prefill shapes, the backward alone (less the forward of the first call's shapes) 1.61-1.77x,
# mean 1.67 (the 1 x 1K call, whose dense pass ran slower than the masked one, left out; same
# run, sdpa-mask-backward.json).
CUDNN_MASK_BACKWARD_WORK_FACTOR = 1.67
# ... and at an odd key length this much more work (the forward's: CUDNN_MASK_UNALIGNED_FACTOR):
# the backward alone, masked over dense, at 5 odd lengths (511-3071, head dims 64 and 128) ran
# 1.07-1.23x its ratio at the even length above (the factor fitted to those ratios: 1.6% median
# |log error|); at head dims 192 and 256 1.02-1.05x, not applied there. H200
# (validation/results/h200-sxm/sdpa-mask-backward-2026-12-01,
# validation/fitset/fit_attention_mask_backward.py). Direct backward timings there confirmed the
# even factor: masked / dense 1.55-1.75x, median 1.59.
CUDNN_MASK_UNALIGNED_BACKWARD_FACTOR = 1.24
# Backward matrix products: S = Q K^T recomputed, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q:
# 5 of the forward's 2 (Dao 2023, FlashAttention-2, section 3.1)
BACKWARD_MATMUL_FACTOR = 2.5
FLASH_BLOCK_M = 128  # queries per thread block in FlashAttention-2's forward kernel
FLASH_WIDE_BLOCKS_PER_SM = 1  # above head dim 128 (``block_rows``)
# Thread blocks of the flash forward kernel resident per SM (head_dim 128, ~64-96 KB of shared
# memory each on sm80/sm90). 2 reproduces the causal / non-causal time ratios measured on an
# H100 (0.51-1.0 across 8 shapes, validation/results/h100-sxm); 1 and 3 do not.
FLASH_BLOCKS_PER_SM = 2
# FlashAttention-2's split-KV choice for decode (flash_api.cpp ``num_splits_heuristic``, vendored
# by PyTorch): with batch x heads x query blocks of 64 >= 0.8 x "SMs" it runs ONE split, i.e. the
# regular forward kernel, whose 128-row query tile then holds one query per head (or the few
# queries that share a K/V head: seqlen_q and heads are swapped for GQA decode). The "SMs" it
# passes are ``multiProcessorCount * 2`` (set_params_splitkv: two 128-thread blocks per SM), so
# the switch is at 211 blocks on a 132-SM H100/H200, not 106: Llama-3-8B at tensor parallel 2
# (4 K/V heads a GPU) at batch 32 has 128 blocks and ran split-KV, 2.3 ms of attention a step
# where the one-split kernel would take 4.8 (validation/results/steps-h200x2-multi-gpu-run1).
SPLIT_KV_FILL = 0.8
SPLIT_KV_BLOCKS_PER_SM = 2
SPLIT_KV_BLOCK_M = 64
# The regular forward kernel's query rows per thread block (kBlockM) for a non-causal call, the
# one a one-split decode runs: 128 at every head dim the launch template builds
# (flash_fwd_launch_template.h, sm80 kernels as PyTorch vendors them), except its head-dim-256
# kernel (head dims 193-256: rounded up to 64 above 128), which runs 64 x 64 with 4 warps
# (2 blocks per SM) where an SM holds 4 x 256 x (64 + 2 x 64) B = 192 KiB of shared memory (two
# blocks of 16-bit Q, K and V tiles) or where a block cannot opt in to 2 x 256 x (128 + 2 x 64) B
# = 128 KiB (H100/H200: 228 KiB an SM; L40S: 99 KiB a block), else 128 x 64 with 8 warps (A100:
# 164 KiB an SM, 163 KiB a block).
FLASH_WIDE256_SMEM_PER_SM = 4 * 256 * (64 + 2 * 64)
FLASH_WIDE256_SMEM_PER_BLOCK = 2 * 256 * (128 + 2 * 64)
FLASH_WIDE256_BLOCK_M = 64
FLASH_WIDE256_MIN_HEAD_DIM = 193


# The dtypes each implementation takes: PyTorch's SDPA checks (sdp_utils.cpp) give
# FlashAttention-2 and cuDNN fp16/bf16 only, the memory-efficient kernel fp16/bf16/fp32, the math
# path any floating type; ``tf32`` is fp32 tensors with TF32 matmuls allowed. No SDPA kernel
# takes 8-bit or 4-bit tensors (8-bit models run attention in bf16).
IMPL_DTYPES = {"sdpa": ("fp16", "bf16", "fp32", "tf32", "fp64"),
               "flash": ("fp16", "bf16"), "cudnn": ("fp16", "bf16"),
               "efficient": ("fp16", "bf16", "fp32", "tf32"),
               "naive": ("fp16", "bf16", "fp32", "tf32", "fp64")}  # fmt: skip
# What SDPA runs for a wide dtype when no ``impl`` is named: fp32 (tf32) tensors the
# memory-efficient kernel (flash and cuDNN refuse them; on an H200 SDPA's default dispatch ran
# fmha_cutlassF_f32_* for 10 of 10 shapes, TF32 on or off), fp64 the math path
# (validation/results/h200-sxm/sdpa-dtypes-2026-11-30)
WIDE_DTYPE_IMPL = {"fp32": "efficient", "tf32": "efficient", "fp64": "naive"}
# The memory-efficient kernel multiplies fp32 on sm80+ tensor cores as three TF32 products per
# product (CUTLASS's OpMultiplyAddFastF32, "3xTF32": the big x big, big x small and small x big
# halves of each operand; gemm_kernel_utils.h DefaultGemmType<ArchTag >= 80, float>), so TF32 on
# or off runs the same kernel at the same time (the H200 run above: 0.0-1.0% apart). Those
# TF32 products reach a larger share of their peak than the kernel's 16-bit products of theirs
# (both run sm80's mma.sync on Hopper, whose 16-bit peak is wgmma's), so the fp32 kernel ran
# 1.7-3.8x its bf16 time, not 3 x 2: priced as FAST_F32_WORK_FACTOR TF32 products of the 16-bit
# kernel's calibrated rate, fitted to the ratio of fp32 to bf16 time on 10 shapes, the forward
# kernels up to head dim 64 (64 x 64 tiles) and above (64 x 128, 32 x 128) and the backward
# (cutlassB) apart (H200; validation/fitset/fit_attention_fp32.py)
FAST_F32_TF32_PRODUCTS = 3
FAST_F32_WORK_FACTOR = {"forward": 2.55, "forward wide": 2.1, "backward": 1.8}
FAST_F32_NARROW_HEAD_DIM = 64  # the forward's 64 x 64 kernels; wider heads run "forward wide"

# Head dims above 128 (Gemma's 256, 144-224) run other kernels than the ones validate times and
# calibrates (head dims 64 and 128): FlashAttention-2's with fewer queries per SM, cuDNN's
# backward and its masked forward with smaller tiles, and xFormers' memory-efficient kernels
# built for any head dim (kMaxK 65536: ``fmha_cutlassF_*_32x128_gmem``, whose output
# accumulator lives in global memory and is worked through in 128 columns, and
# ``fmha_cutlassB_*_128x64_k65536``, 3.8-5x slower than its head-dim-128 kernel per product).
# Priced as the calibrated family with this much work per product (the speed of light counts
# each product once), one factor per kernel, fitted on the H200's wide-head fit set (10 shapes,
# head dims 144-256, bf16; fp32 on 2; validation/fitset/fit_attention_wide_head.py). The
# memory-efficient forward also pads its second product, P V, to whole 128-column chunks
# (``EFFICIENT_WIDE_OUTPUT_CHUNK``). cuDNN's forward without a mask runs at its calibrated rate
# (fit set 0.93-1.17x, median 1.04x): no factor.
WIDE_HEAD_DIM = 128
WIDE_HEAD_WORK_FACTOR = {"flash forward": 1.48, "flash backward": 1.4, "cudnn backward": 1.83,
                         "cudnn mask forward": 1.72, "efficient forward": 1.41,
                         "efficient backward": 5.17, "efficient fp32 forward": 1.11,
                         "efficient fp32 backward": 1.38}  # fmt: skip
EFFICIENT_WIDE_OUTPUT_CHUNK = 128
# cuDNN's decode (one query per sequence against a KV cache) above head dim 128 runs its kernel
# for head dim 256 whatever the width: at head dim 160 it took 0.85-0.97x its time at 256 for
# 37.5% fewer bytes, and at 256 1.2-1.4x the calibrated decode rate's time. Priced as that kernel
# streaming the cache at the width it is built for, CUDNN_DECODE_WIDE_BANDWIDTH of the calibrated
# family's DRAM rate (bytes and the speed of light stay the real ones), fitted on the H200's
# decode fit set (5 shapes x head dims 160 and 256; validation/fitset/fit_attention_decode.py)
CUDNN_DECODE_WIDE_HEAD_DIM = 256
CUDNN_DECODE_WIDE_BANDWIDTH = 0.79
# The memory-efficient kernel's decode: each thread block holds one query (of a 64- or 32-row
# tile) and walks the whole KV cache one key tile after another (fmha_cutlassF_*_64x64_rf,
# 64x128_rf, 32x128_gmem): on an H200, 33-49 ns a key per block in 16-bit and 97-160 ns in
# fp32 whatever the number of blocks up to the SMs, 8 of them or 128, so with few blocks it is
# latency-bound, not bandwidth-bound (the first model priced 1 x 32 heads x 16K keys 79-96%
# fast). Priced as a serial loop (``KernelWork.serial_cycles``) of SM cycles per key and blocks
# resident per SM, per kernel (tensor dtype, head dim up to 64 / 128 / above), fitted on the
# H200's fit set (validation/results/h200-sxm/sdpa-decode-efficient-2026-12-01,
# validation/fitset/fit_attention_decode_efficient.py). Cycles carry to another GPU at its
# clock; GPUs before sm80 run other builds of the kernel (none measured).
EFFICIENT_DECODE_CYCLES_PER_KEY = {("16-bit", 64): 70.1, ("16-bit", 128): 62.8, ("16-bit", 256): 97.3,
                                   ("fp32", 64): 207.3, ("fp32", 128): 187.6, ("fp32", 256): 318.0}  # fmt: skip
EFFICIENT_DECODE_BLOCKS_PER_SM = {("16-bit", 64): 2.05, ("16-bit", 128): 1.2, ("16-bit", 256): 1.4,
                                  ("fp32", 64): 1.25, ("fp32", 128): 0.95, ("fp32", 256): 1.1}  # fmt: skip


# cuDNN's forward of a few queries (2-128) against a KV cache runs its prefill kernel
# (cudnn_generated_fort_native_sdpa_sm90_flash_fprop, not the one-query decode kernel): one
# block per 64 queries of a head, each walking the keys one 128-key tile after another, so with
# fewer blocks than SMs its time is that walk whatever the query count (H200: 1 x 32 heads x 2K
# keys 28.7 us at 2-128 queries, 10.3 us at one; 2 x 32 heads x 8K keys 99.5 us). Priced as a
# serial loop of SM cycles per key per head dim (up to 64 / 128 / above), fitted on the H200's
# short-query fit set (validation/results/h200-sxm/sdpa-short-query-2026-12-01,
# validation/fitset/fit_attention_short_query.py); the head dims between take the next one's.
CUDNN_CACHE_CYCLES_PER_KEY = {64: 16.6, 128: 22.2, 256: 41.6}
CUDNN_CACHE_BLOCKS_PER_SM = 1


def efficient_decode_key(dtype: str, head_dim: int) -> tuple[str, int]:
    """Which of the memory-efficient decode kernels runs (``EFFICIENT_DECODE_CYCLES_PER_KEY``)."""
    return ("fp32" if dtype in ("fp32", "tf32") else "16-bit",
            64 if head_dim <= 64 else 128 if head_dim <= 128 else 256)


def fast_f32_work_key(backward: bool, head_dim: int) -> str:
    """Which ``FAST_F32_WORK_FACTOR`` a memory-efficient fp32 kernel takes."""
    if backward:
        return "backward"
    return "forward" if head_dim <= FAST_F32_NARROW_HEAD_DIM else "forward wide"


def wide_head_work_key(impl: str, backward: bool, dtype: str, mask: bool) -> str | None:
    """Which ``WIDE_HEAD_WORK_FACTOR`` a fused kernel above head dim 128 takes (None: none)."""
    fp32 = " fp32" if impl == "efficient" and dtype in ("fp32", "tf32") else ""
    key = f"{impl}{' mask' if mask and impl == 'cudnn' and not backward else ''}{fp32} " + (
        "backward" if backward else "forward")
    return key if key in WIDE_HEAD_WORK_FACTOR else None


# PyTorch's SDPA runs FlashAttention-2 and cuDNN's attention on compute capability 8.0 and later
# only, the memory-efficient kernel from 5.0 (sdp_utils.cpp: check_sm_version for each
# backend); cuDNN's is NVIDIA's (ROCm builds run flash and the memory-efficient kernel)
SDPA_MIN_CC = {"flash": 8.0, "cudnn": 8.0}


# Head dims PyTorch's SDPA runs each fused kernel at (sdp_utils.cpp): FlashAttention-2 and cuDNN
# up to 256 (check_head_dim_size_flash, cuDNN's tensor-shape check); cuDNN and the
# memory-efficient kernel multiples of 8 for 16-bit tensors, the memory-efficient kernel
# multiples of 4 for fp32 (minimum_gemm_alignment on sm80+); FlashAttention-2 pads its head dim
# to a multiple of 8 itself (flash_api.cpp)
SDPA_MAX_HEAD_DIM = {"flash": 256, "cudnn": 256}
SDPA_HEAD_DIM_ALIGN = {"cudnn": 8, "efficient": 8}
SDPA_HEAD_DIM_ALIGN_FP32 = 4


# Compute capabilities on which torch's SDPA tries cuDNN attention first (torch 2.5+ with cuDNN
# >= 9.9: aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, check_prefer_cudnn_attention:
# major 9 or 10 with minor 0, i.e. H100/H200 and B200/GB200). Elsewhere flash runs first. On an
# H200 (torch 2.11) the default dispatch ran cuDNN's kernel for every 16-bit call of the unseen
# grid: prefill at head dims 40-256, masked, decode (validation/results/unseen-h200-run36).
CUDNN_SDPA_PREFERRED_CC = ("9.0", "10.0")

# Kernels one eager SDPA call launches beside the kernel priced (counted by torch.profiler per
# call on an H200, torch 2.11, cuDNN 9.19: validation/results/h200-sxm/sdpa-launches-2026-12-01,
# and the default calls of unseen runs 33-38). The host pays each (``Attention.host_launches``,
# the eager floor's count):
# - a boolean attn_mask is turned into an additive one first: two vectorized and one
#   elementwise kernel, whichever backend runs (not again in the backward);
# - cuDNN's decode kernel (one query) is followed by a split-KV reduction
#   (``lean_reduction_kernel``) where batch x K/V heads < 128 and the keys span more than one
#   tile of 128 (8 and 48 split at 1-32K keys; 128 and 512 did not; 8 at 128 keys did not;
#   129-1023 keys unmeasured);
# - FlashAttention-2's decode follows its split-KV kernel with a combine kernel where it splits
#   (``decode_splits_kv``) and the keys span more than one of its key blocks (256 keys at head
#   dims <= 64, else 128: flash_api.cpp's num_splits_heuristic caps the splits at the blocks);
# - backward: cuDNN 3 (dot(dO, O), the kernel, dQ's conversion), FlashAttention-2 5 (two
#   elementwise, dot(dO, O), the kernel, dQ's conversion), the memory-efficient kernel 2.
# cuDNN's prefill forward and backward also clear a buffer first (a Memset): not counted, it
# cost the host ~2 us where a kernel launch cost 7-8 (a default cuDNN prefill call over the
# probe's decode call: +2.0 us median, runs 33-37), and the probes count kernels only.
SDPA_MASK_CONVERSION_LAUNCHES = 3
CUDNN_SPLIT_KV_MAX_BLOCKS = 128
CUDNN_DECODE_KEY_TILE = 128
SDPA_BACKWARD_LAUNCHES = {"cudnn": 3, "flash": 5, "efficient": 2}


def flash_key_block(head_dim: int) -> int:
    """Keys per block of FlashAttention-2's forward (flash_api.cpp: 256 at head dims <= 64,
    128 to 128, 64 above)."""
    return 256 if head_dim <= 64 else 128 if head_dim <= 128 else 64


def sdpa_dispatch(gpu: GPUSpec, dtype: str, head_dim: int, mask: bool = False) -> tuple[str, str]:
    """(impl, why): the kernel PyTorch's SDPA runs by default on ``gpu`` for ``dtype`` tensors
    at ``head_dim``, with (``mask``) or without an explicit attn_mask, tried in SDPA's order:
    cuDNN where torch prefers it (``CUDNN_SDPA_PREFERRED_CC``; head dims <= 256, multiples of
    8), FlashAttention-2 on sm80+ (head dims <= 256; no explicit mask), else the
    memory-efficient kernel (and the kernels of ``WIDE_DTYPE_IMPL`` for wide dtypes)."""
    if dtype in WIDE_DTYPE_IMPL:
        return WIDE_DTYPE_IMPL[dtype], f"{dtype} tensors"
    cc = gpu.compute_capability if gpu.vendor == "nvidia" else None
    if head_dim > SDPA_MAX_HEAD_DIM["flash"]:
        why = f"head dim {head_dim} is above the flash and cuDNN kernels' {SDPA_MAX_HEAD_DIM['flash']}"
    elif cc and float(cc) < SDPA_MIN_CC["flash"]:
        why = f"{gpu.id} (compute capability {cc}) has no flash or cuDNN kernel"
    elif cc in CUDNN_SDPA_PREFERRED_CC and head_dim % SDPA_HEAD_DIM_ALIGN["cudnn"] == 0:
        return "cudnn", f"torch tries cuDNN's kernel first on compute capability {cc}"
    elif not mask:
        return "flash", f"FlashAttention-2 runs first on {gpu.id}"
    else:
        why = "FlashAttention-2 takes no explicit mask"
    if head_dim % SDPA_HEAD_DIM_ALIGN["efficient"]:  # the memory-efficient kernel refuses it too
        return "naive", f"{why}, and the memory-efficient kernel no head dim {head_dim}: the math path"
    return "efficient", why


def check_sdpa_kernel(impl: str, gpu: GPUSpec, head_dim: int) -> None:
    """A one-line error where ``gpu`` does not run the named kernel ``impl`` at ``head_dim``."""
    top = SDPA_MAX_HEAD_DIM.get(impl)
    if top and head_dim > top:
        raise UnsupportedError(f"impl={impl} runs head dims up to {top} (PyTorch's SDPA); head "
                               f"dim {head_dim} runs impl=efficient")  # fmt: skip
    if impl == "cudnn" and gpu.vendor != "nvidia":
        raise UnsupportedError(f"impl=cudnn is NVIDIA's cuDNN; {gpu.id} runs impl=flash or "
                               "efficient")  # fmt: skip
    if (impl in SDPA_MIN_CC and gpu.vendor == "nvidia" and gpu.compute_capability
            and float(gpu.compute_capability) < SDPA_MIN_CC[impl]):  # fmt: skip
        raise UnsupportedError(f"impl={impl} runs on compute capability {SDPA_MIN_CC[impl]:g}+ "
                               f"(PyTorch's SDPA); {gpu.id} is {gpu.compute_capability}: "
                               "impl=efficient runs there")  # fmt: skip


def sdpa_impl(impl: str, dtype: str) -> str:
    """``impl``, or what SDPA runs instead for ``dtype`` tensors that ``impl`` does not take
    (an fp32 model's attention: the memory-efficient kernel; fp64: the math path)."""
    return impl if dtype in IMPL_DTYPES[impl] else WIDE_DTYPE_IMPL.get(dtype, impl)


def _count(value: Any) -> str:
    """A note's number: ``value`` to 3 figures, or "several" over a sweep's array of points."""
    return "several" if is_array(value) else f"{float(value):.3g}"


def flash_forward_block(head_dim: Any, gpu: GPUSpec) -> tuple[int, int]:
    """(query rows per thread block, blocks per SM) of FlashAttention-2's regular non-causal
    forward kernel at ``head_dim`` on ``gpu`` (``FLASH_WIDE256_BLOCK_M``): 128 rows, 2 blocks per
    SM up to head dim 128 and 1 above, or 64 rows and 2 blocks in the head-dim-256 kernel where
    the GPU's shared memory picks it."""
    if not uniform(head_dim >= FLASH_WIDE256_MIN_HEAD_DIM):
        wide = uniform(head_dim > WIDE_HEAD_DIM)
        return FLASH_BLOCK_M, FLASH_WIDE_BLOCKS_PER_SM if wide else FLASH_BLOCKS_PER_SM
    sm = gpu.sm_limits
    small = sm is not None and (sm.shared_memory_per_sm_bytes >= FLASH_WIDE256_SMEM_PER_SM
                                or sm.shared_memory_per_block_optin_bytes < FLASH_WIDE256_SMEM_PER_BLOCK)  # fmt: skip
    return (FLASH_WIDE256_BLOCK_M, FLASH_BLOCKS_PER_SM) if small else (FLASH_BLOCK_M, FLASH_WIDE_BLOCKS_PER_SM)


def split_kv_threshold(gpu: GPUSpec) -> float:
    """Blocks (batch x heads x query blocks) from which FlashAttention-2 decodes in one KV split:
    0.8 x (2 x SMs), as flash_api.cpp counts them."""
    return SPLIT_KV_FILL * SPLIT_KV_BLOCKS_PER_SM * gpu.sm_count


class Attention(Op):
    """softmax(Q K^T / sqrt(d)) V for ``batch`` x ``heads`` queries of length ``seq`` against
    ``kv_seq`` keys (default ``seq``) with ``kv_heads`` K/V heads (GQA/MQA; default ``heads``).

    FLOPs: ``4 * batch * heads * seq * kv_seq * head_dim`` for the two products (QK^T and PV),
    times the unmasked fraction when ``causal`` (kernels that skip masked blocks, as
    FlashAttention does: ``1 - seq / (2 * kv_seq)``, one half for square causal attention).
    ``impl="sdpa"`` (the default): the kernel PyTorch's SDPA picks on the GPU it is priced on
    (``sdpa_dispatch``; ``on(gpu)`` names it). Bytes: ``flash`` reads Q, K, V once and writes O
    once (Dao et al. 2022, when tiles fit);
    ``naive`` also writes the score matrix, reads it for the softmax and again for PV.
    ``cudnn`` is PyTorch SDPA's cuDNN backend (what SDPA picks on an H100 with PyTorch 2.11):
    the same fused work, its own calibrated family (``attention:cudnn``; it ran 1.7-2.0x faster
    than the FlashAttention-2 backend on an H100, validation/results/h100-sxm). ``efficient`` is
    SDPA's memory-efficient backend (xFormers' CUTLASS kernel), what SDPA runs with an explicit
    ``attn_mask`` where cuDNN's is not preferred (A100, L4, ...), or in fp32: the same fused work,
    its own family (``attention:efficient``). ``mask``: an explicit ``attn_mask`` (dense work):
    on H100/H200/B200 cuDNN's kernel takes it, at about half its dense rate
    (``CUDNN_MASK_WORK_FACTOR``).
    ``dropout``: SDPA's ``dropout_p > 0`` (HF GPT-2 trains with 0.1): the fused kernel draws a
    Philox random number per score, and the backward draws them again, a cost its calibrated
    family carries (``...:dropout``): cuDNN's dropout forward took 1.9-2.3x its plain forward
    on an H200 (validation/results/h200-sxm/attention-2026-11-28-train). The backward of
    grouped K/V heads (``kv_heads < heads``) computes dK and dV per query head and sums them
    over each group (FlashAttention-2's ``mha_bwd``: ``dk_expanded``): 12-20% over the same
    kernel's time without grouping there, its own family (``...:gqa:backward``).
    """

    op_name: ClassVar[str] = "attention"
    eager_kind: ClassVar[str | None] = "sdpa"
    batch: Size = 1
    heads: Size = 32
    seq: SeqTokens
    head_dim: Size = 128
    dtype: Dtype = "bf16"
    causal: bool = False
    impl: Literal["sdpa", "flash", "cudnn", "efficient", "naive"] = Field(
        "sdpa",
        description="sdpa: the kernel PyTorch's SDPA picks on the GPU (cuDNN's on H100/H200/"
        "B200, FlashAttention-2 on other sm80+ GPUs, the memory-efficient kernel for fp32, "
        "head dims above 256 or older GPUs); flash, cudnn, efficient: that SDPA backend forced; "
        "naive: separate matmuls and softmax",
    )
    backward: bool = Field(False, description="the backward pass (dQ, dK, dV) instead")
    kv_heads: Size | None = None
    kv_seq: SeqTokens | None = None
    # None (not False) without dropout, so that labels and files of ops without it stay as
    # they were
    dropout: bool | None = Field(None, description="SDPA dropout_p > 0 (training)")
    # None (not False) without one, as ``dropout``
    mask: bool | None = Field(
        None,
        description="an explicit attn_mask instead of is_causal (HF with padding, a "
        "StaticCache, or keys at a sliding window): cuDNN's biased kernel",
    )
    # set by ``on``: why SDPA's default dispatch picked ``impl`` on the GPU (explain() shows it)
    _dispatch_note: str | None = PrivateAttr(None)

    @model_validator(mode="before")
    @classmethod
    def _wide_dtype_impl(cls, data: object) -> object:
        """fp32, tf32 and fp64 attention without a named ``impl`` runs what SDPA picks for
        them (``WIDE_DTYPE_IMPL``) on every GPU, named as such."""
        if (isinstance(data, dict) and data.get("impl", "sdpa") == "sdpa"
                and data.get("dtype") in WIDE_DTYPE_IMPL):  # fmt: skip
            return {**data, "impl": WIDE_DTYPE_IMPL[data["dtype"]]}
        return data

    @field_validator("mask")
    @classmethod
    def _no_mask_is_none(cls, v: bool | None) -> bool | None:
        return True if v else None

    @field_validator("dropout")
    @classmethod
    def _no_dropout_is_none(cls, v: bool | None) -> bool | None:
        return True if v else None

    @model_validator(mode="after")
    def _check(self) -> Attention:
        if self.heads % self.n_kv_heads:
            raise SpecError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.n_kv_heads})"
            )
        if self.dtype not in IMPL_DTYPES[self.impl]:
            takes = [i for i, dts in IMPL_DTYPES.items() if self.dtype in dts and i != "sdpa"]
            hint = (f"{self.dtype} attention runs impl={' or '.join(takes)}" if takes else
                    "no SDPA kernel takes 8- or 4-bit tensors: 8-bit models run attention in bf16")
            raise SpecError(f"impl={self.impl} takes {'/'.join(IMPL_DTYPES[self.impl])} tensors "
                            f"only (PyTorch's SDPA); {hint}")  # fmt: skip
        if self.impl == "flash" and self.mask:  # sdp_utils.cpp, check_for_attn_mask
            raise SpecError("impl=flash takes no explicit attn_mask (PyTorch's SDPA: 'No "
                            "available kernel'); a masked call runs impl=cudnn or efficient")  # fmt: skip
        if self.causal and self.seq > self.n_kv_seq:
            raise SpecError(f"causal attention needs seq ({self.seq}) <= kv_seq ({self.n_kv_seq})")
        return self

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def n_kv_seq(self) -> int:
        return self.seq if self.kv_seq is None else self.kv_seq

    @property
    def causal_fraction(self) -> float:
        return 1.0 - self.seq / (2.0 * self.n_kv_seq) if self.causal else 1.0

    @property
    def family(self) -> str:
        """Decode (one query per sequence) runs different kernels (split-KV) than prefill;
        cuDNN's kernels are calibrated apart."""
        base = "attention_decode" if uniform(self.seq == 1) else "attention"
        base = f"{base}:{self.impl}" if self.impl in ("cudnn", "efficient") else base
        # fp32 tensors: the memory-efficient kernel's 3xTF32 variant, fitted apart where a
        # calibration measured it, else priced as the 16-bit kernel (``FAST_F32_WORK_FACTOR``)
        wide = self.impl == "efficient" and self.dtype in ("fp32", "tf32")
        base = f"{base}:fp32" if wide else base
        base = f"{base}:dropout" if self.dropout else base
        if self.backward and self.n_kv_heads != self.heads:
            base = f"{base}:gqa"  # dK, dV per query head, then summed over each group
        return f"{base}:backward" if self.backward else base

    def monotone_floor(self, gpu: GPUSpec) -> Op | tuple[Op, ...] | None:
        """Prefill (seq > 1) never runs faster than the most queries decode's kernels take over
        the same keys (``queries_against_cache``), those never faster than one query, and
        decode on the regular kernel (one KV split) never faster than the largest batch that
        still splits KV: those families are calibrated apart, so the time could fall where a
        growing seq or batch switches kernels."""
        if self.impl == "sdpa":
            return self.on(gpu).monotone_floor(gpu)
        if uniform(self.seq > 1) and self.queries_against_cache:
            # a few queries against more keys never beat one query against them, nor the same
            # queries as a prefill of their own keys
            return (self.model_copy(update={"seq": 1, "kv_seq": self.n_kv_seq}),
                    self.model_copy(update={"kv_seq": None}))
        if uniform(self.seq > 1):
            # a prefill's kernels never beat the most queries decode's kernels take over the
            # same keys (``queries_against_cache``: up to 128, fewer than the keys), nor those
            # fewer queries one query
            fewer = at_most(self.seq - 1, FLASH_BLOCK_M)
            if is_array(fewer) or is_array(self.n_kv_seq):  # a sweep's points
                import numpy as np

                fewer = np.minimum(fewer, self.n_kv_seq - 1)
            else:
                fewer = min(fewer, self.n_kv_seq - 1)
            cached = self.model_copy(update={"seq": fewer, "kv_seq": self.n_kv_seq})
            # (past one tile or past the keys only: a square prefill's chain of smaller ones
            # would recurse)
            past = uniform(self.seq > FLASH_BLOCK_M) or uniform(self.seq > self.n_kv_seq)
            if past and cached.queries_against_cache:
                return cached
            return self.model_copy(update={"seq": 1, "kv_seq": self.n_kv_seq})
        if (self.impl != "flash" or self.backward or self.dropout
                or uniform(self.decode_splits_kv(gpu))):  # fmt: skip
            return None  # (with dropout nothing splits: no switch to floor)
        rows, _ = self.decode_rows()
        per_batch = self.n_kv_heads * -(-rows // SPLIT_KV_BLOCK_M)
        # the largest batch b with b x per_batch < the split-KV threshold (decode_splits_kv)
        batch = math.ceil(split_kv_threshold(gpu) / per_batch) - 1
        return self.model_copy(update={"batch": batch}) if batch >= 1 else None

    def query_tiles(self, block: int = FLASH_BLOCK_M) -> TileWork:
        """Work of each query tile of one head, relative to a tile attending to all keys.

        FlashAttention gives each thread block BLOCK_M = 128 queries (Dao 2023, FA2 forward,
        head_dim <= 128; cuDNN's and the memory-efficient kernels 64, ``block_rows``); with a
        causal mask, tile i only visits keys up to its last query.
        """
        n = -(-self.seq // block)
        if not self.causal:
            return TileWork(n)
        offset = self.n_kv_seq - self.seq  # queries are the last `seq` positions
        return TileWork(n, block=block, offset=offset, span=self.n_kv_seq)

    def decode_rows(self) -> tuple[int, int]:
        """(query rows per head's blocks, heads' blocks) of FlashAttention-2 against a KV cache:
        GQA decode (one query) packs the ``heads / kv_heads`` queries of one K/V head into one
        block's rows (flash_api.cpp swaps seqlen_q and heads for one query only); with more
        queries each query head is its own block of ``seq`` rows."""
        if uniform(self.seq == 1):
            return self.heads // self.n_kv_heads, self.batch * self.n_kv_heads
        return self.seq, self.batch * self.heads

    def decode_splits_kv(self, gpu: GPUSpec) -> bool:
        """Whether FlashAttention-2 splits the keys on ``gpu`` (few blocks: its split-KV kernel)
        or runs its regular kernel (enough blocks to fill 80% of two per SM), at any query
        length (set_params_splitkv counts batch x heads x query blocks of 64; measured on an
        H200 from 1 to 128 queries, validation/results/h200-sxm/sdpa-short-query-2026-12-01);
        never with dropout. FlashAttention-2 as PyTorch's SDPA flash backend runs it;
        FlashAttention-3 and FlashInfer choose their splits otherwise."""
        if self.dropout:
            return False
        rows, blocks = self.decode_rows()
        return blocks * -(-rows // SPLIT_KV_BLOCK_M) < split_kv_threshold(gpu)

    @property
    def queries_against_cache(self) -> bool:
        """A forward of a few queries against a longer KV cache (decode, speculative
        verification, chunked prefill): one, or up to one 128-row tile of them fewer than the
        keys, no dropout, no mask. FlashAttention-2 runs decode's kernels for them (split-KV or the
        one-split regular kernel), cuDNN its prefill kernel as a walk over the keys, not a
        prefill's many query tiles."""
        few = uniform(self.seq == 1) or (uniform(self.seq <= FLASH_BLOCK_M)
                                         and uniform(self.seq < self.n_kv_seq))  # fmt: skip
        return not self.backward and not self.dropout and not self.mask and few

    @property
    def against_cache(self) -> bool:
        """``queries_against_cache`` on FlashAttention-2."""
        return self.impl == "flash" and self.queries_against_cache

    @property
    def scores(self) -> float:
        """Number of attention scores actually computed."""
        return self.batch * self.heads * self.seq * self.n_kv_seq * self.causal_fraction

    @property
    def computed_scores(self) -> float:
        """Scores a fused kernel computes: ``scores`` plus, when causal, the masked part of each
        query tile's diagonal tile (``CAUSAL_DIAGONAL_EXTRA_TILES``; the naive path computes
        the whole matrix as ``scores`` says)."""
        self._check_kernel_named()
        if self.mask and self.impl == "cudnn":
            return self.scores * self.mask_work_factor()
        if not self.causal or self.impl == "naive":
            return self.scores
        q_tiles = -(-self.seq // FLASH_BLOCK_M)
        rows = at_most(self.seq, FLASH_BLOCK_M)  # fewer queries than a tile: that many (decode 1)
        extra = CAUSAL_DIAGONAL_EXTRA_TILES[self.impl] * q_tiles * rows * FLASH_BLOCK_M
        return self.scores + self.batch * self.heads * extra

    def mask_work_factor(self):  # a number, or an array over the sweeps' points
        """cuDNN's masked kernel's work per score over the dense kernel's (``mask``, cuDNN):
        ``CUDNN_MASK_WORK_FACTOR`` (backward: ``CUDNN_MASK_BACKWARD_WORK_FACTOR``), a prefill's
        at an odd key length (not a multiple of ``CUDNN_MASK_KEY_ALIGN``) x
        ``CUDNN_MASK_UNALIGNED_FACTOR`` (backward, head dims up to 128:
        ``CUDNN_MASK_UNALIGNED_BACKWARD_FACTOR``)."""
        unaligned = (self.n_kv_seq % CUDNN_MASK_KEY_ALIGN != 0) & (self.seq > 1)
        if self.backward:  # its odd-length penalty measured at head dims up to 128
            unaligned = unaligned & (self.head_dim <= WIDE_HEAD_DIM)
            return CUDNN_MASK_BACKWARD_WORK_FACTOR * (
                1 + (CUDNN_MASK_UNALIGNED_BACKWARD_FACTOR - 1) * unaligned)
        return CUDNN_MASK_WORK_FACTOR * (1 + (CUDNN_MASK_UNALIGNED_FACTOR - 1) * unaligned)

    def head_dim_tile(self) -> int | None:
        """The width the fused kernel's head dimension is padded to a multiple of (None: not
        padded; see ``HEAD_DIM_TILE``)."""
        wide = uniform(self.head_dim > WIDE_HEAD_DIM)
        if self.impl == "flash" and wide:
            return FLASH_WIDE_HEAD_DIM_TILE
        if self.impl == "efficient" and wide:
            return None
        return HEAD_DIM_TILE.get(self.impl)

    def wide_head_work(self) -> float:
        """Work per product of a fused kernel above head dim 128 over its calibrated family's
        (``WIDE_HEAD_WORK_FACTOR``), 1 up to 128. Its padding too where no tile model prices
        it: the memory-efficient forward's P V in whole ``EFFICIENT_WIDE_OUTPUT_CHUNK`` columns,
        a backward's products at the head dim its kernel is built for (flash 192 for 144
        and 160: fit set 1.42-1.54x its price unpadded, against 1.15-1.32x at 192 and 256),
        cuDNN's masked forward at ``CUDNN_MASK_WIDE_HEAD_DIM``. Not decode (one query per
        sequence, other kernels; none measured at these head dims)."""
        self._check_kernel_named()
        d = self.head_dim
        if not uniform(d > WIDE_HEAD_DIM) or uniform(self.seq == 1):
            return 1.0
        key = wide_head_work_key(self.impl, self.backward, self.dtype, bool(self.mask))
        work = WIDE_HEAD_WORK_FACTOR[key] if key else 1.0
        tile = self.head_dim_tile()
        if self.backward and tile:
            work = work * (-(-d // tile) * tile) / d
        if self.impl == "cudnn" and self.mask and not self.backward:  # over its 64-wide tiles
            work = work * CUDNN_MASK_WIDE_HEAD_DIM / (-(-d // tile) * tile)
        if self.impl == "efficient" and not self.backward:
            chunk = EFFICIENT_WIDE_OUTPUT_CHUNK
            work = work * (d + -(-d // chunk) * chunk) / (2 * d)  # QK^T over d, P V over the chunks
        return work

    def _check_kernel_named(self) -> None:
        """The kernel-specific quantities need the kernel: SDPA's pick depends on the GPU."""
        if self.impl == "sdpa":
            raise UnsupportedError("impl=sdpa is SDPA's pick on a GPU: name the kernel "
                                   "(op.on(gpu), or impl=flash/cudnn/efficient/naive)")  # fmt: skip

    def _check_head_dim_alignment(self) -> None:
        """cuDNN and the memory-efficient kernel take head dims in whole vectors only
        (``SDPA_HEAD_DIM_ALIGN``): another is a one-line error naming what runs it."""
        wide = self.dtype in ("fp32", "tf32")
        align = SDPA_HEAD_DIM_ALIGN_FP32 if wide else SDPA_HEAD_DIM_ALIGN.get(self.impl)
        if align and self.impl != "naive" and isinstance(self.head_dim, int) and self.head_dim % align:
            other = "impl=naive (the math path)" if wide else "impl=flash (which pads it) or naive"
            raise UnsupportedError(f"impl={self.impl} takes head dims that are multiples of "
                                   f"{align} for {self.dtype} tensors (PyTorch's SDPA); head dim "
                                   f"{self.head_dim} runs {other}")  # fmt: skip

    def decode_bandwidth_fraction(self) -> float:
        """The share of its family's calibrated DRAM rate a decode kernel streams the KV cache
        at: cuDNN's above head dim 128 (``CUDNN_DECODE_WIDE_BANDWIDTH``, at the width of its
        ``CUDNN_DECODE_WIDE_HEAD_DIM`` kernel), 1 otherwise."""
        if (self.impl != "cudnn" or self.backward or not uniform(self.seq == 1)
                or not uniform(self.head_dim > WIDE_HEAD_DIM)):  # fmt: skip
            return 1.0
        return CUDNN_DECODE_WIDE_BANDWIDTH * self.head_dim / CUDNN_DECODE_WIDE_HEAD_DIM

    def decode_serial_loop(self) -> dict[str, Any]:
        """The memory-efficient kernel's decode as a serial loop over the keys
        (``EFFICIENT_DECODE_CYCLES_PER_KEY``), cuDNN's few queries against a cache likewise
        (``CUDNN_CACHE_CYCLES_PER_KEY``): ``KernelWork`` fields, none for other calls."""
        if self.impl == "cudnn" and self.queries_against_cache and uniform(self.seq > 1):
            d = self.head_dim
            key = 64 if uniform(d <= 64) else 128 if uniform(d <= 128) else 256
            return {"serial_cycles": CUDNN_CACHE_CYCLES_PER_KEY[key] * self.n_kv_seq,
                    "serial_blocks": self.batch * self.heads * -(-self.seq // 64),
                    "serial_blocks_per_sm": CUDNN_CACHE_BLOCKS_PER_SM}
        if self.impl != "efficient" or self.backward or not uniform(self.seq == 1):
            return {}
        key = efficient_decode_key(self.dtype, self.head_dim)
        return {"serial_cycles": EFFICIENT_DECODE_CYCLES_PER_KEY[key] * self.n_kv_seq,
                "serial_blocks": self.batch * self.heads,
                "serial_blocks_per_sm": EFFICIENT_DECODE_BLOCKS_PER_SM[key]}

    def softmax_parts(self, gpu: GPUSpec) -> tuple[FlopPart, ...]:
        """The softmax's work per score: the exponential on the SFUs where the GPU has a rate
        for them, the rest (max, subtract, sum, scale) on the FP32 lanes."""
        vunit, vdt = vector_unit(gpu, self.dtype)
        scores = self.computed_scores
        useful = self.scores / scores  # the scores a causal kernel computes whole, not needed
        if gpu.peak_flops("fp32", "sfu"):
            return (FlopPart(vunit, vdt, (SOFTMAX_FLOPS_PER_SCORE - EXP_PER_SCORE) * scores, useful),
                    FlopPart("sfu", "fp32", EXP_PER_SCORE * scores, useful))  # fmt: skip
        return (FlopPart(vunit, vdt, SOFTMAX_FLOPS_PER_SCORE * scores, useful),)

    def product_unit(self, gpu: GPUSpec) -> tuple[ExecUnit, str, float]:
        """(unit, dtype, work per product) of the kernel's matrix products: the memory-efficient
        kernel's fp32 products on TF32 tensor cores where the GPU has them
        (``FAST_F32_WORK_FACTOR``), else the dtype's own unit, once."""
        if self.impl == "efficient" and self.dtype in ("fp32", "tf32") and gpu.peak_flops("tf32", "tensor"):
            return "tensor", "tf32", FAST_F32_WORK_FACTOR[fast_f32_work_key(self.backward, self.head_dim)]
        return (*matmul_unit(gpu, self.dtype), 1.0)

    def on(self, gpu: GPUSpec) -> Attention:
        """This op with the kernel that runs it on ``gpu`` named: ``impl="sdpa"`` becomes what
        SDPA's default dispatch picks there (``sdpa_dispatch``), which ``kernels`` notes; a
        named kernel the GPU does not run is a one-line error."""
        if self.impl != "sdpa":
            check_sdpa_kernel(self.impl, gpu, self.head_dim)
            return self
        impl, why = sdpa_dispatch(gpu, self.dtype, self.head_dim, bool(self.mask))
        op = self.model_copy(update={"impl": impl})
        op._dispatch_note = f"SDPA's default dispatch runs impl={impl}: {why}"
        return op

    @property
    def forced(self) -> bool:
        """Whether the call names its backend (``sdpa_kernel`` around it) instead of leaving
        the pick to SDPA's default dispatch (``on``): a named flash, cudnn or efficient kernel,
        not the memory-efficient kernel fp32 tensors get by default."""
        return (self.impl in ("flash", "cudnn", "efficient") and self._dispatch_note is None
                and WIDE_DTYPE_IMPL.get(self.dtype) != self.impl)  # fmt: skip

    def _one_split_decode(self, gpu: GPUSpec, unit: Any, dt: str, tile_k: int | None,
                          softmax: tuple[FlopPart, ...], nbytes: Any, q_bytes: Any) -> KernelWork:
        """Decode that fills the GPU (``decode_splits_kv`` false) on FlashAttention-2's regular
        forward kernel: each thread block multiplies and exponentiates all rows of its query
        tile (``flash_forward_block``) for the one query per head it holds (or the few of a GQA
        group), so the tensor cores and SFUs work on padding: priced as that work (what the
        power model sees), the exact FLOPs reported and the speed of light counting those. The
        kernel streams K/V with asynchronous copies under the previous tile's products
        (``KernelWork.pipelined``: the roofline's max, not the calibration's imperfect overlap):
        on an H100 and an H200 it ran the same times (within 3% over validate's six shapes,
        32 x 32 heads x 2K-32K keys) where their DRAM differs 1.43x."""
        rows, blocks = self.decode_rows()
        block_m, per_sm = flash_forward_block(self.head_dim, gpu)
        tile_rows = -(-rows // block_m) * block_m
        pad = tile_rows / rows
        d = self.head_dim
        # above head dim 128 its 128-row, 8-warp kernel is the wide prefill's: that kernel's
        # work per product (fit set: 48 x 16 heads x 512 keys at head dim 160 ran 1.41x the
        # price without it; the 64-row kernel at 256, 0.97x)
        wide = uniform(d > WIDE_HEAD_DIM) and block_m == FLASH_BLOCK_M
        work = WIDE_HEAD_WORK_FACTOR["flash forward"] if wide else 1.0
        products = 4.0 * blocks * tile_rows * self.n_kv_seq * d * work  # over every row
        padded = tuple(dc_replace(part, flops=part.flops * pad, useful=part.useful / pad)
                       for part in softmax)  # fmt: skip
        return KernelWork(
            name="flash attention (decode, one KV split)",
            flops=(FlopPart(unit, dt, products, 1 / (pad * work)), *padded),
            bytes=nbytes,
            bytes_written=q_bytes,
            working_set_bytes=nbytes,
            # the speed of light counts each real product once (the softmax's share below its
            # real work where work > 1: still a bound)
            min_flops_fraction=1 / (pad * work),
            gemm=GemmShape(tile_rows, self.n_kv_seq, d, blocks, dt, tile_k=tile_k,
                           needs_alignment=False),
            tile_work=TileWork(1),
            tile_groups=blocks,
            tile_blocks_per_sm=per_sm,
            pipelined=True,
            family="attention_decode:one-split",
            notes=(f"one KV split: each thread block computes {block_m} query rows for "
                   f"{_count(rows)} real one(s), {_count(pad)}x the products and "
                   "exponentials (priced; the FLOPs shown count the real ones)",),
        )  # fmt: skip

    def _split_kv_queries(self, gpu: GPUSpec, unit: Any, dt: str, tile_k: int | None,
                          softmax: tuple[FlopPart, ...], q_bytes: Any, kv_bytes: Any) -> KernelWork:
        """Several queries per head against a KV cache on FlashAttention-2's split-KV kernel
        (``decode_splits_kv``): decode's kernel, calibrated as decode (``attention_decode``),
        with each head's queries in blocks of 64 rows. Each block streams its head's K/V: with
        GQA every query head reads its group's (no swap beyond one query), and a second block of
        queries reads them again (H200: 2 x 32 heads on 8 K/V heads x 8K keys, 26.9 us at one
        query, 60.5 at 2-64, 116 at 65; validation/results/h200-sxm/sdpa-short-query-2026-12-01).
        Its products run on the whole 64-row tiles, under the loads (``pipelined``)."""
        rows, blocks = self.decode_rows()
        tile_rows = -(-rows // SPLIT_KV_BLOCK_M) * SPLIT_KV_BLOCK_M
        reads = (self.heads // self.n_kv_heads) * (tile_rows // SPLIT_KV_BLOCK_M)
        pad = tile_rows / rows
        d = self.head_dim
        products = 4.0 * blocks * tile_rows * self.n_kv_seq * d
        padded = tuple(dc_replace(part, flops=part.flops * pad, useful=part.useful / pad)
                       for part in softmax)  # fmt: skip
        nbytes = 2 * q_bytes + kv_bytes * reads
        return KernelWork(
            name="flash attention (split KV, a few queries)",
            flops=(FlopPart(unit, dt, products, 1 / pad), *padded),
            bytes=nbytes,
            bytes_written=q_bytes,
            working_set_bytes=2 * q_bytes + kv_bytes,
            min_flops_fraction=1 / pad,
            gemm=GemmShape(tile_rows, self.n_kv_seq, d, blocks, dt, tile_k=tile_k,
                           needs_alignment=False),
            pipelined=True,
            family="attention_decode",
            notes=(f"split KV: {_count(rows)} queries per head in blocks of {SPLIT_KV_BLOCK_M} "
                   f"rows, K/V read {_count(reads)}x (once per query head and block)",),
        )  # fmt: skip

    @property
    def host_kind(self) -> str | None:
        """The host profile's SDPA probe that matches this call: the backward of one call
        (``sdpa_backward``; the backend was picked by its forward, no context around it), a
        backend forced around the call (``sdpa_forced``: ``with sdpa_kernel(...)``, 26 us more
        than the default call on an H200 VM; a mask's conversion kernels count as launches),
        a boolean mask (``sdpa_mask``), else the default call (``sdpa``)."""
        if self.backward:
            return "sdpa_backward"
        if self.forced:
            return "sdpa_forced"
        return "sdpa_mask" if self.mask else "sdpa"

    def host_launches(self, gpu: GPUSpec) -> int | None:
        """Kernels one eager call launches on ``gpu`` (the notes at
        ``SDPA_MASK_CONVERSION_LAUNCHES``); None for the math path (its kernels are priced)."""
        if self.impl == "sdpa":
            return self.on(gpu).host_launches(gpu)
        if self.impl == "naive":
            return None
        if self.backward:
            return SDPA_BACKWARD_LAUNCHES[self.impl]
        decode = uniform(self.seq == 1)
        if self.impl == "cudnn" and decode:
            split = (self.batch * self.n_kv_heads < CUDNN_SPLIT_KV_MAX_BLOCKS
                     and self.n_kv_seq > CUDNN_DECODE_KEY_TILE)  # fmt: skip
            kernels = 1 + split
        elif self.impl == "flash" and (decode or self.against_cache):
            split = self.decode_splits_kv(gpu) and self.n_kv_seq > flash_key_block(self.head_dim)
            kernels = 1 + split
        else:
            kernels = 1
        return kernels + (SDPA_MASK_CONVERSION_LAUNCHES if self.mask else 0)

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        if self.impl == "sdpa":  # called unresolved: each kernel names the family that runs it
            op = self.on(gpu)
            return [dc_replace(k, family=k.family or op.family) for k in op.kernels(gpu)]
        check_sdpa_kernel(self.impl, gpu, self.head_dim)
        if self._dispatch_note:
            return [dc_replace(k, notes=(*k.notes, self._dispatch_note))
                    for k in self._kernels(gpu)]  # fmt: skip
        return self._kernels(gpu)

    def _kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        self._check_head_dim_alignment()
        unit, dt, fast_f32 = self.product_unit(gpu)
        wide = self.wide_head_work()
        work = fast_f32 * wide
        softmax = self.softmax_parts(gpu)
        tile_k = self.head_dim_tile()
        block_m, block_n = block_rows(self.impl, self.head_dim)
        if self.causal:  # the diagonal tiles, computed whole, are in ``computed_scores``
            block_n = None
        size = element_bytes(self.dtype)
        b, h, s, d = self.batch, self.heads, self.seq, self.head_dim
        q_bytes = b * h * s * d * size
        kv_bytes = 2 * b * self.n_kv_heads * self.n_kv_seq * d * size
        # the speed of light counts the exact scores, each product once
        exact = self.scores / self.computed_scores / work
        mm_flops = 4.0 * self.computed_scores * d * work
        notes: tuple[str, ...] = ()
        if fast_f32 != 1:
            notes = (f"fp32 products as {FAST_F32_TF32_PRODUCTS} TF32 products each (the "
                     f"memory-efficient kernel's 3xTF32), priced as {fast_f32:.3g} at its 16-bit "
                     "products' calibrated rate (the FLOPs shown and the speed of light count "
                     "each product once)",)  # fmt: skip
        if uniform(wide != 1):
            notes += (f"head dim {d} (above {WIDE_HEAD_DIM}) runs another {self.impl} kernel than "
                      f"the calibrated family's: priced as {float(wide):.3g}x the work per "
                      "product (fitted on an H200; the FLOPs shown and the speed of light "
                      "count the products once)",)  # fmt: skip
        if self.mask and self.impl == "cudnn":
            slower, odd = ((CUDNN_MASK_BACKWARD_WORK_FACTOR, CUDNN_MASK_UNALIGNED_BACKWARD_FACTOR)
                           if self.backward else (CUDNN_MASK_WORK_FACTOR, CUDNN_MASK_UNALIGNED_FACTOR))  # fmt: skip
            notes += (f"an explicit mask runs cuDNN's biased kernel at ~1/{slower:.3g} of its "
                     f"dense rate (x{odd:g} again at an odd key length), priced as that much "
                     "more work (the FLOPs shown and the speed of light count the exact "
                     "products)",)  # fmt: skip
        if self.backward:
            if self.impl == "naive":
                raise UnsupportedError("attention backward is modelled for fused kernels only")
            # one fused backward kernel: reads Q, K, V, O, dO, writes dQ, dK, dV
            return [
                KernelWork(
                    name=f"{self.impl} attention backward",
                    flops=(FlopPart(unit, dt, BACKWARD_MATMUL_FACTOR * mm_flops, exact), *softmax),
                    bytes=4 * q_bytes + 2 * kv_bytes,
                    bytes_written=q_bytes + kv_bytes,
                    working_set_bytes=4 * q_bytes + 2 * kv_bytes,
                    min_flops_fraction=exact,
                    notes=notes,
                )
            ]  # fmt: skip
        if self.impl in ("cudnn", "efficient"):  # one fused kernel; its tiling is the library's
            return [
                KernelWork(
                    name=f"{self.impl} attention",
                    flops=(FlopPart(unit, dt, mm_flops, exact), *softmax),
                    bytes=2 * q_bytes + kv_bytes,
                    bytes_written=q_bytes,
                    working_set_bytes=2 * q_bytes + kv_bytes,
                    min_flops_fraction=exact,
                    gemm=GemmShape(s, self.n_kv_seq, d, b * h, dt,
                                   tile_m=block_m if uniform(s > 1) else None, tile_n=block_n,
                                   tile_k=tile_k, needs_alignment=False),
                    tile_work=self.query_tiles(block_m) if uniform(s > 1) else None,
                    tile_groups=b * h,
                    tile_blocks_per_sm=LIBRARY_BLOCKS_PER_SM,
                    bandwidth_fraction=self.decode_bandwidth_fraction(),
                    notes=notes,
                    **self.decode_serial_loop(),
                )
            ]
        if self.impl == "flash":
            nbytes = 2 * q_bytes + kv_bytes  # Q in, O out, K and V in
            if self.against_cache and not uniform(self.decode_splits_kv(gpu)):
                return [self._one_split_decode(gpu, unit, dt, tile_k, softmax, nbytes, q_bytes)]
            if self.against_cache and uniform(s > 1):
                return [self._split_kv_queries(gpu, unit, dt, tile_k, softmax, q_bytes, kv_bytes)]
            return [
                KernelWork(
                    name="flash attention",
                    flops=(FlopPart(unit, dt, mm_flops, exact), *softmax),
                    bytes=nbytes,
                    bytes_written=q_bytes,  # O
                    min_flops_fraction=exact,
                    working_set_bytes=nbytes,
                    # the last query tile of a head runs all 128 rows, filled or not (tile
                    # quantization in M): without it 129 queries (two tiles, the second of
                    # one query) were predicted faster than 128 (one full tile)
                    gemm=GemmShape(
                        s,
                        self.n_kv_seq,
                        d,
                        b * h,
                        dt,
                        tile_m=block_m if uniform(s > 1) else None,
                        tile_n=block_n,
                        tile_k=tile_k,
                        needs_alignment=False,
                    ),
                    tile_work=self.query_tiles(block_m) if uniform(s > 1) else None,
                    tile_groups=b * h,
                    tile_blocks_per_sm=FLASH_WIDE_BLOCKS_PER_SM
                    if uniform(d > WIDE_HEAD_DIM) else FLASH_BLOCKS_PER_SM,
                    # one query: the split-KV kernel, its loads pipelined as with more queries
                    pipelined=uniform(s == 1),
                )
            ]
        score_bytes = self.scores * size
        half_kv = kv_bytes / 2
        return [
            KernelWork(
                name="QK^T",
                flops=(FlopPart(unit, dt, mm_flops / 2, exact),),
                bytes=q_bytes + half_kv + score_bytes,
                bytes_written=score_bytes,
                gemm=GemmShape(s, self.n_kv_seq, d, b * h, dt),
            ),
            KernelWork(
                name="softmax",
                flops=softmax,
                bytes=2 * score_bytes,
                bytes_written=score_bytes,
                working_set_bytes=2 * score_bytes,
            ),
            KernelWork(
                name="PV",
                flops=(FlopPart(unit, dt, mm_flops / 2, exact),),
                bytes=score_bytes + half_kv + q_bytes,
                bytes_written=q_bytes,
                gemm=GemmShape(s, d, self.n_kv_seq, b * h, dt),
            ),
        ]
