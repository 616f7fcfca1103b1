"""What GPU the measurements ran on: name, compute capability, sizes, clocks, software versions.

Host-free on purpose (no hostname, no serial, no UUID): the dict is written next to the raw
measurements that ship with gpumodel. CuPy is imported inside the function.
"""

from __future__ import annotations

from typing import Any

from gpumodel.errors import DeviceError

NO_GPU_MESSAGE = (
    "no CUDA GPU found: install the gpu extra (pip install 'gpumodel[gpu]') "
    "on a machine with an NVIDIA GPU"
)


def _require_cupy() -> Any:
    """Import CuPy and check that it sees at least one device; DeviceError otherwise."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install failing at import
        raise DeviceError(NO_GPU_MESSAGE) from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError: no driver, insufficient driver, ...
        raise DeviceError(NO_GPU_MESSAGE) from exc
    if count < 1:
        raise DeviceError(NO_GPU_MESSAGE)
    return cupy


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _nvml_info(index: int) -> dict[str, Any]:
    """Read-only NVML queries (driver string, clocks now and max, power limit); {} if absent."""
    try:
        import pynvml
    except Exception:
        return {}
    out: dict[str, Any] = {}
    try:
        pynvml.nvmlInit()
    except Exception:
        return {}
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        queries = {
            "driver_version_string": lambda: pynvml.nvmlSystemGetDriverVersion(),
            "sm_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
            "memory_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(
                h, pynvml.NVML_CLOCK_MEM
            ),
            "sm_clock_now_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
            "pcie_link_gen_max": lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h),
            "pcie_link_width_max": lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(h),
        }
        for key, q in queries.items():
            try:
                v = q()
                out[key] = v.decode() if isinstance(v, bytes) else v
            except Exception:
                continue
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return out


def device_info(device: int = 0) -> dict[str, Any]:
    """Facts about CUDA device ``device`` as plain JSON-able values.

    Raises DeviceError (one line) when CuPy is missing or sees no GPU.
    """
    cupy = _require_cupy()
    rt = cupy.cuda.runtime
    props = rt.getDeviceProperties(device)

    def attr(name: str) -> int | None:
        code = getattr(rt, name, None)
        if code is None:
            return None
        try:
            return int(rt.deviceGetAttribute(code, device))
        except Exception:
            return None

    def prop(key: str, fallback_attr: str | None = None) -> int | None:
        if key in props:
            return int(props[key])
        return attr(fallback_attr) if fallback_attr else None

    name = props.get("name", b"")
    name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    sm_clock_khz = prop("clockRate", "cudaDevAttrClockRate")
    mem_clock_khz = prop("memoryClockRate", "cudaDevAttrMemoryClockRate")
    bus_bits = prop("memoryBusWidth", "cudaDevAttrGlobalMemoryBusWidth")
    driver = int(rt.driverGetVersion())
    runtime_v = int(rt.runtimeGetVersion())

    info: dict[str, Any] = {
        "device_name": name,
        "compute_capability": f"{int(props['major'])}.{int(props['minor'])}",
        "sm_count": prop("multiProcessorCount", "cudaDevAttrMultiProcessorCount"),
        "l2_bytes": prop("l2CacheSize", "cudaDevAttrL2CacheSize"),
        "memory_bytes": int(props["totalGlobalMem"]),
        "max_threads_per_sm": prop(
            "maxThreadsPerMultiProcessor", "cudaDevAttrMaxThreadsPerMultiProcessor"
        ),
        "registers_per_sm": prop(
            "regsPerMultiprocessor", "cudaDevAttrMaxRegistersPerMultiprocessor"
        ),
        "shared_memory_per_sm_bytes": prop(
            "sharedMemPerMultiprocessor", "cudaDevAttrMaxSharedMemoryPerMultiprocessor"
        ),
        "sm_clock_khz": sm_clock_khz,
        "memory_clock_khz": mem_clock_khz,
        "memory_bus_width_bits": bus_bits,
        "memory_bandwidth_theoretical_bytes_per_s": (
            2.0 * mem_clock_khz * 1e3 * bus_bits / 8 if mem_clock_khz and bus_bits else None
        ),
        "driver_version": f"{driver // 1000}.{(driver % 1000) // 10}",
        "cuda_runtime_version": f"{runtime_v // 1000}.{(runtime_v % 1000) // 10}",
        "cupy_version": str(cupy.__version__),
        "numpy_version": _version("numpy"),
        "torch_version": _version("torch"),
    }
    info.update(_nvml_info(device))
    return info
