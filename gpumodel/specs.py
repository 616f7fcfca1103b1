"""GPU spec models and the spec library: load YAML, resolve ids and aliases, say where it came from.

YAML keys are short and carry units in the value (``bandwidth: 3.35 TB/s``); the Python
attributes carry the unit in the name (``bandwidth_bytes_per_s``). Models are frozen and forbid
unknown keys, so a typo in a spec file is an error naming the key.

Search order (later wins on an id clash): the shipped ``specs/`` directory, then each directory
of ``GPUMODEL_SPECS_PATH`` (``os.pathsep``-separated), then directories passed explicitly
(``--specs-dir``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from gpumodel import _paths
from gpumodel._validators import (
    MAX_BYTES,
    Checked,
    NonEmptyStr,
    PositiveFloat,
    SmallCount,
    UsdPerGpuHour,
)
from gpumodel.errors import GpumodelError, SpecError, UnitError, UnknownGPUError
from gpumodel.units import Dimension, parse_quantity

M = TypeVar("M", bound=BaseModel)
DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")
Dtype = Literal["fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4"]
Unit = Literal["tensor", "vector"]
BYTES_PER_ELEMENT: dict[str, float] = {
    "fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "fp4": 0.5,
}  # fmt: skip


def _quantity(
    dimension: Dimension, positive: bool = False, most: float = 1e21, least: float = 0.0
) -> Any:
    """Parse a quantity string (or an SI number) of ``dimension``; rates are > 0 (a 0 TB/s
    bandwidth or 0 FLOP/s peak would divide by zero downstream) and all are bounded."""

    def parse(value: Any) -> float:
        try:
            number = parse_quantity(value, dimension)
        except UnitError as exc:
            raise SpecError(str(exc)) from None
        if positive and number <= 0:
            raise SpecError(f"must be greater than 0, got {value!r}")
        if number < least:
            raise SpecError(f"{value!r} is below any hardware (min {least:.0e} SI units)")
        if number > most:
            raise SpecError(f"{value!r} is beyond any hardware (max {most:.0e} SI units)")
        return number

    return BeforeValidator(parse)


Bytes = Annotated[float, _quantity("bytes", most=MAX_BYTES)]
# rates and clocks have a floor as well as a ceiling: no GPU runs below 1 MB/s, 1 MFLOP/s or
# 1 MHz (a 1e-300 Hz clock passed "> 0" and gave 10^304 s)
BytesPerS = Annotated[float, _quantity("bytes_per_s", positive=True, least=1e6)]
FlopPerS = Annotated[float, _quantity("flop_per_s", positive=True, least=1e6)]
Hertz = Annotated[float, _quantity("hz", positive=True, least=1e6)]
Watts = Annotated[float, _quantity("watts", positive=True, least=1e-3)]
Seconds = Annotated[float, _quantity("seconds", most=1e9)]


class _Frozen(Checked):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True, populate_by_name=True)


class SMLimits(_Frozen):
    """Per-SM (NVIDIA) or per-CU (AMD) resource limits used by the occupancy model."""

    warp_size: SmallCount = Field(32)
    max_threads_per_sm: SmallCount = Field(alias="max_threads")
    max_warps_per_sm: SmallCount = Field(alias="max_warps")
    max_blocks_per_sm: SmallCount = Field(alias="max_blocks")
    max_threads_per_block: SmallCount = Field(1024, alias="max_threads_per_block")
    registers_per_sm: SmallCount = Field(65536, alias="registers")
    registers_per_block: SmallCount = Field(65536, alias="max_registers_per_block")
    max_registers_per_thread: SmallCount = Field(255)
    register_allocation_unit: SmallCount = Field(256, description="registers, allocated per warp")
    warp_allocation_granularity: SmallCount = Field(4)
    shared_memory_per_sm_bytes: Bytes = Field(alias="shared_memory", gt=0)
    shared_memory_carveouts_kib: tuple[int, ...] = Field(
        (), alias="carveouts_kib", description="selectable shared-memory sizes per SM, KiB"
    )
    shared_memory_per_block_default_bytes: Bytes = Field(48 * 1024, alias="shared_memory_per_block")
    shared_memory_per_block_optin_bytes: Bytes = Field(alias="shared_memory_per_block_optin")
    shared_memory_allocation_unit_bytes: Bytes = Field(256, alias="shared_memory_unit")
    reserved_shared_memory_per_block_bytes: Bytes = Field(0, alias="reserved_shared_memory")


class MemorySpec(_Frozen):
    type: str
    capacity_bytes: Bytes = Field(alias="capacity", gt=0)
    bandwidth_bytes_per_s: BytesPerS = Field(alias="bandwidth")
    bus_width_bits: int | None = None


class NVLinkSpec(_Frozen):
    generation: SmallCount
    links: int | None = Field(None, gt=0)
    bandwidth_bytes_per_s: BytesPerS = Field(
        alias="bandwidth", description="per GPU, both directions summed (datasheet convention)"
    )
    direction: Literal["bidirectional"] = Field(
        "bidirectional",
        description="bandwidth counts both directions together; one direction is half of it",
    )

    @property
    def per_direction_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s / 2


class PCIeSpec(_Frozen):
    generation: int = Field(ge=1, le=7)
    lanes: SmallCount = Field(16)

    @property
    def per_direction_bytes_per_s(self) -> float:
        """Theoretical per-direction bandwidth from the line rate and encoding.

        Gen1/2 use 8b/10b, Gen3+ 128b/130b (PCI-SIG base specs); Gen6 FLIT ~ 242/256.
        """
        gt_per_lane = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0, 7: 128.0}[self.generation]
        encoding = {1: 0.8, 2: 0.8, 6: 242 / 256, 7: 242 / 256}.get(self.generation, 128 / 130)
        return gt_per_lane * 1e9 * encoding / 8 * self.lanes


class InterconnectSpec(_Frozen):
    nvlink: NVLinkSpec | None = None
    infinity_fabric_bandwidth_bytes_per_s: BytesPerS | None = Field(
        None, alias="infinity_fabric", description="per GPU, both directions summed"
    )
    # the Infinity Fabric links of a GPU in a fully connected node, one to each peer (MI300X: 7
    # in an 8-GPU platform): a collective among n GPUs of the node uses n - 1 of them
    infinity_fabric_links: SmallCount | None = None
    pcie: PCIeSpec


class PriceSpec(_Frozen):
    usd_per_hour: UsdPerGpuHour  # the bound a user's --price meets too
    provider: str
    source: str
    date: date


class LatencySpec(_Frozen):
    """Measured latencies; empty until a calibration or a cited microbenchmark fills them."""

    dram_cycles: PositiveFloat | None = None
    l2_cycles: PositiveFloat | None = None
    fma_cycles: PositiveFloat | None = None
    kernel_launch_s: Seconds | None = Field(None, alias="kernel_launch")


class Source(_Frozen):
    title: str
    url: str | None = None
    fields: tuple[str, ...] = Field(description="top-level spec keys this source supports")
    note: str | None = None


class PeakRates(_Frozen):
    """Dense peak rates per dtype on one execution unit, FLOP/s (OP/s for int8)."""

    fp64: FlopPerS | None = None
    fp32: FlopPerS | None = None
    tf32: FlopPerS | None = None
    fp16: FlopPerS | None = None
    bf16: FlopPerS | None = None
    fp8: FlopPerS | None = None
    int8: FlopPerS | None = None
    fp4: FlopPerS | None = None

    def get(self, dtype: str) -> float | None:
        return getattr(self, dtype, None)


class Peaks(_Frozen):
    tensor: PeakRates = PeakRates()
    vector: PeakRates


# Transcendental results (exp2, rsqrt, log2, sin, cos) per clock per SM from the special function
# units: 16 on compute capability 5.x-9.0 (CUDA C++ Programming Guide, "Arithmetic
# Instructions" throughput table; NVIDIA's Hopper SM diagram: 16 special function units). An
# architecture absent here (Blackwell, AMD CDNA) has no SFU rate: its ops count exponentials
# as vector FLOPs instead.
SFU_RESULTS_PER_CLK_PER_SM = {
    "volta": 16, "turing": 16, "ampere": 16, "ampere-ga10x": 16, "ada": 16, "hopper": 16,
}  # fmt: skip


class GPUSpec(_Frozen):
    """One GPU's datasheet, parsed to SI units."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    name: NonEmptyStr
    aliases: tuple[NonEmptyStr, ...] = ()
    vendor: Literal["nvidia", "amd", "cpu"]
    architecture: NonEmptyStr
    compute_capability: str | None = Field(None, pattern=r"^\d+\.\d+$")
    sm_count: SmallCount = Field(description="SMs (NVIDIA), CUs (AMD) or cores (CPU)")
    boost_clock_hz: Hertz = Field(alias="boost_clock")
    sm_limits: SMLimits | None = None
    l2_cache_bytes: Bytes = Field(alias="l2_cache", gt=0)
    memory: MemorySpec
    peak: Peaks
    interconnect: InterconnectSpec | None = None
    tdp_watts: Watts = Field(alias="tdp")
    price: PriceSpec | None = None
    latency: LatencySpec = LatencySpec()
    notes: str | None = None
    sources: tuple[Source, ...] = Field(min_length=1)
    # where the spec was loaded from; set by the loader, not by YAML
    origin: str | None = Field(None, exclude=True)

    def peak_flops(self, dtype: str, unit: str) -> float | None:
        """Dense peak FLOP/s of ``dtype`` on ``unit`` ('tensor' or 'vector'), None if absent;
        'sfu' is the special function units' fp32 results per second (SMs x clock x
        ``SFU_RESULTS_PER_CLK_PER_SM``)."""
        if unit == "sfu":
            per_clk = SFU_RESULTS_PER_CLK_PER_SM.get(self.architecture.lower())
            if dtype != "fp32" or self.vendor != "nvidia" or not per_clk:
                return None
            return per_clk * self.sm_count * self.boost_clock_hz
        return getattr(self.peak, unit).get(dtype)

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory.bandwidth_bytes_per_s

    @property
    def memory_bytes(self) -> float:
        return self.memory.capacity_bytes

    def units_for(self, dtype: str) -> list[str]:
        return [u for u in ("tensor", "vector") if self.peak_flops(dtype, u)]


# ---------------------------------------------------------------------------------------------
# loading


def format_validation_error(exc: ValidationError, where: str) -> str:
    """First pydantic error as one line: 'file: field.path: message'."""
    errors = exc.errors()
    # a typo'd key also makes the real key "missing": name the typo first
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif err["type"] == "missing":
        msg = "required key is missing"
    more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{where}: {loc}: {msg}{more}" if loc else f"{where}: {msg}{more}"  # a whole-object check


def read_yaml(path: Path) -> Any:
    """A YAML data file, read through the bounded reader (gpumodel._io: size, UTF-8, depth,
    no aliases)."""
    from gpumodel._io import read_yaml as _read

    return _read(path, "YAML file")


def load_yaml_model(
    path: str | Path, model: type[M], what: str, unsourced_ok: set[str] | None = None
) -> M:
    """Parse one YAML data file into ``model`` (its ``origin`` set to the path). Errors name the
    file and the field. With ``unsourced_ok``, every other top-level key must be covered by an
    entry of the file's ``sources:``."""
    from gpumodel._io import as_path

    path = as_path(path, f"{what} file")
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping of {what} fields at the top level")
    try:
        obj = model.model_validate({**data, "origin": str(path)})
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, str(path))) from None
    if unsourced_ok is not None:
        covered = {f for s in obj.sources for f in s.fields}  # type: ignore[attr-defined]
        missing = sorted(k for k in data if k not in unsourced_ok and k not in covered)
        if missing:
            raise SpecError(f"{path}: sources: no source covers {', '.join(missing)}")
    return obj


_UNSOURCED_OK = {"id", "name", "aliases", "vendor", "notes", "sources", "latency", "price"}


def load_spec_file(path: str | Path) -> GPUSpec:
    """Parse and validate one spec file; errors name file, field path and expected unit."""
    return load_yaml_model(path, GPUSpec, "spec", _UNSOURCED_OK)


def search_dirs(extra: Iterable[str | Path] = ()) -> list[Path]:
    dirs = [_paths.specs_dir()]
    env = os.environ.get("GPUMODEL_SPECS_PATH", "")
    dirs += [Path(p) for p in env.split(os.pathsep) if p]
    dirs += [Path(p) for p in extra]
    return dirs


def index_yaml_dirs(
    dirs: Iterable[Path], load: Callable[[Path], Any], kind: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """Every ``*.yaml``/``*.yml`` in ``dirs`` loaded with ``load``: (by id, alias -> id). Later
    directories override earlier ones; a missing directory is an error naming ``kind``."""
    items: dict[str, Any] = {}
    for d in dirs:
        if not d.is_dir():
            raise SpecError(f"{kind} directory {d} does not exist")
        for f in sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml")):
            item = load(f)
            items[item.id] = item
    aliases = {a.lower(): item.id for item in items.values() for a in item.aliases}
    return items, aliases


def find_by_name(name: str, items: dict[str, Any], aliases: dict[str, str]) -> Any | None:
    """An item by id or alias, case-insensitive; None when neither matches."""
    if not isinstance(name, str):
        raise SpecError(f"expected a name (a string), got {type(name).__name__} {name!r:.40}")
    key = name.strip().lower()
    if key in items:
        return items[key]
    return items[aliases[key]] if key in aliases else None


# A spec file's top-level ``id:`` and flow-style ``aliases: [...]`` lines, read without parsing
# the YAML, so that looking up one GPU validates one file, not every file on the search path
_ID_LINE = re.compile(r"""^id:[ \t]*(["']?)([^"'\s#]+)\1[ \t]*(?:#.*)?$""", re.MULTILINE)
_ALIASES_LINE = re.compile(r"^aliases:[ \t]*\[([^\]\n]*)\][ \t]*(?:#.*)?$", re.MULTILINE)


def _peek_names(path: Path) -> tuple[str, tuple[str, ...]] | None:
    """(id, aliases) of a spec file from its top-level lines, or None when they are not
    written as one ``id: x`` line and at most one ``aliases: [a, b]`` line (then the file is
    parsed)."""
    from gpumodel._io import max_input_bytes, read_text

    try:  # bounded, regular files only (a FIFO named *.yaml cannot hang the lookup)
        text = read_text(path, "spec", max_input_bytes(yaml=True))
    except GpumodelError:
        return None  # load_spec_file names the problem
    ids = _ID_LINE.findall(text)
    alias_lines = _ALIASES_LINE.findall(text)
    if (
        len(ids) != 1
        or len(alias_lines) > 1
        or len(re.findall(r"^aliases:", text, re.MULTILINE)) != len(alias_lines)
    ):
        return None
    aliases = (
        tuple(a.strip().strip("\"'") for a in alias_lines[0].split(",")) if alias_lines else ()
    )
    return ids[0][1], tuple(a for a in aliases if a)


class SpecLibrary:
    """All specs found on the search path, indexed by id and alias. A spec file is parsed and
    validated when a lookup first needs it (``specs``/``ids`` load them all)."""

    def __init__(self, dirs: Iterable[Path]):
        self.dirs = list(dirs)
        self._files: dict[str, tuple[Path, tuple[str, ...]]] = {}  # id -> (file, aliases)
        self._loaded: dict[str, GPUSpec] = {}
        for d in self.dirs:
            if not d.is_dir():
                raise SpecError(f"specs directory {d} does not exist")
            for f in sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml")):
                names = _peek_names(f)
                if names is None:  # not in the usual layout: parse it now
                    spec = load_spec_file(f)
                    names = (spec.id, spec.aliases)
                    self._loaded[spec.id] = spec
                else:
                    self._loaded.pop(names[0], None)  # a later file overrides a parsed one
                self._files[names[0]] = (f, names[1])
        # an alias names the first spec on the search path that claims it (the shipped one
        # before a user's copy that kept its aliases: overriding is by id; `specs check` warns)
        self._aliases: dict[str, str] = {}
        for spec_id, (_, aliases) in self._files.items():
            for a in aliases:
                self._aliases.setdefault(a.lower(), spec_id)

    def _load(self, spec_id: str) -> GPUSpec:
        spec = self._loaded.get(spec_id)
        if spec is None:
            path, aliases = self._files[spec_id]
            spec = load_spec_file(path)
            if spec.id != spec_id or tuple(spec.aliases) != aliases:
                raise SpecError(f"{path}: its id/aliases lines ({spec_id}: {list(aliases)}) do "
                                f"not read as the YAML does ({spec.id}: {list(spec.aliases)})")  # fmt: skip
            self._loaded[spec_id] = spec
        return spec

    @property
    def specs(self) -> dict[str, GPUSpec]:
        """Every spec, loaded and validated (id -> spec)."""
        return {i: self._load(i) for i in self._files}

    @property
    def aliases(self) -> dict[str, str]:
        return dict(self._aliases)

    def get(self, name: str | GPUSpec) -> GPUSpec:
        if isinstance(name, GPUSpec):
            return name
        from gpumodel._validators import check_name

        key = check_name(name, "GPU").strip().lower()
        spec_id = key if key in self._files else self._aliases.get(key)
        if spec_id is None:
            raise UnknownGPUError(name, list(self._files) + list(self._aliases))
        return self._load(spec_id)

    def ids(self) -> list[str]:
        return sorted(self.specs)


@lru_cache(maxsize=16)
def _library(extra: tuple[str, ...], env: str) -> SpecLibrary:
    return SpecLibrary(search_dirs(extra))


def library(specs_dirs: Iterable[str | Path] = ()) -> SpecLibrary:
    """The spec library for the default search path plus ``specs_dirs`` (cached)."""
    from gpumodel._validators import check_paths

    return _library(
        check_paths(specs_dirs, "specs_dirs"), os.environ.get("GPUMODEL_SPECS_PATH", "")
    )


def get_gpu(name: str | GPUSpec, specs_dirs: Iterable[str | Path] = ()) -> GPUSpec:
    """Look up a GPU by id or alias (case-insensitive); unknown names raise UnknownGPUError."""
    return library(specs_dirs).get(name)


def list_gpus(specs_dirs: Iterable[str | Path] = ()) -> list[GPUSpec]:
    lib = library(specs_dirs)
    return [lib.specs[i] for i in lib.ids()]


def spec_json_schema() -> dict[str, Any]:
    return GPUSpec.model_json_schema(by_alias=True)
