"""Issue 17: host profiles, runtimes by name, training precision policies, one memory model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import gpumodel as gm
from gpumodel import hostprofile
from gpumodel.cli import main
from gpumodel.errors import InfeasibleError, SpecError, UnknownModelError
from gpumodel.llm import memory, predict_inference, predict_training_step
from gpumodel.llm.runtimes import (
    DEFAULT_RUNTIME,
    HF_VIEWS_PER_LAYER,
    get_runtime,
    trace_kernel_counts,
)

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
KINDS = ("matmul", "elementwise", "reduction", "norm", "view", "cat", "copy", "index", "sdpa",
         "optimizer_step")  # fmt: skip

# a profile as `gpumodel validate --host-only` writes it (gpumodel/validate/host.py): schema
# fields, then its provenance fields; graph figures null on a machine without CUDA
DEVS_STYLE = {
    "host_profile": 1, "name": "box", "measured_at": "2026-11-24T12:00:00Z",
    "cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "cpu_cores": 16, "python": "3.12.3",
    "torch": "2.13.0", "transformers": None, "cuda_driver": None, "gpu": "cpu",
    "eager_op_s": {k: (i + 1) * 1e-6 for i, k in enumerate(KINDS)},
    "kernel_launch_s": 3e-6, "hf_decoder_layer_s": None, "hf_decoder_layer_kernels": None,
    "graph_replay_s": None, "graph_replay_per_kernel_s": None, "compiled_step_launch_s": None,
    "spread": {"eager_op_s.matmul": [0.9e-6, 1.2e-6]},
    "hostname": "box", "cuda_runtime": None, "os_kernel": "6.8", "device": "cpu",
    "method": {"repeats": 3}, "shapes": {"eager_ops": "64x64"}, "notes": {"x": "y"},
}  # fmt: skip


def test_reference_host_is_the_old_assumption():
    h = gm.load_host("reference-h100")  # by name; no longer the default
    # 6.14 us launch (H100 calibration) + 20.5 us HF/PyTorch dispatch = the 26.6 us per kernel
    assert h.cost_s("matmul") == h.cost_s("copy") == pytest.approx(6.14e-6 + 20.5e-6, abs=1e-9)
    assert h.cost_s("view") == 0.0 and h.in_graph_kernel_s == 1.21e-6


def test_validate_host_only_files_load(tmp_path):
    path = tmp_path / "box.yaml"
    path.write_text(yaml.safe_dump(DEVS_STYLE))
    h = gm.load_host(path)
    assert h.name == "box" and h.cost_s("sdpa") == pytest.approx(9e-6)
    assert h.spread["eager_op_s.matmul"] == (0.9e-6, 1.2e-6)
    # the graph figures it could not measure fall back to the reference's
    assert h.replay_s == 20e-6 and h.in_graph_kernel_s == 1.21e-6 and h.compiled_launch_s == 20e-6
    # a typo is an error naming the key; so is a bad date
    path.write_text(yaml.safe_dump({**DEVS_STYLE, "kernel_lanch_s": 1e-6}))
    with pytest.raises(SpecError, match="kernel_lanch_s"):
        gm.load_host(path)
    path.write_text(yaml.safe_dump({**DEVS_STYLE, "measured_at": "yesterday"}))
    with pytest.raises(SpecError, match="ISO 8601"):
        gm.load_host(path)


def test_local_profile_is_found_by_name_and_is_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUMODEL_CACHE_DIR", str(tmp_path))
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "local.yaml").write_text(yaml.safe_dump({**DEVS_STYLE, "name": "local"}))
    assert gm.load_host().name == "local" and gm.load_host("local").cpu_model.startswith("Intel")
    assert {h.name for h in gm.list_hosts()} >= {"local", "reference-h100"}
    with pytest.raises(UnknownModelError, match="unknown host profile 'nope'"):
        gm.load_host("nope")


def test_host_mismatch_warns_in_one_line(monkeypatch):
    h = hostprofile.HostProfile.model_validate(DEVS_STYLE)
    monkeypatch.setattr(hostprofile, "local_cpu_model", lambda: "AMD EPYC 7B13")
    msg = h.mismatch()
    assert msg is not None and "\n" not in msg
    assert "Intel(R) Xeon(R) Platinum 8480+" in msg and "AMD EPYC 7B13" in msg
    monkeypatch.setattr(hostprofile, "local_cpu_model", lambda: "Intel(R)  Xeon(R) Platinum 8480+")
    assert h.mismatch() is None  # same CPU (whitespace aside)


TRACE = Path(__file__).parents[1] / "validation" / "kernel_lists" / "hf-eager-cpu-trace.json"


def _layer_kinds_of(r) -> dict[str, int]:
    """Kernels of one layer by kind (host_kind's vocabulary), from a step's op breakdown."""
    from gpumodel.llm._timing import Timer
    from gpumodel.llm.layers import model_ops
    from gpumodel.llm.runtimes import host_kind

    ops = model_ops(gm.get_model(r.model), r.batch, r.seq, r.context, dtype=r.dtype, tp=r.tp,
                    attention=r.attention, fusion=r.fusion, kv_cache=r.kv_cache, logits="last",
                    gqa=r.gqa)  # fmt: skip
    out: dict[str, int] = {}
    for t in Timer(gm.get_gpu(r.gpu), "none").time_all(ops.layer):
        for k in t.kernels:
            kind = host_kind(t.entry.kind, k.name)
            out[kind] = out.get(kind, 0) + k.launches * t.entry.count
    return out


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_hf_eager_kernel_list_matches_the_profiler_trace(phase):
    # validation/kernel_lists/hf_trace_check.py: torch.profiler (CPU) of a tiny random-weight
    # HF Llama, kernel-launching aten ops per decoder layer, by kind (transformers 5.24)
    traced = json.loads(TRACE.read_text())[phase]
    kw = {"context": 2048} if phase == "decode" else {"seq": 512}
    r = predict_inference("llama-3-8b", "h100", phase=phase, batch=8, runtime="hf-eager",
                          calibration="none", **kw)  # fmt: skip
    assert r.kernels_per_layer == traced["per_layer_total"] == 40
    assert _layer_kinds_of(r) == traced["per_layer"]
    # outside the layers: embedding, position ids + cos/sin tables, final norm, LM head; the
    # trace has one more cast (inv_freq.float() on a model cast with .to(bf16))
    outside = r.kernels_per_step - 32 * r.kernels_per_layer
    assert outside == traced["outside_layers_total"] - 1 == 21


def test_hf_eager_kernel_list_by_hand():
    # per layer (modeling_llama.py, no mask: SDPA enable_gqa): RMSNorm 8 x 2 (2 casts, mean,
    # 5 pointwise), q/k/v 3, RoPE 5 x 2 (4 pointwise + cat), cat of K and V 2, SDPA 1, o 1,
    # residual 1, gate/up/down 3, SiLU and mul 2, residual 1 = 40
    r = predict_inference("llama-3-8b", "h100", batch=8, context=2048, runtime="hf-eager",
                          calibration="none")  # fmt: skip
    assert r.kernels_per_layer == 40 and r.gqa == "native"
    # per step: embedding 1, position ids + cos/sin tables 11, final RMSNorm 8, LM head 1
    assert r.kernels_per_step == 1 + 11 + 32 * 40 + 8 + 1 == 1301
    assert r.kernels_by_kind == {
        "index": 1, "matmul": 32 * 7 + 1 + 1, "sdpa": 32, "cat": 32 * 4 + 1,
        "copy": 32 * 4 + 3 + 2, "reduction": 32 * 2 + 1, "elementwise": 32 * 22 + 6 + 5,
    }  # fmt: skip
    # a padding mask (gqa="repeat"): the mask (7 per step), its bias (1 per layer) and
    # repeat_kv's two copies per layer
    m = predict_inference("llama-3-8b", "h100", batch=8, context=2048, runtime="hf-eager",
                          gqa="repeat", calibration="none")  # fmt: skip
    assert m.kernels_per_layer == 43 and m.kernels_per_step == 1301 + 32 * 3 + 7


def test_live_cpu_trace_agrees_with_the_committed_one():
    pytest.importorskip("torch", reason="the live trace needs torch (pip install torch)")
    pytest.importorskip("transformers", reason="the live trace needs transformers")
    import importlib.util

    spec = importlib.util.spec_from_file_location("hf_trace_check", TRACE.with_name(
        "hf_trace_check.py"))  # fmt: skip
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import warnings

    with warnings.catch_warnings():  # transformers' deprecation notices (past_key_values)
        warnings.simplefilter("ignore")
        got = mod.per_layer_and_step("decode", 2, 1, 32)
    assert got["per_layer"] == json.loads(TRACE.read_text())["decode"]["per_layer"]


def test_hf_eager_host_is_the_profile_cost_of_each_kernel(tmp_path):
    slow = {k: 4 * v for k, v in DEVS_STYLE["eager_op_s"].items()}  # 4-40 us per op
    h = hostprofile.HostProfile.model_validate({**DEVS_STYLE, "eager_op_s": slow})
    r = predict_inference("llama-3-8b", "h100", batch=1, context=512, runtime="hf-eager",
                          calibration="none", host=h)  # fmt: skip
    by_hand = sum(n * h.cost_s(k) for k, n in r.kernels_by_kind.items())
    by_hand += 32 * HF_VIEWS_PER_LAYER * h.cost_s("view")
    assert r.host_time_s == pytest.approx(by_hand)
    assert r.host["name"] == "box" and r.bound == "host"
    text = r.explain()
    assert "HOST-BOUND" in text and "host (box)" in text
    # a measured decoder layer replaces the per-op sum of the layers
    layer = hostprofile.HostProfile.model_validate(
        {
            **DEVS_STYLE,
            "eager_op_s": slow,
            "hf_decoder_layer_s": 1e-3,
            "hf_decoder_layer_kernels": 40,
        }
    )
    m = predict_inference("llama-3-8b", "h100", batch=1, context=512, runtime="hf-eager",
                          calibration="none", host=layer)  # fmt: skip
    outside = (
        r.host_time_s
        - 32 * sum(n * h.cost_s(k) for k, n in _layer_kinds().items())
        - 32 * HF_VIEWS_PER_LAYER * h.cost_s("view")
    )
    assert m.host_time_s == pytest.approx(outside + 32 * 1e-3)


def _layer_kinds() -> dict[str, int]:
    return {"matmul": 7, "sdpa": 1, "cat": 4, "copy": 4, "reduction": 2, "elementwise": 22}


def test_graph_runtimes_pay_the_launch_and_the_in_graph_floor():
    h = hostprofile.HostProfile.model_validate(
        {**DEVS_STYLE, "graph_replay_s": 15e-6, "graph_replay_per_kernel_s": 2e-6,
         "compiled_step_launch_s": 300e-6})  # fmt: skip
    f = predict_inference("llama-3-8b", "h100", batch=1, context=512, runtime="fused-graph",
                          calibration="none", host=h)  # fmt: skip
    assert f.time_s == pytest.approx(f.gpu_time_s + 15e-6) and f.stream_floor_s == 2e-6
    c = predict_inference("llama-3-8b", "h100", batch=1, context=512,
                          runtime="hf-static-compiled", calibration="none", host=h)  # fmt: skip
    assert c.time_s == pytest.approx(c.gpu_time_s + 300e-6)
    # inductor: add+RMSNorm 2, q/k/v 3, RoPE 1, write positions + index_copy_ 3, repeat_kv 2, mask
    # bias 1, SDPA 1, o 1, gate/up 2, SiLU*mul 1, down 1 = 18 per layer; fused-graph 12
    assert c.kernels_per_layer == 18 and f.kernels_per_layer == 12


def test_static_compiled_decode_kernel_list_matches_the_device_trace():
    """validation/kernel_lists/hf_static_compiled_trace.py on an H200 (torch 2.11, transformers
    5.17): Llama-3-8B widths, 2-layer minus 1-layer models. Per layer 23 kernels: 7 GEMMs,
    5 cuBLAS split-K reductions inside those GEMM calls (timed with them by validate; the model
    counts calls), cuDNN SDPA 1, 10 generated (triton) kernels; outside the layers 6."""
    import collections

    data = json.loads((TRACE.parent / "static-compiled-h200" /
                       "static-compiled-decode-kernels.json").read_text())  # fmt: skip

    def kinds(key: str) -> collections.Counter:
        out: collections.Counter = collections.Counter()
        for name, k in data["points"][key]["kernels"].items():
            low = name.lower()
            kind = ("splitk" if "splitkreduce" in low else "gemm" if low.startswith(("nvjet", "void cutlass"))
                    else "sdpa" if low.startswith("cudnn") else "generated" if low.startswith("triton")
                    else "other")  # fmt: skip
            out[kind] += k["count"]
        return out

    for point, (batch, context) in {"b8 ctx2048": (8, 2048), "b32 ctx1024": (32, 1024)}.items():
        one, two = kinds(f"L1 {point}"), kinds(f"L2 {point}")
        layer = two - one
        assert layer == {"gemm": 7, "splitk": 5, "sdpa": 1, "generated": 10}
        r = predict_inference("llama-3-8b", "h200", batch=batch, context=context,
                              runtime="hf-static-compiled", calibration="none")  # fmt: skip
        assert r.kernels_per_layer == sum(layer.values()) - layer["splitk"] == 18
        assert (
            r.kernels_by_kind["sdpa"] == 32
            and r.kernels_per_step - 32 * 18 == sum((one - layer).values()) == 6
        )


def test_fused_graph_kernel_list_matches_the_stand_in_engines_trace():
    """validation/unseen/fused_engine.py (a vLLM-style stand-in: no vLLM on the device) traced
    on an H200 at batch 8 x 2048 (validation/results/steps-h200-fused-run1): per profiled step
    483 kernels, the model's 12 per layer + 3 outside plus, per layer, the 2 cuBLAS split-K
    reductions inside the skinny GEMM calls and the FlashAttention split-KV combine inside the
    attention call (in-call helpers, timed with their call, as in the other runtimes)."""
    import collections
    import gzip

    from gpumodel.tracecal import IN_CALL_HELPER_KERNELS

    path = (Path(__file__).parents[1] / "validation" / "results" / "steps-h200-fused-run1"
            / "trace-llama3-8b-decode-fused.json.gz")  # fmt: skip
    events = json.loads(gzip.open(path).read())["traceEvents"]
    steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    kernels = [e["name"] for e in events if e.get("cat") == "kernel"]
    assert len(steps) == 3 and len(kernels) == 3 * 483
    helpers = collections.Counter(
        h for k in kernels for h in IN_CALL_HELPER_KERNELS if k.startswith(h)
    )
    assert helpers == {"void cublasLt::splitKreduce_kernel": 3 * 64,
                       "void pytorch_flash::flash_fwd_splitkv_combine_kernel": 3 * 32}  # fmt: skip
    r = predict_inference("llama-3-8b", "h200", batch=8, context=2048, runtime="fused-graph",
                          calibration="none")  # fmt: skip
    assert r.kernels_per_layer == 12
    assert r.kernels_per_step == len(kernels) // 3 - sum(helpers.values()) // 3 == 387
    # one kernel of each of the model's fused ops per layer, by the engine's own names
    per_step = collections.Counter(kernels)
    for name, per_layer in (("fg_rmsnorm_kernel", 2), ("fg_rope_kernel", 1),
                            ("fg_cache_write_kernel", 1), ("fg_silu_mul_kernel", 1)):  # fmt: skip
        extra = 1 if name == "fg_rmsnorm_kernel" else 0  # the final norm
        assert per_step[name] == 3 * (32 * per_layer + extra)


def test_runtime_names_and_one_default(capsys):
    assert DEFAULT_RUNTIME == "fused-graph"
    assert get_runtime(None).name == get_runtime("graph").name == "fused-graph"
    assert get_runtime("eager").name == "hf-eager"
    with pytest.raises(SpecError, match="hf-eager, hf-static-compiled, fused-graph"):
        get_runtime("vllm")
    from gpumodel.cli import llm as cli_llm

    assert cli_llm.DEFAULT_RUNTIME == DEFAULT_RUNTIME
    assert predict_inference("llama-3-8b", "h100").runtime == DEFAULT_RUNTIME
    assert gm.plan_serving("llama-3-8b", "h100").runtime == DEFAULT_RUNTIME
    code = main(["infer", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "Default runtime: fused-graph" in out


def test_time_s_everywhere_with_step_time_s_alias(capsys):
    r = predict_inference("llama-3-8b", "h100", batch=4, context=1024)
    assert r.step_time_s == r.time_s and r.to_dict()["step_time_s"] == r.to_dict()["time_s"]
    t = predict_training_step("gpt2-small", "h100", 1, micro_batch=4, global_batch=4, seq=1024)
    assert t.step_time_s == t.time_s and t.to_dict()["step_time_s"] == t.time_s
    assert main(["infer", "--model", "llama-3-8b", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["time_s"] == data["step_time_s"] > 0


# ---------------------------------------------------------------------------- memory


def test_70b_on_one_h100_exits_2_with_one_line(capsys):
    code = main(["infer", "--model", "llama-3-70b", "--gpu", "h100", "--batch", "1"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:")
    # 70.55e9 params x 2 B = 141.1 GB + KV 0.67 GB + 1.5 GB overhead = 143.3 GB
    assert "needs 143.3 GB, has 80.0 GB" in lines[0] and "tp >= 2" in lines[0]
    with pytest.raises(InfeasibleError, match=r"needs 143\.3 GB"):
        predict_inference("llama-3-70b", "h100")
    r = predict_inference("llama-3-70b", "h100", allow_oversubscribe=True)
    assert not r.memory.fits
    ok = main(["infer", "--model", "llama-3-70b", "--gpu", "h100", "--allow-oversubscribe"])
    assert ok == 0


def test_l40s_fits_llama_3_8b_batch_32_at_4096_in_decode():
    # regression: fits refused at 48.2 GB by counting a 32 x 4096-token prefill's buffers in
    # the decode steady state. weights 16.06 GB + KV 32 x 4096 x 128 KiB = 17.18 GB + 1.5 GB
    m = gm.fits("llama-3-8b", "l40s", batch=32, seq=4096, strict=True)
    assert m.phase == "decode" and m.fits
    assert m.weights_bytes + m.kv_cache_bytes == pytest.approx(33.24e9, rel=2e-3)
    assert m.total_bytes == pytest.approx(33.24e9 + 1.5e9, rel=3e-3)
    p = gm.fits("llama-3-8b", "l40s", batch=32, seq=4096, phase="prefill")
    assert not p.fits  # the prefill of all 32 x 4096 tokens at once is another question


def _cli_json(capsys, *args: str) -> dict:
    code = main([*args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_every_command_prints_the_same_memory(capsys):
    ctx, batch = 1280, 64
    mem = _cli_json(capsys, "memory", "--model", "llama-3-8b", "--gpu", "h100", "--batch", str(batch),
                    "--seq", str(ctx), "--phase", "decode")  # fmt: skip
    inf = _cli_json(capsys, "infer", "--model", "llama-3-8b", "--gpu", "h100", "--batch", str(batch),
                    "--context", str(ctx))  # fmt: skip
    lib = gm.fits("llama-3-8b", "h100", batch=batch, seq=ctx)
    assert mem["total_bytes"] == inf["memory"]["total_bytes"] == lib.total_bytes
    # plan serve: 1024 + 256 tokens = context 1280; its max batch and its memory at the
    # replica's capacity batch (what a replica must hold at peak load) are the memory command's
    plan = _cli_json(capsys, "plan", "serve", "--model", "llama-3-8b", "--gpu", "h100", "--prompt",
                     "1024", "--output", "256")  # fmt: skip
    opt = plan["options"][0]
    assert opt["max_batch"] == mem["max_batch"]
    at = _cli_json(capsys, "memory", "--model", "llama-3-8b", "--gpu", "h100", "--batch",
                   str(opt["capacity_batch"]), "--seq", str(ctx))  # fmt: skip
    assert opt["memory_per_gpu_bytes"] == at["total_bytes"]
    # plan train and memory --train: the same training peak
    train = _cli_json(capsys, "plan", "train", "--model", "llama-2-7b", "--tokens", "1e9", "--gpu",
                      "h100", "--gpus", "8", "--tp", "1", "--pp", "1", "--zero", "3",
                      "--seq", "4096", "--policy", "bf16")  # fmt: skip
    tm = _cli_json(capsys, "memory", "--model", "llama-2-7b", "--gpu", "h100", "--train", "--batch", "1",
                   "--seq", "4096", "--dp", "8", "--zero", "3", "--recompute", "selective",
                   "--policy", "bf16")  # fmt: skip
    assert train["step"]["memory"]["total_bytes"] == pytest.approx(tm["total_bytes"])


# ---------------------------------------------------------------------------- training


def test_policy_state_bytes_per_parameter():
    n = gm.get_model("gpt2-small").param_count()
    kw = dict(batch=1, seq=1024, train=True)
    bf16 = memory("gpt2-small", "h100", policy="bf16", **kw)
    amp = memory("gpt2-small", "h100", policy="amp", **kw)
    mixed = memory("gpt2-small", "h100", policy="mixed", **kw)
    # bf16: 2 + 2 + (2 + 2); amp: 4 + 4 + 8 (+ 2 per matmul weight, autocast's cache);
    # mixed: 2 + 2 + 12 (ZeRO section 3.1)
    assert bf16.weights_bytes + bf16.gradients_bytes + bf16.optimizer_bytes == pytest.approx(8 * n)
    assert mixed.weights_bytes + mixed.gradients_bytes + mixed.optimizer_bytes == pytest.approx(
        16 * n
    )
    cache = 2 * gm.get_model("gpt2-small").matmul_param_count()
    assert amp.weights_bytes == pytest.approx(4 * n + cache)
    assert amp.gradients_bytes == pytest.approx(4 * n) and amp.optimizer_bytes == pytest.approx(
        8 * n
    )


def test_eager_step_holds_gradients_or_activations_not_both(capsys):
    """An eager HF step with zero_grad(set_to_none=True) and no accumulation peaks at the
    larger of its activations (start of the backward) and its gradients (end): amp TinyLlama
    at micro-batch 1 x 2048 carries 4 B/parameter of fp32 gradients only where they exceed the
    activations. Accumulating over micro-batches keeps the gradients through the forward."""
    n = gm.get_model("tinyllama-1.1b").param_count()
    kw = dict(micro_batch=1, seq=2048, policy="amp", fusion="unfused", attention="flash",
              recompute="none")  # fmt: skip
    one = predict_training_step("tinyllama-1.1b", "h100", 1, global_batch=1, **kw).memory
    acc = predict_training_step("tinyllama-1.1b", "h100", 1, global_batch=4, **kw).memory
    act = one.activations_bytes
    assert act > 4 * n  # 5.8 GB of activations, 4.4 GB of fp32 gradients
    assert one.gradients_bytes == 0 and acc.gradients_bytes == pytest.approx(4 * n)
    assert acc.allocated_bytes - one.allocated_bytes == pytest.approx(4 * n)
    assert any("freed between steps" in note for note in one.notes)
    # a tiny batch whose activations are less than the gradients: the gradients set the peak
    tiny = predict_training_step("tinyllama-1.1b", "h100", 1, global_batch=1,
                                 **{**kw, "seq": 16}).memory  # fmt: skip
    assert tiny.activations_bytes + tiny.gradients_bytes == pytest.approx(4 * n)
    # measured (unseen H100 run 13, torch.cuda.max_memory_allocated): 21.02 GB; the sum of
    # gradients and activations priced it 25.4 GB
    from gpumodel._paths import validation_dir

    data = json.loads((validation_dir() / "results/steps-h100-run13/steps-train.json").read_text())
    peak = next(r["peak_allocated_bytes"] for r in data["records"] if r["workload"] ==
                "tinyllama-1.1b" and r["policy"] == "amp" and r["batch"] == 1)  # fmt: skip
    assert peak == pytest.approx(21.02e9, rel=1e-3)
    assert one.allocated_bytes == pytest.approx(peak, rel=0.02)
    # the memory command agrees, and takes the accumulation a step would have
    for extra, same in (([], one), (["--accumulation", "4"], acc)):
        tm = _cli_json(capsys, "memory", "--model", "tinyllama-1.1b", "--gpu", "h100", "--train",
                       "--batch", "1", "--seq", "2048", "--policy", "amp", "--fusion",
                       "unfused", *extra)  # fmt: skip
        assert tm["total_bytes"] == pytest.approx(same.total_bytes)


def test_hf_eager_activations_by_hand():
    # TinyLlama-1.1B shape, bf16, per token and layer: 2 RMSNorms x (4h fp32 + 2h bf16),
    # q, k, v after RoPE 2(qn + 2 kvn), output 2 qn, lse 4 x heads, SwiGLU 4 x 2f
    from gpumodel.llm.memory import hf_eager_activation_bytes_per_token

    m = gm.get_model("tinyllama-1.1b")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.vocab) == (
        22, 2048, 32, 4, 5632, 32000)  # fmt: skip
    h, f, q, kv = 2048, 5632, 2048, 256
    bf16 = 2 * (4 * h + 2 * h) + 2 * (q + 2 * kv) + 2 * q + 4 * 32 + 8 * f
    assert hf_eager_activation_bytes_per_token(m, "bf16") == bf16
    # amp: fp32 norms (4h + 4h each) and one bf16 input cast per linear (5 x 2h)
    assert hf_eager_activation_bytes_per_token(m, "amp") == bf16 + 2 * 2 * h + 5 * 2 * h
    t = predict_training_step(m, "h100", 1, micro_batch=2, global_batch=2, seq=2048,
                              policy="bf16", fusion="unfused", recompute="none")  # fmt: skip
    per = 2 * 2048 * bf16
    assert t.memory.activations_bytes == pytest.approx(22 * per + 14 * 2 * 2048 * 32000)


def test_policies_order_the_optimizer_and_the_step():
    kw = dict(micro_batch=4, global_batch=4, seq=1024, fusion="unfused", recompute="none")
    s = {p: predict_training_step("gpt2-small", "h100", 1, policy=p, **kw) for p in
         ("bf16", "amp", "mixed")}  # fmt: skip
    # bf16 states stream 14 B per parameter, fp32 ones 28 (+ 6 for mixed's bf16 copy)
    assert s["bf16"].optimizer_s < s["amp"].optimizer_s < s["mixed"].optimizer_s
    # amp adds the autocast casts to every layer
    assert s["amp"].forward_s > s["bf16"].forward_s
    assert s["amp"].host is not None and s["amp"].host_time_s > s["bf16"].host_time_s
    with pytest.raises(SpecError, match="policy"):
        predict_training_step("gpt2-small", "h100", 1, policy="fp8", **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- traces


def test_trace_kernel_counts_charge_kernels_to_the_step_that_launched_them():
    steps = trace_kernel_counts(str(FIXTURES / "transformer_eager.json.gz"))
    assert len(steps) == 5 and all(s == steps[0] for s in steps)
    # the fixture's GPU work per step (validation/experiments/record_traces.py): 2 layers x (forward +
    # backward) + fused AdamW; its LayerNorms are native kernels, its attention cuDNN's
    assert steps[0]["sdpa"] == 16 and steps[0]["optimizer_step"] == 18
    assert sum(v for k, v in steps[0].items() if k != "total") == steps[0]["total"]


# ---------------------------------------------------------------------------- host choice


def test_default_host_is_the_cached_profile_of_this_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUMODEL_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "hosts"
    folder.mkdir()
    # as `gpumodel validate --host-only` names them: measured-<hostname>-<date>.yaml
    for name, cpu, when in (("measured-a-20261120", "Intel(R) Xeon(R) Platinum 8480+", "20"),
                            ("measured-a-20261123", "Intel(R) Xeon(R) Platinum 8480+", "23"),
                            ("measured-b-20261124", "AMD EPYC 9654", "24")):  # fmt: skip
        data = {**DEVS_STYLE, "name": name, "cpu_model": cpu,
                "measured_at": f"2026-11-{when}T12:00:00Z"}  # fmt: skip
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setattr(hostprofile, "local_cpu_model", lambda: "Intel(R) Xeon(R) Platinum 8480+")
    h = gm.load_host()
    assert h.name == "measured-a-20261123" and h.mismatch() is None  # the newest of this CPU
    r = predict_inference("llama-3-8b", "h100", batch=1, context=512, runtime="hf-eager")
    assert r.host["name"] == "measured-a-20261123" and r.host_warning is None
    # another machine: no cached profile of its CPU -> the typical host, with a warning
    monkeypatch.setattr(hostprofile, "local_cpu_model", lambda: "Some Other CPU")
    assert gm.load_host().name == "typical"
    r = predict_inference("llama-3-8b", "h100", batch=1, context=512, runtime="hf-eager")
    assert r.host["name"] == "typical" and "Some Other CPU" in r.host_warning
    # a graph runtime's step is one launch from the host: another machine's does not warn
    assert predict_inference("llama-3-8b", "h100", batch=1, context=512).host_warning is None


def test_trace_fitted_host_beats_the_default_profile_not_a_named_one():
    from gpumodel.tracecal import calibrate_from_trace

    cal = calibrate_from_trace(FIXTURES / "transformer_eager.json.gz")
    h = hostprofile.HostProfile.model_validate(DEVS_STYLE)
    r = predict_inference("gpt2", "h100", batch=1, context=256, runtime="hf-eager",
                          calibration=cal)  # fmt: skip
    per = cal.trace.host_per_kernel_s
    assert r.host_per_kernel_s == pytest.approx(per)
    assert r.host_time_s == pytest.approx(per * r.kernels_per_step)
    assert r.host_source.startswith("trace") and any("beats the host profile" in n
                                                     for n in r.notes)  # fmt: skip
    # a host named for the prediction (another machine than the trace's) beats the trace
    named = predict_inference("gpt2", "h100", batch=1, context=256, runtime="hf-eager",
                              calibration=cal, host=h)  # fmt: skip
    assert named.host_source == "host profile box"
    # a figure given beats both
    g = predict_inference("gpt2", "h100", batch=1, context=256, runtime="hf-eager",
                          calibration=cal, host=h, host_per_kernel_s=7e-6)  # fmt: skip
    assert g.host_time_s == pytest.approx(7e-6 * g.kernels_per_step)


@pytest.mark.parametrize("runtime", ["hf-eager", "hf-static-compiled", "fused-graph"])
def test_sweep_learns_runtime_and_host(runtime):
    h = hostprofile.HostProfile.model_validate(
        {**DEVS_STYLE, "graph_replay_s": 15e-6, "compiled_step_launch_s": 300e-6}
    )
    r = gm.sweep_inference("llama-3-8b", "h100", batch=[1, 32], context=[512, 4096],
                           runtime=runtime, host=h)  # fmt: skip
    assert r.settings["runtime"] == runtime and r.settings["host"]["name"] == "box"
    for row in r.records():
        s = predict_inference("llama-3-8b", "h100", batch=row["batch"], context=row["context"],
                              runtime=runtime, host=h)  # fmt: skip
        assert row["time_s"] == pytest.approx(s.time_s, rel=1e-9)
        assert row["host_time_s"] == pytest.approx(s.host_time_s, rel=1e-9)
        assert row["memory_bytes"] == s.memory.total_bytes


@pytest.mark.parametrize("policy", ["amp", "bf16", "mixed"])
def test_training_sweep_learns_policy_and_host(policy):
    h = hostprofile.HostProfile.model_validate(DEVS_STYLE)
    r = gm.sweep_training("gpt2-small", "h100", micro_batch=[4, 8], seq=1024, global_batch=8,
                          recompute="none", fusion="unfused", policy=policy, host=h)  # fmt: skip
    for row in r.records():
        s = predict_training_step("gpt2-small", "h100", 1, micro_batch=row["micro_batch"],
                                  global_batch=8, seq=1024, recompute="none", fusion="unfused",
                                  policy=policy, host=h)  # fmt: skip
        assert row["time_s"] == pytest.approx(s.time_s, rel=1e-9)
        assert row["memory_bytes"] == s.memory.total_bytes


def test_plan_commands_take_host_and_warn_once(tmp_path, capsys):
    path = tmp_path / "box.yaml"
    path.write_text(yaml.safe_dump(DEVS_STYLE))
    code = main(["plan", "serve", "--model", "llama-3-8b", "--gpu", "h100", "--host", str(path),
                 "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["host"]["name"] == "box"
    warn = [ln for ln in err.splitlines() if ln.startswith("warning: host profile")]
    assert len(warn) == (0 if hostprofile.local_cpu_model() in (None, DEVS_STYLE["cpu_model"])
                         else 1)  # fmt: skip
    code = main(["plan", "train", "--model", "gpt2-small", "--tokens", "1e9", "--gpu", "h100",
                 "--gpus", "1", "--fusion", "unfused", "--policy", "amp", "--micro-batch", "4",
                 "--seq", "1024", "--global-batch", "8", "--host", str(path), "--json"])  # fmt: skip
    out, _ = capsys.readouterr()
    step = json.loads(out)["step"]
    assert code == 0 and step["host"]["name"] == "box" and step["policy"] == "amp"


def test_fragmentation_from_a_trace_with_memory_events():
    from gpumodel.llm.training import trace_fragmentation
    from gpumodel.tracecal import calibrate_from_trace

    cal = calibrate_from_trace(FIXTURES / "transformer_eager.json.gz")
    assert trace_fragmentation(cal) is None  # this fixture recorded no memory events
    fit = cal.trace.model_copy(update={"peak_allocated_bytes": 10e9, "peak_reserved_bytes": 12e9})
    cal = cal.model_copy(update={"trace": fit})
    assert trace_fragmentation(cal) == pytest.approx(1.2)
    kw = dict(micro_batch=4, global_batch=4, seq=1024, policy="bf16", fusion="unfused")
    t = predict_training_step("gpt2-small", "h100", 1, calibration=cal, **kw)
    m = t.memory
    assert m.fragmentation == pytest.approx(1.2)
    assert m.fragmentation_bytes == pytest.approx(0.2 * m.allocated_bytes)
    assert m.total_bytes == pytest.approx(1.2 * m.allocated_bytes + m.overhead_bytes)


def test_static_compiled_prefill_is_the_eager_static_cache_path():
    # HF compiles the decoding step only: the prompt runs eagerly into the StaticCache.
    # Trace (transformers 5.24): 45 per layer on a fresh cache, of which 2 are the lazy
    # aten::zeros allocating its K and V (once per cache); the model counts the other 43
    traced = json.loads(TRACE.read_text())["prefill-static"]
    r = predict_inference("llama-3-8b", "h100", phase="prefill", batch=2, seq=512,
                          runtime="hf-static-compiled", calibration="none")  # fmt: skip
    assert r.runtime == "hf-static-compiled" and r.fusion == "unfused" and r.gqa == "native"
    assert r.bound in ("host", "compute", "memory") and r.host_per_kernel_s > 0  # eager host
    want = dict(traced["per_layer"])
    want["elementwise"] -= 2
    assert _layer_kinds_of(r) == want and r.kernels_per_layer == traced["per_layer_total"] - 2
    # its decode is the compiled graph: one launch, 18 fused kernels per layer
    d = predict_inference("llama-3-8b", "h100", batch=2, context=512,
                          runtime="hf-static-compiled", calibration="none")  # fmt: skip
    assert d.fusion == "compiled" and d.kernels_per_layer == 18 and d.host_per_kernel_s == 0


STATIC_CACHE_TRACE = (Path(__file__).parents[1] / "validation" / "results" / "h200-sxm"
                      / "static-prefill-trace-2026-11-30" / "static-cache-trace.json")  # fmt: skip


def test_static_cache_prefill_override_keeps_the_traced_causal_gqa_attention():
    # An H200 trace (transformers 5.17, torch 2.11) of Llama-3-8B prefills into a StaticCache
    # and into a DynamicCache: the same cuDNN kernel 32 times a step, and no repeat_kv copies
    # (no aten::clone; the host's aten::expand count is the same in both: RoPE's)
    doc = json.loads(STATIC_CACHE_TRACE.read_text())
    pts = {(p["phase"], p["batch"], p.get("seq", p.get("context")), p["cache"]): p
           for p in doc["points"]}  # fmt: skip
    for b, s in ((2, 1024), (1, 1536)):
        static, dynamic = pts[("prefill", b, s, "static")], pts[("prefill", b, s, "dynamic")]
        assert [a["name"] for a in static["attention"]] == [a["name"] for a in dynamic["attention"]]
        assert static["attention"][0]["count"] == doc["layers"] == 32
        assert static["host_ops"]["aten::expand"] == dynamic["host_ops"]["aten::expand"]
        assert "aten::clone" not in static["host_ops"]
        # kernels a step, less the allocator's memsets and the harness's per-layer
        # cumulative_length.fill_() (a FillFunctor each): the model's list, the trace's 2
        # step-level position kernels (arange, + offset) aside
        memsets = sum(k["count"] for k in static["kernels"] if k["name"].startswith("Memset"))
        traced = static["kernels_per_step"] - memsets - doc["layers"]
        expected = predict_inference("llama-3-8b", "h200", phase="prefill", batch=b, seq=s,
                                     runtime="hf-static-compiled", calibration="none")  # fmt: skip
        assert traced - expected.kernels_per_step == 2
        # an expert naming the StaticCache explicitly gets the same step, not a masked one
        named = predict_inference("llama-3-8b", "h200", phase="prefill", batch=b, seq=s,
                                  runtime="hf-static-compiled", kv_cache="static",
                                  calibration="none")  # fmt: skip
        assert named.gqa == "native" and named.kernels_per_step == expected.kernels_per_step
        assert named.time_s == pytest.approx(expected.time_s, rel=1e-12)
    # one eager decode step into it does build the mask: repeat_kv's two copies a layer
    # (aten::clone), SDPA on the expanded K/V (1.12 ms of cuDNN a step against 0.29 ms at
    # kv_heads from a DynamicCache), as the model's override prices it
    static, dynamic = pts[("decode", 4, 1536, "static")], pts[("decode", 4, 1536, "dynamic")]
    assert static["host_ops"]["aten::clone"] == 2 * doc["layers"]
    assert "aten::clone" not in dynamic["host_ops"]
    assert static["attention"][0]["total_us"] > 3 * dynamic["attention"][0]["total_us"]
    d = predict_inference("llama-3-8b", "h200", batch=4, context=1536, runtime="hf-eager",
                          kv_cache="static", calibration="none")  # fmt: skip
    assert d.gqa == "repeat"


def test_validate_host_only_writer_output_loads_and_predicts(tmp_path):
    # the file `gpumodel validate --host-only` writes (gpumodel/validate/host.py), built from
    # planted samples, loads as a host profile and drives the eager host term
    from gpumodel.validate.host import (
        EAGER_OP_KINDS,
        SCALAR_KEYS,
        build_profile,
        write_host_profile,
    )

    samples: dict = {f"eager_op_s.{k}": [8e-6, 10e-6, 12e-6] for k in EAGER_OP_KINDS}
    samples.update({k: [2e-5, 2e-5, 2e-5] for k in SCALAR_KEYS})
    samples["compiled_step_launch_s"] = None  # not measured: written as null
    # whole models not measured: the layer timed alone prices the layers
    samples["hf_model_step_s"] = samples["hf_model_layer_s"] = None
    meta = {"name": "measured-box-20261124", "measured_at": "2026-11-24T12:00:00Z",
            "cpu_model": "X", "cpu_cores": 2, "python": "3.11", "torch": "2.13.0",
            "transformers": "5.24.0", "cuda_driver": None, "gpu": "none (cpu)"}  # fmt: skip
    prof = build_profile(samples, meta, {"hf_decoder_layer_kernels": 40},
                         {"hostname": "box", "method": {"repeats": 3}, "device": "cpu"})  # fmt: skip
    path = write_host_profile(prof, tmp_path / "measured-box-20261124.yaml")
    h = gm.load_host(path)
    assert h.cost_s("cat") == pytest.approx(10e-6) and h.spread["eager_op_s.cat"][1] > 10e-6
    assert h.compiled_step_launch_s is None and h.compiled_launch_s == h.replay_s == 2e-5
    r = predict_inference("gpt2", "h100", batch=1, context=128, runtime="hf-eager",
                          calibration="none", host=path)  # fmt: skip
    assert r.host["name"] == "measured-box-20261124" and r.host["source"] == str(path)
    # the measured layer (20 us for 40 kernels) replaces the per-op sum of gpt2's 12 layers
    assert any("HF decoder layer measured" in n for n in r.notes)


TRAIN_TRACE = TRACE.with_name("hf-train-cpu-trace.json")


def test_train_host_factor_is_the_fit_of_its_committed_fit_sets():
    """TRAIN_HOST_FACTOR is what validation/fitset/fit_host_factor.py makes of the four
    committed fit sets (narrow steps over traced kernels x the same call's host profile), per
    family and traced policy, to the two decimals shipped; amp's casts cost the host less per
    kernel than bf16 modules' own ops on every family."""
    import sys

    from gpumodel.llm.training import TRAIN_HOST_FACTOR

    root = Path(__file__).parents[1]
    sys.path.insert(0, str(root / "validation" / "fitset"))
    from fit_host_factor import FIT_SETS, fit

    fitted = fit([root / "validation" / "results" / d for d in FIT_SETS])
    assert fitted == TRAIN_HOST_FACTOR
    assert fitted == {("llama", "amp"): 1.18, ("llama", "bf16"): 1.38, ("gpt2", "amp"): 1.41,
                      ("gpt2", "bf16"): 1.51, ("other", "amp"): 1.27, ("other", "bf16"): 1.51}  # fmt: skip


def test_training_host_factor_follows_the_policys_kernels():
    """`mixed` and no policy run bf16 modules: the bf16 factor; `amp` its own; a family that was
    not traced (MoE) the policy's "other"."""
    from gpumodel.llm.models import get_model
    from gpumodel.llm.training import TRAIN_HOST_FACTOR, train_host_factor

    llama, moe = get_model("llama-3-8b"), get_model("mixtral-8x7b")
    assert train_host_factor(llama, "amp") == TRAIN_HOST_FACTOR[("llama", "amp")]
    for policy in ("bf16", "mixed", None):
        assert train_host_factor(llama, policy) == TRAIN_HOST_FACTOR[("llama", "bf16")]
    assert train_host_factor(moe, "amp") == TRAIN_HOST_FACTOR[("other", "amp")]
    h = hostprofile.HostProfile.model_validate(DEVS_STYLE)
    steps = {
        p: predict_training_step("tinyllama-1.1b", "h100", 1, micro_batch=1, global_batch=1,
                                 seq=64, fusion="unfused", policy=p, recompute="none", host=h)
        for p in ("amp", "bf16")
    }  # fmt: skip
    # the same host per kernel ratio as the factors, over each policy's traced kernel count
    from gpumodel.llm.training import HF_EAGER_TRAIN_KERNELS

    def kernels(p: str) -> int:
        t = HF_EAGER_TRAIN_KERNELS[("llama", p)]
        return 22 * (sum(t["forward_layer"].values()) + sum(t["backward_layer"].values())) + sum(
            t["forward_outside"].values()) + sum(t["backward_outside"].values())  # fmt: skip

    per_kernel = {p: steps[p].host_time_s / kernels(p) for p in steps}
    assert per_kernel["bf16"] / per_kernel["amp"] == pytest.approx(1.38 / 1.18)


FIT_COUNTS = (Path(__file__).parents[1] / "validation" / "results" / "train-fitset-h100"
              / "kernel-counts.json")  # fmt: skip


def test_eager_training_host_counts_are_the_traced_ones():
    """The kernel counts per layer and outside are the H100 fit-set traces' (kernel_counts.py
    -> kernel-counts.json): Llama per layer = (24-layer llama-350m - 20-layer llama-600m) / 4,
    outside = the 24-layer step less 24 layers; GPT-2: 24 layers + outside = gpt2-medium's step.
    The host charges them at the profile's cost x the family's training factor."""
    from gpumodel.llm.training import HF_EAGER_TRAIN_KERNELS, TRAIN_HOST_FACTOR

    fit = json.loads(FIT_COUNTS.read_text())
    phases = {"forward": "forward", "backward": "backward"}
    for policy in ("amp", "bf16"):
        a, b = (
            fit[f"trace-llama-350m-train-{policy}.json.gz"],
            fit[f"trace-llama-600m-train-{policy}.json.gz"],
        )
        g = fit[f"trace-gpt2-medium-train-{policy}.json.gz"]
        for phase in phases:
            lt = HF_EAGER_TRAIN_KERNELS[("llama", policy)]
            gt = HF_EAGER_TRAIN_KERNELS[("gpt2", policy)]
            for kind in set(a[phase]) | set(b[phase]):
                layer = (a[phase].get(kind, 0) - b[phase].get(kind, 0)) / 4
                assert lt[f"{phase}_layer"].get(kind, 0) == layer
                assert lt[f"{phase}_outside"].get(kind, 0) == a[phase].get(kind, 0) - 24 * layer
            for kind in g[phase]:
                n = 24 * gt[f"{phase}_layer"].get(kind, 0) + gt[f"{phase}_outside"].get(kind, 0)
                assert n == g[phase][kind]
    # autograd launches about twice the forward's kernels (Llama bf16: 78 vs 40 per layer)
    llama = HF_EAGER_TRAIN_KERNELS[("llama", "bf16")]
    assert sum(llama["forward_layer"].values()) == 40
    assert sum(llama["backward_layer"].values()) == 78
    h = hostprofile.HostProfile.model_validate(DEVS_STYLE)
    t = predict_training_step("gpt2-small", "h100", 1, micro_batch=4, global_batch=4, seq=1024,
                              fusion="unfused", policy="bf16", recompute="none", host=h)  # fmt: skip
    g = HF_EAGER_TRAIN_KERNELS[("gpt2", "bf16")]
    # 757 kernels (12 x (22 + 37) + 15 + 34), each at the factor x the decoder layer's per kernel
    kernels = 12 * (sum(g["forward_layer"].values()) + sum(g["backward_layer"].values())) + sum(
        g["forward_outside"].values()) + sum(g["backward_outside"].values())  # fmt: skip
    assert kernels == 757
    # no decoder layer measured: the mean eager op cost of the eight kernel kinds
    kinds = ("matmul", "elementwise", "reduction", "norm", "cat", "copy", "index", "sdpa")
    per = sum(h.cost_s(k) for k in kinds) / 8
    assert t.host_time_s == pytest.approx(TRAIN_HOST_FACTOR[("gpt2", "bf16")] * per * 757)
    # measured: 1.2 ms for 40 kernels = 30 us per kernel
    h2 = h.model_copy(update={"hf_decoder_layer_s": 1.2e-3, "hf_decoder_layer_kernels": 40})
    t2 = predict_training_step("gpt2-small", "h100", 1, micro_batch=4, global_batch=4, seq=1024,
                               fusion="unfused", policy="bf16", recompute="none", host=h2)  # fmt: skip
    assert t2.host_time_s == pytest.approx(TRAIN_HOST_FACTOR[("gpt2", "bf16")] * 30e-6 * 757)
    assert any("torch.profiler" in n for n in t.notes)


def test_live_training_trace_agrees_with_the_committed_one():
    pytest.importorskip("torch", reason="the live trace needs torch (pip install torch)")
    pytest.importorskip("transformers", reason="the live trace needs transformers")
    import importlib.util
    import warnings

    spec = importlib.util.spec_from_file_location(
        "hf_train_trace_check", TRAIN_TRACE.with_name("hf_train_trace_check.py"))  # fmt: skip
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = mod.per_layer("gpt2", "amp")
    assert got == json.loads(TRAIN_TRACE.read_text())["gpt2-amp"]
