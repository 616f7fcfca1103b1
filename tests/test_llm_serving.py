"""Serving plan: feasibility, replicas for the rate, latency targets, cost, best buy."""

from __future__ import annotations

import math

import pytest

import gpumodel as gm
from gpumodel.cli import main
from gpumodel.llm import plan_serving


@pytest.fixture(scope="module")
def plan():
    return plan_serving("llama-3-8b", ["l4", "a100", "h100", "t4"], prompt=1024, output=256,
                        rate=50, calibration="none")  # fmt: skip


def test_replicas_cover_the_rate(plan):
    for o in plan.options:
        if o.feasible:
            assert o.replicas == math.ceil(50 / o.requests_per_s_per_replica - 1e-9)
            assert o.gpus == o.replicas * o.tp
            assert o.batch <= o.capacity_batch <= o.max_batch


def test_cost_arithmetic(plan):
    for o in plan.options:
        if o.feasible:
            assert o.usd_per_hour == pytest.approx(o.gpus * o.usd_per_gpu_hour)
            per_hour_tokens = 50 * (1024 + 256) * 3600
            assert o.usd_per_million_tokens == pytest.approx(o.usd_per_hour / per_hour_tokens * 1e6)
            assert o.latency_s == pytest.approx(o.ttft_s + 256 * o.tpot_s)


def test_best_buy_is_the_cheapest_feasible(plan):
    feasible = [o for o in plan.options if o.feasible]
    cheapest = min(feasible, key=lambda o: o.usd_per_million_tokens)
    assert plan.best == cheapest.gpu and sum(o.best for o in plan.options) == 1


def test_gpu_without_the_dtype_is_infeasible(plan):
    t4 = next(o for o in plan.options if o.gpu == "t4")
    assert not t4.feasible and "bf16" in t4.reason


def test_latency_target_limits_the_batch():
    free = plan_serving("llama-3-8b", "h100", rate=10, calibration="none", slo="none").options[0]
    tight = plan_serving("llama-3-8b", "h100", rate=10, tpot_slo_s=0.02,
                         calibration="none").options[0]  # fmt: skip
    assert tight.meets_slo and tight.tpot_s <= 0.02 and tight.capacity_batch < free.capacity_batch


def _cycle_s(o, prompt: int, output: int, batch: int) -> float:
    """One replica's cycle of ``batch`` prefills and ``output`` decode steps, from the scalar
    model (the module docstring's formula)."""
    common = dict(runtime="fused-graph", gpus=o.tp, tp=o.tp)
    t_pf = gm.predict_inference("llama-3-8b", "h100", "prefill", batch=1, seq=prompt,
                                **common).time_s  # fmt: skip
    t_dec = gm.predict_inference("llama-3-8b", "h100", "decode", batch=batch,
                                 context=prompt + output // 2, **common).time_s  # fmt: skip
    return batch * t_pf + output * t_dec


@pytest.mark.parametrize("rate", [0.01, 1.0, 30.0])
def test_a_replica_runs_the_batch_its_load_brings(rate):
    """Little's law: a replica serving r requests/s with latency W(B) holds r x W(B) requests, so
    it runs the smallest batch B whose throughput B / cycle(B) covers r (at 0.01 req/s one
    request at a time: TPOT is batch 1's decode step, not the capacity batch's)."""
    o = plan_serving("llama-3-8b", "h100", rate=rate, prompt=1024, output=256).options[0]
    per_replica = rate / o.replicas
    assert o.batch / _cycle_s(o, 1024, 256, o.batch) >= per_replica * (1 - 1e-9)
    if o.batch > 1:
        assert (o.batch - 1) / _cycle_s(o, 1024, 256, o.batch - 1) < per_replica
    assert o.latency_s == pytest.approx(_cycle_s(o, 1024, 256, o.batch), rel=1e-9)
    if rate == 0.01:
        assert o.batch == 1 and o.capacity_batch > 1
        step = gm.predict_inference("llama-3-8b", "h100", "decode", batch=1, context=1152,
                                    runtime="fused-graph").time_s  # fmt: skip
        assert o.tpot_s == pytest.approx(step, rel=1e-9)


def test_a_missed_target_shows_the_closest_the_gpu_gets():
    """No batch meets TPOT <= 1 ms: the row shown is the one nearest the targets (batch 1's
    decode step), not the highest-throughput one."""
    o = plan_serving("llama-3-8b", "h100", rate=1, tpot_slo_s=0.001).options[0]
    assert not o.meets_slo and o.capacity_batch == 1 and o.batch == 1


def test_prefill_only_serving_has_no_tpot(capsys):
    o = plan_serving("llama-3-8b", "h100", rate=1, output=0).options[0]
    assert o.feasible and o.tpot_s is None and o.usd_per_million_output_tokens is None
    assert main(["plan", "serve", "--model", "llama-3-8b", "--gpu", "h100", "--rate", "1/s",
                 "--output", "0"]) == 0  # fmt: skip
    assert "0 ns" not in capsys.readouterr().out


def test_model_too_big_everywhere():
    p = plan_serving("llama-3-405b", ["l4"], rate=1, calibration="none")
    assert not p.options[0].feasible and "needs" in p.options[0].reason and p.best is None


def test_price_override():
    p = plan_serving("llama-3-8b", ["h100"], rate=5, price={"h100": 1.0}, calibration="none")
    assert p.options[0].usd_per_gpu_hour == 1.0


def test_plan_names_each_calibration_and_warns_when_they_mix():
    """The H100 ships a calibration, the L4 does not: a side-by-side plan says which yardstick
    each column used and warns that they differ; carrying the H100 calibration to both makes
    them comparable (no warning) and, since measured efficiencies are below the datasheet's,
    never makes the L4 cheaper than its datasheet-only plan."""
    mixed = gm.plan_serving("llama-3-8b", ["l4", "h100"], prompt=1024, output=256, rate=50)
    l4, h100 = mixed.options
    assert l4.calibration == "none (datasheet only)"
    assert h100.calibration.startswith("h100-sxm cupy")
    def cal_warnings(plan):  # beside them: the two specs' prices come from two providers
        return [w for w in plan.warnings if not w.startswith("prices from different providers")]

    assert len(cal_warnings(mixed)) == 1 and cal_warnings(mixed)[0].startswith("l4: datasheet")
    assert len(mixed.warnings) == 2
    same = gm.plan_serving("llama-3-8b", ["l4", "h100"], prompt=1024, output=256, rate=50,
                           calibration_from="h100")  # fmt: skip
    l4_t, h100_t = same.options
    assert "transferred from h100-sxm" in l4_t.calibration and cal_warnings(same) == []
    assert h100_t.gpus == h100.gpus  # the H100's own calibration either way
    assert l4_t.usd_per_million_tokens >= l4.usd_per_million_tokens
    bare = gm.plan_serving("llama-3-8b", ["l4", "h100"], prompt=1024, output=256, rate=50,
                           calibration="none")  # fmt: skip
    assert cal_warnings(bare) == []


def test_plan_serve_cli_shows_calibrations_and_rejects_both_options(capsys):
    code = main(["plan", "serve", "--model", "llama-3-8b", "--gpu", "l4,h100"])
    out = capsys.readouterr().out
    shipped = gm.load_calibration("h100-sxm").created.date()  # the committed H100 run's date
    # the table names each GPU's kind of calibration; the footnote dates it
    assert code == 0 and "datasheet only" in out and "measured" in out
    assert f"calibration h100-sxm: h100-sxm cupy {shipped}" in out
    assert "warning: l4: datasheet roofline only" in out
    code = main(["plan", "serve", "--model", "llama-3-8b", "--gpu", "l4",
                 "--calibration", "none", "--calibration-from", "h100"])  # fmt: skip
    assert code == 2 and "not both" in capsys.readouterr().err


def test_default_targets_are_mlperfs_interactive_ones_and_met_by_the_best_buy():
    """No targets given: TTFT <= 450 ms and TPOT <= 40 ms (MLPerf Inference,
    loadgen/mlperf.conf, llama2-70b-interactive); the best buy meets them."""
    p = plan_serving("llama-3-8b", ["l4", "a100", "h100"], rate=50)
    assert (p.ttft_slo_s, p.tpot_slo_s, p.slo) == (0.450, 0.040, "chat")
    best = next(o for o in p.options if o.best)
    assert best.meets_slo and best.ttft_s <= 0.450 and best.tpot_s <= 0.040
    assert "MLPerf interactive" in p.explain()
    server = plan_serving("llama-3-8b", "h100", rate=50, slo="server")
    assert (server.ttft_slo_s, server.tpot_slo_s) == (2.0, 0.200)
    # an explicit target replaces the preset's, the other stays
    mixed = plan_serving("llama-3-8b", "h100", rate=50, tpot_slo_s=0.1)
    assert (mixed.ttft_slo_s, mixed.tpot_slo_s) == (0.450, 0.1)
    with pytest.raises(gm.SpecError, match="slo must be one of"):
        plan_serving("llama-3-8b", "h100", slo="fast")


def test_no_best_buy_when_every_gpu_misses_the_targets():
    # 70B at TPOT <= 1 ms cannot be met anywhere: nothing is a best buy
    p = plan_serving("llama-2-70b", ["h100", "h200"], rate=5, tpot_slo_s=0.001)
    assert p.best is None and not any(o.best for o in p.options)
    assert all(not o.meets_slo for o in p.options if o.feasible)


def test_serving_decode_times_equal_the_scalar_model():
    """plan_serving times its decode batches with the vectorised sweep; they equal
    predict_inference's at the chosen batch."""
    o = plan_serving("llama-3-8b", "h100", rate=10, prompt=512, output=128).options[0]
    t_pf = gm.predict_inference("llama-3-8b", "h100", "prefill", batch=1, seq=512,
                                runtime="graph", gpus=o.tp, tp=o.tp).step_time_s  # fmt: skip
    t_dec = gm.predict_inference("llama-3-8b", "h100", "decode", batch=o.batch, context=576,
                                 runtime="graph", gpus=o.tp, tp=o.tp).step_time_s  # fmt: skip
    assert o.latency_s == pytest.approx(o.batch * t_pf + 128 * t_dec, rel=1e-9)


@pytest.mark.parametrize("model, rate", [("llama-3-70b", 10), ("llama-3-70b", 40),
                                         ("llama-3-8b", 50)])  # fmt: skip
def test_an_h200_never_needs_more_gpus_than_an_h100(model, rate):
    """The H200 has at least every resource of the H100 (HBM 141 GB at 4.8 TB/s against 80 GB
    at 3.35, the same tensor cores and NVLink), so serving the same rate never takes more of
    them. Until 2026-11-29 the 70B plan at 10 req/s took 12 H200s against 8 H100s: the
    H200's tensor-parallel all-reduces were priced at a measured loop of eager calls' floor
    (44 us each) inside a CUDA-graph runtime."""
    opts = {o.gpu: o for o in plan_serving(model, ["h100", "h200"], rate=rate).options}
    assert opts["h200-sxm"].gpus <= opts["h100-sxm"].gpus
    # at the same fleet the H200's replica runs each token no slower (fewer H200s run harder:
    # a larger batch, as the rate brings it)
    if opts["h200-sxm"].gpus == opts["h100-sxm"].gpus:
        assert opts["h200-sxm"].tpot_s <= opts["h100-sxm"].tpot_s * 1.0001


def test_every_price_names_its_provider_date_and_source():
    p = plan_serving("llama-3-8b", ["h100", "mi300x"], rate=5, price={"h100": 2.49})
    assert p.prices["h100-sxm"]["provider"] == "given"
    mi = gm.get_gpu("mi300x").price
    assert p.prices["mi300x"]["provider"] == mi.provider
    assert p.prices["mi300x"]["source"] == mi.source
