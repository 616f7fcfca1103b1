"""Count the kernels one eager Hugging Face training step launches (forward, loss, backward),
per decoder layer and outside the layers, by kind, from a torch.profiler trace of tiny
random-weight models on the CPU (issue 17, item 3: the eager host cost of training).

Counted like ``hf_trace_check.py``: the kernel-launching aten ops HF's Python issues (top of
the call tree), plus, under amp, the casts autocast inserts before a bf16 op (``aten::to`` with
a copy directly under a linear/matmul/SDPA: the input on every call, each weight once per
autocast region), plus, in the
backward, the aten ops each autograd node runs. ``zero_grad(set_to_none=True)`` (PyTorch's
default): AccumulateGrad steals the first gradient, no kernel. Per layer = a 2-layer minus a
1-layer model. Policies: ``bf16`` (``model.to(bfloat16)``; ``mixed`` runs the same modules)
and ``amp`` (fp32 model under ``torch.autocast(bfloat16)``).

    python validation/kernel_lists/hf_train_trace_check.py --out validation/kernel_lists/hf-train-cpu-trace.json

``--families``: Llama, Qwen3 (q/k norms) and Phi-3 (fused projections) at the same tiny widths
(``hf_trace_check.tiny_config``), so that a family's per-layer counts minus Llama's give what its
modules add to Llama's (hf-train-families-cpu-trace.json).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import platform
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_trace_check import VIEWS, kind, tiny_config

# ops autocast runs in bf16 on both CPU and CUDA (torch.amp autocast op lists: the
# lower-precision matmul family and SDPA); their fp32 inputs are cast first. Nested casts under
# other ops are CPU-only scalar promotions (no tensor copy on CUDA) and are not counted.
AUTOCAST_BF16_OPS = {"aten::linear", "aten::matmul", "aten::addmm", "aten::mm", "aten::bmm",
                     "aten::baddbmm", "aten::scaled_dot_product_attention"}  # fmt: skip


def _model(arch: str, layers: int):
    from transformers import (
        AutoModelForCausalLM,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
    )

    if arch.startswith("tiny-"):  # hf_trace_check's tiny configs: llama, qwen3, phi3
        return AutoModelForCausalLM.from_config(tiny_config(arch.removeprefix("tiny-"), layers))
    if arch == "llama":
        return LlamaForCausalLM(LlamaConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
            max_position_embeddings=512, attn_implementation="sdpa"))  # fmt: skip
    return GPT2LMHeadModel(GPT2Config(
        n_embd=64, n_layer=layers, n_head=4, vocab_size=256, n_positions=512,
        attn_implementation="sdpa", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))  # fmt: skip


def _is_copy(e) -> bool:
    return e.name == "aten::to" and any(c.name == "aten::_to_copy" for c in e.cpu_children)


def counts(arch: str, layers: int, policy: str) -> tuple[collections.Counter, collections.Counter]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = _model(arch, layers)
    if policy == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    ids = torch.randint(0, 256, (2, 16))

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=policy == "amp"):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        model.zero_grad(set_to_none=True)

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    fwd: collections.Counter = collections.Counter()
    bwd: collections.Counter = collections.Counter()
    for e in prof.events():
        if not e.name.startswith("aten::") or (e.name in VIEWS):
            continue
        if e.name == "aten::to" and not _is_copy(e):
            continue
        if e.name == "aten::dropout" and not e.cpu_children:
            continue  # p = 0 (Phi-3's resid dropouts): returns its input
        par = e.cpu_parent
        if par is None:
            fwd[kind(e.name)] += 1
        elif policy == "amp" and par.cpu_parent is None and par.name in AUTOCAST_BF16_OPS:
            if _is_copy(e):
                fwd["copy"] += 1  # a cast autocast inserted before the op
        elif not par.name.startswith("aten::") and ("Backward" in par.name
                                                     or "AccumulateGrad" in par.name):  # fmt: skip
            bwd[kind(e.name)] += 1
    return fwd, bwd


def per_layer(arch: str, policy: str) -> dict:
    (f1, b1), (f2, b2) = counts(arch, 1, policy), counts(arch, 2, policy)

    def diff(a, b):
        return {k: b[k] - a[k] for k in sorted(set(a) | set(b)) if b[k] - a[k]}

    fl, bl = diff(f1, f2), diff(b1, b2)
    return {
        "forward_layer": fl, "backward_layer": bl,
        "forward_outside": {k: f1[k] - fl.get(k, 0) for k in sorted(f1) if f1[k] - fl.get(k, 0)},
        "backward_outside": {k: b1[k] - bl.get(k, 0) for k in sorted(b1) if b1[k] - bl.get(k, 0)},
    }  # fmt: skip


def main() -> None:
    import torch
    import transformers

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--families", action="store_true", help="Llama, Qwen3 and Phi-3, tiny")
    args = ap.parse_args()
    archs = ("tiny-llama", "tiny-qwen3", "tiny-phi3") if args.families else ("llama", "gpt2")
    result = {
        "what": "kernel-launching aten ops of one eager HF training step (hf_train_trace_check.py)",
        "measured_at": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        "device": "cpu (torch.profiler, ProfilerActivity.CPU)",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "python": platform.python_version(),
        "models": "hf_trace_check.tiny_config (hidden 64, 4 heads of 16, 2 KV heads, Phi-3 4; "
        "ffn 128)" if args.families else "Llama: hidden 64, 4 heads, 2 KV heads, ffn 128; GPT-2: "
        "n_embd 64, 4 heads, dropout 0; vocab 256, sdpa, batch 2 x 16 tokens, loss over every "
        "token",
        **{f"{a}-{p}": per_layer(a, p) for a in archs for p in ("bf16", "amp")},
    }  # fmt: skip
    folder = os.path.dirname(os.path.abspath(args.out))
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(result, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, args.out)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
