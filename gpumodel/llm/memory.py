"""Memory per GPU for inference and training: weights, gradients, optimizer states, activations,
KV cache and framework overhead; whether it fits; the largest batch or context that fits.

Model states, mixed-precision Adam (Rajbhandari et al. 2020, "ZeRO", section 3.1): per
parameter 2 bytes of fp16/bf16 weights, 2 of gradients and K = 12 of optimizer state (fp32
master weights, momentum, variance) = 16 bytes. Partitioned over Nd data-parallel ranks:

    ZeRO-1 (optimizer):            2 + 2 + 12/Nd  = 4 + 12/Nd
    ZeRO-2 (+ gradients):          2 + (2 + 12)/Nd = 2 + 14/Nd
    ZeRO-3 (+ parameters):         (2 + 2 + 12)/Nd = 16/Nd

Activations stored for the backward pass, bytes per layer (Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", sections 4.1-4.2 and Table 2; s sequence,
b micro-batch, h hidden, a heads, t tensor-parallel size):

    no parallelism                       s*b*h*(34 + 5*a*s/h)
    tensor parallel                      s*b*h*(10 + 24/t + 5*a*s/(h*t))
    tensor + sequence parallel           s*b*h/t*(34 + 5*a*s/h)
    selective recompute                  drops the 5*a*s/h term (attention scores recomputed)
    full recompute                       2*s*b*h (only each layer's input; /t with sequence parallel)

The 5as^2b term is the softmax input/output and dropout mask of the s x s score matrix. With
FlashAttention (the default here) it disappears: the fused kernel never writes the score
matrix and keeps only O and the per-row softmax statistics (Dao et al. 2022, section 3.1),
so flash behaves like selective recompute. The 34 assumes a GPT layer (4h MLP, dropout); it is
used for every model as the paper's estimate. With 1F1B pipeline scheduling the first stage
holds the activations of p micro-batches of L/p layers, i.e. L layers' worth (Korthikanti
section 4.2.3). The cross-entropy keeps fp32 logits: 4*s*b*V/t bytes.

KV cache: ``2 * layers * kv_heads * head_dim * bytes * context * batch`` (K and V per layer).

One accounting per phase, used by ``infer``, ``memory``, ``fits``, ``plan serve``, ``plan train``
and the library alike (``phase``):

    prefill   weights + KV cache of batch x seq + the working buffers of one forward over
              batch x seq tokens (the prompt) + overhead                       (the prefill peak)
    decode    weights + KV cache of batch x context + the working buffers of one forward over
              batch tokens (one new token each) + overhead         (the decode steady state)
    train     weights + gradients + optimizer states + stored activations + overhead
              (the training peak; ``train=True``)

``memory(..., phase="decode", batch=B, seq=C)`` answers "do B sequences of C tokens of context
fit while generating", which is the question ``max_batch`` and ``plan serve`` ask too.
Framework overhead: CUDA context, cuBLAS/NCCL workspaces and allocator fragmentation, a flat
``DEFAULT_OVERHEAD_BYTES`` (assumption; a CUDA context alone is ~0.5 GB on Hopper).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict

from gpumodel._validators import MAX_ELEMENTS, MAX_GPUS, Checked, check_int
from gpumodel.errors import GpumodelError, InfeasibleError, SpecError
from gpumodel.llm.ddp import is_ddp
from gpumodel.llm.fsdp import MIXED_STATE_BYTES, is_fsdp, unsharded_elements
from gpumodel.llm.layers import (
    AttentionImpl,
    activation_dtype,
    in_flight_microbatches,
    sdpa_math,
    stage_layers,
    tp_shape,
)
from gpumodel.llm.models import ModelSpec, get_model
from gpumodel.specs import BYTES_PER_ELEMENT, GPUSpec, get_gpu
from gpumodel.units import format_gb, format_gb_apart, format_quantity

DEFAULT_OVERHEAD_BYTES = 1.5e9
ADAM_BYTES_PER_PARAM = 12.0  # fp32 master weights + momentum + variance (ZeRO section 3.1)
Recompute = Literal["none", "selective", "full"]
Phase = Literal["prefill", "decode", "train"]
Policy = Literal["amp", "bf16", "mixed", "fp32"]
ActivationModel = Literal["megatron", "hf-eager"]

# Training precision policies: bytes per parameter of (weights, gradients, optimizer states).
#   amp    fp32 weights and grads, AdamW moments fp32 (torch.autocast(bf16) around an fp32
#          model): 4 + 4 + 8; autocast also caches a bf16 copy of each matmul weight for the
#          forward, which autograd keeps for the backward (+2 per matmul parameter)
#   bf16   everything bf16 (model.to(bfloat16), AdamW states in the parameter dtype): 2 + 2 + 4
#   mixed  Megatron / ZeRO: bf16 weights and grads, fp32 master weights + moments: 2 + 2 + 12
#          (Rajbhandari et al. 2020, section 3.1); under FSDP2 its MixedPrecisionPolicy's
#          4 + 4 + 8 (fsdp.MIXED_STATE_BYTES, ``state_bytes``)
#   fp32   an fp32 model trained as it is built, no autocast (TF32 matmuls or not: the step's
#          ``dtype``, fp32 or tf32): 4 + 4 + 8, and every saved activation fp32
POLICY_STATE_BYTES: dict[str, tuple[float, float, float]] = {
    "amp": (4.0, 4.0, 8.0),
    "bf16": (2.0, 2.0, 4.0),
    "mixed": (2.0, 2.0, 12.0),
    "fp32": (4.0, 4.0, 8.0),
}


def check_policy_dtype(policy: str | None, dtype: str) -> None:
    """The policy and the matmuls' ``dtype`` agree (a one-line SpecError otherwise): ``fp32``
    trains an fp32 model (fp32 or tf32 matmuls); ``amp`` and ``mixed`` run 16-bit (or 8-bit)
    matmuls; ``bf16`` keeps everything in bf16, so its matmuls are not fp16 or wider."""
    wide = dtype in ("fp32", "tf32")
    if policy == "fp32" and not wide:
        raise SpecError(f"policy fp32 trains an fp32 model: dtype fp32 (PyTorch's default, "
                        f"TF32 matmuls off) or tf32 (allow_tf32 on), got {dtype}")  # fmt: skip
    if policy in ("amp", "mixed") and wide:
        raise SpecError(f"policy {policy} runs its matmuls in 16 bits (bf16 or fp16), got dtype "
                        f"{dtype}: an fp32 model trains under policy fp32")  # fmt: skip
    if policy == "bf16" and (wide or dtype == "fp16"):
        raise SpecError(f"policy bf16 keeps weights, gradients and activations in bf16: dtype "
                        f"bf16 (or an 8-bit GEMM dtype), got {dtype}")  # fmt: skip


def state_bytes(policy: Policy, fsdp: bool = False) -> tuple[float, float, float]:
    """Bytes per parameter of (weights, gradients, optimizer states) of a precision policy;
    ``fsdp``: the step runs under FSDP2 (``fsdp.is_fsdp``), whose ``mixed`` keeps fp32 shards."""
    return MIXED_STATE_BYTES if fsdp and policy == "mixed" else POLICY_STATE_BYTES[policy]


# HF's loss (ForCausalLMLoss): bf16 logits (2 B) kept by the output, upcast to fp32 (4 B),
# log_softmax's fp32 output saved for backward (4 B); at the start of the backward the fp32
# gradient of log_softmax (4 B) is alive beside them: 14 B per logit at the peak. An fp32 model's
# logits are fp32 already (the upcast is no copy): 12 B.
HF_LOSS_BYTES_PER_LOGIT = 14.0
HF_LOSS_BYTES_PER_FP32_LOGIT = 12.0
# Caching-allocator fragmentation: max_memory_reserved / max_memory_allocated. 1.0 (none) until
# measured on the training workloads (devs' validation/results/steps-*/); pass fragmentation=.
DEFAULT_FRAGMENTATION = 1.0


def hf_eager_activation_bytes_per_token(model: ModelSpec, policy: str, t: int = 1,
                                        math_seq: int | None = None) -> float:  # fmt: skip
    """Bytes one eager HF Llama/GPT decoder layer leaves saved for backward per token, counted
    from what each autograd node saves (PyTorch derivatives.yaml: mul saves the operand the
    other's gradient needs, pow saves its input, mm saves both inputs, SDPA saves q, k, v, the
    output and the fp32 log-sum-exp; casts and adds save nothing):

        RMSNorm x2   its fp32 input (the ``.float()`` copy; amp: the fp32 residual itself) and
                     the normalised output before the weight (bf16; amp: fp32); LayerNorm
                     (GPT-2) its input
        linears      their input: shared by q/k/v and by gate/up in bf16; under amp autocast
                     casts the input once per linear (3 + 2 bf16 copies)
        attention    q and k after RoPE, v, the output (bf16), log-sum-exp (fp32 per head);
                     Qwen3's q/k norms (``qk_norm``) save their fp32 input copy (pow), 4 B per
                     q and k element: RoPE then saves the norm's output where Llama's saves the
                     projection's (Qwen3-0.6B on an H200 measured +0.33 GiB per 1024-token
                     sequence in bf16 against the model without it: 4.0 B per element)
        SwiGLU       gate output (SiLU's input), SiLU output and up output (mul), mul output
                     (down's input): 4 x ffn bf16; GPT-2's Python gelu_new: 5 tensors
        experts      (MoE, HF 5's grouped experts) in place of SwiGLU: the router's fp32
                     softmax (4 B per expert), and per routed slot (``top_k`` a token) the
                     masked rows the first grouped product reads (h), its masked gate_up output,
                     whose halves SiLU and the product keep (2 x ffn), the SiLU output and the
                     product (ffn each), the masked down output the routing weight multiplies
                     (h): 2 x (2 h + 4 ffn) bytes in bf16; amp runs the experts in fp32
                     (``GroupedGemm``): twice that. H200 steps of a Qwen3-MoE (top-8) and a
                     Mixtral-layout model (top-2): peak allocated 14-23% over the dense term
                     (validation/results/steps-h200-moe-train-run1)
    ``fp32`` (an fp32 model, no autocast): every tensor above in fp32, no casts (RMSNorm's
    ``.float()`` of an fp32 tensor is itself), as amp's norms. ``math_seq``: attention on SDPA's
    math path over that many keys (``layers.sdpa_math``: fp32 with grouped K/V heads), which
    keeps the scaled q, K and V repeated to every head and the probabilities, one score per
    head and key (an H200 measured exactly that: 159.4 MB for 32 heads x 1024 x 1024 in fp32,
    validation/results/h200-sxm/sdpa-gqa-fp32-2026-11-30), and the output for o_proj.
    Dropout masks are not counted (assumes dropout 0 or eval-free configs).
    Tensor parallelism divides heads and ffn terms by ``t``."""
    h, f = model.hidden, model.ffn_hidden / t
    q_n = model.heads * model.head_dim / t
    kv_n = max(1, model.kv_heads // t) * model.head_dim
    amp = policy == "amp"
    wide = amp or policy == "fp32"  # the residual stream and the norms in fp32
    e = 4 if policy == "fp32" else 2  # the bytes of a saved bf16 (fp32 policy: fp32) tensor
    if model.norm == "layernorm":  # native layer_norm saves its input (amp: its fp32 cast)
        norms = 2 * (4 * h if wide else 2 * h)
    else:
        norms = 2 * (4 * h + (4 * h if wide else 2 * h))
    inputs = (3 + 2) * 2 * h if amp and model.ffn_kind != "gelu_mlp" else 0.0
    if amp and model.ffn_kind == "gelu_mlp":
        inputs = (1 + 1) * 2 * h  # fused c_attn and c_fc: one cast each
    if math_seq is None:
        attention = e * (q_n + 2 * kv_n) + e * q_n + 4 * model.heads / t
    else:
        attention = 4 * e * q_n + e * model.heads / t * math_seq
    if model.qk_norm:
        attention += 4 * (q_n + kv_n)
    if model.ffn_kind == "gelu_mlp":
        # HF "gelu_new" in Python: 0.5*x*(1 + tanh(c*(x + 0.044715*x^3))) saves x, tanh's
        # output, 0.5*x and 1 + tanh, then c_proj its input; amp runs pow in fp32 so tanh and
        # 1 + tanh are fp32 and c_proj's input is a bf16 cast
        mlp = (2 + 4 + 2 + 4 + 2) * f if amp else 5 * e * f
    else:
        mlp = 4 * e * f
    if model.moe is not None:
        experts, k = model.moe.experts, model.moe.top_k
        mlp = 4 * experts + k * (2 * h + 4 * f) * (4 if wide else 2)
    return norms + inputs + attention + mlp


def model_state_bytes(
    params: float,
    zero: int = 0,
    dp: int = 1,
    weight_bytes: float = 2.0,
    optimizer_bytes: float = ADAM_BYTES_PER_PARAM,
    grad_bytes: float | None = None,
) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per GPU for ``params`` parameters under ZeRO stage
    ``zero`` over ``dp`` ranks (Rajbhandari et al. 2020, Figure 1).

    >>> [round(sum(model_state_bytes(7.5e9, z, 64)) / 1e9, 1) for z in range(4)]
    [120.0, 31.4, 16.6, 1.9]
    """
    if zero not in (0, 1, 2, 3):
        raise SpecError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero}")
    if dp < 1:
        raise SpecError(f"dp must be >= 1, got {dp}")
    w = params * weight_bytes
    g = params * (weight_bytes if grad_bytes is None else grad_bytes)
    o = params * optimizer_bytes
    if zero >= 1:
        o /= dp
    if zero >= 2:
        g /= dp
    if zero >= 3:
        w /= dp
    return w, g, o


def activation_bytes_per_layer(
    s: int,
    b: int,
    h: int,
    a: int,
    t: int = 1,
    sequence_parallel: bool = False,
    recompute: Recompute = "none",
    flash: bool = True,
    element_bytes: float = 2.0,
) -> float:
    """Bytes of activations one layer stores for backward (Korthikanti et al. 2022, Table 2),
    its tensors ``element_bytes`` each. The paper's figures count 16-bit tensors and 1-byte
    dropout masks: of 34 sbh, 32 are tensors and 2 masks; of the score term 5as/h, 4 and 1; of
    the tensor-parallel 10 sbh, 8 and 2. An fp32 model's tensors (``element_bytes=4``) take
    twice the tensor bytes; its masks stay one byte."""
    sbh = float(s) * b * h
    k = element_bytes / 2.0  # the tensors' bytes over the paper's 16-bit ones
    if recompute == "full":
        return 2.0 * k * sbh / (t if sequence_parallel else 1)
    # 5as/h: the attention score matrices; gone with flash attention or selective recompute
    scores = 0.0 if (flash or recompute == "selective") else (4.0 * k + 1.0) * a * s / h
    if sequence_parallel or t == 1:
        return sbh / t * (32.0 * k + 2.0 + scores)
    return sbh * (8.0 * k + 2.0 + 24.0 * k / t + scores / t)


class MemoryBreakdown(Checked):
    """Bytes per GPU, by component, against the GPU's capacity."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    model: str
    gpu: str
    policy: Policy | None = None
    fragmentation: float = 1.0
    fragmentation_bytes: float = 0.0
    mode: Literal["inference", "training"]
    phase: Phase = "decode"
    batch: int
    seq: int
    dtype: str
    tp: int
    pp: int
    dp: int
    zero: int
    recompute: Recompute
    sequence_parallel: bool
    attention: AttentionImpl
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    kv_cache_bytes: float
    overhead_bytes: float
    total_bytes: float
    capacity_bytes: float
    fits: bool
    notes: tuple[str, ...] = ()
    # what one early step can hold beyond the repeating steps' peak, in the total (PyTorch
    # DDP's second step: its first buckets while they are still alive); a job's peak is the
    # larger of the two, and a job that can run out of memory at step 2 does not fit
    transient_bytes: float = 0.0

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.total_bytes

    def components(self) -> dict[str, float]:
        return {
            "weights": self.weights_bytes,
            "gradients": self.gradients_bytes,
            "optimizer states": self.optimizer_bytes,
            "activations": self.activations_bytes,
            "KV cache": self.kv_cache_bytes,
            "second-step buckets": self.transient_bytes,
            "allocator fragmentation": self.fragmentation_bytes,
            "framework overhead": self.overhead_bytes,
        }

    @property
    def allocated_bytes(self) -> float:
        """What torch.cuda.max_memory_allocated would report: the total without the CUDA
        context/workspaces overhead and without fragmentation."""
        return self.total_bytes - self.overhead_bytes - self.fragmentation_bytes

    @property
    def steady_allocated_bytes(self) -> float:
        """``allocated_bytes`` of the repeating steps, without the early transient."""
        return self.allocated_bytes - self.transient_bytes

    def message(self) -> str:
        """'needs 152.3 GB, has 80.0 GB' (decimal GB, as GPU datasheets count; TB from 1 TB)."""
        needs, has = format_gb_apart(self.total_bytes, self.capacity_bytes)
        return f"needs {needs}, has {has}"

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["headroom_bytes"] = self.headroom_bytes
        data["allocated_bytes"] = self.allocated_bytes
        data["steady_allocated_bytes"] = self.steady_allocated_bytes
        return data

    def explain(self) -> str:
        par = f"tp={self.tp} pp={self.pp} dp={self.dp}"
        if self.mode == "training":
            par += f" ZeRO-{self.zero} recompute={self.recompute}"
            par += " sequence-parallel" if self.sequence_parallel else ""
        what = "training" if self.mode == "training" else f"{self.phase}"
        seq = "context" if self.phase == "decode" else "seq"
        lines = [
            f"{self.model} {what} on {self.gpu} ({par}; batch {self.batch}, {seq} {self.seq}, "
            f"{self.dtype}): {'fits' if self.fits else 'does NOT fit'}, {self.message()}",
        ]
        for name, value in self.components().items():
            if value:
                share = 100 * value / self.total_bytes
                lines.append(f"  {name:<20} {format_quantity(value, 'B'):>10}  {share:5.1f}%")
        # where it does not fit, the total as the headline's "needs" (told apart from "has")
        total = (format_gb_apart(self.total_bytes, self.capacity_bytes)[0] if not self.fits
                 else format_quantity(self.total_bytes, "B"))  # fmt: skip
        lines.append(f"  {'total':<20} {total:>10}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)



def weights_bytes(spec: ModelSpec, dtype: str) -> float:
    """Bytes of a served model's weights in ``dtype``: an 8- or 4-bit model quantizes its GEMMs'
    weights only (``layers.GEMM_ONLY_DTYPES``); its embedding table (a gather, not a GEMM) and
    its norms stay in the activation dtype (bf16). Llama-3-8B in fp8: 7.50 G GEMM weights at 1
    byte, 0.53 G table and norm parameters at 2: 8.56 GB (every parameter at 1 byte: 8.03)."""
    other = spec.embedding_params() + spec.norm_params * (2 * spec.layers + 1)
    return ((spec.param_count() - other) * BYTES_PER_ELEMENT[dtype]
            + other * BYTES_PER_ELEMENT[activation_dtype(dtype)])  # fmt: skip

def memory(
    model: ModelSpec | str,
    gpu: GPUSpec | str,
    *,
    batch: int = 1,
    seq: int | None = None,
    dtype: str = "bf16",
    train: bool = False,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    zero: int = 0,
    recompute: Recompute = "none",
    sequence_parallel: bool | None = None,
    attention: AttentionImpl = "flash",
    microbatches: int | None = None,
    kv_dtype: str | None = None,
    prefill_tokens: int | None = None,
    overhead_bytes: float = DEFAULT_OVERHEAD_BYTES,
    phase: Phase | None = None,
    policy: Policy | None = None,
    activation_model: ActivationModel = "megatron",
    fragmentation: float | None = None,
    accumulation: int = 1,
) -> MemoryBreakdown:
    """Memory per GPU. Inference (``phase``, default ``"decode"``; see the module docstring):
    ``batch`` sequences of ``seq`` tokens of context (KV cache; default the model's
    max_context up to 2048, never beyond its max_context) and the working buffers of one
    forward over ``prefill_tokens`` tokens (default: batch*seq for ``"prefill"``, batch for
    ``"decode"``).
    Training: micro-batch ``batch`` of ``seq`` tokens, ``microbatches`` in flight per pipeline
    (default >= pp), ZeRO stage ``zero`` over ``dp`` ranks, ``accumulation`` micro-batches
    whose gradients add up before each optimizer step (an eager HF step without it holds its
    gradients and its activations at different moments)."""
    from gpumodel._validators import check_args

    spec = get_model(model)
    seq = min(2048, spec.max_context) if seq is None else seq
    for name, value in (("batch", batch), ("seq", seq), ("tp", tp), ("pp", pp), ("dp", dp),
                        ("accumulation", accumulation)):  # fmt: skip
        check_int(value, name, le=MAX_GPUS if name in ("tp", "pp", "dp") else MAX_ELEMENTS)
    check_args(batch=batch, seq=seq, tp=tp, pp=pp, dp=dp, zero=zero, recompute=recompute,
               attention=attention, microbatches=microbatches, prefill_tokens=prefill_tokens,
               overhead_bytes=overhead_bytes, policy=policy, activation_model=activation_model,
               fragmentation=fragmentation, dtype=dtype)  # fmt: skip
    if kv_dtype is not None:
        check_args(dtype=kv_dtype)
    check_policy_dtype(policy, dtype)
    spec.check_context(seq, "seq")
    return memory_of(spec, get_gpu(gpu), batch=batch, seq=seq, dtype=dtype,
                     train=train, tp=tp, pp=pp, dp=dp, zero=zero, recompute=recompute,
                     sequence_parallel=sequence_parallel, attention=attention,
                     microbatches=microbatches, kv_dtype=kv_dtype, prefill_tokens=prefill_tokens,
                     overhead_bytes=overhead_bytes, phase=phase, policy=policy,
                     activation_model=activation_model, fragmentation=fragmentation,
                     accumulation=accumulation)  # fmt: skip


def memory_of(
    spec: ModelSpec,
    g: GPUSpec,
    *,
    batch: int,
    seq: int,
    dtype: str = "bf16",
    train: bool = False,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    zero: int = 0,
    recompute: Recompute = "none",
    sequence_parallel: bool | None = None,
    attention: AttentionImpl = "flash",
    microbatches: int | None = None,
    virtual_stages: int = 1,
    kv_dtype: str | None = None,
    prefill_tokens: int | None = None,
    overhead_bytes: float = DEFAULT_OVERHEAD_BYTES,
    phase: Phase | None = None,
    policy: Policy | None = None,
    activation_model: ActivationModel = "megatron",
    fragmentation: float | None = None,
    accumulation: int = 1,
) -> MemoryBreakdown:
    """:func:`memory` of arguments already checked at their boundary (``memory`` itself, the
    training step, the vectorised sweeps, which call it once per distinct layout)."""
    if train:
        if phase not in (None, "train"):
            raise SpecError(f"train=True is the training phase, got phase='{phase}'")
        phase = "train"
    elif phase is None:
        phase = "decode"
    if phase not in ("prefill", "decode", "train"):
        raise SpecError(f"phase must be 'prefill', 'decode' or 'train', got '{phase}'")
    train = phase == "train"
    if dtype not in BYTES_PER_ELEMENT:
        raise SpecError(f"unknown dtype '{dtype}'")
    if min(batch, seq, tp, pp, dp, accumulation) < 1:
        raise SpecError("batch, seq, tp, pp, dp and accumulation must be >= 1")
    if pp > spec.layers:
        raise SpecError(f"{spec.id}: pp={pp} stages for {spec.layers} layers")
    shape = tp_shape(spec, tp)
    beta = BYTES_PER_ELEMENT[dtype]
    # an 8- or 4-bit model keeps its KV cache and activations in bf16 (layers.activation_dtype)
    kv_beta = BYTES_PER_ELEMENT[kv_dtype or activation_dtype(dtype)]
    act_beta = BYTES_PER_ELEMENT[activation_dtype(dtype)]
    sp = (tp > 1 and train) if sequence_parallel is None else sequence_parallel
    layers = stage_layers(spec.layers, pp)  # the largest stage's
    share = layers / spec.layers  # of the parameters (1 / pp where the stages are equal)
    params_per_gpu = spec.param_count() * share / tp
    notes: list[str] = []
    if spec.layers % pp:
        notes.append(f"{spec.layers} layers over pp={pp}: stages of {layers} and fewer; the "
                     f"{layers}-layer stage's memory")  # fmt: skip
    flash = attention != "naive"  # fused kernels (flash, cuDNN) keep no score matrix
    if policy is not None and policy not in POLICY_STATE_BYTES:
        raise SpecError(f"policy must be one of {', '.join(POLICY_STATE_BYTES)}, got '{policy}'")
    frag = DEFAULT_FRAGMENTATION if fragmentation is None else fragmentation
    if frag < 1.0:
        raise SpecError(f"fragmentation must be >= 1 (reserved / allocated), got {frag}")
    cache = 0.0
    # an eager HF step over dp ranks: PyTorch DDP without ZeRO, FSDP2 with ZeRO-3
    eager = train and activation_model == "hf-eager"
    ddp = eager and is_ddp("unfused", zero, dp)
    fsdp = eager and is_fsdp("unfused", zero, dp)
    if train:
        if policy is None:  # mixed precision: fp32 master weights, unless they are fp32 already
            w, gr, opt = model_state_bytes(params_per_gpu, zero, dp, weight_bytes=beta,
                                           optimizer_bytes=ADAM_BYTES_PER_PARAM
                                           - (4.0 if beta >= 4 else 0.0))  # fmt: skip
        else:
            wb, gb, ob = state_bytes(policy, fsdp)
            w, gr, opt = model_state_bytes(params_per_gpu, zero, dp, weight_bytes=wb,
                                           optimizer_bytes=ob, grad_bytes=gb)  # fmt: skip
            if policy == "amp":  # autocast's bf16 copies of the matmul weights
                cache = 2.0 * spec.matmul_param_count() * share / tp
                notes.append(f"amp: autocast's bf16 weight copies {cache / 1e9:.2f} GB")
        # None: as many micro-batches as the schedule keeps in flight
        in_flight = in_flight_microbatches(pp, microbatches or 1 << 30, virtual_stages)
        # an fp32 model with grouped K/V heads: HF passes them to SDPA as such, which runs its
        # math path and keeps the probabilities
        math = (activation_model == "hf-eager" and policy == "fp32"
                and sdpa_math(dtype, "native", shape.kv_heads, shape.heads))  # fmt: skip
        if activation_model == "hf-eager" and recompute != "full":
            per_layer = seq * batch * hf_eager_activation_bytes_per_token(
                spec, policy or "bf16", tp, math_seq=seq if math else None)  # fmt: skip
            per_logit = HF_LOSS_BYTES_PER_FP32_LOGIT if policy == "fp32" else HF_LOSS_BYTES_PER_LOGIT
            logits = per_logit * seq * batch * spec.vocab / tp
            notes.append("activations as autograd saves them for eager HF modules; HF loss "
                         f"{per_logit:g} B per logit")  # fmt: skip
        else:
            # the saved tensors' dtype: fp32 under the fp32 policy (or an fp32 model without
            # one), else 16-bit (amp's autocast saves bf16 tensors)
            e = 4.0 if policy == "fp32" or (policy is None and act_beta >= 4) else 2.0
            per_layer = activation_bytes_per_layer(seq, batch, spec.hidden, spec.heads, tp, sp,
                                                   recompute, flash, e)  # fmt: skip
            if policy == "amp" and recompute == "full":  # the saved layer inputs are fp32
                per_layer *= 2.0
            logits = 4.0 * seq * batch * spec.vocab / tp
        first_stage = per_layer * layers * in_flight
        last_stage = per_layer * layers + logits
        act = max(first_stage, last_stage) if pp > 1 else first_stage + logits
        kv = 0.0
        if math and recompute != "full":
            notes.append("SDPA's math path (fp32, grouped K/V heads): the probabilities, "
                         "one per head and key, are stored")  # fmt: skip
        elif flash and recompute != "full":
            notes.append("flash attention: the 5as^2b score-matrix term of Korthikanti et al. "
                         "is not stored")  # fmt: skip
    else:
        w, gr, opt = weights_bytes(spec, dtype) * share / tp, 0.0, 0.0
        kv = (2.0 * layers * shape.kv_heads * spec.head_dim * kv_beta
              * spec.attended(seq) * batch)  # fmt: skip
        if prefill_tokens is not None:
            tokens = prefill_tokens
        else:
            tokens = batch * seq if phase == "prefill" else batch
        # transient buffers of one layer: residual + norm output, gate/up/act outputs, fp32
        # logits of the last token per sequence
        act = tokens * act_beta * (2 * spec.hidden + 3 * shape.ffn) + batch * shape.vocab * 4.0
        if not flash:
            q_rows = seq if phase == "prefill" else 1
            act += batch * shape.heads * q_rows * spec.attended(seq) * (act_beta + 4.0)
    w += cache
    # PyTorch DDP keeps its buckets allocated beside the gradients: one more copy of them
    # (gradient_as_bucket_view False, its default; llm/ddp.py)
    buckets = gr if ddp else 0.0
    if buckets:
        notes.append(f"DDP buckets {buckets / 1e9:.2f} GB beside the gradients "
                     "(gradient_as_bucket_view=False)")  # fmt: skip
    grads_at_backward_start = steady_grads = gr  # accumulating: the gradients live throughout
    if eager and accumulation == 1 and (dp == 1 or ddp or fsdp):
        # An eager step's optimizer.zero_grad(set_to_none=True) (PyTorch's default since 2.0,
        # and HF Trainer's) frees the gradients between steps, and neither accumulation (the
        # gradients of the first micro-batches live through the next forward) nor a sharded
        # sync keeps them (DDP's buckets, above, are their own memory; FSDP2's reduce-scatters
        # allocate the sharded gradients layer by layer, llm/fsdp.py): the backward
        # pass frees each layer's saved activations as it
        # allocates that layer's gradients, so the peak is the larger of the activations at
        # its start and the gradients at its end, not their sum. Fit set
        # (validation/results/train-fitset-h100-clean): peak allocated amp 8.5% -> 2.3%,
        # bf16 4.1% -> 4.0% (median |error|, 16 points each).
        if gr:
            notes.append(f"gradients {gr / 1e9:.2f} GB freed between steps (zero_grad "
                         "set_to_none): the peak holds the larger of them and the activations")  # fmt: skip
        gr = max(0.0, gr - act)
        grads_at_backward_start, steady_grads = 0.0, gr
    gr += buckets
    # DDP's second step rebuilds the buckets in the order the first backward made the
    # gradients (DistributedDataParallel._pre_forward -> Reducer._rebuild_buckets); the first
    # ones are freed when their last reference goes, and when they are still alive at the
    # backward's start that step peaks at the activations plus two sets of buckets. Measured on
    # 2 x H200 (validation/results/h200-sxm-x2/ddp-memory-phases-2026-11-30, the blocks alive at
    # each step's peak): alive on a rank in 2 of 4 TinyLlama jobs (+2.20 GB bf16, +4.40 GB amp:
    # one gradients copy), freed before it in the others; a race (likely with the first step's
    # NCCL work objects). Every job has a second step and runs out of memory at its largest, so
    # the job's peak counts them; the repeating steps' peak is ``steady_allocated_bytes``
    transient = max(0.0, buckets + grads_at_backward_start - steady_grads) if buckets else 0.0
    if transient:
        notes.append(f"DDP's second step can still hold its first buckets at the backward's "
                     f"start: {transient / 1e9:.2f} GB in the job's peak, not in the later steps'")  # fmt: skip
    if fsdp:  # FSDP2's unsharded units: their parameters, and as much for their gradients
        # in the dtype they are gathered in: amp's fp32 parameters, else bf16 (mixed's
        # param_dtype)
        unsharded = unsharded_elements(spec, tp) * (4.0 if policy in ("amp", "fp32") else 2.0)
        w += unsharded
        gr += unsharded
        notes.append(f"FSDP2: the root unit and two layers unsharded, {unsharded / 1e9:.2f} GB "
                     "of parameters and as much of their gradients")  # fmt: skip
    allocated = w + gr + opt + act + kv + transient
    frag_bytes = allocated * (frag - 1.0)
    if frag > 1.0:
        notes.append(f"allocator fragmentation x{frag:.3g} (reserved / allocated)")
    total = allocated + frag_bytes + overhead_bytes
    cap = g.memory.capacity_bytes
    return MemoryBreakdown(
        model=spec.id, gpu=g.id, policy=policy if train else None, fragmentation=frag,
        fragmentation_bytes=frag_bytes, mode="training" if train else "inference", phase=phase,
        batch=batch, seq=seq,
        dtype=dtype, tp=tp, pp=pp, dp=dp, zero=zero if train else 0,
        recompute=recompute if train else "none", sequence_parallel=sp, attention=attention,
        weights_bytes=w, gradients_bytes=gr, optimizer_bytes=opt, activations_bytes=act,
        kv_cache_bytes=kv, overhead_bytes=overhead_bytes, total_bytes=total, capacity_bytes=cap,
        fits=total <= cap, notes=tuple(notes), transient_bytes=transient,
    )  # fmt: skip


def fits(model: ModelSpec | str, gpu: GPUSpec | str, *, strict: bool = False,
         **kwargs: Any) -> MemoryBreakdown:  # fmt: skip
    """``memory(...)``; with ``strict=True`` a plan that does not fit raises
    InfeasibleError("<model> on <gpu>: needs 152.3 GB, has 80.0 GB (...)")."""
    from gpumodel._validators import check_bool

    check_bool(strict, "strict")
    m = memory(model, gpu, **kwargs)
    if strict and not m.fits:
        raise InfeasibleError(infeasible_message(m), needed=m.total_bytes,
                              available=m.capacity_bytes)  # fmt: skip
    return m


def infeasible_message(m: MemoryBreakdown) -> str:
    parts = ", ".join(f"{k} {format_gb(v)}" for k, v in m.components().items() if v)
    return f"{m.model} on {m.gpu}: {m.message()} ({parts})"


def _largest(lo: int, hi: int, ok: Any) -> int:
    """Largest n in [lo, hi] with ok(n) (ok monotone decreasing); lo - 1 if none."""
    if not ok(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def max_batch(model: ModelSpec | str, gpu: GPUSpec | str, *, seq: int | None = None,
              limit: int = 1 << 20, **kwargs: Any) -> int:  # fmt: skip
    """Largest batch of ``seq``-token sequences that fits (0 if none; ``seq`` as ``memory``)."""
    from gpumodel._validators import check_args

    if seq is not None:
        check_args(seq=seq)
    check_int(limit, "limit", ge=1, le=2**31)
    return _largest(1, limit, lambda b: memory(model, gpu, batch=b, seq=seq, **kwargs).fits)


def max_context(model: ModelSpec | str, gpu: GPUSpec | str, *, batch: int = 1,
                **kwargs: Any) -> int:  # fmt: skip
    """Longest context (up to the model's max_context) that fits at ``batch`` (0 if none)."""

    check_int(batch, "batch")
    spec = get_model(model)
    return _largest(1, spec.max_context,
                    lambda s: memory(spec, gpu, batch=batch, seq=s, **kwargs).fits)  # fmt: skip


def what_fits(model: ModelSpec | str, gpu: GPUSpec | str, *, batch: int, seq: int, tp: int = 1,
              **kwargs: Any) -> str:  # fmt: skip
    """'batch <= 12' / 'tp >= 2' / 'context <= 3000': the nearest configurations that fit, for
    an infeasible-memory message (same accounting: ``kwargs`` as ``memory``)."""
    spec = get_model(model)
    hints = []
    b = max_batch(spec, gpu, seq=seq, tp=tp, limit=max(1, batch), **kwargs)
    if b >= 1:
        hints.append(f"batch <= {b}")
    c = _largest(1, seq, lambda s: memory(spec, gpu, batch=batch, seq=s, tp=tp, **kwargs).fits)
    if c >= 1 and kwargs.get("phase") != "prefill":
        hints.append(f"context <= {c}")
    for t in (2, 4, 8, 16):
        if t <= tp:
            continue
        try:
            tp_shape(spec, t)
        except GpumodelError:
            continue
        if memory(spec, gpu, batch=batch, seq=seq, tp=t, **kwargs).fits:
            hints.append(f"tp >= {t}")
            break
    return "fits: " + " / ".join(hints) if hints else "nothing fits on this GPU at this dtype"


def require_fit(m: MemoryBreakdown, hint: str) -> None:
    """Raise InfeasibleError('needs N GB, has M GB; fits: ...') unless ``m`` fits."""
    if not m.fits:
        raise InfeasibleError(f"{m.model} {m.phase} on {m.gpu}: {m.message()}; {hint} "
                              "(or allow_oversubscribe / --allow-oversubscribe)",
                              needed=m.total_bytes, available=m.capacity_bytes)  # fmt: skip
