"""Calibration files: what `gpumodel validate` measured on a GPU and the parameters fitted to it.

A calibration is data (YAML) with its provenance: GPU, driver, CUDA and library versions, date,
the fitted parameters, the leave-out errors and the raw measurements. Efficiencies are stored
relative to the datasheet so they can be carried to another GPU of the same family
(``load_calibration("h100-sxm", for_gpu=get_gpu("h200-sxm"))``); rates then come from the
target's spec.

Where predictions look when ``calibration=None``: the user cache
(``$GPUMODEL_CACHE_DIR`` or ``$XDG_CACHE_HOME/gpumodel`` or ``~/.cache/gpumodel``, file
``calibrations/<gpu-id>.yaml``), then profiles shipped in ``validation/results/<gpu-id>/``.

A system calibration (``system: {gpus, interconnect}``) holds what was measured across GPUs: the
NCCL collectives fitted by ``gpumodel validate --collectives`` on N GPUs joined by one link kind.
It lives in ``calibrations/<gpu-id>-x<N>/collectives_calibration.yaml`` in the user cache, then
``validation/results/<gpu-id>-x<N>/collectives_calibration.yaml`` shipped. A collective on that
GPU and link uses the fit for its GPU count (else the nearest count, transferred) when the
calibration in hand has none of its own; the prediction's label names both files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from gpumodel import _paths
from gpumodel._io import dump_yaml
from gpumodel._validators import (
    Checked,
    Cycles,
    DatasheetRatio,
    FiniteFloat,
    Fraction,
    GpuCount,
    Multiplier,
    NonEmptyStr,
    NonNegativeFloat,
    NonNegativeSize,
    Percent,
    PerSMCycle,
    PositiveBytes,
    PositiveFloat,
    PositiveSeconds,
    Rate,
    Seconds,
    SignedPercent,
)
from gpumodel.errors import CalibrationError, GpumodelError, SpecError
from gpumodel.specs import GPUSpec, format_validation_error, get_gpu
from gpumodel.tracefit import TraceFit, TraceHost

FORMAT_VERSION = 1


class _Frozen(Checked):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    _error = CalibrationError


class GemmParams(_Frozen):
    """Fitted GEMM behaviour for one dtype (see gpumodel.model.gemm)."""

    efficiency: DatasheetRatio = Field(description="large aligned GEMMs, fraction of peak")
    misaligned_efficiency: DatasheetRatio = Field(
        1.0, description="multiplier when a dimension misses 16-byte alignment"
    )
    misaligned_transposed_efficiency: DatasheetRatio | None = Field(
        None, description="the same for B stored transposed (nn.Linear's x @ W.T); None: as above"
    )
    misaligned_transposed_stream: DatasheetRatio | None = Field(
        None,
        description="multiplier on the weight-streaming bandwidth of such a product with M > 1 "
        "(cuBLAS's misaligned kernels; M = 1 runs a GEMV); None: 1",
    )
    small_m_bandwidth_efficiency: DatasheetRatio = Field(
        1.0, description="achieved / datasheet DRAM bandwidth for weight-bound GEMMs"
    )
    gemv_bandwidth_efficiency: DatasheetRatio | None = Field(
        None, description="the same for M = 1 (cuBLAS's GEMV kernels); None: as M > 1"
    )
    overhead_s: Seconds | None = Field(None, description="fixed cost of one cuBLAS call")
    overlap_exponent: FiniteFloat | None = Field(None, ge=1, le=100)


class HostLinkParams(_Frozen):
    """Measured host<->device copy rates (per direction) and the fixed cost of a copy."""

    h2d_pinned_bytes_per_s: Rate | None = Field(None)
    d2h_pinned_bytes_per_s: Rate | None = Field(None)
    h2d_pageable_bytes_per_s: Rate | None = Field(None)
    d2h_pageable_bytes_per_s: Rate | None = Field(None)
    overhead_s: Seconds | None = Field(None)
    # fixed cost per direction and memory kind (a pageable copy stages through a pinned buffer)
    h2d_pinned_overhead_s: Seconds | None = Field(None)
    d2h_pinned_overhead_s: Seconds | None = Field(None)
    h2d_pageable_overhead_s: Seconds | None = Field(None)
    d2h_pageable_overhead_s: Seconds | None = Field(None)
    # a copy larger than ``*_large_min_bytes`` runs, whole, at ``*_large_bytes_per_s``: a
    # pageable source too large to stay in the host's caches between copies is staged at DRAM
    # speed (gpumodel.fitting.fit_copy_curve); None where the measurements show no such step.
    # Pinned copies fit one rate; their fields are read from files of the fit's first version
    h2d_pinned_large_min_bytes: PositiveBytes | None = Field(None)
    d2h_pinned_large_min_bytes: PositiveBytes | None = Field(None)
    h2d_pageable_large_min_bytes: PositiveBytes | None = Field(None)
    d2h_pageable_large_min_bytes: PositiveBytes | None = Field(None)
    h2d_pinned_large_bytes_per_s: Rate | None = Field(None)
    d2h_pinned_large_bytes_per_s: Rate | None = Field(None)
    h2d_pageable_large_bytes_per_s: Rate | None = Field(None)
    d2h_pageable_large_bytes_per_s: Rate | None = Field(None)


class CollectiveParams(_Frozen):
    """Fitted alpha (latency) and bus bandwidth of one collective on ``gpus`` GPUs."""

    gpus: GpuCount
    alpha_s: Seconds
    bus_bandwidth_bytes_per_s: Rate
    # a measured ratio, not a fitted multiplier: it may be tiny (gloo over CPU processes standing
    # in for NVLink measured 9e-5), so it takes no efficiency floor
    link_efficiency: PositiveFloat | None = Field(
        None, le=1e3, description="busbw / per-direction link bw"
    )


class PowerParams(_Frozen):
    """Fitted power behaviour of one architecture (gpumodel.model.power): the SM array's
    dynamic power at full tensor-core activity, per SM at ``reference_clock_hz``, and the
    static share of the power limit. Carries to GPUs of the same architecture by SM count and
    clock^3 (their own spec'd power limit applies); never across architectures."""

    architecture: NonEmptyStr
    tensor_power_w_per_sm: float = Field(
        gt=0, le=1000, description="W per SM, full tensor activity"
    )
    reference_clock_hz: float = Field(
        ge=1e6, le=1e11, description="max clock of the GPU it was fitted on"
    )
    static_power_fraction: float = Field(0.1, ge=0, lt=1, description="idle power / limit")
    # each tensor-core dtype's full-activity power relative to tensor_power_w_per_sm (the 16-bit
    # products'), fitted where validate timed that dtype back to back; 1 for the others
    tensor_power_dtype_factor: dict[NonEmptyStr, Annotated[float, Field(gt=0, le=10)]] = Field(
        default_factory=dict, description="full tensor-activity power of a dtype / the 16-bit one"
    )
    # joules per DRAM byte a kernel streams (the DRAM stream's power beside the tensor work),
    # fitted where validate --conditions read NVML's power under weight-streaming GEMMs
    dram_energy_j_per_byte: float | None = Field(
        None,
        ge=0,
        le=1e-9,
        description="J per DRAM byte; None: the architecture's measured constant "
        "(gpumodel.model.power.DRAM_ENERGY_J_PER_BYTE)",
    )
    source: str = ""

    def full_power_factor(self, dtype: str | None) -> float:
        """The ``tensor_power_dtype_factor`` of ``dtype`` (1 for None or an unfitted dtype)."""
        return self.tensor_power_dtype_factor.get(dtype, 1.0) if dtype else 1.0


def _smallest_first(span: tuple[float, float]) -> tuple[float, float]:
    if span[0] > span[1]:
        raise ValueError(f"a span is (smallest, largest) seconds; {span[0]:g} is above {span[1]:g}")
    return span


# (smallest, largest) seconds, both > 0 and finite
SecondsSpan = Annotated[tuple[PositiveSeconds, PositiveSeconds], AfterValidator(_smallest_first)]


class CalibrationParams(_Frozen):
    """Everything the time model takes from a calibration; None means 'use the datasheet'."""

    dram_efficiency: DatasheetRatio | None = None
    # streams of known read/write mix w (written / moved bytes): efficiency
    #   (1 - w) * read + w * write - 4 w (1 - w) * turnaround   (DRAM read/write bus turnaround)
    dram_read_efficiency: DatasheetRatio | None = None
    dram_write_efficiency: DatasheetRatio | None = None
    dram_turnaround: Fraction | None = Field(None, le=0.5)
    l2_bandwidth_bytes_per_s: Rate | None = Field(None)
    l2_hot_max_bytes: PositiveBytes | None = Field(
        None, description="largest hot working set in L2"
    )
    kernel_overhead_s: Seconds | None = Field(None)
    dram_first_load_s: Seconds | None = Field(
        None,
        description="part of a cold kernel's floor spent waiting for its first DRAM "
        "loads; kernels whose inputs are in L2 skip it",
    )
    reduction_tail_s: Seconds | None = Field(
        None,
        description="extra fixed time of kernels that reduce to a tiny output "
        "(the last block's dependent final step)",
    )
    overlap_exponent: FiniteFloat | None = Field(None, ge=1, le=100)
    compute_efficiency: dict[str, DatasheetRatio] = Field(
        default_factory=dict,
        description="'unit:dtype' (or 'vector:fp32:no-fma' for kernels without FMA) -> "
        "achieved / datasheet peak",
    )
    gemm: dict[str, GemmParams] = Field(default_factory=dict)
    family_efficiency: dict[str, Multiplier] = Field(
        default_factory=dict, description="per op family multiplier on the compute rate"
    )
    family_bandwidth_efficiency: dict[str, Multiplier] = Field(
        default_factory=dict, description="per op family multiplier on the DRAM bandwidth"
    )
    loaded_dram_latency_s: PositiveSeconds | None = Field(
        None, description="DRAM latency under load, for Little's-law bandwidth limits"
    )
    family_overhead_s: dict[str, Seconds] = Field(
        default_factory=dict, description="per op family fixed cost per kernel, seconds"
    )
    family_elements_per_sm_cycle: dict[str, PerSMCycle] = Field(
        default_factory=dict,
        description="per op family, elements one SM completes per clock when the kernel is "
        "bound by per-element instructions (index arithmetic); carries to GPUs by SMs x clock",
    )
    conv_half_fill_tiles_per_sm: NonNegativeFloat | None = Field(
        None, le=64, description="output tiles (128 x 128) per SM at which a convolution kernel "
        "runs at half its full-machine rate (gpumodel.model.scheduling.fill_efficiency)")  # fmt: skip
    host: HostLinkParams = HostLinkParams()
    dram_latency_cycles: Cycles | None = None
    l2_latency_cycles: Cycles | None = None
    launch_host_s: Seconds | None = Field(None)
    collectives: dict[str, CollectiveParams] = Field(default_factory=dict)
    # the in-workload condition (gpumodel.model.power): power-limited sustained clock and the
    # dirty lines a preceding kernel leaves in L2
    power: PowerParams | None = None
    dirty_l2_writeback_fraction: float | None = Field(
        None, ge=0, le=1, description="extra DRAM writes / min(L2, bytes moved) after a kernel "
        "that wrote its output")  # fmt: skip
    # host<->device copies as a user's code waits for them (torch copy_ + synchronise, wall
    # clock): what the in-workload condition prices; ``host`` is the harness's (CUDA events)
    host_wall: HostLinkParams | None = None
    # a device-to-host copy into a new pageable tensor above the C allocator's reuse size
    # first touches every page (gpumodel.predict.FIRST_TOUCH_MIN_BYTES): host time per byte
    pageable_first_touch_s_per_byte: PositiveFloat | None = Field(None, le=1e-6)
    published_floor_scale: dict[str, float] = Field(
        default_factory=dict,
        description="'family:dtype' -> factor by which a transfer raised that family's "
        "efficiency to the target generation's published kernels (gpumodel.published)",
    )
    family_time_scale: dict[str, Multiplier] = Field(
        default_factory=dict,
        description="'family/bound' (e.g. 'gemm/memory') or 'family' -> measured / predicted "
        "kernel time in a user's own trace (gpumodel calibrate --trace); 1 when absent",
    )
    family_time_scale_span_s: dict[str, SecondsSpan] = Field(
        default_factory=dict,
        description="key of family_time_scale -> (smallest, largest) model-predicted time in "
        "seconds of one kernel of the traced ops that fitted the scale (each op's largest, "
        "gpumodel.predict.kernel_size_s); outside it the scale fades to 1 "
        "(gpumodel.predict.scale_at_size); a key without one: the scale holds at every size",
    )

    def without_trace_scales(self) -> CalibrationParams:
        """These parameters as the model's own: no trace-fitted scales, no spans."""
        if not self.family_time_scale and not self.family_time_scale_span_s:
            return self
        return self.model_copy(update={"family_time_scale": {}, "family_time_scale_span_s": {}})

    @model_validator(mode="after")
    def _spans_have_scales(self) -> CalibrationParams:
        orphans = sorted(set(self.family_time_scale_span_s) - set(self.family_time_scale))
        if orphans:
            raise ValueError(f"family_time_scale_span_s: {', '.join(map(repr, orphans))} has no "
                             "scale in family_time_scale")  # fmt: skip
        return self


class FamilyError(_Frozen):
    """Leave-out error of one op family: |pred - meas| / meas statistics over ``n`` points."""

    n: NonNegativeSize
    median_abs_pct: Percent
    p90_abs_pct: Percent
    bias_pct: SignedPercent
    datasheet_median_abs_pct: Percent | None = None
    tolerance_pct: Percent | None = None


class SystemKey(_Frozen):
    """Which system a multi-GPU calibration was measured on: GPU count and the in-node link."""

    gpus: int = Field(ge=2)
    interconnect: str = Field(description="in-node link kind the ranks used: nvlink, pcie, ...")

    def __str__(self) -> str:
        return f"{self.gpus} x {self.interconnect}"


class Calibration(_Frozen):
    format_version: Literal[1] = FORMAT_VERSION
    gpu_id: str
    device_name: str
    created: datetime
    backend: Literal["cupy", "numpy", "synthetic", "torch", "trace"] = "cupy"
    system: SystemKey | None = None
    environment: dict[str, str] = Field(default_factory=dict)
    transferred_from: str | None = None
    parameters: CalibrationParams
    errors: dict[str, FamilyError] = Field(default_factory=dict)
    unavailable: list[dict[str, NonEmptyStr]] = Field(default_factory=list)
    measurements: list[dict[str, Any]] = Field(default_factory=list)
    # fitted from a user's torch.profiler trace (gpumodel calibrate --trace): what and how
    trace: TraceFit | None = None
    # the host the trace ran on: its eager op, launch and replay costs
    host_profile: TraceHost | None = None
    # where it was loaded from (not stored)
    origin: str | None = Field(None, exclude=True)
    # label of the system calibration whose collectives were added (not stored)
    collectives_from: str | None = Field(None, exclude=True)
    # read without its raw measurements (they are in the file, not here): saving it would drop
    # them, so ``save`` refuses
    _measurements_skipped: bool = PrivateAttr(False)

    @model_validator(mode="after")
    def _trace_is_this_gpus(self) -> Calibration:
        """A trace fit names the GPU it was recorded on: the file's own, unless the file was
        carried to another GPU (``transferred_from``: the trace stays the traced GPU's)."""
        fit = self.trace
        if fit is not None and self.transferred_from is None and fit.gpu_id != self.gpu_id:
            raise ValueError(f"trace.gpu_id is {fit.gpu_id!r} but the calibration is for "
                             f"{self.gpu_id!r}: a trace calibration is fitted on the GPU that "
                             "recorded it (carry it with --calibration-from)")  # fmt: skip
        return self

    def model_copy(
        self, *, update: dict[str, Any] | None = None, deep: bool = False
    ) -> Calibration:
        """A copy; one whose ``measurements`` are given explicitly may be saved again."""
        copy = super().model_copy(update=update, deep=deep)
        if update and "measurements" in update:
            copy._measurements_skipped = False
        return copy

    @property
    def label(self) -> str:
        where = self.origin or "in memory"
        via = f", transferred from {self.transferred_from}" if self.transferred_from else ""
        system = f" {self.system.gpus} x {self.system.interconnect}" if self.system else ""
        own = f"{self.gpu_id}{system} {self.backend} {self.created:%Y-%m-%d} ({where}{via})"
        return f"{own}; collectives: {self.collectives_from}" if self.collectives_from else own

    def save(self, path: str | Path, *, replaces_input: bool = False) -> Path:
        """Write atomically (temp file, then rename). The raw measurements go last and an end
        marker closes the file, so readers can skip the bulky measurements and still detect a
        truncated file. ``replaces_input``: ``path`` may be a file this process read (validate
        updating a calibration it loaded); otherwise that is refused (``_io.check_target``)."""
        path = Path(path)
        if self._measurements_skipped:
            raise CalibrationError(
                f"{self.origin}: this calibration was read without its raw measurements; saving "
                "it would drop them: read it with read_calibration_file(..., measurements=True)"
            )
        head = self.model_dump(mode="json", exclude_none=False, exclude={"measurements"})
        text = dump_yaml(head) + dump_yaml({"measurements": self.measurements})
        return atomic_write_text(path, text + END_MARKER, replaces_input=replaces_input)


def atomic_write_text(path: str | Path, text: str, *, replaces_input: bool = False) -> Path:
    """Write ``text`` to ``path`` so readers see the old file or the whole new one, never half
    (the shared writer, gpumodel._io.atomic_write_text)."""
    from gpumodel._io import atomic_write_text as _write

    return _write(path, text, replaces_input=replaces_input)


def cache_dir() -> Path:
    if os.environ.get("GPUMODEL_CACHE_DIR"):
        return Path(os.environ["GPUMODEL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gpumodel"


def user_calibration_path(gpu_id: str) -> Path:
    return cache_dir() / "calibrations" / f"{gpu_id}.yaml"


def missed_calibration_path(gpu_id: str) -> Path:
    """Where ``gpumodel validate`` keeps a fit that missed a tolerance when no ``--out`` was
    given: beside the user calibrations, not among them (a prediction never picks it up)."""
    return cache_dir() / "calibrations" / "missed" / f"{gpu_id}.yaml"


def shipped_calibration_path(gpu_id: str) -> Path:
    return _paths.results_dir() / gpu_id / "calibration.yaml"


SYSTEM_FILE = "collectives_calibration.yaml"


def user_system_calibration_path(gpu_id: str, gpus: int) -> Path:
    """Where ``gpumodel validate --collectives`` saves a fit so that predictions find it."""
    return cache_dir() / "calibrations" / f"{gpu_id}-x{gpus}" / SYSTEM_FILE


def shipped_system_calibration_path(gpu_id: str, gpus: int) -> Path:
    return _paths.results_dir() / f"{gpu_id}-x{gpus}" / SYSTEM_FILE


END_MARKER = "# end of gpumodel calibration\n"


def read_calibration_file(path: str | Path, measurements: bool = False) -> Calibration:
    """Parse and validate a calibration file; any defect is a CalibrationError naming the file.

    ``measurements=False`` (what predictions need) skips parsing the raw measurements block.
    """
    from gpumodel._io import InputFileError, loads_yaml, max_input_bytes, read_text

    path = Path(path)
    try:
        text = read_text(path, "calibration", max_input_bytes(yaml=True))
    except InputFileError as exc:
        raise CalibrationError(str(exc)) from None
    if text.strip() and not text.endswith(END_MARKER):
        if "\ngpu_id:" not in "\n" + text:  # not the start of one either
            raise CalibrationError(f"{path}: not a gpumodel calibration (no gpu_id; one is "
                                   "written by gpumodel validate or gpumodel calibrate --trace)")  # fmt: skip
        raise CalibrationError(f"{path}: calibration is truncated (its end marker is missing)")
    skipped = not measurements and "\nmeasurements:" in text
    if skipped:
        text = text[: text.index("\nmeasurements:") + 1]
    try:
        data = loads_yaml(text, path, "calibration")
    except InputFileError as exc:
        raise CalibrationError(f"{exc} (truncated?)") from None
    if not isinstance(data, dict):
        raise CalibrationError(f"{path}: calibration is empty or not a mapping")
    try:
        cal = Calibration.model_validate({**data, "origin": str(path)})
    except ValidationError as exc:
        raise CalibrationError(format_validation_error(exc, f"{path}")) from None
    cal._measurements_skipped = skipped
    return cal


@lru_cache(maxsize=64)
def _find_default(gpu_id: str, cache: str) -> Calibration | None:
    for path in (Path(cache) / "calibrations" / f"{gpu_id}.yaml", shipped_calibration_path(gpu_id)):
        if path.is_file():
            cal = read_calibration_file(path)
            if cal.gpu_id != gpu_id:  # e.g. an A100's calibration copied to h100-sxm.yaml
                raise CalibrationError(
                    f"{path}: this calibration is for {cal.gpu_id}, not {gpu_id}; move it to "
                    f"{cal.gpu_id}.yaml, or pass --calibration none (datasheet) or "
                    f"--calibration-from {cal.gpu_id} (transfer it)"
                )
            return cal
    return None


def default_calibration(gpu: GPUSpec) -> Calibration | None:
    """The best calibration found for ``gpu``: user cache first, then shipped profiles."""
    return _find_default(gpu.id, str(cache_dir()))


def _system_dirs(cache: str) -> list[tuple[str, Path]]:
    return [("user", Path(cache) / "calibrations"), ("shipped", _paths.results_dir())]


@lru_cache(maxsize=64)
def _system_files(gpu_id: str, cache: str) -> tuple[Calibration, ...]:
    """System calibrations of ``gpu_id``, user cache first, each folder by GPU count."""
    found = []
    for _, root in _system_dirs(cache):
        paths = sorted(root.glob(f"{gpu_id}-x*/{SYSTEM_FILE}"))
        for path in paths:
            cal = read_calibration_file(path)
            if cal.system is None or cal.gpu_id != gpu_id:
                raise CalibrationError(
                    f"{path}: a system calibration needs gpu_id {gpu_id} and system: "
                    "{gpus, interconnect}; re-write it with `gpumodel validate --collectives "
                    "--from-measurements collectives_measurements.json`"
                )
            found.append(cal)
    return tuple(found)


def system_calibration(gpu: GPUSpec, gpus: int, interconnect: str) -> Calibration | None:
    """The system calibration for ``gpus`` x ``gpu`` on ``interconnect``: that GPU count if one
    was measured (user cache before shipped), else the nearest count (larger on a tie)."""
    same_link = [
        c
        for c in _system_files(gpu.id, str(cache_dir()))
        if c.system is not None and c.system.interconnect == interconnect
    ]
    if not same_link:
        return None
    return min(same_link, key=lambda c: (abs(c.system.gpus - gpus), -c.system.gpus))  # type: ignore[union-attr]


def with_system_collectives(
    cal: Calibration | None, gpu: GPUSpec, collective: str, gpus: int, interconnect: str
) -> Calibration | None:
    """``cal`` completed by the system calibration found for this GPU and system.

    Unchanged when ``cal`` was transferred from another GPU (collectives are topology-specific),
    already has ``collective`` on ``gpus`` GPUs, or has its own collectives and the system file
    is not for this GPU count either."""
    if cal is not None and cal.transferred_from:
        return cal
    own = cal.parameters.collectives if cal is not None else {}
    if f"{collective}@{gpus}" in own:
        return cal
    found = system_calibration(gpu, gpus, interconnect)
    if found is None or (own and found.system is not None and found.system.gpus != gpus):
        return cal
    if cal is None:
        return found
    params = cal.parameters.model_copy(update={"collectives": dict(found.parameters.collectives)})
    return cal.model_copy(update={"parameters": params, "collectives_from": found.label})


def find_calibrations(gpu_id: str | None = None) -> list[dict[str, Any]]:
    """Every calibration a prediction can find, for ``gpu_id`` or all GPUs: one dict per file
    with gpu, system, kind, source (user/shipped), date, what it holds, provenance, path and
    whether it is the one used by default (a user file shadows a shipped one)."""
    cache = cache_dir()
    rows: list[dict[str, Any]] = []
    dirs = [("user", cache / "calibrations", "*.yaml"),
            ("shipped", _paths.results_dir(), f"*/{'calibration.yaml'}")]  # fmt: skip
    for source, root, pattern in dirs:
        for path in sorted(root.glob(pattern)):
            cal = read_calibration_file(path)
            if gpu_id in (None, cal.gpu_id):
                rows.append(_row(cal, source, "device", path))
    for source, root in _system_dirs(str(cache)):
        pattern = f"{gpu_id}-x*/{SYSTEM_FILE}" if gpu_id else f"*-x*/{SYSTEM_FILE}"
        for path in sorted(root.glob(pattern)):
            rows.append(_row(read_calibration_file(path), source, "collectives", path))
    seen: set[tuple[str, str]] = set()
    for row in rows:  # user rows come first: they shadow shipped ones of the same key
        key = (row["gpu"], row["system"])
        row["default"] = key not in seen
        seen.add(key)
    return rows


def _row(cal: Calibration, source: str, kind: str, path: Path) -> dict[str, Any]:
    env = cal.environment
    names = {"driver_version_string": "driver", "driver": "driver", "cuda_runtime_version": "CUDA",
             "cuda": "CUDA", "cupy_version": "CuPy", "torch_version": "torch", "torch": "torch",
             "nccl": "NCCL"}  # fmt: skip
    versions = [f"{name} {env[k]}" for k, name in names.items() if env.get(k)]
    holds = (
        sorted(cal.parameters.collectives)
        if kind == "collectives"
        else sorted(k for k in cal.errors if not k.startswith("collective:"))
    )
    return {
        "gpu": cal.gpu_id,
        "system": str(cal.system) if cal.system else "1 GPU",
        "kind": kind,
        "source": source,
        "created": f"{cal.created:%Y-%m-%d}",
        "device": cal.device_name,
        "versions": ", ".join(versions),
        "holds": holds,
        "path": str(path),
        "label": cal.label,
    }


def load_calibration(
    id_or_path: str | Path | Calibration, for_gpu: GPUSpec | str | None = None
) -> Calibration:
    """Load a calibration by GPU id (user cache, then shipped) or file path.

    With ``for_gpu`` naming another GPU, carry over what transfers (efficiencies relative to the
    datasheet, latencies and per-element issue rates in cycles, instruction-mix and alignment
    effects) and take rates from the target's spec (bandwidths; SMs x clock). Without it, a
    calibration is only valid for its own GPU.
    """
    if isinstance(id_or_path, Calibration):
        cal = id_or_path
    else:
        from gpumodel._validators import check_name

        text = check_name(id_or_path, "calibration")
        path = Path(text)
        if path.suffix in (".yaml", ".yml", ".json") or path.exists():
            cal = read_calibration_file(path)
        else:
            from gpumodel.errors import UnknownGPUError

            try:
                gpu = get_gpu(text)
            except UnknownGPUError:
                raise CalibrationError(
                    f"calibration {text!r} is neither a file nor a GPU id (give a calibration "
                    "YAML, a GPU id from `gpumodel specs list`, or 'none')"
                ) from None
            found = default_calibration(gpu)
            if found is None:
                raise CalibrationError(
                    f"no calibration found for {gpu.id} (looked in {user_calibration_path(gpu.id)}"
                    f" and {shipped_calibration_path(gpu.id)}); run `gpumodel validate` on one"
                )
            cal = found
    if for_gpu is None:
        return cal
    target = get_gpu(for_gpu)
    if target.id == cal.gpu_id:
        return cal
    return transfer(cal, target)


def _scaled_rates(host: HostLinkParams, link: float) -> HostLinkParams:
    """Host-link rates x ``link`` (the ratio of the two PCIe links); fixed costs kept."""
    return HostLinkParams(
        **{
            k: (v * link if v is not None and k.endswith("bytes_per_s") else v)
            for k, v in host.model_dump().items()
        }
    )


def transfer(cal: Calibration, target: GPUSpec) -> Calibration:
    """Carry a calibration to ``target``: relative efficiencies and cycle latencies transfer,
    absolute rates are rescaled by the ratio of the two specs."""
    source = get_gpu(cal.gpu_id)
    if source.vendor != target.vendor:
        raise CalibrationError(
            f"cannot transfer a calibration of {source.id} ({source.vendor}) to {target.id} "
            f"({target.vendor}): the kernels and their libraries differ"
        )
    p = cal.parameters
    # L2 bandwidth scales with SMs x clock (each SM's L2 slice path is per-clock)
    l2_scale = (target.sm_count * target.boost_clock_hz) / (source.sm_count * source.boost_clock_hz)
    host, host_wall = p.host, p.host_wall
    if source.interconnect and target.interconnect:
        link = (
            target.interconnect.pcie.per_direction_bytes_per_s
            / source.interconnect.pcie.per_direction_bytes_per_s
        )
        host = _scaled_rates(host, link)
        host_wall = _scaled_rates(host_wall, link) if host_wall is not None else None
    l2_hot = p.l2_hot_max_bytes
    if l2_hot is not None:
        l2_hot *= target.l2_cache_bytes / source.l2_cache_bytes
    params = p.model_copy(
        update={
            "l2_bandwidth_bytes_per_s": (
                p.l2_bandwidth_bytes_per_s * l2_scale if p.l2_bandwidth_bytes_per_s else None
            ),
            "l2_hot_max_bytes": l2_hot,
            "host": host,
            "host_wall": host_wall,
            "collectives": {},  # topology-specific: never carried
            # power per SM-clock^3 is an architecture's; another generation draws differently
            "power": p.power if p.power and p.power.architecture == target.architecture else None,
            "family_time_scale_span_s": carried_spans(p.family_time_scale_span_s, source, target),
        }
    )
    if source.architecture != target.architecture:
        # another generation's kernels: never below what the target's own are published to do
        from gpumodel.published import apply_floors

        params, applied = apply_floors(params, target)
        params = params.model_copy(update={"published_floor_scale": applied})
    return cal.model_copy(
        update={
            "gpu_id": target.id,
            "transferred_from": cal.gpu_id,
            "parameters": params,
            "errors": {},
            "measurements": [],
        }
    )


def carried_spans(
    spans: dict[str, tuple[float, float]], source: GPUSpec, target: GPUSpec
) -> dict[str, tuple[float, float]]:
    """Trace-fitted scales' spans on ``target``. A span is the traced kernels' predicted time
    on ``source``; the same kernels are priced on ``target`` in the ratio of the roof their
    bound names: memory by DRAM bandwidth, compute by SMs x boost clock; latency-bound ones
    (launch and floor) as they were. So a kernel of a traced shape stays inside its span on
    another GPU (the ratio is the roofs', not the calibrated efficiencies', which also carry)."""
    ratio = {
        "memory": source.memory_bandwidth_bytes_per_s / target.memory_bandwidth_bytes_per_s,
        "compute": (source.sm_count * source.boost_clock_hz)
        / (target.sm_count * target.boost_clock_hz),
    }
    out = {}
    for key, (lo, hi) in spans.items():
        f = ratio.get(key.rsplit("/", 1)[-1], 1.0)
        out[key] = (lo * f, hi * f)
    return out


# What a prediction says it used when no calibration applies.
DATASHEET_LABEL = "none (datasheet only)"


def calibration_label(cal: Calibration | None) -> str:
    return cal.label if cal is not None else DATASHEET_LABEL


def calibration_short(label: str, dated: bool = True) -> str:
    """A calibration label for a table cell: 'datasheet only', 'measured 2026-11-22' or
    'from h100-sxm 2026-11-22' (the full label, with its path, belongs in a footnote);
    ``dated=False``: without the date (a narrow table whose footnote dates each)."""
    if label == DATASHEET_LABEL:
        return "datasheet only"
    words = label.split()
    date = words[2] if len(words) > 2 and dated else ""
    if "transferred from " in label:
        return f"from {label.split('transferred from ')[1].rstrip(')')} {date}".strip()
    return f"measured {date}".strip()


def choose_calibration(
    gpu: GPUSpec, calibration: Any = None, calibration_from: str | Path | None = None,
    *, gpus: int = 1,
) -> Any:
    """What to pass as ``calibration=`` for ``gpu``: ``calibration_from`` (a GPU id or file)
    transferred to it, else ``calibration`` as given (None: the best found for ``gpu``). In a
    comparison of ``gpus`` > 1 GPUs, a GPU of another vendor than the calibration's (whose
    kernels and libraries differ: ``transfer`` refuses it) is priced on its datasheet, and
    ``mixed_calibration_warning`` says why; asked for one GPU, that is an error."""
    if calibration_from is not None and calibration is not None:
        raise SpecError("pass calibration or calibration_from, not both")
    if calibration_from is None:
        return calibration
    if gpus > 1:
        source = load_calibration(calibration_from)
        if get_gpu(source.gpu_id).vendor != gpu.vendor:
            return "none"
    return load_calibration(calibration_from, for_gpu=gpu)


def mixed_calibration_warning(labels: dict[str, str]) -> list[str]:
    """GPU id -> calibration label of side-by-side results: a one-line warning when some come
    from measurements and others from the datasheet alone (not like for like: on an H100 the
    datasheet-only LLM step was off by 24-30%, validation/results/h100-sxm/llm-report.md)."""
    bare = [g for g, label in labels.items() if label == DATASHEET_LABEL]
    if not bare or len(bare) == len(labels):
        return []
    measured = [g for g in labels if g not in bare]
    if all("transferred from" in labels[g] or g in labels[g] for g in measured) and any(
            "transferred from" in labels[g] for g in measured):  # fmt: skip
        # a calibration carried to every GPU of its vendor (``choose_calibration``)
        return [f"{', '.join(bare)}: datasheet roofline only (another vendor: a calibration "
                f"carries to its own vendor's GPUs), {', '.join(measured)}: calibrated; not "
                "like for like (on an H100 the datasheet-only LLM step was off by 24-30%): "
                "--calibration none puts all on the datasheet"]  # fmt: skip
    return [f"{', '.join(bare)}: datasheet roofline only, {', '.join(measured)}: calibrated; "
            "not like for like (on an H100 the datasheet-only LLM step was off by 24-30%): "
            "--calibration-from h100 (calibration_from) carries one calibration to all, "
            "--calibration none puts all on the datasheet"]  # fmt: skip


def datasheet_only_note(labels: dict[str, str]) -> list[str]:
    """GPU id -> calibration label: a one-line note when every result is on the datasheet alone
    (``mixed_calibration_warning`` covers a mix): no efficiency is applied, so times are lower
    bounds (an 8192^3 bf16 GEMM at 99.9% of an A100's peak, where cuBLAS reaches ~80%)."""
    bare = [g for g, label in labels.items() if label == DATASHEET_LABEL]
    if not bare or len(bare) != len(labels):
        return []
    return [f"{', '.join(bare)}: datasheet roofline only, no measured efficiency: times are lower "
            "bounds; --calibration-from h100 carries a measured calibration to it"]  # fmt: skip


def mixed_collectives_warning(gpus: Sequence[GPUSpec], counts: Any, carried: bool) -> list[str]:
    """A one-line warning when side-by-side GPUs price their collectives on ``counts`` GPUs
    (the tensor-parallel sizes > 1 of a sweep) from different sources: a measured NCCL line
    (a system calibration, ``with_system_collectives``) for some, NCCL's cost model for the
    others. On 4 x H200 the measured all-reduce of 1 MiB took 48.8 us where the model prices
    14.9 us on 4 x H100, which made an H200 look slower than an H100 at tp 4. ``carried``:
    one calibration carried to all (``calibration_from``), which uses no system file."""
    from gpumodel.ops.collectives import AllReduce

    sizes = sorted({int(n) for n in counts if int(n) > 1})
    if carried or len(gpus) < 2 or not sizes:
        return []
    measured = [g.id for g in gpus
                if any(system_calibration(g, n, AllReduce(bytes=1, gpus=n).topology(g).intra.kind)
                       is not None for n in sizes)]  # fmt: skip
    if not measured or len(measured) == len(gpus):
        return []
    modelled = [g.id for g in gpus if g.id not in measured]
    return [f"collectives: {', '.join(measured)} from measured NCCL lines (a system "
            f"calibration), {', '.join(modelled)} from NCCL's cost model; rows above tp 1 "
            "compare a measurement with a model (gpumodel calibrations lists the system files)"]  # fmt: skip


def resolve(calibration: Any, gpu: GPUSpec) -> Calibration | None:
    """What ``predict(..., calibration=...)`` accepts -> a Calibration for ``gpu`` or None."""
    if calibration is None:
        return default_calibration(gpu)
    if isinstance(calibration, str) and calibration.lower() in ("none", "datasheet"):
        return None
    cal = load_calibration(calibration)
    if cal.gpu_id != gpu.id:
        # the file itself where one was given (--calibration-from GPU_ID would carry that GPU's
        # shipped calibration, not this one)
        source = calibration if isinstance(calibration, (str, Path)) else cal.gpu_id
        raise CalibrationError(
            f"calibration {cal.label} is for {cal.gpu_id}, not {gpu.id}; transfer it explicitly "
            f"with load_calibration(..., for_gpu=...) or --calibration-from {source}"
        )
    return cal


__all__ = [
    "DATASHEET_LABEL",
    "Calibration",
    "CalibrationParams",
    "CollectiveParams",
    "FamilyError",
    "GemmParams",
    "GpumodelError",
    "HostLinkParams",
    "PowerParams",
    "SystemKey",
    "atomic_write_text",
    "calibration_label",
    "choose_calibration",
    "default_calibration",
    "find_calibrations",
    "load_calibration",
    "read_calibration_file",
    "resolve",
    "system_calibration",
    "transfer",
    "with_system_collectives",
]
