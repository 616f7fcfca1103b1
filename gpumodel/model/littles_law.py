"""Little's law for GPUs: how much work must be in flight to hide a latency.

``concurrency = throughput x latency`` (Little 1961; the seed deck 000: an escalator, and the FP32
example 8 ops/cycle x 24 cycles = 192 ops in flight). Volkov ("Understanding Latency Hiding on
GPUs", PhD thesis, UC Berkeley 2016) applies it to memory and arithmetic: to keep DRAM busy a GPU
needs ``bandwidth x latency`` bytes in flight, and a kernel whose resident warps cannot hold that
many is latency-bound: it moves ``bytes in flight / latency`` per second, less than the peak.

Latencies come, in this order, from the caller, a calibration (``dram_latency_cycles`` measured
on the device), the spec's ``latency`` block, or the published microbenchmark defaults below;
the result says which (``latency_source``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from gpumodel.errors import SpecError, UnsupportedError

if TYPE_CHECKING:
    from gpumodel.specs import GPUSpec

__all__ = [
    "DEFAULT_DRAM_LATENCY_CYCLES",
    "DEFAULT_FMA_LATENCY_CYCLES",
    "LATENCY_SOURCES",
    "Concurrency",
    "Waves",
    "concurrency",
    "dram_latency",
    "dram_latency_s",
    "latency_limited_bandwidth",
    "littles_law",
    "waves",
]

# Pointer-chase DRAM latencies in SM cycles, published microbenchmarks (formulas.md §4).
# Midpoints of the published ranges; measure on the target (calibration) instead of trusting them.
DEFAULT_DRAM_LATENCY_CYCLES: dict[str, tuple[float, str]] = {
    # V100 ~460 cycles
    "volta": (460.0, "V100 ~460 cycles (formulas.md §4)"),
    # A100 290-470 cycles in two papers (Abdelkhalik et al. 2022; Luo et al. 2024)
    "ampere": (380.0, "A100 290-470 cycles, midpoint (Abdelkhalik 2022; Luo 2024)"),
    # H100 / GH200 ~650-700 cycles (third-party pointer-chase microbenchmarks)
    "hopper": (675.0, "H100/GH200 650-700 cycles, midpoint (formulas.md §4)"),
}
# Used for an architecture with no published number here: the newest one we have.
_FALLBACK_ARCH = "hopper"

# Pointer-chase L2 hit latencies in SM cycles (formulas.md §4: Hopper-class 270-290).
DEFAULT_L2_LATENCY_CYCLES: dict[str, tuple[float, str]] = {
    "hopper": (280.0, "H100/GH200 270-290 cycles, midpoint (formulas.md §4)"),
}

# Dependent FFMA latency, cycles. Hopper-class ~4.5 (formulas.md §4, GH200/H100 microbenchmarks);
# Volta 4 (Jia et al. 2018, "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking").
DEFAULT_FMA_LATENCY_CYCLES: dict[str, tuple[float, str]] = {
    "volta": (4.0, "Volta FFMA 4 cycles (Jia et al. 2018)"),
    "turing": (4.0, "Volta-class FFMA 4 cycles (Jia et al. 2018)"),
    "ampere": (4.0, "Volta-class FFMA 4 cycles (Jia et al. 2018)"),
    "ada": (4.0, "Volta-class FFMA 4 cycles (Jia et al. 2018)"),
    "hopper": (4.5, "Hopper-class dependent FFMA ~4.5 cycles (formulas.md §4)"),
    "blackwell": (4.5, "Hopper-class dependent FFMA ~4.5 cycles (formulas.md §4)"),
}

DEFAULT_SOURCE = "default (published microbenchmarks)"
#: Where a latency came from, most trusted first.
LATENCY_SOURCES = ("argument", "calibration", "spec", DEFAULT_SOURCE)


def littles_law(throughput: Any, latency: Any) -> Any:
    """Concurrency needed to sustain ``throughput`` over ``latency`` (same time unit).

    ``littles_law(8, 24) == 192``: 8 FP32 ops/cycle x 24 cycles = 192 ops in flight (seed 000).
    numpy arrays broadcast.
    """
    from gpumodel._validators import check_array, check_number

    def checked(value: Any, name: str) -> Any:
        if np.ndim(value) == 0 and not isinstance(value, np.ndarray):
            return check_number(value, name, ge=0, le=1e30)
        return check_array(value, name, whole=False, ge=0, le=1e30)

    # Little's law: L = lambda x W
    out = np.multiply(checked(throughput, "throughput"), checked(latency, "latency"))
    return out if np.ndim(out) else out.item()


def _warp_size(gpu: GPUSpec) -> int:
    return gpu.sm_limits.warp_size if gpu.sm_limits is not None else 32


def _calibrated(calibration: Any, name: str) -> float | None:
    """``name`` from a Calibration, its ``parameters``, or a mapping; None when absent."""
    if calibration is None:
        return None
    if isinstance(calibration, str):  # an id or a file, as predict(calibration=...) takes
        from gpumodel.calibration import load_calibration

        calibration = load_calibration(calibration)
    elif not (
        isinstance(calibration, dict)
        or hasattr(type(calibration), "model_fields")
        or hasattr(calibration, "parameters")
    ):
        raise SpecError(f"calibration must be a Calibration, its parameters, a dict or an id; "
                        f"got {type(calibration).__name__}")  # fmt: skip
    params = getattr(calibration, "parameters", calibration)
    value = params.get(name) if isinstance(params, dict) else getattr(params, name, None)
    return float(value) if value is not None else None


def _dram_latency(
    gpu: GPUSpec, cycles: float | None, seconds: float | None, calibration: Any
) -> tuple[float, str, str | None]:
    """(cycles, source, reference): source is one of LATENCY_SOURCES."""
    if cycles is not None and seconds is not None:
        raise SpecError("give the DRAM latency in cycles or in seconds, not both")
    from gpumodel._validators import check_number

    if cycles is not None:
        if not check_number(cycles, "DRAM latency (cycles)") > 0:
            raise SpecError(f"DRAM latency must be > 0 cycles, got {cycles}")
        return check_number(cycles, "DRAM latency (cycles)", le=1e9), "argument", None
    if seconds is not None:
        if not check_number(seconds, "DRAM latency (s)") > 0:
            raise SpecError(f"DRAM latency must be > 0 s, got {seconds}")
        return (
            check_number(seconds, "DRAM latency (s)", le=1.0) * gpu.boost_clock_hz,
            "argument",
            None,
        )
    measured = _calibrated(calibration, "dram_latency_cycles")
    if measured is not None:
        return measured, "calibration", getattr(calibration, "label", None)
    return _spec_or_default(gpu, gpu.latency.dram_cycles, DEFAULT_DRAM_LATENCY_CYCLES)


def _spec_or_default(
    gpu: GPUSpec, spec_cycles: float | None, defaults: dict[str, tuple[float, str]]
) -> tuple[float, str, str | None]:
    """The spec's latency, else the architecture's published default, else the fallback
    architecture's (saying so)."""
    if spec_cycles is not None:
        return float(spec_cycles), "spec", gpu.origin
    arch = gpu.architecture.lower()
    if arch in defaults:
        value, why = defaults[arch]
        return value, DEFAULT_SOURCE, why
    value, why = defaults[_FALLBACK_ARCH]
    return value, DEFAULT_SOURCE, f"none published here for {arch}; using {why}"


def dram_latency(gpu: GPUSpec, calibration: Any = None) -> tuple[float, str, str | None]:
    """Idle DRAM load latency in cycles and where it came from (calibration, spec, default)."""
    return _dram_latency(gpu, None, None, calibration)


def _fma_latency(gpu: GPUSpec) -> tuple[float, str, str | None]:
    return _spec_or_default(gpu, gpu.latency.fma_cycles, DEFAULT_FMA_LATENCY_CYCLES)


class Concurrency(BaseModel):
    """Work in flight needed to saturate DRAM and the FP32 pipes of one GPU (Little's law)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    gpu_id: str
    clock_hz: float
    # memory side
    bandwidth_bytes_per_s: float
    latency_dram_cycles: float
    latency_dram_s: float
    latency_source: str  # one of LATENCY_SOURCES
    latency_reference: str | None  # which paper, file or calibration
    bytes_in_flight_needed: float
    bytes_in_flight_per_sm: float
    bytes_per_thread_in_flight: float
    ilp: int
    bytes_in_flight_per_warp: float
    warps_needed_per_sm: float
    max_warps_per_sm: int | None
    exceeds_max_warps: bool | None
    # arithmetic side
    fp32_lanes_per_sm: float | None
    fma_latency_cycles: float
    fma_latency_source: str
    fma_latency_reference: str | None
    arithmetic_ops_in_flight_per_sm: float | None
    arithmetic_warps_needed_per_sm: float | None
    # optional: what a given residency achieves
    resident_warps_per_sm: float | None = None
    latency_limited_bandwidth_bytes_per_s: float | None = None
    latency_bound: bool | None = None


def concurrency(
    gpu: GPUSpec,
    latency_dram_cycles: float | None = None,
    latency_dram_s: float | None = None,
    bytes_per_thread_in_flight: float = 16,
    ilp: int = 1,
    *,
    calibration: Any = None,
    resident_warps_per_sm: float | None = None,
) -> Concurrency:
    """Bytes and warps in flight needed to saturate DRAM, and FP32 ops to saturate the FMA pipes.

    ``bytes_per_thread_in_flight``: bytes one load instruction fetches per thread (16 for a
    float4 / 128-bit load); ``ilp``: independent loads (or FMAs) in flight per thread.
    ``calibration``: a Calibration (or its parameters, or a dict) with ``dram_latency_cycles``.
    ``resident_warps_per_sm`` (e.g. ``occupancy(...).active_warps_per_sm``) adds the
    bandwidth that residency can sustain and whether the kernel is latency-bound.
    """
    from gpumodel._validators import check_int, check_number
    from gpumodel.specs import get_gpu

    gpu = get_gpu(gpu)
    if gpu.vendor == "cpu":
        raise UnsupportedError(f"Little's law in warps needs a GPU; {gpu.id} is a CPU spec")
    check_number(bytes_per_thread_in_flight, "bytes per thread in flight", ge=1, le=2**20)
    check_int(ilp, "ilp (independent operations per thread)", ge=1, le=2**20)
    if resident_warps_per_sm is not None:
        check_number(resident_warps_per_sm, "resident warps per SM", gt=0, le=2**20)
    cycles, source, reference = _dram_latency(gpu, latency_dram_cycles, latency_dram_s, calibration)
    clock = gpu.boost_clock_hz
    latency_s = cycles / clock
    bandwidth = gpu.memory_bandwidth_bytes_per_s
    warp = _warp_size(gpu)

    # Little's law on DRAM: bytes in flight = bandwidth x latency (Volkov 2016, ch. 4)
    in_flight = littles_law(bandwidth, latency_s)
    per_sm = in_flight / gpu.sm_count
    # one warp keeps warp_size x bytes/thread x ilp bytes in flight
    per_warp = warp * bytes_per_thread_in_flight * ilp
    warps_needed = per_sm / per_warp
    max_warps = gpu.sm_limits.max_warps_per_sm if gpu.sm_limits is not None else None

    # FP32 lanes per SM = vector FP32 peak / (2 FLOP per FMA x clock x SMs)
    fp32 = gpu.peak_flops("fp32", "vector")
    lanes = fp32 / (2 * clock * gpu.sm_count) if fp32 else None
    fma_cycles, fma_source, fma_reference = _fma_latency(gpu)
    # Little's law on the FMA pipes: ops in flight = lanes x dependent-FMA latency
    ops = littles_law(lanes, fma_cycles) if lanes else None

    limited = bound = None
    if resident_warps_per_sm is not None:
        per_thread = bytes_per_thread_in_flight * ilp
        limited = float(
            latency_limited_bandwidth(gpu, resident_warps_per_sm, per_thread, latency_s)
        )
        bound = bool(resident_warps_per_sm < warps_needed)
    return Concurrency(
        gpu_id=gpu.id,
        clock_hz=clock,
        bandwidth_bytes_per_s=bandwidth,
        latency_dram_cycles=cycles,
        latency_dram_s=latency_s,
        latency_source=source,
        latency_reference=reference,
        bytes_in_flight_needed=in_flight,
        bytes_in_flight_per_sm=per_sm,
        bytes_per_thread_in_flight=float(bytes_per_thread_in_flight),
        ilp=ilp,
        bytes_in_flight_per_warp=per_warp,
        warps_needed_per_sm=warps_needed,
        max_warps_per_sm=max_warps,
        exceeds_max_warps=None if max_warps is None else bool(warps_needed > max_warps),
        fp32_lanes_per_sm=lanes,
        fma_latency_cycles=fma_cycles,
        fma_latency_source=fma_source,
        fma_latency_reference=fma_reference,
        arithmetic_ops_in_flight_per_sm=ops,
        arithmetic_warps_needed_per_sm=ops / warp / ilp if ops else None,
        resident_warps_per_sm=resident_warps_per_sm,
        latency_limited_bandwidth_bytes_per_s=limited,
        latency_bound=bound,
    )


def latency_limited_bandwidth(
    gpu: GPUSpec, resident_warps_per_sm: Any, bytes_per_thread_in_flight: Any, latency_s: Any
) -> Any:
    """DRAM bandwidth a residency can sustain: min(peak, SMs x warps x warp size x B/thread / L).

    Little's law solved for throughput (Volkov 2016): with too few warps resident, a kernel moves
    less than the peak and is latency-bound. ``bytes_per_thread_in_flight`` counts all the
    independent loads of a thread (bytes per load x ILP). numpy arrays broadcast.
    """
    warps = np.asarray(resident_warps_per_sm, dtype=float)
    per_thread = np.asarray(bytes_per_thread_in_flight, dtype=float)
    latency = np.asarray(latency_s, dtype=float)
    if np.any(warps < 0) or np.any(per_thread < 0) or np.any(latency <= 0):
        raise SpecError("resident warps and bytes in flight must be >= 0 and latency > 0")
    in_flight = gpu.sm_count * warps * _warp_size(gpu) * per_thread
    out = np.minimum(gpu.memory_bandwidth_bytes_per_s, sustained_bandwidth(in_flight, latency))
    return out if out.ndim else float(out)


def sustained_bandwidth(bytes_in_flight: Any, latency_s: Any) -> Any:
    """Little's law solved for throughput: bytes in flight / latency (no cap at the peak)."""
    return bytes_in_flight / latency_s


def dram_latency_s(gpu: GPUSpec, params: Any = None) -> tuple[float, str]:
    """DRAM latency in seconds for bandwidth limits, and where it came from: the calibrated
    latency under load when there is one, else the idle latency (cycles at the boost clock)."""
    loaded = getattr(params, "loaded_dram_latency_s", None)
    if loaded:
        return loaded, "calibrated loaded DRAM latency"
    cycles, source, _ = dram_latency(gpu, params)
    return cycles / gpu.boost_clock_hz, f"{source} DRAM latency {cycles:.0f} cycles"


def l2_latency_s(gpu: GPUSpec, params: Any = None) -> tuple[float, str]:
    """L2 hit latency in seconds (pointer chase over a set that fits in L2) and its source:
    calibrated, else the spec's, else the architecture's published default."""
    cycles = _calibrated(params, "l2_latency_cycles")
    source = "calibrated"
    if cycles is None:
        cycles, source, _ = _spec_or_default(gpu, gpu.latency.l2_cycles, DEFAULT_L2_LATENCY_CYCLES)
    return cycles / gpu.boost_clock_hz, f"{source} L2 latency {cycles:.0f} cycles"


class Waves(BaseModel):
    """How a grid of blocks fills the GPU in waves of ``SMs x blocks_per_sm`` blocks."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    blocks: int
    blocks_per_sm: int
    sm_count: int
    blocks_per_wave: int
    waves: float
    full_waves: int
    waves_launched: int
    tail_blocks: int
    tail_fraction: float
    wave_efficiency: float
    underfilled: bool


def waves(gpu: GPUSpec | int, blocks: int, blocks_per_sm: int) -> Waves:
    """Waves of a grid: ``blocks / (SMs x blocks_per_sm)``, its tail and its efficiency.

    Wave efficiency ``blocks / (ceil(waves) x SMs x blocks_per_sm)`` (derived from NVIDIA's
    "Matrix Multiplication Background" wave-quantization example, formulas.md §2); the tail is
    the share of the last wave's slots that has work (0 when the grid fills whole waves).
    ``underfilled``: fewer blocks than one wave holds. ``gpu`` may be a spec or an SM count.
    """
    from gpumodel._validators import MAX_ELEMENTS, _show, check_int
    from gpumodel.specs import get_gpu

    if isinstance(gpu, (int, np.integer)) and not isinstance(gpu, bool):
        sms = check_int(int(gpu), "SMs", ge=1, le=2**31 - 1)
    else:
        sms = get_gpu(gpu).sm_count
    for name, value in (("blocks", blocks), ("blocks per SM", blocks_per_sm)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise SpecError(f"{name} must be an integer >= 1, got {_show(value)}")
        check_int(int(value), name, ge=1, le=MAX_ELEMENTS)
    per_wave = sms * blocks_per_sm
    exact = blocks / per_wave
    launched = math.ceil(blocks / per_wave)
    tail = blocks % per_wave
    return Waves(
        blocks=int(blocks),
        blocks_per_sm=int(blocks_per_sm),
        sm_count=int(sms),
        blocks_per_wave=int(per_wave),
        waves=exact,
        full_waves=int(blocks // per_wave),
        waves_launched=launched,
        tail_blocks=int(tail),
        tail_fraction=tail / per_wave,
        wave_efficiency=blocks / (launched * per_wave),
        underfilled=blocks < per_wave,
    )
