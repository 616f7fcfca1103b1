"""Count the kernels an eager Hugging Face Llama step launches, per decoder layer and per step,
from a torch.profiler trace of a tiny random-weight model on the CPU (issue 17, item 2).

The runtime ``hf-eager``'s kernel list (``gpumodel.llm.runtimes``, docs/llm-runtimes.md) is
checked against this: every aten op that HF's Python calls is one kernel on CUDA unless it is a
view (view, transpose, unsqueeze, slice, expand, ...) or a no-op cast; a CPU kernel may
decompose further (mean -> sum + div on CPU, one reduce kernel on CUDA), so ops are counted at
the top of the call tree (what the Python issued), not at its leaves. Per layer = count of a
2-layer model minus a 1-layer model (same widths); per step = the 1-layer count minus one layer.

The call is the one the unseen-set script times (validation/unseen/steps_unseen.py): decode
``model(input_ids=ids, past_key_values=DynamicCache, use_cache=True)`` with no attention mask;
prefill ``model(input_ids=ids, use_cache=True, logits_to_keep=1)``; ``prefill-static`` the same
into a fresh ``StaticCache`` (the uncompiled prefill of ``hf-static-compiled``).

    python validation/kernel_lists/hf_trace_check.py --out validation/kernel_lists/hf-eager-cpu-trace.json

``--families`` counts the same for tiny Qwen2 (q/k/v biases), Qwen3 (q/k norms) and Phi-3 (fused
qkv_proj and gate_up_proj) models, decode and prefill (hf-eager-families-cpu-trace.json).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import platform
import tempfile

# aten ops that launch no kernel (views, metadata)
VIEWS = {
    "aten::view", "aten::reshape", "aten::transpose", "aten::unsqueeze", "aten::squeeze",
    "aten::slice", "aten::t", "aten::expand", "aten::narrow", "aten::as_strided",
    "aten::select", "aten::alias", "aten::_unsafe_view", "aten::permute", "aten::detach",
    "aten::lift_fresh", "aten::resolve_conj", "aten::result_type", "aten::empty",
    "aten::empty_like", "aten::empty_strided", "aten::contiguous", "aten::size",
    "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "aten::split",
    "aten::chunk", "aten::unbind", "aten::flatten", "aten::detach_",
}  # fmt: skip


def kind(name: str) -> str:
    """gpumodel's host-profile op kind of one kernel-launching aten op."""
    op = name.removeprefix("aten::")
    if op in ("linear", "matmul", "mm", "bmm", "addmm", "baddbmm"):
        return "matmul"
    if "scaled_dot_product" in op:
        return "sdpa"
    if op == "cat":
        return "cat"
    if op in ("to", "_to_copy", "copy_", "clone", "reshape_copy"):
        return "copy"
    if op in ("embedding", "index_select", "index_copy_", "index_copy", "gather"):
        return "index"
    if op in ("mean", "sum", "softmax", "_softmax", "argmax", "max", "amax", "log_softmax"):
        return "reduction"
    return "elementwise"


def top_level_kernels(events) -> collections.Counter:
    """Kernel-launching aten ops at the top of the call tree, by kind."""
    out: collections.Counter = collections.Counter()
    for e in events:
        if e.cpu_parent is not None or not e.name.startswith("aten::"):
            continue
        children = {c.name for c in e.cpu_children}
        if e.name in VIEWS:
            # a reshape of a non-contiguous tensor copies (repeat_kv's expand + reshape)
            if e.name == "aten::reshape" and "aten::clone" in children:
                out["copy"] += 1
            continue
        if e.name == "aten::to" and "aten::_to_copy" not in children:
            continue  # already that dtype: no copy
        if e.name == "aten::dropout" and not children:
            continue  # eval mode (Phi-3's resid dropouts): returns its input
        out[kind(e.name)] += 1
    return out


def tiny_config(arch: str, layers: int):
    """A tiny config of ``arch``: hidden 64, 4 heads of 16, 2 KV heads (Phi-3: 4), ffn 128."""
    import transformers

    common = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                  max_position_embeddings=4096, attn_implementation="sdpa")  # fmt: skip
    if arch == "qwen3":
        return transformers.Qwen3Config(**common, head_dim=16)
    if arch == "phi3":  # no GQA, as Phi-3-mini; no sliding window (the dense path)
        return transformers.Phi3Config(**{**common, "num_key_value_heads": 4}, pad_token_id=0)
    cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[arch]
    return cls(**common)


def trace_counts(
    layers: int, phase: str, batch: int, seq: int, context: int, arch: str = "llama"
) -> dict[str, int]:
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoModelForCausalLM, DynamicCache, StaticCache

    torch.manual_seed(0)
    cfg = tiny_config(arch, layers)
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval()
    import inspect

    # transformers >= 5.2x names the cache argument `cache` (`past_key_values` warns)
    kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        if phase == "decode":
            cache = DynamicCache(config=cfg)
            for i in range(layers):
                kv = torch.randn(batch, cfg.num_key_value_heads, context, 16, dtype=torch.bfloat16)
                cache.update(kv, kv.clone(), i)
            ids = torch.randint(0, 256, (batch, 1))
            model(input_ids=ids, use_cache=True, **{kw: cache})  # warm
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                model(input_ids=ids, use_cache=True, **{kw: cache})
        elif phase == "prefill-static":  # what HF runs uncompiled before compiled decoding
            ids = torch.randint(0, 256, (batch, seq))
            model(input_ids=ids, use_cache=True, logits_to_keep=1,
                  **{kw: StaticCache(config=cfg, max_cache_len=2 * seq)})  # fmt: skip
            cache = StaticCache(config=cfg, max_cache_len=2 * seq)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                model(input_ids=ids, use_cache=True, logits_to_keep=1, **{kw: cache})
        else:
            ids = torch.randint(0, 256, (batch, seq))
            model(input_ids=ids, use_cache=True, logits_to_keep=1)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                model(input_ids=ids, use_cache=True, logits_to_keep=1)
    return dict(top_level_kernels(prof.events()))


def per_layer_and_step(phase: str, batch: int, seq: int, context: int, arch: str = "llama") -> dict:
    one = collections.Counter(trace_counts(1, phase, batch, seq, context, arch))
    two = collections.Counter(trace_counts(2, phase, batch, seq, context, arch))
    layer = {k: two[k] - one[k] for k in sorted(set(one) | set(two)) if two[k] - one[k]}
    step = {k: one[k] - layer.get(k, 0) for k in sorted(one) if one[k] - layer.get(k, 0)}
    return {"per_layer": layer, "per_layer_total": sum(layer.values()),
            "outside_layers": step, "outside_layers_total": sum(step.values())}  # fmt: skip


def main() -> None:
    import torch
    import transformers

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--families", action="store_true", help="Qwen2, Qwen3 and Phi-3 instead")
    args = ap.parse_args()
    head = {
        "measured_at": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        "device": "cpu (torch.profiler, ProfilerActivity.CPU)",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "python": platform.python_version(),
    }  # fmt: skip
    if args.families:
        result = {
            "what": "kernel-launching aten ops of eager HF steps, top of the call tree "
            "(hf_trace_check.py docstring)", **head,
            "models": "tiny_config(): hidden 64, 4 heads of 16, 2 KV heads (Phi-3: 4), ffn 128, "
            "vocab 256, bf16, sdpa, random weights; decode batch 2 at context 32, prefill 2 x 16",
            **{arch: {"decode": per_layer_and_step("decode", 2, 1, 32, arch),
                      "prefill": per_layer_and_step("prefill", 2, 16, 16, arch)}
               for arch in ("qwen2", "qwen3", "phi3")},
        }  # fmt: skip
        write_json(args.out, result)
        return
    result = {
        "what": "kernel-launching aten ops of an eager HF Llama step, top of the call tree "
        "(hf_trace_check.py docstring)", **head,
        "model": "LlamaConfig hidden 64, 4 heads, 2 KV heads (GQA), ffn 128, vocab 256, bf16, "
        "sdpa, random weights",
        "decode": {"batch": 2, "context": 32, **per_layer_and_step("decode", 2, 1, 32)},
        "prefill": {"batch": 2, "seq": 16, **per_layer_and_step("prefill", 2, 16, 16)},
        "prefill-static": {"batch": 2, "seq": 16, "cache": "StaticCache(max_cache_len=32), "
                           "fresh (its K/V allocated lazily by the first update: aten::zeros)",
                           **per_layer_and_step("prefill-static", 2, 16, 16)},
    }  # fmt: skip
    write_json(args.out, result)


def write_json(path: str, result: dict) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(result, fh, indent=1, sort_keys=False)
        fh.write("\n")
    os.replace(tmp, path)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
