"""What an op is to the time model: kernels, each with FLOPs per execution unit and bytes moved.

An op (a pydantic model users build) turns itself into one or more ``KernelWork`` items for a
given GPU. The time model (gpumodel.model, gpumodel.predict) only sees ``KernelWork``: it never
needs to know what a GEMM or an attention is, except for the optional ``gemm`` shape used by
tile/wave quantization and alignment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict

from gpumodel._validators import Checked
from gpumodel.errors import UnsupportedError
from gpumodel.model.scheduling import TileWork
from gpumodel.specs import BYTES_PER_ELEMENT, GPUSpec

Dtype = Literal["fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4"]
ExecUnit = Literal["tensor", "vector", "sfu", "none"]  # sfu: special function units (exp)


@dataclass(frozen=True)
class FlopPart:
    """FLOPs executed by one unit in one dtype. ``useful``: the share of them the algorithm
    needs (a fused causal kernel computes its diagonal tiles whole; fp32 attention's products
    run as several TF32 ones): the time model prices ``flops``, a prediction reports
    ``flops x useful`` (number or a sweep's array)."""

    unit: ExecUnit
    dtype: str
    flops: float
    useful: float = 1.0


@dataclass(frozen=True)
class GemmShape:
    """The matrix product a kernel runs, for quantization and alignment terms."""

    m: int
    n: int
    k: int
    batch: int
    dtype: str
    # output tile of the library's kernels where it is fixed (cuDNN's implicit GEMM: N; flash
    # attention's query block: M); None where the library picks per shape (cuBLAS)
    tile_n: int | None = None
    tile_m: int | None = None
    # K (the reduction) in whole tiles where the kernel is built for fixed widths (attention's
    # head dimension: FlashAttention-2 runs head_dim 80 on its 96-wide kernel)
    tile_k: int | None = None
    # whether N and K off a 16-byte multiple push the library onto a slower kernel class
    # (cuBLAS, cuDNN); FlashAttention masks a ragged last key block instead (False)
    needs_alignment: bool = True
    # B given as its transpose, as torch.nn.Linear stores a weight ([N, K]; y = x @ W.T)
    transpose_b: bool = False
    # A given as its transpose ([K, M] in memory: its rows are M long, so M must be aligned),
    # as autograd hands cuBLAS the output gradient in a weight gradient (dW = dY.T @ X)
    transpose_a: bool = False
    # a cuBLAS product (torch.matmul, nn.Linear): misaligned, it falls back to kernels whose
    # tiles run in waves (gpumodel.model.gemm.misaligned_busy_share); cuDNN's and
    # FlashAttention's products do not (False)
    cublas: bool = False


@dataclass(frozen=True)
class KernelWork:
    """One kernel (or one transfer) as the time model sees it."""

    name: str
    flops: tuple[FlopPart, ...] = ()
    bytes: float = 0.0  # bytes moved to and from device memory
    bytes_written: float | None = None  # the part of ``bytes`` written (None: not known)
    working_set_bytes: float | None = None  # distinct bytes touched; L2 residency if small
    launches: int = 1
    # identical kernels run back to back (one per tensor): the time model prices one and
    # multiplies, so the work never grows with a user's count
    repeats: int = 1
    fma: bool = True  # False: separate mul and add, half the FMA roof
    gemm: GemmShape | None = None
    threads: int | None = None
    threads_per_block: int | None = None
    # bytes a thread has in flight at once when it loops over its data one load at a time
    # (Little's law then bounds the reads; None: all its bytes at once)
    bytes_in_flight_per_thread: float | None = None
    # the reads that wait on each other in that loop (a norm's x; its weight and bias load in
    # the same iterations, adding no round trip); None: every byte read
    chained_read_bytes: float | None = None
    registers_per_thread: int | None = None  # for the occupancy of a described kernel
    # elements whose addresses the threads compute one by one: a kernel bound by that integer
    # work (a strided copy's index arithmetic) runs at a calibrated rate per SM clock
    # (``CalibrationParams.family_elements_per_sm_cycle``), not at a bandwidth
    elements: float | None = None
    shared_mem_per_block: float = 0.0
    transfer: Literal["h2d", "d2h"] | None = None  # a host<->device copy over PCIe
    # work of each thread block relative to a full one, for one group of blocks launched in
    # order (e.g. the query tiles of one attention head); the group repeats ``tile_groups`` times
    tile_work: TileWork | None = None
    tile_groups: int = 1
    tile_blocks_per_sm: int = 1  # thread blocks of this kernel resident per SM
    # output tiles of FILL_TILE x FILL_TILE an implicit-GEMM kernel (cuDNN's convolutions) has
    # to spread over the SMs; few tiles leave SMs idle (gpumodel.model.scheduling.fill_efficiency)
    output_tiles: int | None = None
    pinned: bool = True
    fresh_host_pages: bool = False  # a transfer into a new pageable tensor (Tensor.cpu())
    # what the op wants the user told about this kernel (shown with the advice)
    notes: tuple[str, ...] = field(default=())
    # the calibrated kernel family that runs this kernel when it is not the op's own
    family: str | None = None
    # the fewest FLOPs, as a fraction of ``flops``, any algorithm computing the same result
    # needs (fast convolutions multiply less than the direct form); only the speed of light
    # uses it, the time model prices the kernels as described
    min_flops_fraction: float = 1.0
    # the share of its family's calibrated DRAM rate this kernel reaches (a generated kernel its
    # family was not measured on: Inductor's repeat_kv copies); the speed of light ignores it
    bandwidth_fraction: float = 1.0
    # the part of ``bytes`` that reads again what the kernel read before (a softmax row read
    # three times): the time model prices it as stated, the speed of light lets L2 serve it
    reread_bytes: float = 0.0
    # a latency-bound loop each thread block runs step after step (the memory-efficient
    # attention kernel's decode walks its key tiles one at a time): SM cycles of one block's
    # loop, its blocks, and how many run at once on an SM. The kernel takes at least
    # serial_cycles / clock x max(1, serial_blocks / (serial_blocks_per_sm x SMs))
    serial_cycles: Any = 0.0
    serial_blocks: Any = 0.0
    serial_blocks_per_sm: float = 1.0
    # a kernel that loads its next tiles asynchronously while it computes on the last ones
    # (FlashAttention's cp.async pipeline): its compute and memory times overlap fully (the
    # roofline's max), not by the calibration's fitted overlap exponent
    pipelined: bool = False

    @property
    def total_flops(self) -> float:
        """The FLOPs the time model prices (the units' work)."""
        return sum(p.flops for p in self.flops)

    @property
    def useful_flops(self) -> float:
        """The FLOPs the algorithm needs, what a prediction reports (``FlopPart.useful``)."""
        return sum(p.flops * p.useful for p in self.flops)


class Op(Checked):
    """Base of all ops. Subclasses set ``op_name`` and implement ``kernels(gpu)``."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    op_name: ClassVar[str] = "op"
    # the host profile's eager op kind (a key of ``eager_op_s``) of the PyTorch call that runs
    # this op, for ``predict(host=...)``; None: no single eager call (raw kernels, collectives;
    # host copies take their fixed cost from the profile's own copies instead)
    eager_kind: ClassVar[str | None] = None

    @property
    def host_kind(self) -> str | None:
        """The eager op kind of this op's PyTorch call (``eager_kind``, unless the op's own
        fields pick another call: an fp8 GEMM is ``torch._scaled_mm``)."""
        return self.eager_kind

    def host_call_factor(self, gpu: GPUSpec) -> float:
        """Host time of this op's eager call / its kind's probe in the host profile: 1, unless
        the library launches more for it than the probe did (``Gemm``: cuBLAS's split-K)."""
        return 1.0

    def host_launches(self, gpu: GPUSpec) -> int | None:
        """Kernels the library launches for one eager call of this op on ``gpu``, where they
        differ from the kernels priced (``Attention``: a mask's conversion, cuDNN's split-KV
        reduction); None: one launch per kernel priced."""
        return None

    def on(self, gpu: GPUSpec) -> Op:
        """This op as ``gpu`` runs it: itself, unless which kernel runs depends on the GPU
        (``Attention``'s default, SDPA's dispatch), then with that kernel named."""
        return self

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        raise NotImplementedError

    @property
    def family(self) -> str:
        """Which calibrated kernel family runs this op (defaults to the op's name)."""
        return self.op_name

    def monotone_floor(self, gpu: GPUSpec) -> Op | tuple[Op, ...] | None:
        """A smaller op of a neighbouring kernel family that this op never runs faster than
        (its time bounds this op's from below), several (the largest bounds it), or None. Where
        growing a size switches kernel family (short rows -> long rows, decode -> prefill), the
        families are calibrated apart and the time could fall at the switch; ``predict`` takes
        the larger."""
        return None

    def label(self) -> str:
        fields = ", ".join(f"{k}={v}" for k, v in self.model_dump(exclude_none=True).items())
        return f"{self.op_name}({fields})"

    def to_row(self) -> dict:
        """This op as a batch-file row: ``{"op": name, **fields}``."""
        return {"op": self.op_name, **self.model_dump(mode="json")}


class MixedKernels(UnsupportedError):
    """Raised by an op built over numpy arrays of sizes (the LLM sweeps) when its points do not
    all run the same kernels (``uniform``): the sweep then splits them."""


def is_array(value: object) -> bool:
    """Whether a size is a numpy array of many points (ops built by the sweeps) rather than
    one number."""
    return getattr(value, "ndim", 0) > 0


def uniform(flag: object) -> bool:
    """A condition that picks an op's kernels, as a bool. Over an array of points (an op the
    sweeps built with ``build``) it must hold for all of them or for none (MixedKernels)."""
    if is_array(flag):
        first = bool(flag.flat[0])  # type: ignore[attr-defined]
        if (flag != first).any():  # type: ignore[attr-defined]
            raise MixedKernels("the points of this op run different kernels")
        return first
    return bool(flag)


def at_least(value, floor: float):
    """``max(floor, value)`` of a number or, elementwise, of an array of points."""
    return value.clip(min=floor) if is_array(value) else max(floor, value)


def at_most(value, ceiling: float):
    """``min(value, ceiling)`` of a number or, elementwise, of an array of points."""
    return value.clip(max=ceiling) if is_array(value) else min(value, ceiling)


def build(cls, **fields):
    """``cls(**fields)``, validated; over numpy arrays of sizes (the LLM sweeps, which check
    their arrays once at their boundary) the op holds the arrays unvalidated: its ``kernels``
    then give arrays of FLOPs and bytes, one element a point."""
    for v in fields.values():
        if getattr(v, "ndim", 0):  # is_array, inlined: every op the LLM model builds passes here
            return cls.model_construct(**fields)
    return cls(**fields)


def element_bytes(dtype: str) -> float:
    return BYTES_PER_ELEMENT[dtype]


def matmul_unit(gpu: GPUSpec, dtype: str) -> tuple[ExecUnit, str]:
    """Which unit runs a matrix product in ``dtype`` on ``gpu`` (tensor cores when present).

    fp32 GEMMs run on the vector units (TF32 is a separate dtype a user opts into);
    fp64 prefers the FP64 tensor cores of A100/H100 when they exist.
    """
    if dtype == "fp32":
        return _require(gpu, dtype, "vector")
    if gpu.peak_flops(dtype, "tensor"):
        return "tensor", dtype
    if gpu.peak_flops(dtype, "vector"):
        return "vector", dtype
    raise UnsupportedError(
        f"{gpu.id} has no {dtype} rate in its spec (has: {', '.join(_dtypes(gpu))})"
    )


def vector_unit(gpu: GPUSpec, dtype: str) -> tuple[ExecUnit, str]:
    """Elementwise math runs on the vector units; low-precision types without a vector rate
    compute in fp32 (what PyTorch kernels do: load bf16, math in fp32, store bf16)."""
    if dtype in ("tf32", "fp8", "int8", "fp4"):
        dtype = "fp32"
    if gpu.peak_flops(dtype, "vector"):
        return "vector", dtype
    return _require(gpu, "fp32", "vector")


def _require(gpu: GPUSpec, dtype: str, unit: str) -> tuple[ExecUnit, str]:
    if not gpu.peak_flops(dtype, unit):
        raise UnsupportedError(f"{gpu.id} has no {unit} {dtype} rate in its spec")
    return unit, dtype  # type: ignore[return-value]


def _dtypes(gpu: GPUSpec) -> list[str]:
    return [d for d in BYTES_PER_ELEMENT if gpu.units_for(d)]
