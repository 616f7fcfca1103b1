"""Occupancy model (gpumodel.model.occupancy), its CLI and the device check's pure parts.

Known cases are worked by hand in the comments, following cuda_occupancy.h (CUDA 12.x/13.0):
  W      = ceil(threads / 32)                                  warps per block
  L_warp = max_warps_per_SM // W
  rpw    = round_up(regs * 32, 256)                            registers per warp
  L_reg  = ((65536 // 4) // rpw) * 4 // W                      (unlimited when regs == 0)
  alloc  = round_up(smem + reserved, unit)                     reserved 1 KiB on CC >= 8.0
  L_smem = smem_config // alloc, smem_config = the carveout (max by default)
  blocks = min(L_warp, L_reg, L_smem, max_blocks_per_SM)
The fixture specs below follow the table of formulas.md §3, one per compute capability.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumodel.errors import SpecError, UnsupportedError
from gpumodel.model.occupancy import LIMITERS, occupancy, occupancy_table
from gpumodel.specs import GPUSpec

ROOT = Path(__file__).resolve().parents[1]
KIB = 1024

# cc: (architecture, threads/SM, blocks/SM, smem/SM KiB, carveouts KiB, opt-in KiB, unit, reserved)
CC_TABLE = {
    "7.0": ("volta", 2048, 32, 96, (0, 8, 16, 32, 64, 96), 96, 256, 0),
    "7.5": ("turing", 1024, 16, 64, (32, 64), 64, 256, 0),
    "8.0": ("ampere", 2048, 32, 164, (0, 8, 16, 32, 64, 100, 132, 164), 163, 128, 1024),
    "8.6": ("ampere", 1536, 16, 100, (0, 8, 16, 32, 64, 100), 99, 128, 1024),
    "8.9": ("ada", 1536, 24, 100, (0, 8, 16, 32, 64, 100), 99, 128, 1024),
    "9.0": ("hopper", 2048, 32, 228, (0, 8, 16, 32, 64, 100, 132, 164, 196, 228), 227, 128, 1024),
    "10.0": ("blackwell", 2048, 32, 228, (0, 8, 16, 32, 64, 100, 132, 164, 196, 228), 227, 128,
             1024),
}  # fmt: skip


def make_gpu(cc: str, vendor: str = "nvidia", **extra) -> GPUSpec:
    arch, threads, blocks, smem_kib, carveouts, optin_kib, unit, reserved = CC_TABLE[cc]
    data = {
        "id": f"fixture-cc{cc.replace('.', '')}",
        "name": f"fixture CC {cc}",
        "vendor": vendor,
        "architecture": arch,
        "compute_capability": cc,
        "sm_count": 100,
        "boost_clock": "1.5 GHz",
        "sm_limits": {
            "max_threads": threads,
            "max_warps": threads // 32,
            "max_blocks": blocks,
            "shared_memory": f"{smem_kib} KiB",
            "carveouts_kib": list(carveouts),
            "shared_memory_per_block_optin": f"{optin_kib} KiB",
            "shared_memory_unit": f"{unit} B",
            "reserved_shared_memory": f"{reserved} B",
        },
        "l2_cache": "40 MiB",
        "memory": {"type": "HBM", "capacity": "80 GB", "bandwidth": "2 TB/s"},
        "peak": {"vector": {"fp32": "19.2 TFLOP/s"}},
        "tdp": "400 W",
        "sources": [{"title": "fixture", "fields": ["sm_limits"]}],
        **extra,
    }
    return GPUSpec.model_validate(data)


GPUS = {cc: make_gpu(cc) for cc in CC_TABLE}


# ---------------------------------------------------------------------------------------------
# known cases, by hand

# (cc, threads, regs, smem bytes, carveout, blocks/SM, limiters, occupancy)
KNOWN = [
    # CC 7.0, warps: W=8, L_warp=64//8=8; rpw=24*32=768, 16384//768=21, 21*4//8=10; no smem
    ("7.0", 256, 24, 0, None, 8, ("warps",), 1.0),
    # CC 7.0, warps and registers tie: rpw=1024, 16384//1024=16, 16*4//8=8 = L_warp
    ("7.0", 256, 32, 0, None, 8, ("warps", "registers"), 1.0),
    # CC 7.0, shared memory: alloc=round_up(20000, 256)=20224, 98304//20224=4; W=4,
    # L_warp=16, L_reg=16*4//4=16 -> 4 blocks, 16 of 64 warps
    ("7.0", 128, 32, 20000, None, 4, ("shared_memory",), 0.25),
    # CC 7.5, blocks: W=1, L_warp=32; rpw=512, 16384//512=32, 32*4//1=128; 16 block slots
    ("7.5", 32, 16, 0, None, 16, ("blocks",), 0.5),
    # CC 7.5, registers: rpw=128*32=4096, 16384//4096=4, 4*4//8=2; L_warp=32//8=4 -> 16 of 32
    ("7.5", 256, 128, 0, None, 2, ("registers",), 0.5),
    # CC 7.5, carveout 0% -> 0 B, aligned up to Turing's smallest config 32 KiB;
    # alloc=round_up(10000, 256)=10240, 32768//10240=3; W=2, L_warp=16, L_reg=64//2=32
    ("7.5", 64, 32, 10000, 0, 3, ("shared_memory",), 6 / 32),
    # CC 8.0, shared memory: alloc=49152+1024=50176, 167936//50176=3; L_warp=8, L_reg=8
    ("8.0", 256, 32, 48 * KIB, None, 3, ("shared_memory",), 24 / 64),
    # CC 8.0, the whole opt-in 163 KiB: alloc=166912+1024=167936, 167936//167936=1
    ("8.0", 128, 32, 163 * KIB, None, 1, ("shared_memory",), 4 / 64),
    # CC 8.0, 1 byte over the opt-in limit: the block cannot launch
    ("8.0", 128, 32, 163 * KIB + 1, None, 0, ("shared_memory",), 0.0),
    # CC 8.6, warps: W=16, L_warp=48//16=3; rpw=1024, 16*4//16=4; alloc=1024, 102400//1024=100
    ("8.6", 512, 32, 0, None, 3, ("warps",), 1.0),
    # CC 8.6, warps: W=32, L_warp=48//32=1 (32 of 48 warps); L_reg=64//32=2
    ("8.6", 1024, 32, 0, None, 1, ("warps",), 32 / 48),
    # CC 8.6, blocks: W=2, L_warp=24; rpw=512, 32*4//2=64; 16 block slots
    ("8.6", 64, 16, 0, None, 16, ("blocks",), 32 / 48),
    # CC 8.9, blocks: W=1, L_warp=48, L_reg=64, L_smem=100; 24 block slots
    ("8.9", 32, 32, 0, None, 24, ("blocks",), 0.5),
    # CC 8.9, registers: rpw=96*32=3072, 16384//3072=5, 5*4//4=5; L_warp=12
    ("8.9", 128, 96, 0, None, 5, ("registers",), 20 / 48),
    # CC 9.0 (the brief's H100 case): rpw=2048, 16384//2048=8, 8*4//8=4; L_warp=8
    ("9.0", 256, 64, 0, None, 4, ("registers",), 0.5),
    # CC 9.0, registers do not fit: 1024 threads x 72 regs: rpw=2304, 2304*32=73728 > 65536
    ("9.0", 1024, 72, 0, None, 0, ("registers",), 0.0),
    # CC 9.0, 800 threads x 80 regs: W=25, rpw=2560; 2560*roundup(25,4)=71680 > 65536 -> 0
    ("9.0", 800, 80, 0, None, 0, ("registers",), 0.0),
    # CC 9.0, carveout 0% -> 0 KiB config < alloc=round_up(11024,128)=11136 -> the smallest
    # config holding one block, 16 KiB: 16384//11136=1
    ("9.0", 128, 32, 10000, 0, 1, ("shared_memory",), 4 / 64),
    # CC 9.0, carveout 50%: 50*233472//100=116736 -> 132 KiB=135168; 135168//11136=12
    ("9.0", 128, 32, 10000, 50, 12, ("shared_memory",), 48 / 64),
    # CC 9.0, no registers (INT_MAX in the header), 32 block slots bind; alloc=1024 -> 228
    ("9.0", 32, 0, 0, None, 32, ("blocks",), 0.5),
    # CC 10.0, warps and shared memory tie: W=32, L_warp=2; alloc=102400+1024=103424,
    # 233472//103424=2; rpw=512, 32*4//32=4
    ("10.0", 1024, 16, 100 * KIB, None, 2, ("warps", "shared_memory"), 1.0),
    # CC 10.0, the whole opt-in 227 KiB: alloc=232448+1024=233472 -> 1
    ("10.0", 256, 32, 227 * KIB, None, 1, ("shared_memory",), 8 / 64),
]


@pytest.mark.parametrize(
    ("cc", "threads", "regs", "smem", "carveout", "blocks", "lim", "occ"), KNOWN
)
def test_known_cases(cc, threads, regs, smem, carveout, blocks, lim, occ):
    r = occupancy(GPUS[cc], threads, regs, smem, carveout)
    assert r.blocks_per_sm == blocks
    assert r.limiters == lim
    assert r.occupancy == pytest.approx(occ)
    assert r.active_warps_per_sm == blocks * r.warps_per_block
    assert r.active_threads_per_sm == 32 * r.active_warps_per_sm


def test_each_resource_limits_some_case():
    seen = {name for case in KNOWN for name in case[6]}
    assert seen == set(LIMITERS)
    assert {case[0] for case in KNOWN} == set(CC_TABLE)


def test_h100_case_details():
    r = occupancy(GPUS["9.0"], 256, 64, 48 * KIB)
    assert r.registers_per_warp_allocated == 2048
    assert r.registers_per_block_allocated == 16384
    # 48 KiB + 1 KiB reserved, already a multiple of 128 B
    assert r.shared_mem_per_block_allocated_bytes == 50176
    # default carveout: the maximum configuration, 228 KiB
    assert r.shared_memory_per_sm_bytes == 228 * KIB
    # 233472 // 50176 = 4, the same as registers
    assert r.block_limits == {"warps": 8, "registers": 4, "blocks": 32, "shared_memory": 4}
    assert r.limiters == ("registers", "shared_memory")
    assert not r.needs_opt_in
    assert occupancy(GPUS["9.0"], 256, 64, 48 * KIB + 1).needs_opt_in


def test_unlimited_resources_are_none():
    # CC 7.0 has no reserved shared memory: no smem and no registers limit nothing
    r = occupancy(GPUS["7.0"], 64, 0, 0)
    assert r.block_limits["registers"] is None
    assert r.block_limits["shared_memory"] is None
    assert r.blocks_per_sm == 32


def test_volta_zero_carveout_keeps_zero_config():
    # Volta has a 0 KB configuration; with no shared memory the block needs none
    r = occupancy(GPUS["7.0"], 128, 32, 0, carveout=0)
    assert r.shared_memory_per_sm_bytes == 0
    assert r.block_limits["shared_memory"] is None


def test_zero_blocks_has_a_note():
    r = occupancy(GPUS["9.0"], 1024, 72)
    assert r.blocks_per_sm == 0
    assert "registers" in r.note
    r = occupancy(GPUS["9.0"], 128, 32, 228 * KIB)
    assert r.blocks_per_sm == 0
    assert "shared memory" in r.note


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 32), "threads per block must be 1..1024 on fixture-cc90, got 0"),
        ((1025, 32), "threads per block must be 1..1024 on fixture-cc90, got 1025"),
        ((256, 256), "registers per thread must be 0..255, got 256"),
        ((256, -1), "registers per thread must be 0..255, got -1"),
        ((256, 32, -5), "shared memory per block must be >= 0 bytes, got -5"),
        ((256, 32, 0, 101), "carveout must be a percent 0..100 or None, got 101"),
    ],
)
def test_bad_inputs(args, message):
    with pytest.raises(SpecError) as exc:
        occupancy(GPUS["9.0"], *args)
    assert str(exc.value) == message
    assert "\n" not in str(exc.value)


def test_non_integer_inputs():
    with pytest.raises(SpecError, match="whole numbers"):
        occupancy(GPUS["9.0"], 256, 32, 100.5)
    with pytest.raises(SpecError, match="percent"):
        occupancy(GPUS["9.0"], 256, 32, 0, carveout=50.0)
    with pytest.raises(SpecError, match="one number"):
        occupancy(GPUS["9.0"], [128, 256], 32)
    # a float that is a whole number (parse_quantity returns floats) is fine
    assert occupancy(GPUS["9.0"], 256, 32, 49152.0).shared_mem_per_block_bytes == 49152


def test_amd_and_cpu_are_unsupported():
    amd = make_gpu("9.0", vendor="amd")  # architecture "hopper": no AMD rules for it
    with pytest.raises(UnsupportedError, match="occupancy rules for AMD hopper are not modelled"):
        occupancy(amd, 256, 32)
    cpu = make_gpu("9.0", vendor="cpu")
    with pytest.raises(UnsupportedError, match="CPU spec"):
        occupancy(cpu, 256, 32)
    no_limits = GPUSpec.model_validate({**GPUS["9.0"].model_dump(by_alias=False),
                                        "sm_limits": None})  # fmt: skip
    with pytest.raises(UnsupportedError, match="no sm_limits"):
        occupancy(no_limits, 256, 32)


def test_table_matches_scalar():
    gpu = GPUS["8.6"]
    sizes = list(range(32, 1025, 32))
    table = occupancy_table(gpu, sizes, 40, 6000)
    for i, size in enumerate(sizes):
        r = occupancy(gpu, size, 40, 6000)
        assert table["blocks_per_sm"][i] == r.blocks_per_sm
        assert table["occupancy"][i] == pytest.approx(r.occupancy)
        assert table["limiters"][i] == r.limiters


def test_table_broadcasts():
    table = occupancy_table(GPUS["9.0"], np.array([[128], [256]]), np.array([32, 64, 128]), 0)
    assert table["blocks_per_sm"].shape == (2, 3)
    # 256 threads, 64 regs: the H100 case
    assert table["blocks_per_sm"][1, 1] == 4
    with pytest.raises(SpecError, match="got 2000"):
        occupancy_table(GPUS["9.0"], [256, 2000], 32)


cc_st = st.sampled_from(sorted(CC_TABLE))


@settings(max_examples=300, deadline=None)
@given(
    cc=cc_st,
    threads=st.integers(1, 1024),
    regs=st.integers(0, 255),
    smem=st.integers(0, 240 * KIB),
    carveout=st.one_of(st.none(), st.integers(0, 100)),
)
def test_occupancy_properties(cc, threads, regs, smem, carveout):
    gpu = GPUS[cc]
    if threads > gpu.sm_limits.max_threads_per_block:
        return
    r = occupancy(gpu, threads, regs, smem, carveout)
    assert 0.0 <= r.occupancy <= 1.0
    assert r.active_warps_per_sm <= gpu.sm_limits.max_warps_per_sm
    assert r.blocks_per_sm <= gpu.sm_limits.max_blocks_per_sm
    assert all(v is None or v >= r.blocks_per_sm for v in r.block_limits.values())
    assert r.limiters  # something always binds
    assert r.shared_memory_per_sm_bytes <= gpu.sm_limits.shared_memory_per_sm_bytes
    # more registers or more shared memory never give more blocks
    if regs < 255:
        assert occupancy(gpu, threads, regs + 1, smem, carveout).blocks_per_sm <= r.blocks_per_sm
    assert occupancy(gpu, threads, regs, smem + 128, carveout).blocks_per_sm <= r.blocks_per_sm


# ---------------------------------------------------------------------------------------------
# CLI


@pytest.fixture
def cli(monkeypatch):
    """``gpumodel.cli.main`` with GPU lookup served from the fixture specs."""
    import gpumodel.cli.occupancy as occ_cli
    from gpumodel.cli import main

    aliases = {"h100": "9.0", "a100": "8.0", "t4": "7.5", "amd": "amd"}

    def fake_gpu(name, specs_dir):
        key = aliases.get(name.lower())
        if key == "amd":
            return make_gpu("9.0", vendor="amd")
        if key is None:
            from gpumodel.errors import UnknownGPUError

            raise UnknownGPUError(name, aliases)
        return GPUS[key]

    monkeypatch.setattr(occ_cli, "_gpu", fake_gpu)
    return main


def test_cli_occupancy_human(cli, capsys):
    assert cli(["occupancy", "--gpu", "h100", "--threads", "256", "--regs", "64",
                "--smem", "48KiB"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "blocks/SM 4" in out
    assert "occupancy 50.0%" in out
    assert "limited by: registers, shared memory" in out
    assert "256 *" in out  # the asked size is marked in the table


def test_cli_occupancy_json(cli, capsys):
    assert cli(["occupancy", "--gpu", "h100", "--threads", "256", "--regs", "64",
                "--smem", "49152", "--json"]) == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert data["blocks_per_sm"] == 4
    assert data["limiters"] == ["registers", "shared_memory"]
    sizes = [row["threads_per_block"] for row in data["table"]]
    assert sizes[0] == 32 and 256 in sizes and sizes[-1] == 1024
    assert all(s % 64 == 0 or s in (32, 256) for s in sizes)


def test_cli_occupancy_carveout(cli, capsys):
    assert cli(["occupancy", "--gpu", "h100", "--threads", "128", "--regs", "32",
                "--smem", "10000", "--carveout", "50", "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["blocks_per_sm"] == 12


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--threads", "0", "--regs", "32"], "threads per block must be 1..1024"),
        (["--threads", "256", "--regs", "300"], "registers per thread must be 0..255"),
        (["--threads", "256", "--regs", "32", "--smem", "48 parsecs"], "unknown unit"),
        (["--threads", "256", "--regs", "32", "--smem", "3 GB/s"], "expected a size"),
        (["--threads", "256", "--regs", "32", "--carveout", "150"], "carveout must be"),
    ],
)
def test_cli_occupancy_bad_input(cli, capsys, argv, message):
    assert cli(["occupancy", "--gpu", "h100", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert message in err
    assert "Traceback" not in err


def test_cli_occupancy_unknown_and_amd(cli, capsys):
    assert cli(["occupancy", "--gpu", "nope", "--threads", "256", "--regs", "32"]) == 2
    assert "unknown GPU 'nope'" in capsys.readouterr().err
    assert cli(["occupancy", "--gpu", "amd", "--threads", "256", "--regs", "32"]) == 2
    err = capsys.readouterr().err
    assert "occupancy rules for AMD hopper are not modelled" in err and err.count("\n") == 1


def test_cli_unknown_gpu_real_library(capsys):
    import gpumodel.cli.occupancy  # noqa: F401  (registers the commands)
    from gpumodel.cli import main

    assert main(["occupancy", "--gpu", "no-such-gpu", "--threads", "256", "--regs", "32"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_cli_plot(cli, capsys, tmp_path):
    path = tmp_path / "occ.png"
    argv = ["occupancy", "--gpu", "h100", "--threads", "256", "--regs", "64", "--plot", str(path)]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert cli(argv) == 2
        err = capsys.readouterr().err
        assert err == "error: plotting needs matplotlib: pip install 'gpumodel[plot]'\n"
        return
    assert cli(argv) == 0
    assert path.stat().st_size > 1000


# ---------------------------------------------------------------------------------------------
# the device check: pure parts here, the comparison itself only where there is a GPU


def test_check_module_imports_nothing_heavy_at_import():
    """The GPU machine may lack pydantic: the module's top level imports the stdlib only."""
    source = (ROOT / "gpumodel" / "validate" / "occupancy_check.py").read_text()
    tree = ast.parse(source)
    top = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            top.add((node.module or "").split(".")[0])
    assert top <= {"__future__", "time", "collections", "pathlib", "typing"}


def test_device_name_to_spec_id():
    from gpumodel.validate.occupancy_check import spec_id_for_device

    assert spec_id_for_device("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert spec_id_for_device("NVIDIA H200") == "h200-sxm"
    assert spec_id_for_device("NVIDIA H100 PCIe") == "h100-pcie"
    assert spec_id_for_device("NVIDIA A100-SXM4-80GB") == "a100-sxm4-80gb"
    assert spec_id_for_device("NVIDIA L40S") == "l40s"
    assert spec_id_for_device("NVIDIA L4") == "l4"
    assert spec_id_for_device("NVIDIA A10G") == "a10g"
    assert spec_id_for_device("Something Else") is None


def test_probe_kernels_exist():
    source = (ROOT / "validation" / "kernels" / "occupancy_probe.cu").read_text()
    for name in ("occ_light", "occ_heavy", "occ_bounded", "occ_bounded96"):
        assert f"{name}(" in source


def test_device_script_records_failure_without_gpu(tmp_path, monkeypatch):
    """Without CuPy the script still writes JSON saying why, and exits 2."""
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is installed; the device test below covers the script")
    except ImportError:
        pass
    monkeypatch.syspath_prepend(str(ROOT / "validation" / "experiments"))
    import occupancy_check_device as script

    out = tmp_path / "r" / "occ.json"
    assert script.main(["--out", str(out)]) == 2
    data = json.loads(out.read_text())
    assert "error" in data and "cupy" in data["error"].lower()


@pytest.mark.requires_gpu
def test_matches_driver_on_this_gpu(tmp_path):
    pytest.importorskip("cupy")
    from gpumodel.validate.occupancy_check import run_occupancy_check

    try:
        result = run_occupancy_check(None, quick=True)
    except LookupError as exc:
        pytest.skip(str(exc))
    assert result["combinations"] > 1000
    assert result["n_mismatches"] == 0, result["mismatches"]


# CDNA3 (gfx942), against LLVM's AMDGPU occupancy math (AMDGPUBaseInfo.cpp IsaInfo):
# waves per SIMD = min(512 / roundup(vgprs, 8), 8); 4 SIMDs per CU; LDS 64 KiB in 512 B blocks.
@pytest.mark.parametrize(
    ("threads", "vgprs", "lds", "waves_per_cu"),
    [
        # llvm-calc-occupancy docs example (gfx90a, same rules): wg 512, 50 VGPRs -> 8 waves/EU
        (512, 50, 0, 32),
        # test/CodeGen/AMDGPU/agpr-register-count.ll: gfx90a TotalNumVgprs 56 -> Occupancy 8
        (64, 56, 0, 32),
        # 128 VGPRs -> 512 / 128 = 4 waves per SIMD -> 16 per CU (four 4-wave workgroups)
        (256, 128, 0, 16),
        # 257 VGPRs -> granule 264 -> 1 wave per SIMD -> 4 per CU: one 4-wave workgroup
        (256, 257, 0, 4),
        # 20 KiB of LDS per one-wave workgroup: 65536 // 20480 = 3 workgroups
        (64, 32, 20 * 1024, 3),
    ],
)
def test_cdna3_occupancy_matches_llvm(threads, vgprs, lds, waves_per_cu):
    from gpumodel.specs import get_gpu

    for gpu in ("mi300x", "mi325x"):
        occ = occupancy(get_gpu(gpu), threads, vgprs, lds)
        assert occ.active_warps_per_sm == waves_per_cu
        assert occ.max_warps_per_sm == 32


def test_cdna3_workgroup_that_cannot_fit():
    from gpumodel.specs import get_gpu

    # 1024 work-items = 16 waves, 4 per SIMD; at 256 VGPRs a SIMD would need 4 x 256 > 512
    occ = occupancy(get_gpu("mi300x"), 1024, 256)
    assert occ.blocks_per_sm == 0 and "registers" in (occ.note or "")
    # LDS above the 64 KiB a workgroup may have
    assert occupancy(get_gpu("mi300x"), 64, 32, 64 * 1024 + 1).blocks_per_sm == 0
