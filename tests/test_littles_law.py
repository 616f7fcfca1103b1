"""Little's law (gpumodel.model.littles_law): concurrency, latency-limited bandwidth, waves."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumodel.errors import SpecError, UnsupportedError
from gpumodel.model.littles_law import (
    DEFAULT_SOURCE,
    LATENCY_SOURCES,
    concurrency,
    latency_limited_bandwidth,
    littles_law,
    waves,
)
from gpumodel.specs import GPUSpec


def make_gpu(**over) -> GPUSpec:
    """An H100-SXM-like fixture: 132 SMs, 1980 MHz, 3.35 TB/s, 66.9 TFLOP/s FP32."""
    data = {
        "id": "fixture-h100",
        "name": "fixture H100",
        "vendor": "nvidia",
        "architecture": "hopper",
        "compute_capability": "9.0",
        "sm_count": 132,
        "boost_clock": "1980 MHz",
        "sm_limits": {
            "max_threads": 2048,
            "max_warps": 64,
            "max_blocks": 32,
            "shared_memory": "228 KiB",
            "carveouts_kib": [0, 8, 16, 32, 64, 100, 132, 164, 196, 228],
            "shared_memory_per_block_optin": "227 KiB",
            "shared_memory_unit": "128 B",
            "reserved_shared_memory": "1 KiB",
        },
        "l2_cache": "50 MiB",
        "memory": {"type": "HBM3", "capacity": "80 GB", "bandwidth": "3.35 TB/s"},
        "peak": {"vector": {"fp32": "66.9 TFLOP/s"}},
        "tdp": "700 W",
        "sources": [{"title": "fixture", "fields": ["sm_limits"]}],
    }
    data.update(over)
    return GPUSpec.model_validate(data)


H100 = make_gpu()
A100 = make_gpu(id="fixture-a100", architecture="ampere", sm_count=108, boost_clock="1410 MHz",
                memory={"type": "HBM2e", "capacity": "80 GB", "bandwidth": "2.039 TB/s"},
                peak={"vector": {"fp32": "19.5 TFLOP/s"}})  # fmt: skip


# ---------------------------------------------------------------------------------------------
# the plain law


def test_seed_fp32_example():
    # seed 000: FP32 latency 24 cycles, 8 FP32 ops per cycle -> 8 x 24 = 192 in flight
    assert littles_law(8, 24) == 192


def test_seed_escalator():
    # seed 000: a step every 2 s (0.5 person/s), 20 steps x 2 s = 40 s -> 20 persons
    assert littles_law(0.5, 40) == pytest.approx(20)


def test_littles_law_arrays():
    out = littles_law(np.array([1.0, 2.0, 4.0]), 10)
    assert out.tolist() == [10, 20, 40]


# ---------------------------------------------------------------------------------------------
# concurrency


def test_h100_bytes_in_flight():
    r = concurrency(H100, latency_dram_cycles=700)
    latency_s = 700 / 1.98e9  # 353.5 ns
    assert r.latency_dram_s == pytest.approx(latency_s)
    # 3.35e12 B/s x 353.5 ns = 1.184 MB in flight
    assert r.bytes_in_flight_needed == pytest.approx(3.35e12 * latency_s)
    assert r.bytes_in_flight_needed == pytest.approx(1.18434e6, rel=1e-4)
    # per SM: / 132 = 8972 B
    assert r.bytes_in_flight_per_sm == pytest.approx(8972.3, rel=1e-4)
    # one warp: 32 threads x 16 B = 512 B -> 8972 / 512 = 17.5 warps of 64
    assert r.bytes_in_flight_per_warp == 512
    assert r.warps_needed_per_sm == pytest.approx(17.524, rel=1e-3)
    assert r.exceeds_max_warps is False
    assert r.latency_source == "argument"


def test_ilp_and_small_loads():
    # ILP 4: four loads in flight per thread -> a quarter of the warps
    r4 = concurrency(H100, 700, ilp=4)
    assert r4.warps_needed_per_sm == pytest.approx(17.524 / 4, rel=1e-3)
    # 4-byte loads, no ILP: 8972 / 128 = 70 warps > 64: no occupancy can hide the latency
    r = concurrency(H100, 700, bytes_per_thread_in_flight=4)
    assert r.warps_needed_per_sm == pytest.approx(70.1, rel=1e-3)
    assert r.exceeds_max_warps is True


def test_arithmetic_concurrency():
    r = concurrency(H100)
    # FP32 lanes = 66.9e12 / (2 x 1.98e9 x 132) = 127.98 (128 per Hopper SM)
    assert r.fp32_lanes_per_sm == pytest.approx(128, rel=1e-3)
    # Hopper dependent FFMA ~4.5 cycles (formulas.md §4): 128 x 4.5 = 576 FMAs = 18 warps
    assert r.fma_latency_cycles == 4.5
    assert r.arithmetic_ops_in_flight_per_sm == pytest.approx(576, rel=1e-3)
    assert r.arithmetic_warps_needed_per_sm == pytest.approx(18, rel=1e-3)


def test_latency_sources():
    assert concurrency(H100, 650).latency_source == "argument"
    assert concurrency(H100, latency_dram_s=400e-9).latency_dram_cycles == pytest.approx(792)
    # published default for hopper: 650-700 cycles
    r = concurrency(H100)
    assert r.latency_source == DEFAULT_SOURCE == "default (published microbenchmarks)"
    assert 650 <= r.latency_dram_cycles <= 700
    assert r.latency_reference
    # the spec's latency block wins over the default
    spec = make_gpu(latency={"dram_cycles": 612})
    assert (concurrency(spec).latency_dram_cycles, concurrency(spec).latency_source) == (
        612,
        "spec",
    )
    # a calibration wins over the spec (a dict, or an object with .parameters)
    r = concurrency(spec, calibration={"dram_latency_cycles": 640})
    assert (r.latency_dram_cycles, r.latency_source) == (640, "calibration")

    class Params:
        dram_latency_cycles = 630.0

    class Cal:
        parameters = Params()
        label = "fixture calibration"

    r = concurrency(spec, calibration=Cal())
    assert (r.latency_dram_cycles, r.latency_source, r.latency_reference) == (
        630,
        "calibration",
        "fixture calibration",
    )
    # a calibration without the number falls through to the spec
    assert concurrency(spec, calibration={"dram_latency_cycles": None}).latency_source == "spec"
    for r in (concurrency(H100), concurrency(spec), concurrency(H100, 700)):
        assert r.latency_source in LATENCY_SOURCES


def test_architecture_defaults():
    assert 290 <= concurrency(A100).latency_dram_cycles <= 470
    assert concurrency(A100).fma_latency_cycles == 4.0
    blackwell = make_gpu(architecture="blackwell")
    r = concurrency(blackwell)
    assert r.latency_source == DEFAULT_SOURCE
    assert "none published here for blackwell" in r.latency_reference


def test_bad_inputs():
    with pytest.raises(SpecError, match="not both"):
        concurrency(H100, 700, 300e-9)
    with pytest.raises(SpecError, match="> 0 cycles"):
        concurrency(H100, 0)
    with pytest.raises(SpecError, match="ilp"):
        concurrency(H100, ilp=0)
    with pytest.raises(SpecError, match="bytes per thread"):
        concurrency(H100, bytes_per_thread_in_flight=0)
    cpu = make_gpu(vendor="cpu", sm_limits=None, compute_capability=None)
    with pytest.raises(UnsupportedError, match="CPU spec"):
        concurrency(cpu)


# ---------------------------------------------------------------------------------------------
# latency-limited bandwidth


def test_latency_limited_bandwidth():
    latency_s = 700 / 1.98e9
    # 8 warps/SM x 132 SMs x 32 threads x 16 B = 540,672 B in flight / 353.5 ns = 1.53 TB/s
    bw = latency_limited_bandwidth(H100, 8, 16, latency_s)
    assert bw == pytest.approx(132 * 8 * 32 * 16 / latency_s)
    assert bw == pytest.approx(1.5293e12, rel=1e-4)
    # 32 warps would move 6.1 TB/s: capped at the 3.35 TB/s peak
    assert latency_limited_bandwidth(H100, 32, 16, latency_s) == pytest.approx(3.35e12)
    arr = latency_limited_bandwidth(H100, np.array([0, 8, 64]), 16, latency_s)
    assert arr[0] == 0 and arr[2] == pytest.approx(3.35e12)


def test_concurrency_with_residency():
    r = concurrency(H100, 700, resident_warps_per_sm=8)
    assert r.latency_bound is True
    assert r.latency_limited_bandwidth_bytes_per_s == pytest.approx(1.5293e12, rel=1e-4)
    r = concurrency(H100, 700, resident_warps_per_sm=32)
    assert r.latency_bound is False
    assert r.latency_limited_bandwidth_bytes_per_s == pytest.approx(3.35e12)


@settings(max_examples=200, deadline=None)
@given(
    warps=st.floats(0, 64),
    per_thread=st.floats(1, 256),
    latency_ns=st.floats(50, 2000),
)
def test_latency_limited_never_above_peak(warps, per_thread, latency_ns):
    bw = latency_limited_bandwidth(H100, warps, per_thread, latency_ns * 1e-9)
    assert 0 <= bw <= H100.memory_bandwidth_bytes_per_s
    more = latency_limited_bandwidth(H100, warps + 1, per_thread, latency_ns * 1e-9)
    assert more >= bw


# ---------------------------------------------------------------------------------------------
# waves


def test_waves_a100_example():
    # NVIDIA's wave-quantization setup: A100, 108 SMs, one 256x128 tile (block) per SM.
    # M=2304, N=6144: (2304/256) x (6144/128) = 9 x 48 = 432 tiles = 4 full waves of 108
    w = waves(108, 432, 1)
    assert (w.waves, w.full_waves, w.waves_launched, w.tail_blocks) == (4.0, 4, 4, 0)
    assert w.wave_efficiency == 1.0 and w.tail_fraction == 0.0 and not w.underfilled
    # N=6272: 9 x 49 = 441 tiles -> 4.08 waves: a 5th wave with 9 of 108 slots busy
    w = waves(108, 441, 1)
    assert w.waves == pytest.approx(441 / 108)
    assert (w.full_waves, w.waves_launched, w.tail_blocks) == (4, 5, 9)
    assert w.tail_fraction == pytest.approx(9 / 108)
    assert w.wave_efficiency == pytest.approx(441 / 540)  # 0.817


def test_waves_small_grid_and_spec():
    w = waves(H100, 66, 4)  # 66 blocks on 132 SMs x 4 slots
    assert w.underfilled
    assert w.blocks_per_wave == 528
    assert w.wave_efficiency == pytest.approx(66 / 528)
    assert w.waves_launched == 1


def test_waves_bad_inputs():
    with pytest.raises(SpecError, match="blocks per SM must be an integer >= 1"):
        waves(H100, 100, 0)
    with pytest.raises(SpecError, match="blocks must be"):
        waves(H100, 0, 1)


@settings(max_examples=200, deadline=None)
@given(blocks=st.integers(1, 10**6), per_sm=st.integers(1, 32), sms=st.integers(1, 200))
def test_wave_properties(blocks, per_sm, sms):
    w = waves(sms, blocks, per_sm)
    assert 0 < w.wave_efficiency <= 1
    assert w.full_waves <= w.waves <= w.waves_launched
    assert 0 <= w.tail_fraction < 1
    assert w.waves_launched * w.blocks_per_wave >= blocks


# ---------------------------------------------------------------------------------------------
# CLI


@pytest.fixture
def cli(monkeypatch):
    import gpumodel.cli.occupancy as occ_cli
    from gpumodel.cli import main

    def fake_gpu(name, specs_dir):
        if name.lower() != "h100":
            from gpumodel.errors import UnknownGPUError

            raise UnknownGPUError(name, ["h100"])
        return H100

    monkeypatch.setattr(occ_cli, "_gpu", fake_gpu)
    return main


def test_cli_plain_product(cli, capsys):
    assert cli(["littles-law", "--throughput", "8", "--latency", "24"]) == 0
    assert capsys.readouterr().out.strip() == "concurrency = 8 x 24 = 192 in flight"


def test_cli_gpu(cli, capsys):
    assert cli(["littles-law", "--gpu", "h100", "--latency-cycles", "700"]) == 0
    out = capsys.readouterr().out
    assert "warps needed per SM: 17.5 of 64" in out
    assert "192" not in out  # the seed's example only when asked


def test_cli_json(cli, capsys):
    assert cli(["littles-law", "--gpu", "h100", "--json", "--ilp", "2",
                "--throughput", "8", "--latency", "24"]) == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert data["ilp"] == 2
    assert data["warps_needed_per_sm"] == pytest.approx(data["bytes_in_flight_per_sm"] / 1024)
    assert data["littles_law"]["concurrency"] == 192


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give --gpu, or --throughput and --latency"),
        (["--throughput", "8"], "--throughput and --latency go together"),
        (["--gpu", "nope"], "unknown GPU 'nope'"),
        (["--gpu", "h100", "--ilp", "0"], "ilp"),
        (["--gpu", "h100", "--latency-cycles", "-3"], "DRAM latency must be > 0"),
    ],
)
def test_cli_bad_input(cli, capsys, argv, message):
    assert cli(["littles-law", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert message in err
