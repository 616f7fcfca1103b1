"""Amdahl's law and the data-parallel step (no overlap, DDP buckets, perfect overlap)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import gpumodel.cli.multigpu  # noqa: F401  (registers the commands until wired)
from gpumodel.cli import main
from gpumodel.model.amdahl import (
    amdahl,
    amdahl_from_times,
    amdahl_speedup,
    bucket_sizes,
    data_parallel_step,
    scaling_curve,
    simulate_buckets,
)

# The course table, computed by hand from 1 / ((1 - p) + p / n):
#   p = 0.9: n=2: 1/(0.1 + 0.45) = 1.818; n=4: 1/(0.1 + 0.225) = 3.077;
#            n=8: 1/(0.1 + 0.1125) = 4.706; n=16: 1/(0.1 + 0.05625) = 6.400
#   p = 0.5: n=16: 1/(0.5 + 0.03125) = 1.882;  p = 0.99: n=16: 1/(0.01 + 0.061875) = 13.913
# The companion course measured 1.78x / 2.91x / 4.35x on 2 / 4 / 8 GPUs for a p ~ 0.9 workload:
# below the law, as communication and imbalance add to the serial part.
TABLE = {
    0.5: [1.0, 1.333, 1.600, 1.778, 1.882],
    0.75: [1.0, 1.600, 2.286, 2.909, 3.368],
    0.9: [1.0, 1.818, 3.077, 4.706, 6.400],
    0.95: [1.0, 1.905, 3.478, 5.926, 9.143],
    0.99: [1.0, 1.980, 3.884, 7.477, 13.913],
}
GPUS = [1, 2, 4, 8, 16]


@pytest.mark.parametrize("p", sorted(TABLE))
def test_amdahl_table(p):
    r = amdahl(p, GPUS)
    assert list(r.speedup) == pytest.approx(TABLE[p], abs=1e-3)
    assert list(r.efficiency) == pytest.approx([s / n for s, n in zip(TABLE[p], GPUS)], abs=1e-3)
    assert r.limit == pytest.approx(1 / (1 - p))


def test_amdahl_p09_values_quoted_in_the_issue():
    assert [round(s, 2) for s in amdahl(0.9, [2, 4, 8, 16]).speedup] == [1.82, 3.08, 4.71, 6.40]


def test_amdahl_edges_and_errors():
    assert amdahl(1.0, 8).speedup == (8.0,) and math.isinf(amdahl(1.0, 8).limit)
    assert amdahl(0.0, 8).speedup == (1.0,)
    assert amdahl_speedup(0.9, 2) == pytest.approx(1 / 0.55)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"within \[0, 1\]"):
            amdahl(bad, 2)
    with pytest.raises(ValueError, match="at least 1"):
        amdahl(0.5, 0)


def test_amdahl_from_measured_times():
    # 10 ms serial + 90 ms parallel: p = 0.9; on 4 GPUs 10 + 22.5 = 32.5 ms
    r = amdahl_from_times(0.010, 0.090, [1, 4])
    assert r.parallel_fraction == pytest.approx(0.9)
    assert r.time_s == pytest.approx((0.1, 0.0325))
    assert r.speedup[1] == pytest.approx(0.1 / 0.0325)
    with pytest.raises(ValueError):
        amdahl_from_times(-1, 1, 2)


# --------------------------------------------------------------------------- buckets


def test_bucket_sizes():
    assert bucket_sizes(60e6, 25e6) == [25e6, 25e6, 10e6]
    assert bucket_sizes(60e6, 25e6, first_bucket_bytes=2**20) == pytest.approx(
        [2**20, 25e6, 25e6, 10e6 - 2**20]
    )
    assert bucket_sizes(0, 25e6) == []


def test_simulate_buckets_hand_computed():
    # forward 1 s, backward 2 s, two buckets of 50 bytes, each all-reduce takes 0.5 s:
    # bucket 0 ready at 1 + 2 x 0.5 = 2.0, runs 2.0-2.5; bucket 1 ready at 3.0, runs 3.0-3.5
    end, events = simulate_buckets(1.0, 2.0, [50, 50], lambda s: 0.5)
    assert [(e.ready_s, e.start_s, e.end_s) for e in events] == [(2.0, 2.0, 2.5), (3.0, 3.0, 3.5)]
    assert end == 3.5
    # slow all-reduce (1.5 s): bucket 1 waits for bucket 0: 2.0-3.5, then 3.5-5.0
    end, events = simulate_buckets(1.0, 2.0, [50, 50], lambda s: 1.5)
    assert events[1].start_s == 3.5 and end == 5.0


def _affine(alpha: float, beta: float):
    return lambda nbytes, gpus: alpha + 2 * (gpus - 1) / gpus * nbytes * beta


def test_dp_step_modes_hand_computed():
    # compute 0.3 s (forward 0.1, backward 0.2), 1 GB of gradients, AR = 1 ms + 1.75 x 1e9 x 1e-10
    ar = _affine(1e-3, 1e-10)
    s = data_parallel_step(0.3, 1e9, 8, allreduce_time=ar, bucket_bytes=25e6)
    t_ar = 1e-3 + 0.175
    assert s.allreduce_s == pytest.approx(t_ar)
    assert s.step_none_s == pytest.approx(0.3 + t_ar)
    assert s.step_perfect_s == pytest.approx(0.1 + max(0.2, t_ar))
    assert s.step_perfect_s <= s.step_bucketed_s <= s.step_none_s
    assert len(s.buckets) == 40
    assert s.exposed_comm_bucketed_s == pytest.approx(s.step_bucketed_s - 0.3)


def test_dp_step_one_gpu_has_no_communication():
    s = data_parallel_step(0.3, 28e9, 1, allreduce_time=_affine(1e-3, 1e-10))
    assert s.allreduce_s == 0 and s.step_none_s == s.step_bucketed_s == s.step_perfect_s == 0.3


@settings(max_examples=80, deadline=None)
@given(
    compute=st.floats(1e-3, 10.0),
    grad=st.floats(1e6, 1e11),
    gpus=st.sampled_from([2, 4, 8, 64]),
    beta=st.floats(1e-12, 1e-9),
    bf=st.floats(0.3, 0.9),
)
def test_overlap_modes_ordering(compute, grad, gpus, beta, bf):
    # perfect <= bucketed always; bucketed <= none when the buckets' extra latency
    # (one alpha each) is no more than the backward time they can hide behind
    alpha = 20e-6
    s = data_parallel_step(compute, grad, gpus, allreduce_time=_affine(alpha, beta),
                           backward_fraction=bf, bucket_bytes=25e6)  # fmt: skip
    assert s.step_perfect_s <= s.step_bucketed_s * (1 + 1e-12)
    assert s.step_perfect_s >= s.compute_s * (1 - 1e-12)
    assume(s.bucket_count * alpha <= s.backward_s)
    assert s.step_bucketed_s <= s.step_none_s * (1 + 1e-12)


def test_dp_step_with_the_collective_model():
    s = data_parallel_step(0.3, 28e9, 8, "h100")
    assert s.step_perfect_s <= s.step_bucketed_s <= s.step_none_s
    assert s.allreduce_s > 28e9 / 450e9  # at least the plain transfer over NVLink
    with pytest.raises(ValueError, match="give a GPU"):
        data_parallel_step(0.3, 28e9, 8)


def test_scaling_curve_weak_and_strong():
    ar = _affine(1e-3, 1e-10)
    weak = scaling_curve(0.3, 1e9, [1, 2, 8], allreduce_time=ar)
    assert weak.points[0].speedup["none"] == pytest.approx(1.0)
    p8 = weak.points[-1]
    assert p8.speedup["none"] == pytest.approx(8 * 0.3 / p8.step.step_none_s)
    assert p8.efficiency["perfect"] >= p8.efficiency["bucketed"] >= p8.efficiency["none"]
    strong = scaling_curve(0.3, 1e9, [1, 8], allreduce_time=ar, scaling="strong")
    s8 = strong.points[-1]
    assert s8.step.compute_s == pytest.approx(0.3 / 8)
    assert s8.speedup["none"] == pytest.approx(0.3 / s8.step.step_none_s)
    assert len(weak.rows()) == 3


# --------------------------------------------------------------------------- CLI


def test_cli_amdahl_table(capsys):
    assert main(["amdahl", "--parallel-fraction", "0.5,0.75,0.9,0.95,0.99",
                 "--gpus", "1,2,4,8,16"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "6.40x" in out and "13.91x" in out and "limit" in out


def test_cli_amdahl_json_and_times(capsys):
    assert main(["amdahl", "--parallel-fraction", "0.9", "--gpus", "2,4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["speedup"] == pytest.approx([1 / 0.55, 1 / 0.325])
    assert main(["amdahl", "--serial-ms", "10", "--parallel-ms", "90", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["parallel_fraction"] == pytest.approx(0.9)
    assert main(["amdahl", "--parallel-fraction", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["limit"] is None  # infinite


@pytest.mark.parametrize(
    "argv",
    [
        ["amdahl", "--parallel-fraction", "1.5"],
        ["amdahl", "--parallel-fraction", "-0.1"],
        ["amdahl", "--parallel-fraction", "0.9", "--gpus", "0,2"],
        ["amdahl"],
        ["amdahl", "--serial-ms", "10"],
        # two answers to one question: p = 0.5 given, p = 0.9 from the times
        ["amdahl", "--parallel-fraction", "0.5", "--serial-ms", "1", "--parallel-ms", "9"],
        ["dp-step", "--compute-ms", "-1", "--grad-bytes", "1GB"],
        ["dp-step", "--compute-ms", "300", "--grad-bytes", "-1GB"],
        ["dp-step", "--compute-ms", "300", "--grad-bytes", "1GB", "--gpus", "0"],
        ["dp-step", "--compute-ms", "300", "--grad-bytes", "1GB", "--scaling", "sideways"],
    ],
)
def test_cli_bad_input_exits_2(argv, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("error:")


def test_cli_dp_step(capsys, tmp_path):
    assert main(["dp-step", "--compute-ms", "300", "--grad-bytes", "28GB", "--gpus", "1,2,8",
                 "--gpu", "h100", "--json"]) == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert [p["gpus"] for p in data["points"]] == [1, 2, 8]
    for p in data["points"]:
        assert p["step_perfect_s"] <= p["step_bucketed_s"] <= p["step_none_s"]
    assert main(["dp-step", "--compute-ms", "300", "--grad-bytes", "28GB", "--gpu", "h100"]) == 0
    assert "bucketed" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    plot = tmp_path / "dp.png"
    assert main(["dp-step", "--compute-ms", "300", "--grad-bytes", "28GB", "--gpu", "h100",
                 "--plot", str(plot)]) == 0  # fmt: skip
    assert plot.stat().st_size > 0
