"""Capacity-planner audit of `plan serve` (2026-12-01): every batch up to the memory limit is a
capacity candidate, not only the powers of two (item 1); the cost fields say which tokens they
count, alike in `plan serve` and `sweep-llm` (item 3); an infeasible GPU says why in its label
(item 5). Every expectation is rebuilt from public calls (``predict_inference``, ``memory``,
the GPU specs), not from the planner's own output."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest

import gpumodel as gm
import gpumodel.llm
from gpumodel.cli import main


def _cycle(model, gpu, tp, prompt, output, batch, dtype="bf16"):
    """One replica's cycle of ``batch`` prefills and ``output`` decode steps at the context
    after half the output (the plan's formula, plan serve's docstring), the TTFT and the TPOT,
    from the scalar model."""
    common = dict(runtime="fused-graph", gpus=tp, tp=tp, dtype=dtype)
    t_pf = gm.predict_inference(model, gpu, "prefill", batch=1, seq=prompt, **common).time_s
    t_dec = gm.predict_inference(model, gpu, "decode", batch=batch,
                                 context=prompt + output // 2, **common).time_s  # fmt: skip
    cycle = batch * t_pf + output * t_dec
    return cycle, t_pf, (cycle - t_pf) / output


def _meets(model, gpu, tp, prompt, output, batch, ttft, tpot, latency=None):
    cycle, t_pf, t_tok = _cycle(model, gpu, tp, prompt, output, batch)
    return (t_pf <= ttft and t_tok <= tpot and (latency is None or cycle <= latency)), cycle


def _fits(model, gpu, tp, batch, context):
    return gm.llm.memory(model, gpu, batch=batch, seq=context, tp=tp, phase="decode").fits


@pytest.mark.parametrize(("model", "gpu", "rate", "tpot"), [
    ("llama-3-8b", "l40s", 50, 0.040),   # the audit's case: 12 GPUs at batch 32 before
    ("llama-3-8b", "h100", 10, 0.020),
    ("llama-3-70b", "h200", 10, 0.040),
])  # fmt: skip
def test_the_capacity_batch_is_the_largest_that_meets_the_targets(model, gpu, rate, tpot):
    """The chosen capacity batch meets TTFT <= 450 ms and the TPOT target; one more request
    misses them or does not fit. Until 2026-12-01 only powers of two were tried: Llama-3-8B on
    an L40S at 50 req/s ran batch 32 where 57 met 40 ms, and bought 12 GPUs for 9."""
    o = gm.plan_serving(model, gpu, rate=rate, tpot_slo_s=tpot).options[0]
    b = o.capacity_batch
    assert o.meets_slo
    ok, cycle = _meets(model, gpu, o.tp, 1024, 256, b, 0.450, tpot)
    assert ok
    nxt_fits = _fits(model, gpu, o.tp, b + 1, 1024 + 256)
    assert not nxt_fits or not _meets(model, gpu, o.tp, 1024, 256, b + 1, 0.450, tpot)[0]
    assert b <= o.max_batch and (b < o.max_batch) == nxt_fits
    # the replicas follow from that batch's throughput, by hand
    assert o.requests_per_s_per_replica == pytest.approx(b / cycle, rel=1e-9)
    assert o.replicas == math.ceil(rate / (b / cycle) - 1e-9)
    assert o.gpus == o.replicas * o.tp


def test_the_l40s_plan_needs_fewer_gpus_than_the_largest_power_of_two_gave():
    """The audit's numbers rebuilt: at the replica's tp, the largest power of two meeting the
    targets serves 50 req/s with more GPUs than the capacity batch the plan finds."""
    o = gm.plan_serving("llama-3-8b", "l40s", rate=50).options[0]
    pow2 = max(
        2**k
        for k in range(12)
        if 2**k <= o.max_batch
        and _meets("llama-3-8b", "l40s", o.tp, 1024, 256, 2**k, 0.450, 0.040)[0]
    )
    cycle = _cycle("llama-3-8b", "l40s", o.tp, 1024, 256, pow2)[0]
    gpus_pow2 = math.ceil(50 / (pow2 / cycle) - 1e-9) * o.tp
    assert o.capacity_batch > pow2 and o.gpus < gpus_pow2


def test_a_latency_target_stops_the_batch_where_the_cycle_passes_it():
    """An end-to-end target: the capacity batch's cycle is within it, one more request's not
    (or it does not fit)."""
    o = gm.plan_serving("llama-3-8b", "h100", rate=20, slo="none",
                        latency_slo_s=4.0).options[0]  # fmt: skip
    b = o.capacity_batch
    assert o.meets_slo and _cycle("llama-3-8b", "h100", o.tp, 1024, 256, b)[0] <= 4.0
    if _fits("llama-3-8b", "h100", o.tp, b + 1, 1280):
        assert _cycle("llama-3-8b", "h100", o.tp, 1024, 256, b + 1)[0] > 4.0


def test_without_targets_the_capacity_is_what_memory_holds():
    """No targets: the capacity batch is the most requests that fit (gm.max_batch), and one
    more does not fit."""
    o = gm.plan_serving("llama-3-8b", "a100", rate=20, slo="none").options[0]
    assert o.capacity_batch == o.max_batch
    assert _fits("llama-3-8b", "a100", o.tp, o.max_batch, 1280)
    assert not _fits("llama-3-8b", "a100", o.tp, o.max_batch + 1, 1280)


# --- item 3: the cost fields say which tokens they count -------------------------------------


def test_plan_serve_costs_are_named_by_the_tokens_they_count(capsys):
    assert main(["plan", "serve", "--model", "llama-3-8b", "--gpu", "h100", "--rate", "10/s",
                 "--price", "2.0", "--json"]) == 0  # fmt: skip
    o = json.loads(capsys.readouterr().out)["options"][0]
    per_hour = o["gpus"] * 2.0
    both = per_hour / (10 * (1024 + 256) * 3600) * 1e6
    out = per_hour / (10 * 256 * 3600) * 1e6
    assert o["usd_per_million_prompt_and_output_tokens"] == pytest.approx(both, rel=1e-12)
    assert o["usd_per_million_output_tokens"] == pytest.approx(out, rel=1e-12)
    assert o["usd_per_million_tokens"] == o["usd_per_million_prompt_and_output_tokens"]  # alias
    assert main(["plan", "serve", "--model", "llama-3-8b", "--gpu", "h100", "--rate", "10/s",
                 "--price", "2.0", "--csv"]) == 0  # fmt: skip
    row = next(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert float(row["usd_per_million_prompt_and_output_tokens"]) == pytest.approx(both)
    assert float(row["usd_per_million_output_tokens"]) == pytest.approx(out)


@pytest.mark.parametrize(("phase", "name", "seq"), [("decode", "usd_per_million_output_tokens", 1),
                                                    ("prefill", "usd_per_million_prompt_tokens",
                                                     512)])  # fmt: skip
def test_sweep_llm_costs_carry_the_name_of_the_tokens_they_count(phase, name, seq, capsys):
    """A decode step's tokens are output tokens: sweep-llm names its cost as plan serve names
    the output price; a prefill's are prompt tokens. The old name stays beside it, equal."""
    args = ["sweep-llm", "--model", "llama-3-8b", "--gpu", "h100", "--batch", "1,8",
            "--phase", phase, "--seq", str(seq), "--price", "2.0"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert name in doc["columns"]
    for row in doc["rows"]:
        step = gm.predict_inference("llama-3-8b", "h100", phase, batch=row["batch"], seq=seq,
                                    runtime="fused-graph").time_s  # fmt: skip
        by_hand = 2.0 / (row["batch"] * seq / step * 3600) * 1e6
        assert row[name] == pytest.approx(by_hand, rel=1e-9)
        assert row["usd_per_million_tokens"] == row[name]
    assert main([*args, "--csv"]) == 0
    assert name in capsys.readouterr().out.splitlines()[0].split(",")
    assert main([*args, "--sort", name]) == 0
    out = capsys.readouterr().out
    assert ("$/1M out" if phase == "decode" else "$/1M prompt") in out and name in out


# --- item 5: an infeasible GPU's label says why ------------------------------------------------


def test_a_gpu_without_the_dtype_is_labelled_so_not_no_fit(capsys):
    """The V100 has no bf16 rate (its spec), so Llama-3-70B in bf16 runs nowhere on it, though
    it fits at tp=8: its label says "no bf16"; the T4 lacks bf16 and the memory at tp=8 too."""
    v100, t4 = gm.get_gpu("v100"), gm.get_gpu("t4")
    for g in (v100, t4):
        assert not g.peak_flops("bf16", "tensor") and not g.peak_flops("bf16", "vector")
    assert gm.llm.memory("llama-3-70b", v100, batch=1, seq=1280, tp=8, phase="decode").fits
    assert not gm.llm.memory("llama-3-70b", t4, batch=1, seq=1280, tp=8, phase="decode").fits
    p = gm.plan_serving("llama-3-70b", ["l4", "t4", "v100"], rate=5)
    by = {o.gpu: o for o in p.options}
    assert by[v100.id].reason_short == "no bf16" and "bf16" in by[v100.id].reason
    assert by[t4.id].reason_short == "no bf16, no fit" and "needs" in by[t4.id].reason
    assert main(["plan", "serve", "--model", "llama-3-70b", "--gpu", "l4,t4,v100",
                 "--rate", "5"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert f"{v100.id} (no bf16)" in out and f"{v100.id} (no fit)" not in out
    assert f"{t4.id} (no bf16, no fit)" in out
    # in fp16, which it has, the V100 serves the model
    fp16 = gm.plan_serving("llama-3-70b", "v100", rate=5, dtype="fp16").options[0]
    assert fp16.feasible and fp16.reason_short == ""


def test_a_gpu_too_small_is_labelled_no_fit(capsys):
    """Llama-3-405B on an L4: no tensor-parallel size up to 8 holds its weights (the memory
    model at tp=8, by hand), and the L4 has bf16: "no fit"."""
    assert gm.get_gpu("l4").peak_flops("bf16", "tensor")
    assert not gm.llm.memory("llama-3-405b", "l4", batch=1, seq=1280, tp=8, phase="decode").fits
    o = gm.plan_serving("llama-3-405b", "l4", rate=1).options[0]
    assert not o.feasible and o.reason_short == "no fit"
