"""The measurement runners' GPU-free parts: import weight, error paths, kernel sources, op dicts,
FLOP/byte accounting, point plans and the pure timing helpers. No CuPy, PyTorch or GPU needed."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpumodel._paths import kernels_dir
from gpumodel.errors import DeviceError
from gpumodel.ops import from_row
from gpumodel.validate import cupy_engine, device_info, runner, timing
from gpumodel.validate import families as fam

ROOT = Path(__file__).resolve().parents[1]

NO_GPU = (
    "no CUDA GPU found: install the gpu extra (pip install 'gpumodel[gpu]') "
    "on a machine with an NVIDIA GPU"
)


# --------------------------------------------------------------------------- imports, errors


def test_importing_runners_imports_neither_cupy_nor_torch():
    code = (
        "import sys\n"
        "import gpumodel.validate.runner, gpumodel.validate.families\n"
        "import gpumodel.validate.cupy_engine, gpumodel.validate.torch_engine\n"
        "import gpumodel.validate.timing, gpumodel.validate.device_info\n"
        "print(sorted(m for m in ('cupy', 'torch') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"


@pytest.fixture
def no_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` raises ImportError


@pytest.fixture
def no_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)


def test_device_info_without_cupy_raises_one_line_device_error(no_cupy):
    with pytest.raises(DeviceError) as exc:
        device_info.device_info()
    assert str(exc.value) == NO_GPU
    assert "\n" not in str(exc.value)


def test_cupy_runner_without_cupy_raises_device_error(no_cupy):
    with pytest.raises(DeviceError, match="no CUDA GPU found"):
        runner.run("cupy", {"poly"}, quick=True, progress=None)


def test_runners_ignore_other_runners_families(no_cupy, no_torch):
    assert runner.run("cupy", {"attention"}, quick=True, progress=None) == ([], [])
    assert runner.run("torch", {"gemm"}, quick=True, progress=None) == ([], [])


def test_torch_runner_without_torch_reports_unavailable(no_torch):
    records, unavailable = runner.run("torch", None, quick=True, progress=None)
    assert records == []
    assert unavailable == [{"family": "torch", "what": "all", "reason": "PyTorch not importable"}]


def test_families_are_disjoint():
    assert not set(fam.names("cupy")) & set(fam.names("torch"))
    assert set(fam.names("cupy")) == {
        "poly",
        "poly_fma",
        "bandwidth",
        "copy",
        "gemm",
        "launch",
        "host_transfer",
        "latency",
    }
    assert set(fam.names("torch")) == {
        "attention",
        "conv2d",
        "norm",
        "expand_copy",
        "strided_elementwise",
        "elementwise",
        "reduction",
        "adamw",
    }


def test_strided_points_cover_casts_broadcasts_and_the_rope_cat():
    """The five eager HF Llama kernel shapes, 256-32768 tokens of 4096 (1M-134M elements)."""
    pts = fam.strided.strided_points(False)
    assert len(pts) == 30 and {c for c, _ in pts} == set(fam.strided.STRIDED_CASES)
    assert {fam.strided.STRIDED_CASES[c][0] for c, _ in pts} == {"cast", "broadcast", "cat"}
    assert min(t for _, t in pts) * 4096 == 2**20 and max(t for _, t in pts) * 4096 == 2**27


def test_expand_copy_points_cover_the_gqa_groups():
    """repeat_kv copies for GQA groups of 2, 4 and 8; the same output sizes for each group, 2 MiB
    to 1 GiB of bf16, so the family's fit sees the strided kernel from launch-bound to
    bandwidth-bound."""
    pts = fam.expand_copy.expand_copy_points(False)
    assert {p[2] for p in pts} == {2, 4, 8} and len(pts) == 18
    out_mib = sorted({b * kv * rep * n * d * 2 / 2**20 for b, kv, rep, n, d in pts})
    assert out_mib[0] == 2 and out_mib[-1] == 1024
    assert len(fam.expand_copy.expand_copy_points(True)) == 6


# --------------------------------------------------------------------------- kernel sources


def test_kernel_files_declare_the_symbols_the_runners_use():
    for filename, symbols in cupy_engine.KERNEL_SYMBOLS.items():
        path = kernels_dir() / filename
        assert path.is_file(), path
        src = path.read_text()
        for sym in symbols:
            pattern = (
                rf'extern\s+"C"\s+__global__\s+void\s+(__launch_bounds__\([^)]*\)\s+)?{sym}\s*\('
            )
            assert re.search(pattern, src), f'{filename} lacks extern "C" {sym}'


def test_every_kernel_file_is_listed():
    on_disk = {p.name for p in kernels_dir().glob("*.cu")}
    assert set(cupy_engine.KERNEL_SYMBOLS) <= on_disk


def test_poly_kernel_is_the_seed_loop():
    src = (kernels_dir() / "poly.cu").read_text()
    start = src.index("void compute_k_terms(")
    body = src[start : src.index("void compute_k_terms_fma(")]
    assert "result += power;" in body and "power *= x;" in body and "fmaf" not in body
    fma = src[src.index("void compute_k_terms_fma(") :]
    assert "fmaf(result, x, 1.0f)" in fma


# --------------------------------------------------------------------------- op dicts


KERNEL_KEYS = {"op", "flops", "bytes", "bytes_written", "dtype", "fma", "threads",
               "threads_per_block"}  # fmt: skip


def test_poly_op_accounting():
    op = fam.poly.poly_op(10, 1024, fma=False)
    assert set(op) == KERNEL_KEYS
    assert op == {
        "op": "kernel",
        "flops": 20480,
        "bytes": 8192,
        "bytes_written": 4096,  # b[i]: 4 of the 8 bytes per element
        "dtype": "fp32",
        "fma": False,
        "threads": 1024,
        "threads_per_block": 256,
    }
    fma = fam.poly.poly_op(10, 1024, fma=True)
    assert fma["fma"] is True and fma["flops"] == 20480 and fma["bytes"] == 8192


@pytest.mark.parametrize(
    ("pattern", "flops", "nbytes", "written"),
    [("read", 1000, 4000, 0), ("write", 0, 4000, 4000), ("copy", 0, 8000, 4000),
     ("triad", 2000, 12000, 4000)],
)  # fmt: skip
def test_bandwidth_op_accounting(pattern, flops, nbytes, written):
    op = fam.bandwidth.bandwidth_op(pattern, 1000, threads=270336)
    assert set(op) == KERNEL_KEYS
    assert (op["flops"], op["bytes"], op["bytes_written"]) == (flops, nbytes, written)
    assert op["fma"] is True and op["dtype"] == "fp32"
    assert op["threads"] == 270336 and op["threads_per_block"] == 256


def test_bandwidth_op_rejects_unknown_pattern():
    with pytest.raises(ValueError, match="unknown bandwidth pattern"):
        fam.bandwidth.bandwidth_op("scale", 10, 256)


def test_bandwidth_grid_covers_the_array_except_for_read():
    assert fam.bandwidth.bandwidth_grid(4, 132) == 1
    assert fam.bandwidth.bandwidth_grid(4 * 256 * 10, 132) == 10
    assert fam.bandwidth.bandwidth_grid(1 << 30, 132, "read") == 132 * 8  # bounded partials
    assert fam.bandwidth.bandwidth_grid(1 << 30, 132, "copy") == (1 << 28) // 256  # 1 per float4


def test_other_cupy_ops_have_exact_keys():
    assert fam.copy.copy_op(4096) == {"op": "copy", "bytes": 4096}
    assert fam.gemm.gemm_op(1, 4096, 4096, "bf16") == {
        "op": "gemm",
        "m": 1,
        "n": 4096,
        "k": 4096,
        "dtype": "bf16",
    }
    assert fam.launch.launch_op() == {
        "op": "kernel",
        "flops": 0,
        "bytes": 0,
        "threads": 1,
        "threads_per_block": 32,
    }
    assert fam.host_link.host_transfer_op(1 << 20, "h2d", True) == {
        "op": "host_transfer",
        "bytes": 1 << 20,
        "direction": "h2d",
        "pinned": True,
    }
    with pytest.raises(ValueError):
        fam.host_link.host_transfer_op(1, "d2d", False)


def test_record_shape():
    rec = fam.make_record("poly", fam.poly.poly_op(1, 4, fma=False), 1e-3, 7, 0.1, {})
    assert set(rec) == {"family", "op", "time_s", "repeats", "spread", "meta"}
    json.dumps(rec)


def test_torch_ops_have_exact_keys():
    att = fam.attention.attention_op(1, 32, 4096, 128, True, 8, 4096)
    assert set(att) == {
        "op",
        "batch",
        "heads",
        "seq",
        "head_dim",
        "dtype",
        "causal",
        "impl",
        "kv_heads",
        "kv_seq",
    }
    assert att["op"] == "attention" and att["impl"] == "flash" and att["dtype"] == "bf16"
    conv = fam.conv.conv2d_op(32, 64, 64, 56, 56, 3, 1, 1, "bf16")
    assert set(conv) == {
        "op",
        "batch",
        "in_channels",
        "out_channels",
        "height",
        "width",
        "kernel",
        "stride",
        "padding",
        "dtype",
        "layout",
    }
    assert fam.norm.norm_op("layernorm", 16, 4096) == {
        "op": "layernorm",
        "rows": 16,
        "hidden": 4096,
        "dtype": "bf16",
    }
    assert fam.norm.norm_op("rmsnorm", 16, 4096)["op"] == "rmsnorm"
    assert fam.norm.norm_op("softmax", 16, 4096) == {
        "op": "softmax",
        "rows": 16,
        "cols": 4096,
        "dtype": "bf16",
    }
    assert fam.elementwise.elementwise_op("gelu", 1 << 20, "fp32") == {
        "op": "gelu",
        "n": 1 << 20,
        "dtype": "fp32",
    }
    assert fam.elementwise.reduction_op(1 << 20, "bf16") == {
        "op": "reduction",
        "n": 1 << 20,
        "dtype": "bf16",
    }
    with pytest.raises(ValueError):
        fam.elementwise.elementwise_op("tanh", 1, "bf16")


# --------------------------------------------------------------------------- plans


@pytest.mark.parametrize("quick", [True, False])
def test_plans_are_well_formed(quick):
    for k, n in fam.poly.poly_points(quick):
        assert 1 <= k <= 1000 and n >= 1 << 20
    for pattern, n in fam.bandwidth.bandwidth_points(quick):
        assert pattern in fam.bandwidth.BW_PATTERNS and n % 4 == 0  # float4 granularity
        _, nbytes = fam.bandwidth.bandwidth_counts(pattern, n)
        assert 4000 <= nbytes <= 4 << 30
    for m, n, k, tag in fam.gemm.gemm_shapes(quick):
        assert min(m, n, k) >= 1 and tag in {"square", "llm", "misaligned", "linear-misaligned"}
    for p in fam.attention.attention_points(quick):
        assert p.backend in fam.attention.ATTN_BACKENDS
        from_row(p.op())  # an op the model takes (fp32 only on the memory-efficient kernel)
        assert p.heads % p.kv_heads == 0
        assert p.phase == "prefill" or (p.seq == 1 and not p.causal)
    for kind, rows, hidden, dtype in fam.norm.norm_points(quick):
        assert kind in fam.norm.NORM_OPS and rows >= 1 and dtype in ("bf16", "fp32")
        long_softmax = kind == "softmax" and hidden in fam.norm.SOFTMAX_COLUMNS[dtype]
        assert hidden in (1024, 4096, 8192) or long_softmax


def test_quick_plans_are_smaller():
    assert len(fam.poly.poly_points(True)) < len(fam.poly.poly_points(False))
    assert len(fam.bandwidth.bandwidth_points(True)) < len(fam.bandwidth.bandwidth_points(False))
    assert len(fam.gemm.gemm_shapes(True)) < len(fam.gemm.gemm_shapes(False))
    assert len(fam.attention.attention_points(True)) < len(fam.attention.attention_points(False))
    assert len(fam.conv.conv_points(True)) < len(fam.conv.conv_points(False))


def test_full_plan_covers_the_brief():
    ks = {k for k, _ in fam.poly.poly_points(False)}
    assert {1, 1000} <= ks and 20 <= len(ks) <= 30
    shapes = {(m, n, k) for m, n, k, _ in fam.gemm.gemm_shapes(False)}
    assert {
        (16384,) * 3,
        (3000,) * 3,
        (6144,) * 3,
        (2048, 50257, 768),
        (2048, 50304, 768),
    } <= shapes
    assert {(1, 14336, 4096), (8192, 4096, 11008)} <= shapes
    sizes = [fam.bandwidth.bandwidth_counts(p, n)[1] for p, n in fam.bandwidth.bandwidth_points(False)]
    assert min(sizes) <= 4096 and max(sizes) >= (4 << 30) - 64
    lat = fam.latency.latency_sizes(False)
    assert lat[0] == 16 << 10 and lat[-1] == 1 << 30
    assert len(fam.conv.RESNET50_CONVS) == len(set(fam.conv.RESNET50_CONVS)) == 23


# --------------------------------------------------------------------------- timing helpers


def test_summarize_median_and_spread():
    med, spread = timing.summarize([1.0] * 9 + [2.0])
    assert med == 1.0
    assert spread == pytest.approx(0.1)  # p90 interpolates to 1.1
    assert timing.summarize([3.0]) == (3.0, 0.0)
    with pytest.raises(ValueError):
        timing.summarize([])


def test_choose_repeats_is_clamped():
    kw = {"target_s": 0.02, "min_repeats": 5, "max_repeats": 50}
    assert timing.choose_repeats(1e-6, **kw) == 50
    assert timing.choose_repeats(1.0, **kw) == 5
    assert timing.choose_repeats(1e-3, **kw) == 20
    assert timing.choose_repeats(0.0, **kw) == 50


def test_spin_covers_the_batch_enqueue_time_within_bounds():
    assert timing.spin_seconds(0.0, 50) == pytest.approx(50e-6)
    assert timing.spin_seconds(20e-6, 50) == pytest.approx(1.5 * 20e-6 * 50 + 50e-6)
    assert timing.spin_seconds(20e-6, 1) < timing.spin_seconds(20e-6, 10)
    assert timing.spin_seconds(1.0, 50) == pytest.approx(0.5)


def test_measure_procedure_with_fake_events():
    """The event-timing procedure, driven by fake 'events' on a clock that each call of ``fn``
    advances by exactly 0.1 ms (a sleep's jitter on a busy machine made the procedure retake
    noisy batches, and the call counts below depend on how many it takes): warm-up, one spin
    per batch, repeats within bounds, a flush before every timed call."""

    class Ev:
        t = 0.0

    calls = {"fn": 0, "flush": 0, "spin": []}
    clock = [0.0]

    def fn():
        calls["fn"] += 1
        clock[0] += 1e-4

    def flush():
        calls["flush"] += 1

    def record(ev):
        ev.t = clock[0]

    med, spread, n = timing._measure(
        fn,
        flush=flush,
        min_repeats=5,
        max_repeats=8,
        target_s=1.0,
        warmup=2,
        use_spin=True,
        new_event=Ev,
        record=record,
        elapsed_s=lambda a, b: b.t - a.t,
        spin_for=calls["spin"].append,
        sync=lambda: None,
    )
    assert n == 8  # target 1 s of 0.1 ms calls: capped at max_repeats
    assert med == pytest.approx(1e-4) and spread >= 0
    # 2 warm-up + 1 host-cost probe + 1 device probe + 8 repeats
    assert calls["fn"] == 12 and calls["flush"] == 12
    assert len(calls["spin"]) == 3  # host-cost probe, probe batch, main batch
    assert calls["spin"][2] > calls["spin"][1]


def test_log_sizes_and_ints():
    s = timing.log_sizes(4096, 1 << 20, 1)
    assert s == [4096 << i for i in range(9)]
    s3 = timing.log_sizes(4096, 1 << 20, 3, multiple=16)
    assert s3[0] == 4096 and s3[-1] == 1 << 20 and all(x % 16 == 0 for x in s3)
    assert len(s3) == 25 and s3 == sorted(set(s3))
    ks = timing.log_ints(1, 1000, 25)
    assert ks[0] == 1 and ks[-1] == 1000 and ks == sorted(set(ks))


# --------------------------------------------------------------------------- the script


def test_measurement_script_help_needs_no_gpu():
    out = subprocess.run(
        [sys.executable, str(ROOT / "validation" / "experiments" / "run_measurements.py"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--quick" in out.stdout and "--out" in out.stdout


def test_measurement_script_summary_and_atomic_write(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "run_measurements", ROOT / "validation" / "experiments" / "run_measurements.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    recs = [
        fam.make_record(
            "gemm", fam.gemm.gemm_op(8192, 8192, 8192, "bf16"), 1.4e-3, 5, 0.01, {}
        ),
        fam.make_record(
            "bandwidth",
            fam.bandwidth.bandwidth_op("copy", 1 << 28, 270336),
            0.4e-3,
            20,
            0.01,
            {"pattern": "copy", "cache": "cold", "working_set_bytes": 1 << 31},
        ),
    ]
    text = mod.summary(recs, [])
    assert "bf16" in text and "TFLOP/s" in text and "GB/s" in text
    out = tmp_path / "sub" / "raw.json"
    mod.write_json_atomic(out, {"records": recs})
    assert json.loads(out.read_text())["records"] == recs
    assert [p.name for p in out.parent.iterdir()] == ["raw.json"]


def test_noisy_batch_is_retaken_and_steadiest_kept():
    """A bimodal batch (interference) is retaken; the first steady batch ends the retakes;
    after the allowed retakes the steadiest batch seen is kept."""
    from gpumodel.validate.timing import steadiest

    batches = iter([(221e-6, 0.85), (103e-6, 0.04), (99e-6, 0.01)])
    assert steadiest(lambda: next(batches)) == (103e-6, 0.04)
    batches = iter([(5e-6, 0.5), (6e-6, 0.4), (7e-6, 0.45), (1e-6, 0.0)])
    assert steadiest(lambda: next(batches)) == (6e-6, 0.4)  # 1 + 2 retakes, never the 4th
    calls = []
    assert steadiest(lambda: calls.append(1) or (1e-6, 0.1)) == (1e-6, 0.1)
    assert len(calls) == 1  # a steady first batch is not retaken


def test_copy_check_compares_steady_state_copies():
    """Harness copy vs cudaMemcpy over cold copies of >= 8 x L2 (50 MB L2 -> 400 MB):
    harness 1 GB moved in 0.5 ms = 2000 GB/s and 2 GB in 0.8 ms = 2500 GB/s (median 2250);
    cudaMemcpy 0.5 GB copied = 1 GB moved in 0.4 ms = 2500 GB/s: ratio 0.9, below 0.95.
    Hot, small and non-copy records are ignored."""
    from gpumodel.validate.families.bandwidth import copy_check, copy_check_line

    def bw(nbytes, t, pattern="copy", cache="cold"):
        return {"family": "bandwidth", "op": {"bytes": nbytes}, "time_s": t,
                "meta": {"pattern": pattern, "cache": cache}}  # fmt: skip

    records = [
        bw(1e9, 0.5e-3), bw(2e9, 0.8e-3), bw(1e8, 1e-6), bw(1e9, 0.1e-3, cache="hot"),
        bw(1e9, 0.1e-3, pattern="read"),
        {"family": "copy", "op": {"bytes": 0.5e9}, "time_s": 0.4e-3,
         "meta": {"moved_bytes": 1e9, "cache": "cold"}},
    ]  # fmt: skip
    c = copy_check(records, 50e6)
    assert c["harness_median"] == pytest.approx(2250e9)
    assert c["memcpy_best"] == pytest.approx(2500e9)
    assert c["ratio"] == pytest.approx(0.9)
    assert "MISSED" in copy_check_line(c)
    assert copy_check(records[:2], 50e6) is None  # no cudaMemcpy measured


def test_task_loop_records_failures_and_resets_between_families():
    """A task that raises becomes an 'unavailable' row with its reason (and the device is
    resynchronised); the family hook sees the previous family at each change."""
    from gpumodel.validate.tasks import Task, run_tasks

    def boom() -> list:
        raise RuntimeError("no fp8 here\nsecond line")

    events: list = []
    tasks = [Task("a", "a1", lambda: [{"x": 1}]), Task("a", "a2", boom),
             Task("b", "b1", lambda: [{"x": 2}])]  # fmt: skip
    unavailable: list = []
    records = run_tasks(tasks, unavailable, lambda *a: events.append(("progress", a)),
                        lambda prev: events.append(("family", prev)),
                        lambda: events.append(("resync",)))  # fmt: skip
    assert records == [{"x": 1}, {"x": 2}]
    assert unavailable == [{"family": "a", "what": "a2",
                            "reason": "RuntimeError: no fp8 here second line"}]  # fmt: skip
    assert [e for e in events if e[0] != "progress"] == [("family", None), ("resync",),
                                                           ("family", "a")]  # fmt: skip
    assert events[-1] == ("progress", ("done", 3, 3))
