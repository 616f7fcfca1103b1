"""A decoder-only transformer as an ordered list of gpumodel ops, per GPU after tensor parallelism.

``model_ops(model, batch, seq, context)`` returns the ops of one forward step: the embedding
(``pre``), one decoder layer (``layer``, run ``model.layers`` times) and the final norm and LM
head (``post``). Each entry is ``(name, op, count)``: a gpumodel op (Gemm, Attention, RMSNorm,
...) that ``predict`` times, so a calibration flows through every layer.

Shapes. ``batch`` sequences each bring ``seq`` new tokens (prefill: the prompt; decode: 1) and
attend to ``context`` keys (default ``seq``; capped by a sliding window). T = batch * seq rows
go through every projection. Pre-norm decoder layer (GPT-2/Llama):

    x = x + o_proj(attention(rope(q_proj(norm(x)), k_proj(..)), v_proj(..)))
    x = x + down(act(gate(norm(x))) * up(norm(x)))        SwiGLU (Shazeer 2020)
    x = x + down(gelu(up(norm(x))))                        GELU MLP (GPT-2)

Tensor parallelism ``tp`` (Megatron-LM, Shoeybi et al. 2019, section 3): Q/K/V and gate/up are
column-parallel (heads and ffn_hidden divided by tp; K/V heads replicated when kv_heads < tp),
o_proj and down are row-parallel, each followed by an all-reduce of the T x hidden activations
(2 per layer forward, bytes = T * hidden * element size, the nccl-tests per-rank size).

Fusion. ``fusion="unfused"`` is eager PyTorch as Hugging Face transformers 5.x writes Llama
(``modeling_llama.py``; op sequence checked with a dispatch trace of transformers 5.17): separate
q/k/v and gate/up GEMMs, RMSNorm as 8 aten kernels in fp32, rotary embedding as 5 kernels per
tensor, SiLU and multiply as 2, and 11 small kernels per step for the cos/sin tables. SDPA's
fused kernels (flash, cuDNN) write their output in the (batch, seq, heads, head_dim) layout, so
HF's ``transpose(1, 2).contiguous()`` after attention is free; only ``attention="naive"`` pays a
transpose copy. ``"fused"`` is a serving engine (or torch.compile): fused QKV and gate/up GEMMs,
one kernel per norm, RoPE and SiLU*mul. ``"compiled"`` is an HF model under ``torch.compile``
(inductor): the module's separate q/k/v and gate/up GEMMs stay (cuBLAS calls inductor does not
merge), and every chain of pointwise ops between them becomes one generated kernel: the residual
add with the RMSNorm after it, RoPE on q and k, SiLU*mul, each cache ``index_copy_``.

GQA in eager SDPA (``gqa``). HF's ``sdpa_attention_forward`` passes ``enable_gqa=True`` to SDPA
when there is no attention mask (no padding, DynamicCache: the causal mask is skipped and SDPA's
``is_causal`` used), so K/V are read at ``kv_heads`` (``gqa="native"``). With an explicit mask
(padding, or a StaticCache at decode, where HF always builds one) it calls ``repeat_kv`` first:
K and V are materialised at ``heads`` (read ``kv_heads``, write ``heads`` for each) and attention
reads the expanded copies over the whole cache, plus the mask kernels (``gqa="repeat"``).

KV cache. ``"static"``: new K/V rows are written into a preallocated cache (vLLM, HF
StaticCache). ``"concat"``: HF DynamicCache appends with ``torch.cat``, which copies the whole
cache of the layer every step (reads and writes 2 * batch * kv_heads * context * head_dim
elements). ``"none"``: no cache (training).

Mixture of experts (assumption, documented): routing is uniform and independent, so the T*top_k
token slots hit on average ``E * (1 - (1 - top_k/E)^T)`` distinct experts; at decode with few
tokens only those experts' weights are read; at large T every expert is active. Eager HF
(transformers 5) runs the experts one of two ways (``experts``): ``"grouped_mm"``, its default
on CUDA, sorts the token slots by expert and runs one ``torch._grouped_mm`` per projection
over all experts (``GroupedGemm``: whole row tiles per active expert) among ~30 small sort,
gather, histogram and mask kernels; ``"loop"`` (``experts_implementation="eager"``, and
transformers 4's only way) runs each active expert's MLP GEMMs with ``ceil(T*top_k / active)``
rows, in a Python loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from gpumodel.errors import SpecError, UnsupportedError
from gpumodel.llm._comm import AllReduce, placed
from gpumodel.llm._ops import Passes, passes
from gpumodel.llm.models import ModelSpec
from gpumodel.ops import (
    Attention,
    Elementwise,
    Embedding,
    ExpandCopy,
    Gemm,
    GroupedGemm,
    LayerNorm,
    Op,
    RMSNorm,
    Softmax,
    StridedElementwise,
)
from gpumodel.ops.attention import IMPL_DTYPES, sdpa_impl
from gpumodel.ops.base import at_least, build, is_array, uniform
from gpumodel.specs import BYTES_PER_ELEMENT

Kind = Literal["gemm", "attention", "norm", "elementwise", "embedding", "cache", "comm"]
Fusion = Literal["fused", "unfused", "compiled"]
KVCache = Literal["static", "concat", "none"]
AttentionImpl = Literal["flash", "cudnn", "efficient", "naive"]
# what a step's attention ran: one of those, or SDPA's math path (``sdpa_math``)
RunAttention = Literal["flash", "cudnn", "efficient", "naive", "math"]
GQA = Literal["native", "repeat"]
Experts = Literal["grouped_mm", "loop"]
EXPERTS = ("grouped_mm", "loop")

# Inductor's repeat_kv copies (one load per 4-8 stores, the loads served from L2) stream at
# 0.89-0.90 of the elementwise family's calibrated DRAM rate: 3.96-4.01 TB/s where the family
# gives 4.44, four shapes of GQA 4 in a compiled graph on an H200 (CUPTI, less the in-graph
# floor; alone after a clean L2 0.91-0.92; validation/results/h200-sxm/graph-attention-2026-11-30)
INDUCTOR_EXPAND_BANDWIDTH_FRACTION = 0.90

# Kinds whose inputs were just written by the previous kernel and are small: predicted with
# l2="warm" (L2-resident when they fit). GEMMs stream weights and attention streams the KV cache
# from HBM, so they are predicted cold.
WARM_KINDS = frozenset({"norm", "elementwise"})


@dataclass(frozen=True)
class LayerOp:
    """One op of a layer: ``op`` runs ``count`` times (MoE experts) per layer on each GPU."""

    name: str
    op: Op
    count: int = 1
    kind: Kind = "elementwise"
    # the kernel before it wrote more than it reads back (``repeat_kv``'s copies before
    # attention): it starts with L2 full of dirty lines and pays their write-back
    after_writer: bool = False
    # its backward as a multiple of its forward where the general rules do not hold (None:
    # ``training._backward``'s; 0: nothing to differentiate, e.g. a mask)
    backward_factor: float | None = None

    @property
    def l2(self) -> Literal["cold", "warm", "dirty"]:
        if self.after_writer:
            return "dirty"
        return "warm" if self.kind in WARM_KINDS else "cold"


@dataclass(frozen=True)
class ModelOps:
    """The ops of one forward step on one GPU: ``pre``, then ``layer`` x ``layers``, then ``post``."""

    pre: tuple[LayerOp, ...]
    layer: tuple[LayerOp, ...]
    layers: int
    post: tuple[LayerOp, ...]
    tokens: int
    notes: tuple[str, ...] = field(default=())
    # what the layers run after the runtime's rules (``hf_window_gqa``, ``masked_kernel``)
    gqa: str = "native"
    attention: str = "flash"

    def sequence(self) -> list[LayerOp]:
        return list(self.pre) + list(self.layer) * self.layers + list(self.post)


@dataclass(frozen=True)
class TPShape:
    """Per-GPU widths under tensor parallelism ``tp``."""

    heads: int
    kv_heads: int
    ffn: int
    vocab: int


def stage_layers(layers: Any, pp: Any) -> Any:
    """Layers of a pipeline's largest stage, ``ceil(layers / pp)``: stages need not be equal
    (Llama 3 405B trained its 126 layers over 16 stages, Dubey et al. 2024, section 3.3.2), and
    the largest sets the pace and the memory (numpy-capable). Interleaved, a stage splits the
    same layers into its chunks."""
    return -(-layers // pp)


def in_flight_microbatches(pp: Any, microbatches: Any, virtual_stages: Any = 1) -> Any:
    """Micro-batches whose activations the first pipeline stage holds at once, in whole-stage
    units. 1F1B: min(pp, m). Interleaved over v chunks, Megatron's warm-up on rank 0 runs
    2 (pp - 1) + (v - 1) pp chunk forwards before its first backward, plus the one in flight
    (megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_
    interleaving), each a v-th of the stage: pp + (pp - 1) / v, the factor 1 + (pp - 1) /
    (pp v) of Korthikanti et al. 2022 (numpy-capable)."""
    import numpy as np

    v = np.asarray(virtual_stages)
    chunks = np.where(v == 1, pp, 2 * (pp - 1) + (v - 1) * pp + 1)
    out = np.minimum(chunks, np.asarray(microbatches) * v) / v
    return out if out.ndim else float(out)


def tp_shape(model: ModelSpec, tp: int) -> TPShape:
    """Split heads, KV heads, FFN and vocabulary over ``tp`` GPUs (Megatron-LM)."""
    if tp < 1:
        raise UnsupportedError(f"tp must be >= 1, got {tp}")
    if model.heads % tp:
        raise UnsupportedError(f"{model.id}: {model.heads} heads do not split over tp={tp}")
    if model.kv_heads % tp and tp % model.kv_heads:
        raise UnsupportedError(
            f"{model.id}: {model.kv_heads} KV heads neither split over nor replicate to tp={tp}"
        )
    return TPShape(
        heads=model.heads // tp,
        kv_heads=max(1, model.kv_heads // tp),
        ffn=math.ceil(model.ffn_hidden / tp),
        vocab=math.ceil(model.vocab / tp),
    )


def active_experts(tokens: int, experts: int, top_k: int) -> int:
    """Expected distinct experts hit by ``tokens`` tokens under uniform top-k routing."""
    expected = experts * (1.0 - (1.0 - top_k / experts) ** tokens)
    return max(top_k if tokens else 0, min(experts, math.ceil(expected - 1e-9)))


def _norm(
    model: ModelSpec, name: str, rows: int, dtype: str, fusion: Fusion, width: int | None = None
) -> LayerOp:
    """The model's norm over ``rows`` rows of ``width`` (default: the hidden size; a head's
    ``head_dim`` for Qwen3's q/k norm, eager or fused)."""
    h = width or model.hidden
    if model.norm == "layernorm":  # nn.LayerNorm is one native kernel even in eager PyTorch
        return LayerOp(name, build(LayerNorm, rows=rows, hidden=h, dtype=dtype), kind="norm")  # type: ignore[arg-type]
    if fusion == "fused":
        return LayerOp(name, build(RMSNorm, rows=rows, hidden=h, dtype=dtype), kind="norm")  # type: ignore[arg-type]
    if fusion == "compiled":  # inductor: residual add + RMSNorm in one kernel (reads x, residual
        # and the weight row, writes the sum and the normalised output)
        b = BYTES_PER_ELEMENT[dtype]
        op = passes(
            f"{name} (add + RMSNorm, compiled)", rows * h, dtype, ("add+rmsnorm", 1, 4 * b, 6)
        )
        return LayerOp(name, op, kind="norm")
    b = BYTES_PER_ELEMENT[dtype]
    upcast = b != 4  # .to(float32) is a no-op for fp32 tensors
    # the bf16 -> fp32 copy and the two broadcasting multiplies run PyTorch's non-vectorised
    # kernels (an H100 profile: unrolled_elementwise_kernel, elementwise_kernel<128, 2 / 4>);
    # fp32 -> bf16 has its own vectorised kernel
    steps = [
        ("to fp32", 1, b + 4, 0, "cast", 4) if upcast else None,
        ("pow", 1, 8, 1),
        ("mean", 1, 4, 1),
        ("add eps", 1 / h, 8, 1),
        ("rsqrt", 1 / h, 8, 1),
        ("mul", 1, 8, 1, "broadcast", 4),
        ("to dtype", 1, 4 + b, 0) if upcast else None,
        ("mul weight", 1, 2 * b, 1, "broadcast", b),
    ]
    op = passes(f"{name} (eager RMSNorm)", rows * h, dtype, *[s for s in steps if s])
    return LayerOp(name, op, kind="norm")


def rope_tables(seq: int, head_dim: int, dtype: str) -> Passes:
    """HF ``LlamaModel.forward`` + ``LlamaRotaryEmbedding.forward`` per step: position ids
    (arange, + cache length, .float()), inv_freq @ positions, cat, cos, * scale, sin, * scale and
    two casts = 11 kernels over the (1, seq, head_dim) fp32 tables (positions are shared by the
    batch). The inv_freq expand/.to(float) is a view (no kernel)."""
    b = BYTES_PER_ELEMENT[dtype]
    per = 1 / head_dim  # one position per head_dim table entries
    return passes(
        "rope cos/sin tables (eager)", seq * head_dim, "fp32",
        ("position ids: arange", per, 8, 0), ("position ids: + cache length", per, 16, 1),
        ("position ids: to fp32", per, 12, 0), ("inv_freq @ positions", 0.5, 4, 2),
        ("cat", 1, 8, 0), ("cos", 1, 8, 4), ("scale cos", 1, 8, 1), ("sin", 1, 8, 4),
        ("scale sin", 1, 8, 1), ("cos to dtype", 1, 4 + b, 0), ("sin to dtype", 1, 4 + b, 0),
    )  # fmt: skip


def sdpa_mask(batch: int, seq: int, kv_len: int) -> Passes:
    """HF ``sdpa_mask`` (masking_utils, no padding): arange over batch, head, queries (+ offset)
    and keys (+ offset), then ``kv <= q`` -> a (1, 1, seq, kv_len) bool mask expanded (a view)
    to the batch = 7 small kernels per step."""
    n = at_least(seq * kv_len, 1)
    return passes(
        "attention mask (eager sdpa_mask)", n, "fp32",
        ("arange batch", batch / n, 8, 0), ("arange head", 1 / n, 8, 0),
        ("arange q", seq / n, 8, 0), ("q + offset", seq / n, 16, 1),
        ("arange kv", kv_len / n, 8, 0), ("kv + offset", kv_len / n, 16, 1),
        ("kv <= q", 1, 1 + 8 * (seq + kv_len) / n, 1),
    )  # fmt: skip


def _rope(name: str, elements: int, dtype: str, act_dtype: str | None = None) -> Op:
    """HF ``apply_rotary_pos_emb`` on one tensor: x*cos + rotate_half(x)*sin = 5 kernels. x is
    the transposed (batch, heads, seq, head_dim) view of the projection and cos/sin broadcast
    over heads, so every kernel runs PyTorch's non-vectorised path: the cat of
    ``rotate_half`` joins two non-contiguous halves (``CatArrayBatchedCopy``). ``act_dtype`` fp32
    (``torch.autocast`` around an fp32 model): cos/sin are fp32 (``LlamaRotaryEmbedding``
    casts them to the fp32 hidden states' dtype), so x*cos and rotate_half(x)*sin promote the
    bf16 projection to fp32 and the sum is fp32 (type promotion; mul/add are not autocast ops)."""
    b = BYTES_PER_ELEMENT[dtype]
    if act_dtype is not None and act_dtype != dtype:
        a = BYTES_PER_ELEMENT[act_dtype]
        return passes(
            name, elements, act_dtype,
            ("mul cos", 1, b + a, 1, "broadcast", a), ("neg", 0.5, 2 * b, 1, "broadcast", b),
            ("cat", 1, 2 * b, 0, "cat", b), ("mul sin", 1, b + a, 1, "broadcast", a),
            ("add", 1, 3 * a, 1, "broadcast", a),
        )  # fmt: skip
    return passes(
        name, elements, dtype,
        ("mul cos", 1, 2 * b, 1, "broadcast", b), ("neg", 0.5, 2 * b, 1, "broadcast", b),
        ("cat", 1, 2 * b, 0, "cat", b), ("mul sin", 1, 2 * b, 1, "broadcast", b),
        ("add", 1, 3 * b, 1, "broadcast", b),
    )  # fmt: skip


def decoder_layer(
    model: ModelSpec,
    batch: int,
    seq: int,
    context: int | None = None,
    *,
    dtype: str = "bf16",
    tp: int = 1,
    attention: AttentionImpl = "flash",
    fusion: Fusion = "fused",
    kv_cache: KVCache = "static",
    gqa: GQA = "native",
    act_dtype: str | None = None,
    attention_dropout: bool = False,
    experts: Experts = "grouped_mm",
) -> list[LayerOp]:
    """The ops of one decoder layer on one GPU, in execution order. ``gqa="repeat"``: K/V are
    expanded to every query head before attention (HF ``repeat_kv`` when SDPA gets a mask).
    ``attention_dropout``: SDPA draws a dropout mask (training a model that has one).
    ``act_dtype``: the dtype of the residual stream, the norms, the rotary embedding and
    GPT-2's GELU when it differs from the matmuls' ``dtype`` (``torch.autocast(bf16)`` around
    an fp32 model: ``"fp32"``; see ``residual_add``)."""
    context = seq if context is None else context
    if not is_array(context) and context < seq:  # the sweeps check their arrays themselves
        raise UnsupportedError(f"context ({context}) must be >= seq ({seq})")
    s = tp_shape(model, tp)
    h, d, b = model.hidden, model.head_dim, BYTES_PER_ELEMENT[dtype]
    tokens = batch * seq
    kv_len = model.attended(context)
    if fusion == "unfused" and gqa == "repeat" and model.sliding_window and uniform(seq > 1):
        # an eager HF prompt passes SDPA all of its keys with a banded mask (hf_window_gqa):
        # the masked kernel computes every key block, however long the prompt
        kv_len = context
    dt = dtype
    at = act_dtype or dt
    ops: list[LayerOp] = [_norm(model, "input_norm", tokens, at, fusion)]

    # QKV projections (column-parallel); GQA shrinks K and V to kv_heads * head_dim
    q_n, kv_n = s.heads * d, s.kv_heads * d
    # GPT-2 (HF Conv1D c_attn) and Phi-3 (qkv_proj) project q, k and v with one GEMM in every
    # runtime; "compiled" keeps Llama's three GEMMs
    if fusion == "fused" or model.ffn_kind == "gelu_mlp" or model.hf_modules == "phi3":
        ops.append(
            LayerOp("qkv_proj", build(Gemm, m=tokens, n=q_n + 2 * kv_n, k=h, dtype=dt), kind="gemm")
        )  # type: ignore[arg-type]
    else:
        ops.append(LayerOp("q_proj", build(Gemm, m=tokens, n=q_n, k=h, dtype=dt), kind="gemm"))  # type: ignore[arg-type]
        ops.append(LayerOp("k_proj", build(Gemm, m=tokens, n=kv_n, k=h, dtype=dt), kind="gemm"))  # type: ignore[arg-type]
        ops.append(LayerOp("v_proj", build(Gemm, m=tokens, n=kv_n, k=h, dtype=dt), kind="gemm"))  # type: ignore[arg-type]

    # Qwen3: the model's norm over each head's q and k, before RoPE; inductor fuses it into its
    # RoPE and cache-write kernels (an H200 trace of Qwen3-8B's widths: Llama's 10 generated
    # kernels a layer, one of them a persistent reduction; static-compiled-qwen3-h200/)
    if model.qk_norm and fusion != "compiled":
        ops.append(_norm(model, "q_norm", tokens * s.heads, at, fusion, width=d))
        ops.append(_norm(model, "k_norm", tokens * s.kv_heads, at, fusion, width=d))

    if model.position == "rope":
        if fusion in ("fused", "compiled"):
            op = passes("rope", tokens * (q_n + kv_n), dt, ("rotate q and k", 1, 2 * b, 6))
            ops.append(LayerOp("rope", op))
        else:
            ops.append(LayerOp("rope_q", _rope("rope q (eager)", tokens * q_n, dt, at)))
            ops.append(LayerOp("rope_k", _rope("rope k (eager)", tokens * kv_n, dt, at)))
            if model.hf_modules == "phi3":
                # Phi-3's apply_rotary_pos_emb: torch.cat([rotated, pass-through], -1) of q and
                # of k, the pass-through part empty at full rotary: a copy of the rotated
                # (strided) tensor
                ops.append(LayerOp("rope_q_cat", _view_cat(tokens * q_n, at)))
                ops.append(LayerOp("rope_k_cat", _view_cat(tokens * kv_n, at)))

    if kv_cache == "static":
        new_rows = tokens * kv_n
        if fusion == "fused":
            op = passes("kv cache write", 2 * new_rows, dt, ("write k and v", 1, 2 * b, 0))
            ops.append(LayerOp("kv_cache_write", op, kind="cache"))
        elif fusion == "compiled":
            # StaticLayer.update: one generated kernel for the write positions, then the
            # index_copy_ of K and of V (3 per layer in the H200 trace,
            # validation/kernel_lists/static-compiled-h200/)
            op = passes("kv cache write (index_copy_)", new_rows, dt,
                        ("write positions", seq / new_rows, 8, 1),
                        ("index_copy k", 1, 2 * b, 0), ("index_copy v", 1, 2 * b, 0))  # fmt: skip
            ops.append(LayerOp("kv_cache_write", op, kind="cache"))
        else:
            # HF StaticLayer.update: write positions = arange(seq) + length, length += seq (a
            # device tensor), then index_copy_ of K and V into the preallocated cache
            per = 1 / new_rows
            op = passes("kv cache write", new_rows, dt, ("positions: arange", seq * per, 8, 0),
                        ("positions: + length", seq * per, 16, 1), ("length += seq", per, 16, 1),
                        ("index_copy k", 1, 2 * b, 0), ("index_copy v", 1, 2 * b, 0))  # fmt: skip
            ops.append(LayerOp("kv_cache_write", op, kind="cache"))
    elif kv_cache == "concat" and (
        uniform(context == seq) or (uniform(seq == 1) and hf_window_reached(model, seq, context))
    ):
        # torch.cat on PyTorch's non-vectorised CatArrayBatchedCopy: HF's sliding cache keeps a
        # slice view of its last window - 1 tokens, which each decode step's cat reads (0.62
        # TB/s against 3.5 for a contiguous cat of the same Mistral-7B cache on an H200,
        # validation/results/h200-sxm/sdpa-mask-2026-11-29/cat-slice.txt); a prompt's first
        # update joins an empty tensor and the new K (V): the same generic kernel (H200 traces:
        # 130-160 G elements/s for Llama-3-8B, Mistral-7B and Phi-3 prompts)
        cache = batch * kv_len * kv_n
        ops.append(LayerOp("kv_cache_concat", _view_cat(cache, dt), count=2, kind="cache"))
    elif kv_cache == "concat" and model.hf_modules == "phi3":
        # Phi-3's new V is a slice of the fused qkv_proj output (batch stride q + 2 kv, not
        # kv): its cat runs the generic kernel; K, RoPE's cat output, is contiguous (an H200
        # trace at 64 x 1024: one vectorised and one generic cat per layer, 1.21 ms)
        cache = batch * kv_len * kv_n
        op = passes("kv cache concat", cache, dt, ("cat k", 1, 2 * b, 0))
        ops.append(LayerOp("kv_cache_concat", op, kind="cache"))
        ops.append(LayerOp("kv_cache_concat_v", _view_cat(cache, dt), kind="cache"))
    elif kv_cache == "concat":
        cache = batch * kv_len * kv_n  # elements of K (or V) after the append
        op = passes("kv cache concat", cache, dt, ("cat k", 1, 2 * b, 0), ("cat v", 1, 2 * b, 0))
        ops.append(LayerOp("kv_cache_concat", op, kind="cache"))

    kv_heads = s.kv_heads
    if gqa == "repeat" and s.kv_heads < s.heads:
        # repeat_kv: expand + reshape copies K and V to every query head (reads kv_heads,
        # writes heads); SDPA then reads the copies
        cache = batch * kv_len * q_n  # elements of the expanded K (or V)
        if fusion == "compiled":
            # Inductor emits one contiguous pointwise kernel per tensor that streams at memory
            # speed, not eager PyTorch's issue-bound strided copy: on an H200 the two copies of
            # a layer (batch 8, 2112 positions) moved 346 MB in 89 us, 3.9 TB/s (trace,
            # validation/kernel_lists/static-compiled-h200/), at a share of the elementwise rate
            moved = b + b * kv_n / q_n  # writes one element, reads 1/repeat of one
            op = passes("repeat_kv (compiled)", cache, dt, ("expand k", 1, moved, 0),
                        ("expand v", 1, moved, 0),
                        bandwidth_fraction=INDUCTOR_EXPAND_BANDWIDTH_FRACTION)  # fmt: skip
        else:  # PyTorch's strided copy kernel (the expand_copy family)
            op = build(ExpandCopy, n=cache, repeat=q_n // kv_n, tensors=2, dtype=dt)  # type: ignore[arg-type]
        ops.append(LayerOp("repeat_kv", op, kind="cache"))
        kv_heads = s.heads
    if gqa == "repeat":
        # SDPA turns the bool mask into an additive bias (one kernel over batch x seq x kv_len)
        op = passes("mask to additive bias", batch * seq * kv_len, dt, ("where", 1, 1 + b, 0))
        ops.append(LayerOp("attention_bias", op))

    # seq > kv_len only with a sliding window shorter than the prompt: each query then sees
    # about kv_len keys (the triangle at the start is ignored). With an explicit mask the
    # kernel computes every key block (the mask is data, not a causal flag).
    causal = gqa == "native" and uniform(1 < seq) and uniform(seq <= kv_len)
    attention = sdpa_impl(masked_kernel(attention, gqa, fusion), dt)
    attn = build(Attention,
        batch=batch, heads=s.heads, seq=seq, head_dim=d, dtype=dt, causal=causal,  # type: ignore[arg-type]
        impl=attention, kv_heads=kv_heads, kv_seq=kv_len, dropout=attention_dropout,
        mask=gqa == "repeat",
    )  # fmt: skip
    # after repeat_kv the kernel reads K/V copies just written: L2 holds the dirty tail of the
    # V copy, which it evicts unread (blocks go head by head) and so writes back to DRAM. On an
    # H200 cuDNN's decode kernel ran 6.6-9.3 us longer in a compiled graph than alone after a
    # clean L2, as long as alone after a 512 MB write (validation/results/h200-sxm/
    # graph-attention-2026-11-30); priced as validate's dirty-L2 write-back fraction of L2
    after = gqa == "repeat" and s.kv_heads < s.heads
    if sdpa_math(dt, gqa, kv_heads, s.heads):
        ops += _sdpa_math_ops(batch, s.heads, kv_heads, seq, kv_len, d, dt, causal)
    else:
        ops.append(LayerOp("attention", attn, kind="attention", after_writer=after))
    if fusion == "unfused" and attention == "naive" and uniform(seq > 1):
        # a naive (matmul/softmax/matmul) output is (batch, heads, seq, d): HF's
        # transpose(1, 2).contiguous() copies it; fused SDPA kernels write (batch, seq, heads, d)
        op = build(Elementwise, op="copy", n=tokens * q_n, dtype=dt)  # type: ignore[arg-type]
        ops.append(LayerOp("attn_transpose", op))
    ops.append(LayerOp("o_proj", build(Gemm, m=tokens, n=h, k=q_n, dtype=dt), kind="gemm"))  # type: ignore[arg-type]
    if tp > 1:
        ops.append(LayerOp("tp_all_reduce_attn", placed(AllReduce, tokens * h * b, tp, dt),
                           kind="comm"))  # fmt: skip
    if fusion != "compiled":  # compiled: folded into the norm after it
        ops.append(residual_add("residual_add_attn", tokens * h, dt, at))
    ops.append(_norm(model, "post_attn_norm", tokens, at, fusion))
    ops += _mlp(model, tokens, s.ffn, dt, fusion, at, experts)
    if tp > 1:
        ops.append(LayerOp("tp_all_reduce_mlp", placed(AllReduce, tokens * h * b, tp, dt),
                           kind="comm"))  # fmt: skip
    if fusion != "compiled":  # compiled: folded into the next layer's (or the final) norm
        ops.append(residual_add("residual_add_mlp", tokens * h, dt, at))
    return ops


def ran_attention(layer: list[LayerOp]) -> str:
    """The attention kernel a layer's ops run: its ``Attention`` op's impl, else SDPA's math
    path (``_sdpa_math_ops``, priced as separate kernels)."""
    return next((e.op.impl for e in layer if isinstance(e.op, Attention)), "math")


def sdpa_math(dtype: str, gqa: str, kv_heads: int, heads: int) -> bool:
    """Whether SDPA runs its math path (aten ``_scaled_dot_product_attention_math``): fp64, or
    fp32/tf32 with grouped K/V heads passed as such (``enable_gqa``, HF's ``gqa="native"``),
    which the memory-efficient kernel refuses ("No available kernel" on an H200; fp32 HF steps of
    a GQA model ran cuBLAS SGEMMs and softmax kernels, validation/results/h200-sxm/
    sdpa-gqa-fp32-2026-11-30)."""
    if dtype == "fp64":
        return True
    wide = dtype not in IMPL_DTYPES["flash"]
    return wide and gqa == "native" and kv_heads < heads


def _sdpa_math_ops(batch: Any, heads: int, kv_heads: int, seq: Any, kv_len: Any, d: int,
                   dt: str, causal: bool) -> list[LayerOp]:  # fmt: skip
    """SDPA's math path, kernel by kernel as the H200 traces show it: K and V repeated to every
    query head (``repeat_interleave``), q and K scaled by sqrt(scale), the scores by batched
    cuBLAS GEMMs, the causal mask built (ones, tril, to -inf) and added, ``_safe_softmax``
    (softmax, then rows that are all -inf zeroed: isneginf, all over the row, where), then P V.
    Autograd keeps q, K and V expanded and the probabilities (``memory``'s math term)."""
    ew = "fp32" if dt == "tf32" else dt  # the elementwise kernels' dtype (tf32: fp32 tensors)
    e = BYTES_PER_ELEMENT[ew]
    q_n, rows = heads * d, batch * heads * seq
    scores = rows * kv_len
    expand = build(ExpandCopy, n=batch * kv_len * q_n, repeat=heads // kv_heads, tensors=2,
                   dtype=ew)  # type: ignore[arg-type]  # fmt: skip
    scale = passes("sdpa math: scale q and k", batch * seq * q_n, ew, ("q * sqrt(scale)", 1, 2 * e, 1),
                   ("k * sqrt(scale)", kv_len / seq, 2 * e, 1))  # fmt: skip
    qk = build(Gemm, m=seq, n=kv_len, k=d, batch=batch * heads, dtype=dt)  # type: ignore[arg-type]
    steps = [("add the mask", 1, 2 * e, 1)] if causal else []
    steps += [("isneginf", 1, e + 1, 1), ("all over the row", 1, 1, 1)]
    safe = passes("sdpa math: mask, -inf rows", scores, ew, *steps)
    soft = build(Softmax, rows=rows, cols=kv_len, dtype=ew)  # type: ignore[arg-type]
    where = passes("sdpa math: zero the -inf rows", scores, ew, ("where", 1, 2 * e + 1, 1))
    pv = build(Gemm, m=seq, n=d, k=kv_len, batch=batch * heads, dtype=dt)  # type: ignore[arg-type]
    # backward: the expansion's a sum over each group, the scales' and the where's one pass
    # each, the mask and the -inf test none; the products and the softmax by the general rules
    ops = [LayerOp("sdpa_math_expand_kv", expand, kind="attention", backward_factor=1.0),
           LayerOp("sdpa_math_scale", scale, kind="attention", backward_factor=1.0),
           LayerOp("sdpa_math_qk", qk, kind="attention")]  # fmt: skip
    if causal:
        mask = passes("sdpa math: causal mask", at_least(seq * kv_len, 1), ew,
                      ("ones", 1, 1, 0), ("tril", 1, 2, 0), ("to -inf", 1, 1 + e, 1))  # fmt: skip
        ops.append(LayerOp("sdpa_math_mask", mask, kind="attention", backward_factor=0.0))
    return [*ops, LayerOp("sdpa_math_safe", safe, kind="attention", backward_factor=0.0),
            LayerOp("sdpa_math_softmax", soft, kind="attention"),
            LayerOp("sdpa_math_where", where, kind="attention", backward_factor=1.0),
            LayerOp("sdpa_math_pv", pv, kind="attention")]  # fmt: skip


def _view_cat(n: Any, dtype: str) -> Op:
    """A ``torch.cat`` producing ``n`` elements on PyTorch's generic kernel whose input is a
    whole-row strided view (or sits beside an empty tensor): read and written once."""
    b = BYTES_PER_ELEMENT[dtype]
    return build(StridedElementwise, kind="view_cat", n=n, bytes_per_element=2 * b,
                 written_per_element=b, dtype=dtype)  # type: ignore[arg-type]  # fmt: skip


def residual_add(name: str, n: int, dtype: str, act_dtype: str) -> LayerOp:
    """The residual add. Under ``torch.autocast`` around an fp32 model the residual stream is
    fp32 (the embedding's weights are) and the branch is a linear's bf16 output: ``fp32 +
    bf16 -> fp32`` by type promotion, PyTorch's non-vectorised (dtype-casting) kernel, reading
    4 + 2 B and writing 4 B per element (an H100 trace of GPT-2 and TinyLlama amp steps:
    ``aten::add [float, BFloat16]`` -> ``unrolled_elementwise_kernel``)."""
    if act_dtype == dtype:
        return LayerOp(name, build(Elementwise, op="add", n=n, dtype=dtype))  # type: ignore[arg-type]
    a, b = BYTES_PER_ELEMENT[act_dtype], BYTES_PER_ELEMENT[dtype]
    return LayerOp(name, passes(f"{name} ({act_dtype} + {dtype})", n, act_dtype,
                                ("add", 1, 2 * a + b, 1, "cast", a)))  # fmt: skip


def _mlp(
    model: ModelSpec, tokens: int, ffn: int, dt: str, fusion: Fusion, act_dtype: str | None = None,
    experts: Experts = "grouped_mm",
) -> list[LayerOp]:  # fmt: skip
    h, b = model.hidden, BYTES_PER_ELEMENT[dt]
    if model.moe is None:
        return _dense_mlp(model, tokens, ffn, dt, fusion, count=1, act_dtype=act_dtype)
    e, k = model.moe.experts, model.moe.top_k
    ops = [LayerOp("router", build(Gemm, m=tokens, n=e, k=h, dtype=dt), kind="gemm")]  # type: ignore[arg-type]
    if fusion == "fused":
        ops.append(LayerOp("routing", passes("top-k routing", tokens * e, dt,
                                             ("softmax+topk", 1, 2 * b, 6))))  # fmt: skip
    elif fusion == "unfused":
        # HF 5's top-k router: logits.float(), softmax, topk (a select and a sort kernel),
        # sum and divide of the top-k weights, which stay fp32 (Mixtral; H200 traces) or are
        # cast to the model's dtype (Qwen3-MoE: one kernel more)
        cast = [("to dtype", k / e, 4 + b, 0)] if model.moe.routing_weights == "model" else []
        ops.append(LayerOp("routing", passes(
            "top-k routing (eager)", tokens * e, dt, ("logits to fp32", 1, b + 4, 0),
            ("softmax", 1, 8, 5), ("topk", 1, 4, 2), ("topk sort", k / e, 12, 2),
            ("sum", k / e, 4, 1), ("div", k / e, 8, 1), *cast,
        )))  # fmt: skip
        if experts == "grouped_mm":
            # torch._grouped_mm is not an autocast op: under autocast around an fp32 model HF
            # casts the experts' input to the weights' dtype, and the products run in fp32
            return ops + _grouped_experts(model, tokens, ffn, act_dtype or dt)
    elif experts == "grouped_mm":  # compiled: Inductor fuses the pointwise work around them
        ops.append(LayerOp("routing", passes(
            "top-k routing (compiled)", tokens * e, dt, ("softmax fp32", 1, b + 4, 5),
            ("topk", 1, 4, 2), ("topk sort", k / e, 12, 2),
        )))  # fmt: skip
        return ops + _compiled_grouped_experts(model, tokens, ffn, dt)
    else:
        ops.append(LayerOp("routing", passes(
            "top-k routing (eager)", tokens * e, dt, ("softmax fp32", 1, b + 4, 5),
            ("topk", 1, 4, 2), ("sum", k / e, 4, 1), ("div", k / e, 8, 1), ("to dtype", k / e, 4 + b, 0),
        )))  # fmt: skip
    active = active_experts(tokens, e, k)
    rows = math.ceil(tokens * k / active)
    ops += _dense_mlp(model, rows, ffn, dt, fusion, count=active, prefix="expert_")
    # gather tokens to their experts and scatter-add the weighted outputs back
    if fusion == "fused":
        op = passes("moe permute", tokens * k * h, dt, ("permute", 1, 2 * b, 0),
                    ("unpermute+combine", 1, 3 * b, 2))  # fmt: skip
        ops.append(LayerOp("moe_permute", op))
    else:
        op = passes("expert gather/scatter (eager)", rows * h, dt, ("index", 1, 2 * b, 0),
                    ("mul routing weight", 1, 2 * b, 1), ("index_add", 1, 3 * b, 1))  # fmt: skip
        ops.append(LayerOp("expert_gather_scatter", op, count=active))
    return ops


# Host-device syncs per active expert of HF's experts loop (transformers 5.17
# ``MixtralExperts.forward`` with ``experts_implementation="eager"``): ``expert_idx ==
# num_experts`` (one ``.item()``), ``torch.where`` on the expert's mask (a ``nonzero``), and
# three ``.item()`` to index the mask and the two stacked weights with a 0-d tensor; plus one
# ``nonzero`` per layer for the experts hit. H200 traces of Mixtral-8x7B decode: 1,167 syncs a
# step at batch 8 (231 expert iterations over 32 layers) against 32 + 5 x 231 = 1,187 counted.
LOOP_SYNCS_PER_EXPERT = 5


def expert_loop_syncs(model: ModelSpec, tokens: int, fusion: Fusion, experts: Experts) -> int:
    """Host-device syncs per step of HF's Python loop over experts (0 for other runtimes and
    dense models): the host waits for the GPU at each, so their times add instead of overlap."""
    if model.moe is None or fusion != "unfused" or experts != "loop":
        return 0
    active = active_experts(tokens, model.moe.experts, model.moe.top_k)
    return model.layers * (1 + LOOP_SYNCS_PER_EXPERT * active)


def _experts_block(
    model: ModelSpec, tokens: int, ffn: int, dt: str, dispatch: Op, gate: Op, combine: Op
) -> list[LayerOp]:
    """HF's grouped experts in order: ``dispatch``, the gate_up grouped product, ``gate``
    (SiLU(gate) * up), the down grouped product, ``combine`` (eager or compiled passes)."""
    moe = model.moe
    assert moe is not None

    def grouped(name: str, n: int, k: int) -> LayerOp:
        op = build(GroupedGemm, tokens=tokens, experts=moe.experts, top_k=moe.top_k, n=n, k=k,
                   dtype=dt)  # type: ignore[arg-type]  # fmt: skip
        return LayerOp(name, op, kind="gemm")

    h = model.hidden
    return [LayerOp("experts_dispatch", dispatch), grouped("expert_gate_up_proj", 2 * ffn, h),
            LayerOp("experts_silu_and_mul", gate), grouped("expert_down_proj", h, ffn),
            LayerOp("experts_combine", combine)]  # fmt: skip


def _grouped_experts(model: ModelSpec, tokens: int, ffn: int, dt: str) -> list[LayerOp]:
    """HF transformers 5's ``grouped_mm_experts_forward`` (its default on CUDA), kernel by
    kernel as H200 traces of Mixtral-8x7B and Qwen3-30B-A3B decode show it (32 per layer):
    sort the ``tokens * top_k`` slots by expert, gather their rows, count rows per expert
    (histc, cumsum), zero the out-of-range rows (masked_fill), one grouped GEMM per projection,
    SiLU(gate) * up on the output's two halves, the routing weights applied (in their dtype:
    ``MoESpec.routing_weights``), the rows put back in token order and summed over top_k, cast
    back where the weights were fp32."""
    assert model.moe is not None
    e, k, h, b = model.moe.experts, model.moe.top_k, model.hidden, BYTES_PER_ELEMENT[dt]
    slots = tokens * k

    per_slot = 1 / h  # a pass over one value per slot, on a tensor of slots x hidden
    dispatch = passes(
        "experts: sort + dispatch (eager)", slots * h, dt, ("sort: copy keys", per_slot, 16, 0),
        ("sort: arange", per_slot, 8, 0), ("sort: copy", per_slot, 16, 0),
        ("sort", per_slot, 32, 4), ("slot // top_k", per_slot, 16, 1),
        ("gather rows (index)", 1, 2 * b, 0), ("index weights", per_slot, 12, 0),
        ("ids to int32", per_slot, 12, 0), ("histc: fill", e / (slots * h), 4, 0),
        ("histc", per_slot, 4, 1), ("cumsum: init", e / (slots * h), 4, 0),
        ("cumsum", e / (slots * h), 8, 1), ("ge (sentinel mask)", per_slot, 9, 1),
        ("clamp", per_slot, 16, 1), ("masked_fill rows", 1, 2 * b, 0, "broadcast"),
    )  # fmt: skip
    # masked_fill with a per-row mask, SiLU and the product on the output's two halves, the
    # per-row routing weight: PyTorch's non-vectorised (broadcast / strided) kernels, as an
    # H200 trace of a Mixtral prefill shows (elementwise_kernel<128, 4>: 67 of its 245 ms)
    gate = passes("experts: mask + silu * up (eager)", slots * ffn, dt,
                  ("copy (masked_fill)", 2, 2 * b, 0), ("masked_fill", 2, 2 * b, 0, "broadcast"),
                  ("silu (strided half)", 1, 2 * b, 4, "broadcast"),
                  ("mul", 1, 3 * b, 1, "broadcast"))  # fmt: skip
    # the weighted rows are fp32 where the routing weights are (Mixtral), cast back at the end
    w = 4 if model.moe.routing_weights == "fp32" else b
    cast = [("to dtype", 1 / k, w + b, 0)] if w != b else []
    combine = passes(
        "experts: mask + combine (eager)", slots * h, dt, ("copy (masked_fill)", 1, 2 * b, 0),
        ("masked_fill", 1, 2 * b, 0, "broadcast"),
        ("mul routing weight", 1, b + w, 1, "broadcast", w),
        ("arange", per_slot, 8, 0), ("index_put inverse order", per_slot, 24, 0),
        ("gather rows (index)", 1, 2 * w, 0), ("sum over top_k", 1, w + w / k, 1), *cast,
    )  # fmt: skip
    return _experts_block(model, tokens, ffn, dt, dispatch, gate, combine)


def _compiled_grouped_experts(model: ModelSpec, tokens: int, ffn: int, dt: str) -> list[LayerOp]:
    """HF transformers 5's grouped experts under ``torch.compile`` (bf16: HF keeps
    ``torch._grouped_mm`` there), as an H200 trace of Qwen3-30B-A3B's compiled decode shows them
    (validation/results/steps-h200-moe-train-run2: 15 kernels an MoE layer with the router):
    Inductor's sort of the slots with the weights' normalisation and masks, the inverse order,
    PyTorch's histogram, a cumsum, the gather of the rows, the two grouped products, SiLU(gate)
    * up, and the routing weight, reorder and sum over top_k, each one generated kernel."""
    assert model.moe is not None
    e, k, h, b = model.moe.experts, model.moe.top_k, model.hidden, BYTES_PER_ELEMENT[dt]
    slots = tokens * k
    per_slot = 1 / h

    dispatch = passes(
        "experts: sort + dispatch (compiled)", slots * h, dt,
        ("sort + normalise + mask", per_slot, 32, 4), ("inverse order", per_slot, 24, 0),
        ("histc", per_slot, 4, 1), ("cumsum", e / (slots * h), 8, 1),
        ("gather rows", 1, 2 * b, 0),
    )  # fmt: skip
    gate = passes(
        "experts: silu * up (compiled)", slots * ffn, dt, ("silu(gate) * up", 1, 3 * b, 5)
    )
    combine = passes("experts: weight + combine (compiled)", tokens * h, dt,
                     ("weight, reorder, sum over top_k", 1, (k + 1) * b, 2 * k))  # fmt: skip
    return _experts_block(model, tokens, ffn, dt, dispatch, gate, combine)


def _dense_mlp(
    model: ModelSpec, rows: int, ffn: int, dt: str, fusion: Fusion, count: int, prefix: str = "",
    act_dtype: str | None = None,
) -> list[LayerOp]:  # fmt: skip
    h, b = model.hidden, BYTES_PER_ELEMENT[dt]

    def gemm(name: str, n: int, k: int) -> LayerOp:
        return LayerOp(
            prefix + name, build(Gemm, m=rows, n=n, k=k, dtype=dt), count=count, kind="gemm"
        )  # type: ignore[arg-type]

    def ew(name: str, op: str) -> LayerOp:
        return LayerOp(
            prefix + name, build(Elementwise, op=op, n=rows * ffn, dtype=dt), count=count
        )  # type: ignore[arg-type]

    if model.ffn_kind == "gelu_mlp" and fusion == "unfused":
        # HF NewGELUActivation (GPT-2's "gelu_new"), in Python: 0.5 * x * (1 + tanh(sqrt(2/pi)
        # * (x + 0.044715 * x^3))) = 8 eager kernels, each reading and writing the activation
        # (a torch.profiler trace counts them: validation/kernel_lists/hf-train-cpu-trace.json)
        act = passes("gelu_new (eager)", rows * ffn, dt, ("pow 3", 1, 2 * b, 2),
                     ("* 0.044715", 1, 2 * b, 1), ("x +", 1, 3 * b, 1),
                     ("* sqrt(2/pi)", 1, 2 * b, 1), ("tanh", 1, 2 * b, 4), ("1 +", 1, 2 * b, 1),
                     ("0.5 * x", 1, 2 * b, 1), ("mul", 1, 3 * b, 1))  # fmt: skip
        if act_dtype is not None and act_dtype != dt:
            # under autocast pow is an fp32 op (autocast's fp32 list): x^3 is fp32 and every
            # op after it promotes to fp32 but 0.5 * x (bf16); bf16 x fp32 runs the casting
            # kernel (H100 trace of a GPT-2 amp step: pow, mul, add, tanh on float)
            a = BYTES_PER_ELEMENT[act_dtype]
            act = passes("gelu_new (eager, autocast)", rows * ffn, act_dtype,
                         ("pow 3", 1, b + a, 2, "cast", a), ("* 0.044715", 1, 2 * a, 1),
                         ("x +", 1, b + 2 * a, 1, "cast", a), ("* sqrt(2/pi)", 1, 2 * a, 1),
                         ("tanh", 1, 2 * a, 4), ("1 +", 1, 2 * a, 1), ("0.5 * x", 1, 2 * b, 1),
                         ("mul", 1, b + 2 * a, 1, "cast", a))  # fmt: skip
        return [gemm("up_proj", ffn, h), LayerOp(prefix + "gelu", act, count=count),
                gemm("down_proj", h, ffn)]  # fmt: skip
    if model.ffn_kind == "gelu_mlp":
        return [gemm("up_proj", ffn, h), ew("gelu", "gelu"), gemm("down_proj", h, ffn)]
    phi3 = model.hf_modules == "phi3"
    if fusion == "compiled":  # HF's gate and up GEMMs (Phi-3: one), SiLU*mul one generated kernel
        act = passes("silu_and_mul", rows * ffn, dt, ("silu(gate) * up", 1, 3 * b, 5))
        up = [gemm("gate_up_proj", 2 * ffn, h)] if phi3 else [gemm("gate_proj", ffn, h),
                                                             gemm("up_proj", ffn, h)]  # fmt: skip
        return [*up, LayerOp(prefix + "silu_and_mul", act, count=count), gemm("down_proj", h, ffn)]
    if fusion == "unfused" and phi3:
        # Phi3MLP: gate_up_proj, then silu(gate) and up * silu(gate) on the output's two halves,
        # strided views (PyTorch's non-vectorised kernels)
        def strided(name: str, moved: int) -> LayerOp:
            op = build(StridedElementwise, kind="broadcast", n=rows * ffn,
                       bytes_per_element=moved * b, written_per_element=b, dtype=dt)  # type: ignore[arg-type]  # fmt: skip
            return LayerOp(prefix + name, op, count=count)

        return [gemm("gate_up_proj", 2 * ffn, h), strided("silu", 2), strided("mul", 3),
                gemm("down_proj", h, ffn)]  # fmt: skip
    if fusion == "fused":
        act = passes("silu_and_mul", rows * ffn, dt, ("silu(gate) * up", 1, 3 * b, 5))
        return [
            gemm("gate_up_proj", 2 * ffn, h),
            LayerOp(prefix + "silu_and_mul", act, count=count),
            gemm("down_proj", h, ffn),
        ]
    return [
        gemm("gate_proj", ffn, h),
        ew("silu", "silu"),
        gemm("up_proj", ffn, h),
        ew("mul", "mul"),
        gemm("down_proj", h, ffn),
    ]


def _lm_head(model: ModelSpec, batch: int, tokens: int, vocab: int, dt: str,
             logits: str) -> LayerOp:  # fmt: skip
    """The LM head. ``logits="last"``: one row per sequence, as HF's ``generate`` asks for
    (``logits_to_keep=1``) and serving engines compute: one GEMM of ``batch`` rows reading the
    weight once. After a prefill HF slices ``hidden_states[:, -1:, :]``, rows ``seq`` apart; the
    size-1 dimension folds without a copy, so cuBLAS takes the rows as one strided matrix: every
    committed eager prefill trace at batch 4 x 512 shows one GEMM of M = 4 a step (H200: nvjet
    256 x 8, 245-254 us; H100: 384 x 8, 376-380 us; validation/results/steps-h*/
    trace-llama3-8b-prefill-eager.json.gz), not one product per sequence. The weight is an
    ``nn.Linear``'s, [vocab, hidden]: ``transpose_b`` (cuBLAS's kernels for a misaligned
    vocabulary such as GPT-2's 50257 differ from those of A @ B)."""
    rows = batch if logits == "last" else tokens
    op = build(Gemm, m=rows, n=vocab, k=model.hidden, dtype=dt, transpose_b=True)  # type: ignore[arg-type]
    return LayerOp("lm_head", op, kind="gemm")


# Weight dtypes whose models quantize their GEMMs only: attention, the KV cache, the norms and
# the residual stream stay bf16, as vLLM and TensorRT-LLM run FP8/INT8 (W8A8) and FP4 checkpoints
# by default (vLLM's kv_cache_dtype "auto" is the activations' dtype)
GEMM_ONLY_DTYPES = ("fp8", "int8", "fp4")


def activation_dtype(dtype: str) -> str:
    """The dtype of everything but the GEMMs in a model of weight dtype ``dtype``."""
    return "bf16" if dtype in GEMM_ONLY_DTYPES else dtype


def step_attention(kernel: str, named: str | None, dtype: str) -> str:
    """The attention kernel a step of a ``dtype`` model runs: ``kernel`` (the runtime's, or
    ``named`` by the user), or what SDPA runs for that dtype instead (``sdpa_impl``: an fp32
    model's memory-efficient kernel) where the runtime chose; a named kernel that does not take
    the model's attention dtype is a one-line error."""
    adt = activation_dtype(dtype)
    if named is not None and adt not in IMPL_DTYPES[named]:
        raise SpecError(f"attention={named} takes {'/'.join(IMPL_DTYPES[named])} tensors, and a "
                        f"{dtype} model's attention runs in {adt}: leave attention unset (SDPA "
                        f"runs {sdpa_impl(named, adt)})")  # fmt: skip
    return sdpa_impl(kernel, adt)


def quantized(entry: LayerOp, dtype: str) -> LayerOp:
    """``entry`` with its GEMM (``kind="gemm"``) in ``dtype``; other ops unchanged."""
    if entry.kind != "gemm":
        return entry
    return replace(entry, op=build(type(entry.op), **{**dict(entry.op), "dtype": dtype}))


def masked_kernel(attention: AttentionImpl, gqa: GQA, fusion: Fusion) -> AttentionImpl:
    """The SDPA kernel an HF step (not a fused engine) runs when it passes a mask
    (``gqa="repeat"``): torch's flash kernel takes no ``attn_mask`` (``sdp_utils.cpp``,
    ``check_for_attn_mask``), so where flash would run, the memory-efficient kernel does;
    cuDNN's takes the mask (H100/H200/B200)."""
    if gqa == "repeat" and attention == "flash" and fusion != "fused":
        return "efficient"
    return attention


def hf_window_reached(model: ModelSpec, seq: Any, context: Any) -> bool:
    """Whether an eager HF step's keys reach the model's sliding window: HF's sliding cache
    (transformers' ``DynamicSlidingWindowLayer``) holds ``window - 1`` past tokens, so a decode
    step (one new token) attends ``context + 1`` keys, a prompt its ``context`` (``seq``)."""
    if not model.sliding_window:
        return False
    decode = context is not None and uniform(seq == 1)
    kv = (seq if context is None else context) + (1 if decode else 0)
    return uniform(kv >= model.sliding_window)


def hf_window_gqa(model: ModelSpec, fusion: Fusion, gqa: GQA, seq: Any, context: Any) -> GQA:
    """``gqa`` of an eager HF step (``fusion="unfused"``): once its keys reach a sliding window
    (``hf_window_reached``), HF builds an explicit mask (transformers'
    ``masking_utils._ignore_causal_mask_sdpa``: no ``is_causal`` shortcut when ``kv_length >=
    local_attention_size``), and with a mask its SDPA call repeats K/V (``use_gqa_in_sdpa``):
    ``"repeat"``, dense masked attention and the mask's kernels, from there on. Traced on an
    H200 (Mistral-7B decode at batch 8 x 4096: repeat_kv's copies and cuDNN's kernel with the
    mask, validation/results/steps-h200-arch-run2)."""
    if fusion != "unfused" or gqa != "native" or not hf_window_reached(model, seq, context):
        return gqa
    return "repeat"


def model_ops(
    model: ModelSpec,
    batch: int,
    seq: int,
    context: int | None = None,
    *,
    dtype: str = "bf16",
    tp: int = 1,
    attention: AttentionImpl = "flash",
    fusion: Fusion = "fused",
    kv_cache: KVCache = "static",
    logits: Literal["last", "all"] = "last",
    gqa: GQA = "native",
    act_dtype: str | None = None,
    attention_dropout: bool = False,
    experts: Experts = "grouped_mm",
) -> ModelOps:
    """All ops of one forward step on one GPU. ``logits="last"``: the LM head runs on the last
    token of each sequence only (generation; HF ``logits_to_keep=1``); ``"all"``: every token
    (training). ``act_dtype``: see ``decoder_layer`` (the embeddings and the final norm follow
    it too: an fp32 model's embedding rows are fp32)."""
    if dtype not in BYTES_PER_ELEMENT:
        raise UnsupportedError(f"unknown dtype '{dtype}'")
    # an 8- or 4-bit model's GEMMs run in its dtype; everything between them in bf16
    gemm_dtype, dtype = dtype, activation_dtype(dtype)
    given, gqa = gqa, hf_window_gqa(model, fusion, gqa, seq, context)
    s = tp_shape(model, tp)
    h, b, d = model.hidden, BYTES_PER_ELEMENT[dtype], model.head_dim
    tokens = batch * seq
    dt = dtype
    at = act_dtype or dt
    pre = [
        LayerOp("embedding", build(Embedding, tokens=tokens, hidden=h, dtype=at), kind="embedding")
    ]  # type: ignore[arg-type]
    if tp > 1:  # vocab-parallel embedding: each rank holds V/tp rows, partial sums all-reduced
        pre.append(LayerOp("tp_all_reduce_embedding",
                           placed(AllReduce, tokens * h * b, tp, dt), kind="comm"))  # fmt: skip
    if model.position == "learned":
        pre.append(LayerOp("position_embedding", build(Embedding, tokens=tokens, hidden=h, dtype=at),  # type: ignore[arg-type]
                           kind="embedding"))  # fmt: skip
        pre.append(LayerOp("add_positions", build(Elementwise, op="add", n=tokens * h, dtype=at)))  # type: ignore[arg-type]
    elif fusion == "unfused" and model.position == "rope":
        pre.append(LayerOp("rope_tables", rope_tables(seq, d, dt)))
    elif fusion == "compiled" and model.position == "rope":
        # inductor: inv_freq @ positions stays a (tiny) matmul, the rest one generated kernel
        tables = passes("rope cos/sin tables (compiled)", seq * d, "fp32",
                        ("inv_freq @ positions", 0.5, 4, 2), ("cat, cos, sin, scale, cast", 1, 8, 10))  # fmt: skip
        pre.append(LayerOp("rope_tables", tables))
    if gqa == "repeat":
        ctx = seq if context is None else context
        kv = model.attended(ctx)
        mask = (sdpa_mask(batch, seq, kv) if fusion != "compiled" else
                passes("attention mask (compiled)", at_least(seq * kv, 1), "fp32", ("kv <= q", 1, 1, 1)))  # fmt: skip
        pre.append(LayerOp("attention_mask", mask))
    layer = decoder_layer(
        model, batch, seq, context, dtype=dt, tp=tp, attention=attention, fusion=fusion,
        kv_cache=kv_cache, gqa=gqa, act_dtype=act_dtype, attention_dropout=attention_dropout,
        experts=experts,
    )  # fmt: skip
    lm_head = _lm_head(model, batch, tokens, s.vocab, dt, logits)
    if gemm_dtype != dt:
        layer = [quantized(e, gemm_dtype) for e in layer]
        lm_head = quantized(lm_head, gemm_dtype)
    post = [_norm(model, "final_norm", tokens, at, fusion), lm_head]
    notes = []
    if model.moe:
        active = active_experts(tokens, model.moe.experts, model.moe.top_k)
        notes.append(
            f"MoE: {tokens} tokens x top-{model.moe.top_k} spread uniformly -> {active} of "
            f"{model.moe.experts} experts active per layer"
        )
        slow = [e.op for e in layer if isinstance(e.op, GroupedGemm) and e.op.sync_per_call]
        if slow and fusion == "unfused":  # training states its own (``fallback_note``)
            notes.append(
                f"experts in {slow[0].dtype}: torch._grouped_mm has no {slow[0].dtype} grouped "
                f"kernel, so each grouped product runs one GEMM per active expert after a "
                f"host-device sync ({len(slow) * model.layers} a step; their waits are not "
                "priced here); bf16 weights keep the grouped kernel"
            )
    ctx = seq if context is None else context
    if model.sliding_window and (ctx > model.sliding_window if not is_array(ctx) else
                                 bool((ctx > model.sliding_window).any())):  # fmt: skip
        notes.append(f"sliding window: attention and KV cache capped at {model.sliding_window}")
    if gqa != given:
        kv = "repeat_kv'd K/V" if model.kv_heads < model.heads else "a mask"
        notes.append(f"keys at the {model.sliding_window}-token sliding window: HF passes an "
                     f"explicit mask, so SDPA gets {kv} and computes every key block")  # fmt: skip
    if gemm_dtype != dt:
        notes.append(f"{gemm_dtype} GEMMs; attention, the KV cache, norms and activations in {dt}")
    return ModelOps(pre=tuple(pre), layer=tuple(layer), layers=model.layers, post=tuple(post),
                    tokens=tokens, notes=tuple(notes), gqa=gqa,
                    attention=ran_attention(layer))  # fmt: skip
