"""Theoretical occupancy: what ``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` returns.

A re-statement of NVIDIA's ``cuda_occupancy.h`` (CUDA 12.x/13.0 headers), driven by the spec's
``sm_limits`` instead of the header's per-compute-capability switch statements. The comment
above each formula names the header function it follows. One implementation works on numpy
arrays (``occupancy_table``); ``occupancy`` is its scalar, explained form.

Inputs follow the CUDA API:

- ``shared_mem_per_block`` is the kernel's static plus dynamic shared memory, in bytes, without
  the per-block reservation (1 KiB on CC >= 8.0), which is added here as the driver does. A block
  above the default 48 KiB needs ``cudaFuncSetAttribute(..., MaxDynamicSharedMemorySize, ...)``;
  the model assumes the kernel opted in (``Occupancy.needs_opt_in`` says when it had to). A block
  above the opt-in limit gives 0 blocks per SM, as the header does.
- ``carveout`` is ``cudaFuncAttributePreferredSharedMemoryCarveout``: a percent 0..100 of the
  SM's maximum shared memory, or None (= -1, ``cudaSharedmemCarveoutDefault``, no preference),
  which the header maps to the maximum shared-memory configuration. Bytes are not accepted.

Not modelled, because they never bind at the defaults the runtime uses: the partitioned global
caching mode of CC 5.2/6.x, the barrier limit of CC >= 9.0 (``2 x max blocks / barriers``, one
barrier per block) and the virtual-resource limit of CC >= 10.0 (0 unless a kernel uses them).

AMD CDNA3 (MI300X, MI325X; gfx942) follows the rules LLVM's AMDGPU backend applies
(``llvm/lib/Target/AMDGPU/Utils/AMDGPUBaseInfo.cpp``, ``IsaInfo``), mapped onto the same
formulas with a CU in the place of an SM and a SIMD in the place of a sub-partition:

- wave64 (``getWavefrontSize``); 4 SIMDs per CU (``getEUsPerCU``: "Pre-gfx10 a CU contains four
  SIMDs"); at most 8 waves per SIMD on gfx90a/gfx942 (``getMaxWavesPerEU``), so 32 per CU;
- VGPRs: 512 per lane per SIMD, arch and acc unified (``getTotalNumVGPRs`` = 512 with
  GFX90AInsts), allocated in granules of 8 (``getVGPRAllocGranule``); waves per SIMD =
  min(512 / roundup(vgprs, 8), 8) (``getNumWavesPerEUWithNumVGPRs``). As registers that is
  131072 per CU and an allocation unit of 8 x 64 = 512, which the spec's ``sm_limits`` carry;
- LDS 64 KiB per CU and per workgroup (ROCm GPU specifications table), allocated in blocks of
  128 dwords = 512 B (LLVM AMDGPUUsage, ``GRANULATED_LDS_SIZE``: GFX7-GFX10 roundup(lds / (128 *
  4))), no carveout;
- workgroups per CU: 32 waves / waves per workgroup, and at most 16 when a workgroup has more
  than one wave (``getMaxWorkGroupsPerCU``: 16 barriers per CU; single-wave workgroups use none).

SGPRs (800 per SIMD, at most 102 addressable per wave: >= 8 waves at any count a compiler emits)
and scratch are not modelled; an AMD architecture without an entry in ``_AMD_BARRIER_LIMIT`` has
no occupancy rules (``UnsupportedError``; callers fall back to the datasheet roofline).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from gpumodel._validators import _show
from gpumodel.errors import SpecError, UnsupportedError

if TYPE_CHECKING:
    from gpumodel.specs import GPUSpec

__all__ = ["LIMITERS", "Occupancy", "has_rules", "occupancy", "occupancy_table"]

#: The resources that can bind, in the header's order of ``cudaOccLimitingFactor`` bits.
LIMITERS = ("warps", "registers", "shared_memory", "blocks")

# cuda_occupancy.h returns INT_MAX for a limit that does not apply (no registers, no shared memory)
_UNLIMITED = 2**31 - 1


@dataclass(frozen=True)
class _Rules:
    """The integers the header reads from cudaOccDeviceProp, taken from ``gpu.sm_limits``."""

    gpu_id: str
    warp_size: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    max_threads_per_block: int
    registers_per_sm: int
    registers_per_block: int
    max_registers_per_thread: int
    register_allocation_unit: int
    sub_partitions: int
    shared_memory_per_sm_bytes: int
    carveouts_bytes: tuple[int, ...]  # sorted, last == shared_memory_per_sm_bytes
    shared_memory_per_block_default_bytes: int
    shared_memory_per_block_optin_bytes: int
    shared_memory_unit_bytes: int
    reserved_shared_memory_bytes: int
    # AMD: workgroups per CU when a workgroup has more than one wave (barrier limit); None: NVIDIA
    max_blocks_multi_warp: int | None = None

    @property
    def max_warps_per_sm(self) -> int:
        # cudaOccMaxBlocksPerSMWarpsLimit: maxThreadsPerMultiprocessor / warpSize
        return self.max_threads_per_sm // self.warp_size


# AMD architectures with occupancy rules: workgroups per CU when a workgroup has several waves.
# LLVM AMDGPUBaseInfo.cpp getMaxWorkGroupsPerCU: MaxBarriers = 16 (pre-gfx10 and CU mode)
_AMD_BARRIER_LIMIT = {"cdna3": 16}


def has_rules(gpu: GPUSpec) -> bool:
    """Whether ``occupancy()`` can answer for ``gpu`` (else callers use the datasheet alone)."""
    if gpu.vendor == "cpu" or gpu.sm_limits is None:
        return False
    return gpu.vendor != "amd" or gpu.architecture.lower() in _AMD_BARRIER_LIMIT


def _rules(gpu: GPUSpec) -> _Rules:
    barrier_limit = None
    if gpu.vendor == "amd":
        barrier_limit = _AMD_BARRIER_LIMIT.get(gpu.architecture.lower())
        if barrier_limit is None:
            raise UnsupportedError(
                f"occupancy rules for AMD {gpu.architecture} are not modelled (modelled: "
                f"{', '.join(_AMD_BARRIER_LIMIT)}); {gpu.id} has no occupancy model"
            )
    if gpu.vendor == "cpu" or gpu.sm_limits is None:
        what = "is a CPU spec" if gpu.vendor == "cpu" else "has no sm_limits in its spec"
        raise UnsupportedError(f"occupancy needs per-SM limits; {gpu.id} {what}")
    s = gpu.sm_limits
    smem_per_sm = int(s.shared_memory_per_sm_bytes)
    carveouts = tuple(sorted(int(kib) * 1024 for kib in s.shared_memory_carveouts_kib))
    if not carveouts:
        # no selectable split (CC < 7.0 style): the SM always has all of it
        carveouts = (smem_per_sm,)
    if carveouts[-1] != smem_per_sm:
        raise SpecError(
            f"{gpu.id}: sm_limits.carveouts_kib must end at shared_memory "
            f"({smem_per_sm // 1024} KiB), got {carveouts[-1] // 1024} KiB"
        )
    return _Rules(
        gpu_id=gpu.id,
        warp_size=s.warp_size,
        max_threads_per_sm=s.max_threads_per_sm,
        max_blocks_per_sm=s.max_blocks_per_sm,
        max_threads_per_block=s.max_threads_per_block,
        registers_per_sm=s.registers_per_sm,
        registers_per_block=s.registers_per_block,
        max_registers_per_thread=s.max_registers_per_thread,
        register_allocation_unit=s.register_allocation_unit,
        sub_partitions=s.warp_allocation_granularity,
        shared_memory_per_sm_bytes=smem_per_sm,
        carveouts_bytes=carveouts,
        shared_memory_per_block_default_bytes=int(s.shared_memory_per_block_default_bytes),
        shared_memory_per_block_optin_bytes=int(s.shared_memory_per_block_optin_bytes),
        shared_memory_unit_bytes=int(s.shared_memory_allocation_unit_bytes),
        reserved_shared_memory_bytes=int(s.reserved_shared_memory_per_block_bytes),
        max_blocks_multi_warp=barrier_limit,
    )


def _round_up(x: np.ndarray, unit: int) -> np.ndarray:
    # __occRoundUp(x, y) = y * __occDivideRoundUp(x, y) = y * ((x + y - 1) / y)
    return unit * ((x + unit - 1) // unit)


def _align_to_carveout(size: np.ndarray, rules: _Rules) -> np.ndarray:
    """Smallest selectable shared-memory configuration >= ``size`` bytes.

    cudaOccAlignUpShmemSizeVoltaPlus: 0 -> 0 where 0 KB is a configuration (Volta, Ampere,
    Hopper, Blackwell), else the next of e.g. 8, 16, 32, 64, 100, 132, 164, 196, 228 KB.
    Callers never pass more than the largest configuration.
    """
    table = np.asarray(rules.carveouts_bytes, dtype=np.int64)
    index = np.searchsorted(table, size, side="left")
    return table[np.minimum(index, len(table) - 1)]


def _check_inputs(rules: _Rules, threads: np.ndarray, regs: np.ndarray, smem: np.ndarray) -> None:
    bad = (threads < 1) | (threads > rules.max_threads_per_block)
    if bad.any():
        raise SpecError(
            f"threads per block must be 1..{rules.max_threads_per_block} on {rules.gpu_id}, "
            f"got {int(threads[bad].flat[0])}"
        )
    bad = (regs < 0) | (regs > rules.max_registers_per_thread)
    if bad.any():
        raise SpecError(
            f"registers per thread must be 0..{rules.max_registers_per_thread}, "
            f"got {int(regs[bad].flat[0])}"
        )
    if (smem < 0).any():
        raise SpecError(f"shared memory per block must be >= 0 bytes, got {int(smem.min())}")


def _as_int_array(value: Any, what: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise SpecError(f"{what} must be whole numbers, got {value!r}")
    elif arr.dtype.kind not in "iub":
        raise SpecError(f"{what} must be integers, got {_show(value)}")
    return arr.astype(np.int64)


def _carveout_preference_bytes(rules: _Rules, carveout: int | None) -> int:
    """The SM shared-memory size the carveout preference asks for, already aligned up."""
    if carveout is not None and (isinstance(carveout, bool) or not isinstance(carveout, int)):
        raise SpecError(f"carveout must be a percent 0..100 (an integer) or None, got {carveout!r}")
    if carveout is None or carveout == -1:
        # cudaOccSMemPreferenceVoltaPlus: SHAREDMEM_CARVEOUT_DEFAULT (-1) with CACHE_PREFER_NONE
        # -> preferenceShmemSize = sharedMemPerMultiprocessor (the maximum configuration)
        preference = rules.shared_memory_per_sm_bytes
    elif 0 <= carveout <= 100:
        # cudaOccSMemPreferenceVoltaPlus: (size_t)(pref * sharedMemPerMultiprocessor) / 100
        preference = carveout * rules.shared_memory_per_sm_bytes // 100
    else:
        raise SpecError(f"carveout must be a percent 0..100 or None, got {_show(carveout)}")
    return int(_align_to_carveout(np.asarray(preference, dtype=np.int64), rules))


def _compute(
    rules: _Rules, threads: Any, regs: Any, smem: Any, carveout: int | None
) -> dict[str, np.ndarray]:
    """cudaOccMaxActiveBlocksPerMultiprocessor on broadcast numpy arrays."""
    t = _as_int_array(threads, "threads per block")
    r = _as_int_array(regs, "registers per thread")
    s = _as_int_array(smem, "shared memory per block")
    try:
        t, r, s = np.broadcast_arrays(t, r, s)
    except ValueError:
        raise SpecError(
            f"block sizes {t.shape}, registers {r.shape} and shared memory {s.shape} do not "
            "broadcast to one shape"
        ) from None
    _check_inputs(rules, t, r, s)
    preference = _carveout_preference_bytes(rules, carveout)

    # cudaOccMaxBlocksPerSMWarpsLimit:
    # warpsAllocatedPerCTA = __occDivideRoundUp(blockSize, warpSize)
    warps = (t + rules.warp_size - 1) // rules.warp_size
    # cudaOccMaxBlocksPerSMWarpsLimit: maxBlocks = maxWarpsPerSm / warpsAllocatedPerCTA
    limit_warps = rules.max_warps_per_sm // warps

    # cudaOccMaxBlocksPerSMRegsLimit: regsAllocatedPerWarp = __occRoundUp(numRegs * warpSize, 256)
    regs_per_warp = _round_up(r * rules.warp_size, rules.register_allocation_unit)
    # cudaOccMaxBlocksPerSMRegsLimit: regsAllocatedPerCTA = regsAllocatedPerWarp * warps
    regs_per_block = regs_per_warp * warps
    # cudaOccMaxBlocksPerSMRegsLimit, the hardware check: warps rounded up to sub-partitions
    regs_assumed = regs_per_warp * _round_up(warps, rules.sub_partitions)
    regs_fit = (regs_assumed <= rules.registers_per_block) & (
        regs_per_block <= rules.registers_per_block
    )
    # cudaOccMaxBlocksPerSMRegsLimit: numWarpsPerSubPartition = (regsPerSM / 4) / regsPerWarp;
    # maxBlocks = numWarpsPerSubPartition * numSubPartitions / warpsAllocatedPerCTA
    warps_per_sub = (rules.registers_per_sm // rules.sub_partitions) // np.maximum(regs_per_warp, 1)
    limit_regs = np.where(
        regs_per_warp > 0, warps_per_sub * rules.sub_partitions // warps, _UNLIMITED
    )
    limit_regs = np.where(regs_fit, limit_regs, 0)

    # cudaOccMaxBlocksPerSMSmemLimit: totalSmemUsagePerCTA = static + reserved + dynamic,
    # smemAllocatedPerCTA = __occRoundUp(total, cudaOccSMemAllocationGranularity)
    smem_alloc = _round_up(s + rules.reserved_shared_memory_bytes, rules.shared_memory_unit_bytes)
    # cudaOccSMemPerBlock (FUNC_SHMEM_LIMIT_OPTIN): sharedMemPerBlockOptin + reserved (CC >= 8)
    per_block_limit = rules.shared_memory_per_block_optin_bytes + rules.reserved_shared_memory_bytes
    smem_fits = smem_alloc <= per_block_limit
    # cudaOccMaxBlocksPerSMSmemLimit: the preference is used if one block fits in it; else
    # (Volta+) the smallest configuration that holds one block
    safe_alloc = np.where(smem_fits, smem_alloc, 0)
    smem_per_sm = np.where(
        preference >= safe_alloc, preference, _align_to_carveout(safe_alloc, rules)
    )
    # cudaOccMaxBlocksPerSMSmemLimit: maxBlocks = sharedMemPerMultiprocessor / smemAllocatedPerCTA
    limit_smem = np.where(smem_alloc > 0, smem_per_sm // np.maximum(smem_alloc, 1), _UNLIMITED)
    limit_smem = np.where(smem_fits, limit_smem, 0)

    # cudaOccMaxBlocksPerMultiprocessor: the architecture's resident-block limit
    limit_blocks = np.full_like(t, rules.max_blocks_per_sm)
    if rules.max_blocks_multi_warp is not None:
        # AMD getMaxWorkGroupsPerCU: min(MaxWaves / N, MaxBarriers) for N > 1 waves per group
        limit_blocks = np.where(warps > 1, rules.max_blocks_multi_warp, limit_blocks)

    # cudaOccMaxActiveBlocksPerMultiprocessor: ctaLimit = min of the limits
    blocks = np.minimum.reduce([limit_regs, limit_smem, limit_warps, limit_blocks])
    active_warps = blocks * warps
    return {
        "threads_per_block": t,
        "registers_per_thread": r,
        "shared_mem_per_block_bytes": s,
        "warps_per_block": warps,
        "registers_per_warp_allocated": regs_per_warp,
        "registers_per_block_allocated": regs_per_block,
        "shared_mem_per_block_allocated_bytes": smem_alloc,
        "shared_memory_per_sm_bytes": np.broadcast_to(smem_per_sm, t.shape),
        "limit_warps": limit_warps,
        "limit_registers": limit_regs,
        "limit_shared_memory": limit_smem,
        "limit_blocks": limit_blocks,
        "blocks_per_sm": blocks,
        "active_warps_per_sm": active_warps,
        "active_threads_per_sm": active_warps * rules.warp_size,
        # occupancy = active warps / max warps per SM (CUDA Best Practices Guide, "Occupancy")
        "occupancy": active_warps / rules.max_warps_per_sm,
    }


class Occupancy(BaseModel):
    """Resident blocks and warps per SM for one launch configuration, and what limits them."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    gpu_id: str
    threads_per_block: int
    registers_per_thread: int
    shared_mem_per_block_bytes: int
    carveout_percent: int | None
    warps_per_block: int
    registers_per_warp_allocated: int
    registers_per_block_allocated: int
    shared_mem_per_block_allocated_bytes: int
    shared_memory_per_sm_bytes: int
    block_limits: dict[str, int | None]
    blocks_per_sm: int
    active_warps_per_sm: int
    active_threads_per_sm: int
    max_warps_per_sm: int
    occupancy: float
    limiters: tuple[str, ...]
    needs_opt_in: bool
    note: str | None = None

    def summary(self) -> str:
        limit = ", ".join(self.limiters) or "none"
        return (
            f"{self.blocks_per_sm} blocks/SM, {self.active_warps_per_sm}/{self.max_warps_per_sm} "
            f"warps, occupancy {100 * self.occupancy:.1f}% (limited by {limit})"
        )


def occupancy(
    gpu: GPUSpec,
    threads_per_block: int,
    registers_per_thread: int,
    shared_mem_per_block: int | float = 0,
    carveout: int | None = None,
) -> Occupancy:
    """Blocks per SM as ``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` computes them.

    ``shared_mem_per_block``: static + dynamic bytes (the driver adds the reserved 1 KiB);
    ``carveout``: percent 0..100 of the SM's shared memory, or None for no preference.
    Raises SpecError for out-of-range inputs and UnsupportedError for CPU specs and
    AMD architectures without rules (see the module docstring; CDNA3 has them).
    """
    from gpumodel.specs import get_gpu

    gpu = get_gpu(gpu)  # a spec, or a name; anything else is one line
    rules = _rules(gpu)
    for name, value in (
        ("threads per block", threads_per_block),
        ("registers per thread", registers_per_thread),
        ("shared memory per block", shared_mem_per_block),
    ):
        if isinstance(value, bool) or np.ndim(value) != 0:
            raise SpecError(f"{name} must be one number (use occupancy_table for arrays)")
    arrays = _compute(
        rules, threads_per_block, registers_per_thread, shared_mem_per_block, carveout
    )
    out = {k: v.reshape(-1)[0] for k, v in arrays.items()}
    names = ("warps", "registers", "blocks", "shared_memory")
    limits = {name: int(out[f"limit_{name}"]) for name in names}
    blocks = int(out["blocks_per_sm"])
    limiters = tuple(name for name in LIMITERS if limits[name] == blocks)
    smem = int(out["shared_mem_per_block_bytes"])
    note = None
    if limits["registers"] == 0:
        note = (
            f"a block of {int(out['warps_per_block'])} warps needs "
            f"{int(out['registers_per_block_allocated'])} registers (allocated per warp in "
            f"units of {rules.register_allocation_unit}, warps rounded up to "
            f"{rules.sub_partitions} sub-partitions), more than the {rules.registers_per_block} "
            "a block may have"
        )
    elif limits["shared_memory"] == 0:
        note = (
            f"a block needs {int(out['shared_mem_per_block_allocated_bytes'])} B of shared memory"
            f" (incl. {rules.reserved_shared_memory_bytes} B reserved), more than the "
            f"{rules.shared_memory_per_block_optin_bytes + rules.reserved_shared_memory_bytes} B "
            "a block may have even after opting in"
        )
    return Occupancy(
        gpu_id=rules.gpu_id,
        threads_per_block=int(out["threads_per_block"]),
        registers_per_thread=int(out["registers_per_thread"]),
        shared_mem_per_block_bytes=smem,
        carveout_percent=None if carveout in (None, -1) else carveout,
        warps_per_block=int(out["warps_per_block"]),
        registers_per_warp_allocated=int(out["registers_per_warp_allocated"]),
        registers_per_block_allocated=int(out["registers_per_block_allocated"]),
        shared_mem_per_block_allocated_bytes=int(out["shared_mem_per_block_allocated_bytes"]),
        shared_memory_per_sm_bytes=int(out["shared_memory_per_sm_bytes"]),
        block_limits={k: (None if v == _UNLIMITED else v) for k, v in limits.items()},
        blocks_per_sm=blocks,
        active_warps_per_sm=int(out["active_warps_per_sm"]),
        active_threads_per_sm=int(out["active_threads_per_sm"]),
        max_warps_per_sm=rules.max_warps_per_sm,
        occupancy=float(out["occupancy"]),
        limiters=limiters,
        needs_opt_in=smem > rules.shared_memory_per_block_default_bytes,
        note=note,
    )


def occupancy_table(
    gpu: GPUSpec,
    block_sizes: Sequence[int] | np.ndarray,
    registers_per_thread: int | Sequence[int] | np.ndarray,
    shared_mem_per_block: int | float | Sequence[int] | np.ndarray = 0,
    carveout: int | None = None,
) -> dict[str, Any]:
    """``occupancy`` over arrays (numpy broadcasting), for tables, plots and sweeps.

    Returns a dict of equal-shape int/float arrays: ``threads_per_block``, ``warps_per_block``,
    ``blocks_per_sm``, ``active_warps_per_sm``, ``active_threads_per_sm``, ``occupancy``,
    ``limit_<resource>`` for each of LIMITERS (2**31-1 where a resource does not limit, as
    in the header), the allocation sizes, and ``limiters``: a list of name tuples, flattened.
    """
    from gpumodel.specs import get_gpu

    gpu = get_gpu(gpu)  # a spec, or a name; anything else is one line
    rules = _rules(gpu)
    out: dict[str, Any] = dict(
        _compute(rules, block_sizes, registers_per_thread, shared_mem_per_block, carveout)
    )
    blocks = out["blocks_per_sm"].reshape(-1)
    limit_rows = [out[f"limit_{name}"].reshape(-1) for name in LIMITERS]
    out["limiters"] = [
        tuple(name for name, lim in zip(LIMITERS, col, strict=True) if lim == b)
        for b, *col in zip(blocks, *limit_rows, strict=True)
    ]
    return out
