"""Collectives: nccl-tests terms, alpha-beta formulas, algorithm choice, calibration, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpumodel as gm
import gpumodel.cli.multigpu
from gpumodel.calibration import CalibrationParams, CollectiveParams
from gpumodel.cli import main
from gpumodel.errors import SpecError, UnsupportedError
from gpumodel.model import comm
from gpumodel.ops.collectives import (
    COLLECTIVE_OPS,
    AllGather,
    AllReduce,
    Broadcast,
    ReduceScatter,
    collective_op,
    time_array,
)
from gpumodel.specs import GPUSpec
from gpumodel.validate.families import collectives as runner
from tests.conftest import TINY

# A GPU with round link numbers: NVLink 200 GB/s both directions = 100 GB/s each way.
NVL = {**TINY, "id": "tinylink", "name": "Tiny NVLink GPU",
       "interconnect": {"nvlink": {"generation": 4, "bandwidth": "200 GB/s"},
                        "pcie": {"generation": 4, "lanes": 16}}}  # fmt: skip


@pytest.fixture
def nvl() -> GPUSpec:
    return GPUSpec.model_validate(NVL)


class _Cal:
    """The two attributes predict_on reads from a Calibration."""

    def __init__(self, collectives: dict[str, CollectiveParams]):
        self.parameters = CalibrationParams(collectives=collectives)
        self.label = "test calibration"


# --------------------------------------------------------------------------- nccl-tests terms


def test_bus_factors_match_nccl_tests_performance_md():
    assert comm.bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)  # 1.75
    assert comm.bus_factor("all_reduce", 2) == pytest.approx(1.0)
    for name in ("all_gather", "reduce_scatter", "all_to_all"):
        assert comm.bus_factor(name, 8) == pytest.approx(7 / 8)
    assert comm.bus_factor("broadcast", 8) == 1.0
    assert comm.bus_factor("send_recv", 2) == 1.0
    assert comm.bus_factor("all_reduce", 1) == 0.0
    with pytest.raises(ValueError, match="unknown collective"):
        comm.bus_factor("allreduce", 8)


def test_algbw_and_busbw():
    # 1 GB in 10 ms: algbw 100 GB/s; all-reduce on 8: busbw = 100 x 1.75 = 175 GB/s
    assert comm.algbw(1e9, 0.01) == pytest.approx(1e11)
    assert comm.busbw(1e9, 0.01, "all_reduce", 8) == pytest.approx(1.75e11)
    assert comm.busbw(1e9, 0.01, "all_gather", 4) == pytest.approx(0.75e11)


# --------------------------------------------------------------------------- the seed's example


def test_seed_28gb_plain_transfer_and_ring_factor():
    grads = 7e9 * 4  # 7B parameters x 4 bytes = 28 GB
    assert grads == 28e9
    assert comm.plain_transfer_time(grads, 32e9) == pytest.approx(0.875)  # PCIe, 875 ms
    assert comm.plain_transfer_time(grads, 300e9) == pytest.approx(0.09333, rel=1e-3)  # 93 ms
    # a ring all-reduce on 8 GPUs sends 2(n-1)/n = 1.75x the buffer per GPU
    assert comm.bus_factor("all_reduce", 8) * 0.875 == pytest.approx(1.53125)
    assert "1.75" in comm.ring_factor_explanation(8)
    with pytest.raises(ValueError):
        comm.plain_transfer_time(1e9, 0)


def test_seed_example_through_the_op():
    pcie = gm.predict(AllReduce(bytes="28GB", gpus=8, link="pcie", link_bandwidth="32GB/s"),
                      "a100", "none")  # fmt: skip
    assert pcie.details["plain_transfer_s"] == pytest.approx(0.875)
    nvlink = gm.predict(AllReduce(bytes="28GB", gpus=8, link="nvlink"), "a100", "none")
    # A100 NVLink 600 GB/s both directions = 300 GB/s each way
    assert nvlink.details["plain_transfer_s"] == pytest.approx(28e9 / 300e9)
    # the model's ring sends 1.75x the buffer at 300 GB/s x 0.8 default link efficiency
    ring = next(r for r in nvlink.details["algorithms"] if r["algorithm"] == "ring")
    assert ring["beta_s"] == pytest.approx(1.75 * 28e9 / (300e9 * 0.8))


# --------------------------------------------------------------------------- alpha-beta formulas


def test_ring_all_reduce_hand_computed():
    # n = 1 MB, p = 4, alpha = 1 us, beta = 1 ns/B, gamma = 0.1 ns/B
    c = comm.ring_all_reduce(1e6, 4, 1e-6, 1e-9, 1e-10)
    assert c.alpha_s == pytest.approx(6e-6)  # 2(p-1) alpha = 6 x 1 us
    assert c.beta_s == pytest.approx(1.5e-3)  # 2(p-1)/p n beta = 1.5 x 1e6 x 1e-9
    assert c.gamma_s == pytest.approx(7.5e-5)  # (p-1)/p n gamma = 0.75 x 1e6 x 1e-10
    assert c.total(overlap_reduction=False) == pytest.approx(6e-6 + 1.5e-3 + 7.5e-5)
    assert c.total() == pytest.approx(6e-6 + 1.5e-3)  # reduction hidden under the transfer
    assert c.steps == 6 and c.bytes_sent == pytest.approx(1.5e6)


def test_ring_all_gather_and_reduce_scatter_hand_computed():
    ag = comm.ring_all_gather(1e6, 4, 1e-6, 1e-9)
    assert ag.total() == pytest.approx(3e-6 + 0.75e-3)  # (p-1) alpha + (p-1)/p n beta
    rs = comm.ring_reduce_scatter(1e6, 4, 1e-6, 1e-9, 1e-10)
    assert rs.total(overlap_reduction=False) == pytest.approx(3e-6 + 0.75e-3 + 0.75e-4)


def test_recursive_doubling_rabenseifner_tree_hand_computed():
    rd = comm.recursive_doubling_all_reduce(1e6, 8, 1e-6, 1e-9)
    assert rd.total() == pytest.approx(3 * (1e-6 + 1e-3))  # log2(8) (alpha + n beta)
    assert comm.recursive_doubling_all_reduce(1e6, 6, 1e-6, 1e-9).steps == 4  # floor(log2 6)+2
    rab = comm.rabenseifner_all_reduce(1e6, 8, 1e-6, 1e-9)
    assert rab.total() == pytest.approx(6e-6 + 1.75e-3)  # 2 log2 p alpha + 2(p-1)/p n beta
    tree = comm.tree_all_reduce(1e6, 8, 1e-6, 1e-9)
    assert tree.total() == pytest.approx(6e-6 + 2e-3)  # 2 log2 p alpha + 2 n beta
    bt = comm.binomial_tree_broadcast(1e6, 8, 1e-6, 1e-9)
    assert bt.total() == pytest.approx(3 * (1e-6 + 1e-3))
    chain = comm.ring_broadcast(1e6, 8, 1e-6, 1e-9)
    assert chain.total() == pytest.approx(7e-6 + 1e-3)


def test_hierarchical_and_nccl_tree_hand_computed():
    n, g, nodes = 8e6, 8, 2
    intra, inter = (1e-6, 1e-11), (5e-6, 1e-10)  # NVLink 100 GB/s, network 10 GB/s
    h = comm.hierarchical_all_reduce(n, g, nodes, intra, inter)
    # RS in node: 7 x 1 us + 7/8 x 8e6 x 1e-11 = 7e-6 + 7e-5
    # AR of n/g = 1e6 over 2 nodes: 2 x 5 us + 2 x 1/2 x 1e6 x 1e-10 = 1e-5 + 1e-4
    # AG in node: same as the RS = 7e-6 + 7e-5
    assert h.total() == pytest.approx(7e-6 + 7e-5 + 1e-5 + 1e-4 + 7e-6 + 7e-5)
    t = comm.nccl_tree_all_reduce(n, g, nodes, intra, inter)
    # 2 ((g-1) alpha_i + log2 N alpha_e) = 2 (7 us + 5 us); 2 n max(1e-11, 1e-10 / 8)
    assert t.alpha_s == pytest.approx(24e-6)
    assert t.beta_s == pytest.approx(2 * 8e6 * 1.25e-11)


def test_one_rank_costs_nothing():
    for fn in (comm.ring_all_reduce, comm.tree_all_reduce, comm.recursive_doubling_all_reduce):
        assert fn(1e9, 1, 1e-6, 1e-9).total() == 0
    with pytest.raises(ValueError):
        comm.ring_all_reduce(1e6, 0, 1e-6, 1e-9)


# --------------------------------------------------------------------------- ops and choice


def test_one_gpu_is_valid_and_free():
    p = gm.predict(AllReduce(bytes="28GB", gpus=1), "h100", "none")
    assert p.time_s == 0 and p.bound == "network" and p.bytes == 0
    assert "one GPU" in p.details["why"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"bytes": "-5GB", "gpus": 8}, "must not be negative"),
        ({"bytes": 0, "gpus": 8}, "must be positive"),
        ({"bytes": "28 GB/s", "gpus": 8}, "is a bandwidth"),
        ({"bytes": "1GB", "gpus": 0}, "must be at least 1"),
        ({"bytes": "1GB", "gpus": 12, "nodes": 5}, "do not split evenly"),
        ({"bytes": "1GB", "gpus": 8, "nodes": 2, "gpus_per_node": 8}, "gpus_per_node 8 x nodes 2"),
    ],
)
def test_bad_input_rejected_with_clear_message(fields, message):
    with pytest.raises(SpecError, match=message):  # #20: a GpumodelError, not pydantic's
        AllReduce(**fields)
    with pytest.raises(SpecError, match=message):
        collective_op("all-reduce", **fields)


def test_collective_op_names():
    assert set(COLLECTIVE_OPS) == {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                   "all_to_all", "send_recv"}  # fmt: skip
    assert isinstance(collective_op("allreduce", bytes=1e6, gpus=2), AllReduce)
    with pytest.raises(SpecError, match="unknown collective"):
        collective_op("allsum", bytes=1e6, gpus=2)
    assert AllGather(bytes=1e6, gpus=2).to_row()["op"] == "all_gather"
    assert AllReduce(bytes=1e6, gpus=2).kernels(GPUSpec.model_validate(NVL)) == []


@pytest.mark.parametrize(
    ("name", "published_gb_s"), [("all_reduce", 360), ("all_gather", 350), ("reduce_scatter", 360)]
)
def test_eight_h100_ring_busbw_matches_nccl_published(name, published_gb_s):
    """NCCL's maintainer: ring busbw on 8 x H100 (NVLS off) is ~360 GB/s for all-gather and
    all-reduce (NVIDIA/nccl-tests#326) and ~370 GB/s for non-all-reduce operations
    (nccl-tests#212); a user's nccl-tests run showed reduce-scatter 360, all-gather 350
    (NVIDIA/nccl#1281). From the datasheet alone (with the ring's receive-only steps: all-reduce
    350, all-gather and reduce-scatter 341 GB/s) the model lands within 6% of those."""
    p = gm.predict(collective_op(name, bytes=8 * 2**30, gpus=8), "h100", "none")
    assert p.details["busbw_bytes_per_s"] == pytest.approx(published_gb_s * 1e9, rel=0.06)


def test_ring_receive_only_step_by_hand(nvl):
    """2 x H200, datasheet: link 450 GB/s per direction x 0.8 = 360 GB/s; NCCL's 24 ring channels
    x 38.7 GB/s = 928.8 GB/s. All-gather of 1 GiB: each rank sends 2^29 B (1491.3 us) and
    receives 2^29 B in the receive-only steps (578.0 us); alpha = 6.6 + 1 x 0.6 us."""
    p = gm.predict(AllGather(bytes=2**30, gpus=2), "h200", "none")
    terms = {t.name: t.value for t in p.terms}
    assert terms["ring receive-only steps (link idle)"] == pytest.approx(2**29 / 928.8e9)
    assert terms["beta term (bandwidth)"] == pytest.approx(2**29 / 360e9)
    assert p.time_s == pytest.approx(7.2e-6 + 2**29 / 360e9 + 2**29 / 928.8e9)
    # busbw = (n/2) / t = 259 GB/s: 0.575 of the link's 450 GB/s (measured on 2 x H200: 0.60)
    assert p.details["busbw_bytes_per_s"] == pytest.approx(258.6e9, rel=0.002)
    # all-reduce of 1 GiB: 2 sending steps per loop, the same 2^29 B received at the end
    ar = gm.predict(AllReduce(bytes=2**30, gpus=2), "h200", "none")
    assert ar.time_s == pytest.approx(6.6e-6 + 2 * 0.6e-6 + 2**30 / 360e9 + 2**29 / 928.8e9)
    # 8 channels: 8 x 38.7 = 309.6 GB/s < 360, so the blocks also cap the sending steps
    few = gm.predict(AllGather(bytes=2**30, gpus=2, channels=8), "h200", "none")
    assert few.time_s == pytest.approx(7.2e-6 + 2 * 2**29 / 309.6e9)
    # a calibrated link efficiency was fitted with the step inside it: no second charge
    cal = _Cal({"all_reduce@2": CollectiveParams(gpus=2, alpha_s=20e-6,
                bus_bandwidth_bytes_per_s=333e9, link_efficiency=0.74)})  # fmt: skip
    names = [t.name for t in AllGather(bytes=2**30, gpus=2).predict_on(nvl, cal).terms]
    assert "ring receive-only steps (link idle)" not in names


def test_ring_receive_only_step_only_where_nccl_channels_are_known(nvl):
    """Ampere's channel count is not recorded: no term, and the prediction says why; a given
    count prices it at Ampere's 24 GB/s per channel; broadcast's chain has no such step."""
    a100 = gm.predict(AllGather(bytes=2**30, gpus=8), "a100-sxm4-80gb", "none")
    assert "ring receive-only steps (link idle)" not in [t.name for t in a100.terms]
    assert any("not recorded" in n for n in a100.details["notes"])
    given = gm.predict(AllGather(bytes=2**30, gpus=8, channels=16), "a100-sxm4-80gb", "none")
    terms = {t.name: t.value for t in given.terms}
    assert terms["ring receive-only steps (link idle)"] == pytest.approx(2**30 / 8 / (16 * 24e9))
    bcast = gm.predict(Broadcast(bytes=2**30, gpus=2), "h200", "none")
    assert "ring receive-only steps (link idle)" not in [t.name for t in bcast.terms]
    with pytest.raises(UnsupportedError, match="channels prices NCCL's ring on one node"):
        gm.predict(AllGather(bytes=2**30, gpus=16, nodes=2, channels=8), "h100", "none")
    with pytest.raises(UnsupportedError, match="this link is infinity fabric"):
        gm.predict(AllGather(bytes=2**30, gpus=2, channels=8), "mi300x", "none")
    with pytest.raises(SpecError, match="at least 1"):
        AllGather(bytes=2**30, gpus=2, channels=0)


def test_spec_only_prediction_on_tiny_nvlink(nvl):
    # 100 MB all-reduce on 4 GPUs: ring, beta = 1.5 x 1e8 / (100 GB/s x 0.8) = 1.875 ms; the
    # fixture is Hopper, so NCCL's 24 channels x 38.7 GB/s receive 1e8/4 B: 26.9 us
    p = gm.predict(AllReduce(bytes=1e8, gpus=4), nvl, "none")
    assert p.details["algorithm"] == "ring"
    alpha = comm.DEFAULT_BASE_LATENCY_S + 6 * comm.DEFAULT_STEP_LATENCY_S["nvlink"]
    assert p.time_s == pytest.approx(alpha + 1.875e-3 + 2.5e7 / (24 * 38.7e9))
    assert p.details["busbw_bytes_per_s"] == pytest.approx(1e8 / p.time_s * 1.5)
    assert p.bytes == pytest.approx(1.5e8)  # bytes a rank sends
    assert p.flops == pytest.approx(0.75e8 / 2)  # bf16 elements reduced per rank
    names = [t.name for t in p.terms]
    assert names == ["alpha term (latency)", "beta term (bandwidth)", "gamma term (reduction)",
                     "ring receive-only steps (link idle)"]  # fmt: skip


def test_small_messages_are_latency_bound_and_large_bandwidth_bound():
    small = gm.predict(AllReduce(bytes="4KB", gpus=8), "h100", "none")
    large = gm.predict(AllReduce(bytes="1GB", gpus=8), "h100", "none")
    assert small.bound == "latency" and "latency-bound" in small.details["why"]
    assert large.bound == "network" and "bandwidth-bound" in large.details["why"]
    assert large.details["algorithm"] == "ring"


def test_tree_wins_small_messages_across_many_nodes():
    p = gm.predict(AllReduce(bytes="64KB", gpus=128, system="dgx-h100"), "h100", "none")
    assert p.details["algorithm"] == "tree"
    assert "tree's" in p.details["why"] and "beat ring's" in p.details["why"]


def test_more_gpus_than_a_node_holds_are_placed_in_nodes_and_say_so():
    """64 H100s with no nodes or system: not one 64-GPU NVLink switch (no shipped platform has
    one; DGX/HGX baseboards hold 8) but 8 nodes of 8 over the default NICs, the same time as
    asking for 8 nodes; a placement given is kept; a count 8 does not divide takes the fewest
    equal nodes."""
    placed = gm.predict(AllReduce(bytes="1GB", gpus=64), "h100", "none")
    asked = gm.predict(AllReduce(bytes="1GB", gpus=64, nodes=8), "h100", "none")
    assert placed.details["topology"]["nodes"] == 8
    assert placed.time_s == asked.time_s
    assert any("placed as 8 nodes of 8" in n for n in placed.details["notes"])
    # between nodes each node's 8 NICs (50 GB/s each way) carry 2 x 7/8 of the 1 GB: >= 4.4 ms
    assert placed.time_s >= 2 * 7 / 8 * 1e9 / (8 * 50e9)
    one_switch = gm.predict(AllReduce(bytes="1GB", gpus=64, gpus_per_node=64), "h100", "none")
    assert one_switch.details["topology"]["nodes"] == 1  # a placement given is kept
    assert one_switch.time_s < placed.time_s
    # the fewest equal nodes of at most 8: 9 GPUs as 3 x 3, 12 as 2 x 6, 11 (prime) one a node
    for gpus, nodes in ((9, 3), (12, 2), (11, 11)):
        p = gm.predict(AllReduce(bytes="1GB", gpus=gpus), "h100", "none")
        assert p.details["topology"]["nodes"] == nodes


def test_hierarchical_beats_flat_ring_across_two_nodes():
    # dgx-h100 x 2: NVSwitch 450 GB/s each way in a node, 50 GB/s per GPU between nodes
    p = gm.predict(AllReduce(bytes="1GB", gpus=16, system="dgx-h100"), "h100", "none")
    times = {r["algorithm"]: r["time_s"] for r in p.details["algorithms"]}
    assert p.details["topology"]["nodes"] == 2
    assert times["hierarchical"] < times["flat_ring"] / 3
    # NCCL's rings spread channels over the 8 NICs: no slower than the phase-by-phase algorithm
    assert times["ring"] <= times["hierarchical"]
    forced = gm.predict(AllReduce(bytes="1GB", gpus=16, system="dgx-h100",
                                  algorithm="hierarchical"), "h100", "none")  # fmt: skip
    assert forced.time_s == pytest.approx(times["hierarchical"])


@pytest.mark.parametrize("gpus", [8, 16, 32])
def test_the_datasheet_floor_never_exceeds_the_prediction(gpus):
    """The explanation's floor, ring volume x plain size/bandwidth, bounds the prediction from
    below. Across nodes the plain rate is the node's 8 NICs together (8 x 50 GB/s = 400 GB/s,
    below NVLink's 450), as NCCL's channels use them: one NIC's 50 GB/s gave a 37.5 ms floor
    under a 5.24 ms prediction for 16 H100s."""
    p = gm.predict(AllReduce(bytes="1GB", gpus=gpus), "h100")
    plain = p.details["plain_transfer_s"]
    assert plain == pytest.approx(1e9 / (400e9 if gpus > 8 else 450e9))
    assert plain * comm.bus_factor("all_reduce", gpus) <= p.time_s


def test_a_gpu_on_another_systems_switch_sends_at_its_own_nvlink_rate(capsys):
    # A100 SXM4: NVLink 3, 600 GB/s both ways = 300 GB/s each way (A100 datasheet); a DGX H100's
    # NVSwitch gives 450 GB/s each way, which no A100 port reaches
    ring = {"algorithm": "ring", "nodes": 1}
    own = gm.predict(AllReduce(bytes="1GB", gpus=8, **ring), "a100", "none")
    placed = gm.predict(AllReduce(bytes="1GB", gpus=8, system="dgx-h100", **ring), "a100", "none")
    assert placed.details["topology"]["intra_node"]["per_direction_bytes_per_s"] == 300e9
    assert placed.time_s == pytest.approx(own.time_s, rel=0.05)
    # a GPU without a switch port cannot join it: one line, exit 2
    assert main(["allreduce", "--bytes", "1GB", "--gpus", "8", "--system", "dgx-h100",
                 "--gpu", "l40s"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "l40s has no NVLink switch port" in err and len(err.strip().splitlines()) == 1


def test_hierarchical_wins_on_a_user_system_file(tmp_path, nvl):
    path = tmp_path / "two-node.yaml"
    path.write_text(
        "id: two-node\nname: two test nodes\ngpu: tinylink\ngpus_per_node: 4\n"
        "intra_node: {kind: nvswitch, bandwidth: 200 GB/s}\n"
        "inter_node: {kind: ethernet, bandwidth: 10 Gb/s}\n"
        "sources: [{title: test, fields: [gpu, gpus_per_node, intra_node, inter_node]}]\n"
    )
    big = gm.predict(AllReduce(bytes="1GB", gpus=8, system=str(path)), nvl, "none")
    t = {r["algorithm"]: r["time_s"] for r in big.details["algorithms"]}
    assert t["hierarchical"] < t["flat_ring"]


def test_requested_algorithm_must_exist():
    with pytest.raises(UnsupportedError, match="choose from"):
        gm.predict(AllGather(bytes=1e6, gpus=4, algorithm="tree"), "h100", "none")
    p = gm.predict(AllReduce(bytes=1e6, gpus=8, algorithm="recursive_doubling"), "h100", "none")
    assert p.details["algorithm"] == "recursive_doubling" and "requested" in p.details["why"]


def test_links():
    with pytest.raises(UnsupportedError, match="no NVLink"):
        gm.predict(AllReduce(bytes=1e6, gpus=2, link="nvlink"), "l40s", "none")
    pcie = gm.predict(AllReduce(bytes=1e9, gpus=2), "l40s", "none")
    assert pcie.details["topology"]["intra_node"]["kind"] == "pcie"
    bridged = gm.predict(AllReduce(bytes=1e9, gpus=4), "a100-pcie", "none")
    assert bridged.details["topology"]["intra_node"]["kind"] == "pcie"  # bridges join pairs
    net = gm.predict(AllReduce(bytes=1e9, gpus=4, link="network"), "h100", "none")
    assert net.details["topology"]["intra_node"]["kind"] == "network"


def test_other_collectives_predict():
    for cls in (AllGather, ReduceScatter, Broadcast):
        p = gm.predict(cls(bytes="256MB", gpus=8), "h100", "none")
        assert p.time_s > 0 and p.details["algorithm"] == "ring"
    a2a = gm.predict(collective_op("all_to_all", bytes="1GB", gpus=16, system="dgx-h100"),
                     "h100", "none")  # fmt: skip
    assert a2a.details["algorithm"] == "pairwise"
    sr = gm.predict(collective_op("send_recv", bytes="1GB", gpus=2), "h100", "none")
    assert sr.details["bus_factor"] == 1.0


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(COLLECTIVE_OPS)),
    gpus=st.sampled_from([2, 3, 8, 16, 64]),
    a=st.floats(1.0, 1e10),
    b=st.floats(1.0, 1e10),
)
def test_time_monotone_in_bytes(name, gpus, a, b):
    lo, hi = sorted((a, b))
    system = "dgx-h100" if gpus > 8 else None
    t_lo = gm.predict(collective_op(name, bytes=lo, gpus=gpus, system=system), "h100", "none")
    t_hi = gm.predict(collective_op(name, bytes=hi, gpus=gpus, system=system), "h100", "none")
    assert t_lo.time_s <= t_hi.time_s * (1 + 1e-12)
    assert t_lo.time_s > 0


# --------------------------------------------------------------------------- calibration


def test_calibrated_line_used_for_its_gpu_count(nvl):
    cal = _Cal({"all_reduce@2": CollectiveParams(gpus=2, alpha_s=20e-6,
                bus_bandwidth_bytes_per_s=80e9, link_efficiency=0.8)})  # fmt: skip
    p = AllReduce(bytes=1e9, gpus=2).predict_on(nvl, cal)
    # alpha + S x 2(n-1)/n / busbw = 20 us + 1e9 x 1 / 80e9
    assert p.time_s == pytest.approx(20e-6 + 1e9 / 80e9)
    assert p.details["calibrated"] == "exact"


def test_calibration_transfers_to_more_gpus(nvl):
    cal = _Cal({"all_reduce@2": CollectiveParams(gpus=2, alpha_s=20e-6,
                bus_bandwidth_bytes_per_s=70e9, link_efficiency=0.7)})  # fmt: skip
    p = AllReduce(bytes=1e9, gpus=8).predict_on(nvl, cal)
    hop = comm.DEFAULT_STEP_LATENCY_S["nvlink"]
    # floor: 20 us + (14 - 2) ring steps x hop; busbw: 0.7 x 100 GB/s = 70 GB/s
    expected = 20e-6 + 12 * hop + 1e9 * 1.75 / 70e9
    assert p.time_s == pytest.approx(expected)
    assert "transferred" in p.terms[0].name and "transferred" in p.details["why"]


def test_a_measured_line_replayed_in_a_graph_pays_nccls_own_latency(nvl):
    """validate --collectives times back-to-back eager torch.distributed calls: their floor is
    a Python call each (44 us on 4 x H200, where NCCL's own model on that machine says 7.8 us for
    a 2-GPU ring). A CUDA graph replays the NCCL kernel with no call: its latency is NCCL's
    baseLat + steps x hwLat (tuning.cc, ring LL on NVLink) and its bandwidth the measured one,
    each times what a graph replay on 2 x H200 measured against them (GRAPH_ALPHA_FACTOR,
    GRAPH_BUS_FACTOR)."""
    from gpumodel.ops.collectives import GRAPH_ALPHA_FACTOR as A
    from gpumodel.ops.collectives import GRAPH_BUS_FACTOR as B

    cal = _Cal({"all_reduce@4": CollectiveParams(gpus=4, alpha_s=44e-6,
                bus_bandwidth_bytes_per_s=80e9, link_efficiency=0.8)})  # fmt: skip
    n = 1e6
    beta = n * 1.5 / 80e9  # S x 2(n-1)/n / busbw
    eager = AllReduce(bytes=n, gpus=4).predict_on(nvl, cal)
    assert eager.time_s == pytest.approx(44e-6 + beta)
    graph = AllReduce(bytes=n, gpus=4, in_graph=True).predict_on(nvl, cal)
    # 6.6 us + 2(4-1) ring steps x 0.6 us, by hand from NCCL's constants
    assert graph.time_s == pytest.approx(A * (6.6e-6 + 6 * 0.6e-6) + beta / B)
    assert "CUDA graph" in graph.terms[0].name and "44 µs" in graph.terms[0].note
    # the array path the LLM sweeps take gives the same
    arr = time_array(AllReduce(bytes=n, gpus=4, in_graph=True), nvl, cal, np.array([n, n]))
    assert arr == pytest.approx([graph.time_s] * 2)
    # measured at 2 GPUs and carried to 4: the same NCCL latency in a graph
    two = _Cal({"all_reduce@2": CollectiveParams(gpus=2, alpha_s=38e-6,
                bus_bandwidth_bytes_per_s=80e9, link_efficiency=0.8)})  # fmt: skip
    carried = AllReduce(bytes=n, gpus=4, in_graph=True).predict_on(nvl, two)
    assert carried.terms[0].value == pytest.approx(A * (6.6e-6 + 6 * 0.6e-6))


def test_in_graph_latency_is_what_nccl_printed_on_the_measured_machine():
    """NCCL 2.28.9's own cost model, printed at init on the 2 x H200 the collectives were
    measured on: AllReduce Ring LL 7.8 us, and it picked Ring LL for 4 and 8 bytes
    (validation/results/h200-sxm-x2/nccl-tuning-table.txt). The in-graph price of a tiny
    all-reduce there is that latency times what a graph replay measured against it, within
    10% of the replay timed on that machine (10.8 us at 1 KiB: nccl-graph-2026-11-29); the
    eager one, the measured 38 us floor."""
    from gpumodel.ops.collectives import GRAPH_ALPHA_FACTOR

    table = (RESULTS / "h200-sxm-x2" / "nccl-tuning-table.txt").read_text()
    row = next(line for line in table.splitlines() if line.strip().startswith("AllReduce |"))
    ring_ll_us = float(row.split("|")[4].split("/")[0])
    assert ring_ll_us == 7.8
    op = AllReduce(bytes=8, gpus=2)
    graph = gm.predict(op.model_copy(update={"in_graph": True}), "h200").time_s
    assert graph == pytest.approx(GRAPH_ALPHA_FACTOR * ring_ll_us * 1e-6, abs=0.05e-6)
    replays = json.loads((RESULTS / "h200-sxm-x2" / "nccl-graph-2026-11-29" /
                          "nccl-graph.json").read_text())["rows"]  # fmt: skip
    kib = next(r for r in replays if r["collective"] == "all_reduce" and r["bytes"] == 1024)
    assert graph == pytest.approx(kib["graph_s"], rel=0.10)
    assert gm.predict(op, "h200").time_s == pytest.approx(38.3e-6, abs=0.1e-6)


def test_graph_runtimes_price_tensor_parallel_all_reduces_in_the_graph():
    """H200's measured 4-GPU line (an eager loop's 44 us floor) had a fused-graph 70B decode
    at tp 4 slower on the H200 than on the H100 (19.8 against 17.8 ms at batch 32), the
    all-reduces 38% of its step; an hf-eager step still calls them from Python."""
    h200 = gm.get_gpu("h200")
    kw = dict(batch=32, context=1152, gpus=4, tp=4)
    graph = gm.predict_inference("llama-3-70b", h200, "decode", runtime="fused-graph", **kw)
    eager = gm.predict_inference("llama-3-70b", h200, "decode", runtime="hf-eager", **kw)
    h100 = gm.predict_inference("llama-3-70b", "h100", "decode", runtime="fused-graph", **kw)
    one = AllReduce(bytes=32 * 8192 * 2, gpus=4)  # batch x hidden x bf16 per token step
    in_graph = gm.predict(one.model_copy(update={"in_graph": True}), h200).time_s
    called = gm.predict(one, h200).time_s
    assert called > 2 * in_graph  # the measured eager floor against a graph's latency
    per_layer = {o.name: o.time_s / o.count for o in graph.breakdown}
    assert per_layer["tp_all_reduce_mlp"] == pytest.approx(in_graph, rel=1e-9)
    per_layer_eager = {o.name: o.time_s / o.count for o in eager.breakdown}
    assert per_layer_eager["tp_all_reduce_mlp"] == pytest.approx(called, rel=1e-9)
    # more HBM bandwidth, the same NVLink: a memory-bound decode is not slower on the H200
    assert graph.time_s < h100.time_s


def test_calibration_not_applied_to_a_forced_other_link(nvl):
    cal = _Cal({"all_reduce@2": CollectiveParams(gpus=2, alpha_s=1e-3,
                bus_bandwidth_bytes_per_s=1e9, link_efficiency=0.01)})  # fmt: skip
    p = AllReduce(bytes=1e9, gpus=2, link="pcie").predict_on(nvl, cal)
    assert not p.details["calibrated"]
    assert any(t.name == "calibration not applied" for t in p.terms)


# --------------------------------------------------------------------------- the runner's math


def test_message_sizes_and_records():
    assert runner.message_sizes(1024, 4096, 2) == [1024, 2048, 4096]
    assert len(runner.message_sizes()) == 23  # 1 KiB .. 4 GiB, x2
    assert runner.element_count("all_gather", 1000, 3) % 3 == 0
    rec = runner.make_record("all_reduce", 2**30, 8, 0.01, 5, 0.01)
    assert rec["op"] == {"op": "all_reduce", "bytes": 2**30, "gpus": 8, "dtype": "bf16"}
    assert rec["meta"]["busbw"] == pytest.approx(2**30 / 0.01 * 1.75)
    assert runner.iterations(1e-5) == 200 and runner.iterations(1.0) == 3


def _synthetic(alpha: float, bus: float, name: str = "all_reduce", n: int = 2) -> list[dict]:
    f = comm.bus_factor(name, n)
    return [runner.make_record(name, s, n, alpha + s * f / bus, 10, 0.0)
            for s in runner.message_sizes(1024, 2**32, 2)]  # fmt: skip


def test_fit_recovers_alpha_and_busbw(nvl):
    recs = _synthetic(25e-6, 80e9) + _synthetic(30e-6, 70e9, "all_gather", 4)
    params = runner.fit_collectives(recs, nvl)
    assert params["all_reduce@2"].alpha_s == pytest.approx(25e-6, rel=1e-6)
    assert params["all_reduce@2"].bus_bandwidth_bytes_per_s == pytest.approx(80e9, rel=1e-6)
    assert params["all_reduce@2"].link_efficiency == pytest.approx(0.8, rel=1e-6)
    assert params["all_gather@4"].bus_bandwidth_bytes_per_s == pytest.approx(70e9, rel=1e-6)


def test_fit_is_robust_to_a_few_outliers():
    sizes = runner.message_sizes(1024, 2**32, 2)
    times = [20e-6 + s / 100e9 for s in sizes]
    for i in (10, 11, 12):  # a mid-size bump (protocol switch) of +60 %
        times[i] *= 1.6
    alpha, bus = runner.fit_alpha_busbw(sizes, times, 1.0)
    assert alpha == pytest.approx(20e-6, rel=0.02)
    assert bus == pytest.approx(100e9, rel=0.02)


def test_evaluate_scores_the_calibrated_model_exactly(nvl):
    recs = _synthetic(25e-6, 80e9)
    res = runner.evaluate(recs, nvl)
    assert res["calibrated_held_out"]["all_reduce@2"]["median_abs_pct"] < 1e-3
    assert res["passed"] is True
    text = runner.calibration_fragment(res, {"device_name": "test", "world": 2}, nvl)
    assert "all_reduce@2" in text and "collective:all_reduce@2" in text
    # a system calibration that predictions can find: GPU, GPU count and link are in it
    import yaml

    from gpumodel.calibration import Calibration

    cal = Calibration.model_validate(yaml.safe_load(text))
    assert cal.gpu_id == nvl.id and (cal.system.gpus, cal.system.interconnect) == (2, "nvlink")
    md = runner.markdown_report(recs, res, {"device_name": "test", "world": 2}, nvl)
    assert "| all_reduce@2 |" in md and "PASS" in md


def test_runner_sets_the_nvlink_multicast_guards():
    import os

    for key, value in runner.SAFE_ENV.items():
        assert os.environ[key] == value
    assert runner.SAFE_ENV["NCCL_NVLS_ENABLE"] == "0"


# --------------------------------------------------------------------------- CLI


def test_cli_allreduce_prints_table_plain_line_and_explanation(capsys):
    assert main(["allreduce", "--bytes", "28GB", "--gpus", "8", "--gpu", "a100",
                 "--link", "pcie", "--link-bandwidth", "32GB/s"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "875 ms" in out and "1.75" in out and "<- chosen" in out and "busbw" in out
    assert main(["allreduce", "--bytes", "28GB", "--gpus", "8", "--gpu", "a100",
                 "--link", "nvlink"]) == 0  # fmt: skip
    assert "93.3 ms" in capsys.readouterr().out


def test_cli_allreduce_in_graph(capsys):
    """--in-graph reaches the model: 2 x H200, 8 bytes: the measured eager floor 38.3 us, in a
    graph 1.5 x NCCL's own 7.8 us (test_in_graph_latency_is_what_nccl_printed_on_the_measured_machine)."""
    args = ["allreduce", "--bytes", "8", "--gpus", "2", "--gpu", "h200", "--json"]
    assert main(args) == 0
    eager = json.loads(capsys.readouterr().out)["time_s"]
    assert main([*args, "--in-graph"]) == 0
    graph = json.loads(capsys.readouterr().out)["time_s"]
    assert eager == pytest.approx(38.3e-6, abs=0.1e-6)
    assert graph == pytest.approx(1.5 * 7.8e-6, abs=0.05e-6)


def test_cli_channels_what_if(capsys):
    """--channels reaches the model from both commands: 2 x H200 all-gather of 1 GiB at 32
    channels = 7.2 us + 2^29 / 360e9 + 2^29 / (32 x 38.7e9) = 1.932 ms."""
    assert main(["allreduce", "--bytes", "1GiB", "--gpus", "2", "--gpu", "h200", "--collective",
                 "all_gather", "--channels", "32", "--calibration", "none", "--json"]) == 0  # fmt: skip
    t = json.loads(capsys.readouterr().out)["time_s"]
    assert t == pytest.approx(7.2e-6 + 2**29 / 360e9 + 2**29 / (32 * 38.7e9))
    assert main(["predict", "all_gather", "--bytes", "1GiB", "--gpus", "2", "--gpu", "h200",
                 "--channels", "32", "--calibration", "none", "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    rows = out if isinstance(out, list) else [out]
    assert rows[0]["time_s"] == pytest.approx(t)


def test_cli_allreduce_json(capsys):
    assert main(["allreduce", "--bytes", "1GB", "--gpus", "16", "--system", "dgx-h100",
                 "--json"]) == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert data["details"]["algorithm"] == "ring"
    assert {r["algorithm"] for r in data["details"]["algorithms"]} >= {"hierarchical", "flat_ring"}
    assert math.isfinite(data["details"]["busbw_bytes_per_s"])


def test_cli_table_says_when_a_measured_line_priced_the_prediction(capsys):
    """The table lists each algorithm as the model prices it; where the calibration's measured
    NCCL line set the prediction (the H200's 4-GPU fit), the chosen row's time is not the
    headline's, and the table's caption says which one the prediction is."""
    argv = ["allreduce", "--bytes", "512KiB", "--gpus", "4", "--gpu", "h200", "--in-graph"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    chosen = next(r for r in data["details"]["algorithms"] if r["chosen"])
    assert chosen["time_s"] != pytest.approx(data["time_s"], rel=1e-3)
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"the prediction ({gm.format_time(data['time_s'])}) is the calibration's measured" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["allreduce", "--bytes", "-5GB", "--gpus", "8"],
        ["allreduce", "--bytes", "5GB", "--gpus", "0"],
        ["allreduce", "--bytes", "5 parsecs", "--gpus", "8"],
        ["allreduce", "--bytes", "5GB", "--gpus", "8", "--collective", "allsum"],
        ["allreduce", "--bytes", "5GB", "--gpus", "8", "--link", "carrier-pigeon"],
        ["allreduce", "--bytes", "5GB", "--gpus", "16", "--system", "a100-pcie-8x"],
        ["allreduce", "--bytes", "5GB", "--gpus", "8", "--system", "dgx-h900"],
        ["allreduce", "--bytes", "5GB", "--gpus", "2", "--gpu", "h200", "--channels", "0"],
        ["allreduce", "--bytes", "5GB", "--gpus", "2", "--gpu", "mi300x", "--channels", "8"],
        [
            "predict",
            "all_gather",
            "--bytes",
            "5GB",
            "--gpus",
            "2",
            "--nodes",
            "2",
            "--channels",
            "8",
        ],
    ],
)
def test_cli_allreduce_bad_input_exits_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1


def test_cli_one_gpu(capsys):
    assert main(["allreduce", "--bytes", "5GB", "--gpus", "1"]) == 0
    assert "one GPU" in capsys.readouterr().out


def test_runner_end_to_end_on_cpu_processes(tmp_path, nvl):
    """The spawn / rendezvous / timing / fit / report path, with gloo on two CPU processes."""
    pytest.importorskip("torch")
    summary = runner.run_collectives_validation(
        tmp_path, gpu=nvl, min_bytes=1024, max_bytes=64 * 1024, step=4, world=2,
        backend="gloo", progress=None, target_s=0.002, batches=2, warmup=1,
    )  # fmt: skip
    assert summary["measured"] == 3 * 4  # three collectives x 1, 4, 16, 64 KiB
    data = json.loads((tmp_path / "collectives_measurements.json").read_text())
    assert {r["op"]["op"] for r in data["records"]} == set(runner.MEASURED)
    assert all(r["time_s"] > 0 and r["op"]["gpus"] == 2 for r in data["records"])
    assert (tmp_path / "collectives_report.md").read_text().startswith("# NCCL collectives")
    assert (tmp_path / "collectives_calibration.yaml").is_file()  # CPU timings: fit may be flat


def test_refit_from_saved_measurements(tmp_path, nvl):
    saved = tmp_path / "m.json"
    info = {"device_name": "test", "world": 2, "min_bytes": 1024, "max_bytes": 2**32, "step": 2}
    saved.write_text(json.dumps({"info": info, "records": _synthetic(25e-6, 80e9)}))
    summary = runner.refit(saved, tmp_path / "out", gpu=nvl, progress=None)
    assert summary["passed"] is True
    assert summary["params"]["all_reduce@2"]["alpha_s"] == pytest.approx(25e-6, rel=1e-6)
    report = (tmp_path / "out" / "collectives_report.md").read_text()
    assert "from the saved `m.json`" in report and "no new measurements" in report


RESULTS = Path(__file__).resolve().parents[1] / "validation" / "results"


@pytest.mark.parametrize(
    "run", ["h200-sxm-x2", "h200-sxm-x2/cli-run", "h200-sxm-x4", "h200-sxm-x4/run2"]
)
def test_datasheet_model_meets_issue_5_target_on_the_committed_nccl_runs(run):
    """Issue #5: from the spec alone, median error <= 25% for messages >= 64 MB, on NCCL runs
    measured on 2 x and 4 x H200 (committed). With the ring's receive-only steps the medians are
    4.4-8.5%, so the test holds them to 10%; without that step all-gather and reduce-scatter on
    2 GPUs were 28-31%."""
    data = json.loads((RESULTS / run / "collectives_measurements.json").read_text())
    errors = runner.collective_errors(data["records"], None, gm.get_gpu("h200"), 64 * 2**20)
    assert set(errors) == {f"{c}@{data['info']['world']}" for c in runner.MEASURED}
    for key, e in errors.items():
        assert e["n"] == 7, key  # 64 MiB .. 4 GiB
        assert e["median_abs_pct"] <= 10.0, (key, e)


def test_channel_count_speedup_matches_nccl_measured_on_2xh200():
    """NCCL pinned to 32 channels instead of its 24 on 2 x H200 (nccl-variants.json, measured):
    all-gather / reduce-scatter ran 1.057-1.091x faster, all-reduce 1.037-1.053x. The model,
    whose receive-only step takes 1/channels of the time, predicts 1.071-1.075x and 1.041-1.042x;
    a model without that step predicts 1.000x."""
    rows = json.loads((RESULTS / "h200-sxm-x2" / "nccl-variants.json").read_text())
    time_s = {(r["variant"], r["collective"], r["bytes"]): r["time_s"] for r in rows}
    for (variant, name, nbytes), t24 in time_s.items():
        if variant != "default":
            continue
        measured = t24 / time_s[("min-32-channels", name, nbytes)]
        model = [gm.predict(collective_op(name, bytes=nbytes, gpus=2, channels=k), "h200",
                            "none").time_s for k in (24, 32)]  # fmt: skip
        assert model[0] / model[1] == pytest.approx(measured, abs=0.02), (name, nbytes)


def test_cli_validate_collectives_refits_saved_measurements(tmp_path, capsys):
    """`validate --collectives --from-measurements` re-scores a saved run without a GPU (it used
    to ignore the file and try to measure); a missing file or --occupancy exits 2."""
    saved = RESULTS / "h200-sxm-x2" / "collectives_measurements.json"
    assert main(["validate", "--collectives", "--from-measurements", str(saved),
                 "--report", str(tmp_path)]) == 0  # fmt: skip
    report = (tmp_path / "collectives_report.md").read_text()
    assert "Re-fitted on" in report and "| all_gather@2 |" in report
    for argv in (["--from-measurements", str(tmp_path / "missing.json")],
                 ["--occupancy", "--from-measurements", str(saved)]):  # fmt: skip
        assert main(["validate", "--collectives", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and err.count("\n") == 1


@pytest.mark.parametrize("gpus, links_used", [(2, 1), (4, 3), (8, 7)])
def test_infinity_fabric_mesh_gives_a_collective_its_peers_links(gpus, links_used):
    """MI300X: 7 Infinity Fabric links of 128 GB/s (both directions) per GPU, one to each peer
    of an 8-GPU platform (AMD's datasheet: 896 GB/s). n GPUs of the node reach each other over
    n - 1 links, 64 GB/s each way apiece: 64, 192 and 448 GB/s for 2, 4 and 8 GPUs."""
    mi300x = gm.get_gpu("mi300x")
    op = AllReduce(bytes=64 << 20, gpus=gpus)
    link = op.topology(mi300x).intra
    assert link.kind == "infinity_fabric"
    assert link.datasheet_bytes_per_s == pytest.approx(links_used * 128e9 / 2)
