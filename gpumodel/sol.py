"""Speed of light: the time no kernel doing an op's work can beat on a GPU.

``predict`` says what a kernel *will* take (calibrated efficiencies, launch floors, the
sustained clock); ``speed_of_light`` says what it *cannot* beat, so measured / speed of light
is at most 100% for every real kernel. Each kernel's bound is the roofline's max over roofs
that are physical ceilings, not typical rates:

    t_sol = max(FLOPs / compute roof, bytes / L2 roof, DRAM bytes / DRAM bandwidth)

  where FLOPs / compute roof is the busiest unit's (tensor cores, FP32 lanes, special function
  units: separate pipes that can overlap).

* compute roof: the unit's dense peak at the **maximum** boost clock. NVIDIA states the H100's
  tensor peaks at a lower clock than its FP32 peak (989.4 TFLOP/s = 132 SMs x 4096 FLOP/clk x
  1.83 GHz, while the SMs boost to 1.98 GHz): the roof is the architecture's dense FLOP per
  clock per SM (``speccheck.TENSOR_FP16_FLOP_PER_CLK_PER_SM``, from the whitepapers) x SMs x
  the max clock, and never below the datasheet peak.
* L2 roof: data served from L2 still enters each SM through its L1/shared-memory array, 32
  banks x 4 bytes per clock (CUDA C++ Programming Guide, "Shared Memory": 128 B/clk per SM),
  so SMs x 128 B x max clock bounds every byte a kernel moves.
* DRAM bytes: at kernel start L2 can hold at most its capacity of the inputs, and at kernel
  end at most its capacity of dirty outputs, so at least ``bytes - 2 x L2`` cross the DRAM bus;
  data a kernel reads again (``KernelWork.reread_bytes``: a softmax row read three times) may
  come from L2 and is left out.
* host copies: bytes / the link's per-direction line rate (PCIe spec).

No launch floor, no efficiency, no overlap penalty: all are things a kernel could in principle
shave. The one assumption is that the op's byte count is the minimum its kernels must move
(``KernelWork.bytes``), and that L2 does not compress the data (Hopper's compute data
compression can shrink all-zero lines).
"""

from __future__ import annotations

from gpumodel.errors import UnsupportedError
from gpumodel.ops.base import KernelWork, Op, is_array
from gpumodel.prediction import KernelPrediction, Prediction, Term
from gpumodel.speccheck import TENSOR_FP16_FLOP_PER_CLK_PER_SM
from gpumodel.specs import GPUSpec, get_gpu
from gpumodel.units import format_quantity

# bytes one SM's L1/shared-memory array delivers per clock: 32 banks x 4 B (CUDA C++
# Programming Guide, Shared Memory); the same width is assumed for AMD's LDS (128 B/clk, CDNA3
# ISA guide) where no vendor figure is loaded
L1_BYTES_PER_CLOCK_PER_SM = 128

SOL_LABEL = "speed of light (max clock, L2 where the data fits, no floors)"


def max_clock_peak_flops(gpu: GPUSpec, dtype: str, unit: str) -> float | None:
    """The unit's dense peak at the maximum boost clock: the datasheet peak, scaled up when the
    datasheet states the tensor peaks at a lower clock than the SMs reach (Hopper)."""
    peak = gpu.peak_flops(dtype, unit)
    if not peak:
        return None
    return peak * tensor_clock_scale(gpu) if unit == "tensor" else peak


def tensor_clock_scale(gpu: GPUSpec) -> float:
    """max boost clock / the clock the datasheet's tensor peaks imply (>= 1)."""
    per_clk = TENSOR_FP16_FLOP_PER_CLK_PER_SM.get(gpu.architecture.lower())
    fp16 = gpu.peak_flops("fp16", "tensor") or gpu.peak_flops("bf16", "tensor")
    if not per_clk or not fp16:
        return 1.0
    return max(1.0, per_clk * gpu.sm_count * gpu.boost_clock_hz / fp16)


def l2_roof_bytes_per_s(gpu: GPUSpec) -> float:
    """SMs x 128 B per clock x max clock: no byte reaches the SMs faster, wherever it lives."""
    return gpu.sm_count * L1_BYTES_PER_CLOCK_PER_SM * gpu.boost_clock_hz


def host_link_roof_bytes_per_s(gpu: GPUSpec) -> float:
    """A host copy's roof: the host link's datasheet line rate per direction (its memory bandwidth
    where the spec names no host link)."""
    link = gpu.interconnect.pcie.per_direction_bytes_per_s if gpu.interconnect else None
    return link or gpu.memory_bandwidth_bytes_per_s


def _larger(a, b):
    """max(a, b) of numbers or, elementwise, of numpy arrays over a sweep's points."""
    if is_array(a) or is_array(b):
        import numpy as np  # loaded already: the arrays are numpy's

        return np.maximum(a, b)
    return max(a, b)


def roof_time_s(parts, nbytes, gpu: GPUSpec, *, reread_bytes=0.0, min_flops_fraction=1.0,
                l2_held_bytes=None, clock_ratio=1.0):  # fmt: skip
    """``kernel_sol``'s time alone from a kernel's work: ``parts`` ((unit, dtype, FLOPs), ...)
    and ``nbytes``; numbers or numpy arrays over a sweep's points (``predict`` and the sweeps
    hold every kernel's time to it, in the state they price: ``l2_held_bytes``, what L2 may
    hold of the kernel's bytes, 2 x L2 where nothing is known; ``clock_ratio``, the SM clock
    the compute roofs run at, over the maximum)."""
    per_unit: dict[str, object] = {}
    for unit, dtype, flops in parts:
        roof = max_clock_peak_flops(gpu, dtype, unit)
        if not roof:
            raise UnsupportedError(f"{gpu.id} has no {unit} {dtype} rate in its spec")
        per_unit[unit] = per_unit.get(unit, 0.0) + flops * min_flops_fraction / (roof * clock_ratio)
    t = 0.0
    for t_unit in per_unit.values():
        t = _larger(t, t_unit)
    held = 2 * gpu.l2_cache_bytes if l2_held_bytes is None else l2_held_bytes
    dram_bytes = _larger(0.0, nbytes - reread_bytes - held)
    t = _larger(t, dram_bytes / gpu.memory_bandwidth_bytes_per_s)
    return _larger(t, nbytes / l2_roof_bytes_per_s(gpu))


def kernel_sol(kw: KernelWork, gpu: GPUSpec) -> KernelPrediction:
    """The speed-of-light time of one kernel (see the module docstring)."""
    if kw.transfer:
        bw = host_link_roof_bytes_per_s(gpu)
        t = kw.bytes / bw
        term = Term(name="host link roof", value=t,
                    note=f"{format_quantity(kw.bytes, 'B')} / {format_quantity(bw, 'B/s')} line rate "
                         "per direction")  # fmt: skip
        return KernelPrediction(name=kw.name, time_s=t, bound="memory", flops=0.0,
                                bytes=kw.bytes, terms=(term,))  # fmt: skip
    terms: list[Term] = []
    per_unit: dict[str, float] = {}
    for part in kw.flops:
        if part.flops <= 0:
            continue
        roof = max_clock_peak_flops(gpu, part.dtype, part.unit)
        if not roof:
            raise UnsupportedError(f"{gpu.id} has no {part.unit} {part.dtype} rate in its spec")
        # a stream without FMA still cannot beat the FMA roof: the bound keeps it; a kernel
        # whose result an algorithm of less arithmetic gives (fast convolutions) is bounded by
        # that algorithm's FLOPs
        t = part.flops * kw.min_flops_fraction / roof
        per_unit[part.unit] = per_unit.get(part.unit, 0.0) + t
        fewer = (f"; {kw.min_flops_fraction:.3g} of the stated FLOPs (the fewest a fast "
                 "algorithm needs)" if kw.min_flops_fraction < 1 else "")  # fmt: skip
        terms.append(Term(name=f"compute roof ({part.unit} {part.dtype})", value=t,
                          note=f"{format_quantity(roof, 'FLOP/s')} at the max clock "
                               f"{gpu.boost_clock_hz / 1e6:.0f} MHz{fewer}"))  # fmt: skip
    # the tensor cores, the FP32 lanes and the SFUs are separate pipes that can all be busy at
    # once (FlashAttention-3 runs the softmax under the next block's products): no kernel beats
    # its busiest unit, but it may beat their sum
    t_compute = max(per_unit.values(), default=0.0)
    l2_roof = l2_roof_bytes_per_s(gpu)
    t_l2 = kw.bytes / l2_roof
    dram_bytes = max(0.0, kw.bytes - kw.reread_bytes - 2 * gpu.l2_cache_bytes)
    t_dram = dram_bytes / gpu.memory_bandwidth_bytes_per_s
    if t_dram >= t_l2:
        t_memory = t_dram
        reread = " - re-reads" if kw.reread_bytes else ""
        note = (f"at least {format_quantity(dram_bytes, 'B')} (bytes{reread} - 2 x L2) cross "
                f"DRAM at {format_quantity(gpu.memory_bandwidth_bytes_per_s, 'B/s')}")  # fmt: skip
    else:
        t_memory = t_l2
        note = (f"could all come from L2: {gpu.sm_count} SMs x {L1_BYTES_PER_CLOCK_PER_SM} B/clk x "
                f"{gpu.boost_clock_hz / 1e6:.0f} MHz = {format_quantity(l2_roof, 'B/s')}")  # fmt: skip
    terms.append(Term(name="memory roof", value=t_memory, note=note))
    time_s = max(t_compute, t_memory)
    return KernelPrediction(
        name=kw.name, time_s=time_s, bound="compute" if t_compute >= t_memory else "memory",
        flops=kw.useful_flops, bytes=kw.bytes, launches=kw.launches, terms=tuple(terms),
    )  # fmt: skip


def speed_of_light(op: Op, gpu: GPUSpec | str) -> Prediction:
    """The time no kernel doing ``op``'s work can beat on ``gpu`` (a Prediction whose terms
    name the roofs). Ops priced only by their own model (collectives) have no kernels and raise
    UnsupportedError."""
    from gpumodel.predict import assemble

    if not isinstance(op, Op):
        from gpumodel._validators import _show
        from gpumodel.errors import SpecError

        raise SpecError(f"op must be a gpumodel op (gm.ops.Gemm(...), ...), got {_show(op)}")
    gpu = get_gpu(gpu)
    op = op.on(gpu)
    work = op.kernels(gpu)
    if not work:
        raise UnsupportedError(f"{op.label()} has no kernels to bound")
    return assemble(op.label(), gpu, SOL_LABEL, [kernel_sol(k, gpu) for k in work], work)


__all__ = ["SOL_LABEL", "kernel_sol", "l2_roof_bytes_per_s", "max_clock_peak_flops",
           "roof_time_s", "speed_of_light", "tensor_clock_scale"]  # fmt: skip
