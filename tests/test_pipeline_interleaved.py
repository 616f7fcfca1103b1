"""Megatron's interleaved 1F1B (virtual pipeline stages): the bubble, the sends and the
activations in flight, in the scalar step, the sweep and the planner."""

from __future__ import annotations

import itertools

import pytest

import gpumodel as gm
from gpumodel.cli import main
from gpumodel.errors import SpecError
from gpumodel.llm.layers import in_flight_microbatches, stage_layers


def test_in_flight_micro_batches_follow_megatrons_warm_up():
    """Rank 0 of Megatron's interleaved schedule runs 2 (p - 1) + (v - 1) p chunk forwards
    before its first backward, and holds one more (schedules.py); each chunk is a v-th of the
    stage. By hand: p = 4, v = 2, m = 8: (6 + 4 + 1) / 2 = 5.5 = p + (p - 1) / v."""
    assert in_flight_microbatches(4, 8, 2) == 5.5
    assert in_flight_microbatches(16, 64, 4) == 16 + 15 / 4
    assert in_flight_microbatches(16, 64, 1) == 16  # 1F1B: p
    assert in_flight_microbatches(4, 2, 1) == 2  # fewer micro-batches than stages
    assert in_flight_microbatches(16, 16, 4) == 16  # m = p: every micro-batch is warm-up
    # Llama 3 405B's 126 layers over 16 stages: 8 a stage, in however many chunks
    assert stage_layers(126, 16) == 8


def test_the_bubble_shrinks_by_the_chunks_and_the_sends_grow_by_them():
    kw = dict(tp=8, pp=16, global_batch=2048, recompute="none")
    one = gm.predict_training_step("llama-3-405b", "h100", 16384, **kw)
    four = gm.predict_training_step("llama-3-405b", "h100", 16384, virtual_stages=4, **kw)
    m, p = 16, 16
    assert one.microbatches == four.microbatches == m
    assert one.bubble_fraction == pytest.approx((p - 1) / m)
    assert four.bubble_fraction == pytest.approx((p - 1) / (4 * m))
    assert four.pipeline_p2p_s == pytest.approx(4 * one.pipeline_p2p_s)
    # the chain: m + (p - 1) / v micro-batch slots (Narayanan et al. 2021, section 2.2.2)
    for s, v in ((one, 1), (four, 4)):
        chain = s.time_s - s.dp_comm_exposed_s - s.optimizer_s
        assert chain == pytest.approx((m + (p - 1) / v) * s.microbatch_s, rel=1e-9)
    assert "(p-1)/(v m) = 23.4%, interleaved over v=4" in four.explain()


def test_llama3_405b_against_its_published_run():
    """Dubey et al. 2024 (The Llama 3 Herd of Models, Table 4): 16,384 H100s, TP 8, PP 16,
    DP 128, 8,192-token sequences, 16M tokens a batch, an interleaved schedule: 400 TFLOP/s a
    GPU, BF16 MFU 41%. Plain 1F1B over 16 micro-batches would lose half the step to the bubble
    (24% here); four chunks a stage give 37%, 10% under the published figure."""
    kw = dict(tp=8, pp=16, global_batch=2048, recompute="none")
    plain = gm.predict_training_step("llama-3-405b", "h100", 16384, **kw)
    inter = gm.predict_training_step("llama-3-405b", "h100", 16384, virtual_stages=4, **kw)
    assert plain.mfu < 0.30
    assert inter.mfu == pytest.approx(0.41, rel=0.15)


def test_the_sweep_interleaves_where_it_can_and_says_so():
    r = gm.sweep_training("llama-3-405b", "h100", tp=8, pp=[1, 16, 64], dp=[16],
                          global_batch=2048, recompute="none", virtual_stages=4)  # fmt: skip
    rows = {int(row["pp"]): row for row in r.records()}
    # pp 1: no pipeline; pp 64: 2 layers a stage, no 4 chunks: plain 1F1B there
    assert [rows[p]["virtual_stages"] for p in (1, 16, 64)] == [1, 4, 1]
    scalar = gm.predict_training_step("llama-3-405b", "h100", 8 * 16 * 16, tp=8, pp=16,
                                      global_batch=2048, recompute="none", virtual_stages=4)  # fmt: skip
    assert rows[16]["time_s"] == pytest.approx(scalar.time_s, rel=1e-9)
    assert rows[16]["memory_bytes"] == pytest.approx(scalar.memory.total_bytes, rel=1e-9)


def test_interleaving_refuses_what_megatron_refuses(capsys):
    step = gm.predict_training_step
    with pytest.raises(SpecError, match="needs pp > 1"):
        step("llama-3-8b", "h100", 8, tp=8, virtual_stages=2)
    with pytest.raises(SpecError, match="in groups of pp"):
        step("llama-3-8b", "h100", 4, pp=4, global_batch=6, virtual_stages=2)
    with pytest.raises(SpecError, match="a stage of 2 layers"):
        step("llama-3-8b", "h100", 16, pp=16, global_batch=64, virtual_stages=4)
    code = main(["plan", "train", "--model", "llama-3-8b", "--tokens", "1T", "--gpu", "h100",
                 "--gpus", "8", "--virtual-stages", "0"])  # fmt: skip
    assert code == 2 and "--virtual-stages" in capsys.readouterr().err


def test_chunks_split_the_stage_and_never_add_layers():
    """Llama-3-70B's 80 layers over pp 8 are 10 a stage whatever the chunks (3 chunks once
    priced 12 layers a stage, 8 chunks 16: more layers than the model has). More chunks help
    while the bubble they save outweighs the sends they add: to 8 here, not 10."""
    kw = dict(tp=4, pp=8, global_batch=512, recompute="full")
    steps = [gm.predict_training_step("llama-3-70b", "h100", 512, virtual_stages=v, **kw)
             for v in (1, 2, 3, 5, 8, 10)]  # fmt: skip
    assert len({s.memory.weights_bytes for s in steps}) == 1
    assert all(a.time_s > b.time_s for a, b in itertools.pairwise(steps[:5]))
    assert steps[5].time_s > steps[4].time_s  # 10 chunks: 10 x the sends for 0.5% of bubble
    with pytest.raises(SpecError, match="a stage of 10 layers"):
        gm.predict_training_step("llama-3-70b", "h100", 512, virtual_stages=11, **kw)
