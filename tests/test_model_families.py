"""Qwen2.5, Qwen3 and Phi-3: the model fields their HF modules need (q/k/v biases, q/k norms,
fused projections), checked against transformers' own counts and the device's traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import gpumodel as gm
from gpumodel.llm import predict_inference
from gpumodel.llm.runtimes import trace_kernel_counts
from gpumodel.ops.simple import StridedElementwise

ROOT = Path(__file__).parents[1]
RUN = ROOT / "validation" / "results" / "steps-h200-families-run1"
CPU_TRACE = ROOT / "validation" / "kernel_lists" / "hf-eager-families-cpu-trace.json"
ARCH = {"qwen2.5-7b": "qwen2", "qwen3-8b": "qwen3", "phi-3-mini": "phi3"}


def _layer_kinds(model: str, phase: str) -> tuple[int, dict[str, int], int]:
    from tests.test_llm_steps import _layer_kinds_of

    kw = {"context": 1024} if phase == "decode" else {"seq": 512}
    r = predict_inference(model, "h100", phase=phase, batch=8, runtime="hf-eager",
                          calibration="none", **kw)  # fmt: skip
    outside = r.kernels_per_step - gm.get_model(model).layers * r.kernels_per_layer
    return r.kernels_per_layer, _layer_kinds_of(r), outside


@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("model", sorted(ARCH))
def test_hf_eager_layer_matches_the_profiler_trace(model, phase):
    # validation/kernel_lists/hf_trace_check.py --families: torch.profiler (CPU) of tiny
    # random-weight Qwen2 / Qwen3 / Phi-3 models, kernel-launching aten ops per layer by kind
    traced = json.loads(CPU_TRACE.read_text())[ARCH[model]][phase]
    per_layer, kinds, outside = _layer_kinds(model, phase)
    assert per_layer == traced["per_layer_total"]
    assert kinds == traced["per_layer"]
    # as for Llama: the trace has one more cast outside the layers (inv_freq.float())
    assert outside == traced["outside_layers_total"] - 1


def test_layer_kernels_by_hand():
    # Qwen3: Llama's 40 + q_norm and k_norm, 8 eager RMSNorm kernels each; Phi-3: one qkv and
    # one gate_up GEMM (3 fewer) + RoPE's pass-through cat of q and of k (2 more)
    assert _layer_kinds("qwen3-8b", "decode")[0] == 40 + 2 * 8
    assert _layer_kinds("phi-3-mini", "decode")[0] == 40 - 3 + 2
    assert _layer_kinds("qwen2.5-7b", "decode")[0] == 40  # its q/k/v biases are GEMM epilogues


def test_device_traces_count_the_model_kernels_plus_a_constant():
    # H200 traces of one eager decode step (batch 8, context 2048): each launches the model's
    # kernels per layer plus the same few library kernels (cuBLAS split-K, cuDNN); that
    # constant, read off Llama-3-8B's trace, gives the other two models' totals
    llama = trace_kernel_counts(str(ROOT / "validation/results/steps-h200-run29/"
                                    "trace-llama3-8b-decode-eager.json.gz"))[-1]["total"]  # fmt: skip
    outside = 21  # embedding, position ids + cos/sin tables, final norm, LM head
    extra, rest = divmod(llama - outside - 32 * 40, 32)
    assert rest == 0 and extra == 6
    # Qwen2.5's q/k/v biases launch nothing more at batch 1 (run 2's trace) than at batch 8
    run2 = RUN.with_name("steps-h200-families-run2")
    for model, trace in (("qwen2.5-7b", RUN / "trace-qwen2.5-7b-decode-b8x2048.json.gz"),
                         ("qwen3-8b", RUN / "trace-qwen3-8b-decode-b8x2048.json.gz"),
                         ("qwen2.5-7b", run2 / "trace-qwen2.5-7b-decode-b1x1024.json.gz")):  # fmt: skip
        per_layer = _layer_kinds(model, "decode")[0]
        total = trace_kernel_counts(str(trace))[-1]["total"]
        assert total == outside + gm.get_model(model).layers * (per_layer + extra)


def test_presets_count_the_parameters_transformers_counts():
    # sum(p.numel()) of the random-weight HF models on the device (steps-families.json)
    counted = json.loads((RUN / "steps-families.json").read_text())["models"]
    for model in ARCH:
        assert gm.get_model(model).param_count() == counted[model]["params"]
    q = gm.get_model("qwen2.5-7b")
    assert q.attention_params() - q.model_copy(update={"qkv_bias": False}).attention_params() == (
        28 * 128 + 2 * 4 * 128
    )


def test_measured_hf_layer_scales_with_the_layer_kernels():
    # a host profile's hf_decoder_layer_s timed a Llama layer: a Qwen3 layer costs it times the
    # ratio of the two layers' eager host costs by op kind (the profile's own figures)
    hp = yaml.safe_load((RUN / "host-families.yaml").read_text())
    cost = hp["eager_op_s"]
    llama = {"copy": 4, "elementwise": 22, "reduction": 2, "matmul": 7, "cat": 4, "sdpa": 1}
    qwen3 = {**llama, "copy": 8, "elementwise": 32, "reduction": 4}

    def host_s(kinds: dict[str, int]) -> float:
        return sum(n * cost[k] for k, n in kinds.items())

    ratio = host_s(qwen3) / host_s(llama)
    host = str(RUN / "host-families.yaml")
    r = predict_inference("qwen3-8b", "h200", batch=8, context=2048, runtime="hf-eager",
                          host=host, calibration="none")  # fmt: skip
    term = next(v for k, v in r.host_by_kind_s.items() if k.startswith("HF decoder layer"))
    layer = hp.get("hf_model_layer_s") or hp["hf_decoder_layer_s"]
    assert term == pytest.approx(36 * layer * ratio, rel=1e-9)
    assert 1.3 < ratio < 1.5
    # a Llama-layout model keeps the measured layer as it is
    q = predict_inference("qwen2.5-7b", "h200", batch=8, context=2048, runtime="hf-eager",
                          host=host, calibration="none")  # fmt: skip
    term = next(v for k, v in q.host_by_kind_s.items() if k.startswith("HF decoder layer"))
    assert term == pytest.approx(28 * layer, rel=1e-9)


@pytest.mark.parametrize("model", ["qwen3-8b", "phi-3-mini"])
def test_sweep_prices_the_scaled_host_as_the_scalar_does(model):
    # Phi-3 across its window: the sweep prices those points one at a time (mixed kernels)
    host = str(RUN / "host-families.yaml")
    sw = gm.sweep_inference(model, "h200", phase="decode", batch=[1, 8], context=[1024, 3000],
                            runtime="hf-eager", host=host)  # fmt: skip
    for row in sw.records():
        one = predict_inference(model, "h200", batch=int(row["batch"]),
                                context=int(row["context"]), runtime="hf-eager", host=host)  # fmt: skip
        assert row["time_s"] == pytest.approx(one.step_time_s, rel=1e-6)


def test_view_cat_prices_the_unseen_phi3_cats():
    # H200 trace of Phi-3-mini (never fitted to): the sliding cache's cat of cache[:, :, 1:]
    # (8 x 32 heads x 2047 x 96, 306.8 us median over 192 calls) and RoPE's pass-through cat of
    # the rotated q (1 x 32 x 3072 x 96, 59.9 us); rotate_half's cat rate said 208 and 44 us
    for n, measured_us in ((8 * 32 * 2047 * 96, 306.8), (32 * 3072 * 96, 59.9)):
        op = StridedElementwise(kind="view_cat", n=n, bytes_per_element=4, written_per_element=2)
        t = gm.predict(op, "h200").time_s * 1e6
        assert t == pytest.approx(measured_us, rel=0.10)


def test_phi3_v_cache_cat_runs_the_generic_kernel():
    # Phi-3's new V is a slice of the fused qkv output: an H200 trace of decode at batch 64,
    # context 1024 (steps-h200-families-run2) ran per layer one vectorised cat (K) and one
    # CatArrayBatchedCopy (V) of 64 x 32 heads x ~1029 x 96, 1211 us median
    from gpumodel.llm.layers import model_ops

    layer = {e.name: e for e in model_ops(gm.get_model("phi-3-mini"), 64, 1, 1028,
                                           fusion="unfused", kv_cache="concat").layer}  # fmt: skip
    assert len(layer["kv_cache_concat"].op.passes) == 1  # K only
    v = layer["kv_cache_concat_v"].op
    assert v.kind == "view_cat" and v.n == 64 * 1028 * 32 * 96
    assert gm.predict(v, "h200").time_s * 1e6 == pytest.approx(1211.0, rel=0.10)


def test_diagnose_prices_the_traced_cats_by_their_kind():
    # Phi-3's prompt past its window (H200): rotate_half's halves (40.7 us a call), RoPE's
    # pass-through cat and the cache's first update (each ~59 us on 9.4 M elements): priced as
    # the two kinds, each within 15% of the measured time
    r = gm.diagnose(str(RUN / "trace-phi-3-mini-prefill-b1x3072.json.gz"))
    cats = [o for o in r.ops if o.name == "aten::cat" and o.measured_s > 1e-3]
    assert len(cats) == 3
    for o in cats:
        assert o.predicted_per_call_s == pytest.approx(o.measured_per_call_s, rel=0.15), o.name


def test_training_kernel_deltas_are_the_cpu_traces():
    # LAYOUT_TRAIN_DELTA = a tiny Qwen3 / Phi-3 training step's kernels per layer minus a tiny
    # Llama's, as hf_train_trace_check.py --families counted them
    from gpumodel.llm.training import LAYOUT_TRAIN_DELTA

    traced = json.loads(
        (ROOT / "validation/kernel_lists/hf-train-families-cpu-trace.json").read_text()
    )
    for (layout, policy), delta in LAYOUT_TRAIN_DELTA.items():
        for part in ("forward_layer", "backward_layer"):
            fam, llama = (
                traced[f"tiny-{layout}-{policy}"][part],
                traced[f"tiny-llama-{policy}"][part],
            )
            diff = {k: fam.get(k, 0) - llama.get(k, 0) for k in {*fam, *llama}}
            assert {k: v for k, v in diff.items() if v} == delta.get(part, {}), (
                layout,
                policy,
                part,
            )


@pytest.mark.parametrize(("model", "policy", "trace"), [
    ("qwen3-0.6b", "amp", "trace-qwen3-0.6b-train-amp"),
    ("phi-3-mini", "bf16", "trace-phi-3-mini-train-bf16"),
])  # fmt: skip
def test_training_kernel_counts_match_the_device_trace(model, policy, trace):
    # H200 traces of one training step (steps-h200-family-train-run1): kernels outside the
    # optimizer within 1.5% of the model's count (Llama's device-traced counts + the layout's
    # CPU-traced delta); TinyLlama's amp step matches Llama's counts exactly (run 30)
    from gpumodel.llm.training import traced_train_kernels

    spec = gm.get_model(str(ROOT / "validation/unseen/models/qwen3-0.6b.yaml")
                        if model == "qwen3-0.6b" else model)  # fmt: skip
    t = traced_train_kernels(spec, policy)
    predicted = spec.layers * (sum(t["forward_layer"].values()) + sum(t["backward_layer"].values()))
    predicted += sum(t["forward_outside"].values()) + sum(t["backward_outside"].values())
    run = ROOT / "validation/results/steps-h200-family-train-run1"
    counts = trace_kernel_counts(str(run / f"{trace}.json.gz"))[-1]
    measured = counts["total"] - counts.get("optimizer_step", 0)
    assert predicted == pytest.approx(measured, rel=0.015)
    llama = traced_train_kernels(spec.model_copy(update={"qk_norm": False, "hf_modules": "llama"}),
                                 policy)  # fmt: skip
    assert sum(t["forward_layer"].values()) != sum(llama["forward_layer"].values())


@pytest.mark.parametrize(("model", "arch", "point", "generated", "gemms", "splitk", "extra"), [
    ("qwen3-8b", "qwen3", (1, 2048), 10, 7, 5, 0),  # Llama's 10: the q/k norm fused into RoPE's
    # no GQA (no repeat_kv copies), fused GEMMs; the model counts Llama's cache write (3
    # kernels) where inductor fused one more for Phi-3's qkv slices
    ("phi-3-mini", "phi3", (8, 1024), 7, 4, 3, 1),
])  # fmt: skip
def test_static_compiled_kernel_list_matches_the_device_trace(
    model, arch, point, generated, gemms, splitk, extra
):
    # hf_static_compiled_trace.py --arch on an H200 (torch 2.11, transformers 5.17): 2-layer
    # minus 1-layer models; cuBLAS split-K reductions and cuDNN's split-KV reduction run inside
    # their calls (the model counts calls)
    import collections

    data = json.loads((ROOT / "validation/kernel_lists" / f"static-compiled-{arch}-h200" /
                       "static-compiled-decode-kernels.json").read_text())  # fmt: skip

    def kinds(key: str) -> collections.Counter:
        out: collections.Counter = collections.Counter()
        for name, k in data["points"][key]["kernels"].items():
            low = name.lower()
            kind = ("helper" if "splitkreduce" in low or "lean_reduction" in low
                    else "gemm" if low.startswith(("nvjet", "void cutlass"))
                    else "sdpa" if low.startswith("cudnn") else "generated"
                    if low.startswith("triton") else "other")  # fmt: skip
            out[kind] += k["count"]
        return out

    b, ctx = point
    layer = kinds(f"L2 b{b} ctx{ctx}") - kinds(f"L1 b{b} ctx{ctx}")
    assert layer["generated"] == generated and layer["gemm"] == gemms and layer["sdpa"] == 1
    assert layer["helper"] >= splitk and layer["other"] == 0
    r = predict_inference(model, "h200", batch=b, context=ctx, runtime="hf-static-compiled",
                          calibration="none")  # fmt: skip
    assert r.kernels_per_layer == generated + gemms + 1 + extra


def test_qk_norm_saves_its_fp32_input_for_backward():
    # per token and layer, 4 B per q and k element more than the same model without the
    # norms; measured: Qwen3-0.6B bf16 peaks 10.73 / 18.05 / 32.72 GiB at 2 / 4 / 8 x 1024
    # tokens (steps-h200-family-train-run1), whose slope the model now meets within 1%
    from gpumodel.llm.memory import hf_eager_activation_bytes_per_token

    spec = gm.get_model(str(ROOT / "validation/unseen/models/qwen3-0.6b.yaml"))
    plain = spec.model_copy(update={"qk_norm": False})
    for policy in ("bf16", "amp"):
        extra = hf_eager_activation_bytes_per_token(spec, policy) - (
            hf_eager_activation_bytes_per_token(plain, policy)
        )
        assert extra == 4 * (16 * 128 + 8 * 128)
    measured_gib = {2: 10.73, 4: 18.05, 8: 32.72}
    slope_gib = (measured_gib[8] - measured_gib[2]) / 6  # per 1024-token sequence
    peak = {
        b: gm.predict_training_step(spec, "h200", 1, micro_batch=b, global_batch=b, seq=1024,
                                    dtype="bf16", policy="bf16", fusion="unfused",
                                    recompute="none").memory.allocated_bytes / 2**30
        for b in (2, 8)
    }  # fmt: skip
    assert (peak[8] - peak[2]) / 6 == pytest.approx(slope_gib, rel=0.02)


def test_models_show_names_the_layout_fields(capsys):
    from gpumodel.cli import main

    assert main(["models", "show", "qwen3-8b"]) == 0
    out = capsys.readouterr().out
    assert "qk_norm          True" in out and "hf_modules       llama" in out
    assert main(["models", "show", "phi-3-mini"]) == 0
    assert "hf_modules       phi3" in capsys.readouterr().out


def test_masked_cudnn_prefill_at_an_odd_key_length():
    # validation/results/h200-sxm/sdpa-mask-lengths-2026-11-29: masked SDPA (bool mask), 32
    # heads, bf16, H200; odd key lengths run ~1.62x the work rate of even ones (the fit data:
    # priced within 12%, median 4.6%); a decode call (one query) keeps the dense-mask factor
    from gpumodel.ops.attention import CUDNN_MASK_UNALIGNED_FACTOR, Attention

    rows = json.loads((ROOT / "validation/results/h200-sxm/sdpa-mask-lengths-2026-11-29/"
                       "sdpa-mask-lengths.json").read_text())["rows"]  # fmt: skip
    # 2056 keys (a partial 128-key tile in both dimensions): 269.7 us measured at batch 1,
    # priced 221.6 (-18%): the masked kernel's tile quantization is not modelled
    for r in (r for r in rows if r["seq"] != 2056):
        a = Attention(batch=r["batch"], heads=32, seq=r["seq"], head_dim=r["head_dim"],
                      dtype="bf16", causal=False, impl="cudnn", mask=True)  # fmt: skip
        assert gm.predict(a, "h200").time_s == pytest.approx(r["masked_s"], rel=0.13), r
    odd, even = (Attention(batch=1, heads=32, seq=s, head_dim=128, impl="cudnn", mask=True,
                           causal=False) for s in (2047, 2048))  # fmt: skip
    assert odd.computed_scores / odd.scores == pytest.approx(
        CUDNN_MASK_UNALIGNED_FACTOR * even.computed_scores / even.scores
    )
    one = Attention(batch=8, heads=32, seq=1, kv_seq=2047, head_dim=128, impl="cudnn", mask=True)
    assert one.mask_work_factor() == pytest.approx(even.mask_work_factor())


def test_window_note_names_what_sdpa_gets():
    # Phi-3 has no GQA: at its window HF's mask reaches SDPA, repeat_kv copies nothing
    phi = gm.predict_inference("phi-3-mini", "h200", phase="prefill", batch=3, seq=2047,
                               runtime="hf-eager", calibration="none")  # fmt: skip
    note = next(n for n in phi.notes if "sliding window: HF passes" in n)
    assert "SDPA gets a mask" in note and "repeat_kv" not in note
    mistral = gm.predict_inference("mistral-7b", "h200", batch=8, context=4096,
                                   runtime="hf-eager", calibration="none")  # fmt: skip
    assert any("repeat_kv'd K/V" in n for n in mistral.notes)
