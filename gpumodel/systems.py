"""Multi-GPU system specs (a node, or a cluster of identical nodes) as data, with sources.

A system file says which GPU a node holds, how many, how they talk inside the node
(NVSwitch, NVLink bridges or PCIe) and what each GPU gets of the network between nodes:

    id: dgx-h100
    name: NVIDIA DGX H100
    gpu: h100-sxm
    gpus_per_node: 8
    intra_node: {kind: nvswitch, bandwidth: 900 GB/s}     # per GPU, both directions summed
    inter_node: {kind: infiniband, bandwidth: 400 Gb/s, latency: 3 us}  # per GPU, one direction
    sources: [{title: ..., url: ..., fields: [gpus_per_node, intra_node, inter_node]}]

Direction conventions (they differ, as the vendors' do): ``intra_node.bandwidth`` is per GPU with
both directions summed, like NVLink datasheets and ``GPUSpec.interconnect.nvlink`` (900 GB/s on
H100 = 450 GB/s each way); ``inter_node.bandwidth`` is a NIC's line rate, which is per direction
(400 Gb/s InfiniBand NDR = 50 GB/s each way, full duplex). The models expose
``per_direction_bytes_per_s`` for both, which is what the collective model uses.

Shipped files live in ``specs/systems/``; ``get_system`` also takes a path to a user's YAML file,
and ``list_systems(extra_files)`` adds user files (``--system-file``).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field

from gpumodel import _paths
from gpumodel._validators import GpuCount, NonEmptyStr
from gpumodel.errors import SpecError, UnknownModelError
from gpumodel.specs import BytesPerS, Seconds, Source, _Frozen, load_yaml_model


class IntraNodeLink(_Frozen):
    """How GPUs of one node reach each other."""

    kind: Literal["nvswitch", "nvlink", "pcie"]
    bandwidth_both_directions_bytes_per_s: BytesPerS = Field(
        alias="bandwidth",
        gt=0,
        description="per GPU, both directions summed (datasheet convention: 900 GB/s on H100)",
    )
    direction: Literal["bidirectional"] = Field(
        "bidirectional", description="bandwidth counts both directions; one direction is half"
    )
    latency_s: Seconds | None = Field(
        None, alias="latency", description="per step (hop); None: the model's default for kind"
    )
    note: str | None = None

    @property
    def per_direction_bytes_per_s(self) -> float:
        return self.bandwidth_both_directions_bytes_per_s / 2


class InterNodeLink(_Frozen):
    """What one GPU gets of the network between nodes."""

    kind: Literal["infiniband", "ethernet", "roce"] = "infiniband"
    bandwidth_per_direction_bytes_per_s: BytesPerS = Field(
        alias="bandwidth",
        gt=0,
        description="per GPU, one direction (a NIC's line rate: 400 Gb/s NDR = 50 GB/s each way)",
    )
    direction: Literal["per_direction"] = Field(
        "per_direction", description="NIC rates are per direction; full duplex doubles the sum"
    )
    nics_per_node: int | None = Field(None, gt=0)
    latency_s: Seconds | None = Field(
        None, alias="latency", description="per step (message) between nodes"
    )
    note: str | None = None

    @property
    def per_direction_bytes_per_s(self) -> float:
        return self.bandwidth_per_direction_bytes_per_s


class SystemSpec(_Frozen):
    """A node (or a cluster of ``nodes`` identical nodes) of GPUs and its links."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    name: NonEmptyStr
    aliases: tuple[NonEmptyStr, ...] = ()
    gpu: str = Field(description="GPU spec id (see `gpumodel specs list`)")
    gpus_per_node: GpuCount
    intra_node: IntraNodeLink
    inter_node: InterNodeLink | None = None
    nodes: GpuCount = Field(1, description="default node count; ops may ask for more")
    notes: str | None = None
    sources: tuple[Source, ...] = Field(min_length=1)
    origin: str | None = Field(None, exclude=True)

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes


def load_system_file(path: str | Path) -> SystemSpec:
    """Parse and validate one system file; errors name the file and the field."""
    return load_yaml_model(path, SystemSpec, "system", _UNSOURCED_OK)


_UNSOURCED_OK = {"id", "name", "aliases", "notes", "sources", "nodes"}


@lru_cache(maxsize=64)
def _load_cached(path: str, mtime_ns: int) -> SystemSpec:
    return load_system_file(path)


def _load(path: Path) -> SystemSpec:
    """A system file, parsed once per modification (predictions look systems up often)."""
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return load_system_file(path)  # raises the one-line "cannot read" error
    return _load_cached(str(path), mtime)


def _library(extra_files: Iterable[str | Path] = ()) -> dict[str, SystemSpec]:
    from gpumodel._validators import check_paths

    extra_files = check_paths(extra_files, "system files")
    systems: dict[str, SystemSpec] = {}
    d = _paths.systems_dir()
    files = sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml")) if d.is_dir() else []
    for f in [*files, *(Path(p) for p in extra_files)]:
        spec = _load(f)
        systems[spec.id] = spec  # user files override shipped ones
    return systems


def list_systems(extra_files: Iterable[str | Path] = ()) -> list[SystemSpec]:
    """Shipped systems plus ``extra_files``, sorted by id."""
    lib = _library(extra_files)
    return [lib[k] for k in sorted(lib)]


def get_system(
    id_or_path: str | Path | SystemSpec, extra_files: Iterable[str | Path] = ()
) -> SystemSpec:
    """A system by id or alias (case-insensitive), or from a YAML file path."""
    if isinstance(id_or_path, SystemSpec):
        return id_or_path
    from gpumodel._validators import check_name

    text = check_name(id_or_path, "system").strip()
    path = Path(text)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise SpecError(f"system file {path} does not exist")
        return _load(path)
    lib = _library(extra_files)
    key = text.lower()
    if key in lib:
        return lib[key]
    for spec in lib.values():
        if key in (a.lower() for a in spec.aliases):
            return spec
    names = list(lib) + [a for s in lib.values() for a in s.aliases]
    raise UnknownModelError(text, names, what="system")


__all__ = [
    "InterNodeLink",
    "IntraNodeLink",
    "SystemSpec",
    "get_system",
    "list_systems",
    "load_system_file",
]
