"""System specs: shipped files load with sources, direction conventions, user files, errors."""

from __future__ import annotations

import json

import pytest

import gpumodel as gm
import gpumodel.cli.multigpu
from gpumodel.cli import main
from gpumodel.errors import SpecError, UnknownModelError
from gpumodel.ops.collectives import AllReduce
from gpumodel.systems import get_system, list_systems, load_system_file

SHIPPED = {"dgx-h100", "hgx-h200", "dgx-a100", "a100-pcie-8x", "l40s-2x"}
GOOD = (
    "id: my-pair\nname: my two GPUs\ngpu: h100-sxm\ngpus_per_node: 2\n"
    "intra_node: {kind: nvlink, bandwidth: 900 GB/s}\n"
    "sources: [{title: my cluster notes, fields: [gpu, gpus_per_node, intra_node]}]\n"
)


def test_shipped_systems_load_and_reference_known_gpus():
    systems = {s.id: s for s in list_systems()}
    assert SHIPPED <= set(systems)
    for s in systems.values():
        assert s.sources
        gm.get_gpu(s.gpu)  # every system names a GPU spec that exists


def test_dgx_h100_numbers_and_direction_conventions():
    s = get_system("dgx-h100")
    assert s.gpu == "h100-sxm" and s.gpus_per_node == 8
    # NVSwitch: 900 GB/s per GPU both directions summed = 450 GB/s each way
    assert s.intra_node.bandwidth_both_directions_bytes_per_s == pytest.approx(900e9)
    assert s.intra_node.per_direction_bytes_per_s == pytest.approx(450e9)
    # InfiniBand NDR: 400 Gb/s per GPU, per direction = 50 GB/s each way
    assert s.inter_node is not None
    assert s.inter_node.per_direction_bytes_per_s == pytest.approx(50e9)
    assert s.inter_node.nics_per_node == 8
    a100 = get_system("dgx-a100")
    assert a100.intra_node.per_direction_bytes_per_s == pytest.approx(300e9)
    assert a100.inter_node is not None
    assert a100.inter_node.per_direction_bytes_per_s == pytest.approx(25e9)
    pcie = get_system("a100-pcie-8x")
    assert pcie.intra_node.kind == "pcie" and pcie.inter_node is None
    assert pcie.intra_node.per_direction_bytes_per_s == pytest.approx(31.5e9)


def test_aliases_case_and_unknown():
    assert get_system("DGX-H100").id == "dgx-h100"
    assert get_system("hgx-h100").id == "dgx-h100"
    with pytest.raises(UnknownModelError, match="did you mean dgx-h100"):
        get_system("dgx-h10")


def test_user_system_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(GOOD)
    assert get_system(str(path)).id == "my-pair"
    assert "my-pair" in {s.id for s in list_systems([path])}
    assert get_system("my-pair", [path]).intra_node.kind == "nvlink"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace("gpus_per_node: 2", "gpus_per_node: 2\ngpus_per_nod: 3"),
         "gpus_per_nod: unknown key"),
        (GOOD.replace("900 GB/s", "900 GB"), "is a size in bytes, expected a bandwidth"),
        (GOOD.replace("kind: nvlink", "kind: carrier-pigeon"), "intra_node.kind"),
        (GOOD.replace("fields: [gpu, gpus_per_node, intra_node]", "fields: [gpu]"),
         "no source covers gpus_per_node, intra_node"),
    ],
)  # fmt: skip
def test_bad_system_files_name_the_problem(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=message):
        load_system_file(path)


def test_missing_file():
    with pytest.raises(SpecError, match="does not exist"):
        get_system("no/such/system.yaml")


def test_topology_from_a_system():
    # 16 GPUs of dgx-h100 fill two nodes
    p = gm.predict(AllReduce(bytes="1GB", gpus=16, system="dgx-h100"), "h100", "none")
    topo = p.details["topology"]
    assert (topo["nodes"], topo["gpus_per_node"]) == (2, 8)
    assert topo["inter_node"]["per_direction_bytes_per_s"] == pytest.approx(50e9)
    # four GPUs of one node
    p4 = gm.predict(AllReduce(bytes="1GB", gpus=4, system="dgx-h100"), "h100", "none")
    assert p4.details["topology"]["nodes"] == 1
    # a PCIe server with no network in its file cannot span nodes
    with pytest.raises(SpecError, match="no inter_node network"):
        gm.predict(AllReduce(bytes="1GB", gpus=16, system="a100-pcie-8x"), "a100-pcie", "none")
    with pytest.raises(SpecError, match="8 GPUs per node"):
        gm.predict(AllReduce(bytes="1GB", gpus=16, nodes=1, gpus_per_node=16,
                             system="dgx-h100"), "h100", "none")  # fmt: skip
    l40s = gm.predict(AllReduce(bytes="1GB", gpus=2, system="l40s-2x"), "l40s", "none")
    assert l40s.details["topology"]["intra_node"]["kind"] == "pcie"


def test_cli_systems(capsys, tmp_path):
    assert main(["systems"]) == 0
    out = capsys.readouterr().out
    assert "dgx-h100" in out and "400 Gb/s" in out
    path = tmp_path / "mine.yaml"
    path.write_text(GOOD)
    assert main(["systems", "--system-file", str(path), "--json"]) == 0
    ids = {s["id"] for s in json.loads(capsys.readouterr().out)}
    assert "my-pair" in ids and SHIPPED <= ids
    assert main(["allreduce", "--bytes", "1GB", "--gpus", "2", "--system-file", str(path)]) == 0
    assert "h100-sxm" in capsys.readouterr().out
