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
Framework overhead: CUDA context, cuBLAS/NCCL workspaces and allocator fragmentation, a flat
``DEFAULT_OVERHEAD_BYTES`` (assumption; a CUDA context alone is ~0.5 GB on Hopper).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gpumodel.errors import InfeasibleError, SpecError
from gpumodel.llm.layers import AttentionImpl, tp_shape
from gpumodel.llm.models import ModelSpec, get_model
from gpumodel.specs import BYTES_PER_ELEMENT, GPUSpec, get_gpu
from gpumodel.units import format_quantity

DEFAULT_OVERHEAD_BYTES = 1.5e9
ADAM_BYTES_PER_PARAM = 12.0  # fp32 master weights + momentum + variance (ZeRO section 3.1)
Recompute = Literal["none", "selective", "full"]


def model_state_bytes(
    params: float,
    zero: int = 0,
    dp: int = 1,
    weight_bytes: float = 2.0,
    optimizer_bytes: float = ADAM_BYTES_PER_PARAM,
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
    g = params * weight_bytes
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
) -> float:
    """Bytes of activations one layer stores for backward (Korthikanti et al. 2022, Table 2)."""
    sbh = float(s) * b * h
    if recompute == "full":
        return 2.0 * sbh / (t if sequence_parallel else 1)
    # 5as/h: the attention score matrices; gone with flash attention or selective recompute
    scores = 0.0 if (flash or recompute == "selective") else 5.0 * a * s / h
    if sequence_parallel or t == 1:
        return sbh / t * (34.0 + scores)
    return sbh * (10.0 + 24.0 / t + scores / t)


class MemoryBreakdown(BaseModel):
    """Bytes per GPU, by component, against the GPU's capacity."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    model: str
    gpu: str
    mode: Literal["inference", "training"]
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
            "framework overhead": self.overhead_bytes,
        }

    def message(self) -> str:
        """'needs 152.3 GB, has 80.0 GB' (decimal GB, as GPU datasheets count)."""
        return f"needs {self.total_bytes / 1e9:.1f} GB, has {self.capacity_bytes / 1e9:.1f} GB"

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["headroom_bytes"] = self.headroom_bytes
        return data

    def explain(self) -> str:
        par = f"tp={self.tp} pp={self.pp} dp={self.dp}"
        if self.mode == "training":
            par += f" ZeRO-{self.zero} recompute={self.recompute}"
            par += " sequence-parallel" if self.sequence_parallel else ""
        lines = [
            f"{self.model} {self.mode} on {self.gpu} ({par}; batch {self.batch}, seq {self.seq}, "
            f"{self.dtype}): {'fits' if self.fits else 'does NOT fit'}, {self.message()}",
        ]
        for name, value in self.components().items():
            if value:
                share = 100 * value / self.total_bytes
                lines.append(f"  {name:<20} {format_quantity(value, 'B'):>10}  {share:5.1f}%")
        lines.append(f"  {'total':<20} {format_quantity(self.total_bytes, 'B'):>10}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def memory(
    model: ModelSpec | str,
    gpu: GPUSpec | str,
    *,
    batch: int = 1,
    seq: int = 2048,
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
) -> MemoryBreakdown:
    """Memory per GPU. Inference: ``batch`` sequences of ``seq`` tokens of context (KV cache)
    and the working buffers of one forward over ``prefill_tokens`` (default batch*seq) tokens.
    Training: micro-batch ``batch`` of ``seq`` tokens, ``microbatches`` in flight per pipeline
    (default >= pp), ZeRO stage ``zero`` over ``dp`` ranks."""
    spec = get_model(model)
    g = get_gpu(gpu)
    if dtype not in BYTES_PER_ELEMENT:
        raise SpecError(f"unknown dtype '{dtype}'")
    if min(batch, seq, tp, pp, dp) < 1:
        raise SpecError("batch, seq, tp, pp and dp must be >= 1")
    if spec.layers % pp:
        raise SpecError(f"{spec.id}: {spec.layers} layers do not split into pp={pp} stages")
    shape = tp_shape(spec, tp)
    beta = BYTES_PER_ELEMENT[dtype]
    kv_beta = BYTES_PER_ELEMENT[kv_dtype or dtype]
    sp = (tp > 1 and train) if sequence_parallel is None else sequence_parallel
    params_per_gpu = spec.param_count() / (tp * pp)
    layers = spec.layers // pp
    notes: list[str] = []
    flash = attention != "naive"  # fused kernels (flash, cuDNN) keep no score matrix
    if train:
        w, gr, opt = model_state_bytes(params_per_gpu, zero, dp, weight_bytes=beta)
        in_flight = min(pp, microbatches) if microbatches else pp
        per_layer = activation_bytes_per_layer(seq, batch, spec.hidden, spec.heads, tp, sp,
                                               recompute, flash)  # fmt: skip
        logits = 4.0 * seq * batch * spec.vocab / tp
        first_stage = per_layer * layers * in_flight
        last_stage = per_layer * layers + logits
        act = max(first_stage, last_stage) if pp > 1 else first_stage + logits
        kv = 0.0
        if flash and recompute != "full":
            notes.append("flash attention: the 5as^2b score-matrix term of Korthikanti et al. "
                         "is not stored")  # fmt: skip
    else:
        w, gr, opt = params_per_gpu * beta, 0.0, 0.0
        kv = (2.0 * layers * shape.kv_heads * spec.head_dim * kv_beta
              * spec.attended(seq) * batch)  # fmt: skip
        tokens = prefill_tokens if prefill_tokens is not None else batch * seq
        # transient buffers of one layer: residual + norm output, gate/up/act outputs, fp32
        # logits of the last token per sequence
        act = tokens * beta * (2 * spec.hidden + 3 * shape.ffn) + batch * shape.vocab * 4.0
        if not flash:
            act += batch * shape.heads * seq * spec.attended(seq) * (beta + 4.0)
    total = w + gr + opt + act + kv + overhead_bytes
    cap = g.memory.capacity_bytes
    return MemoryBreakdown(
        model=spec.id, gpu=g.id, mode="training" if train else "inference", batch=batch, seq=seq,
        dtype=dtype, tp=tp, pp=pp, dp=dp, zero=zero if train else 0,
        recompute=recompute if train else "none", sequence_parallel=sp, attention=attention,
        weights_bytes=w, gradients_bytes=gr, optimizer_bytes=opt, activations_bytes=act,
        kv_cache_bytes=kv, overhead_bytes=overhead_bytes, total_bytes=total, capacity_bytes=cap,
        fits=total <= cap, notes=tuple(notes),
    )  # fmt: skip


def fits(model: ModelSpec | str, gpu: GPUSpec | str, *, strict: bool = False,
         **kwargs: Any) -> MemoryBreakdown:  # fmt: skip
    """``memory(...)``; with ``strict=True`` a plan that does not fit raises
    InfeasibleError("<model> on <gpu>: needs 152.3 GB, has 80.0 GB (...)")."""
    m = memory(model, gpu, **kwargs)
    if strict and not m.fits:
        raise InfeasibleError(infeasible_message(m), needed=m.total_bytes,
                              available=m.capacity_bytes)  # fmt: skip
    return m


def infeasible_message(m: MemoryBreakdown) -> str:
    parts = ", ".join(f"{k} {v / 1e9:.1f} GB" for k, v in m.components().items() if v)
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


def max_batch(model: ModelSpec | str, gpu: GPUSpec | str, *, seq: int = 2048,
              limit: int = 1 << 20, **kwargs: Any) -> int:  # fmt: skip
    """Largest batch of ``seq``-token sequences that fits (0 if none)."""
    return _largest(1, limit, lambda b: memory(model, gpu, batch=b, seq=seq, **kwargs).fits)


def max_context(model: ModelSpec | str, gpu: GPUSpec | str, *, batch: int = 1,
                **kwargs: Any) -> int:  # fmt: skip
    """Longest context (up to the model's max_context) that fits at ``batch`` (0 if none)."""
    spec = get_model(model)
    return _largest(1, spec.max_context,
                    lambda s: memory(spec, gpu, batch=batch, seq=s, **kwargs).fits)  # fmt: skip
