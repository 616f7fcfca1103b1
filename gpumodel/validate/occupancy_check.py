"""Check ``gpumodel.model.occupancy`` against the driver's own occupancy calculator.

Compiles ``validation/kernels/occupancy_probe.cu`` with CuPy (NVRTC) into variants of different
register counts (``--maxrregcount``, ``__launch_bounds__``) and static shared memory, reads each
kernel's real ``NUM_REGS`` and ``SHARED_SIZE_BYTES``, and for thousands of (block size, dynamic
shared memory, carveout) combinations compares ``cuOccupancyMaxActiveBlocksPerMultiprocessor``
with ``occupancy()``. It also compares the spec's ``sm_limits`` with the device's attributes.

Nothing heavy is imported at module import (no CuPy, no pydantic): ``run_occupancy_check``
imports them when called, so the module can be imported anywhere. A failure in one variant is
recorded in the result, never raised.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["DEVICE_SPEC_IDS", "run_occupancy_check", "spec_id_for_device"]

#: Device-name fragment -> spec id, first match wins (more specific names first).
DEVICE_SPEC_IDS: tuple[tuple[str, str], ...] = (
    ("H200", "h200-sxm"),
    ("H100 NVL", "h100-nvl"),
    ("H100 PCIe", "h100-pcie"),
    ("H100", "h100-sxm"),
    ("A100-PCIE", "a100-pcie-40gb"),
    ("A100", "a100-sxm4-80gb"),
    ("B200", "b200"),
    ("L40S", "l40s"),
    ("L4", "l4"),
    ("A10G", "a10g"),
    ("A10", "a10"),
    ("RTX 4090", "rtx-4090"),
    ("V100", "v100-sxm2-32gb"),
    ("T4", "t4"),
)

MAXRREGCOUNTS = (16, 24, 32, 37, 40, 48, 57, 64, 72, 79, 96, 128, 168, 200, 255)
STATIC_SMEM = (0, 4000, 16384, 40000)  # bytes; 4000 is not a multiple of the 128 B unit
BLOCK_SIZES = (*range(32, 1025, 32), 1, 33, 100, 257, 1000)
CARVEOUTS = (0, 10, 25, 33, 50, 66, 75, 90, 100)

# CUfunction_attribute (cuda.h)
_ATTR_MAX_THREADS_PER_BLOCK = 0
_ATTR_SHARED_SIZE_BYTES = 1
_ATTR_NUM_REGS = 4
_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_ATTR_PREFERRED_SHARED_MEMORY_CARVEOUT = 9

# cudaDeviceAttr (driver_types.h) -> the spec field it should equal
_DEVICE_ATTRS: tuple[tuple[str, int, str], ...] = (
    ("maxThreadsPerBlock", 1, "max_threads_per_block"),
    ("sharedMemPerBlock", 8, "shared_memory_per_block_default_bytes"),
    ("warpSize", 10, "warp_size"),
    ("regsPerBlock", 12, "registers_per_block"),
    ("multiProcessorCount", 16, "sm_count"),
    ("maxThreadsPerMultiProcessor", 39, "max_threads_per_sm"),
    ("sharedMemPerMultiprocessor", 81, "shared_memory_per_sm_bytes"),
    ("regsPerMultiprocessor", 82, "registers_per_sm"),
    ("sharedMemPerBlockOptin", 97, "shared_memory_per_block_optin_bytes"),
    ("maxBlocksPerMultiProcessor", 106, "max_blocks_per_sm"),
    ("reservedSharedMemPerBlock", 111, "reserved_shared_memory_per_block_bytes"),
)

_MAX_LISTED = 20


def spec_id_for_device(device_name: str) -> str | None:
    """The spec id for a CUDA device name ('NVIDIA H100 80GB HBM3' -> 'h100-sxm'), or None."""
    for fragment, spec_id in DEVICE_SPEC_IDS:
        if fragment.lower() in device_name.lower():
            return spec_id
    return None


def _probe_source() -> str:
    here = Path(__file__).resolve()
    candidates = [here.parents[2] / "validation" / "kernels" / "occupancy_probe.cu"]
    try:
        from gpumodel import _paths

        candidates.insert(0, _paths.kernels_dir() / "occupancy_probe.cu")
    except Exception:  # a partial install: fall back to the checkout layout
        pass
    for path in candidates:
        if path.is_file():
            return path.read_text(encoding="utf-8")
    raise FileNotFoundError(f"occupancy_probe.cu not found in {', '.join(map(str, candidates))}")


def _resolve_spec(gpu_spec: Any, device_name: str) -> Any:
    from gpumodel.specs import GPUSpec, get_gpu

    if gpu_spec is None:
        spec_id = spec_id_for_device(device_name)
        if spec_id is None:
            raise LookupError(f"no spec id known for device '{device_name}'; pass a spec")
        return get_gpu(spec_id)
    if isinstance(gpu_spec, GPUSpec):
        return gpu_spec
    if isinstance(gpu_spec, str):
        return get_gpu(gpu_spec)
    return GPUSpec.model_validate(gpu_spec)


def _variants() -> list[dict[str, Any]]:
    """(kernel, compile options) pairs to build; each gets the default carveout."""
    out = []
    for static in STATIC_SMEM:
        out.append({"kernel": "occ_light", "static": static, "maxrreg": None})
        for regs in MAXRREGCOUNTS:
            out.append({"kernel": "occ_heavy", "static": static, "maxrreg": regs})
    out.append({"kernel": "occ_bounded", "static": 0, "maxrreg": None})
    out.append({"kernel": "occ_bounded96", "static": 0, "maxrreg": None})
    return out


def _carveout_variants() -> list[dict[str, Any]]:
    out = []
    for carveout in CARVEOUTS:
        out.append({"kernel": "occ_light", "static": 0, "maxrreg": None, "carveout": carveout})
        out.append({"kernel": "occ_light", "static": 16384, "maxrreg": None, "carveout": carveout})
        out.append({"kernel": "occ_heavy", "static": 0, "maxrreg": 64, "carveout": carveout})
    return out


def _options(v: dict[str, Any], tag: int) -> tuple[str, ...]:
    opts = [f"-DSTATIC_SMEM_BYTES={v['static']}", f"-DVARIANT_TAG={tag}"]
    if v["maxrreg"] is not None:
        opts.append(f"--maxrregcount={v['maxrreg']}")
    return tuple(opts)


def _dynamic_sizes(static: int, max_dynamic: int, default_per_block: int) -> list[int]:
    sizes = {0, 1024, 4096, 12288, 48 * 1024, 65536, 102400, 155648, 200000}
    sizes |= {default_per_block - static, max_dynamic, max_dynamic + 128}
    return sorted(s for s in sizes if 0 <= s <= max_dynamic + 128)


def _beyond_limit(
    driver: Any, ptr: int, block: int, regs: int, static: int, v: dict[str, Any],
    rows: list[dict[str, Any]], occupancy: Any, spec: Any,
) -> None:  # fmt: skip
    row: dict[str, Any] = {"kernel": v["kernel"], "regs": regs, "block": block}
    row["model"] = occupancy(spec, block, regs, static, v["carveout"]).blocks_per_sm
    try:
        row["driver"] = driver.occupancyMaxActiveBlocksPerMultiprocessor(ptr, block, 0)
    except Exception as exc:
        row["driver_error"] = f"{type(exc).__name__}: {exc}"
    rows.append(row)


def run_occupancy_check(
    gpu_spec: Any = None,
    progress: Callable[[str], None] | None = None,
    *,
    quick: bool = False,
) -> dict[str, Any]:
    """Compare ``occupancy()`` with the driver on the current CUDA device.

    ``gpu_spec``: None (pick the spec from the device name), a spec id, a GPUSpec or a dict of
    spec fields. ``quick`` sweeps fewer variants. Returns ``{"combinations", "n_mismatches",
    "mismatches" (first 20), ...}`` plus per-variant details, driver errors and the spec vs
    device attribute comparison.
    """
    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    import cupy
    from cupy.cuda import driver, runtime

    from gpumodel.model.occupancy import occupancy

    device = cupy.cuda.Device()
    props = runtime.getDeviceProperties(device.id)
    raw_name = props.get("name", b"")
    device_name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
    spec = _resolve_spec(gpu_spec, device_name)
    limits = spec.sm_limits
    result: dict[str, Any] = {
        "device": device_name,
        "compute_capability": f"{props.get('major')}.{props.get('minor')}",
        "spec_id": spec.id,
        "spec_compute_capability": spec.compute_capability,
        "cuda_driver_version": runtime.driverGetVersion(),
        "cuda_runtime_version": runtime.runtimeGetVersion(),
        "cupy_version": cupy.__version__,
    }

    # 1. the spec's per-SM limits vs the device's attributes
    attrs: dict[str, Any] = {}
    for label, attr, field in _DEVICE_ATTRS:
        try:
            real = int(runtime.deviceGetAttribute(attr, device.id))
        except Exception as exc:  # an attribute this driver lacks
            attrs[label] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        held = getattr(spec, field) if field == "sm_count" else getattr(limits, field, None)
        attrs[label] = {"device": real, "spec": None if held is None else int(held)}
    result["spec_vs_device"] = attrs
    result["spec_vs_device_mismatches"] = sorted(
        k for k, v in attrs.items() if "spec" in v and v["spec"] != v["device"]
    )

    source = _probe_source()
    optin = int(limits.shared_memory_per_block_optin_bytes)
    default_per_block = int(limits.shared_memory_per_block_default_bytes)
    variants = [dict(v, carveout=None) for v in _variants()] + _carveout_variants()
    if quick:
        variants = variants[::4]
    combinations = 0
    mismatches: list[dict[str, Any]] = []
    driver_errors: list[dict[str, Any]] = []
    n_driver_errors = 0
    variant_rows: list[dict[str, Any]] = []
    beyond: list[dict[str, Any]] = []
    for tag, v in enumerate(variants):
        row: dict[str, Any] = {
            "kernel": v["kernel"],
            "static_smem_source_bytes": v["static"],
            "maxrregcount": v["maxrreg"],
            "carveout": v["carveout"],
        }
        variant_rows.append(row)
        try:
            module = cupy.RawModule(code=source, options=_options(v, tag))
            # RawModule.get_function -> RawKernel; .kernel is the loaded CUfunction wrapper
            ptr = module.get_function(v["kernel"]).kernel.ptr
            regs = driver.funcGetAttribute(_ATTR_NUM_REGS, ptr)
            static = driver.funcGetAttribute(_ATTR_SHARED_SIZE_BYTES, ptr)
            max_threads = driver.funcGetAttribute(_ATTR_MAX_THREADS_PER_BLOCK, ptr)
            default_dyn = driver.funcGetAttribute(_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, ptr)
            max_dyn = optin - static
            driver.funcSetAttribute(ptr, _ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, max_dyn)
            if v["carveout"] is not None:
                driver.funcSetAttribute(ptr, _ATTR_PREFERRED_SHARED_MEMORY_CARVEOUT, v["carveout"])
            row.update(
                num_regs=regs,
                shared_size_bytes=static,
                max_threads_per_block=max_threads,
                default_max_dynamic_shared_bytes=default_dyn,
                max_dynamic_shared_bytes_set=max_dyn,
            )
            say(f"{v['kernel']} static={static} regs={regs} carveout={v['carveout']}")
            n_here = n_bad_here = 0
            for block in BLOCK_SIZES:
                if block > max_threads:
                    # above the kernel's own limit (registers or __launch_bounds__): the model
                    # does not know the kernel's limit; record what the driver says, apart
                    _beyond_limit(driver, ptr, block, regs, static, v, beyond, occupancy, spec)
                    continue
                for dyn in _dynamic_sizes(static, max_dyn, default_per_block):
                    model = occupancy(spec, block, regs, static + dyn, v["carveout"])
                    try:
                        real = driver.occupancyMaxActiveBlocksPerMultiprocessor(ptr, block, dyn)
                    except Exception as exc:
                        n_driver_errors += 1
                        if len(driver_errors) < _MAX_LISTED:
                            driver_errors.append({
                                "kernel": v["kernel"], "regs": regs, "static": static,
                                "block": block, "dynamic": dyn, "carveout": v["carveout"],
                                "model": model.blocks_per_sm,
                                "error": f"{type(exc).__name__}: {exc}",
                            })  # fmt: skip
                        continue
                    combinations += 1
                    n_here += 1
                    if real != model.blocks_per_sm:
                        n_bad_here += 1
                        mismatches.append({
                            "kernel": v["kernel"], "regs": regs, "static": static,
                            "block": block, "dynamic": dyn, "carveout": v["carveout"],
                            "driver": real, "model": model.blocks_per_sm,
                            "model_limits": model.block_limits,
                            "model_smem_per_sm": model.shared_memory_per_sm_bytes,
                        })  # fmt: skip
            row.update(combinations=n_here, mismatches=n_bad_here)
        except Exception as exc:  # one broken variant must not stop the check
            row["error"] = f"{type(exc).__name__}: {exc}"
    result.update(
        combinations=combinations,
        n_mismatches=len(mismatches),
        mismatches=mismatches[:_MAX_LISTED],
        n_driver_errors=n_driver_errors,
        driver_errors=driver_errors,
        variant_errors=[r for r in variant_rows if "error" in r],
        beyond_kernel_thread_limit={
            "note": "block sizes above the kernel's CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "
            "dynamic shared memory 0; not counted in combinations",
            "n": len(beyond),
            "n_model_differs": sum(1 for b in beyond if b.get("driver") != b["model"]),
            "rows": beyond[:60],
        },
        variants=variant_rows,
        seconds=round(time.perf_counter() - started, 2),
    )
    return result
