#!/usr/bin/env python3
"""Unseen set for gpumodel (issue #16 item 6): kernels timed the way a PyTorch user times them.

Standalone on purpose: this file imports nothing from gpumodel and shares no code with
`gpumodel validate`, so the model can be checked against it without having been fitted to it.
The model must never be fitted or tuned to the data this script writes.

What it measures (all on the local GPU, random inputs, never zeros):
  gemm    torch.matmul (fp32 with TF32 off, TF32, fp16, bf16) and torch._scaled_mm (fp8 e4m3):
          Llama-3-8B projection shapes and GPT-2's lm head at M = 1..8192, squares 256..8192
          including odd sizes (1025, 2049, 4097)
  conv2d  F.conv2d on ResNet-50 layers at batch 1/32/128, NCHW and channels_last,
          fp32 (TF32 off), TF32, bf16, cudnn.benchmark = True
  sdpa    F.scaled_dot_product_attention bf16, causal and not, default dispatch and each
          backend forced; the kernel names the default dispatch launched are recorded
  copy    host<->device through Tensor.to / Tensor.cpu / Tensor.copy_, pinned and pageable,
          4 KB .. 1 GB (4 GB when time allows)
  sustain one 8192^3 bf16 GEMM run back to back for a few seconds after an idle second:
          time per call and the SM clock / power as they settle

Timing conditions (each record names its own):
  in-workload  back-to-back loop of the same op (input sets rotated so that the working set
               exceeds the L2 where memory allows), warm-up first, CUDA events between chunks
               of the loop; time per call = chunk time / calls in the chunk; median/p10/p90
               over chunks
  do_bench     triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="all"); the median
               of its samples is what return_mode="median" returns. do_bench zeroes a 256 MB
               buffer before every call (an L2 flush that leaves dirty lines)
  isolated     one call after a read-only flush (a sum over a buffer of 4x the L2), events
               around the call; repeated, median (the GPU is not idled before it)
  per-call     (copies) CUDA events around each single copy; host wall time also recorded
  per-call-wall (copies; added for the fifth runs) host wall clock around the copy and a
               synchronize, nothing else (what time.perf_counter around `x.to('cuda')` reads);
               the events of per-call cost ~10-20 us per call on a slow host
  back-to-back (copies) many copies enqueued in a row, events between chunks

NVML (pynvml, else `nvidia-smi -lms`) is sampled in a background thread during the whole run;
every record carries the SM clock, power and temperature seen inside its timing window. This
script only reads the GPU's state; it never sets clocks, power limits or any other setting.

Usage:
  python kernels_unseen.py --out DIR            # measure, write DIR/unseen.json + DIR/nvml_samples.json
  python kernels_unseen.py --dry                # list the points and an estimate of the run time
  python kernels_unseen.py --smoke --out DIR    # tiny subset (works on a CPU-only torch for code paths)
"""

from __future__ import annotations

import argparse
import bisect
import datetime as _dt
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time

SCHEMA_VERSION = 1

# ---------------------------------------------------------------------------------------------
# The fixed point set
# ---------------------------------------------------------------------------------------------

# (label, N, K): y = x @ W.T with W of shape (N, K), as nn.Linear computes it.
# Llama-3-8B: hidden 4096, 32 q heads / 8 kv heads of 128, FFN 14336, vocab 128256
# (meta-llama/Meta-Llama-3-8B config.json). GPT-2: hidden 768, vocab 50257.
LLM_NK = [
    ("llama3-8b q/o proj", 4096, 4096),
    ("llama3-8b qkv fused", 6144, 4096),
    ("llama3-8b k/v proj", 1024, 4096),
    ("llama3-8b gate+up fused", 28672, 4096),
    ("llama3-8b gate/up proj", 14336, 4096),
    ("llama3-8b down proj", 4096, 14336),
    ("llama3-8b lm head", 128256, 4096),
    ("gpt2 lm head", 50257, 768),
]
M_ALL = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
SQUARES = [256, 512, 1024, 1025, 2048, 2049, 4096, 4097, 8192]
SQUARES_FEW = [256, 1024, 1025, 2049, 4096, 8192]

GEMM_PLAN = {
    # dtype: (M values for the LLM shapes, square sizes, include gpt2 (misaligned K/N))
    "bf16": (M_ALL, SQUARES, True),
    # _scaled_mm needs K and N multiples of 16: no GPT-2 (N = 50257), no odd squares
    "fp8_e4m3": ([1, 16, 128, 1024, 4096], [256, 1024, 2048, 4096, 8192], False),
    "fp16": ([1, 16, 256, 4096], SQUARES_FEW, True),
    "tf32": ([1, 16, 256, 4096], SQUARES_FEW, True),
    "fp32": ([1, 128, 1024], SQUARES_FEW, True),
}

# ResNet-50 (torchvision v1.5: stride on the 3x3) conv layers: (label, Cin, Cout, k, stride, pad, H_in)
RESNET50_CONVS = [
    ("stem 7x7 s2", 3, 64, 7, 2, 3, 224),
    ("layer1 3x3 64", 64, 64, 3, 1, 1, 56),
    ("layer1 1x1 64->256", 64, 256, 1, 1, 0, 56),
    ("layer2 3x3 128 s2", 128, 128, 3, 2, 1, 56),
    ("layer2 downsample 1x1 256->512 s2", 256, 512, 1, 2, 0, 56),
    ("layer3 3x3 256", 256, 256, 3, 1, 1, 14),
    ("layer3 1x1 1024->256", 1024, 256, 1, 1, 0, 14),
    ("layer4 3x3 512 s2", 512, 512, 3, 2, 1, 14),
    ("layer4 1x1 512->2048", 512, 2048, 1, 1, 0, 7),
]
CONV_BATCHES = [1, 32, 128]
CONV_DTYPES = ["fp32", "tf32", "bf16"]
CONV_LAYOUTS = ["nchw", "channels_last"]

# (label, batch, heads, seq, head_dim, causal)
SDPA_SHAPES = [
    ("readme headline", 1, 16, 1024, 128, False),
    ("readme headline causal", 1, 16, 1024, 128, True),
    ("llama3-8b prefill", 8, 32, 2048, 128, True),
    ("long prefill", 1, 32, 8192, 128, True),
    ("bert/gpt2-like", 16, 12, 512, 64, False),
    ("hd64 causal", 4, 16, 4096, 64, True),
    ("large non-causal", 32, 32, 1024, 128, False),
    # added 2026-11-28 (third session), measured before the attention model saw any of them:
    # head dims 64/80/96 as GPT-2, ViT, Phi-2 and Phi-3 use them, fp16, mid-size prefill
    ("gpt2-medium train", 8, 16, 1024, 64, True),
    ("vit-b/16", 64, 12, 197, 64, False),
    ("hd64 long causal", 1, 16, 8192, 64, True),
    ("phi-2 hd80", 8, 32, 1024, 80, False),
    ("phi-3 hd96 causal", 4, 32, 2048, 96, True),
    ("llama 2k full", 2, 32, 2048, 128, False),
    ("mid causal fp16", 2, 32, 4096, 128, True, "fp16"),
    ("gpt2 fp16", 16, 12, 1024, 64, True, "fp16"),
    # added after the attention rules of 2026-11-28 were final, before any run measured them
    ("sd-unet hd40", 8, 8, 4096, 40, False),
    ("gemma hd256 causal", 2, 8, 4096, 256, True),
    ("whisper hd64 fp16", 16, 20, 1500, 64, False, "fp16"),
    ("llama 4k causal b1", 1, 32, 4096, 128, True),
    ("short causal wide batch", 32, 32, 512, 128, True),
    ("hd112 full", 4, 16, 2048, 112, False),
    # added 2026-11-30 (sixteenth session), before gpumodel's fp32 attention rule was written:
    # fp32 tensors, which SDPA hands to its memory-efficient kernel (flash and cuDNN refuse them)
    ("bert-base fp32", 16, 12, 512, 64, False, "fp32"),
    ("gpt2 fp32 causal", 8, 12, 1024, 64, True, "fp32"),
    ("llama hd128 fp32 causal", 2, 32, 2048, 128, True, "fp32"),
    ("vit-l/14 fp32", 32, 16, 257, 64, False, "fp32"),
    ("hd96 fp32", 4, 32, 1024, 96, False, "fp32"),
    ("long fp32 causal", 1, 16, 8192, 128, True, "fp32"),
    # added 2026-11-30 after the fp32 work factor was split by kernel (head dim up to 64 or
    # above), before any run measured them
    ("t5-like fp32", 8, 8, 512, 64, False, "fp32"),
    ("hd128 fp32 full", 2, 16, 2048, 128, False, "fp32"),
    ("hd64 fp32 causal 4k", 1, 12, 4096, 64, True, "fp32"),
    ("hd80 fp32", 4, 32, 1024, 80, False, "fp32"),
    ("hd128 fp32 causal b8", 8, 32, 512, 128, True, "fp32"),
    ("hd32 fp32", 16, 16, 1024, 32, False, "fp32"),
    # added 2026-12-01 (nineteenth session) after the causal cap at short sequences was written
    # on the short-sequence fit set, before any run measured them: sequences below 512
    ("clip text causal", 64, 12, 77, 64, True),
    ("bert-base 128", 32, 12, 128, 64, False),
    ("squad 384 hd64", 16, 16, 384, 64, False),
    ("vit-l/14 bf16", 32, 16, 257, 64, False),
    ("llama prefill 256 causal", 8, 32, 256, 128, True),
    ("t5 decoder 320 causal", 16, 8, 320, 64, True),
]
# added 2026-11-30 (seventeenth session), before any model of the memory-efficient kernel above
# head dim 128 was fitted: training shapes whose backward (dQ, dK, dV through torch.autograd.grad
# on a retained graph, as a training step's backward calls it) is timed too, each backend;
# Gemma's head dim 256, head dims 160 and 192, and two 16-bit controls (head dims 64 and 128)
SDPA_BACKWARD_SHAPES = [
    ("gemma-7b train hd256 causal", 1, 16, 4096, 256, True),
    ("gemma-2b train hd256 b4", 4, 8, 2048, 256, True),
    ("hd256 full", 2, 8, 1024, 256, False),
    ("hd192 full", 2, 16, 2048, 192, False),
    ("hd160 causal", 4, 16, 1024, 160, True),
    ("llama train hd128 causal", 2, 32, 2048, 128, True),
    ("gpt2 train hd64 causal", 8, 12, 1024, 64, True),
    # added 2026-11-30 after run 30 had measured the shapes above, before gpumodel's rule for
    # head dims above 128 was written (its clean check)
    ("hd256 long causal", 1, 16, 8192, 256, True),
    ("hd256 small full", 4, 4, 512, 256, False),
    ("hd192 causal 4k", 1, 16, 4096, 192, True),
    ("hd160 full b2", 2, 24, 1024, 160, False),
    ("hd224 causal", 2, 8, 2048, 224, True),
    ("hd144 full", 8, 8, 1024, 144, False),
]
# added 2026-11-30 (seventeenth session), before any run measured them: the causal pattern as an
# explicit boolean mask (what HF passes with padding or a sliding window; is_causal off), the
# default dispatch, forward and backward; head dims 64-256 and an odd key length
# (label, batch, heads, seq, head_dim)
SDPA_MASKED_SHAPES = [
    ("masked llama prefill hd128", 2, 32, 2048, 128),
    ("masked gpt2 hd64", 8, 12, 1024, 64),
    ("masked gemma hd256", 2, 8, 2048, 256),
    ("masked hd192 4k", 1, 16, 4096, 192),
    ("masked odd length hd128", 1, 32, 2047, 128),
    # added 2026-12-01 after run 32 found the odd-length masked backward priced 32% fast, before
    # any rule for it was written (its clean check)
    ("masked odd hd64", 4, 12, 1023, 64),
    ("masked odd hd128 b2", 2, 16, 3001, 128),
    ("masked odd hd128 4k", 1, 32, 4093, 128),
    ("masked even hd128 b4", 4, 32, 1024, 128),
]
# added 2026-12-01 (eighteenth session), before any run measured them: decode, one query per
# sequence against a KV cache (is_causal off), as HF's generate calls SDPA. "expanded": K/V
# materialised at the query heads (repeat_kv); "gqa": K/V at their own heads with enable_gqa
# (transformers' path without a mask); head dims 64-256 (Gemma's 256), batch 1-64, KV 1k-32k
# (label, batch, heads, kv_heads, kv_seq, head_dim, gqa, dtype)
SDPA_DECODE_SHAPES = [
    ("decode llama3-8b b1 2k", 1, 32, 32, 2048, 128, False, "bf16"),
    ("decode llama3-8b b8 2k", 8, 32, 32, 2048, 128, False, "bf16"),
    ("decode llama3-8b b32 4k", 32, 32, 32, 4096, 128, False, "bf16"),
    ("decode llama3-8b b64 1k", 64, 32, 32, 1024, 128, False, "bf16"),
    ("decode llama3-8b gqa b8 4k", 8, 32, 8, 4096, 128, True, "bf16"),
    ("decode long b1 32k", 1, 32, 8, 32768, 128, True, "bf16"),
    ("decode gpt2 hd64 b16 1k", 16, 12, 12, 1024, 64, False, "bf16"),
    ("decode gemma-7b hd256 b1 4k", 1, 16, 16, 4096, 256, False, "bf16"),
    ("decode gemma-7b hd256 b8 2k", 8, 16, 16, 2048, 256, False, "bf16"),
    ("decode gemma-7b hd256 b32 1k", 32, 16, 16, 1024, 256, False, "bf16"),
    ("decode gemma-2b mqa hd256 b16 2k", 16, 8, 1, 2048, 256, True, "bf16"),
    ("decode fp16 hd128 b4 8k", 4, 32, 32, 8192, 128, False, "fp16"),
    # added 2026-12-01 after run 34 had measured the shapes above, before any run measured these
    # (the clean check of the cuDNN wide-head decode rule written on the fit set after run 34)
    ("decode gemma-2-9b hd256 gqa b4 8k", 4, 16, 8, 8192, 256, True, "bf16"),
    ("decode hd256 b64 512", 64, 8, 8, 512, 256, False, "bf16"),
    ("decode hd192 b8 4k", 8, 16, 16, 4096, 192, False, "bf16"),
    ("decode hd128 gqa b16 16k", 16, 32, 8, 16384, 128, True, "bf16"),
    ("decode phi-2 hd80 b8 2k", 8, 32, 32, 2048, 80, False, "bf16"),
    ("decode phi-3 hd96 b4 4k", 4, 32, 32, 4096, 96, False, "bf16"),
    # a padding mask (HF's batched generate with left padding: a bool mask, K/V expanded)
    ("decode padded llama b8 2k", 8, 32, 32, 2048, 128, False, "bf16", "mask"),
    ("decode padded gpt2 b16 1k", 16, 12, 12, 1024, 64, False, "bf16", "mask"),
    # added 2026-12-01 after run 35, before any run measured them (the clean check of the
    # memory-efficient kernel's decode loop): fp32 models' decode (SDPA runs that kernel for
    # fp32 tensors) and two more 16-bit shapes every backend runs
    ("decode gpt2 fp32 b1 1k", 1, 12, 12, 1024, 64, False, "fp32"),
    ("decode llama fp32 b4 4k", 4, 32, 32, 4096, 128, False, "fp32"),
    ("decode fp32 hd256 b2 2k", 2, 16, 16, 2048, 256, False, "fp32"),
    ("decode hd128 b2 8k", 2, 16, 16, 8192, 128, False, "bf16"),
    ("decode hd64 b96 2k", 96, 12, 12, 2048, 64, False, "bf16"),
    # added 2026-12-01 (twenty-second session) after the one-split decode rule was written on
    # validate's points and the decode fit set, before any run measured these: decode that
    # fills the GPU (FlashAttention-2's regular kernel when forced, cuDNN's by default)
    ("decode llama-2-13b b16 2k", 16, 40, 40, 2048, 128, False, "bf16"),
    ("decode llama-2-7b b12 4k", 12, 32, 32, 4096, 128, False, "bf16"),
    ("decode gpt2-medium hd64 b32 1k", 32, 16, 16, 1024, 64, False, "bf16"),
    ("decode hd96 b16 2k", 16, 32, 32, 2048, 96, False, "bf16"),
    ("decode hd160 b16 1k", 16, 32, 32, 1024, 160, False, "bf16"),
    ("decode hd192 b16 2k", 16, 16, 16, 2048, 192, False, "bf16"),
    ("decode hd256 b16 2k", 16, 16, 16, 2048, 256, False, "bf16"),
    ("decode gqa b64 2k", 64, 32, 8, 2048, 128, True, "bf16"),
]
# added 2026-12-01 (twenty-second session), before any run measured them or any rule for them
# was written: a few queries per sequence against a KV cache, as speculative decoding verifies
# its drafted tokens and chunked prefill feeds a prompt (is_causal off: SDPA's causal mask is
# top-left aligned when queries are fewer than keys, so callers pass none or their own).
# (label, batch, heads, kv_heads, seq_q, kv_seq, head_dim, gqa); bf16. Family "sdpa-short".
SDPA_SHORT_QUERY_SHAPES = [
    ("verify llama3-8b b1 q4 4k", 1, 32, 8, 4, 4096, 128, True),
    ("verify llama3-8b b8 q2 2k", 8, 32, 8, 2, 2048, 128, True),
    ("verify llama-2-7b b4 q8 2k", 4, 32, 32, 8, 2048, 128, False),
    ("verify llama3-8b b32 q4 2k", 32, 32, 8, 4, 2048, 128, True),
    ("verify hd256 b2 q5 4k", 2, 16, 16, 5, 4096, 256, False),
    ("chunk llama3-8b b1 q64 8k", 1, 32, 8, 64, 8192, 128, True),
    ("chunk b1 q128 4k", 1, 32, 32, 128, 4096, 128, False),
    ("chunk gpt2 b2 q32 1k", 2, 12, 12, 32, 1024, 64, False),
]
SDPA_BACKENDS = ["default", "flash", "efficient", "cudnn"]

COPY_SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30]
COPY_BIG = 4 << 30

ELEM_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8_e4m3": 1}

# time-loop settings (seconds of GPU work)
GEMM_WARMUP_S, GEMM_TIMED_S = 0.05, 0.20
CONV_WARMUP_S, CONV_TIMED_S = 0.05, 0.15
SDPA_WARMUP_S, SDPA_TIMED_S = 0.05, 0.20
N_CHUNKS = 10
ISOLATED_REPS = 7
POOL_L2_MULTIPLE = 3  # in-workload input sets rotate over >= 3x the L2 where the cap allows
GEMM_MAX_SETS = 64
CONV_MAX_SETS = 16

# rough family budgets (s); points past a family's budget are skipped and listed
DEFAULT_BUDGET_S = {"sustain": 6, "gemm": 130, "conv2d": 65, "sdpa": 190, "copy": 35,
                    "sdpa-short": 90}  # fmt: skip
# in-workload-graph: the same back-to-back loop captured in a CUDA graph and replayed, so the
# kernels run back to back without the eager launch gaps; only for ops under GRAPH_MAX_CALL_S
# (larger ones are not launch-bound) and only where a single eager call is under GRAPH_PRECHECK_S
GRAPH_MAX_CALL_S = 100e-6
GRAPH_PRECHECK_S = 1e-3
GRAPH_WARMUP_S, GRAPH_TIMED_S = 0.02, 0.05
GRAPH_MIN_CALLS = 32


def gemm_points():
    pts = []
    for dtype, (ms, squares, gpt2) in GEMM_PLAN.items():
        for label, n, k in LLM_NK:
            if label.startswith("gpt2") and not gpt2:
                continue
            for m in ms:
                pts.append(dict(label=label, M=m, N=n, K=k, dtype=dtype, layout="x@W.T"))
        for s in squares:
            pts.append(dict(label=f"square {s}", M=s, N=s, K=s, dtype=dtype, layout="A@B"))
    return pts


def conv_points():
    pts = []
    for label, cin, cout, k, stride, pad, h in RESNET50_CONVS:
        for batch in CONV_BATCHES:
            for dtype in CONV_DTYPES:
                for layout in CONV_LAYOUTS:
                    pts.append(
                        dict(
                            label=label,
                            N=batch,
                            C=cin,
                            K=cout,
                            H=h,
                            W=h,
                            R=k,
                            S=k,
                            stride=stride,
                            pad=pad,
                            dtype=dtype,
                            layout=layout,
                        )
                    )
    return pts


def gemm_flops_bytes(p):
    m, n, k = p["M"], p["N"], p["K"]
    if p["dtype"] == "fp8_e4m3":
        return 2 * m * n * k, m * k + k * n + 2 * m * n  # fp8 inputs, bf16 output
    e = ELEM_BYTES[p["dtype"]]
    return 2 * m * n * k, e * (m * k + k * n + m * n)


def conv_out_hw(p):
    ho = (p["H"] + 2 * p["pad"] - p["R"]) // p["stride"] + 1
    wo = (p["W"] + 2 * p["pad"] - p["S"]) // p["stride"] + 1
    return ho, wo


def conv_flops_bytes(p):
    ho, wo = conv_out_hw(p)
    e = ELEM_BYTES[p["dtype"]]
    flops = 2 * p["N"] * p["K"] * ho * wo * p["C"] * p["R"] * p["S"]
    nbytes = e * (
        p["N"] * p["C"] * p["H"] * p["W"] + p["K"] * p["C"] * p["R"] * p["S"] + p["N"] * p["K"] * ho * wo
    )
    return flops, nbytes


def sdpa_flops_bytes(b, h, s, d, causal, elem=2):
    # QK^T and PV, 2 FLOPs per multiply-add each; causal does half (FlashAttention-2 paper's count)
    flops = 4 * b * h * s * s * d
    if causal:
        flops //= 2
    return flops, elem * 4 * b * h * s * d  # Q, K, V read, O written


# ---------------------------------------------------------------------------------------------
# NVML sampling (read-only)
# ---------------------------------------------------------------------------------------------

CLOCK_EVENT_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def reasons_names(mask):
    return [name for bit, name in CLOCK_EVENT_BITS.items() if mask & bit]


class Sampler:
    """Background sampler: rows (t_epoch_s, sm_mhz, mem_mhz, power_w, power_instant_w, temp_c, reasons)."""

    def __init__(self, interval_s=0.02, uuid=None):
        self.interval_s = interval_s
        self.rows = []
        self.source = None
        self.static = {}
        self._stop = threading.Event()
        self._thread = None
        self._proc = None
        self._uuid = uuid

    def start(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nv = pynvml
            h = None
            if self._uuid:
                for i in range(pynvml.nvmlDeviceGetCount()):
                    hh = pynvml.nvmlDeviceGetHandleByIndex(i)
                    u = pynvml.nvmlDeviceGetUUID(hh)
                    u = u.decode() if isinstance(u, bytes) else u
                    if self._uuid in u or u in self._uuid:
                        h = hh
            self._h = h if h is not None else pynvml.nvmlDeviceGetHandleByIndex(0)
            self.source = "pynvml"
            self._read_static()
            self._thread = threading.Thread(target=self._loop_nvml, daemon=True)
            self._thread.start()
            return
        except Exception as exc:
            self.static["pynvml_error"] = repr(exc)
        try:
            self._proc = subprocess.Popen(
                [
                    "nvidia-smi",
                    "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu",
                    "--format=csv,noheader,nounits",
                    "-i",
                    "0",
                    "-lms",
                    "100",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            self.source = "nvidia-smi -lms 100"
            self._thread = threading.Thread(target=self._loop_smi, daemon=True)
            self._thread.start()
        except Exception as exc:
            self.source = None
            self.static["nvidia_smi_error"] = repr(exc)

    def _read_static(self):
        nv, h = self._nv, self._h

        def get(name, fn):
            try:
                v = fn()
                self.static[name] = v.decode() if isinstance(v, bytes) else v
            except Exception as exc:
                self.static[name] = f"n/a ({type(exc).__name__})"

        get("name", lambda: nv.nvmlDeviceGetName(h))
        get("uuid", lambda: nv.nvmlDeviceGetUUID(h))
        get("driver_version", lambda: nv.nvmlSystemGetDriverVersion())
        get("cuda_driver_version", lambda: nv.nvmlSystemGetCudaDriverVersion())
        get("power_limit_w", lambda: nv.nvmlDeviceGetPowerManagementLimit(h) / 1000)
        get("power_limit_default_w", lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000)
        get("power_limit_enforced_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000)
        get(
            "power_limit_min_max_w",
            lambda: [x / 1000 for x in nv.nvmlDeviceGetPowerManagementLimitConstraints(h)],
        )
        get("max_sm_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
        get("max_mem_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM))
        get("app_sm_clock_mhz", lambda: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM))
        get("default_app_sm_clock_mhz", lambda: nv.nvmlDeviceGetDefaultApplicationsClock(h, nv.NVML_CLOCK_SM))
        get("persistence_mode", lambda: nv.nvmlDeviceGetPersistenceMode(h))
        get("temperature_c_at_start", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
        get("vbios", lambda: nv.nvmlDeviceGetVbiosVersion(h))

    def _power_instant(self):
        nv = self._nv
        fid = getattr(nv, "NVML_FI_DEV_POWER_INSTANT", 186)
        fv = nv.nvmlDeviceGetFieldValues(self._h, [fid])[0]
        if fv.nvmlReturn != 0:
            return None
        vt = fv.valueType
        val = {
            0: fv.value.dVal,
            1: fv.value.uiVal,
            2: fv.value.ulVal,
            3: fv.value.ullVal,
            4: fv.value.sllVal,
        }.get(vt, fv.value.uiVal)
        return val / 1000.0

    def _loop_nvml(self):
        nv, h = self._nv, self._h
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if reasons_fn is None:
            reasons_fn = nv.nvmlDeviceGetCurrentClocksThrottleReasons
        failing = set()

        def read(name, fn):
            if name in failing:
                return None
            try:
                return fn()
            except Exception as exc:
                failing.add(name)
                self.static.setdefault("sampler_errors", {})[name] = repr(exc)[:200]
                return None

        while not self._stop.is_set():
            t = time.time()
            sm = read("sm", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
            mem = read("mem", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
            pw = read("power", lambda: round(nv.nvmlDeviceGetPowerUsage(h) / 1000.0, 1))
            pwi = read("power_instant", self._power_instant)
            temp = read("temp", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
            rs = read("reasons", lambda: int(reasons_fn(h)))
            if sm is not None:
                self.rows.append(
                    (
                        round(t, 4),
                        sm,
                        mem,
                        pw,
                        None if pwi is None else round(pwi, 1),
                        temp,
                        -1 if rs is None else rs,
                    )
                )
            if len(failing) >= 6:
                break
            self._stop.wait(self.interval_s)

    def _loop_smi(self):
        for line in self._proc.stdout:
            if self._stop.is_set():
                break
            parts = [x.strip() for x in line.split(",")]
            try:
                ts = _dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                self.rows.append(
                    (
                        round(ts, 4),
                        int(float(parts[1])),
                        int(float(parts[2])),
                        float(parts[3]),
                        None,
                        int(float(parts[4])),
                        -1,
                    )
                )
            except Exception:
                continue

    def stop(self):
        self._stop.set()
        if self._proc is not None:
            self._proc.terminate()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def window(self, t0, t1):
        """Summary of samples with t0 <= t <= t1 (host epoch seconds)."""
        all_rows = self.rows  # appended in time order by the sampler thread
        lo = bisect.bisect_left(all_rows, t0, key=lambda r: r[0])
        hi = bisect.bisect_right(all_rows, t1, key=lambda r: r[0])
        rows = all_rows[lo:hi]
        if not rows:
            # short windows: take the nearest sample after t0 (within 0.25 s)
            rows = [r for r in all_rows[lo : lo + 1] if r[0] <= t1 + 0.25]
        if not rows:
            return {"nvml_n_samples": 0}
        sm = [r[1] for r in rows]
        pw = [r[3] for r in rows if r[3] is not None]
        pwi = [r[4] for r in rows if r[4] is not None]
        mems = [r[2] for r in rows if r[2] is not None]
        temps = [r[5] for r in rows if r[5] is not None]
        mask = 0
        for r in rows:
            if r[6] > 0:
                mask |= r[6]
        out = {
            "nvml_n_samples": len(rows),
            "sm_clock_mhz_median": statistics.median(sm),
            "sm_clock_mhz_min": min(sm),
            "sm_clock_mhz_max": max(sm),
            "mem_clock_mhz_median": statistics.median(mems) if mems else None,
            "power_w_median": statistics.median(pw) if pw else None,
            "power_w_max": max(pw) if pw else None,
            "temperature_c_max": max(temps) if temps else None,
            "clock_event_reasons": reasons_names(mask),
        }
        if pwi:
            out["power_instant_w_median"] = statistics.median(pwi)
            out["power_instant_w_max"] = max(pwi)
        return out


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


def quantiles(xs):
    xs = sorted(xs)
    n = len(xs)

    def q(p):
        if n == 1:
            return xs[0]
        pos = p * (n - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return statistics.median(xs), q(0.1), q(0.9)


class Timer:
    def __init__(self, torch, sampler, device):
        self.torch = torch
        self.sampler = sampler
        self.cuda = device == "cuda"
        self.flush_buf = None
        if self.cuda:
            l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
            self.flush_buf = torch.randn(max(4 * l2, 256 << 20) // 4, device="cuda")

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def event(self):
        if self.cuda:
            e = self.torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def elapsed_s(self, a, b):
        if self.cuda:
            return a.elapsed_time(b) / 1e3
        return b - a

    def in_workload(self, fns, warmup_s, timed_s, chunks=N_CHUNKS):
        """Back-to-back loop cycling over fns (one closure per input set)."""
        nf = len(fns)
        fns[0]()  # first call: library heuristics / autotuning
        self.sync()
        t = time.perf_counter()
        n_est = max(3, min(nf, 16))
        for i in range(n_est):
            fns[i % nf]()
        self.sync()
        est = max((time.perf_counter() - t) / n_est, 1e-6)
        n_warm = max(3, math.ceil(warmup_s / est))
        per_chunk = max(1, math.ceil(timed_s / est / chunks))
        for i in range(n_warm):
            fns[i % nf]()
        self.sync()
        t0 = time.time()
        h0 = time.perf_counter()
        evs = [self.event()]
        j = 0
        for _ in range(chunks):
            for _ in range(per_chunk):
                fns[j % nf]()
                j += 1
            evs.append(self.event())
        h_enqueue = time.perf_counter() - h0
        self.sync()
        t1 = time.time()
        per_call = [self.elapsed_s(evs[i], evs[i + 1]) / per_chunk for i in range(chunks)]
        total = self.elapsed_s(evs[0], evs[-1])
        med, p10, p90 = quantiles(per_call)
        return {
            "time_s_median": med,
            "time_s_p10": p10,
            "time_s_p90": p90,
            "time_s_mean": total / (per_chunk * chunks),
            "n_calls": per_chunk * chunks,
            "n_chunks": chunks,
            "warmup_calls": n_warm,
            "warmup_s_target": warmup_s,
            "timed_s_target": timed_s,
            # host enqueue time close to the GPU time means the loop was launch-bound
            "host_enqueue_s": h_enqueue,
            "gpu_loop_s": total,
            "launch_bound": h_enqueue >= 0.9 * total,
            **self.sampler.window(t0, t1),
        }

    def in_workload_graph(self, fns, warmup_s=GRAPH_WARMUP_S, timed_s=GRAPH_TIMED_S, chunks=N_CHUNKS):
        """fns cycled back to back inside one CUDA graph; None where the op is too long to need it."""
        t = self.torch
        if not self.cuda:
            return None
        nf = len(fns)
        fns[0]()  # library handles / heuristics outside the timed pre-check
        self.sync()
        h0 = time.perf_counter()
        fns[0]()
        self.sync()
        if time.perf_counter() - h0 > GRAPH_PRECHECK_S:
            return None
        calls = nf * math.ceil(GRAPH_MIN_CALLS / nf)
        side = t.cuda.Stream()
        side.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(side):
            for f in fns:
                f()
        t.cuda.current_stream().wait_stream(side)
        self.sync()
        g = t.cuda.CUDAGraph()
        with t.cuda.graph(g):
            for i in range(calls):
                fns[i % nf]()
        g.replay()
        self.sync()
        h0 = time.perf_counter()
        g.replay()
        self.sync()
        est_replay = max(time.perf_counter() - h0, 1e-6)
        e0, e1 = self.event(), None
        g.replay()
        e1 = self.event()
        self.sync()
        if self.elapsed_s(e0, e1) / calls > GRAPH_MAX_CALL_S:
            del g
            return None
        n_warm = max(2, math.ceil(warmup_s / est_replay))
        per_chunk = max(1, math.ceil(timed_s / est_replay / chunks))
        for _ in range(n_warm):
            g.replay()
        self.sync()
        t0 = time.time()
        evs = [self.event()]
        for _ in range(chunks):
            for _ in range(per_chunk):
                g.replay()
            evs.append(self.event())
        self.sync()
        t1 = time.time()
        per_call = [self.elapsed_s(evs[i], evs[i + 1]) / (per_chunk * calls) for i in range(chunks)]
        total = self.elapsed_s(evs[0], evs[-1])
        med, p10, p90 = quantiles(per_call)
        del g
        return {
            "time_s_median": med,
            "time_s_p10": p10,
            "time_s_p90": p90,
            "time_s_mean": total / (per_chunk * chunks * calls),
            "n_calls": per_chunk * chunks * calls,
            "n_chunks": chunks,
            "calls_per_graph": calls,
            "warmup_calls": n_warm * calls,
            "warmup_s_target": warmup_s,
            "timed_s_target": timed_s,
            **self.sampler.window(t0, t1),
        }

    def do_bench(self, fn):
        import triton.testing as tt

        t0 = time.time()
        try:
            ms = tt.do_bench(fn, warmup=25, rep=100, return_mode="all")
        except AssertionError:  # older triton without return_mode="all"
            ms = tt.do_bench(fn, warmup=25, rep=100, quantiles=[0.5, 0.1, 0.9])
            t1 = time.time()
            return {
                "time_s_median": ms[0] / 1e3,
                "time_s_p10": ms[1] / 1e3,
                "time_s_p90": ms[2] / 1e3,
                "n_calls": None,
                **self.sampler.window(t0, t1),
            }
        t1 = time.time()
        med, p10, p90 = quantiles([x / 1e3 for x in ms])
        return {
            "time_s_median": med,
            "time_s_p10": p10,
            "time_s_p90": p90,
            "time_s_mean": statistics.mean(ms) / 1e3,
            "n_calls": len(ms),
            **self.sampler.window(t0, t1),
        }

    def isolated(self, fn, reps=ISOLATED_REPS):
        self.sync()
        t0 = time.time()
        pairs = []
        for _ in range(reps):
            if self.flush_buf is not None:
                self.flush_buf.sum()  # read-only flush of L2 (result discarded)
            a = self.event()
            fn()
            b = self.event()
            pairs.append((a, b))
        self.sync()
        t1 = time.time()
        med, p10, p90 = quantiles([self.elapsed_s(a, b) for a, b in pairs])
        return {
            "time_s_median": med,
            "time_s_p10": p10,
            "time_s_p90": p90,
            "n_calls": reps,
            **self.sampler.window(t0, t1),
        }


def rel_err(torch, out, ref):
    out = out.double()
    ref = ref.double()
    if not torch.isfinite(out).all():
        return float("nan")
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))


# ---------------------------------------------------------------------------------------------
# Families
# ---------------------------------------------------------------------------------------------


class Run:
    def __init__(self, args):
        import torch

        self.torch = torch
        self.args = args
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.records = []
        self.checks = []
        self.skipped = []
        self.errors = []
        self.family_time_s = {}
        uuid = None
        if self.device == "cuda":
            try:
                uuid = str(torch.cuda.get_device_properties(0).uuid)
            except Exception:
                uuid = None
        self.sampler = Sampler(uuid=uuid)
        if self.device == "cuda":
            self.sampler.start()
        self.timer = Timer(torch, self.sampler, self.device)
        self.l2_bytes = 50 << 20
        if self.device == "cuda":
            self.l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", self.l2_bytes)
        self.gen = torch.Generator(device=self.device)
        self.gen.manual_seed(1234)
        self.have_triton = False
        if self.device == "cuda":
            try:
                import triton.testing  # noqa: F401

                self.have_triton = True
            except Exception as exc:
                self.errors.append(f"triton import failed: {exc!r}")

    def randn(self, shape, dtype=None):
        t = self.torch
        return t.randn(shape, device=self.device, generator=self.gen, dtype=dtype or t.float32)

    def n_sets(self, set_bytes, cap):
        return int(min(cap, max(1, math.ceil(POOL_L2_MULTIPLE * self.l2_bytes / max(set_bytes, 1)))))

    def set_tf32(self, on):
        t = self.torch
        t.backends.cuda.matmul.allow_tf32 = on
        t.backends.cudnn.allow_tf32 = on

    def add(self, base, cond, timing, flops=None, nbytes=None):
        rec = dict(base)
        rec["condition"] = cond
        rec.update(timing)
        med = rec.get("time_s_median")
        if flops is not None:
            rec["flops"] = flops
            rec["tflop_per_s"] = flops / med / 1e12 if med else None
        if nbytes is not None:
            rec["bytes"] = nbytes
            rec["gb_per_s"] = nbytes / med / 1e9 if med else None
        self.records.append(rec)

    def graph_variant(self, base, fns, flops, nbytes):
        try:
            w = self.timer.in_workload_graph(fns)
        except Exception as exc:
            try:
                self.timer.sync()
            except Exception:
                pass
            self.skipped.append(
                {**base, "condition": "in-workload-graph", "why": f"{type(exc).__name__}: {exc}"[:300]}
            )
            return
        if w is not None:
            self.add(base, "in-workload-graph", w, flops, nbytes)

    # -- sustain --------------------------------------------------------------------------------
    def family_sustain(self, deadline):
        t = self.torch
        n = 8192 if not self.args.smoke else 256
        dtype = t.bfloat16 if self.device == "cuda" else t.float32
        a = self.randn((n, n), dtype)
        b = self.randn((n, n), dtype)
        fn = lambda: t.matmul(a, b)  # noqa: E731
        fn()
        self.timer.sync()
        time.sleep(1.0)  # idle second: the clock and power start from their idle state
        dur = 3.0 if not self.args.smoke else 0.2
        flops = 2 * n**3
        est = flops / 7e14 if self.device == "cuda" else 0.001
        calls_per_chunk = max(1, int(0.05 / est))
        series = []
        tstart = time.time()
        while time.time() - tstart < dur:
            ts = time.time()
            e0 = self.timer.event()
            for _ in range(calls_per_chunk):
                fn()
            e1 = self.timer.event()
            series.append((ts, e0, e1))
            # keep at most ~2 chunks in flight so host times track GPU times
            if len(series) >= 2:
                if self.device == "cuda":
                    series[-2][2].synchronize()
        self.timer.sync()
        tend = time.time()
        rows = []
        for ts, e0, e1 in series:
            dt = self.timer.elapsed_s(e0, e1) / calls_per_chunk
            rows.append(
                {"t_s": round(ts - tstart, 4), "time_s_per_call": dt, "tflop_per_s": flops / dt / 1e12}
            )
        self.sustain = {
            "op": "torch.matmul",
            "dtype": "bf16" if self.device == "cuda" else "fp32",
            "shape": {"M": n, "N": n, "K": n},
            "flops_per_call": flops,
            "calls_per_chunk": calls_per_chunk,
            "idle_before_s": 1.0,
            "duration_s": dur,
            "chunks": rows,
            "t0_epoch_s": tstart,
            "t1_epoch_s": tend,
            "nvml_first_200ms": self.sampler.window(tstart, tstart + 0.2),
            "nvml_last_1s": self.sampler.window(tend - 1.0, tend),
            "nvml_series": [r for r in self.sampler.rows if tstart - 1.0 <= r[0] <= tend],
        }

    # -- gemm -----------------------------------------------------------------------------------
    def family_gemm(self, deadline):
        t = self.torch
        pts = gemm_points()
        if self.args.smoke:
            pts = [p for p in pts if p["M"] <= 64 and p["N"] <= 4096 and p["K"] <= 4096][:6] + [
                p for p in pts if p["label"] == "square 1025"
            ]
        self.check_gemm()
        for i, p in enumerate(pts):
            if time.time() > deadline:
                self.skipped.extend({"family": "gemm", **q, "why": "family time budget"} for q in pts[i:])
                break
            try:
                self.one_gemm(p)
            except Exception as exc:
                self.skipped.append({"family": "gemm", **p, "why": f"{type(exc).__name__}: {exc}"[:300]})
            big = p["N"] * p["K"] >= 50257 * 768 * 4 or p["M"] >= 4096
            if big and self.device == "cuda":
                t.cuda.empty_cache()

    def gemm_operands(self, p, dtype_name):
        """One input set: (A, B) with A (M,K) row-major; B (K,N) as x@W.T view or row-major."""
        t = self.torch
        m, n, k = p["M"], p["N"], p["K"]
        if dtype_name == "fp8_e4m3":
            a = self.randn((m, k)).to(t.float8_e4m3fn)
            b = self.randn((n, k)).to(t.float8_e4m3fn).t()  # column-major (K,N), as _scaled_mm requires
            return a, b
        dt = {"fp32": t.float32, "tf32": t.float32, "fp16": t.float16, "bf16": t.bfloat16}[dtype_name]
        if self.device == "cpu" and dt == t.float16:
            dt = t.float32
        a = self.randn((m, k), dt)
        if p["layout"] == "x@W.T":
            b = self.randn((n, k), dt).t()
        else:
            b = self.randn((k, n), dt)
        return a, b

    def gemm_fn(self, dtype_name, a, b):
        t = self.torch
        if dtype_name == "fp8_e4m3":
            one = t.ones((), device=self.device, dtype=t.float32)
            return lambda: t._scaled_mm(a, b, one, one, out_dtype=t.bfloat16)
        return lambda: t.matmul(a, b)

    def one_gemm(self, p):
        dtype_name = p["dtype"]
        self.set_tf32(dtype_name == "tf32")
        flops, nbytes = gemm_flops_bytes(p)
        set_bytes = (p["M"] * p["K"] + p["K"] * p["N"]) * ELEM_BYTES[dtype_name]
        ns = self.n_sets(set_bytes, GEMM_MAX_SETS)
        sets = [self.gemm_operands(p, dtype_name) for _ in range(ns)]
        fns = [self.gemm_fn(dtype_name, a, b) for a, b in sets]
        op = "torch._scaled_mm" if dtype_name == "fp8_e4m3" else "torch.matmul"
        base = {
            "family": "gemm",
            "op": op,
            "label": p["label"],
            "shape": {"M": p["M"], "N": p["N"], "K": p["K"]},
            "dtype": dtype_name,
            "layout": p["layout"],
            "out_dtype": "bf16" if dtype_name == "fp8_e4m3" else dtype_name.replace("tf32", "fp32"),
            "allow_tf32": dtype_name == "tf32",
            "n_input_sets": ns,
            "working_set_bytes": ns * set_bytes,
        }
        if dtype_name == "fp8_e4m3":
            base.update({"scale_a": 1.0, "scale_b": 1.0, "use_fast_accum": False, "b_layout": "column-major"})
        if self.args.graph_only:
            self.graph_variant(base, fns, flops, nbytes)
            return
        w = self.timer.in_workload(fns, GEMM_WARMUP_S, GEMM_TIMED_S if not self.args.smoke else 0.01)
        self.add(base, "in-workload", w, flops, nbytes)
        if self.have_triton:
            self.add(
                base | {"n_input_sets": 1, "working_set_bytes": set_bytes},
                "do_bench",
                self.timer.do_bench(fns[0]),
                flops,
                nbytes,
            )
        self.add(
            base | {"n_input_sets": 1, "working_set_bytes": set_bytes},
            "isolated",
            self.timer.isolated(fns[0]),
            flops,
            nbytes,
        )
        self.graph_variant(base, fns, flops, nbytes)
        del sets, fns

    def check_gemm(self):
        t = self.torch
        for dtype_name in GEMM_PLAN:
            if self.device == "cpu" and dtype_name in ("fp16",):
                continue
            p = {"M": 1024, "N": 1024, "K": 1024, "layout": "x@W.T"}
            self.set_tf32(dtype_name == "tf32")
            try:
                a, b = self.gemm_operands(p, dtype_name)
                out = self.gemm_fn(dtype_name, a, b)()
                ref = a.double() @ b.double()
                err = rel_err(t, out, ref)
                bound = {"fp32": 1e-5, "tf32": 2e-3, "fp16": 1e-2, "bf16": 2e-2, "fp8_e4m3": 2e-2}[dtype_name]
                chk = {
                    "family": "gemm",
                    "dtype": dtype_name,
                    "shape": "1024^3 x@W.T",
                    "rel_err_vs_fp64": err,
                    "bound": bound,
                    "ok": err <= bound,
                }
                if dtype_name == "tf32":  # TF32 rounds inputs to 10 mantissa bits: error ~1e-4
                    chk["tf32_in_effect"] = err > 1e-5
                self.checks.append(chk)
            except Exception as exc:
                self.checks.append(
                    {
                        "family": "gemm",
                        "dtype": dtype_name,
                        "ok": False,
                        "error": f"{type(exc).__name__}: {exc}"[:300],
                    }
                )
        self.set_tf32(False)

    # -- conv2d ---------------------------------------------------------------------------------
    def family_conv(self, deadline):
        t = self.torch
        t.backends.cudnn.benchmark = True
        pts = conv_points()
        if self.args.smoke:
            pts = [p for p in pts if p["N"] == 1][:4]
        self.check_conv()
        for i, p in enumerate(pts):
            if time.time() > deadline:
                self.skipped.extend({"family": "conv2d", **q, "why": "family time budget"} for q in pts[i:])
                break
            try:
                self.one_conv(p)
            except Exception as exc:
                self.skipped.append({"family": "conv2d", **p, "why": f"{type(exc).__name__}: {exc}"[:300]})

    def conv_tensors(self, p):
        t = self.torch
        dt = {"fp32": t.float32, "tf32": t.float32, "bf16": t.bfloat16}[p["dtype"]]
        if self.device == "cpu":
            dt = t.float32
        x = self.randn((p["N"], p["C"], p["H"], p["W"]), dt)
        w = self.randn((p["K"], p["C"], p["R"], p["S"]), dt) * (1.0 / math.sqrt(p["C"] * p["R"] * p["S"]))
        if p["layout"] == "channels_last":
            x = x.contiguous(memory_format=t.channels_last)
            w = w.contiguous(memory_format=t.channels_last)
        return x, w

    def one_conv(self, p):
        import torch.nn.functional as F

        self.set_tf32(p["dtype"] == "tf32")
        flops, nbytes = conv_flops_bytes(p)
        e = ELEM_BYTES[p["dtype"]]
        set_bytes = e * (p["N"] * p["C"] * p["H"] * p["W"] + p["K"] * p["C"] * p["R"] * p["S"])
        ns = self.n_sets(set_bytes, CONV_MAX_SETS)
        sets = [self.conv_tensors(p) for _ in range(ns)]
        s, pad = p["stride"], p["pad"]
        fns = [(lambda x=x, w=w: F.conv2d(x, w, None, s, pad)) for x, w in sets]
        ho, wo = conv_out_hw(p)
        base = {
            "family": "conv2d",
            "op": "F.conv2d",
            "label": p["label"],
            "shape": {
                "N": p["N"],
                "C": p["C"],
                "H": p["H"],
                "W": p["W"],
                "K": p["K"],
                "R": p["R"],
                "S": p["S"],
                "stride": s,
                "pad": pad,
                "P": ho,
                "Q": wo,
            },
            "dtype": p["dtype"],
            "layout": p["layout"],
            "allow_tf32": p["dtype"] == "tf32",
            "cudnn_benchmark": True,
            "n_input_sets": ns,
            "working_set_bytes": ns * set_bytes,
        }
        if self.args.graph_only:
            fns[0]()  # cudnn.benchmark picks its algorithm outside the capture
            self.graph_variant(base, fns, flops, nbytes)
            return
        w = self.timer.in_workload(fns, CONV_WARMUP_S, CONV_TIMED_S if not self.args.smoke else 0.01)
        self.add(base, "in-workload", w, flops, nbytes)
        self.add(
            base | {"n_input_sets": 1, "working_set_bytes": set_bytes},
            "isolated",
            self.timer.isolated(fns[0], reps=5),
            flops,
            nbytes,
        )
        self.graph_variant(base, fns, flops, nbytes)
        del sets, fns

    def check_conv(self):
        import torch.nn.functional as F

        t = self.torch
        p = dict(N=2, C=64, H=28, W=28, K=64, R=3, S=3, stride=1, pad=1, layout="channels_last")
        for dtype_name in CONV_DTYPES:
            self.set_tf32(dtype_name == "tf32")
            try:
                x, w = self.conv_tensors(p | {"dtype": dtype_name})
                out = F.conv2d(x, w, None, 1, 1)
                ref = F.conv2d(x.double(), w.double(), None, 1, 1)
                err = rel_err(t, out, ref)
                bound = {"fp32": 1e-5, "tf32": 2e-3, "bf16": 2e-2}[dtype_name]
                self.checks.append(
                    {
                        "family": "conv2d",
                        "dtype": dtype_name,
                        "shape": "2x64x28x28 3x3",
                        "rel_err_vs_fp64": err,
                        "bound": bound,
                        "ok": err <= bound,
                    }
                )
            except Exception as exc:
                self.checks.append(
                    {
                        "family": "conv2d",
                        "dtype": dtype_name,
                        "ok": False,
                        "error": f"{type(exc).__name__}: {exc}"[:300],
                    }
                )
        self.set_tf32(False)

    # -- sdpa -----------------------------------------------------------------------------------
    def family_sdpa(self, deadline):
        import torch.nn.functional as F

        t = self.torch
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except Exception:
            SDPBackend = sdpa_kernel = None
        shapes = SDPA_SHAPES + SDPA_BACKWARD_SHAPES
        backward_labels = {shape[0] for shape in SDPA_BACKWARD_SHAPES}
        if self.args.smoke:
            shapes, backward_labels = [("smoke", 1, 2, 64, 32, True)], {"smoke"}
        self.check_sdpa()
        for label, b, h, s, d, causal, *dtype in shapes:
            dtype_name = dtype[0] if dtype else "bf16"
            dt = {"bf16": t.bfloat16, "fp16": t.float16, "fp32": t.float32}[dtype_name]
            if time.time() > deadline:
                self.skipped.append({"family": "sdpa", "label": label, "why": "family time budget"})
                continue
            q, k, v = (self.randn((b, h, s, d), dt) for _ in range(3))
            flops, nbytes = sdpa_flops_bytes(b, h, s, d, causal, ELEM_BYTES[dtype_name])
            default_kernels = self.kernel_names(
                lambda q=q, k=k, v=v, causal=causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            )
            for backend in SDPA_BACKENDS:
                if backend != "default" and sdpa_kernel is None:
                    continue
                be = {
                    "flash": "FLASH_ATTENTION",
                    "efficient": "EFFICIENT_ATTENTION",
                    "cudnn": "CUDNN_ATTENTION",
                }.get(backend)

                def fn(q=q, k=k, v=v, be=be, causal=causal):
                    if be is None:
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    with sdpa_kernel(getattr(SDPBackend, be)):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                base = {
                    "family": "sdpa",
                    "op": "F.scaled_dot_product_attention",
                    "label": label,
                    "shape": {"batch": b, "heads": h, "seq_q": s, "seq_kv": s, "head_dim": d},
                    "causal": causal,
                    "dtype": dtype_name,
                    "layout": "BHSD contiguous",
                    "backend_requested": backend,
                    "n_input_sets": 1,
                    "working_set_bytes": 3 * b * h * s * d * ELEM_BYTES[dtype_name],
                }
                if backend == "default":
                    base["kernels_launched"] = default_kernels
                    base["backend_used"] = classify_sdpa(default_kernels)
                else:
                    base["backend_used"] = backend
                if self.args.graph_only:
                    fn()
                    self.graph_variant(base, [fn], flops, nbytes)
                    continue
                try:
                    fn()
                    w = self.timer.in_workload(
                        [fn], SDPA_WARMUP_S, SDPA_TIMED_S if not self.args.smoke else 0.01
                    )
                    self.add(base, "in-workload", w, flops, nbytes)
                    if self.have_triton:
                        self.add(base, "do_bench", self.timer.do_bench(fn), flops, nbytes)
                    self.graph_variant(base, [fn], flops, nbytes)
                except Exception as exc:
                    self.skipped.append(
                        {
                            "family": "sdpa",
                            "label": label,
                            "backend": backend,
                            "why": f"{type(exc).__name__}: {exc}"[:300],
                        }
                    )
                    continue
                if label in backward_labels:
                    self.sdpa_backward(base, fn, q, k, v, flops, nbytes)
            q = k = v = None
        if not self.args.smoke:
            self.sdpa_masked(deadline)
            self.sdpa_decode(deadline)

    def sdpa_decode(self, deadline):
        """SDPA_DECODE_SHAPES: one query per sequence against its KV cache, each backend,
        eager and replayed from a CUDA graph (a compiled decode step replays one)."""
        self.sdpa_cache_calls(deadline, [(label, b, h, hkv, 1, kv, d, *rest)
                                         for label, b, h, hkv, kv, d, *rest in SDPA_DECODE_SHAPES])  # fmt: skip

    def family_sdpa_short(self, deadline):
        """SDPA_SHORT_QUERY_SHAPES: a few queries per sequence against its KV cache."""
        self.sdpa_cache_calls(deadline, [(*shape, "bf16") for shape in SDPA_SHORT_QUERY_SHAPES])

    def sdpa_cache_calls(self, deadline, shapes):
        """(label, batch, heads, kv_heads, seq_q, kv_seq, head_dim, gqa, dtype[, "mask"]): each
        backend, eager and replayed from a CUDA graph."""
        import torch.nn.functional as F

        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except Exception:
            SDPBackend = sdpa_kernel = None
        t = self.torch
        for label, b, h, hkv, sq, kv, d, gqa, dtype_name, *masked in shapes:
            if time.time() > deadline:
                self.skipped.append({"family": "sdpa", "label": label, "why": "family time budget"})
                continue
            dt = {"bf16": t.bfloat16, "fp16": t.float16, "fp32": t.float32}[dtype_name]
            elem = ELEM_BYTES[dtype_name]
            q = self.randn((b, h, sq, d), dt)
            k, v = (self.randn((b, hkv, kv, d), dt) for _ in range(2))
            # 2 products of 2 FLOPs per multiply-add; Q and O once, K and V at their own heads
            flops = 4 * b * h * sq * kv * d
            nbytes = elem * (2 * b * h * sq * d + 2 * b * hkv * kv * d)
            extra = {"enable_gqa": True} if gqa else {}
            if masked:  # every other sequence left-padded over its first eighth of keys
                mask = t.ones(b, 1, 1, kv, dtype=t.bool, device=self.device)
                mask[::2, :, :, : kv // 8] = False
                extra = {"attn_mask": mask}
            for backend in SDPA_BACKENDS:
                if backend != "default" and sdpa_kernel is None:
                    continue
                be = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                      "cudnn": "CUDNN_ATTENTION"}.get(backend)  # fmt: skip

                def fn(q=q, k=k, v=v, be=be, extra=extra):
                    if be is None:
                        return F.scaled_dot_product_attention(q, k, v, **extra)
                    with sdpa_kernel(getattr(SDPBackend, be)):
                        return F.scaled_dot_product_attention(q, k, v, **extra)

                base = {
                    "family": "sdpa", "op": "F.scaled_dot_product_attention", "label": label,
                    "shape": {"batch": b, "heads": h, "kv_heads": hkv, "seq_q": sq, "seq_kv": kv,
                              "head_dim": d},
                    "causal": False, "decode": sq == 1, "short_query": sq > 1, "enable_gqa": gqa,
                    "dtype": dtype_name,
                    **({"mask": "bool padding"} if masked else {}),
                    "layout": "BHSD contiguous", "backend_requested": backend,
                    "n_input_sets": 1, "working_set_bytes": nbytes,
                }  # fmt: skip
                try:
                    fn()
                    if backend == "default":
                        base["kernels_launched"] = self.kernel_names(fn)
                        base["backend_used"] = classify_sdpa(base["kernels_launched"])
                    else:
                        base["backend_used"] = backend
                    w = self.timer.in_workload([fn], SDPA_WARMUP_S, SDPA_TIMED_S)
                    self.add(base, "in-workload", w, flops, nbytes)
                    if self.have_triton:
                        self.add(base, "do_bench", self.timer.do_bench(fn), flops, nbytes)
                    self.graph_variant(base, [fn], flops, nbytes)
                except Exception as exc:
                    self.skipped.append({"family": "sdpa", "label": label, "backend": backend,
                                         "why": f"{type(exc).__name__}: {exc}"[:300]})  # fmt: skip
            q = k = v = None

    def sdpa_masked(self, deadline):
        """SDPA_MASKED_SHAPES: the default dispatch given a boolean causal mask, forward and
        backward (the work of a dense call: the mask is data)."""
        import torch.nn.functional as F

        for label, b, h, s, d in SDPA_MASKED_SHAPES:
            if time.time() > deadline:
                self.skipped.append({"family": "sdpa", "label": label, "why": "family time budget"})
                continue
            q, k, v = (self.randn((b, h, s, d), self.torch.bfloat16) for _ in range(3))
            mask = self.torch.ones(s, s, dtype=self.torch.bool, device=self.device).tril()
            flops, nbytes = sdpa_flops_bytes(b, h, s, d, False, ELEM_BYTES["bf16"])

            def fn(q=q, k=k, v=v, mask=mask):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

            kernels = self.kernel_names(fn)
            base = {
                "family": "sdpa", "op": "F.scaled_dot_product_attention", "label": label,
                "shape": {"batch": b, "heads": h, "seq_q": s, "seq_kv": s, "head_dim": d},
                "causal": False, "mask": "bool causal (tril)", "dtype": "bf16",
                "layout": "BHSD contiguous", "backend_requested": "default", "n_input_sets": 1,
                "working_set_bytes": 3 * b * h * s * d * 2 + s * s,
                "kernels_launched": kernels, "backend_used": classify_sdpa(kernels),
            }  # fmt: skip
            try:
                w = self.timer.in_workload([fn], SDPA_WARMUP_S, SDPA_TIMED_S)
                self.add(base, "in-workload", w, flops, nbytes)
                if self.have_triton:
                    self.add(base, "do_bench", self.timer.do_bench(fn), flops, nbytes)
            except Exception as exc:
                self.skipped.append({"family": "sdpa", "label": label,
                                     "why": f"{type(exc).__name__}: {exc}"[:300]})  # fmt: skip
                continue
            self.sdpa_backward(base, fn, q, k, v, flops, nbytes)

    def sdpa_backward(self, base, fn, q, k, v, flops, nbytes):
        """The backward of one forward call: dQ, dK, dV for a random dO through
        torch.autograd.grad on the retained graph (the backend is the forward's choice)."""
        t = self.torch
        base = {**base, "pass": "backward"}
        base.pop("kernels_launched", None)
        try:
            leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]
            out = fn(*leaves)
            dout = self.randn(tuple(out.shape), out.dtype)

            def bwd():
                return t.autograd.grad(out, leaves, dout, retain_graph=True)

            if base["backend_requested"] == "default":
                base["kernels_launched"] = self.kernel_names(bwd)
                base["backend_used"] = classify_sdpa(base["kernels_launched"])
            # the backward's work: QK^T recomputed, dV, dP, dQ, dK (2.5x the forward's products);
            # bytes: Q, K, V, O, dO read, dQ, dK, dV written
            w = self.timer.in_workload([bwd], SDPA_WARMUP_S, SDPA_TIMED_S if not self.args.smoke else 0.01)
            self.add(base, "in-workload", w, flops * 5 // 2, nbytes * 2)
            if self.have_triton:
                self.add(base, "do_bench", self.timer.do_bench(bwd), flops * 5 // 2, nbytes * 2)
        except Exception as exc:
            self.skipped.append({"family": "sdpa", "label": base["label"], "pass": "backward",
                                 "backend": base["backend_requested"],
                                 "why": f"{type(exc).__name__}: {exc}"[:300]})  # fmt: skip

    def kernel_names(self, fn):
        t = self.torch
        if self.device != "cuda":
            return []
        try:
            from torch.profiler import ProfilerActivity, profile

            fn()
            t.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                t.cuda.synchronize()
            names = []
            for ev in prof.events():
                if getattr(ev, "device_type", None) is not None and "CUDA" in str(ev.device_type):
                    if ev.name not in names:
                        names.append(ev.name)
            return [n[:200] for n in names][:8]
        except Exception as exc:
            return [f"profiler failed: {type(exc).__name__}: {exc}"[:200]]

    def check_sdpa(self):
        import torch.nn.functional as F

        t = self.torch
        b, h, s, d = 2, 4, 256, 64
        q, k, v = (self.randn((b, h, s, d), t.bfloat16) for _ in range(3))
        try:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            qd, kd, vd = q.double(), k.double(), v.double()
            att = (qd @ kd.transpose(-1, -2)) / math.sqrt(d)
            mask = t.ones(s, s, dtype=t.bool, device=self.device).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            ref = att @ vd
            err = rel_err(t, out, ref)
            self.checks.append(
                {
                    "family": "sdpa",
                    "dtype": "bf16",
                    "shape": "2x4x256x64 causal",
                    "rel_err_vs_fp64": err,
                    "bound": 2e-2,
                    "ok": err <= 2e-2,
                }
            )
        except Exception as exc:
            self.checks.append({"family": "sdpa", "ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]})

    # -- copies ---------------------------------------------------------------------------------
    def host_buffer(self, nbytes, pinned):
        t = self.torch
        blk = t.randint(1, 255, (1 << 20,), dtype=t.uint8)  # never zeros
        buf = t.empty(nbytes, dtype=t.uint8, pin_memory=pinned and self.device == "cuda")
        if nbytes <= blk.numel():
            buf.copy_(blk[:nbytes])
        else:
            buf.view(-1, blk.numel()).copy_(blk.expand(nbytes // blk.numel(), -1))
        return buf

    def family_copy(self, deadline):
        t = self.torch
        if self.device != "cuda":
            sizes = [4 << 10, 1 << 20]
        else:
            sizes = [*list(COPY_SIZES), COPY_BIG]
        if self.args.copy_sizes:
            sizes = [int(x) for x in self.args.copy_sizes.split(",")]
        self.check_copy()
        for nbytes in sizes:
            if nbytes == COPY_BIG:
                left = deadline - time.time()
                if left < 20 or self.args.no_big_copy:
                    self.skipped.append(
                        {
                            "family": "copy",
                            "bytes": nbytes,
                            "why": f"4 GB copy skipped ({left:.0f} s of family budget left)",
                        }
                    )
                    continue
            if time.time() > deadline:
                self.skipped.append({"family": "copy", "bytes": nbytes, "why": "family time budget"})
                continue
            reps = (
                200
                if nbytes <= (1 << 20)
                else 50
                if nbytes <= (16 << 20)
                else 10
                if nbytes <= (256 << 20)
                else 5
            )
            if nbytes >= COPY_BIG:
                reps = 3
            for pinned in (True, False):
                host = self.host_buffer(nbytes, pinned)
                dev = self.randn((nbytes // 4,)).view(t.uint8) if self.device == "cuda" else host.clone()
                dst_pinned = self.host_buffer(nbytes, True) if pinned else None
                for direction in ("h2d", "d2h"):
                    if direction == "h2d":
                        fn = lambda host=host: host.to(self.device)  # noqa: E731
                        api = "Tensor.to('cuda')"
                    elif pinned:
                        fn = lambda dst=dst_pinned, dev=dev: dst.copy_(dev)  # noqa: E731
                        api = "pinned.copy_(cuda_tensor)"
                    else:
                        fn = lambda dev=dev: dev.cpu()  # noqa: E731
                        api = "Tensor.cpu()"
                    base = {
                        "family": "copy",
                        "op": api,
                        "label": f"{direction} {'pinned' if pinned else 'pageable'}",
                        "shape": {"bytes": nbytes},
                        "dtype": "uint8",
                        "layout": "contiguous",
                        "direction": direction,
                        "host_memory": "pinned" if pinned else "pageable",
                    }
                    try:
                        self.one_copy(base, fn, nbytes, reps)
                    except Exception as exc:
                        self.skipped.append(
                            {"family": "copy", **base, "why": f"{type(exc).__name__}: {exc}"[:300]}
                        )
                host = dev = dst_pinned = None
            if self.device == "cuda":
                t.cuda.empty_cache()

    def one_copy(self, base, fn, nbytes, reps):
        for _ in range(2 if nbytes < (256 << 20) else 1):
            fn()
        self.timer.sync()
        t0 = time.time()
        ev, wall = [], []
        for _ in range(reps):
            h0 = time.perf_counter()
            a = self.timer.event()
            fn()
            b = self.timer.event()
            self.timer.sync()
            wall.append(time.perf_counter() - h0)
            ev.append(self.timer.elapsed_s(a, b))
        t1 = time.time()
        med, p10, p90 = quantiles(ev)
        wm, w10, w90 = quantiles(wall)
        self.add(
            base,
            "per-call",
            {
                "time_s_median": med,
                "time_s_p10": p10,
                "time_s_p90": p90,
                "n_calls": reps,
                "wall_s_median": wm,
                "wall_s_p10": w10,
                "wall_s_p90": w90,
                **self.sampler.window(t0, t1),
            },
            None,
            nbytes,
        )
        t0 = time.time()
        plain = []
        for _ in range(reps):
            h0 = time.perf_counter()
            fn()
            self.timer.sync()
            plain.append(time.perf_counter() - h0)
        t1 = time.time()
        pm, p10, p90 = quantiles(plain)
        self.add(
            base,
            "per-call-wall",
            {"time_s_median": pm, "time_s_p10": p10, "time_s_p90": p90, "n_calls": reps,
             **self.sampler.window(t0, t1)},
            None,
            nbytes,
        )  # fmt: skip
        if nbytes <= (16 << 20):
            w = self.timer.in_workload([fn], 0.005, 0.05 if not self.args.smoke else 0.005)
            self.add(base, "back-to-back", w, None, nbytes)

    def check_copy(self):
        t = self.torch
        try:
            for pinned in (True, False):
                host = self.host_buffer(16 << 20, pinned)
                back = host.to(self.device).cpu()
                ok = bool(t.equal(back, host))
                self.checks.append(
                    {
                        "family": "copy",
                        "host_memory": "pinned" if pinned else "pageable",
                        "shape": "16 MB round trip",
                        "ok": ok,
                    }
                )
        except Exception as exc:
            self.checks.append({"family": "copy", "ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]})


def classify_sdpa(names):
    s = " ".join(names).lower()
    if "cudnn" in s:
        return "cudnn"
    if "flash" in s:
        return "flash"
    if "cutlass" in s or "efficient" in s or "fmha" in s:
        return "efficient"
    if "gemm" in s or "softmax" in s:
        return "math"
    return "unknown"


# ---------------------------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------------------------


def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except Exception as exc:
        return f"n/a ({exc!r})"


def environment(run):
    t = run.torch
    env = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": t.__version__,
        "torch_cuda": t.version.cuda,
        "cudnn": t.backends.cudnn.version() if run.device == "cuda" else None,
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception:
        env["triton"] = None
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    env["cpu_model"] = cpu
    env["cpu_count"] = os.cpu_count()
    if run.device == "cuda":
        pr = t.cuda.get_device_properties(0)
        env["gpu_name"] = pr.name
        env["gpu_sm_count"] = pr.multi_processor_count
        env["gpu_memory_bytes"] = pr.total_memory
        env["gpu_l2_bytes"] = getattr(pr, "L2_cache_size", None)
        env["gpu_cc"] = f"{pr.major}.{pr.minor}"
        env["nvml"] = {"source": run.sampler.source, **run.sampler.static}
        env["nvidia_smi_query"] = sh(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,pci.bus_id,power.limit,power.default_limit,"
                "power.max_limit,enforced.power.limit,clocks.max.sm,clocks.max.mem,clocks.applications.graphics,"
                "clocks.sm,temperature.gpu,persistence_mode,compute_mode",
                "--format=csv",
            ]
        ).strip()
        env["nvidia_smi_q_power_clock"] = sh(["nvidia-smi", "-q", "-d", "POWER,CLOCK"])[:6000]
    env["defaults"] = {
        "allow_fp16_reduced_precision_reduction": t.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "allow_bf16_reduced_precision_reduction": t.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    }
    return env


def family_nvml_summary(records):
    """Median over records of the per-record median SM clock / power, per family and condition."""
    out = {}
    for r in records:
        if "sm_clock_mhz_median" not in r:
            continue
        key = f"{r['family']}/{r.get('dtype')}/{r['condition']}"
        out.setdefault(key, {"sm": [], "pw": []})
        out[key]["sm"].append(r["sm_clock_mhz_median"])
        pw = r.get("power_instant_w_median", r.get("power_w_median"))
        if pw is not None:
            out[key]["pw"].append(pw)
    return {
        k: {
            "n": len(v["sm"]),
            "sm_clock_mhz_median": statistics.median(v["sm"]),
            "sm_clock_mhz_min": min(v["sm"]),
            "power_w_median": statistics.median(v["pw"]) if v["pw"] else None,
            "power_w_max": max(v["pw"]) if v["pw"] else None,
        }
        for k, v in sorted(out.items())
    }


def estimate(points_gemm, points_conv):
    # per point: warm-up + timed loop + do_bench (~25+100 ms + 5 estimate calls) + setup
    g = len(points_gemm) * (GEMM_WARMUP_S + GEMM_TIMED_S + 0.14 + 0.04)
    c = len(points_conv) * (CONV_WARMUP_S + CONV_TIMED_S + 0.1)
    s = (len(SDPA_SHAPES) + 2 * len(SDPA_BACKWARD_SHAPES)) * len(SDPA_BACKENDS) * (
        SDPA_WARMUP_S + SDPA_TIMED_S + 0.15)
    return {"gemm_s": round(g), "conv2d_s": round(c), "sdpa_s": round(s), "copy_s": 20, "sustain_s": 5}


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=None, separators=(",", ":"), default=str)
        f.write("\n")
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--dry", action="store_true", help="list the points and the time estimate; run nothing")
    ap.add_argument("--smoke", action="store_true", help="a tiny subset (code-path test)")
    ap.add_argument("--families", default="sustain,gemm,conv2d,sdpa,copy")
    ap.add_argument("--budget-scale", type=float, default=1.0, help="scale every family's time budget")
    ap.add_argument("--no-big-copy", action="store_true")
    ap.add_argument(
        "--graph-only", action="store_true", help="only the in-workload-graph condition (gemm, conv2d, sdpa)"
    )
    ap.add_argument("--copy-sizes", default="", help="comma-separated byte counts instead of the default set")
    args = ap.parse_args(argv)

    pg, pc = gemm_points(), conv_points()
    if args.dry:
        by = {}
        for p in pg:
            by[p["dtype"]] = by.get(p["dtype"], 0) + 1
        print(f"gemm points: {len(pg)} {by}")
        print(
            f"conv2d points: {len(pc)} ({len(RESNET50_CONVS)} layers x {CONV_BATCHES} x {CONV_LAYOUTS} x {CONV_DTYPES})"
        )
        print(f"sdpa: {len(SDPA_SHAPES)} shapes + {len(SDPA_BACKWARD_SHAPES)} forward and backward x {SDPA_BACKENDS}")
        print(f"copy: {len(COPY_SIZES)} sizes (+4 GB if time) x pinned/pageable x h2d/d2h")
        est = estimate(pg, pc)
        print(f"estimate (s): {est} total ~{sum(est.values())}")
        print(f"budgets (s): {DEFAULT_BUDGET_S} total {sum(DEFAULT_BUDGET_S.values())}")
        return 0

    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()
    run = Run(args)
    env = environment(run)
    print(
        f"[unseen] {env.get('gpu_name', run.device)} torch {env['torch']} triton {env['triton']} "
        f"nvml {run.sampler.source}",
        flush=True,
    )
    fams = args.families.split(",")
    run.sustain = None

    def dump(partial):
        result = {
            "schema_version": SCHEMA_VERSION,
            "what": "gpumodel unseen set (issue #16 item 6): never fitted to",
            "script": "validation/unseen/kernels_unseen.py",
            "partial": partial,
            "env": env,
            "settings": {
                "gemm_warmup_s": GEMM_WARMUP_S,
                "gemm_timed_s": GEMM_TIMED_S,
                "conv_warmup_s": CONV_WARMUP_S,
                "conv_timed_s": CONV_TIMED_S,
                "sdpa_warmup_s": SDPA_WARMUP_S,
                "sdpa_timed_s": SDPA_TIMED_S,
                "n_chunks": N_CHUNKS,
                "isolated_reps": ISOLATED_REPS,
                "pool_l2_multiple": POOL_L2_MULTIPLE,
                "gemm_max_sets": GEMM_MAX_SETS,
                "conv_max_sets": CONV_MAX_SETS,
                "nvml_interval_s": run.sampler.interval_s,
                "do_bench": "triton.testing.do_bench(fn, warmup=25, rep=100, return_mode='all')",
                "smoke": args.smoke,
                "graph_only": args.graph_only,
                "graph_max_call_s": GRAPH_MAX_CALL_S,
                "graph_warmup_s": GRAPH_WARMUP_S,
                "graph_timed_s": GRAPH_TIMED_S,
                "graph_min_calls": GRAPH_MIN_CALLS,
                "argv": sys.argv[1:],
            },
            "family_time_s": run.family_time_s,
            "total_time_s": round(time.time() - t_start, 1),
            "checks": run.checks,
            "errors": run.errors,
            "skipped": run.skipped,
            "nvml_summary": family_nvml_summary(run.records),
            "sustain": {k: v for k, v in (run.sustain or {}).items() if k != "nvml_series"},
            "records": run.records,
        }
        write_json(os.path.join(args.out, "unseen.json"), result)
        write_json(
            os.path.join(args.out, "nvml_samples.json"),
            {
                "columns": [
                    "t_epoch_s",
                    "sm_clock_mhz",
                    "mem_clock_mhz",
                    "power_w",
                    "power_instant_w",
                    "temperature_c",
                    "clock_event_reasons_mask",
                ],
                "source": run.sampler.source,
                "rows": list(run.sampler.rows),
                "sustain_series": (run.sustain or {}).get("nvml_series"),
            },
        )
        return result

    for fam in ("sustain", "gemm", "conv2d", "sdpa", "sdpa-short", "copy"):
        if fam not in fams:
            continue
        t0 = time.time()
        deadline = t0 + DEFAULT_BUDGET_S[fam] * args.budget_scale
        n0 = len(run.records)
        try:
            getattr(run, {"conv2d": "family_conv", "sdpa-short": "family_sdpa_short"}.get(
                fam, f"family_{fam}"))(deadline)  # fmt: skip
        except Exception as exc:
            run.errors.append(f"{fam}: {type(exc).__name__}: {exc}"[:500])
        run.family_time_s[fam] = round(time.time() - t0, 1)
        # sustain keeps its chunks in result["sustain"], not in records[]
        n_new = len((run.sustain or {}).get("chunks", [])) if fam == "sustain" else len(run.records) - n0
        what = "chunks (in result['sustain'])" if fam == "sustain" else "records"
        print(f"[unseen] {fam}: {n_new} {what} in {run.family_time_s[fam]} s", flush=True)
        dump(partial=True)
    run.sampler.stop()
    result = dump(partial=False)
    print_summary(result)
    return 0


def print_summary(result):
    recs = result["records"]
    print(f"[unseen] {len(recs)} records, {len(result['skipped'])} skipped, total {result['total_time_s']} s")
    for c in result["checks"]:
        print(f"  check {c}")
    for e in result["errors"]:
        print(f"  ERROR {e}")
    groups = {}
    for r in recs:
        if r.get("tflop_per_s") is None:
            continue
        groups.setdefault((r["family"], r["dtype"], r["condition"]), []).append(r["tflop_per_s"])
    for k, v in sorted(groups.items()):
        print(
            f"  {k[0]:7s} {k[1]:9s} {k[2]:12s} n={len(v):4d} median {statistics.median(v):7.1f} "
            f"max {max(v):7.1f} TFLOP/s"
        )
    s = result.get("sustain") or {}
    if s.get("chunks"):
        ch = s["chunks"]
        print(
            f"  sustain first chunk {ch[0]['tflop_per_s']:.0f} TFLOP/s, last {ch[-1]['tflop_per_s']:.0f}; "
            f"nvml first 200 ms {s['nvml_first_200ms']}, last 1 s {s['nvml_last_1s']}"
        )
    for k, v in result["nvml_summary"].items():
        print(f"  nvml {k}: {v}")


if __name__ == "__main__":
    sys.exit(main())
