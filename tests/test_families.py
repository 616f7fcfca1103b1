"""The family registry of ``gpumodel validate`` (gpumodel.validate.families): it covers every
family the committed measurements use, and a family added to it is measured, fitted and
reported without another module naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpumodel.validate import families, runner
from gpumodel.validate.families import Family, Group

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "validation" / "results"


def _record_families(pattern: str) -> set[str]:
    found: set[str] = set()
    for path in RESULTS.glob(pattern):
        found |= {r["family"] for r in json.loads(path.read_text())["records"]}
    return found


def test_registry_covers_every_family_the_committed_runs_recorded():
    """Every family named in a committed `validate` run (H100 and H200 raw measurements) is a
    registered family; the CPU backend's too."""
    recorded = _record_families("*/raw-measurements-*.json")
    assert len(recorded) == 16  # the 8 CuPy and 8 PyTorch families of the 2026-11-22 runs
    assert recorded <= set(families.names())
    assert set(families.names("numpy")) == {"numpy_stream", "numpy_gemm"}
    assert set(families.names()) == recorded | {"numpy_stream", "numpy_gemm"}


def test_collective_records_belong_to_the_collectives_module():
    """Collectives have their own driver and fragment (`validate --collectives`): the records it
    commits are the ones its module makes."""
    from gpumodel.validate.families import collectives

    recorded = _record_families("h200-sxm-x*/collectives_measurements.json")
    assert recorded == {collectives.make_record("all_reduce", 1 << 20, 2, 1e-4, 10, 0.0)["family"]}
    assert "collective" not in families.names()


def test_registry_is_well_formed():
    names = families.names()
    assert len(names) == len(set(names))
    group_names = [g.name for f in families.registry() for g in f.groups]
    assert len(group_names) == len(set(group_names)) == len(families.groups())
    for fam in families.registry():
        assert fam.engine in runner.ENGINES
        assert fam.points and fam.label and fam.measure, fam.name
        for quick in (True, False):
            pts = fam.points(quick)
            assert pts and all(isinstance(p, tuple) for p in pts), fam.name
            assert all(fam.label(*p) for p in pts), fam.name


def test_fit_order_keeps_the_stages_the_parameters_build_on():
    """The fit is staged: launch floor, DRAM and L2 (the GEMM floor and small-M bandwidth
    build on them), the FP32 vector sweep, GEMMs, the host link, then the kernel families.
    Changing this order changes every calibration."""
    from gpumodel.validate.families import registry

    fitted = sorted((f for f in registry() if f.fit), key=lambda f: f.fit_order)
    assert [f.name for f in fitted] == [
        "launch", "bandwidth", "poly", "gemm", "host_transfer", "copy", "elementwise",
        "reduction", "attention", "conv2d", "norm", "expand_copy", "strided_elementwise",
        "adamw", "numpy_stream", "numpy_gemm",
    ]  # fmt: skip


# --------------------------------------------------------------------------- a toy family


def _toy_measure(ctx, nbytes: int) -> list[dict]:
    """A numpy copy of ``nbytes`` (the CPU engine's context gives the random generator)."""
    import numpy as np

    from gpumodel.validate.numpy_engine import time_host

    a = ctx.rng.random(nbytes // 4, dtype=np.float32)
    b = np.empty_like(a)
    t, n = time_host(lambda: np.copyto(b, a))
    assert np.array_equal(a, b)
    op = {"op": "kernel", "flops": 0, "bytes": 2 * nbytes, "dtype": "fp32"}
    return [families.make_record("toy_copy", op, t, n, 0.0, {"toy": True})]


def _toy_fit(fam, gpu, params):
    from gpumodel.calibrate import fit_kernel_families

    fitted = fit_kernel_families(fam.get("toy_copy", []), gpu, params)
    return fitted.model_copy(update={"launch_host_s": 1.25e-6})  # a mark the test can find


TOY = Family(
    name="toy_copy",
    engine="numpy",
    points=lambda quick: [(1 << p,) for p in range(20, 24)],  # 1 .. 8 MiB
    label=lambda nbytes: f"toy copy {nbytes} B",
    measure=_toy_measure,
    fit=_toy_fit,
    fit_order=9,
    groups=(Group("toy copy", lambda p: p.family == "toy_copy", 1000.0, None, order=30),),
    report=lambda cal: ["- toy check: ran"],
)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(families, "FAMILIES", [*families.FAMILIES, TOY])


def test_a_new_family_is_planned_fitted_and_reported(toy):
    from gpumodel.calibrate import calibrate
    from gpumodel.specs import get_gpu
    from gpumodel.validate.numpy_engine import device_info
    from gpumodel.validate.pipeline import build_calibration
    from gpumodel.validate.report import markdown_report

    labels: list[str] = []
    records, unavailable = runner.run("numpy", {"toy_copy"}, quick=True,
                                      progress=lambda label, i, n: labels.append(label))  # fmt: skip
    assert unavailable == []
    assert [r["op"]["bytes"] for r in records] == [2 << p for p in range(20, 24)]
    assert labels == [f"toy copy {1 << p} B" for p in range(20, 24)] + ["done"]

    gpu = get_gpu("cpu-numpy")
    params, errors, _ = calibrate(records, gpu)
    assert params.launch_host_s == 1.25e-6  # the toy's fit ran
    assert "kernel" in params.family_bandwidth_efficiency
    assert list(errors) == ["toy copy"] and errors["toy copy"].n == 2  # half of 4 held out

    cal, skipped = build_calibration(gpu, device_info(), records, [], "numpy")
    md = markdown_report(cal, skipped, [])
    assert "| toy copy | 2 |" in md and "- toy check: ran" in md

    from gpumodel.report.validate import validate_data

    page = validate_data(cal)  # the HTML report's data
    assert [f["name"] for f in page["families"]] == ["toy copy"]
    assert len(page["families"][0]["points"]) == 2


def test_without_the_toy_its_records_are_measured_by_nobody():
    """The toy's name means nothing to the registry unless registered (the fixture is what
    makes the previous test's family known)."""
    assert families.by_name("toy_copy") is None
    assert runner.run("numpy", {"toy_copy"}, quick=True) == ([], [])


def test_the_documented_example_family_plugs_in(monkeypatch):
    """docs/validation.md's "Adding a family" sketch, run as written: registered, it is planned
    on the torch engine, fitted and scored (its records here are synthetic, 5 us + bytes at
    2.5 TB/s on an H100: the plumbing is under test, not the GPU)."""
    import re
    import types

    from gpumodel.calibrate import calibrate
    from gpumodel.specs import get_gpu

    text = (ROOT / "docs" / "validation.md").read_text()
    section = text[text.index("### Adding a family") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    module = types.ModuleType("embedding_example")
    exec(compile(code, "docs/validation.md", "exec"), module.__dict__)
    fam = module.EMBEDDING
    monkeypatch.setattr(families, "FAMILIES", [*families.FAMILIES, fam])

    unavailable: list = []
    tasks = fam.plan(types.SimpleNamespace(quick=False), unavailable)
    assert [t.label for t in tasks] == [f"embedding {t}x4096" for t in (1, 64, 1024, 4096, 32768)]
    assert unavailable == [] and families.by_name("embedding") is fam

    gpu = get_gpu("h100-sxm")
    records = []
    for tokens in (1, 16, 64, 256, 1024, 4096, 16384, 32768):
        op = {"op": "embedding", "tokens": tokens, "hidden": 4096, "dtype": "bf16"}
        t = 5e-6 + 2 * tokens * 4096 * 2 / 2.5e12
        records.append(families.make_record("embedding", op, t, 10, 0.0, {"cache": "cold"}))
    params, errors, _ = calibrate(records, gpu)
    assert "embedding" in params.family_bandwidth_efficiency
    assert list(errors) == ["embedding gather"] and errors["embedding gather"].n == 4
    # the fit recovers the synthetic rate and floor: 2.5 TB/s of the H100's 3.35 TB/s, 5 us
    eff = 2.5e12 / gpu.memory_bandwidth_bytes_per_s
    assert params.family_bandwidth_efficiency["embedding"] == pytest.approx(eff, rel=1e-3)
    assert params.family_overhead_s["embedding"] == pytest.approx(5e-6, rel=1e-3)
    assert errors["embedding gather"].median_abs_pct < 0.1



def test_the_torch_engine_runs_cudnn_in_benchmark_mode_and_restores_the_settings(monkeypatch):
    """Convolutions are timed with cudnn.benchmark on from the run's first one (PyTorch reuses
    a shape's cuDNN plan for the whole process, whichever mode chose it), and the user's
    settings come back when the run closes."""
    import sys
    from types import SimpleNamespace

    from gpumodel.validate import torch_engine

    cudnn = SimpleNamespace(benchmark=False, allow_tf32=True)
    props = SimpleNamespace(L2_cache_size=50 << 20, clock_rate=1_980_000)
    cuda = SimpleNamespace(is_available=lambda: True, empty_cache=lambda: None,
                           get_device_properties=lambda _: props)  # fmt: skip
    monkeypatch.setitem(sys.modules, "torch",
                        SimpleNamespace(backends=SimpleNamespace(cudnn=cudnn), cuda=cuda))  # fmt: skip
    ctx = torch_engine.start(quick=True)
    assert isinstance(ctx, torch_engine.Ctx)
    assert cudnn.benchmark is True
    cudnn.allow_tf32 = False  # a family switches TF32 off for its fp32 points
    torch_engine.close(ctx)
    assert (cudnn.benchmark, cudnn.allow_tf32) == (False, True)
