"""Independent fits in worker processes (gpumodel.parallel) and the validate run's timing: the
worker count is validated once, the parallel fit gives the serial fit's parameters, the task loop
and the fit record their seconds, and the conditions stage leaves torch's flags as it found
them."""

from __future__ import annotations

import operator
import time
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpumodel.errors import SpecError
from gpumodel.parallel import (
    FIT_WORKERS_ENV,
    available_cores,
    fit_workers,
    map_independent,
    parse_workers,
    workers_scope,
)

ROOT = Path(__file__).resolve().parents[1]
RUN8 = ROOT / "validation/results/h100-sxm/validate-2026-11-27-run8/calibration.yaml"


def test_worker_counts_parse_and_bad_ones_name_the_variable():
    assert parse_workers("auto") == available_cores() >= 1
    assert parse_workers(" 3 ") == 3 and parse_workers(1) == 1
    for bad in ("0", "-2", "1.5", "many", "", "99999"):
        with pytest.raises(SpecError, match=f"^{FIT_WORKERS_ENV}=") as info:
            parse_workers(bad)
        assert "\n" not in str(info.value)


def test_the_library_fits_serially_unless_asked(monkeypatch):
    monkeypatch.delenv(FIT_WORKERS_ENV, raising=False)
    assert fit_workers() == 1
    with workers_scope(3) as n:
        assert n == fit_workers() == 3
    assert fit_workers() == 1
    monkeypatch.setenv(FIT_WORKERS_ENV, "2")
    assert fit_workers() == 2
    with workers_scope("auto") as n:  # the user's variable wins over validate's 'auto'
        assert n == 2
    monkeypatch.setenv(FIT_WORKERS_ENV, "lots")
    with pytest.raises(SpecError):
        fit_workers()


def test_map_independent_keeps_call_order_in_spawned_workers(monkeypatch):
    monkeypatch.delenv(FIT_WORKERS_ENV, raising=False)
    calls = [(a, b) for a, b in zip(range(7), range(10, 17))]
    expected = [a * b for a, b in calls]
    assert map_independent(operator.mul, calls) == expected
    with workers_scope(2):
        assert map_independent(operator.mul, calls) == expected


@lru_cache(maxsize=1)
def _run8_points() -> tuple:
    from gpumodel.calibrate import points_from_records, split
    from gpumodel.calibration import read_calibration_file

    cal = read_calibration_file(str(RUN8), measurements=True)
    points, _ = points_from_records(cal.measurements or [])
    return tuple(split(points)[0])


def _subset(family: str, keep: callable, every: int) -> dict:
    pts = [p for p in _run8_points() if p.family == family and keep(p)]
    return {family: pts[::every]}


def test_parallel_gemm_and_conv_fits_give_the_serial_parameters(monkeypatch):
    """Two GEMM dtypes and a slice of the convolutions of a real H100 run (run 8), fitted with
    one worker and with two: the parameters are identical, not merely close."""
    from gpumodel.calibration import CalibrationParams
    from gpumodel.specs import get_gpu
    from gpumodel.validate.families import conv, gemm

    monkeypatch.delenv(FIT_WORKERS_ENV, raising=False)
    gpu = get_gpu("h100-sxm")
    start = CalibrationParams()
    gemms = _subset("gemm", lambda p: p.op.dtype in ("bf16", "fp32"), 3)
    convs = _subset("conv2d", lambda p: p.op.dtype == "bf16", 4)
    assert len(gemms["gemm"]) >= 20 and len(convs["conv2d"]) >= 10
    serial = (gemm.fit(gemms, gpu, start), conv.fit(convs, gpu, start))
    with workers_scope(2):
        parallel = (gemm.fit(gemms, gpu, start), conv.fit(convs, gpu, start))
    assert set(serial[0].gemm) == {"bf16", "fp32"}
    assert serial[0] == parallel[0]
    assert serial[1] == parallel[1]
    assert serial[1].conv_half_fill_tiles_per_sm in conv.HALF_FILL_GRID


def test_a_bad_worker_count_fails_validate_before_measuring(monkeypatch, capsys, tmp_path):
    from gpumodel.cli import main

    monkeypatch.setenv(FIT_WORKERS_ENV, "0")
    code = main(["validate", "--backend", "numpy", "--quick", "--no-host", "--out",
                 str(tmp_path / "c.yaml")])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 2
    assert err.strip().splitlines()[-1].startswith(f"error: {FIT_WORKERS_ENV}='0'")
    assert not (tmp_path / "c.yaml").exists()


def test_the_task_loop_adds_up_each_familys_seconds():
    from gpumodel.validate.tasks import Task, run_tasks

    def nap(s: float) -> list:
        time.sleep(s)
        return [{"slept": s}]

    tasks = [Task("a", "a1", lambda: nap(0.02)), Task("a", "a2", lambda: nap(0.03)),
             Task("b", "b1", lambda: nap(0.01))]  # fmt: skip
    seconds = {"a": 1.0}  # added to, not replaced
    records = run_tasks(tasks, [], None, lambda _: None, lambda: None, seconds)
    assert len(records) == 3 and set(seconds) == {"a", "b"}
    assert seconds["a"] >= 1.05 and seconds["b"] >= 0.01


def test_timing_line_reads_the_calibrations_environment():
    from gpumodel.validate.pipeline import _measuring_seconds, run_seconds, timing_line

    env = {**_measuring_seconds({"gemm": 19.74, "conv2d": 34.1, "attention": 33.0, "copy": 2.0}),
           "seconds_fitting": "28.3", "fit_workers": "16"}  # fmt: skip
    assert env["seconds_measuring"] == "88.8"
    assert env["seconds_by_family"] == "conv2d 34.1, attention 33.0, gemm 19.7, copy 2.0"
    assert timing_line(env) == (
        "measured in 88.8 s (conv2d 34.1 s, attention 33.0 s, gemm 19.7 s), "
        "fitted in 28.3 s on 16 workers"
    )
    assert timing_line({"seconds_fitting": "3.0", "fit_workers": "1"}) == (
        "fitted in 3.0 s on 1 worker"
    )
    assert timing_line({}) is None
    assert run_seconds(env) == {
        "measuring_s": 88.8, "fitting_s": 28.3, "fit_workers": 16,
        "by_family_s": {"conv2d": 34.1, "attention": 33.0, "gemm": 19.7, "copy": 2.0},
    }  # fmt: skip


def test_a_numpy_validate_records_its_seconds(monkeypatch, tmp_path):
    from gpumodel.validate.pipeline import run_validate

    monkeypatch.delenv(FIT_WORKERS_ENV, raising=False)
    cal, _, _ = run_validate("numpy", quick=True, families={"numpy_stream"}, workers=1)
    env = cal.environment
    assert float(env["seconds_fitting"]) >= 0 and env["fit_workers"] == "1"
    assert float(env["seconds_measuring"]) > 0
    assert env["seconds_by_family"].startswith("numpy_stream ")


def test_validate_json_says_where_the_time_went(monkeypatch, capsys, tmp_path):
    import json

    from gpumodel.cli import main

    monkeypatch.delenv(FIT_WORKERS_ENV, raising=False)
    code = main(["validate", "--backend", "numpy", "--quick", "--families", "numpy_stream",
                 "--no-host", "--out", str(tmp_path / "c.yaml"), "--json"])  # fmt: skip
    out, _ = capsys.readouterr()
    seconds = json.loads(out)["seconds"]
    assert code in (0, 1)  # 1: a missed target on this shared CPU, still reported
    assert set(seconds) == {"measuring_s", "by_family_s", "fitting_s", "fit_workers"}
    assert list(seconds["by_family_s"]) == ["numpy_stream"]
    assert seconds["fit_workers"] == parse_workers("auto")


def _fake_torch(benchmark: bool, cudnn_tf32: bool, matmul_tf32: bool) -> SimpleNamespace:
    cudnn = SimpleNamespace(benchmark=benchmark, allow_tf32=cudnn_tf32)
    matmul = SimpleNamespace(allow_tf32=matmul_tf32)
    return SimpleNamespace(backends=SimpleNamespace(cudnn=cudnn, cuda=SimpleNamespace(
        matmul=matmul)))  # fmt: skip


def test_user_settings_come_back_even_when_the_measurement_fails():
    from gpumodel.validate.torch_engine import saved_flags, user_settings_kept

    torch = _fake_torch(False, False, True)
    before = saved_flags(torch)
    assert before == {"cudnn.benchmark": False, "cudnn.allow_tf32": False,
                      "cuda.matmul.allow_tf32": True}  # fmt: skip
    with pytest.raises(RuntimeError), user_settings_kept(torch):
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = False
        raise RuntimeError("a kernel failed")
    assert saved_flags(torch) == before


def test_full_conv_plan_times_transpose_wrapped_kernels_at_two_batches():
    from gpumodel.validate.families import conv

    pts = conv.conv_points(False)
    n = len(conv.RESNET50_CONVS)
    batches: dict[tuple[str, str], set[int]] = {}
    for _, batch, dtype, layout in pts:
        batches.setdefault((dtype, layout), set()).add(batch)
    assert batches == {("bf16", "channels_last"): {1, 8, 32, 128},
                       ("tf32", "channels_last"): {1, 8, 32, 128},
                       ("fp32", "nchw"): {1, 8, 32, 128}, ("bf16", "nchw"): {1, 32},
                       ("tf32", "nchw"): {1, 32}, ("fp32", "channels_last"): {1, 32}}  # fmt: skip
    assert len(pts) == len(set(pts)) == n * (3 * 4 + 3 * 2) == 414
