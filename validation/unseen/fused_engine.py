"""A vLLM-style Llama decode engine in PyTorch and Triton, written to measure what gpumodel's
``fused-graph`` runtime describes: no vLLM or TensorRT-LLM can be installed on the device
machines, so this is a stand-in with the same structure, not either of them.

Per decoder layer, as ``docs/llm-runtimes.md`` lists ``fused-graph``'s kernels: RMSNorm (one
Triton kernel), one fused QKV GEMM, RoPE on q and k (one Triton kernel), the K/V cache write
(one Triton kernel into a static cache), attention on K/V at ``kv_heads`` (torch's SDPA,
FlashAttention backend, ``enable_gqa``), o GEMM, residual add, RMSNorm, one fused gate+up GEMM,
SiLU x up (one Triton kernel), down GEMM, residual add. Per step: embedding, final RMSNorm,
the LM head. The whole decode step is captured in one CUDA graph and replayed.

Tensor parallel (``tp`` > 1, one process a GPU, ``multi_gpu_unseen.py``), as vLLM's Llama shards
it: QKV and gate+up split by columns (heads, kv heads and ffn / tp on each GPU), o and down by
rows with an NCCL all-reduce of their output before the residual add, the embedding split by
vocabulary (masked lookup, then an all-reduce) and the LM head split by vocabulary with the
logits all-gathered. The all-reduces are NCCL's, captured in the step's graph (vLLM's own
custom all-reduce kernel is not reproduced).

Measurement code only (``steps_unseen.py --part fused``): it imports nothing of gpumodel. On a
machine without CUDA (``--tiny``) the Triton kernels are replaced by torch ops of the same
maths and nothing is captured, so the wiring can be tested on a CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

try:  # Triton only where the GPU path runs
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - CPU smoke test
    triton = None


@dataclass(frozen=True)
class Dims:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    layers: int
    vocab: int
    eps: float = 1e-5
    rope_theta: float = 500000.0


def dims_of(cfg: Any) -> Dims:
    """The engine's widths from an HF ``LlamaConfig``."""
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta") or getattr(
        cfg, "rope_theta", 500000.0)  # fmt: skip
    return Dims(hidden=cfg.hidden_size, heads=cfg.num_attention_heads,
                kv_heads=cfg.num_key_value_heads, head_dim=head_dim, ffn=cfg.intermediate_size,
                layers=cfg.num_hidden_layers, vocab=cfg.vocab_size, eps=cfg.rms_norm_eps,
                rope_theta=float(theta))  # fmt: skip


if triton is not None:

    @triton.jit
    def fg_rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (x * rstd * w).to(tl.bfloat16), mask=mask)

    @triton.jit
    def fg_rope_kernel(qkv_ptr, cos_ptr, sin_ptr, pos_ptr, row_stride, HALF: tl.constexpr):
        # program (sequence, head) over the q and k heads; rotate-half RoPE in place
        b = tl.program_id(0)
        h = tl.program_id(1)
        pos = tl.load(pos_ptr)
        d = tl.arange(0, HALF)
        base = qkv_ptr + b * row_stride + h * 2 * HALF
        x1 = tl.load(base + d).to(tl.float32)
        x2 = tl.load(base + HALF + d).to(tl.float32)
        c = tl.load(cos_ptr + pos * HALF + d)
        s = tl.load(sin_ptr + pos * HALF + d)
        tl.store(base + d, (x1 * c - x2 * s).to(tl.bfloat16))
        tl.store(base + HALF + d, (x2 * c + x1 * s).to(tl.bfloat16))

    @triton.jit
    def fg_cache_write_kernel(qkv_ptr, k_ptr, v_ptr, pos_ptr, row_stride, cache_len,
                              Q_HEADS: tl.constexpr, KV_HEADS: tl.constexpr,
                              D: tl.constexpr):  # fmt: skip
        # program (sequence, kv head): this step's K and V row into the static cache
        b = tl.program_id(0)
        h = tl.program_id(1)
        pos = tl.load(pos_ptr)
        d = tl.arange(0, D)
        k = tl.load(qkv_ptr + b * row_stride + (Q_HEADS + h) * D + d)
        v = tl.load(qkv_ptr + b * row_stride + (Q_HEADS + KV_HEADS + h) * D + d)
        off = ((b * KV_HEADS + h) * cache_len + pos) * D + d
        tl.store(k_ptr + off, k)
        tl.store(v_ptr + off, v)

    @triton.jit
    def fg_silu_mul_kernel(gu_ptr, out_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < n
        g = tl.load(gu_ptr + row * 2 * n + cols, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(gu_ptr + row * 2 * n + n + cols, mask=mask, other=0.0).to(tl.float32)
        y = g / (1.0 + tl.exp(-g)) * u
        tl.store(out_ptr + row * n + cols, y.to(tl.bfloat16), mask=mask)


def shard(dims: Dims, tp: int) -> Dims:
    """One GPU's widths under tensor parallelism ``tp`` (heads, kv heads, ffn, vocab / tp)."""
    for name in ("heads", "kv_heads", "ffn", "vocab"):
        if getattr(dims, name) % tp:
            raise ValueError(f"{name} {getattr(dims, name)} is not divisible by tp {tp}")
    return replace(dims, heads=dims.heads // tp, kv_heads=dims.kv_heads // tp,
                   ffn=dims.ffn // tp, vocab=dims.vocab // tp)  # fmt: skip


class Engine:
    """Random bf16 weights of a Llama model (``Dims``), fused as a serving engine fuses them;
    with ``tp`` > 1 this GPU's shard (``rank`` of ``tp``, torch.distributed initialised)."""

    def __init__(self, torch: Any, dims: Dims, device: str, tp: int = 1, rank: int = 0):
        self.full, self.tp, self.rank = dims, tp, rank
        dims = shard(dims, tp)
        self.torch, self.d, self.device = torch, dims, device
        # SDPA's FlashAttention backend (a serving engine's kernel family); False: torch's
        # default choice, where this torch's flash rejects the call
        self.flash = True
        d, bf = dims, torch.bfloat16

        def w(*shape: int) -> Any:
            return torch.empty(*shape, device=device, dtype=bf).normal_(0.0, 0.02)

        qkv_out = (d.heads + 2 * d.kv_heads) * d.head_dim
        self.embed = w(d.vocab, d.hidden)
        self.layers = [
            {"norm1": torch.ones(d.hidden, device=device, dtype=bf), "wqkv": w(qkv_out, d.hidden),
             "wo": w(d.hidden, d.heads * d.head_dim),
             "norm2": torch.ones(d.hidden, device=device, dtype=bf),
             "wgu": w(2 * d.ffn, d.hidden), "wd": w(d.hidden, d.ffn)}
            for _ in range(d.layers)
        ]  # fmt: skip
        self.norm_f = torch.ones(d.hidden, device=device, dtype=bf)
        self.lm_head = w(d.vocab, d.hidden)
        self.params = sum(t.numel() for t in [self.embed, self.norm_f, self.lm_head]) + sum(
            t.numel() for layer in self.layers for t in layer.values())  # fmt: skip

    def rope_tables(self, length: int) -> tuple[Any, Any]:
        """(cos, sin) [length, head_dim / 2] in fp32."""
        torch, d = self.torch, self.d
        half = d.head_dim // 2
        inv = 1.0 / d.rope_theta ** (torch.arange(half, device=self.device, dtype=torch.float32)
                                     / half)  # fmt: skip
        ang = torch.arange(length, device=self.device, dtype=torch.float32)[:, None] * inv
        return torch.cos(ang).contiguous(), torch.sin(ang).contiguous()


class DecodeState:
    """One decode point: static caches holding ``context`` positions, the step's inputs and,
    on CUDA, the step captured as one graph."""

    def __init__(self, eng: Engine, batch: int, context: int):
        torch, d = eng.torch, eng.d
        self.eng, self.batch, self.context = eng, batch, context
        length = context + 1
        shape = (batch, d.kv_heads, length, d.head_dim)
        # random K/V for the context already cached; this step writes position ``context``
        self.k = [torch.randn(shape, device=eng.device, dtype=torch.bfloat16) for _ in eng.layers]
        self.v = [torch.randn(shape, device=eng.device, dtype=torch.bfloat16) for _ in eng.layers]
        self.tokens = torch.randint(0, eng.full.vocab, (batch,), device=eng.device)
        self.pos = torch.tensor([context], device=eng.device, dtype=torch.int32)
        self.cos, self.sin = eng.rope_tables(length)
        self.cuda = eng.device == "cuda"
        self.graph = None
        self.logits = None

    def forward(self) -> Any:
        torch, d, eng = self.eng.torch, self.eng.d, self.eng
        F = torch.nn.functional
        b = self.batch
        x = self._embed()
        for i, lw in enumerate(eng.layers):
            y = self._rmsnorm(x, lw["norm1"])
            qkv = F.linear(y, lw["wqkv"])
            self._rope(qkv)
            self._cache_write(qkv, i)
            q = qkv[:, : d.heads * d.head_dim].view(b, d.heads, 1, d.head_dim)
            attn = self._attention(q, self.k[i], self.v[i])
            x.add_(self._reduce(F.linear(attn.reshape(b, d.heads * d.head_dim), lw["wo"])))
            y = self._rmsnorm(x, lw["norm2"])
            gu = F.linear(y, lw["wgu"])
            x.add_(self._reduce(F.linear(self._silu_mul(gu), lw["wd"])))
        return self._gather(F.linear(self._rmsnorm(x, eng.norm_f), eng.lm_head))

    # ------------------------------------------------------------------ tensor parallel

    def _embed(self) -> Any:
        """The token embeddings; split by vocabulary under tp (vLLM's VocabParallelEmbedding:
        rows outside this GPU's range are looked up at 0 and zeroed, then summed over GPUs)."""
        eng = self.eng
        F = eng.torch.nn.functional
        if eng.tp == 1:
            return F.embedding(self.tokens, eng.embed)
        start = eng.rank * eng.d.vocab
        inside = (self.tokens >= start) & (self.tokens < start + eng.d.vocab)
        rows = F.embedding((self.tokens - start) * inside, eng.embed)
        return self._reduce(rows * inside.unsqueeze(1).to(rows.dtype))

    def _reduce(self, t: Any) -> Any:
        """Sum a row-parallel GEMM's partial output over the GPUs (NCCL, in place)."""
        if self.eng.tp > 1:
            self.eng.torch.distributed.all_reduce(t)
        return t

    def _gather(self, logits: Any) -> Any:
        """Every GPU's vocabulary slice of the logits, [tp x batch, vocab / tp] (all-gather)."""
        eng = self.eng
        if eng.tp == 1:
            return logits
        out = eng.torch.empty((eng.tp * logits.shape[0], logits.shape[1]), dtype=logits.dtype,
                              device=logits.device)  # fmt: skip
        eng.torch.distributed.all_gather_into_tensor(out, logits)
        return out

    def capture(self) -> None:
        """Warm up (Triton compiles, cuBLAS picks its kernels) and capture one graph."""
        torch = self.eng.torch
        if not self.cuda:
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.forward()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self.forward()
        torch.cuda.synchronize()

    def step(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.logits = self.forward()

    # ------------------------------------------------------------------ the fused kernels

    def _rmsnorm(self, x: Any, weight: Any) -> Any:
        torch, d = self.eng.torch, self.eng.d
        if not self.cuda:
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + d.eps) * weight.float()
                    ).to(x.dtype)  # fmt: skip
        y = torch.empty_like(x)
        block = triton.next_power_of_2(d.hidden)
        fg_rmsnorm_kernel[(x.shape[0],)](x, weight, y, d.hidden, d.eps, BLOCK=block,
                                         num_warps=8)  # fmt: skip
        return y

    def _rope(self, qkv: Any) -> None:
        torch, d = self.eng.torch, self.eng.d
        half = d.head_dim // 2
        heads = d.heads + d.kv_heads  # q and k, stored first in the fused projection
        if not self.cuda:
            c, s = self.cos[self.context], self.sin[self.context]
            x = qkv[:, : heads * d.head_dim].view(qkv.shape[0], heads, d.head_dim)
            x1, x2 = x[..., :half].float(), x[..., half:].float()
            out = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(qkv.dtype)
            x.copy_(out)
            return
        fg_rope_kernel[(qkv.shape[0], heads)](qkv, self.cos, self.sin, self.pos, qkv.stride(0),
                                              HALF=half, num_warps=1)  # fmt: skip

    def _cache_write(self, qkv: Any, layer: int) -> None:
        d = self.eng.d
        k, v = self.k[layer], self.v[layer]
        if not self.cuda:
            q_end = d.heads * d.head_dim
            kv = d.kv_heads * d.head_dim
            b = qkv.shape[0]
            k[:, :, self.context] = qkv[:, q_end : q_end + kv].view(b, d.kv_heads, d.head_dim)
            v[:, :, self.context] = qkv[:, q_end + kv :].view(b, d.kv_heads, d.head_dim)
            return
        fg_cache_write_kernel[(qkv.shape[0], d.kv_heads)](
            qkv, k, v, self.pos, qkv.stride(0), k.shape[2], Q_HEADS=d.heads,
            KV_HEADS=d.kv_heads, D=d.head_dim, num_warps=1)  # fmt: skip

    def _attention(self, q: Any, k: Any, v: Any) -> Any:
        torch = self.eng.torch
        F = torch.nn.functional
        if not self.cuda or not self.eng.flash:
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    def _silu_mul(self, gu: Any) -> Any:
        torch, d = self.eng.torch, self.eng.d
        if not self.cuda:
            g, u = gu[:, : d.ffn].float(), gu[:, d.ffn :].float()
            return (torch.nn.functional.silu(g) * u).to(gu.dtype)
        out = torch.empty(gu.shape[0], d.ffn, device=gu.device, dtype=gu.dtype)
        block = 1024
        fg_silu_mul_kernel[(gu.shape[0], math.ceil(d.ffn / block))](gu, out, d.ffn, BLOCK=block,
                                                                     num_warps=4)  # fmt: skip
        return out
