"""Collective communication: nccl-tests bandwidth terms and alpha-beta costs. Pure functions.

Symbols follow Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication
Operations in MPICH" (IJHPCA 2005): ``alpha`` is the latency of one message (one step), ``beta``
the time per byte sent over a link (1 / per-direction bandwidth), ``gamma`` the time per byte
reduced, ``n`` the message size in bytes and ``p`` the number of ranks.

``n`` is what nccl-tests calls the size (``doc/PERFORMANCE.md``): the whole array — each rank's
buffer for all-reduce and broadcast, the gathered output for all-gather, the input before
scattering for reduce-scatter, each rank's send buffer for all-to-all.

Every cost is returned in named parts (``Cost.alpha_s``, ``beta_s``, ``gamma_s``, ``drain_s``) so
a prediction can show which one dominates. Published formulas add alpha, beta and gamma; NCCL
reduces inside its copy loop, so the reduction overlaps the transfer:
``Cost.total(overlap_reduction=True)`` is ``alpha + max(beta, gamma) + drain``. ``drain`` is
NCCL's receive-only ring step, when the link idles (``ring_drain_time``).

Functions accept ``n`` as a float or a numpy array (vectorised over sizes); ``p``, ``g`` and the
node count are integers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from gpumodel.errors import SpecError
from gpumodel.units import format_quantity, format_time

Collective = Literal[
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send_recv"
]
COLLECTIVES: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "all_to_all",
    "send_recv",
)
REDUCING: frozenset[str] = frozenset({"all_reduce", "reduce_scatter"})

# Default latencies when nothing is calibrated. NCCL's tuning model (src/graph/tuning.cc,
# NCCL 2.18-2.21) prices a collective as  baseLat + steps * hwLat + bytes / bandwidth  with
# baseLat (ring) 6.6 us (LL protocol) to 8.4 us (Simple) and hwLat per step, ring LL / Simple:
# NVLink 0.6 / 3.4 us, PCIe 1.0 / 5.7 us, network 2.7 / 9.6-14 us. Small messages run the LL
# protocol, so its per-step latencies are the defaults; formulas.md §5 gives the same ranges
# (NVLink hop ~0.5-2 us, network ~3-10 us).
DEFAULT_BASE_LATENCY_S = 6.6e-6
DEFAULT_STEP_LATENCY_S: dict[str, float] = {
    "nvlink": 0.6e-6,
    "nvswitch": 0.6e-6,
    "pcie": 1.0e-6,
    "network": 3.0e-6,
}
# Fraction of a link's per-direction datasheet bandwidth that NCCL's bus bandwidth reaches
# before calibration. NCCL's own model caps A100 NVLink at busBw 235 GB/s of 300 GB/s per
# direction (tuning.cc: ``if (compCap80) busBw = std::min(busBw, 235.0f)``) = 0.78; nccl-tests
# on H100 NVSwitch without NVLS report ~360-380 GB/s of 450 = 0.8-0.85 (NCCL 2.28's model: 18
# links x SM90_NVLINK_BW 20.6 GB/s = 371, ring channels found at 360 GB/s = 0.80, the same for
# all-reduce, all-gather and reduce-scatter: no per-collective factor); InfiniBand NDR reaches
# ~45-48 of 50 GB/s per NIC. These are model defaults, replaced by `link_efficiency` once
# `gpumodel validate --collectives` has measured the machine.
DEFAULT_LINK_EFFICIENCY: dict[str, float] = {
    "nvlink": 0.80,
    "nvswitch": 0.80,
    "pcie": 0.80,
    "network": 0.90,
}


# NCCL's ring channels on a scale-up link, and what one channel moves.
#
# A channel is one thread block. Each ring loop of NCCL's all-reduce, all-gather and
# reduce-scatter (src/device/all_reduce.h, all_gather.h, reduce_scatter.h: runRing) ends with a
# receive-only step (``directRecv`` / ``directRecvReduceCopy``) that sends nothing. Every channel
# starts together and carries the same share, so they run that step together and the link idles
# meanwhile; the step runs at the rate the channels' blocks copy.
#
# Per-channel rate: NCCL's own per-channel bandwidth of its Simple protocol on one node
# (src/graph/tuning.cc, perChMaxTreeBws[arch][N1], NCCL 2.18-2.28): Volta 26.5, Ampere 24.0,
# Hopper 38.7, Blackwell 2 x 38.7 GB/s.
NCCL_CHANNEL_BYTES_PER_S: dict[str, float] = {
    "volta": 26.5e9,
    "ampere": 24.0e9,
    "hopper": 38.7e9,
    "blackwell": 2 * 38.7e9,
}
# How many ring channels NCCL builds on a GPU's full NVLink/NVSwitch ports (one node): Hopper
# NV18, 24 ("24 coll channels" in NCCL 2.28.9's INFO log on 2 x H200,
# validation/results/h200-sxm-x2/nccl-tuning-table.txt; the same line in public 8 x H100 logs,
# e.g. AWS p5.48xlarge with NCCL 2.18+). Other architectures: not recorded here, so the
# receive-only step is not priced there unless a channel count is given.
NCCL_RING_CHANNELS: dict[str, int] = {"hopper": 24}


@dataclass(frozen=True)
class RingChannels:
    """NCCL's ring channels on one node: how many and what each copies (bytes/s)."""

    count: int
    bytes_per_s: float

    @property
    def total_bytes_per_s(self) -> float:
        return self.count * self.bytes_per_s


def nccl_ring_channels(architecture: str, count: int | None = None) -> RingChannels | None:
    """NCCL's ring channels for ``architecture`` (see ``NCCL_RING_CHANNELS``), or ``count``
    channels at the architecture's per-channel rate; None where NCCL's numbers are not known."""
    rate = NCCL_CHANNEL_BYTES_PER_S.get(architecture)
    if rate is None:
        return None
    count = NCCL_RING_CHANNELS.get(architecture) if count is None else count
    return None if count is None else RingChannels(count, rate)


def ring_drain_time(collective: str, n, p: int, channels: RingChannels):
    """Time of the receive-only step of NCCL's ring loops, when the link idles (seconds).

    Each loop moves one chunk per rank: ``s`` steps send it on (all-reduce ``2(p-1)``,
    all-gather and reduce-scatter ``p-1``) and one step only receives it into the output. Over the
    whole collective a rank receives ``n/p`` bytes that way, copied by the channels' blocks at
    ``channels x per-channel rate``: ``drain = (n/p) / (C x c)``. Broadcast's chain streams
    without such a step (0).

    Example, 2 x H200: all-gather of 1 GiB, 24 channels x 38.7 GB/s = 929 GB/s:
    ``2^29 / 929e9 = 578 us`` on top of ``2^29 / 360e9 = 1491 us`` of link time.
    """
    if collective not in ("all_reduce", "all_gather", "reduce_scatter") or p < 2:
        return 0.0 * np.asarray(n, dtype=float)
    return np.asarray(n, dtype=float) / p / channels.total_bytes_per_s


# ---------------------------------------------------------------------------------------------
# nccl-tests terms


def bus_factor(collective: str, n: int) -> float:
    """busbw / algbw for ``collective`` on ``n`` ranks (nccl-tests doc/PERFORMANCE.md).

    all-reduce ``2(n-1)/n``; reduce-scatter, all-gather, all-to-all ``(n-1)/n``; broadcast,
    reduce and send/recv 1. It turns algbw into a number comparable with the link's bandwidth
    and roughly independent of n. One rank moves nothing: the factor is 0.
    """
    if n < 1:
        raise SpecError(f"need at least 1 rank, got {n}")
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce", "send_recv"):
        return 1.0 if n > 1 else 0.0
    raise SpecError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")


def algbw(nbytes, time_s):
    """Algorithm bandwidth ``S / t`` (nccl-tests): the size over the time, in bytes/s."""
    n = np.asarray(nbytes, dtype=float)
    t = np.asarray(time_s, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(t > 0, n / np.where(t > 0, t, 1.0), np.inf)
    return out if out.ndim else float(out)


def busbw(nbytes, time_s, collective: str, n: int):
    """Bus bandwidth ``algbw * factor`` (nccl-tests doc/PERFORMANCE.md), bytes/s."""
    return algbw(nbytes, time_s) * bus_factor(collective, n)


def plain_transfer_time(nbytes, bandwidth_bytes_per_s):
    """``size / bandwidth``: the back-of-envelope time to push ``nbytes`` through one link.

    The seed article's example: 7e9 parameters x 4 bytes = 28 GB of gradients take
    28e9 / 32e9 = 0.875 s over PCIe at 32 GB/s and 28e9 / 300e9 = 0.0933 s over NVLink at
    300 GB/s per direction. A ring all-reduce sends ``2(n-1)/n`` times that per rank (see
    ``ring_factor_explanation``).
    """
    if np.any(np.asarray(bandwidth_bytes_per_s) <= 0):
        raise SpecError("bandwidth must be positive")
    out = np.asarray(nbytes, dtype=float) / np.asarray(bandwidth_bytes_per_s, dtype=float)
    return out if out.ndim else float(out)


def ring_factor_explanation(n: int) -> str:
    """Why a ring all-reduce on ``n`` GPUs sends ``2(n-1)/n`` times the buffer per GPU."""
    if n < 2:
        return "one GPU: nothing to exchange, no communication"
    f = 2 * (n - 1) / n
    return (
        f"ring all-reduce on {n} GPUs = reduce-scatter + all-gather. The buffer is cut into {n} "
        f"chunks of S/{n}; in the reduce-scatter each GPU passes {n - 1} chunks to its neighbour "
        f"(adding as they arrive) until every GPU owns one fully reduced chunk, then the "
        f"all-gather passes {n - 1} chunks again to give everyone every chunk. Each GPU sends "
        f"2({n}-1)/{n} x S = {f:.4g} x S, so at best the all-reduce takes {f:.4g}x the plain "
        f"size/bandwidth time (2x as n grows). That per-GPU volume is the minimum for any "
        f"all-reduce (Patarasuk & Yuan 2009), which is why NCCL uses rings for large messages."
    )


# ---------------------------------------------------------------------------------------------
# alpha-beta costs


@dataclass(frozen=True)
class Cost:
    """An alpha-beta-gamma cost split into its parts (seconds), with the work behind them.

    ``steps``: messages on the critical path (each costs one alpha); ``bytes_sent``: bytes a
    rank sends over links; ``bytes_reduced``: bytes a rank combines (``gamma`` work);
    ``drain_s``: NCCL's receive-only ring steps, when the link idles (``ring_drain_time``).
    """

    alpha_s: float
    beta_s: float
    gamma_s: float = 0.0
    steps: float = 0.0
    bytes_sent: float = 0.0
    bytes_reduced: float = 0.0
    drain_s: float = 0.0

    def total(self, overlap_reduction: bool = True):
        """``alpha + beta + gamma`` (published, no overlap) or ``alpha + max(beta, gamma)``,
        plus the drain."""
        if overlap_reduction:
            return self.alpha_s + np.maximum(self.beta_s, self.gamma_s) + self.drain_s
        return self.alpha_s + self.beta_s + self.gamma_s + self.drain_s

    def __add__(self, other: Cost) -> Cost:
        """Two phases run one after the other."""
        return Cost(
            self.alpha_s + other.alpha_s,
            self.beta_s + other.beta_s,
            self.gamma_s + other.gamma_s,
            self.steps + other.steps,
            self.bytes_sent + other.bytes_sent,
            self.bytes_reduced + other.bytes_reduced,
            self.drain_s + other.drain_s,
        )


def _log2_steps(p: int) -> int:
    """ceil(log2 p): rounds of a binomial/recursive-doubling algorithm on p ranks."""
    return max(0, math.ceil(math.log2(p))) if p > 1 else 0


def _check(p: int) -> None:
    if p < 1:
        raise SpecError(f"need at least 1 rank, got {p}")


def ring_all_reduce(n, p: int, alpha: float, beta: float, gamma: float = 0.0) -> Cost:
    """Ring all-reduce (reduce-scatter + all-gather; Thakur et al. 2005, Patarasuk & Yuan 2009).

    ``2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma``.
    """
    _check(p)
    sent = 2 * (p - 1) / p * np.asarray(n, dtype=float)
    reduced = (p - 1) / p * np.asarray(n, dtype=float)
    return Cost(2 * (p - 1) * alpha, sent * beta, reduced * gamma, 2 * (p - 1), sent, reduced)


def ring_all_gather(n, p: int, alpha: float, beta: float) -> Cost:
    """Ring all-gather of an ``n``-byte output (Thakur et al. 2005): ``(p-1) alpha + (p-1)/p n beta``."""
    _check(p)
    sent = (p - 1) / p * np.asarray(n, dtype=float)
    return Cost((p - 1) * alpha, sent * beta, 0.0 * sent, p - 1, sent, 0.0 * sent)


def ring_reduce_scatter(n, p: int, alpha: float, beta: float, gamma: float = 0.0) -> Cost:
    """Ring reduce-scatter of an ``n``-byte input (Thakur et al. 2005):
    ``(p-1) alpha + (p-1)/p n beta + (p-1)/p n gamma``."""
    _check(p)
    sent = (p - 1) / p * np.asarray(n, dtype=float)
    return Cost((p - 1) * alpha, sent * beta, sent * gamma, p - 1, sent, sent)


def recursive_doubling_all_reduce(n, p: int, alpha: float, beta: float, gamma: float = 0.0) -> Cost:
    """Recursive doubling all-reduce, short messages (Thakur et al. 2005):
    ``log2(p) (alpha + n beta + n gamma)``.

    For p not a power of two MPICH first folds the extra ranks in and sends the result back out:
    two more full-size steps (``floor(log2 p) + 2`` in all).
    """
    _check(p)
    steps = math.log2(p) if p & (p - 1) == 0 else math.floor(math.log2(p)) + 2
    nn = np.asarray(n, dtype=float)
    return Cost(steps * alpha, steps * nn * beta, steps * nn * gamma, steps, steps * nn, steps * nn)


def recursive_doubling_all_gather(n, p: int, alpha: float, beta: float) -> Cost:
    """Recursive doubling (Bruck for p not a power of two) all-gather (Thakur et al. 2005):
    ``ceil(log2 p) alpha + (p-1)/p n beta``."""
    _check(p)
    sent = (p - 1) / p * np.asarray(n, dtype=float)
    steps = _log2_steps(p)
    return Cost(steps * alpha, sent * beta, 0.0 * sent, steps, sent, 0.0 * sent)


def recursive_halving_reduce_scatter(
    n, p: int, alpha: float, beta: float, gamma: float = 0.0
) -> Cost:
    """Recursive halving reduce-scatter (Thakur et al. 2005):
    ``ceil(log2 p) alpha + (p-1)/p n beta + (p-1)/p n gamma``."""
    _check(p)
    sent = (p - 1) / p * np.asarray(n, dtype=float)
    steps = _log2_steps(p)
    return Cost(steps * alpha, sent * beta, sent * gamma, steps, sent, sent)


def rabenseifner_all_reduce(n, p: int, alpha: float, beta: float, gamma: float = 0.0) -> Cost:
    """Rabenseifner: recursive-halving reduce-scatter + recursive-doubling all-gather
    (Thakur et al. 2005): ``2 log2(p) alpha + 2(p-1)/p n beta + (p-1)/p n gamma``."""
    return recursive_halving_reduce_scatter(n, p, alpha, beta, gamma) + (
        recursive_doubling_all_gather(n, p, alpha, beta)
    )


def tree_all_reduce(n, p: int, alpha: float, beta: float, gamma: float = 0.0) -> Cost:
    """Pipelined double binary tree all-reduce (Sanders, Speck & Träff 2009; NCCL 2.4+).

    A reduce up two complementary trees (each carries half the data, each rank is an inner node
    in at most one) then a broadcast down them: ``2 ceil(log2 p) alpha + 2 n beta + n gamma``.
    The depth gives the log2(p) latency; per rank ~n bytes go each way in each phase, which is
    NCCL's model (tuning.cc converts tree bus bandwidth to algbw with a ratio of 1/2).
    """
    _check(p)
    nn = np.asarray(n, dtype=float)
    if p == 1:
        return Cost(0.0, 0.0 * nn, 0.0 * nn, 0, 0.0 * nn, 0.0 * nn)
    steps = 2 * _log2_steps(p)
    return Cost(steps * alpha, 2 * nn * beta, nn * gamma, steps, 2 * nn, nn)


def ring_broadcast(n, p: int, alpha: float, beta: float) -> Cost:
    """Pipelined ring (chain) broadcast, NCCL's broadcast: ``(p-1) alpha + n beta`` once the
    pipeline is full (chunks stream through the chain; Thakur et al. 2005 for the chain)."""
    _check(p)
    nn = np.asarray(n, dtype=float)
    if p == 1:
        return Cost(0.0, 0.0 * nn, 0.0, 0, 0.0 * nn)
    return Cost((p - 1) * alpha, nn * beta, 0.0, p - 1, nn)


def binomial_tree_broadcast(n, p: int, alpha: float, beta: float) -> Cost:
    """Binomial tree broadcast, short messages (Thakur et al. 2005): ``ceil(log2 p)(alpha + n beta)``."""
    _check(p)
    steps = _log2_steps(p)
    nn = np.asarray(n, dtype=float)
    return Cost(steps * alpha, steps * nn * beta, 0.0, steps, steps * nn)


def pairwise_all_to_all(n, p: int, alpha: float, beta: float) -> Cost:
    """Pairwise-exchange all-to-all of an ``n``-byte send buffer (Thakur et al. 2005):
    ``(p-1) alpha + (p-1)/p n beta`` (each rank keeps 1/p and sends 1/p to every other rank)."""
    _check(p)
    sent = (p - 1) / p * np.asarray(n, dtype=float)
    return Cost((p - 1) * alpha, sent * beta, 0.0, p - 1, sent)


def send_recv(n, alpha: float, beta: float) -> Cost:
    """One point-to-point message (Hockney 1994): ``alpha + n beta``."""
    nn = np.asarray(n, dtype=float)
    return Cost(alpha, nn * beta, 0.0, 1, nn)


# ---------------------------------------------------------------------------------------------
# NCCL's multi-node shapes and the hierarchical algorithm (derived)


def nccl_tree_all_reduce(
    n,
    g: int,
    nodes: int,
    intra: tuple[float, float],
    inter: tuple[float, float] | None = None,
    gamma: float = 0.0,
) -> Cost:
    """NCCL's tree all-reduce: a chain through the g GPUs of each node and a double binary tree
    between nodes (NCCL src/graph/tuning.cc: latency ``2((g-1) hwLat_intra + log2(N) hwLat_net)``,
    algbw = busBw / 2).

    ``2((g-1) alpha_i + ceil(log2 N) alpha_e) + 2 n max(beta_i, beta_e / g) + n gamma``: the
    g channels of a node send through its g NICs at once. With one GPU per node it is the
    double binary tree of ``tree_all_reduce``; inside one node it is a chain, so it never has
    fewer steps than the ring there.
    """
    a_i, b_i = intra
    a_e, b_e = inter if inter is not None else intra
    nn = np.asarray(n, dtype=float)
    if g * nodes == 1:
        return Cost(0.0, 0.0 * nn, 0.0 * nn, 0, 0.0 * nn, 0.0 * nn)
    depth = (g - 1) + _log2_steps(nodes)
    alpha = 2 * ((g - 1) * a_i + _log2_steps(nodes) * a_e)
    beta = max(b_i, b_e / g) if nodes > 1 else b_i
    return Cost(alpha, 2 * nn * beta, nn * gamma, 2 * depth, 2 * nn, nn)


def nccl_ring(
    collective: str,
    n,
    g: int,
    nodes: int,
    intra: tuple[float, float],
    inter: tuple[float, float] | None = None,
    gamma: float = 0.0,
    channels: RingChannels | None = None,
) -> Cost:
    """NCCL's ring over N nodes of g GPUs: the ring's usual volume, but each of the g channels
    crosses between nodes through a different NIC, so the network gives ``g / beta_e``
    (NCCL tuning.cc: ``nsteps - nInterSteps`` steps at the intra-node latency, ``nInterSteps``
    at the network's; all-reduce has 2(p-1) steps of which 2(N-1) cross nodes).

    Bandwidth term: ``volume x max(beta_i, beta_e / g)``. On one node it is the plain ring;
    with ``channels`` it also pays the receive-only steps (``ring_drain_time``), and the
    channels' blocks cap the sending rate at ``C x c`` where that is below the link's.
    """
    a_i, b_i = intra
    p = g * nodes
    one_node = not (nodes > 1 and inter is not None)
    if not one_node:
        assert inter is not None
        a_e, b_e = inter
        beta = max(b_i, b_e / g)
    else:
        a_e, beta = a_i, b_i
        if channels is not None:
            beta = max(beta, 1.0 / channels.total_bytes_per_s)
    if collective == "all_reduce":
        c, n_inter = ring_all_reduce(n, p, a_i, beta, gamma), 2 * (nodes - 1)
    elif collective == "all_gather":
        c, n_inter = ring_all_gather(n, p, a_i, beta), nodes - 1
    elif collective == "reduce_scatter":
        c, n_inter = ring_reduce_scatter(n, p, a_i, beta, gamma), nodes - 1
    elif collective == "broadcast":
        c, n_inter = ring_broadcast(n, p, a_i, beta), nodes - 1
    else:
        raise SpecError(f"NCCL ring not modelled for {collective}")
    drain = ring_drain_time(collective, n, p, channels) if one_node and channels else 0.0
    return replace(c, alpha_s=c.alpha_s + n_inter * (a_e - a_i), drain_s=drain)


def hierarchical_all_reduce(
    n,
    g: int,
    nodes: int,
    intra: tuple[float, float],
    inter: tuple[float, float],
    gamma: float = 0.0,
) -> Cost:
    """Intra-node ring reduce-scatter + inter-node ring all-reduce on ``n/g`` bytes (the g
    GPUs of a node run g of them at once, one per NIC) + intra-node ring all-gather, one phase
    after the other (as in Horovod's hierarchical all-reduce).

    *Derived* (formulas.md §5), with ``intra = (alpha_i, beta_i)``, ``inter = (alpha_e, beta_e)``:
    ``2(g-1) alpha_i + 2(g-1)/g n beta_i + 2(N-1) alpha_e + 2(N-1)/N (n/g) beta_e + gamma terms``.
    Compared with a flat ring whose every step runs at the network's beta, the network carries
    g times fewer bytes per GPU.
    """
    a_i, b_i = intra
    a_e, b_e = inter
    nn = np.asarray(n, dtype=float)
    return (
        ring_reduce_scatter(nn, g, a_i, b_i, gamma)
        + ring_all_reduce(nn / g, nodes, a_e, b_e, gamma)
        + ring_all_gather(nn, g, a_i, b_i)
    )


def hierarchical_all_gather(
    n, g: int, nodes: int, intra: tuple[float, float], inter: tuple[float, float]
) -> Cost:
    """Inter-node ring all-gather among same-local-rank GPUs (output ``n/g`` each), then an
    intra-node ring all-gather to the full ``n`` (*derived*)."""
    nn = np.asarray(n, dtype=float)
    return ring_all_gather(nn / g, nodes, *inter) + ring_all_gather(nn, g, *intra)


def hierarchical_reduce_scatter(
    n,
    g: int,
    nodes: int,
    intra: tuple[float, float],
    inter: tuple[float, float],
    gamma: float = 0.0,
) -> Cost:
    """Intra-node ring reduce-scatter of ``n``, then inter-node ring reduce-scatter of the
    ``n/g`` shard among same-local-rank GPUs (*derived*; the mirror of the all-gather)."""
    nn = np.asarray(n, dtype=float)
    return ring_reduce_scatter(nn, g, *intra, gamma) + ring_reduce_scatter(
        nn / g, nodes, *inter, gamma
    )


# ---------------------------------------------------------------------------------------------
# topology and algorithm choice


@dataclass(frozen=True)
class Link:
    """One kind of link as the cost model sees it: per-step latency and per-direction bandwidth
    (already multiplied by the efficiency NCCL reaches on it)."""

    kind: str  # nvlink | nvswitch | infinity_fabric | pcie | network
    alpha_s: float
    bandwidth_bytes_per_s: float  # per direction, effective
    datasheet_bytes_per_s: float | None = None  # per direction, before efficiency
    efficiency: float = 1.0
    note: str = ""

    @property
    def beta(self) -> float:
        return 1.0 / self.bandwidth_bytes_per_s

    @property
    def ab(self) -> tuple[float, float]:
        return (self.alpha_s, self.beta)


@dataclass(frozen=True)
class Topology:
    """Where the ``gpus`` ranks sit: ``nodes`` nodes of ``gpus_per_node``, an intra-node link, a
    network between nodes (None on one node), a fixed launch latency, the reduction rate and
    NCCL's ring channels on the intra-node link (None: their receive-only step is not priced)."""

    gpus: int
    intra: Link
    nodes: int = 1
    inter: Link | None = None
    base_latency_s: float = DEFAULT_BASE_LATENCY_S
    gamma_s_per_byte: float = 0.0
    notes: tuple[str, ...] = field(default=())
    channels: RingChannels | None = None

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1 and self.inter is not None

    @property
    def slowest(self) -> Link:
        """The link every step of a topology-unaware (flat) algorithm is limited by."""
        if self.multi_node:
            assert self.inter is not None
            slow = self.inter if self.inter.beta >= self.intra.beta else self.intra
            return replace(slow, alpha_s=max(self.intra.alpha_s, self.inter.alpha_s))
        return self.intra


@dataclass(frozen=True)
class Candidate:
    """One algorithm's cost for one collective on one topology."""

    algorithm: str
    cost: Cost
    formula: str
    summary: str
    nccl: bool  # does NCCL run this algorithm (so the "auto" choice may pick it)?
    base_latency_s: float = 0.0

    @property
    def alpha_total_s(self):
        return self.base_latency_s + self.cost.alpha_s

    @property
    def time_s(self):
        return self.base_latency_s + self.cost.total(overlap_reduction=True)

    @property
    def latency_bound(self) -> bool:
        bandwidth_s = np.maximum(self.cost.beta_s, self.cost.gamma_s) + self.cost.drain_s
        return bool(np.all(self.alpha_total_s >= bandwidth_s))


ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "tree", "recursive_doubling", "rabenseifner", "hierarchical",
                   "flat_ring"),
    "all_gather": ("ring", "recursive_doubling", "hierarchical", "flat_ring"),
    "reduce_scatter": ("ring", "recursive_doubling", "hierarchical", "flat_ring"),
    "broadcast": ("ring", "tree", "flat_ring"),
    "all_to_all": ("pairwise",),
    "send_recv": ("p2p",),
}  # fmt: skip
# NCCL's algorithms (src/graph/tuning.cc): ring for every collective, tree for all-reduce (and
# pairwise exchanges for all-to-all, built from send/recv). Recursive doubling, Rabenseifner,
# the phase-by-phase hierarchical algorithm and the topology-unaware flat ring are shown for
# comparison; "auto" picks among NCCL's.
NCCL_ALGORITHMS = frozenset({"ring", "tree", "pairwise", "p2p"})


def candidates(collective: str, n, topo: Topology) -> list[Candidate]:
    """Every algorithm's cost for ``collective`` of ``n`` bytes on ``topo``.

    On one node every algorithm runs on the node's link. Across nodes: NCCL's ring and tree
    spread their channels over the node's NICs (``nccl_ring``, ``nccl_tree_all_reduce``); the
    hierarchical algorithms run intra-node phases on the node's link and only the ``n/g`` shard
    over the network; flat algorithms (flat ring, recursive doubling, Rabenseifner, binomial
    tree) ignore the topology, so every step runs at the slowest link's alpha and beta.
    """
    p = topo.gpus
    if collective not in ALGORITHMS:
        raise SpecError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
    if p == 1:
        return []
    flat = topo.slowest
    a, b = flat.ab
    gam = topo.gamma_s_per_byte
    lg = _log2_steps(p)
    multi = topo.multi_node and topo.gpus_per_node > 1
    g, nodes = topo.gpus_per_node, topo.nodes
    inter_ab = topo.inter.ab if topo.inter is not None else None
    ring_ch = topo.channels if not topo.multi_node else None
    drain_formula = " + (n/p) / (C c)" if ring_ch is not None else ""
    out: list[Candidate] = []

    def add(name: str, cost: Cost, formula: str, summary: str) -> None:
        out.append(
            Candidate(name, cost, formula, summary, name in NCCL_ALGORITHMS, topo.base_latency_s)
        )

    across = f", channels spread over the {g} NICs of a node" if multi else ""
    if collective == "all_reduce":
        add(
            "ring",
            nccl_ring("all_reduce", n, g, nodes, topo.intra.ab, inter_ab, gam, ring_ch),
            "2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma" + drain_formula,
            f"2(p-1) = {2 * (p - 1)} steps, sends 2(p-1)/p = {2 * (p - 1) / p:.3g}x the buffer"
            + across,
        )
        tree = nccl_tree_all_reduce(n, g, nodes, topo.intra.ab, inter_ab, gam)
        add(
            "tree",
            tree,
            "2((g-1) alpha_node + log2(N) alpha_net) + 2 n beta + n gamma",
            (
                f"chain in each node + double binary tree across {nodes} nodes: "
                if nodes > 1
                else "a chain inside one node (NCCL's tree): "
            )
            + f"{tree.steps:g} steps, sends 2x the buffer",
        )
        rd = recursive_doubling_all_reduce(n, p, a, b, gam)
        add(
            "recursive_doubling",
            rd,
            "log2(p) (alpha + n beta + n gamma)",
            f"{rd.steps:g} steps, sends {rd.steps:g}x the buffer",
        )
        add(
            "rabenseifner",
            rabenseifner_all_reduce(n, p, a, b, gam),
            "2 log2(p) alpha + 2(p-1)/p n beta + (p-1)/p n gamma",
            f"2 log2(p) = {2 * lg} steps, sends {2 * (p - 1) / p:.3g}x the buffer",
        )
        if multi:
            assert topo.inter is not None
            add(
                "hierarchical",
                hierarchical_all_reduce(n, g, nodes, topo.intra.ab, topo.inter.ab, gam),
                "ring RS in node + ring AR of n/g across nodes + ring AG in node",
                f"sends {2 * (nodes - 1) / nodes / g:.3g}x the buffer over the network, "
                f"{2 * (g - 1) / g:.3g}x over {topo.intra.kind}",
            )
            add(
                "flat_ring",
                ring_all_reduce(n, p, a, b, gam),
                "2(p-1) alpha + 2(p-1)/p n beta_slowest + (p-1)/p n gamma",
                f"one topology-unaware ring: {2 * (p - 1)} steps, "
                f"{2 * (p - 1) / p:.3g}x the buffer at the network's bandwidth",
            )
    elif collective in ("all_gather", "reduce_scatter"):
        rs = collective == "reduce_scatter"
        gterm = " + (p-1)/p n gamma" if rs else ""
        add(
            "ring",
            nccl_ring(collective, n, g, nodes, topo.intra.ab, inter_ab, gam, ring_ch),
            "(p-1) alpha + (p-1)/p n beta" + gterm + drain_formula,
            f"p-1 = {p - 1} steps, sends (p-1)/p = {(p - 1) / p:.3g}x the buffer" + across,
        )
        rd = (
            recursive_halving_reduce_scatter(n, p, a, b, gam)
            if rs
            else recursive_doubling_all_gather(n, p, a, b)
        )
        add(
            "recursive_doubling",
            rd,
            "log2(p) alpha + (p-1)/p n beta" + gterm,
            f"log2(p) = {lg} steps, sends {(p - 1) / p:.3g}x the buffer",
        )
        if multi:
            assert topo.inter is not None
            h = (
                hierarchical_reduce_scatter(n, g, nodes, topo.intra.ab, topo.inter.ab, gam)
                if rs
                else hierarchical_all_gather(n, g, nodes, topo.intra.ab, topo.inter.ab)
            )
            add(
                "hierarchical",
                h,
                "ring in node + ring of n/g across nodes"
                if rs
                else "ring of n/g across nodes + ring in node",
                f"sends {(nodes - 1) / nodes / g:.3g}x the buffer over the network",
            )
            flat_c = ring_reduce_scatter(n, p, a, b, gam) if rs else ring_all_gather(n, p, a, b)
            add(
                "flat_ring",
                flat_c,
                "(p-1) alpha + (p-1)/p n beta_slowest" + gterm,
                f"one topology-unaware ring: {p - 1} steps at the network's bandwidth",
            )
    elif collective == "broadcast":
        add(
            "ring",
            nccl_ring("broadcast", n, g, nodes, topo.intra.ab, inter_ab),
            "(p-1) alpha + n beta",
            f"pipelined chain: p-1 = {p - 1} steps, sends the buffer once" + across,
        )
        add(
            "tree",
            binomial_tree_broadcast(n, p, a, b),
            "log2(p) (alpha + n beta)",
            f"binomial tree: log2(p) = {lg} steps, the root sends the buffer {lg}x",
        )
        if multi:
            add(
                "flat_ring",
                ring_broadcast(n, p, a, b),
                "(p-1) alpha + n beta_slowest",
                "one topology-unaware chain at the network's bandwidth",
            )
    elif collective == "all_to_all":
        if multi:
            assert topo.inter is not None
            # (g-1)/p of the buffer stays in the node, (p-g)/p crosses the network; both at once
            nn = np.asarray(n, dtype=float)
            t_in = (g - 1) / p * nn * topo.intra.beta
            t_out = (p - g) / p * nn * topo.inter.beta
            t_beta = np.maximum(t_in, t_out)
            if topo.intra.kind == "pcie":
                # the NIC hangs off the GPU's PCIe link (GPUDirect RDMA): with PCIe in the node
                # too, both shares leave the GPU over that one link. Without this, spreading a
                # fixed per-GPU buffer over more nodes moved bytes onto a faster NIC that the
                # GPU cannot feed, and the time fell as GPUs were added.
                t_beta = np.maximum(t_beta, (p - 1) / p * nn * topo.intra.beta)
            cost = Cost(
                (g - 1) * topo.intra.alpha_s + (p - g) * topo.inter.alpha_s,
                t_beta,
                0.0,
                p - 1,
                (p - 1) / p * nn,
            )
            add(
                "pairwise",
                cost,
                "(p-1) alpha + max((g-1)/p n beta_node, (p-g)/p n beta_net)"
                + (
                    " [>= (p-1)/p n beta_pcie: both shares cross the GPU's PCIe link]"
                    if topo.intra.kind == "pcie"
                    else ""
                ),
                f"p-1 = {p - 1} exchanges; {(p - g) / p:.3g}x the buffer crosses the network",
            )
        else:
            add(
                "pairwise",
                pairwise_all_to_all(n, p, a, b),
                "(p-1) alpha + (p-1)/p n beta",
                f"p-1 = {p - 1} exchanges, sends (p-1)/p = {(p - 1) / p:.3g}x the buffer",
            )
    elif collective == "send_recv":
        add(
            "p2p",
            send_recv(n, a, b),
            "alpha + n beta",
            "one message to the next rank" + (" (across nodes: the network)" if multi else ""),
        )
    return out  # fmt: skip


def choose(
    collective: str, n: float, topo: Topology, cands: list[Candidate] | None = None
) -> tuple[Candidate, str]:
    """The algorithm NCCL would run and why: the fastest of NCCL's algorithms by the model
    (NCCL's tuner also takes the minimum predicted time over algorithm and protocol)."""
    cands = candidates(collective, n, topo) if cands is None else cands
    if not cands:
        raise SpecError("one GPU: nothing to choose")
    pool = [c for c in cands if c.nccl] or cands
    ranked = sorted(pool, key=lambda c: float(c.time_s))
    best = ranked[0]
    size = format_quantity(float(n), "B")
    if len(ranked) == 1:
        if len(pool) < len(cands):
            return best, f"{best.algorithm}: the only NCCL algorithm for {collective}"
        return best, f"{best.algorithm}: the only algorithm modelled for {collective}"
    other = ranked[1]
    kind = "latency-bound" if best.latency_bound else "bandwidth-bound"
    where = f" over {topo.nodes} nodes" if topo.nodes > 1 else ""
    tb, to = format_time(float(best.time_s)), format_time(float(other.time_s))
    if best.latency_bound and best.cost.steps < other.cost.steps:
        why = (
            f"{kind}: {size} message{where}; {best.algorithm}'s {best.cost.steps:g} steps beat "
            f"{other.algorithm}'s {other.cost.steps:g} ({tb} vs {to})"
        )
    else:
        why = (
            f"{kind}: {size} message{where}; {best.algorithm} ({best.summary}) beats "
            f"{other.algorithm} ({other.summary}): {tb} vs {to}"
        )
    return best, why  # fmt: skip


def with_efficiency(link: Link, efficiency: float, note: str = "") -> Link:
    """The same link at another efficiency (of its datasheet per-direction bandwidth)."""
    base = link.datasheet_bytes_per_s or link.bandwidth_bytes_per_s / link.efficiency
    return replace(link, bandwidth_bytes_per_s=base * efficiency, efficiency=efficiency,
                   note=note or link.note)  # fmt: skip


def steps(collective: str, algorithm: str, p: int) -> float:
    """Messages on the critical path of ``algorithm`` for ``collective`` on one node of p ranks
    (used to carry a measured latency floor from one GPU count to another)."""
    if p <= 1:
        return 0.0
    lg = _log2_steps(p)
    table = {
        ("all_reduce", "ring"): 2 * (p - 1),
        ("all_reduce", "tree"): 2 * (p - 1),  # NCCL's tree is a chain inside a node
        ("all_reduce", "rabenseifner"): 2 * lg,
        ("all_reduce", "recursive_doubling"): lg if p & (p - 1) == 0 else math.floor(math.log2(p)) + 2,
        ("broadcast", "tree"): lg,
    }  # fmt: skip
    if (collective, algorithm) in table:
        return float(table[(collective, algorithm)])
    if algorithm == "recursive_doubling":
        return float(lg)
    if collective == "send_recv":
        return 1.0
    return float(p - 1)
