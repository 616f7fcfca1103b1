"""The slowest rank paces an eager multi-GPU step's host (gpumodel/llm/ranks.py)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel.llm.ranks import (
    MEASURED_RANKS,
    RANK_HOST_SPREAD,
    expected_max_normal,
    rank_host,
    slowest_rank_factor,
)

FITSET = Path(__file__).parents[1] / "validation" / "fitset"


def test_expected_max_of_normals_matches_the_closed_forms():
    """E[max of 2 standard normals] = 1/sqrt(pi), of 3 = 3/(2 sqrt(pi)); of 1 = 0; of 8 =
    1.4236 (order-statistics tables)."""
    assert expected_max_normal(1) == pytest.approx(0.0, abs=1e-12)
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-9)
    assert expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-9)
    assert expected_max_normal(8) == pytest.approx(1.4236, abs=1e-4)
    with pytest.raises(ValueError):
        expected_max_normal(0)


def test_the_factor_is_one_for_one_gpu_and_held_beyond_the_measured_ranks():
    assert slowest_rank_factor(1) == 1.0
    assert slowest_rank_factor(2) == pytest.approx(1 + 0.16 / math.sqrt(math.pi))
    assert slowest_rank_factor(2) < slowest_rank_factor(4) < slowest_rank_factor(8)
    assert slowest_rank_factor(512) == slowest_rank_factor(MEASURED_RANKS)
    host = gm.load_host("typical")
    assert rank_host(host, 1) is host and rank_host(None, 8) is None
    slowed = rank_host(host, 2)
    assert slowed.cost_s("elementwise") == pytest.approx(
        host.cost_s("elementwise") * slowest_rank_factor(2))


def test_the_spread_is_the_fit_of_its_fit_set():
    """RANK_HOST_SPREAD is what validation/fitset/fit_rank_host.py makes of the 24 records of
    host-ranks-2026-11-30 (2, 4 and 8 processes, two models, three rounds), and every record
    shows the slowest process slower than the median one."""
    sys.path.insert(0, str(FITSET))
    from fit_rank_host import fit

    value, every = fit()
    assert value == RANK_HOST_SPREAD == 0.16
    assert len(every) == 24
    assert all(s > 0 for *_, s in every)


def test_ddp_host_constants_are_the_fit_of_their_fit_set():
    from gpumodel.llm.ddp import DDP_STEP_HOST_OPS, DDP_TENSOR_HOST_OPS

    sys.path.insert(0, str(FITSET))
    from fit_ddp_host import fit

    assert fit() == (DDP_STEP_HOST_OPS, DDP_TENSOR_HOST_OPS) == (109, 3.15)


def test_a_multi_gpu_eager_step_prices_its_host_as_the_slowest_rank_runs_it():
    """TinyLlama ZeRO-1 at batch 1 x 256 on the typical host: 4 GPUs' host path is 1.16x one
    GPU's (no DDP or FSDP hooks under ZeRO-1; the optimizer's host on the same paced profile),
    the step says so, a fused step has no host to pace, and the sweep prices every point as
    the step does."""
    kw = dict(micro_batch=1, seq=256, recompute="none", fusion="unfused", policy="bf16",
              host="typical")  # fmt: skip
    one = gm.predict_training_step("tinyllama-1.1b", "h100", 1, global_batch=1, zero=1, **kw)
    four = gm.predict_training_step("tinyllama-1.1b", "h100", 4, global_batch=4, zero=1, **kw)
    assert four.host_time_s == pytest.approx(one.host_time_s * slowest_rank_factor(4), rel=1e-9)
    assert any("slowest of 4 ranks" in n and "1.16x" in n for n in four.notes)
    assert not any("slowest of" in n for n in one.notes)
    fused = gm.predict_training_step("tinyllama-1.1b", "h100", 4, global_batch=4, zero=1,
                                     micro_batch=1, seq=256)  # fmt: skip
    assert not any("slowest of" in n for n in fused.notes)
    sw = gm.sweep_training("tinyllama-1.1b", "h100", dp=[1, 2, 4], tp=[1, 2], zero=1,
                           global_batch=4, **kw)  # fmt: skip
    for i in range(len(sw["time_s"])):
        tp, dp = int(sw["tp"][i]), int(sw["dp"][i])
        step = gm.predict_training_step("tinyllama-1.1b", "h100", tp * dp, tp=tp, zero=1,
                                        global_batch=4, **kw)  # fmt: skip
        assert float(sw["time_s"][i]) == pytest.approx(step.time_s, rel=1e-9)
