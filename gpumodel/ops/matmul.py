"""Matrix products: GEMM and 2-D convolution as implicit GEMM."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar, Literal

from pydantic import field_validator, model_validator

from gpumodel._validators import NonNegativeSize, Size
from gpumodel.errors import SpecError
from gpumodel.model.quantization import tile_count
from gpumodel.model.scheduling import FILL_TILE
from gpumodel.ops.base import (
    Dtype,
    FlopPart,
    GemmShape,
    KernelWork,
    Op,
    element_bytes,
    matmul_unit,
    vector_unit,
)
from gpumodel.specs import GPUSpec

# cuDNN's implicit-GEMM convolution kernels on Hopper compute output channels in 128-wide tiles:
# on an H100 the 64-channel ResNet layers ran at half the rate of the wider ones in both bf16
# (376 vs 517-653 TFLOP/s) and tf32 (189 vs 269-383 TFLOP/s), batch 128 (validation/results)
CONV_TILE_N = 128

# the calibrated family of the layout transposes cuDNN wraps around its NHWC tensor-core kernels
# when PyTorch hands it NCHW tensors (Conv2d.layout_transposes)
LAYOUT_TRANSPOSE_FAMILY = "conv2d:layout-transpose"


# fp8 tensor cores accumulate in reduced precision; without fast accumulation cuBLASLt adds the
# partial sums into FP32 accumulators on the CUDA cores at intervals along K (cuBLASLt,
# CUBLASLT_MATMUL_DESC_FAST_ACCUM: without it "intermediate results ... periodically promoted
# to a higher precision"). NVIDIA does not publish the interval; DeepSeek-V3's technical report
# (2024, section 3.3.2) promotes every 128 products along K on H800 for the same reason. One FP32
# add per output element per interval, priced on the CUDA cores at their add rate. Priced as
# fast accumulation, torch._scaled_mm without it (PyTorch's default) came out 5.7-8.6% fast in
# validate's isolated conditions timing (medians, H100 runs 9-10, H200 runs 7-8:
# validation/results/*/validate-2026-11-2*/conditions-measurements.json); 256 is the interval
# chosen on those points (median -1.1% to +3.1% on six runs; 128 gave +6.5% to +12%: part of
# the adds hide under the tensor-core work).
FP8_PROMOTION_INTERVAL_K = 256


def fp8_promotion_flops(m, n, k, batch):
    """FP32 adds of an fp8 product's accumulators promoted every ``FP8_PROMOTION_INTERVAL_K``
    along K: one per output element per interval (works on arrays)."""
    return batch * m * n * k / FP8_PROMOTION_INTERVAL_K


def output_bytes_per_element(dtype: str) -> float:
    """fp8/int8 GEMMs write a 16-bit result (what cuBLASLt and torch._scaled_mm do by default)."""
    return 2.0 if dtype in ("fp8", "int8", "fp4") else element_bytes(dtype)


def gemm_bytes(m, n, k, batch, dtype: str):
    """Minimum DRAM bytes of ``batch`` products: (m*k + k*n)*in + m*n*out (works on arrays)."""
    return batch * (
        (m * k + k * n) * element_bytes(dtype) + m * n * output_bytes_per_element(dtype)
    )


class Gemm(Op):
    """C[m,n] = A[m,k] @ B[k,n], ``batch`` independent products (bmm when batch > 1).

    FLOPs ``2*m*n*k*batch``; minimum DRAM bytes ``(m*k + k*n)*in + m*n*out`` per product
    (NVIDIA, "Matrix Multiplication Background" user guide). ``transpose_b``: B is stored as
    its transpose, [n, k], as ``torch.nn.Linear`` stores its weight (``x @ W.T``); cuBLAS then
    runs other kernels where N or K is misaligned. ``transpose_a``: A is stored as its
    transpose, [k, m] (a weight gradient's dY.T), so a misaligned M misaligns A's rows too.
    ``fast_accum`` (fp8 only): ``False`` is ``torch._scaled_mm``'s default
    (``use_fast_accum=False``), whose accumulators are promoted to FP32 on the CUDA cores as
    the product runs (``FP8_PROMOTION_INTERVAL_K``), as Transformer Engine's backward GEMMs do;
    None (or True) is fast accumulation, what validate calibrates and fp8 inference engines run.
    """

    op_name: ClassVar[str] = "gemm"
    eager_kind: ClassVar[str | None] = "matmul"
    m: Size
    n: Size
    k: Size
    dtype: Dtype = "bf16"
    batch: Size = 1
    transpose_b: bool = False
    transpose_a: bool = False
    # None (not True) for fast accumulation, so that labels and files of other ops stay as
    # they were
    fast_accum: bool | None = None

    @field_validator("fast_accum")
    @classmethod
    def _fast_is_none(cls, v: bool | None) -> bool | None:
        return None if v is None or v else False

    @model_validator(mode="after")
    def _accum_is_fp8(self) -> Gemm:
        if self.fast_accum is False and self.dtype != "fp8":
            raise SpecError(f"fast_accum applies to fp8 products (torch._scaled_mm); this one "
                            f"is {self.dtype}")  # fmt: skip
        return self

    @property
    def host_kind(self) -> str | None:
        """PyTorch runs fp8 products through ``torch._scaled_mm``, not ``torch.matmul``."""
        return "scaled_mm" if self.dtype.startswith("fp8") else self.eager_kind

    def host_call_factor(self, gpu: GPUSpec) -> float:
        """``SPLIT_HOST_FACTOR`` where cuBLAS splits this product along K and launches a
        reduction after it (gpumodel.model.splitk; one product, not a batch), else 1."""
        from gpumodel.model.splitk import SPLIT_HOST_FACTOR, split_k

        one = self.batch == 1 and split_k(self.m, self.n, self.k, self.dtype, gpu.sm_count)
        return SPLIT_HOST_FACTOR if one else 1.0

    def torch_refuses(self) -> str | None:
        """Why PyTorch's 8-bit product would refuse this shape, or None: ``torch._scaled_mm``
        (fp8) checks K and N are multiples of 16, ``torch._int_mm`` (int8) that M > 16 and K and
        N are multiples of 8 (aten's meta registrations and Blas.cpp)."""
        if self.dtype == "fp8":
            fn, need = "torch._scaled_mm", {"K": (self.k, 16), "N": (self.n, 16)}
        elif self.dtype == "int8":
            fn, need = "torch._int_mm", {"K": (self.k, 8), "N": (self.n, 8)}
        else:
            return None
        bad = [f"{d}={v} (pad to {-(-v // q) * q})" for d, (v, q) in need.items() if v % q]
        if self.dtype == "int8" and self.m <= 16:
            bad.append(f"M={self.m} (it needs M > 16)")
        if not bad:
            return None
        return (f"{fn} refuses this shape: {', '.join(bad)}; priced as given, as another library's "
                "kernel might run it")  # fmt: skip

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        unit, dt = matmul_unit(gpu, self.dtype)
        flops = 2.0 * self.m * self.n * self.k * self.batch
        nbytes = gemm_bytes(self.m, self.n, self.k, self.batch, self.dtype)
        parts = (FlopPart(unit, dt, flops),)
        if self.fast_accum is False:  # the promotion adds, after the product (kernel_time)
            adds = fp8_promotion_flops(self.m, self.n, self.k, self.batch)
            parts = (*parts, FlopPart(*vector_unit(gpu, "fp32"), adds))
        return [
            KernelWork(
                name="gemm",
                flops=parts,
                bytes=nbytes,
                bytes_written=self.batch * self.m * self.n * output_bytes_per_element(self.dtype),
                working_set_bytes=nbytes,
                fma=self.fast_accum is not False,  # the promotion's adds are not FMAs
                notes=tuple(n for n in (self.torch_refuses(),) if n),
                gemm=GemmShape(
                    self.m,
                    self.n,
                    self.k,
                    self.batch,
                    self.dtype,
                    transpose_b=self.transpose_b,
                    transpose_a=self.transpose_a,
                    cublas=True,
                ),
            )
        ]


# what F.conv2d runs on CUDA (cuDNN's convolution forward: float16, bfloat16, float32 with TF32
# on or off, float64); 8-bit and 4-bit tensors raise "not implemented" there
CONV_DTYPES = ("fp16", "bf16", "fp32", "tf32", "fp64")


class Conv2d(Op):
    """2-D convolution, square kernel, computed as an implicit GEMM:
    M = batch*out_h*out_w, N = out_channels, K = in_channels*kernel^2 (cuDNN's formulation).

    ``layout`` is the memory format of the tensors PyTorch hands cuDNN: ``nchw`` (PyTorch's
    default, contiguous) or ``channels_last`` (NHWC, ``x.to(memory_format=torch.channels_last)``).

    The calibrated families price the algorithm ``torch.backends.cudnn.benchmark = True`` picks
    (validate times them so). With benchmark off, PyTorch's default, cuDNN's heuristic can pick a
    slower one: on an H100 some fp32 3x3 layers ran 1.3-1.4x slower
    (validation/results/h100-sxm/cudnn-benchmark-2026-11-27).
    """

    op_name: ClassVar[str] = "conv2d"
    eager_kind: ClassVar[str | None] = "conv"
    batch: Size
    in_channels: Size
    out_channels: Size
    height: Size
    width: Size
    kernel: Size
    stride: Size = 1
    padding: NonNegativeSize = 0
    dtype: Dtype = "bf16"
    layout: Literal["nchw", "channels_last"] = "nchw"

    @model_validator(mode="after")
    def _fits(self) -> Conv2d:
        if self.dtype not in CONV_DTYPES:
            raise SpecError(f"conv2d takes {'/'.join(CONV_DTYPES)} tensors (PyTorch's F.conv2d "
                            f"on CUDA), not {self.dtype}")  # fmt: skip
        if self.out_height < 1 or self.out_width < 1:
            raise SpecError(
                f"kernel {self.kernel} with padding {self.padding} does not fit a "
                f"{self.height}x{self.width} input"
            )
        return self

    @property
    def channels_aligned(self) -> bool:
        """Tensor cores take the reduction dimension in 16-byte pieces; channels-last puts the
        input channels innermost, so their row must be a multiple of 16 bytes (NVIDIA,
        "Convolutional Layers User's Guide": channels a multiple of 8 for fp16)."""
        return (self.in_channels * element_bytes(self.dtype)) % 16 == 0

    @property
    def plain_gemm(self) -> bool:
        """A 1x1 filter at stride 1 over aligned channels reads every pixel in order."""
        return self.channels_aligned and self.kernel == 1 and self.stride == 1

    @property
    def kernel_layout(self) -> Literal["nchw", "channels_last"]:
        """The layout of the kernel cuDNN runs. Its tensor-core kernels are NHWC, except the
        plain 1x1 GEMMs, which it runs on NCHW directly. Its fp32 CUDA-core kernels over aligned
        channels are NCHW: a channels-last fp32 convolution ran the NCHW kernel between
        NHWC->NCHW and NCHW->NHWC transposes (3-4 kernels per call in torch.profiler, H200,
        cuDNN 9.19), and on an H100 took the NCHW time plus that copy traffic at every batch
        (e.g. 1x1 256->64 on 56x56 at batch 128: 695 us against 342 us NCHW, the transposes'
        bytes at 3 TB/s being 343 us; validation/results/h100-sxm/calibration.yaml). fp32 over
        unaligned channels (an RGB stem) runs in either layout."""
        if self.dtype == "fp32":
            return "nchw" if self.channels_aligned else self.layout
        return "nchw" if self.layout == "nchw" and self.plain_gemm else "channels_last"

    @property
    def layout_transposes(self) -> bool:
        """cuDNN transposes the tensors it is given when its kernel's layout differs
        (``kernel_layout``): NCHW tensors around an NHWC tensor-core kernel (NVIDIA,
        "Convolutional Layers User's Guide", Tensor Layouts: "NCHW ... incur transposes"; on
        an H100, cuDNN 9.19, torch 2.11, bf16/TF32 NCHW convolutions ran 1.3-2.2x the
        channels-last time except the plain 1x1 GEMMs, validation/results/h100-sxm/
        conditions-2026-11-24-standalone), and channels-last fp32 tensors around an NCHW
        CUDA-core kernel."""
        return self.kernel_layout != self.layout

    @property
    def fast_algorithms(self) -> bool:
        """On CUDA cores cuDNN also runs Winograd and FFT algorithms for windows at stride 1,
        which multiply less than the direct form: minimal filtering F(m x m, r x r) takes
        (m + r - 1)^2 products for m^2 outputs where the direct form takes m^2 r^2 (Lavin &
        Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016), so none goes
        below 1 / r^2 of the direct count. Tensor-core kernels keep the direct count (none
        measured above it)."""
        window = self.kernel > 1 and self.stride == 1
        return window and self.dtype == "fp32" and self.channels_aligned

    @property
    def family(self) -> str:
        """cuDNN runs different kernel classes per precision and shape, calibrated apart: a 1x1
        filter at stride 1 is a plain GEMM over the channels-last tensor (``gemm``); a window or
        a stride makes it an implicit GEMM that gathers its rows (``implicit``). On an H100 the
        strided 1x1 downsampling convolutions ran 10-34% slower than the GEMM class predicted and
        fit the implicit class (held-out median 9.1-10.0% -> 6.3-7.0%, four runs).

        Unaligned channels (an RGB stem, C = 3) are one class for every precision: on an H100
        cuDNN ran ResNet's stem at 27-38 TFLOP/s in both bf16 and tf32, about half the FP32
        CUDA-core peak and 3-8% of the tensor-core one (validation/results/h100-sxm).

        cuDNN's native NCHW kernels (plain 1x1 GEMMs in bf16/TF32, and every plain fp32
        convolution, CUDA-core code that ran 1.1-1.7x faster on NCHW than on channels-last on
        an H100) are classes of their own, ``conv2d:<dtype>:nchw:<kind>``."""
        if not self.channels_aligned:
            # plain fp32 ran the stem 1.7x slower than bf16/TF32 did (H100, 2026-11-24)
            return f"conv2d:{'fp32:' if self.dtype == 'fp32' else ''}unaligned-channels"
        kind = "gemm" if self.plain_gemm else "fast" if self.fast_algorithms else "implicit"
        if self.kernel_layout == "nchw":
            return f"conv2d:{self.dtype}:nchw:{kind}"  # cuDNN's native NCHW kernels
        return f"conv2d:{self.dtype}:{kind}"

    @property
    def out_height(self) -> int:
        return (self.height + 2 * self.padding - self.kernel) // self.stride + 1

    @property
    def out_width(self) -> int:
        return (self.width + 2 * self.padding - self.kernel) // self.stride + 1

    def as_gemm(self) -> Gemm:
        return Gemm(
            m=self.batch * self.out_height * self.out_width,
            n=self.out_channels,
            k=self.in_channels * self.kernel * self.kernel,
            dtype=self.dtype,
        )

    def _gemm_shape(self, g: Gemm) -> GemmShape:
        """The product the kernel tiles. cuDNN's NHWC tensor-core kernels tile the output
        channels 128 wide; a plain 1x1 over NCHW is one product per image, W[Cout, Cin] @
        X[Cin, H*W] (so a 7x7 map gives 49-column products); its fp32 CUDA-core kernels pick
        their tiles per shape, as cuBLAS does."""
        if self.kernel_layout == "nchw" and self.plain_gemm:
            hw = self.height * self.width
            return GemmShape(self.out_channels, hw, self.in_channels, self.batch, self.dtype)
        tile_n = None if self.dtype == "fp32" else CONV_TILE_N
        return GemmShape(g.m, g.n, g.k, 1, self.dtype, tile_n=tile_n)

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        g = self.as_gemm()
        aligned = self.channels_aligned
        unit, dt = matmul_unit(gpu, self.dtype) if aligned else vector_unit(gpu, "fp32")
        size = element_bytes(self.dtype)
        in_bytes = size * self.batch * self.in_channels * self.height * self.width
        filter_bytes = size * self.out_channels * self.in_channels * self.kernel**2
        out_bytes = size * self.batch * self.out_channels * self.out_height * self.out_width
        # a kernel smaller than its stride never touches the pixels between windows
        # (a 1x1 stride-2 convolution reads a quarter of its input)
        touched = min(1.0, (self.kernel / self.stride) ** 2)
        nbytes = in_bytes * touched + filter_bytes + out_bytes
        # fast algorithms (Winograd, FFT) bound the speed of light at 1 / r^2 of the direct
        # count: an fp32 3x3 256-channel convolution ran at 132% of the direct count's roof
        # (validation/results/unseen-h100-run3)
        fast = unit == "vector" and self.stride == 1 and self.kernel > 1
        conv = KernelWork(
            name="conv2d (implicit gemm)" if aligned else "conv2d (CUDA cores: unaligned channels)",
            flops=(FlopPart(unit, dt, 2.0 * g.m * g.n * g.k),),
            bytes=nbytes,
            bytes_written=out_bytes,
            working_set_bytes=nbytes,
            # a tensor-core implicit GEMM, or CUDA-core code when the channels are unaligned
            gemm=self._gemm_shape(g) if aligned else None,
            min_flops_fraction=1.0 / self.kernel**2 if fast else 1.0,
            output_tiles=tile_count(g.m, g.n, (FILL_TILE, FILL_TILE)),
            notes=()
            if aligned
            else (
                f"{self.in_channels} input channels are not a multiple of 16 bytes: cuDNN "
                "runs CUDA-core kernels, not tensor cores (on an H100, at the same rate in "
                "bf16 and tf32); zero-padding the channels to a multiple of 16 bytes "
                "allows a tensor-core kernel (measure it: padding adds FLOPs)",
            ),
        )
        if not self.layout_transposes:
            return [conv]
        if self.kernel_layout == "nchw":
            note = (
                "channels_last fp32 tensors: cuDNN's fp32 CUDA-core kernels are NCHW, so it "
                "transposes the input and output around one; keep fp32 convolutions NCHW, or "
                "allow TF32 (torch.backends.cudnn.allow_tf32) for channels-last tensor cores",
            )
            # a 1x1 filter reads the same in both layouts: no filter transpose
            window = [_transpose("filter transpose", filter_bytes, (), size)] if self.kernel > 1 else []
            return [
                _transpose("NHWC->NCHW input transpose", in_bytes, note, size),
                *window,
                conv,
                _transpose("NCHW->NHWC output transpose", out_bytes, (), size),
            ]
        note = (
            "NCHW tensors: cuDNN transposes input, filter and output around its NHWC "
            "tensor-core kernel; channels_last tensors (x.to(memory_format="
            "torch.channels_last), model.to(memory_format=...)) skip these copies",
        )
        return [
            _transpose("NCHW->NHWC input transpose", in_bytes, note, size),
            _transpose("filter transpose", filter_bytes, (), size),
            conv,
            _transpose("NHWC->NCHW output transpose", out_bytes, (), size),
        ]


def _transpose(name: str, nbytes: float, notes: tuple[str, ...], element_size: int) -> KernelWork:
    """A layout copy: reads ``nbytes`` and writes them in the other order. It also counts its
    elements: cuDNN's transposes ran at ~2.9 TB/s on an H100 (3.35 TB/s HBM3) and ~3.0 TB/s on
    an H200 (4.8 TB/s HBM3e) in each GPU's own fit, a rate the SMs set, not the memory."""
    return KernelWork(
        name=name,
        flops=(),
        bytes=2.0 * nbytes,
        bytes_written=nbytes,
        working_set_bytes=2.0 * nbytes,
        elements=nbytes / element_size,
        family=LAYOUT_TRANSPOSE_FAMILY,
        notes=notes,
    )


# torch._grouped_mm (HF transformers 5's default experts kernel on CUDA, a CUTLASS sm90 grouped
# GEMM) computes each expert's rows in tiles of 128: over 512-16384 tokens of Mixtral-8x7B's
# and Qwen3-30B-A3B's experts an H200 ran 590-690 TFLOP/s on the padded rows (bf16), where the
# useful rows' rate fell to 235 at 128 rows per expert (validation/results/h200-sxm/
# grouped-mm-2026-11-29)
GROUPED_TILE_M = 128
# ... and streamed its experts' weights slower than cuBLAS's dense products of the same rows:
# 2.2-3.1 TB/s where torch.mm per expert reached 4.0-4.1 (same data). Priced as this many times
# the bytes the model's dense GEMM would move (fitted on those points: see GroupedGemm); the
# speed of light keeps the plain bytes
GROUPED_STREAM_FACTOR = 1.06


def expected_groups(tokens: int, experts: int, top_k: int, tile: int) -> tuple[float, float]:
    """(expected experts with rows, expected row tiles over all experts) when each of
    ``tokens`` tokens picks ``top_k`` distinct experts of ``experts`` uniformly: an expert's
    rows X ~ Binomial(tokens, top_k / experts); tiles E[ceil(X / tile)] = sum_j P(X > j*tile),
    the j >= 1 terms by the normal approximation with continuity correction."""
    p = top_k / experts
    active = 1.0 - (1.0 - p) ** tokens
    mean, sd = tokens * p, math.sqrt(tokens * p * (1.0 - p))
    # the tiles wholly below mean - 8 sd are all filled (P = 1 to 1e-15): counted, not summed
    j = max(1, math.floor((mean - 8 * sd) / tile))
    tiles = active + (j - 1)
    while j * tile < mean + 8 * sd + 1:
        z = (j * tile + 0.5 - mean) / sd if sd > 0 else math.inf
        tiles += 0.5 * math.erfc(z / math.sqrt(2.0))
        j += 1
    return experts * active, experts * tiles


# torch._grouped_mm has a grouped kernel for bf16 operands only (CUTLASS on Hopper: aten's
# GroupedBlas.cpp takes it when a, b and out are bf16); any other dtype runs its fallback, one
# torch.mm per group after reading the group offsets on the host (``offs.cpu()``: a
# host-device sync per call). An H200 trace of a Qwen3-MoE amp training step (fp32 weights, the
# experts' input cast to fp32: validation/results/steps-h200-moe-train-run1): 96 grouped calls
# a step, 96 cudaStreamSynchronize, 6,144 aten::mm on FP32 FFMA SGEMM kernels
GROUPED_KERNEL_DTYPE = "bf16"


class GroupedGemm(Op):
    """The experts' products of a mixture-of-experts layer in one grouped kernel
    (``torch._grouped_mm`` as HF transformers 5 runs them): ``tokens * top_k`` rows, sorted by
    expert, times each expert's weight, stored [n, k] (``x @ W.T``), of ``experts`` stacked.
    Routing is taken as uniform (a trained router is less even: more rows on fewer experts).

    Work: only experts with rows run, each in whole row tiles (``GROUPED_TILE_M``); bytes: the
    active experts' weights once, the rows in and out; the weights stream at
    ``GROUPED_STREAM_FACTOR`` times the dense GEMM's time per byte. ``weight_grad``: the
    weights' gradient in training (per expert dY_e^T X_e, over its rows): the same FLOPs and
    bytes with the weights written instead of read, timed as the forward product (an H200 trace
    of a Mixtral-layout bf16 step: 580-590 us against the forward's 560).

    A dtype other than ``GROUPED_KERNEL_DTYPE`` runs PyTorch's fallback: one GEMM per active
    expert on its mean rows (``sync_per_call``: the host waits for the offsets first).
    """

    op_name: ClassVar[str] = "grouped_gemm"
    eager_kind: ClassVar[str | None] = "matmul"
    tokens: Size
    experts: Size
    top_k: Size
    n: Size
    k: Size
    dtype: Dtype = "bf16"
    weight_grad: bool = False

    @model_validator(mode="after")
    def _top_k_fits(self) -> GroupedGemm:
        if self.top_k > self.experts:
            raise SpecError(f"top_k ({self.top_k}) exceeds experts ({self.experts})")
        return self

    @property
    def sync_per_call(self) -> bool:
        """Whether the call reads its group offsets on the host (the per-group fallback)."""
        return self.dtype != GROUPED_KERNEL_DTYPE

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        if self.sync_per_call:
            return self._per_group(gpu)
        unit, dt = matmul_unit(gpu, self.dtype)
        active, tiles = expected_groups(self.tokens, self.experts, self.top_k, GROUPED_TILE_M)
        rows = self.tokens * self.top_k
        padded = tiles * GROUPED_TILE_M
        a, o = element_bytes(self.dtype), output_bytes_per_element(self.dtype)
        nbytes = active * self.n * self.k * a + rows * self.k * a + rows * self.n * o
        batch = max(1, round(active))
        # torch._grouped_mm first writes each group's problem size and pointers (a small kernel)
        prep_bytes = 64.0 * self.experts
        prep = KernelWork(
            name="prepare_grouped_gemm_data",
            bytes=prep_bytes,
            working_set_bytes=prep_bytes,
            threads=self.experts,
        )
        shape = GemmShape(
            max(1, round(padded / batch)), self.n, self.k, batch, self.dtype, transpose_b=True
        )
        note = (
            f"{active:.1f} of {self.experts} experts active, {tiles:.1f} row tiles of "
            f"{GROUPED_TILE_M} for {rows} rows (uniform routing): the FLOPs count the padded "
            f"tiles the kernel computes, {rows / padded:.1%} of them useful"
        )
        gemm = KernelWork(
            name="grouped_gemm",
            flops=(FlopPart(unit, dt, 2.0 * padded * self.n * self.k),),
            bytes=nbytes * GROUPED_STREAM_FACTOR,
            bytes_written=rows * self.n * o,
            working_set_bytes=nbytes,
            reread_bytes=nbytes * (GROUPED_STREAM_FACTOR - 1.0),
            min_flops_fraction=rows / padded,
            gemm=shape,
            notes=(note,),
        )
        return [prep, gemm]

    def _per_group(self, gpu: GPUSpec) -> list[KernelWork]:
        """PyTorch's fallback: one product per active expert of its mean rows (dW: the
        expert's [n, k] summed over them), repeated."""
        active, _ = expected_groups(self.tokens, self.experts, self.top_k, GROUPED_TILE_M)
        groups = max(1, round(active))
        per = max(1, round(self.tokens * self.top_k / groups))
        if self.weight_grad:
            one = Gemm(m=self.n, n=self.k, k=per, dtype=self.dtype, transpose_a=True)
        else:
            one = Gemm(m=per, n=self.n, k=self.k, dtype=self.dtype, transpose_b=True)
        note = (f"torch._grouped_mm has no {self.dtype} grouped kernel: {groups} products of "
                f"~{per} rows, one per expert, after a host-device sync")  # fmt: skip
        return [replace(kw, repeats=kw.repeats * groups, notes=(*kw.notes, note))
                for kw in one.kernels(gpu)]  # fmt: skip
