"""Scaled-dot-product attention: fused (FlashAttention) or naive (three kernels)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from gpumodel.ops.base import (
    Dtype,
    FlopPart,
    GemmShape,
    KernelWork,
    Op,
    element_bytes,
    matmul_unit,
    vector_unit,
)
from gpumodel.specs import GPUSpec

SOFTMAX_FLOPS_PER_SCORE = 5.0  # max, subtract, exp, sum, scale


class Attention(Op):
    """softmax(Q K^T / sqrt(d)) V for ``batch`` x ``heads`` queries of length ``seq`` against
    ``kv_seq`` keys (default ``seq``) with ``kv_heads`` K/V heads (GQA/MQA; default ``heads``).

    FLOPs: ``4 * batch * heads * seq * kv_seq * head_dim`` for the two products (QK^T and PV),
    times the unmasked fraction when ``causal`` (kernels that skip masked blocks, as
    FlashAttention does: ``1 - seq / (2 * kv_seq)``, one half for square causal attention).
    Bytes: ``flash`` reads Q, K, V once and writes O once (Dao et al. 2022, when tiles fit);
    ``naive`` also writes the score matrix, reads it for the softmax and again for PV.
    """

    op_name: ClassVar[str] = "attention"
    batch: int = Field(1, gt=0)
    heads: int = Field(32, gt=0)
    seq: int = Field(gt=0)
    head_dim: int = Field(128, gt=0)
    dtype: Dtype = "bf16"
    causal: bool = False
    impl: Literal["flash", "naive"] = "flash"
    kv_heads: int | None = Field(None, gt=0)
    kv_seq: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> Attention:
        if self.heads % self.n_kv_heads:
            raise ValueError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.n_kv_heads})"
            )
        if self.causal and self.seq > self.n_kv_seq:
            raise ValueError(f"causal attention needs seq ({self.seq}) <= kv_seq ({self.n_kv_seq})")
        return self

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def n_kv_seq(self) -> int:
        return self.kv_seq or self.seq

    @property
    def causal_fraction(self) -> float:
        return 1.0 - self.seq / (2.0 * self.n_kv_seq) if self.causal else 1.0

    @property
    def scores(self) -> float:
        """Number of attention scores actually computed."""
        return self.batch * self.heads * self.seq * self.n_kv_seq * self.causal_fraction

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        unit, dt = matmul_unit(gpu, self.dtype)
        vunit, vdt = vector_unit(gpu, self.dtype)
        size = element_bytes(self.dtype)
        b, h, s, d = self.batch, self.heads, self.seq, self.head_dim
        q_bytes = b * h * s * d * size
        kv_bytes = 2 * b * self.n_kv_heads * self.n_kv_seq * d * size
        mm_flops = 4.0 * self.scores * d
        softmax_flops = SOFTMAX_FLOPS_PER_SCORE * self.scores
        if self.impl == "flash":
            nbytes = 2 * q_bytes + kv_bytes  # Q in, O out, K and V in
            return [
                KernelWork(
                    name="flash attention",
                    flops=(FlopPart(unit, dt, mm_flops), FlopPart(vunit, vdt, softmax_flops)),
                    bytes=nbytes,
                    working_set_bytes=nbytes,
                    gemm=GemmShape(s, self.n_kv_seq, d, b * h, self.dtype),
                )
            ]
        score_bytes = self.scores * size
        half_kv = kv_bytes / 2
        return [
            KernelWork(
                name="QK^T",
                flops=(FlopPart(unit, dt, mm_flops / 2),),
                bytes=q_bytes + half_kv + score_bytes,
                gemm=GemmShape(s, self.n_kv_seq, d, b * h, self.dtype),
            ),
            KernelWork(
                name="softmax",
                flops=(FlopPart(vunit, vdt, softmax_flops),),
                bytes=2 * score_bytes,
                working_set_bytes=2 * score_bytes,
            ),
            KernelWork(
                name="PV",
                flops=(FlopPart(unit, dt, mm_flops / 2),),
                bytes=score_bytes + half_kv + q_bytes,
                gemm=GemmShape(s, d, self.n_kv_seq, b * h, self.dtype),
            ),
        ]
