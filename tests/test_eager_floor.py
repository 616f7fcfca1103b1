"""predict(host=): an op called from eager PyTorch takes at least the host's time to issue it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import gpumodel as gm
from gpumodel.errors import SpecError

REFERENCE = Path(gm.__file__).parent.parent / "specs/hosts/reference-h100.yaml"


def _host(tmp_path, **eager) -> str:
    data = yaml.safe_load(REFERENCE.read_text())
    data["eager_op_s"].update(eager)
    data["name"] = "eager-test"
    path = tmp_path / "eager-test.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_short_kernel_takes_the_hosts_dispatch_time(tmp_path):
    host = _host(tmp_path, matmul=30e-6)
    small = gm.ops.Gemm(m=8, n=256, k=256, dtype="bf16")
    gpu_only = gm.predict(small, "h100", "none")
    assert gpu_only.time_s < 30e-6  # a few us on the GPU
    p = gm.predict(small, "h100", "none", host=host)
    assert p.time_s == pytest.approx(30e-6, rel=1e-12)
    assert p.bound == "launch"
    term = next(t for t in p.terms if t.name == "eager dispatch")
    assert "the GPU waits for the host" in term.note and "eager-test" in term.note
    # a long kernel keeps its GPU time; the term says the host is not what binds
    big = gm.ops.Gemm(m=8192, n=8192, k=8192, dtype="bf16")
    base, floored = gm.predict(big, "h100", "none"), gm.predict(big, "h100", "none", host=host)
    assert floored.time_s == base.time_s and floored.bound == base.bound
    assert "below the GPU time" in next(t.note for t in floored.terms if t.name == "eager dispatch")


def test_library_launches_inside_one_call_add_bare_launches(tmp_path):
    """cuDNN's NCHW path launches 4 kernels from one F.conv2d (input and filter transposes, the
    convolution, the output transpose): the floor is the conv dispatch + 3 bare launches (the
    datasheet model's 4.6 us each), against 1 kernel in channels_last."""
    host = _host(tmp_path, conv=20e-6)
    kw = dict(batch=1, in_channels=64, out_channels=64, height=14, width=14, kernel=3, padding=1,
              dtype="bf16")  # fmt: skip
    nchw = gm.predict(gm.ops.Conv2d(layout="nchw", **kw), "h100", "none", host=host)
    cl = gm.predict(gm.ops.Conv2d(layout="channels_last", **kw), "h100", "none", host=host)
    assert len(nchw.kernels) == 4 and len(cl.kernels) == 1
    assert nchw.time_s == pytest.approx(20e-6 + 3 * 4.6e-6, rel=1e-12)
    assert cl.time_s == pytest.approx(20e-6, rel=1e-12)
    # a calibration's measured bare launch replaces the 4.6 us
    cal = gm.load_calibration("h100")
    with_cal = gm.predict(gm.ops.Conv2d(layout="nchw", **kw), "h100", cal, host=host)
    launch = cal.parameters.launch_host_s
    assert launch is not None and launch != pytest.approx(4.6e-6)
    assert next(t.value for t in with_cal.terms if t.name == "eager dispatch") == pytest.approx(
        20e-6 + 3 * launch, rel=1e-12)


def test_a_profile_whose_conv_probe_was_nchw_counts_its_transposes_once(tmp_path):
    """Profiles written before 2026-11-25 timed `conv` on an NCHW bf16 F.conv2d, which launches
    4 kernels (validation/results/unseen-h200-run5/host-before.yaml: 35.8 us, its shapes name
    no layout). Their figure already holds the 3 transposes' launches: a channels-last call is
    that figure less 3 bare launches, an NCHW call the figure itself."""
    data = yaml.safe_load(REFERENCE.read_text())
    data["eager_op_s"]["conv"] = 35.8e-6
    probe = "64x64 bf16 (conv: F.conv2d 1x64x14x14 * 64x64x3x3, pad 1)"  # as that file says
    data["shapes"] = {"eager_ops": probe}
    data["name"] = "nchw-probe"
    path = tmp_path / "nchw-probe.yaml"
    path.write_text(yaml.safe_dump(data))
    kw = dict(batch=1, in_channels=64, out_channels=64, height=14, width=14, kernel=3, padding=1,
              dtype="bf16")  # fmt: skip
    cl = gm.predict(gm.ops.Conv2d(layout="channels_last", **kw), "h100", "none", host=str(path))
    nchw = gm.predict(gm.ops.Conv2d(layout="nchw", **kw), "h100", "none", host=str(path))
    assert cl.time_s == pytest.approx(35.8e-6 - 3 * 4.6e-6, rel=1e-12)
    assert nchw.time_s == pytest.approx(35.8e-6, rel=1e-12)
    assert "1 kernel against its probe's 4" in next(t.note for t in cl.terms
                                                  if t.name == "eager dispatch")  # fmt: skip
    # a profile that names its channels-last probe: the figure is one kernel's call
    data["shapes"] = {"eager_ops": probe.replace("3x3,", "3x3 channels_last,")}
    path.write_text(yaml.safe_dump(data))
    cl = gm.predict(gm.ops.Conv2d(layout="channels_last", **kw), "h100", "none", host=str(path))
    assert cl.time_s == pytest.approx(35.8e-6, rel=1e-12)


def test_a_profile_without_conv_uses_matmul_and_says_so(tmp_path):
    data = yaml.safe_load(REFERENCE.read_text())
    data["eager_op_s"].pop("conv")
    data["eager_op_s"]["matmul"] = 12e-6
    data["name"] = "old-profile"
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data))
    op = gm.ops.Conv2d(batch=1, in_channels=8, out_channels=8, height=8, width=8, kernel=1,
                       dtype="bf16", layout="channels_last")  # fmt: skip
    p = gm.predict(op, "h100", "none", host=str(path))
    assert p.time_s == pytest.approx(12e-6, rel=1e-12)
    assert "conv not measured" in next(t.note for t in p.terms if t.name == "eager dispatch")


def test_ops_that_are_no_single_eager_call_refuse_a_host(tmp_path):
    """A collective is no eager call; a host copy is priced from the profile's own copies,
    which this profile (like every one measured before 2026-11-28) did not time."""
    host = _host(tmp_path)
    with pytest.raises(SpecError, match="one eager PyTorch call or a host copy"):
        gm.predict(gm.ops.AllReduce(bytes=1e6, gpus=8), "h100", host=host)
    with pytest.raises(SpecError, match="did not time them"):
        gm.predict(gm.ops.HostTransfer(bytes=1e6), "h100", host=host)


def test_cli_host_option(tmp_path, capsys):
    from gpumodel.cli import main

    host = _host(tmp_path, matmul=30e-6)
    assert main(["predict", "gemm", "--m", "8", "--n", "256", "--k", "256", "--host", host,
                 "--calibration", "none", "--json"]) == 0  # fmt: skip
    import json

    out = json.loads(capsys.readouterr().out)
    row = out[0] if isinstance(out, list) else out
    assert row["time_s"] == pytest.approx(30e-6, rel=1e-9)
    assert main(["predict", "all_reduce", "--bytes", "1e6", "--gpus", "8", "--host", host]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "one eager PyTorch call" in err


def test_a_host_bound_call_gives_the_range_of_its_hosts_drift(tmp_path, capsys):
    """A profile that measured its host at 0.8-1.5 x its median speed prices a 30 us eager
    matmul dispatch at 24-45 us; a long kernel the host never binds keeps its GPU time at both
    ends; a profile without a drift gives no range."""
    path = _host(tmp_path, matmul=30e-6)
    data = yaml.safe_load(Path(path).read_text())
    data["host_drift"] = [0.8, 1.5]
    Path(path).write_text(yaml.safe_dump(data))
    small = gm.ops.Gemm(m=8, n=256, k=256, dtype="bf16")
    p = gm.predict(small, "h100", "none", host=path)
    assert p.time_range_s == pytest.approx((24e-6, 45e-6), rel=1e-12)
    assert "range 24 µs - 45 µs: the host at the p10 and p90 of its measured drift (0.8-1.5" in (
        p.explain())  # fmt: skip
    big = gm.ops.Gemm(m=8192, n=8192, k=8192, dtype="bf16")
    long = gm.predict(big, "h100", "none", host=path)
    assert long.time_range_s == pytest.approx((long.time_s, long.time_s))
    data["host_drift"] = None
    Path(path).write_text(yaml.safe_dump(data))
    assert gm.predict(small, "h100", "none", host=path).time_range_s is None
    from gpumodel.cli import main

    data["host_drift"] = [0.8, 1.5]
    Path(path).write_text(yaml.safe_dump(data))
    assert main(["predict", "gemm", "--m", "8", "--n", "256", "--k", "256", "--host", path,
                 "--calibration", "none", "--json"]) == 0  # fmt: skip
    import json

    out = json.loads(capsys.readouterr().out)
    row = out[0] if isinstance(out, list) else out
    assert row["time_range_s"] == pytest.approx([24e-6, 45e-6])
    assert main(["predict", "gemm", "--m", "8", "--n", "256", "--k", "256", "--host", path,
                 "--calibration", "none"]) == 0  # fmt: skip
    table = capsys.readouterr().out
    assert "host drift range" in table and "24 µs - 45 µs" in table
