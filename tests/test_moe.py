"""Mixture of experts as HF transformers 5 runs it eagerly: the grouped GEMM, the kernels of a
MoE layer, and the experts loop's host-device syncs, checked against H200 traces and a sweep."""

from __future__ import annotations

import gzip
import json
import math
import statistics
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel.cli import main
from gpumodel.errors import SpecError
from gpumodel.llm import predict_inference
from gpumodel.llm.layers import expert_loop_syncs
from gpumodel.ops.matmul import GROUPED_TILE_M, GroupedGemm, expected_groups

ROOT = Path(__file__).parents[1]
RUN1 = ROOT / "validation" / "results" / "steps-h200-moe-run1"
SWEEP = ROOT / "validation" / "results" / "h200-sxm" / "grouped-mm-2026-11-29" / "grouped-mm.json"
H200_CAL = ROOT / "validation" / "results" / "h200-sxm" / "calibration.yaml"


def _binomial_tiles(tokens: int, p: float, tile: int) -> float:
    """E[ceil(X / tile)], X ~ Binomial(tokens, p), summed exactly over the pmf (log space)."""
    total = 0.0
    for x in range(tokens + 1):
        log_pmf = (math.lgamma(tokens + 1) - math.lgamma(x + 1) - math.lgamma(tokens - x + 1)
                   + x * math.log(p) + (tokens - x) * math.log1p(-p))  # fmt: skip
        total += math.exp(log_pmf) * math.ceil(x / tile)
    return total


@pytest.mark.parametrize(("tokens", "experts", "top_k"),
                         [(1, 8, 2), (8, 8, 2), (512, 8, 2), (4096, 8, 2), (8, 128, 8),
                          (2048, 128, 8)])  # fmt: skip
def test_expected_groups_match_the_exact_binomial(tokens, experts, top_k):
    active, tiles = expected_groups(tokens, experts, top_k, GROUPED_TILE_M)
    p = top_k / experts
    assert active == pytest.approx(experts * (1 - (1 - p) ** tokens), rel=1e-12)
    assert tiles == pytest.approx(experts * _binomial_tiles(tokens, p, GROUPED_TILE_M), rel=0.02)


def test_grouped_gemm_counts_active_weights_and_whole_tiles():
    # one token, top-2 of 8: two experts with one row each, one 128-row tile each
    op = GroupedGemm(tokens=1, experts=8, top_k=2, n=28672, k=4096)
    prep, gemm = op.kernels(gm.get_gpu("h200"))
    assert prep.name == "prepare_grouped_gemm_data"
    weights = 2 * 28672 * 4096 * 2  # two experts' [n, k] bf16
    rows_io = 2 * 4096 * 2 + 2 * 28672 * 2
    assert gemm.working_set_bytes == pytest.approx(weights + rows_io)
    assert gemm.total_flops == pytest.approx(2.0 * 2 * 128 * 28672 * 4096)
    assert gemm.min_flops_fraction == pytest.approx(2 / 256)


def test_grouped_gemm_rejects_top_k_above_experts():
    with pytest.raises(SpecError, match="top_k"):
        GroupedGemm(tokens=4, experts=2, top_k=3, n=64, k=64)


def test_grouped_gemm_agrees_with_the_h200_sweep_it_was_fitted_on():
    # the fit data (validation/fitset/grouped_mm_device.py): 60 timings of both projections of
    # Mixtral-8x7B's and Qwen3-30B-A3B's experts, 1-16384 tokens; the one factor fitted on them
    # (GROUPED_STREAM_FACTOR) leaves this spread
    cal = gm.load_calibration(str(H200_CAL))
    errors = []
    for r in json.loads(SWEEP.read_text())["rows"]:
        for name, n, k in (
            ("gate_up_s", 2 * r["ffn"], r["hidden"]),
            ("down_s", r["hidden"], r["ffn"]),
        ):
            op = GroupedGemm(tokens=r["tokens"], experts=r["experts"], top_k=r["top_k"], n=n, k=k)
            t = gm.predict(op, "h200-sxm", calibration=cal, condition="in-workload").time_s
            errors.append(abs(t / r[name] - 1))
    assert len(errors) == 60
    assert statistics.median(errors) < 0.10
    assert sorted(errors)[int(0.9 * len(errors))] < 0.30


def _trace(name: str) -> list[dict]:
    with gzip.open(RUN1 / name) as fh:
        return json.load(fh)["traceEvents"]


def _first_step_gpu(events: list[dict]) -> list[dict]:
    """The kernels and copies the first traced step launched (by correlation id)."""
    step = next(e for e in events if e.get("name") == "step" and e.get("cat") == "user_annotation")
    t0, t1 = step["ts"], step["ts"] + step["dur"]
    ids = {e["args"].get("correlation") for e in events
           if e.get("cat") == "cuda_runtime" and t0 <= e["ts"] <= t1}  # fmt: skip
    return [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
            and e["args"].get("correlation") in ids]  # fmt: skip


def test_mixtral_grouped_decode_launches_what_the_h200_trace_shows():
    gpu = _first_step_gpu(_trace("trace-mixtral-8x7b-grouped_mm-decode-b8x2048.json.gz"))
    grouped = [e for e in gpu if "GroupProblemShape" in e["name"] or "prepare_grouped" in e["name"]]
    r = predict_inference("mixtral-8x7b", "h200", batch=8, context=2048, runtime="hf-eager",
                          calibration="none")  # fmt: skip
    # 2,355 kernels and copies in the traced step; the model's kernels within 2% (cuBLAS's
    # split-K reductions are priced inside their GEMMs, not counted apart)
    assert len(gpu) == 2355
    assert r.kernels_per_step == pytest.approx(len(gpu), rel=0.02)
    assert len(grouped) == 4 * 32  # a prep kernel and a grouped GEMM per projection and layer


def test_loop_syncs_match_the_h200_trace():
    events = _trace("trace-mixtral-8x7b-eager-decode-b8x2048.json.gz")
    syncs = sum(1 for e in _first_step_gpu(events) if e["name"].startswith("Memcpy DtoH"))
    model = expert_loop_syncs(gm.get_model("mixtral-8x7b"), 8, "unfused", "loop")
    # 8 tokens x top-2 of 8 experts: ceil(7.2) = 8 active -> 32 x (1 + 5 x 8); the traced step
    # hit 231 experts over 32 layers (7.2 a layer): 1,167 syncs
    assert model == 32 * (1 + 5 * 8)
    assert syncs == pytest.approx(model, rel=0.15)
    assert expert_loop_syncs(gm.get_model("mixtral-8x7b"), 8, "unfused", "grouped_mm") == 0
    assert expert_loop_syncs(gm.get_model("llama-3-8b"), 8, "unfused", "loop") == 0


def test_the_loop_runs_host_and_gpu_in_turn():
    kw = {"batch": 8, "context": 2048, "runtime": "hf-eager", "calibration": "none"}
    loop = predict_inference("mixtral-8x7b", "h200", experts="loop", **kw)
    grouped = predict_inference("mixtral-8x7b", "h200", **kw)
    assert loop.time_s == pytest.approx(loop.host_time_s + loop.gpu_time_s)
    syncs = expert_loop_syncs(gm.get_model("mixtral-8x7b"), 8, "unfused", "loop")
    assert loop.host_by_kind_s["host-device syncs (experts loop)"] == pytest.approx(
        syncs * gm.load_host().sync_s()
    )
    assert grouped.time_s < loop.time_s
    assert any("experts loop" in n for n in loop.notes)
    assert "the step is the two in turn" in loop.explain()


def test_experts_leave_dense_models_and_graph_runtimes_alone():
    kw = {"batch": 8, "context": 2048, "calibration": "none"}
    for model, runtime in (("llama-3-8b", "hf-eager"), ("mixtral-8x7b", "fused-graph")):
        a = predict_inference(model, "h200", runtime=runtime, experts="loop", **kw)
        b = predict_inference(model, "h200", runtime=runtime, experts="grouped_mm", **kw)
        assert a.time_s == b.time_s


def test_sweep_prices_experts_as_the_scalar_does():
    kw = {"context": 2048, "runtime": "hf-eager", "calibration": "none"}
    for experts in ("grouped_mm", "loop"):
        s = gm.sweep_inference("mixtral-8x7b", "h200", batch=[1, 8], experts=experts, **kw)
        for b, t in zip((1, 8), s["time_s"]):
            one = predict_inference("mixtral-8x7b", "h200", batch=b, experts=experts, **kw)
            assert t == pytest.approx(one.time_s, rel=1e-9)


def test_moe_layout_scales_the_measured_hf_layer():
    spec = gm.get_model("mixtral-8x7b")
    assert spec.hf_layout == "moe"
    assert spec.llama_layout().moe is None
    assert gm.get_model("mistral-7b").hf_layout == "llama"


def test_bad_experts_is_a_one_line_error(capsys):
    with pytest.raises(SpecError, match="experts"):
        predict_inference("mixtral-8x7b", "h200", experts="bogus")  # type: ignore[arg-type]
    code = main(["infer", "--model", "mixtral-8x7b", "--gpu", "h200", "--experts", "bogus"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().count("\n") == 0 and "--experts" in err


RUN4_HOST = ROOT / "validation" / "results" / "steps-h200-moe-run4" / "host-moe.yaml"


def test_a_measured_moe_layer_prices_the_eager_moe_layer():
    # run 4's profile measured an HF Mixtral layer inside a small model (hf_moe_layer_s):
    # Mixtral-8x7B's layer is laid out the same (ratio 1), so each of its 32 layers costs it
    hp = gm.load_host(str(RUN4_HOST))
    r = predict_inference("mixtral-8x7b", "h200", batch=8, context=2048, runtime="hf-eager",
                          host=str(RUN4_HOST), calibration="none")  # fmt: skip
    key = "HF MoE decoder layer (measured in the model; x1 for this model's kernels)"
    assert r.host_by_kind_s[key] == pytest.approx(32 * hp.hf_moe_layer_s)
    # Qwen3-30B-A3B's layer launches more (q/k norms): the measured layer times its ratio
    q = predict_inference(ROOT / "validation/unseen/models/qwen3-30b-a3b.yaml", "h200", batch=8,
                          context=2048, runtime="hf-eager", host=str(RUN4_HOST),
                          calibration="none")  # fmt: skip
    ((name, total),) = [(k, v) for k, v in q.host_by_kind_s.items() if "MoE decoder layer" in k]
    ratio = float(name.split("; x")[1].split(" ")[0])
    assert 1.1 < ratio < 1.5
    assert total == pytest.approx(48 * hp.hf_moe_layer_s * ratio, rel=5e-3)  # 3 digits shown


def test_without_a_measured_moe_layer_the_reference_speed_applies():
    from gpumodel.llm.inference import REFERENCE_MOE_LAYER_SPEED

    host = ROOT / "validation" / "results" / "steps-h200-moe-run2" / "host-moe.yaml"
    assert gm.load_host(str(host)).hf_moe_layer_s is None
    r = predict_inference("mixtral-8x7b", "h200", batch=8, context=2048, runtime="hf-eager",
                          host=str(host), calibration="none")  # fmt: skip
    (name,) = [k for k in r.host_by_kind_s if k.startswith("HF decoder layer")]
    assert f"x{REFERENCE_MOE_LAYER_SPEED:g} for an MoE layer (reference)" in name


def test_host_profiles_carry_the_moe_layer():
    from gpumodel.validate.host import MOE_LAYER_KEY, build_profile
    from tests.test_host_profile import META, fake_samples

    samples = {**fake_samples(), MOE_LAYER_KEY: [1.5e-3, 1.6e-3, 1.7e-3]}
    p = build_profile(samples, META, {"hf_decoder_layer_kernels": None})
    assert p[MOE_LAYER_KEY] == pytest.approx(1.6e-3)
    assert MOE_LAYER_KEY in p["spread"]
    assert "hf_moe_layer_s" not in build_profile(fake_samples(), META)


def test_expected_groups_at_huge_token_counts_fill_whole_tiles():
    # far past the tile size every expert's rows fill tiles: rows / tile, plus about half a
    # tile's worth of rounding per expert
    active, tiles = expected_groups(10**12, 8, 2, GROUPED_TILE_M)
    assert active == 8
    assert tiles == pytest.approx(8 * (10**12 * 2 / 8) / GROUPED_TILE_M, rel=1e-9)


def test_a_traced_grouped_mm_maps_to_the_grouped_gemm():
    from gpumodel.diagnose.mapping import map_op

    args = {"Input Dims": [[16, 4096], [8, 4096, 28672], [8], [], []],
            "Input type": ["c10::BFloat16", "c10::BFloat16", "int", "", ""]}  # fmt: skip
    mapped = map_op("aten::_grouped_mm", args)
    assert mapped.op == GroupedGemm(tokens=16, experts=8, top_k=1, n=28672, k=4096, dtype="bf16")
    bad = map_op("aten::_grouped_mm", {"Input Dims": [[16, 4096]], "Input type": ["c10::BFloat16"]})
    assert bad.op is None and "experts' weights" in (bad.reason or "")


def test_calibrating_from_a_mixtral_trace_names_it_and_matches_its_gpu_time():
    cal = gm.calibrate_from_trace(RUN1 / "trace-mixtral-8x7b-grouped_mm-decode-b8x2048.json.gz")
    assert cal.trace.model == "mixtral-8x7b"  # not Mistral-7B, whose widths are the same
    # the grouped GEMMs were 83% of the step's GPU time and unmatched before they were mapped
    assert cal.trace.matched_fraction > 0.95


def test_qwen3_moe_preset_counts_transformers_parameters_and_casts_its_routing_weights():
    # transformers 5.17's Qwen3MoeForCausalLM of Qwen/Qwen3-30B-A3B's config.json, counted on
    # the meta device: 30,532,122,624 parameters
    spec = gm.get_model("qwen3-30b-a3b")
    assert spec.param_count() == 30_532_122_624
    assert (
        spec.moe.routing_weights == "model"
        and gm.get_model("mixtral-8x7b").moe.routing_weights == "fp32"
    )
    # Mixtral's weighted rows stay fp32 until cast back (one kernel more, twice the bytes)
    from gpumodel.llm.layers import model_ops

    def combine(s):
        ops = model_ops(s, 4, 2048, 2048, fusion="unfused", kv_cache="concat", attention="cudnn")
        return next(e.op for e in ops.layer if e.name == "experts_combine")

    fp32 = combine(
        spec.model_copy(update={"moe": spec.moe.model_copy(update={"routing_weights": "fp32"})})
    )
    cast = combine(spec)
    assert len(fp32.passes) == len(cast.passes) + 1
    gathers = [c.passes[5] for c in (fp32, cast)]
    assert all(g.name == "gather rows (index)" for g in gathers)
    assert [g.bytes_per_element for g in gathers] == [8, 4]


def test_moe_prefill_passes_run_pytorchs_broadcast_kernels():
    # an H200 trace of a Mixtral prefill: the row masks, SiLU and the product on the output's
    # halves and the routing weight ran elementwise_kernel<128, 4>, 67 of its 245 ms
    from gpumodel.llm.layers import model_ops

    ops = model_ops(gm.get_model("mixtral-8x7b"), 2, 2048, 2048, fusion="unfused",
                    kv_cache="concat", attention="cudnn")  # fmt: skip
    gate = next(e.op for e in ops.layer if e.name == "experts_silu_and_mul")
    assert [p.strided for p in gate.passes] == [None, "broadcast", "broadcast", "broadcast"]


def test_qwen3_moe_decode_launches_about_what_the_h200_trace_shows():
    path = (
        ROOT
        / "validation/results/steps-h200-moe-run1b/trace-qwen3-30b-a3b-grouped_mm-decode-b8x2048.json.gz"
    )
    with gzip.open(path) as fh:
        gpu = _first_step_gpu(json.load(fh)["traceEvents"])
    r = predict_inference("qwen3-30b-a3b", "h200", batch=8, context=2048, runtime="hf-eager",
                          calibration="none")  # fmt: skip
    # 4,100 kernels and copies in the traced step; the model counts 4.7% more, 4 a layer: one
    # is its router's softmax(dtype=float), one kernel where the model prices Mixtral's cast
    # and softmax; the other three are not identified
    assert len(gpu) == 4100
    assert r.kernels_per_step == pytest.approx(len(gpu), rel=0.06)
