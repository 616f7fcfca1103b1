"""A host profile's own 4 KB copies give a host copy's fixed cost (``gm.predict(host=)``)."""

from __future__ import annotations

import json

import pytest

import gpumodel as gm
from gpumodel.errors import SpecError
from gpumodel.hostprofile import HostProfile

# wall seconds of a 4 KB copy on a made-up host, one per direction and host memory
COPIES = {"h2d_pinned": 25e-6, "h2d_pageable": 27e-6, "d2h_pinned": 20e-6, "d2h_pageable": 24e-6}


def host_with_copies(copies: dict | None = COPIES) -> HostProfile:
    kinds = ["matmul", "elementwise", "reduction", "norm", "cat", "copy", "index", "sdpa",
             "optimizer_step"]  # fmt: skip
    return HostProfile.model_validate(dict(
        host_profile=1, name="copies-test-host", measured_at="2026-11-28T02:00:00+00:00",
        cpu_model="test cpu", cpu_cores=1, python="3", torch="2", gpu="test",
        eager_op_s={**dict.fromkeys(kinds, 20e-6), "view": 0.0}, kernel_launch_s=5e-6,
        host_copy_s=copies))  # fmt: skip


def _copy(nbytes: float, direction: str = "h2d", pinned: bool = True, **kw):
    return gm.ops.HostTransfer(bytes=nbytes, direction=direction, pinned=pinned, **kw)


@pytest.mark.parametrize("direction,pinned,key", [("h2d", True, "h2d_pinned"),
                                                  ("h2d", False, "h2d_pageable"),
                                                  ("d2h", True, "d2h_pinned"),
                                                  ("d2h", False, "d2h_pageable")])  # fmt: skip
def test_a_4kb_copy_costs_what_the_host_profile_timed(direction, pinned, key):
    """The profile's own 4 KB copy is the prediction for 4 KB, whatever the calibration's
    machine measured (the shipped H100's pinned h2d floor: 28.3 us)."""
    p = gm.predict(_copy(4096, direction, pinned), "h100", host=host_with_copies())
    assert p.time_s == pytest.approx(COPIES[key], rel=1e-9)
    assert p.bound == "latency"
    assert sum(k.time_s for k in p.kernels) == pytest.approx(p.time_s, rel=1e-12)


def test_a_large_copy_keeps_the_calibrated_rate_and_swaps_only_the_fixed_cost():
    """1 GiB pinned h2d: the calibration's link time (bytes / its rate) plus the profile's 25 us
    less the 4 KB probe's own link time; the difference to the plain prediction is the swap of
    the two fixed costs, by hand."""
    cal = gm.load_calibration("h100-sxm")
    rate = cal.parameters.host_wall.h2d_pinned_bytes_per_s
    fixed = cal.parameters.host_wall.h2d_pinned_overhead_s
    big = 2**30
    plain = gm.predict(_copy(big), "h100")
    hosted = gm.predict(_copy(big), "h100", host=host_with_copies())
    assert plain.time_s == pytest.approx(fixed + big / rate, rel=1e-9)
    assert hosted.time_s == pytest.approx(25e-6 - 4096 / rate + big / rate, rel=1e-9)
    assert hosted.bound == "memory"
    term = {t.name: t for t in hosted.terms}["transfer overhead"]
    assert "copies-test-host" in term.note and "25.0 us" in term.note


def test_a_profile_without_copies_or_an_isolated_copy_is_refused_in_one_line():
    with pytest.raises(SpecError, match=r"did not time them .* validate --host-only"):
        gm.predict(_copy(4096), "h100", host=host_with_copies(None))
    with pytest.raises(SpecError, match="isolated is the harness's time"):
        gm.predict(_copy(4096), "h100", host=host_with_copies(), condition="isolated")
    with pytest.raises(SpecError, match="collectives price their own host side"):
        gm.predict(gm.ops.AllReduce(bytes=2**20, gpus=8), "h100", host=host_with_copies())


def test_the_cli_prices_a_copy_with_a_host_profile_file(tmp_path, capsys):
    from gpumodel.cli import main

    path = tmp_path / "h.yaml"
    host_with_copies().save(path)
    code = main(["predict", "host_transfer", "--bytes", "4096", "--direction", "d2h",
                 "--no-pinned", "--gpu", "h100", "--host", str(path), "--json"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and json.loads(out)["time_s"] == pytest.approx(24e-6, rel=1e-9)


@pytest.mark.parametrize("bad", [0.0, -1e-6, float("nan"), 1e9])
def test_a_copy_time_outside_what_a_host_takes_is_refused(bad):
    with pytest.raises(Exception, match="host_copy_s"):
        host_with_copies({**COPIES, "d2h_pinned": bad})
