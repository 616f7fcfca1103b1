"""Memory-bound ops: user kernels, elementwise, reductions, norms, softmax, copies, embedding."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from gpumodel._validators import (
    ByteCount,
    FlopCount,
    PositiveBytes,
    Size,
    SmallCount,
)
from gpumodel.errors import SpecError
from gpumodel.ops.base import Dtype, FlopPart, KernelWork, Op, element_bytes, vector_unit
from gpumodel.specs import GPUSpec


class Kernel(Op):
    """A user-described kernel: FLOPs and DRAM bytes, optionally its launch geometry.

    The seed's polynomial kernel (k terms over n floats) is
    ``Kernel(flops=2*k*n, bytes=8*n, fma=False, threads=n)``: one add and one multiply per term,
    4 bytes read and 4 written per element.
    """

    op_name: ClassVar[str] = "kernel"
    flops: FlopCount
    bytes: ByteCount  # 0 only for an empty kernel (the launch floor): see _moves_its_result
    dtype: Dtype = "fp32"
    fma: bool = True
    threads: Size | None = None
    threads_per_block: SmallCount = Field(256, le=1024)
    registers_per_thread: int | None = Field(
        None, ge=0, le=255, description="registers per thread (occupancy); default 32"
    )
    shared_mem_per_block: ByteCount = Field(0, description="static + dynamic bytes per block")
    unit: Literal["vector", "tensor"] = "vector"
    bytes_written: ByteCount | None = Field(
        None, description="the part of bytes that is written (read/write mix)"
    )

    @model_validator(mode="after")
    def _moves_its_result(self) -> Kernel:
        """A kernel that computes writes its result somewhere: FLOPs over no bytes would be an
        infinite arithmetic intensity. An empty kernel (no FLOPs, no bytes) times the launch."""
        if self.flops > 0 and self.bytes == 0:
            raise SpecError("a kernel with FLOPs moves at least 1 byte (give its bytes)")
        return self

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        if self.unit == "tensor":
            from gpumodel.ops.base import matmul_unit

            unit, dt = matmul_unit(gpu, self.dtype)
        else:
            unit, dt = vector_unit(gpu, self.dtype)
        return [
            KernelWork(
                name="kernel",
                flops=(FlopPart(unit, dt, self.flops),) if self.flops else (),
                bytes=self.bytes,
                bytes_written=self.bytes_written,
                working_set_bytes=self.bytes,
                fma=self.fma,
                threads=self.threads,
                threads_per_block=self.threads_per_block,
                registers_per_thread=self.registers_per_thread,
                shared_mem_per_block=self.shared_mem_per_block,
            )
        ]


# FLOPs per element and tensors read per element for each elementwise function.
# Counts follow the usual convention (one add/mul/compare = 1 FLOP; transcendental = 1 SFU op
# plus the arithmetic around it); these ops are memory-bound on every GPU in the library.
ELEMENTWISE: dict[str, tuple[float, int]] = {
    "copy": (0, 1),
    "add": (1, 2),
    "mul": (1, 2),
    "relu": (1, 1),
    "exp": (1, 1),
    "silu": (4, 1),  # x / (1 + exp(-x))
    "gelu": (8, 1),  # 0.5 x (1 + erf(x / sqrt 2))
    "gelu_tanh": (9, 1),  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
}


class Elementwise(Op):
    """``out = f(x)`` (or ``f(x, y)`` for add/mul) over ``n`` elements; reads inputs once, writes
    the output once."""

    op_name: ClassVar[str] = "elementwise"
    eager_kind: ClassVar[str | None] = "elementwise"
    op: Literal["copy", "add", "mul", "relu", "exp", "silu", "gelu", "gelu_tanh"]
    n: Size
    dtype: Dtype = "bf16"

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        flops_per, inputs = ELEMENTWISE[self.op]
        unit, dt = vector_unit(gpu, self.dtype)
        nbytes = (inputs + 1) * self.n * element_bytes(self.dtype)
        return [
            KernelWork(
                name=self.op,
                flops=(FlopPart(unit, dt, flops_per * self.n),) if flops_per else (),
                bytes=nbytes,
                bytes_written=self.n * element_bytes(self.dtype),
                working_set_bytes=nbytes,
                threads=self.n,
            )
        ]

    def to_row(self) -> dict:
        return {"op": self.op, "n": self.n, "dtype": self.dtype}

    def label(self) -> str:
        return f"{self.op}(n={self.n}, dtype={self.dtype})"


class Reduction(Op):
    """Sum of ``n`` elements to one value: reads the input once."""

    op_name: ClassVar[str] = "reduction"
    eager_kind: ClassVar[str | None] = "reduction"
    n: Size
    dtype: Dtype = "bf16"

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        unit, dt = vector_unit(gpu, self.dtype)
        nbytes = self.n * element_bytes(self.dtype)
        return [
            KernelWork(
                name="reduction",
                flops=(FlopPart(unit, dt, float(self.n)),),
                bytes=nbytes,
                bytes_written=0.0,
                working_set_bytes=nbytes,
                threads=self.n,
            )
        ]


# the longest row the warp-per-row kernels take (PyTorch's softmax: ``dim_size <= 1024``)
SHORT_ROW_COLUMNS = 1024


class _RowOp(Op):
    columns_field: ClassVar[str] = "hidden"
    rows: Size
    dtype: Dtype = "bf16"
    flops_per_element: ClassVar[float] = 1.0
    params_per_column: ClassVar[int] = 0

    @property
    def columns(self) -> int:
        raise NotImplementedError

    @property
    def family(self) -> str:
        """Rows of up to 1024 elements fit one warp's registers (a warp-per-row kernel, read
        once); longer rows take block-wide kernels with different efficiency: calibrated apart.
        fp32 rows (autocast runs norms and softmax in fp32) are calibrated apart too: an H200
        ran PyTorch's fp32 layer norm 1.28-1.30x the time of the bf16 one of the same shape
        (16K-256K rows of 1024; validation/results/h200-sxm/validate-2026-11-28-run9), not the
        2x its bytes would say."""
        family = self.op_name if self.columns <= SHORT_ROW_COLUMNS else f"{self.op_name}:long-rows"
        family += self._kernel_qualifier
        return f"{family}:fp32" if self.dtype == "fp32" else family

    @property
    def _kernel_qualifier(self) -> str:
        """A long-row kernel of its own within the long-row family (``Softmax``'s)."""
        return ""

    @property
    def reads_per_element(self) -> int:
        """Times the kernel reads each input element from global memory (1: the row is held
        on chip between its passes)."""
        return 1

    def monotone_floor(self, gpu: GPUSpec) -> Op | None:
        """A long row is never faster than the longest short row: the short-row family's time
        at 1024 columns bounds the long-row family's from below (the two are calibrated
        apart, so without it the time fell at the switch)."""
        if self.columns <= SHORT_ROW_COLUMNS:
            return None
        return self.model_copy(update={self.columns_field: SHORT_ROW_COLUMNS})

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        unit, dt = vector_unit(gpu, self.dtype)
        n = self.rows * self.columns
        size = element_bytes(self.dtype)
        reads = self.reads_per_element
        dram_reads = self._dram_reads(gpu)
        nbytes = size * ((dram_reads + 1) * n + self.params_per_column * self.columns)
        return [
            KernelWork(
                name=self.op_name if reads == 1 else f"{self.op_name} (row read {reads}x)",
                flops=(FlopPart(unit, dt, self.flops_per_element * n),),
                bytes=nbytes,
                bytes_written=size * n,
                working_set_bytes=nbytes,
                # softmax over 4096 columns and layer norm over 1024 ran at the same speed on
                # H100 and H200 (829-831 and 154-155 us at 65536 rows): bound by per-element
                # work, which a calibration prices per SM-cycle (``KernelWork.elements``)
                elements=n,
                reread_bytes=size * n * (dram_reads - 1),
                notes=self._kernel_notes(dram_reads),
                **self._geometry(size),
            )
        ]

    def _kernel_notes(self, dram_reads: float) -> tuple[str, ...]:
        return ()

    def _dram_reads(self, gpu: GPUSpec) -> float:
        """Times each input element comes from DRAM (the rest of ``reads_per_element`` from L2)."""
        return self.reads_per_element

    def _geometry(self, element_size: int) -> dict:
        """Launch geometry the time model's Little's-law limit needs; by default one thread
        per element with its bytes in flight at once (no limit is drawn from it)."""
        return {"threads": self.rows * self.columns}


# PyTorch's layer norm and RMS norm kernel (aten/src/ATen/native/cuda/layer_norm_kernel.cu,
# ``launch_vectorized_layer_norm_kernel``; one kernel for both in PyTorch 2.11, checked with
# torch.profiler on an H100: validation/results/h100-sxm/norm-kernels.json): one block per row
# of ``num_threads()`` = 4 warps (thread_constants.h), each thread looping over its row in
# loads of ``vec_size`` = 4 elements.
NORM_BLOCK_THREADS = 128
NORM_VECTOR_ELEMENTS = 4


class _BlockPerRowNorm(_RowOp):
    # The backward of an affine norm over its forward's traffic: one kernel reads dy and x and
    # writes dx, a second sums dy and dy * x-hat over the rows for the weight (and bias)
    # gradient, reading dy and x again: 5 passes against the forward's 2 (PyTorch's
    # layer_norm_grad_input_kernel + GammaBetaBackward, aten/src/ATen/native/cuda/
    # layer_norm_kernel.cu). Measured on the H100 training fit set's traces (GPT-2 medium,
    # [4096, 1024]): 3.15x in fp32, 2.26x in bf16.
    backward_traffic: ClassVar[float] = 2.5

    def _geometry(self, element_size: int) -> dict:
        """One block per row, each thread with one vector load in flight: few rows cannot keep
        enough bytes in flight to reach DRAM bandwidth (Little's law), and a long row is a
        chain of dependent loads per thread."""
        return {"threads": self.rows * NORM_BLOCK_THREADS,
                "threads_per_block": NORM_BLOCK_THREADS,
                "bytes_in_flight_per_thread": NORM_VECTOR_ELEMENTS * element_size,
                # x's loads wait on each other; the weight (and bias) load in the same loop
                # iterations and add no round trip. Counting them as a chain of their own made
                # the time fall as rows grew (the fixed weight bytes over a rising limit);
                # x alone scores as well or better on the measured norms (H100 median 4.1%,
                # H200 4.0% vs 4.7%, all 63 points of each shipped calibration)
                "chained_read_bytes": self.rows * self.columns * element_size}  # fmt: skip


class LayerNorm(_BlockPerRowNorm):
    """Layer norm over ``hidden`` per row, with weight and bias: reads x, writes y.
    ~8 FLOPs per element (mean, variance, normalise, scale, shift)."""

    op_name: ClassVar[str] = "layernorm"
    eager_kind: ClassVar[str | None] = "norm"
    hidden: Size
    flops_per_element: ClassVar[float] = 8.0
    params_per_column: ClassVar[int] = 2

    @property
    def columns(self) -> int:
        return self.hidden


class RMSNorm(_BlockPerRowNorm):
    """RMS norm (Zhang & Sennrich 2019) with a weight: ~5 FLOPs per element."""

    op_name: ClassVar[str] = "rmsnorm"
    eager_kind: ClassVar[str | None] = "norm"
    hidden: Size
    flops_per_element: ClassVar[float] = 5.0
    params_per_column: ClassVar[int] = 1

    @property
    def columns(self) -> int:
        return self.hidden


# PyTorch's softmax and log_softmax over a row of more than 1024 columns (aten/src/ATen/native/
# cuda/SoftMax.cu, ``host_softmax``) run one block of 1024 threads per row. The block keeps the
# row on chip between its passes (max, sum of exp, write) while each thread holds at most 9
# elements in registers (``potential_reg_cnt < 10``: up to 9,216 columns) or the row fits the
# block's shared memory (``cunn_SoftMaxForwardSmem``: fewer than (sharedMemPerBlock - 128 B of
# reduction scratch) / element size columns, and a row of whole 16-byte vectors). Any other row
# (a vocabulary's logits: 32,000 or 50,257 fp32 values) takes ``cunn_SoftMaxForward``, which
# reads the row from global memory in each of its three passes.
SOFTMAX_REGISTER_COLUMNS = 9 * 1024
SOFTMAX_SHARED_MEMORY_BYTES = 48 * 1024 - 128  # cudaDeviceProp.sharedMemPerBlock, less scratch
SOFTMAX_VECTOR_BYTES = 16
SOFTMAX_BLOCK_THREADS = 1024  # SoftMaxForward_getBlockSize: min(columns, 1024) threads


class Softmax(_RowOp):
    """Row softmax: max, subtract, exp, sum, divide: ~5 FLOPs per element."""

    op_name: ClassVar[str] = "softmax"
    eager_kind: ClassVar[str | None] = "reduction"
    columns_field: ClassVar[str] = "cols"
    cols: Size
    flops_per_element: ClassVar[float] = 5.0

    @property
    def columns(self) -> int:
        return self.cols

    @property
    def row_kernel(self) -> Literal["warp", "registers", "shared-memory", "three-read"]:
        """Which of PyTorch's softmax kernels the row takes (see above; checked with
        torch.profiler on an H200 at each limit: validation/results/h200-sxm/
        softmax-rows-2026-11-28). Calibrated apart: the shared-memory kernel ran 67M bf16
        elements in 129 us where the register kernel took 256 us and the three-read one 193."""
        if self.cols <= SHORT_ROW_COLUMNS:
            return "warp"
        if self.cols <= SOFTMAX_REGISTER_COLUMNS:
            return "registers"
        row_bytes = self.cols * element_bytes(self.dtype)
        fits = row_bytes < SOFTMAX_SHARED_MEMORY_BYTES and row_bytes % SOFTMAX_VECTOR_BYTES == 0
        return "shared-memory" if fits else "three-read"

    @property
    def _kernel_qualifier(self) -> str:
        return {"shared-memory": ":smem", "three-read": ":spill"}.get(self.row_kernel, "")

    @property
    def reads_per_element(self) -> int:
        """3 for a row that neither registers nor shared memory hold, else 1. H100 traces of
        an HF training step's loss (validation/results/train-fitset-h100, 4096 x 50,257 fp32):
        log_softmax 1.04 ms, 3.2 TB/s at three reads and one write."""
        return 3 if self.row_kernel == "three-read" else 1

    def _dram_reads(self, gpu: GPUSpec) -> float:
        """A row read three times finds its second and third reads in L2 while the rows in
        flight (one per resident block of 1024 threads) fit half of it (the share of the L2 a
        stream stays resident in for validate's bandwidth family, ``l2_hot_max_bytes``): on
        an H200, fp32 rows of 16,384 (64 KiB, 17 MB in flight) ran 67M elements in 176 us,
        6.1 TB/s if every read went to DRAM; rows of 32,000 (34 MB) and longer moved all four
        passes through DRAM on H100 and H200 (validation/results/h200-sxm/
        softmax-rows-2026-11-28)."""
        reads = self.reads_per_element
        if reads == 1:
            return 1.0
        limits = gpu.sm_limits
        blocks_per_sm = (limits.max_threads_per_sm if limits else 2048) // SOFTMAX_BLOCK_THREADS
        in_flight = min(self.rows, gpu.sm_count * blocks_per_sm)
        row_bytes = self.cols * element_bytes(self.dtype)
        return 1.0 if in_flight * row_bytes <= gpu.l2_cache_bytes / 2 else float(reads)

    def _kernel_notes(self, dram_reads: float) -> tuple[str, ...]:
        if self.reads_per_element == 1:
            return ()
        where = "each from DRAM" if dram_reads > 1 else "the second and third from L2"
        return (f"PyTorch reads a row of {self.cols:,} {self.dtype} values three times (max, sum "
                f"of exp, write; {where}): neither a thread block's registers nor its 48 KiB of "
                "shared memory hold it (rows of whole 16-byte vectors under 48 KiB stay on "
                "chip)",)  # fmt: skip

    def _geometry(self, element_size: int) -> dict:
        """A row read three times takes one block of 1024 threads, every thread looping over
        its row one 16-byte vector at a time (``cunn_SoftMaxForward``): few rows cannot keep
        enough loads in flight to reach DRAM bandwidth (Little's law). The kernels that hold
        the row on chip load it in one go (registers) or stage it (shared memory): no chain."""
        if self.reads_per_element == 1:
            return super()._geometry(element_size)
        return {"threads": self.rows * SOFTMAX_BLOCK_THREADS,
                "threads_per_block": SOFTMAX_BLOCK_THREADS,
                "bytes_in_flight_per_thread": SOFTMAX_VECTOR_BYTES,
                "chained_read_bytes": self.rows * self.cols * element_size
                * self.reads_per_element}  # fmt: skip


class Copy(Op):
    """Device-to-device copy of ``bytes``: reads and writes them (2x bytes moved)."""

    op_name: ClassVar[str] = "copy"
    eager_kind: ClassVar[str | None] = "copy"
    bytes: PositiveBytes

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        return [
            KernelWork(
                name="copy d2d", bytes=2 * self.bytes, bytes_written=self.bytes,
                working_set_bytes=2 * self.bytes,
            )
        ]  # fmt: skip


class ExpandCopy(Op):
    """Materialise a broadcast view: ``n`` output elements, each source element repeated
    ``repeat`` times along a new axis, once per tensor (``tensors`` kernels, e.g. K and V).

    HF transformers' ``repeat_kv`` is ``x[:, :, None].expand(...).reshape(...)``: the source is
    not contiguous in the output's layout, so PyTorch copies with its generic strided
    elementwise kernel (``elementwise_kernel<128, 4>`` of ``direct_copy_kernel_cuda``), not the
    vectorised one a plain copy gets: it runs far below a copy's bandwidth (an H100 profile of
    a StaticCache decode: 151 us for 168 MB, 1.1 TB/s), so it is calibrated as its own family
    (``gpumodel validate`` measures it). Reads ``n / repeat`` elements, writes ``n``.

    Its limit is the per-element index arithmetic, not DRAM: H100 and H200 (same 132 SMs at
    1.98 GHz, 1.43x apart in bandwidth) copied 450-500 G elements/s alike for GQA groups 2-8
    (validation/results/*/raw-measurements-2026-11-22.json), so a calibration prices it in
    elements per SM-cycle (``KernelWork.elements``) and carries that to other GPUs by SMs x
    clock."""

    op_name: ClassVar[str] = "expand_copy"
    eager_kind: ClassVar[str | None] = "copy"
    n: Size = Field(description="output elements of one tensor")
    repeat: Size = Field(1, description="times each source element is repeated")
    tensors: Size = Field(1, description="tensors copied, one kernel each")
    dtype: Dtype = "bf16"

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        size = element_bytes(self.dtype)
        written = size * self.n
        nbytes = written + size * self.n / self.repeat
        return [
            KernelWork(name="expand copy", bytes=nbytes, bytes_written=written,
                       working_set_bytes=nbytes, elements=self.n, repeats=self.tensors,
                       notes=("scaled_dot_product_attention(..., enable_gqa=True) (PyTorch "
                              ">= 2.5) reads the shared K/V heads in place: no copy",))
        ]  # fmt: skip


# A torch.cat whose large input is a strided view spanning whole rows (HF's sliding-window
# cache cat of ``cache[:, :, 1:]``, Phi-3's RoPE pass-through cat of the rotated q and k) runs
# CatArrayBatchedCopy's generic path at 1.5x the per-element work of rotate_half's cat of two
# half-rows (the calibrated ``strided_elementwise:cat``). Fit on an H200: Mistral-7B's window
# cat at 1 x 4096, 8 x 2048 and 8 x 4096 took 1.27, 1.52 and 1.51x rotate_half's price (median
# 1.51; validation/results/h200-sxm/sdpa-mask-2026-11-29/cat-slice.txt).
VIEW_CAT_WORK_FACTOR = 1.5


def strided_kernel(
    name: str,
    kind: str,
    elements: float,
    bytes_per_element: float,
    written_per_element: float,
    flops: tuple[FlopPart, ...] = (),
) -> KernelWork:
    """A PyTorch elementwise kernel on its non-vectorised path (``kind``: a dtype-casting copy,
    operands that broadcast or are non-contiguous views, a ``torch.cat`` of such views, or
    ``view_cat``: a cat of a whole-row strided view): priced per element
    (``KernelWork.elements``), calibrated as the family ``strided_elementwise:<kind>``
    (``view_cat``: the cat family at ``VIEW_CAT_WORK_FACTOR`` times the work per element)."""
    work = elements * VIEW_CAT_WORK_FACTOR if kind == "view_cat" else elements
    return KernelWork(name=name, flops=flops, bytes=elements * bytes_per_element,
                      bytes_written=elements * written_per_element,
                      working_set_bytes=elements * bytes_per_element, elements=work,
                      family=strided_family(kind))  # fmt: skip


def strided_family(kind: str) -> str:
    """The calibrated family of a strided kernel of ``kind`` (a view cat is a cat)."""
    return f"strided_elementwise:{'cat' if kind == 'view_cat' else kind}"


class StridedElementwise(Op):
    """An eager PyTorch elementwise op that does not get the vectorised kernel: a casting copy
    (``kind="cast"``: ``x.float()`` of bf16, ``unrolled_elementwise_kernel``) or a binary op on
    broadcast or transposed operands (``kind="broadcast"``: RoPE's ``q * cos`` on the
    transposed q view, RMSNorm's ``x * rsqrt(var)`` and ``weight * x``;
    ``elementwise_kernel<128, 4>``) or a concatenation of non-contiguous views (``kind="cat"``:
    RoPE's ``rotate_half``, ``torch.cat((-x2, x1), -1)`` of the transposed q's halves,
    ``CatArrayBatchedCopy``; ``kind="view_cat"``: a cat of a strided view of whole rows, the
    sliding-window cache's). Eager HF Llama runs dozens per layer. Like ``ExpandCopy``
    they are priced per element: in an H100 training profile such kernels moved 1.8-2.3 TB/s,
    well below a stream (validation/results/h100-sxm/training-step/).
    ``bytes_per_element``: reads plus writes per output element."""

    op_name: ClassVar[str] = "strided_elementwise"
    eager_kind: ClassVar[str | None] = "elementwise"
    kind: Literal["cast", "broadcast", "cat", "view_cat"]
    n: Size = Field(description="output elements")
    # an element moves a few times its size (at most 8 bytes): 1 KB per element cannot be meant
    bytes_per_element: float = Field(gt=0, le=1024)
    written_per_element: float = Field(gt=0, le=1024)
    dtype: Dtype = Field("bf16", description="output dtype (a label: the bytes carry the sizes)")

    @model_validator(mode="after")
    def _written_within_moved(self) -> StridedElementwise:
        if self.written_per_element > self.bytes_per_element:
            raise SpecError(
                f"written_per_element ({self.written_per_element:g}) exceeds bytes_per_element "
                f"({self.bytes_per_element:g}), which counts the writes too"
            )
        return self

    @property
    def family(self) -> str:
        return strided_family(self.kind)

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        name = "strided cat (of a view)" if self.kind == "view_cat" else f"strided {self.kind}"
        return [strided_kernel(name, self.kind, self.n,
                               self.bytes_per_element, self.written_per_element)]  # fmt: skip


class AdamW(Op):
    """One AdamW step over ``params`` parameters, fused as ``torch.optim.AdamW(fused=True)``
    (multi-tensor apply) or Megatron's distributed optimizer run it: one pass that reads weight,
    gradient and both moments and writes weight and both moments, 7 values per parameter: 28 B
    in fp32 (Loshchilov & Hutter 2019 for the update). ``dtype`` is the states' type: a ``bf16``
    run keeps weights, gradients and moments in bf16 (14 B), and its kernel, which computes in
    fp32 either way, is calibrated apart (``adamw:16-bit``). ``master_copy`` adds the cast of
    the updated fp32 weights to the bf16 working copy (a second kernel, 4 B read + 2 B
    written). The fused kernel streams below a copy's rate (H100: 2.6 TB/s, H200: 3.3 TB/s for
    1.9 B fp32 parameters), so validate measures it as its own family."""

    op_name: ClassVar[str] = "adamw"
    eager_kind: ClassVar[str | None] = "optimizer_step"
    params: Size = Field(description="parameters this rank updates")
    dtype: Literal["fp32", "bf16", "fp16"] = Field("fp32", description="weights, grads, moments")
    master_copy: bool = False

    @model_validator(mode="after")
    def _master_copy_is_of_fp32(self) -> AdamW:
        if self.master_copy and self.dtype != "fp32":
            raise SpecError("master_copy casts updated fp32 master weights to bf16: it needs "
                            f"dtype='fp32', got '{self.dtype}'")  # fmt: skip
        return self

    @classmethod
    def for_states(cls, params: float, state_bytes: float, master_copy: bool = False) -> AdamW:
        """The step over ``params`` parameters whose weight, gradient and moments take
        ``state_bytes`` each (4: fp32, 2: bf16)."""
        if state_bytes not in (2, 4):
            raise SpecError(f"AdamW states are 2 (bf16) or 4 (fp32) bytes, got {state_bytes:g}")
        return cls(params=max(1, math.ceil(params)), dtype="fp32" if state_bytes == 4 else "bf16",
                   master_copy=master_copy)  # fmt: skip

    @property
    def family(self) -> str:
        return "adamw" if self.dtype == "fp32" else "adamw:16-bit"

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        n = float(self.params)
        size = element_bytes(self.dtype)
        fp32 = self.dtype == "fp32"
        # the 16-bit kernel converts every value to fp32 and back: per-element work that the
        # fp32 kernel's bytes hide. H200, 268M parameters: 1.38 ms in bf16, 2.16 ms in fp32,
        # 0.64x for half the bytes; H100 (training fit set): 0.60x (validation/results/
        # h200-sxm/validate-2026-11-28-run11). Priced per element (``elements``), under the
        # fp32 kernel's bandwidth (validate's adamw fit)
        out = [KernelWork(name="fused adamw" if fp32 else f"fused adamw ({self.dtype})",
                          bytes=7 * size * n, bytes_written=3 * size * n,
                          working_set_bytes=7 * size * n, elements=None if fp32 else n)]  # fmt: skip
        if self.master_copy:
            out.append(KernelWork(name="fp32 -> bf16 weights", bytes=6 * n, bytes_written=2 * n,
                                  working_set_bytes=6 * n, family="elementwise"))  # fmt: skip
        return out


class HostTransfer(Op):
    """A copy between host and device memory over PCIe (or the host link)."""

    op_name: ClassVar[str] = "host_transfer"
    bytes: PositiveBytes
    direction: Literal["h2d", "d2h"] = "h2d"
    pinned: bool = True
    # a device-to-host copy into a new pageable tensor (``Tensor.cpu()``, ``.to("cpu")``)
    # rather than into memory that exists (``copy_``): large ones touch new pages
    fresh_destination: bool = False

    @model_validator(mode="after")
    def _fresh_is_pageable_d2h(self) -> HostTransfer:
        if self.fresh_destination and (self.direction != "d2h" or self.pinned):
            raise SpecError("fresh_destination describes a device-to-host copy into a new "
                            "pageable tensor (Tensor.cpu()): use it with direction='d2h' and "
                            "pinned=False")  # fmt: skip
        return self

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        kind = "pinned" if self.pinned else "pageable"
        return [
            KernelWork(
                name=f"{self.direction} ({kind}{', new tensor' if self.fresh_destination else ''})",
                bytes=self.bytes,
                transfer=self.direction,
                pinned=self.pinned,
                fresh_host_pages=self.fresh_destination,
            )
        ]


class Embedding(Op):
    """Gather ``tokens`` rows of width ``hidden`` from an embedding table."""

    op_name: ClassVar[str] = "embedding"
    eager_kind: ClassVar[str | None] = "index"
    tokens: Size
    hidden: Size
    dtype: Dtype = "bf16"

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        nbytes = 2 * self.tokens * self.hidden * element_bytes(self.dtype)
        return [
            KernelWork(name="embedding gather", bytes=nbytes, bytes_written=nbytes / 2,
                       working_set_bytes=nbytes)
        ]  # fmt: skip
