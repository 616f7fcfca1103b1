"""Collectives across GPUs: all-reduce, all-gather, reduce-scatter, broadcast, all-to-all, send/recv.

    import gpumodel as gm
    p = gm.predict(gm.ops.AllReduce(bytes="28GB", gpus=8), "h100")
    p.time_s, p.details["algorithm"], p.details["why"], p.details["busbw_bytes_per_s"]

``bytes`` is the size nccl-tests reports for the collective (the whole array): each rank's buffer
for all-reduce and broadcast, the gathered output for all-gather, the input before scattering for
reduce-scatter, each rank's send buffer for all-to-all, the message for send/recv.

Where the GPUs sit comes from, in order: ``system`` (a system spec id or YAML path: intra-node
link, per-GPU network), else the GPU spec (NVLink/NVSwitch when it has NVLink, else PCIe; one
400 Gb/s NIC per GPU between nodes). ``link`` forces one link kind for all traffic.

The time is the alpha-beta cost (gpumodel.model.comm) of the algorithm NCCL would pick; with a
calibration holding ``collectives["all_reduce@<n>"]`` (what `gpumodel validate --collectives`
fits) the measured latency floor and bus bandwidth replace the datasheet. With no calibration
given, the fit saved for this GPU and system (GPU count, in-node link) is found by itself
(user cache, then ``validation/results/<gpu>-x<n>/``); the prediction's ``calibration`` names it.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from gpumodel._validators import MAX_BYTES, GpuCount, SmallCount
from gpumodel.errors import GpumodelError, SpecError, UnitError, UnsupportedError
from gpumodel.model import comm
from gpumodel.ops.base import Dtype, KernelWork, Op, element_bytes
from gpumodel.prediction import Bound, Prediction, Term
from gpumodel.specs import GPUSpec
from gpumodel.units import format_quantity, format_time, parse_quantity

LinkChoice = Literal["auto", "nvlink", "pcie", "network"]
Algorithm = Literal[
    "auto",
    "ring",
    "tree",
    "recursive_doubling",
    "rabenseifner",
    "hierarchical",
    "flat_ring",
    "pairwise",
    "p2p",
]
# Between nodes without a system spec: one 400 Gb/s InfiniBand NDR NIC per GPU (DGX H100 layout;
# NVIDIA DGX H100 user guide).
DEFAULT_NETWORK_BYTES_PER_S = 400e9 / 8
# GPUs in one node without a system spec or a placement: 8, the baseboard of every shipped
# spec's server platform (NVIDIA DGX/HGX A100, H100, H200 and B200 user guides; AMD Instinct
# MI300X/MI325X platform: 8 OAMs; PCIe servers such as the 8x A100 PCIe system spec).
DEFAULT_GPUS_PER_NODE = 8
_SCALE_UP = ("nvlink", "nvswitch", "infinity_fabric")
_MIXED = ("ring", "tree", "hierarchical", "pairwise")  # mix intra- and inter-node steps


class Collective(Op):
    """Base of the collective ops: size, ranks, placement and algorithm."""

    op_name: ClassVar[str] = "collective"
    collective: ClassVar[str] = "all_reduce"

    bytes: float = Field(
        description="nccl-tests size: the whole array (e.g. 28GB); see the op's docstring"
    )
    gpus: GpuCount = Field(description="ranks taking part (one per GPU)")
    dtype: Dtype = "bf16"
    link: LinkChoice = Field("auto", description="force one link kind for all traffic")
    nodes: GpuCount = Field(1, description="nodes the GPUs are spread over")
    gpus_per_node: GpuCount | None = Field(None, description="default: gpus / nodes")
    algorithm: Algorithm = Field("auto", description="auto: the one NCCL would pick")
    system: str | None = Field(None, description="system spec id or YAML path (topology)")
    link_bandwidth: float | None = Field(
        None, description="what-if: per-direction bandwidth of the in-node link, e.g. 32GB/s"
    )
    in_graph: bool = Field(
        False,
        description="replayed from a CUDA graph (a graph runtime's step): a measured floor of "
        "eager torch.distributed calls gives way to NCCL's own latency",
    )
    channels: SmallCount | None = Field(
        None,
        description="NCCL ring channels on the in-node link (NCCL_MAX_NCHANNELS); "
        "default: NCCL's own count where known (24 on Hopper NVLink)",
    )

    @field_validator("bytes", mode="before")
    @classmethod
    def _parse_bytes(cls, value: Any) -> float:
        try:
            number = parse_quantity(value, "bytes")
        except UnitError as exc:
            raise SpecError(str(exc)) from None
        if number <= 0:
            raise SpecError(f"must be positive, got {value!r}")
        if number > MAX_BYTES:
            raise SpecError(f"{value!r} is more than 2**60 bytes (1 EiB): no GPU holds that")
        return number

    @field_validator("system")
    @classmethod
    def _known_system(cls, value: str | None) -> str | None:
        """The system is looked up when the op is built, not only when the topology is
        needed: on one GPU an unknown name was silently ignored (fuzz campaign)."""
        if value is not None:
            from gpumodel.systems import get_system

            try:
                get_system(value)
            except GpumodelError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("link_bandwidth", mode="before")
    @classmethod
    def _parse_bandwidth(cls, value: Any) -> float | None:
        if value is None:
            return None
        try:
            number = parse_quantity(value, "bytes_per_s")
        except UnitError as exc:
            raise SpecError(str(exc)) from None
        if not 1.0 <= number <= 1e15:  # 1 B/s .. 1 PB/s: outside it is a typo, not a link
            raise SpecError(f"must be within 1 B/s and 1 PB/s, got {value!r}")
        return number

    @field_validator("gpus", "nodes")
    @classmethod
    def _at_least_one(cls, value: int, info: Any) -> int:
        if value < 1:
            raise SpecError(f"must be at least 1, got {value}")
        return value

    @field_validator("gpus_per_node", "channels")
    @classmethod
    def _positive_if_given(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise SpecError(f"must be at least 1, got {value}")
        return value

    @model_validator(mode="after")
    def _placement(self) -> Collective:
        if self.nodes > self.gpus:
            raise SpecError(f"{self.gpus} GPUs cannot span {self.nodes} nodes")
        if self.nodes > 1 and self.gpus % self.nodes:
            raise SpecError(
                f"{self.gpus} GPUs do not split evenly over {self.nodes} nodes; "
                "give a multiple of the node count"
            )
        if self.gpus_per_node is not None and self.nodes > 1:
            if self.gpus_per_node * self.nodes != self.gpus:
                raise SpecError(
                    f"gpus_per_node {self.gpus_per_node} x nodes {self.nodes} != gpus {self.gpus}"
                )
        return self

    # -----------------------------------------------------------------------------------------

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        """Collectives are priced by ``predict_on``; they have no roofline kernels."""
        return []

    def bus_factor(self) -> float:
        return comm.bus_factor(self.collective, self.gpus)

    def topology(self, gpu: GPUSpec, link_efficiency: float | None = None) -> comm.Topology:
        """Where the ranks sit and what links join them (see the module docstring)."""
        return _topology(self, gpu, link_efficiency)

    def predict_on(self, gpu: GPUSpec, calibration: Any = None) -> Prediction:
        """The collective's time on ``gpu`` (called by ``gpumodel.predict``)."""
        one_node_cal = calibration
        if calibration is not None:
            calibration = self.with_system_calibration(gpu, calibration)
        pred = _predict(self, gpu, calibration)
        return self._not_below_one_node(gpu, one_node_cal, pred) if self.nodes > 1 else pred

    def _not_below_one_node(self, gpu: GPUSpec, calibration: Any, pred: Prediction) -> Prediction:
        """A collective over several nodes is never faster than the same collective among one
        node's GPUs with the same bytes per rank: those ranks still exchange as much over the
        node's own links, now with slower links beside them. Where the one-node figure is the
        larger (a calibrated node against an uncalibrated network), it is the time."""
        per_node = self.gpus // self.nodes
        if per_node < 2:
            return pred
        shard = per_node / self.gpus if self.collective == "all_gather" else 1.0  # gathered output
        try:
            inner = self.model_copy(update={"gpus": per_node, "nodes": 1, "gpus_per_node": None,
                                            "bytes": self.bytes * shard})  # fmt: skip
            floor = inner.predict_on(gpu, calibration)
        except (ValueError, UnsupportedError):
            return pred
        if floor.time_s <= pred.time_s:
            return pred
        term = Term(name="one node's collective (floor)", value=floor.time_s - pred.time_s,
                    note=f"the same {self.collective} among {per_node} GPUs of one node takes "
                         f"{format_time(floor.time_s)} ({floor.calibration}); more nodes cannot "
                         "make it faster")  # fmt: skip
        return pred.model_copy(update={"time_s": floor.time_s, "terms": (*pred.terms, term)})

    def with_system_calibration(self, gpu: GPUSpec, calibration: Any) -> Any:
        """``calibration`` completed by the collectives fit found for this GPU, GPU count and
        in-node link (gpumodel.calibration.with_system_collectives); one node only."""
        from gpumodel.calibration import Calibration, with_system_collectives

        if self.nodes > 1 or self.gpus < 2 or not isinstance(calibration, Calibration | None):
            return calibration
        link = self.topology(gpu).intra.kind
        return with_system_collectives(calibration, gpu, self.collective, self.gpus, link)


class AllReduce(Collective):
    """Every rank ends with the elementwise sum of all ranks' ``bytes``-sized buffers."""

    op_name: ClassVar[str] = "all_reduce"
    collective: ClassVar[str] = "all_reduce"


class AllGather(Collective):
    """Every rank ends with all ranks' shards; ``bytes`` is the gathered output."""

    op_name: ClassVar[str] = "all_gather"
    collective: ClassVar[str] = "all_gather"


class ReduceScatter(Collective):
    """Ranks sum ``bytes``-sized inputs and each keeps 1/p of the sum; ``bytes`` is the input."""

    op_name: ClassVar[str] = "reduce_scatter"
    collective: ClassVar[str] = "reduce_scatter"


class Broadcast(Collective):
    """The root's ``bytes``-sized buffer is copied to every rank."""

    op_name: ClassVar[str] = "broadcast"
    collective: ClassVar[str] = "broadcast"


class AllToAll(Collective):
    """Each rank sends 1/p of its ``bytes``-sized buffer to every rank."""

    op_name: ClassVar[str] = "all_to_all"
    collective: ClassVar[str] = "all_to_all"


class SendRecv(Collective):
    """Each rank sends ``bytes`` to the next rank and receives as much from the previous one."""

    op_name: ClassVar[str] = "send_recv"
    collective: ClassVar[str] = "send_recv"


COLLECTIVE_OPS: dict[str, type[Collective]] = {
    c.op_name: c for c in (AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll, SendRecv)
}


def collective_op(name: str, **fields: Any) -> Collective:
    """Build a collective op by row name ("all_reduce", "all-reduce", "allreduce"); bad fields
    raise SpecError with one line naming the field."""
    from pydantic import ValidationError

    from gpumodel.specs import format_validation_error

    key = name.strip().lower().replace("-", "_")
    key = {"allreduce": "all_reduce", "allgather": "all_gather", "alltoall": "all_to_all",
           "reducescatter": "reduce_scatter", "sendrecv": "send_recv"}.get(key, key)  # fmt: skip
    if key not in COLLECTIVE_OPS:
        raise SpecError(f"unknown collective '{name}'; known: {', '.join(COLLECTIVE_OPS)}")
    try:
        return COLLECTIVE_OPS[key].model_validate(fields)
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, key)) from None


# ---------------------------------------------------------------------------------------------
# topology


def _scale_up(gpu: GPUSpec) -> tuple[str, float] | None:
    """The GPU's own scale-up link from its spec: (kind, per-direction bytes/s) or None."""
    ic = gpu.interconnect
    if ic is None:
        return None
    if ic.nvlink is not None:
        return "nvlink", ic.nvlink.per_direction_bytes_per_s
    if ic.infinity_fabric_bandwidth_bytes_per_s:
        return "infinity_fabric", ic.infinity_fabric_bandwidth_bytes_per_s / 2
    return None


def _nvlink_bridged(gpu: GPUSpec) -> bool:
    """PCIe-card GPUs (A100 PCIe, H100 PCIe/NVL) join NVLink in bridged pairs, not a switch."""
    parts = gpu.id.split("-")
    return "pcie" in parts or "nvl" in parts


def _link(kind: str, per_direction: float, efficiency: float | None, alpha: float | None,
          note: str) -> comm.Link:  # fmt: skip
    base_kind = "nvlink" if kind == "infinity_fabric" else kind
    eff = comm.DEFAULT_LINK_EFFICIENCY[base_kind] if efficiency is None else efficiency
    a = comm.DEFAULT_STEP_LATENCY_S[base_kind] if alpha is None else alpha
    return comm.Link(kind, a, per_direction * eff, per_direction, eff, note)


def _topology(op: Collective, gpu: GPUSpec, cal_eff: float | None) -> comm.Topology:
    from gpumodel.systems import get_system

    notes: list[str] = []
    system = get_system(op.system) if op.system else None
    own_link = _scale_up(gpu)
    if system is not None and system.gpu != gpu.id:
        notes.append(f"system {system.id} is specified with {system.gpu}; predicting on {gpu.id}")
        if system.intra_node.kind in ("nvswitch", "nvlink") and (
                own_link is None or own_link[0] != "nvlink" or _nvlink_bridged(gpu)):
            raise SpecError(f"{gpu.id} has no NVLink switch port: it cannot sit on {system.id}'s "
                            f"{system.intra_node.kind}; drop --gpu (the system's is {system.gpu}) "
                            "or drop --system")  # fmt: skip

    # placement: nodes and GPUs per node
    nodes = op.nodes
    if system is not None:
        per_node_max = system.gpus_per_node
        if nodes == 1 and op.gpus > per_node_max:
            nodes = math.ceil(op.gpus / (op.gpus_per_node or per_node_max))
            notes.append(f"{op.gpus} GPUs fill {nodes} nodes of {system.id}")
        if op.gpus % nodes:
            raise SpecError(
                f"{op.gpus} GPUs do not split evenly over {nodes} nodes of {per_node_max} "
                f"({system.id}); give a multiple of the node count"
            )
        if op.gpus // nodes > per_node_max:
            raise SpecError(f"{system.id} has {per_node_max} GPUs per node, not {op.gpus // nodes}")
    elif op.gpus_per_node is not None and nodes == 1 and op.gpus > op.gpus_per_node:
        if op.gpus % op.gpus_per_node:
            raise SpecError(f"{op.gpus} GPUs do not fill nodes of {op.gpus_per_node} evenly")
        nodes = op.gpus // op.gpus_per_node
    elif op.gpus_per_node is None and nodes == 1 and op.gpus > DEFAULT_GPUS_PER_NODE:
        # no node holds 64 GPUs on one NVLink switch: the fewest equal nodes of at most 8 (9
        # GPUs: 3 x 3; a prime count, one a node), and say so
        nodes = next(n for n in range(math.ceil(op.gpus / DEFAULT_GPUS_PER_NODE), op.gpus + 1)
                     if op.gpus % n == 0)  # fmt: skip
        notes.append(f"{op.gpus} GPUs and no nodes given: placed as {nodes} nodes of "
                     f"{op.gpus // nodes} (a server holds at most {DEFAULT_GPUS_PER_NODE}; give "
                     "nodes or a system to place them otherwise)")  # fmt: skip

    # the intra-node link
    if system is not None:
        intra_node = system.intra_node
        kind = "nvswitch" if intra_node.kind == "nvswitch" else intra_node.kind
        intra_bw = intra_node.per_direction_bytes_per_s
        intra_alpha = intra_node.latency_s
        intra_note = (f"{system.id} {intra_node.kind}: "
                      f"{format_quantity(intra_node.bandwidth_both_directions_bytes_per_s, 'B/s')} "
                      f"per GPU both directions = {format_quantity(intra_bw, 'B/s')} each way")  # fmt: skip
        if own_link is not None and kind in ("nvswitch", "nvlink") and own_link[1] < intra_bw:
            # a GPU sends no faster than its own NVLink ports: an A100 (300 GB/s each way) in a
            # DGX H100's switch (450 GB/s) gets its own rate
            intra_bw = own_link[1]
            intra_note += (f", capped at {gpu.id}'s own NVLink "
                           f"{format_quantity(intra_bw, 'B/s')} each way")  # fmt: skip
    else:
        scale_up = own_link
        intra_alpha = None
        if scale_up is not None and not (_nvlink_bridged(gpu) and op.gpus // nodes > 2):
            kind, intra_bw = scale_up
            both = 2 * intra_bw
            intra_note = (f"{gpu.id} {kind.replace('_', ' ')}: {format_quantity(both, 'B/s')} "
                          f"per GPU both directions = {format_quantity(intra_bw, 'B/s')} each way"
                          + (" (assumes a switch: every GPU sends at its full rate)"
                             if kind == "nvlink" and not _nvlink_bridged(gpu) else
                             " (bridged pair)" if kind == "nvlink" else ""))  # fmt: skip
            links = gpu.interconnect.infinity_fabric_links if gpu.interconnect else None
            peers = op.gpus // nodes - 1
            if kind == "infinity_fabric" and links and peers < links:
                # a full mesh: one link to each peer, so n GPUs of a node reach each other over
                # n - 1 of the GPU's links (2 MI300X: one link, 64 GB/s each way, not all 7)
                intra_bw = intra_bw * max(1, peers) / links
                intra_note += (f"; a full mesh of {links} links, {max(1, peers)} to this "
                               f"collective's peers: {format_quantity(intra_bw, 'B/s')} each way")  # fmt: skip
        else:
            if gpu.interconnect is None:
                raise UnsupportedError(f"{gpu.id} has no interconnect in its spec")
            pcie = gpu.interconnect.pcie
            kind, intra_bw = "pcie", pcie.per_direction_bytes_per_s
            intra_note = (
                f"PCIe Gen{pcie.generation} x{pcie.lanes}: "
                f"{format_quantity(intra_bw, 'B/s')} per direction"
            )
            if scale_up is not None:
                notes.append(f"{gpu.id}'s NVLink bridges join pairs only; "
                             f"{op.gpus // nodes} GPUs per node talk over PCIe")  # fmt: skip

    # forced link kinds
    if op.link == "pcie":
        if gpu.interconnect is None:
            raise UnsupportedError(f"{gpu.id} has no PCIe link in its spec")
        pcie = gpu.interconnect.pcie
        kind, intra_bw, intra_alpha = "pcie", pcie.per_direction_bytes_per_s, None
        intra_note = (
            f"PCIe Gen{pcie.generation} x{pcie.lanes}: "
            f"{format_quantity(intra_bw, 'B/s')} per direction (forced)"
        )
    elif op.link == "nvlink" and kind not in ("nvlink", "nvswitch", "infinity_fabric"):
        scale_up = _scale_up(gpu)
        if scale_up is None:
            raise UnsupportedError(f"{gpu.id} has no NVLink in its spec; use --link pcie")
        kind, intra_bw = scale_up
        intra_alpha = None
        intra_note = (
            f"{gpu.id} NVLink: {format_quantity(2 * intra_bw, 'B/s')} per GPU both "
            f"directions = {format_quantity(intra_bw, 'B/s')} each way (forced)"
        )

    if op.link_bandwidth is not None:
        intra_bw = op.link_bandwidth
        intra_note = (
            f"{kind} {format_quantity(intra_bw, 'B/s')} per direction (given with link_bandwidth)"
        )

    # the network between nodes
    inter: comm.Link | None = None
    net_bw: float | None = None
    net_alpha: float | None = None
    net_note = ""
    if nodes > 1 or op.link == "network":
        if system is not None and system.inter_node is not None:
            net_bw = system.inter_node.per_direction_bytes_per_s
            net_alpha = system.inter_node.latency_s
            net_note = (f"{system.id} {system.inter_node.kind}: "
                        f"{format_quantity(8 * net_bw, 'b/s')} = {format_quantity(net_bw, 'B/s')} "
                        "per GPU each way")  # fmt: skip
        elif system is not None:
            raise SpecError(
                f"system {system.id} has no inter_node network; describe one in a system file "
                "to model several nodes"
            )
        else:
            net_bw = DEFAULT_NETWORK_BYTES_PER_S
            notes.append("no system given: assumed one 400 Gb/s NIC per GPU between nodes")
            net_note = ("assumed one 400 Gb/s NIC per GPU = 50 GB/s each way (DGX H100 layout; "
                        "pass a system spec for your cluster)")  # fmt: skip
        inter = _link("network", net_bw, None, net_alpha, net_note)

    eff = cal_eff if (cal_eff is not None and kind in _SCALE_UP) else None
    intra = _link(kind, intra_bw, eff, intra_alpha, intra_note)
    if op.link == "network":
        assert inter is not None
        intra, inter, nodes = inter, None, 1
        notes.append("every rank talks over the network (--link network)")

    # the reduction: read two chunks, write their sum = 3 bytes of DRAM traffic per byte
    gamma = 3.0 / gpu.memory_bandwidth_bytes_per_s
    channels = _ring_channels(op, gpu, intra, nodes, eff, notes)
    return comm.Topology(
        gpus=op.gpus, intra=intra, nodes=nodes, inter=inter, gamma_s_per_byte=gamma,
        notes=tuple(notes), channels=channels,
    )  # fmt: skip


def _ring_channels(op: Collective, gpu: GPUSpec, intra: comm.Link, nodes: int,
                   cal_eff: float | None, notes: list[str]) -> comm.RingChannels | None:  # fmt: skip
    """NCCL's ring channels on the in-node link, for the datasheet model of one node.

    Only on an NVLink/NVSwitch whose GPUs each use all their ports (not bridged pairs), where
    NCCL's channel count is known or given. A calibrated link efficiency already holds the
    receive-only steps (it was fitted to whole collectives), so it gets none.
    """
    if intra.kind not in ("nvlink", "nvswitch"):
        if op.channels is not None:
            raise UnsupportedError(f"channels prices NCCL's ring on NVLink/NVSwitch; this link "
                                   f"is {intra.kind.replace('_', ' ')}")  # fmt: skip
        return None
    if cal_eff is not None:
        if op.channels is not None:
            notes.append("channels not applied: the calibrated link efficiency was measured "
                         "with NCCL's own channels")  # fmt: skip
        return None
    if nodes > 1 or (intra.kind == "nvlink" and _nvlink_bridged(gpu)):
        if op.channels is not None:
            raise UnsupportedError(
                "channels prices NCCL's ring on one node's NVLink/NVSwitch; this is "
                + ("several nodes" if nodes > 1 else f"{gpu.id}'s bridged NVLink")
            )
        return None
    ch = comm.nccl_ring_channels(gpu.architecture, op.channels)
    if ch is None:
        if op.channels is not None:
            raise UnsupportedError(
                f"NCCL's per-channel rate is not known for {gpu.architecture}; "
                f"known: {', '.join(comm.NCCL_CHANNEL_BYTES_PER_S)}"
            )
        notes.append(f"NCCL's ring channel count on {gpu.architecture} NVLink is not recorded: "
                     "the ring's receive-only steps are not priced (give channels=)")  # fmt: skip
    return ch


# ---------------------------------------------------------------------------------------------
# prediction


def _calibrated(op: Collective, calibration: Any) -> tuple[Any, Any, float | None, str]:
    """(exact params, transferred-from params, link efficiency, note) from a calibration."""
    if calibration is None:
        return None, None, None, ""
    table = dict(getattr(calibration.parameters, "collectives", {}) or {})
    exact = table.get(f"{op.collective}@{op.gpus}")
    same = {int(k.split("@")[1]): v for k, v in table.items()
            if k.split("@")[0] == op.collective and "@" in k}  # fmt: skip
    donor = None
    if exact is None and same:
        n_near = min(same, key=lambda n: (abs(n - op.gpus), -n))
        donor = same[n_near]
    effs = [v.link_efficiency for v in table.values() if v.link_efficiency]
    src = exact or donor
    eff = src.link_efficiency if src is not None and src.link_efficiency else None
    note = ""
    if eff is None and effs:
        effs.sort()
        eff = effs[len(effs) // 2]
        note = "link efficiency taken from the other measured collectives"
    return exact, donor, eff, note


def _setup(op: Collective, gpu: GPUSpec, calibration: Any) -> tuple:
    """(measured line, donor line, link efficiency, its note, topology, whether the measurements
    apply) of ``op`` on ``gpu`` under ``calibration``."""
    exact, donor, cal_eff, eff_note = _calibrated(op, calibration)
    topo = op.topology(gpu, cal_eff)  # applies cal_eff to NVLink/NVSwitch links only
    # measurements describe the calibrated machine's scale-up link (NVLink/NVSwitch)
    use_cal = topo.intra.kind in _SCALE_UP and op.link_bandwidth is None
    if not use_cal:
        exact = donor = cal_eff = None
    elif op.algorithm != "auto":
        exact = donor = None  # the measured line is whatever NCCL picked; keep the link efficiency
    return exact, donor, cal_eff, eff_note, topo, use_cal


def _transferred_line(op: Collective, donor: Any, topo: comm.Topology) -> tuple:
    """(alpha, bus bandwidth, extra ring steps) of a measurement at another GPU count carried to
    ``op.gpus``: busbw is ~independent of n (nccl-tests); the latency floor changes by the extra
    steps at the per-step latency."""
    step_alpha = topo.intra.alpha_s if topo.nodes == 1 else topo.slowest.alpha_s
    d_steps = comm.steps(op.collective, "ring", op.gpus) - comm.steps(
        op.collective, "ring", donor.gpus
    )
    alpha = max(donor.alpha_s + d_steps * step_alpha, 0.0)
    # a calibrated link efficiency: the link's bandwidth is already x that efficiency
    bus = topo.intra.bandwidth_bytes_per_s if donor.link_efficiency else (
        donor.bus_bandwidth_bytes_per_s)  # fmt: skip
    return alpha, bus, d_steps


def time_array(op: Collective, gpu: GPUSpec, calibration: Any, nbytes: Any) -> Any:
    """``predict(op).time_s`` for each of a numpy array of sizes ``nbytes`` (the LLM sweeps:
    one tensor-parallel all-reduce over many token counts; a gradient sync per layout), without
    the explanation ``predict`` builds. The same branches as ``predict_on``: a measured line, a
    transferred one, or the fastest NCCL algorithm; over several nodes never below one node's."""
    import numpy as np

    n = np.asarray(nbytes, dtype=float)
    if op.gpus == 1:
        return np.zeros_like(n)
    one_node_cal = calibration
    if calibration is not None:
        calibration = op.with_system_calibration(gpu, calibration)
    t = _time_array(op, gpu, calibration, n)
    per_node = op.gpus // op.nodes
    if op.nodes == 1 or per_node < 2:
        return t
    # Collective._not_below_one_node: the same exchange among one node's GPUs is the floor
    shard = per_node / op.gpus if op.collective == "all_gather" else 1.0
    inner = op.model_copy(update={"gpus": per_node, "nodes": 1, "gpus_per_node": None,
                                  "bytes": op.bytes * shard})  # fmt: skip
    try:
        floor = time_array(inner, gpu, one_node_cal, n * shard)
    except (ValueError, UnsupportedError):
        return t
    return np.maximum(t, floor)


def _nccl_pool(cands: list[Any]) -> list[Any]:
    """The candidates NCCL implements (``comm.choose`` picks the fastest of them), else all."""
    return [c for c in cands if c.nccl] or cands


# A collective replayed from a CUDA graph, timed on 2 x H200 (NVLink, NCCL 2.28.9; 1 KiB-64 MiB,
# all-reduce, all-gather, reduce-scatter, 50 calls in one graph; validation/results/
# h200-sxm-x2/nccl-graph-2026-11-29): a line per collective fitted there has a latency of 10.0-
# 11.9 us where NCCL's own model says 7.2-7.8 (x1.39-1.58), and a bus bandwidth of 175-237 GB/s
# where the eager calibrated line's is 269-333 (x0.65-0.71): the eager line's bandwidth is its
# plateau past 64 MiB, while a graph's 1-16 MiB messages run NCCL's slower protocols, which an
# eager loop hides under its 45 us per-call floor. Priced with the means; fitted on that one
# machine, no unseen check yet (4 and 8 GPUs unmeasured).
GRAPH_ALPHA_FACTOR = 1.5
GRAPH_BUS_FACTOR = 0.67


def _graph_alpha(op: Collective, n: Any, topo: comm.Topology) -> Any:
    """The latency of ``op`` replayed from a CUDA graph: NCCL's own (``baseLat`` + steps x
    ``hwLat``, the datasheet model's alpha of the algorithm NCCL would pick), not a measured
    line's floor. ``validate --collectives`` times back-to-back eager ``torch.distributed``
    calls, whose small-message floor is a Python call each: 38 us on 2 x H200 and 44 us on 4,
    where NCCL's own model on that machine says 7.8 us for a 2-GPU ring
    (validation/results/h200-sxm-x2/nccl-tuning-table.txt). A graph replays the NCCL kernel
    with no call."""
    import numpy as np

    pool = _nccl_pool(comm.candidates(op.collective, n, topo))
    shape = np.shape(n)
    times = np.stack([np.broadcast_to(c.time_s, shape) for c in pool])
    alphas = np.stack([np.broadcast_to(c.alpha_total_s, shape) for c in pool])
    chosen = np.take_along_axis(alphas, np.argmin(times, axis=0)[None], 0)[0]
    return GRAPH_ALPHA_FACTOR * chosen


def _time_array(op: Collective, gpu: GPUSpec, calibration: Any, n: Any) -> Any:
    import numpy as np

    exact, donor, _, _, topo, _ = _setup(op, gpu, calibration)
    factor = op.bus_factor()
    if exact is not None and topo.nodes == 1:
        alpha, bus = exact.alpha_s, exact.bus_bandwidth_bytes_per_s
        if op.in_graph:
            alpha, bus = _graph_alpha(op, n, topo), bus * GRAPH_BUS_FACTOR
        return alpha + n * factor / bus
    if donor is not None and topo.nodes == 1:
        alpha, bus, _ = _transferred_line(op, donor, topo)
        if op.in_graph:
            alpha, bus = _graph_alpha(op, n, topo), bus * GRAPH_BUS_FACTOR
        return alpha + n * factor / bus
    cands = comm.candidates(op.collective, n, topo)
    if op.algorithm != "auto":
        names = [c.algorithm for c in cands]
        if op.algorithm not in names:
            raise UnsupportedError(f"algorithm {op.algorithm} is not modelled for "
                                   f"{op.collective} on this topology")  # fmt: skip
        return np.broadcast_to(cands[names.index(op.algorithm)].time_s, n.shape) + 0.0
    pool = _nccl_pool(cands)
    return np.min([np.broadcast_to(c.time_s, n.shape) for c in pool], axis=0)


def _graph_alpha_term(t_alpha: float, measured_s: float, p: int, topo: comm.Topology,
                      chosen: Any, step_alpha: float) -> Term:  # fmt: skip
    """The alpha term of a measured line replayed from a CUDA graph (``_graph_alpha``)."""
    return Term(name="alpha term (latency, NCCL's own: replayed from a CUDA graph)",
                value=t_alpha,
                note=f"x{GRAPH_ALPHA_FACTOR:g} (a graph's measured latency) of base "
                     f"{format_time(topo.base_latency_s)} (NCCL baseLat) + "
                     + _steps_note(chosen, topo, step_alpha) + "; the calibrated floor on "
                     f"{p} GPUs, {format_time(measured_s)}, was timed as eager torch.distributed "
                     "calls, a Python call each, which a graph replay does not make")  # fmt: skip


def _predict(op: Collective, gpu: GPUSpec, calibration: Any) -> Prediction:
    from gpumodel.calibration import calibration_label

    cal_label = calibration_label(calibration)
    n = float(op.bytes)
    p = op.gpus
    dt_unit, dt = _vector(gpu, op.dtype)
    peak = gpu.peak_flops(dt, dt_unit) or 0.0
    factor = op.bus_factor()

    if p == 1:
        why = "one GPU: nothing to exchange, so no communication time"
        return Prediction(
            op=op.label(), gpu=gpu.id, calibration=cal_label, time_s=0.0, flops=0.0, bytes=0.0,
            arithmetic_intensity=0.0, unit=dt_unit, dtype=dt, peak_flops=peak,
            bandwidth_bytes_per_s=0.0, ridge_point=0.0, attainable_flops=0.0, bound="network",
            terms=(Term(name="communication time", value=0.0, note=why),),
            details={"collective": op.collective, "algorithm": None, "why": why,
                     "algbw_bytes_per_s": None, "busbw_bytes_per_s": 0.0, "bus_factor": 0.0,
                     "algorithms": [], "calibrated": False},
        )  # fmt: skip

    exact, donor, cal_eff, eff_note, topo, use_cal = _setup(op, gpu, calibration)
    cands = comm.candidates(op.collective, n, topo)
    names = [c.algorithm for c in cands]
    if op.algorithm == "auto":
        chosen, why = comm.choose(op.collective, n, topo, cands)
    else:
        if op.algorithm not in names:
            raise UnsupportedError(
                f"algorithm {op.algorithm} is not modelled for {op.collective} on this topology; "
                f"choose from {', '.join(names)}"
            )
        chosen = cands[names.index(op.algorithm)]
        why = f"{op.algorithm}: requested (the model ranks it #{_rank(chosen, cands)} by time)"

    terms: list[Term] = []
    cost = chosen.cost
    t_drain = 0.0  # the ring's receive-only steps: priced by the datasheet branch only
    step_alpha = topo.intra.alpha_s if topo.nodes == 1 else topo.slowest.alpha_s
    beta_note, bw = _beta_note(chosen, topo)
    if exact is not None and topo.nodes == 1:
        alpha = exact.alpha_s
        bus = exact.bus_bandwidth_bytes_per_s
        t_alpha, t_beta = alpha, n * factor / bus
        alpha_term = Term(name="alpha term (latency floor, calibrated)", value=t_alpha,
                          note=f"fitted small-message floor of {op.collective} on {p} GPUs")  # fmt: skip
        if op.in_graph:
            bus *= GRAPH_BUS_FACTOR
            t_alpha, t_beta = GRAPH_ALPHA_FACTOR * float(chosen.alpha_total_s), n * factor / bus
            alpha_term = _graph_alpha_term(t_alpha, exact.alpha_s, p, topo, chosen, step_alpha)
        time_s = t_alpha + t_beta
        why = (
            f"measured NCCL line ({op.collective}@{p}); the model would pick {chosen.algorithm}: "
            + why
        )
        terms += [
            alpha_term,
            Term(name="beta term (bandwidth, calibrated)", value=t_beta,
                 note=f"S x bus factor {factor:.3g} / busbw {format_quantity(bus, 'B/s')} "
                      "(fitted large-message plateau)"),
        ]  # fmt: skip
        calibrated = "exact"
    elif donor is not None and topo.nodes == 1:
        alpha, bus, d_steps = _transferred_line(op, donor, topo)
        if donor.link_efficiency:
            bus_note = (
                f"calibrated link efficiency {donor.link_efficiency:.3g} x "
                f"{format_quantity(topo.intra.datasheet_bytes_per_s or 0, 'B/s')}"
            )
        else:
            bus_note = f"busbw measured on {donor.gpus} GPUs"
        t_alpha, t_beta = alpha, n * factor / bus
        alpha_term = Term(name="alpha term (latency floor, transferred)", value=t_alpha,
                          note=f"floor measured on {donor.gpus} GPUs {format_time(donor.alpha_s)} "
                               f"{'+' if d_steps >= 0 else '-'} {abs(d_steps):g} ring steps x "
                               f"{format_time(step_alpha)}")  # fmt: skip
        if op.in_graph:
            bus *= GRAPH_BUS_FACTOR
            t_alpha, t_beta = GRAPH_ALPHA_FACTOR * float(chosen.alpha_total_s), n * factor / bus
            alpha_term = _graph_alpha_term(t_alpha, alpha, p, topo, chosen, step_alpha)
        time_s = t_alpha + t_beta
        why = (
            f"transferred from {op.collective}@{donor.gpus} (measured) to {p} GPUs; "
            f"model choice {chosen.algorithm}: " + why
        )
        terms += [
            alpha_term,
            Term(name="beta term (bandwidth, transferred)", value=t_beta,
                 note=f"S x bus factor {factor:.3g} / busbw {format_quantity(bus, 'B/s')} "
                      f"({bus_note}; busbw is ~independent of n)"),
        ]  # fmt: skip
        calibrated = f"transferred from {donor.gpus} GPUs"
    else:
        time_s = float(chosen.time_s)
        t_alpha = float(chosen.alpha_total_s)
        t_beta = float(cost.beta_s)
        t_drain = float(cost.drain_s)
        terms += [
            Term(name="alpha term (latency)", value=t_alpha,
                 note=f"base {format_time(topo.base_latency_s)} (NCCL baseLat) + "
                      + _steps_note(chosen, topo, step_alpha)),
            Term(name="beta term (bandwidth)", value=t_beta,
                 note=f"{format_quantity(float(cost.bytes_sent), 'B')} sent per rank; "
                      + beta_note),
            Term(name="gamma term (reduction)", value=float(cost.gamma_s),
                 note=f"{format_quantity(float(cost.bytes_reduced), 'B')} reduced per rank at "
                      f"HBM bandwidth / 3 (read two chunks, write one); overlapped with the "
                      f"transfer (NCCL reduces in its copy loop): counts only above beta"),
        ]  # fmt: skip
        if topo.channels is not None and t_drain > 0:
            ch = topo.channels
            terms.append(Term(
                name="ring receive-only steps (link idle)", value=t_drain,
                note=f"each NCCL ring loop ends with a step that only receives; the channels run "
                     f"it together, so the link idles: n/p = "
                     f"{format_quantity(n / p, 'B')} at {ch.count} channels x "
                     f"{format_quantity(ch.bytes_per_s, 'B/s')} (NCCL's per-channel Simple rate)"))  # fmt: skip
        calibrated = "link efficiency" if cal_eff is not None else ""
        if eff_note and cal_eff is not None:
            terms.append(Term(name="calibrated link efficiency", value=cal_eff, unit="x",
                              note=eff_note))  # fmt: skip
    if calibrated == "" and calibration is not None and not use_cal:
        terms.append(Term(name="calibration not applied", value=0.0, unit="",
                          note="the measured collectives were on the calibrated machine's own "
                               "links; this prediction forces another link or system"))  # fmt: skip

    alg_bw = n / time_s if time_s > 0 else math.inf
    bus_bw = alg_bw * factor
    sent = float(cost.bytes_sent)
    flops = float(cost.bytes_reduced) / element_bytes(op.dtype)
    ai = flops / sent if sent else 0.0
    bound: Bound = "latency" if t_alpha >= t_beta + t_drain else "network"
    # the per-GPU datasheet rate a plain transfer gets: in a node its link; across nodes the
    # slower of that link and the node's NICs together (NCCL spreads its channels over them)
    plain_bw = topo.intra.datasheet_bytes_per_s or bw
    plain_text = _link_desc(topo.intra, efficiency=False)
    if topo.nodes > 1 and topo.inter is not None:
        nics = topo.gpus_per_node * (topo.inter.datasheet_bytes_per_s or topo.inter.bandwidth_bytes_per_s)
        if nics < plain_bw:
            plain_bw = nics
            plain_text = (f"{topo.gpus_per_node} NICs x {_link_desc(topo.inter, efficiency=False)}"
                          f" = {format_quantity(nics, 'B/s')}")  # fmt: skip
    table = [_row(c, n, factor, c is chosen) for c in cands]
    details: dict[str, Any] = {
        "collective": op.collective,
        "algorithm": chosen.algorithm,
        "why": why,
        "algbw_bytes_per_s": alg_bw,
        "busbw_bytes_per_s": bus_bw,
        "bus_factor": factor,
        "algorithms": table,
        "calibrated": calibrated or False,
        "topology": _topo_dict(topo),
        "plain_transfer_s": comm.plain_transfer_time(n, plain_bw),
        "plain_transfer_link": plain_text,
        "ring_factor": comm.ring_factor_explanation(p) if op.collective == "all_reduce" else None,
        "notes": list(topo.notes),
    }
    advice = []
    if bound == "latency":
        advice.append("latency-bound: coalesce small collectives (bucket gradients, as DDP does) "
                      "or capture them in a CUDA graph")  # fmt: skip
    if (
        topo.multi_node
        and topo.inter is not None
        and (
            topo.gpus_per_node * topo.inter.bandwidth_bytes_per_s < topo.intra.bandwidth_bytes_per_s
        )
    ):
        advice.append("the network is the bottleneck: keep the heavy collectives inside a node "
                      "(tensor parallel on NVLink, data parallel across nodes)")  # fmt: skip
    scale_up = _scale_up(gpu)
    if topo.intra.kind == "pcie" and scale_up is not None and op.link == "pcie":
        ratio = scale_up[1] / (topo.intra.datasheet_bytes_per_s or bw)
        advice.append(f"{gpu.id} has NVLink: {ratio:.3g}x this PCIe bandwidth per direction")
    return Prediction(
        op=op.label(), gpu=gpu.id, calibration=cal_label, time_s=time_s, flops=flops, bytes=sent,
        arithmetic_intensity=ai, unit=dt_unit, dtype=dt, peak_flops=peak,
        bandwidth_bytes_per_s=bw, ridge_point=peak / bw if peak else 0.0,
        attainable_flops=min(peak, ai * bw), bound=bound, terms=tuple(terms),
        advice=tuple(advice), details=details,
    )  # fmt: skip


def _vector(gpu: GPUSpec, dtype: str) -> tuple[str, str]:
    """The unit and dtype a reduction runs in (vector units; fp32 for narrow types)."""
    from gpumodel.ops.base import vector_unit

    try:
        return vector_unit(gpu, dtype)
    except UnsupportedError:
        return "vector", "fp32"


def _rank(chosen: comm.Candidate, cands: list[comm.Candidate]) -> int:
    ordered = sorted(cands, key=lambda c: float(c.time_s))
    return ordered.index(chosen) + 1


def _steps_note(c: comm.Candidate, topo: comm.Topology, step_alpha: float) -> str:
    """'14 steps x 600 ns', or on several nodes how many steps ran at each link's latency."""
    steps = float(c.cost.steps)
    if not topo.multi_node or c.algorithm not in _MIXED or topo.inter is None:
        return f"{steps:g} steps x {format_time(step_alpha)} per step"
    a_i, a_e = topo.intra.alpha_s, topo.inter.alpha_s
    across = (c.cost.alpha_s - steps * a_i) / (a_e - a_i) if a_e != a_i else 0.0
    across = max(0.0, min(steps, round(across)))
    return (f"{steps - across:g} steps x {format_time(a_i)} in a node + {across:g} x "
            f"{format_time(a_e)} across nodes")  # fmt: skip


def _beta_note(c: comm.Candidate, topo: comm.Topology) -> tuple[str, float]:
    """How the chosen algorithm's bandwidth term was priced, and the effective rate (bytes/s)."""
    beta = float(c.cost.beta_s)
    rate = float(c.cost.bytes_sent) / beta if beta > 0 else topo.intra.bandwidth_bytes_per_s
    if not topo.multi_node:
        if rate < topo.intra.bandwidth_bytes_per_s * (1 - 1e-9):
            return (f"{_link_desc(topo.intra)}, capped by the ring channels at "
                    f"{format_quantity(rate, 'B/s')}"), rate  # fmt: skip
        return _link_desc(topo.intra), rate
    assert topo.inter is not None
    g = topo.gpus_per_node
    if c.algorithm in ("ring", "tree"):
        nics = format_quantity(g * topo.inter.bandwidth_bytes_per_s, "B/s")
        return (f"min({_link_desc(topo.intra)}, {g} NICs x ({_link_desc(topo.inter)}) = "
                f"{nics}): NCCL's channels cross nodes through every NIC of a node"), rate  # fmt: skip
    if c.algorithm == "hierarchical":
        return (f"in-node phases over {_link_desc(topo.intra)}; the n/g shard over "
                f"{_link_desc(topo.inter)}"), rate  # fmt: skip
    if c.algorithm == "pairwise":
        return (f"in-node share over {_link_desc(topo.intra)}, the rest over "
                f"{_link_desc(topo.inter)}, at once"), rate  # fmt: skip
    return f"flat: every step at the slowest link, {_link_desc(topo.slowest)}", rate


def _link_desc(link: comm.Link, efficiency: bool = True) -> str:
    ds = link.datasheet_bytes_per_s or link.bandwidth_bytes_per_s
    text = f"{link.kind} {format_quantity(ds, 'B/s')} per direction"
    if efficiency and link.efficiency != 1.0:
        text += f" x efficiency {link.efficiency:.3g} = {format_quantity(link.bandwidth_bytes_per_s, 'B/s')}"
    return text


def _row(c: comm.Candidate, n: float, factor: float, chosen: bool) -> dict[str, Any]:
    t = float(c.time_s)
    return {
        "algorithm": c.algorithm,
        "time_s": t,
        "algbw_bytes_per_s": n / t if t > 0 else math.inf,
        "busbw_bytes_per_s": n / t * factor if t > 0 else math.inf,
        "alpha_s": float(c.alpha_total_s),
        "beta_s": float(c.cost.beta_s),
        "gamma_s": float(c.cost.gamma_s),
        "steps": float(c.cost.steps),
        "formula": c.formula,
        "summary": c.summary,
        "nccl": c.nccl,
        "chosen": chosen,
        "bound": "latency" if c.latency_bound else "network",
    }


def _topo_dict(topo: comm.Topology) -> dict[str, Any]:
    def link(lk: comm.Link | None) -> dict[str, Any] | None:
        if lk is None:
            return None
        return {"kind": lk.kind, "alpha_s": lk.alpha_s,
                "per_direction_bytes_per_s": lk.datasheet_bytes_per_s,
                "efficiency": lk.efficiency, "effective_bytes_per_s": lk.bandwidth_bytes_per_s,
                "note": lk.note}  # fmt: skip

    return {
        "gpus": topo.gpus, "nodes": topo.nodes, "gpus_per_node": topo.gpus_per_node,
        "intra_node": link(topo.intra), "inter_node": link(topo.inter),
        "base_latency_s": topo.base_latency_s, "gamma_s_per_byte": topo.gamma_s_per_byte,
    }  # fmt: skip


__all__ = [
    "COLLECTIVE_OPS",
    "AllGather",
    "AllReduce",
    "AllToAll",
    "Broadcast",
    "Collective",
    "ReduceScatter",
    "SendRecv",
    "collective_op",
]
