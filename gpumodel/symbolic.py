"""Symbolic what-ifs: FLOPs, bytes and arithmetic intensity as formulas in an op's parameters,
and the crossovers solved exactly (sympy), with the numbers for a GPU beside them.

    explain_symbolic("gemm", "h100")        square and skinny GEMM ridge crossings
    explain_symbolic("attention", "h100")   sequence length where flash attention turns compute-bound
    explain_symbolic("decode", "h100", model="llama-3-8b")
                                            decode batch where a layer stops being weight-bound
    explain_symbolic("allreduce", "h100")   message size where an all-reduce stops being latency-bound

The byte and FLOP formulas are the op model's own (gpumodel.ops.Gemm, Attention, the LLM layer
decomposition, the collective model); the ridge point R = peak / bandwidth is the roofline's
(Williams et al. 2009). sympy is imported inside the functions that use it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gpumodel.errors import SpecError
from gpumodel.specs import BYTES_PER_ELEMENT, GPUSpec, get_gpu

Topic = Literal["gemm", "attention", "decode", "allreduce"]
TOPICS: tuple[str, ...] = ("gemm", "attention", "decode", "allreduce")


class Formula(BaseModel):
    """A named formula, its text and pretty forms, and its value at the given parameters."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    name: str
    expression: str
    pretty: str
    value: float | None = None
    unit: str = ""
    note: str = ""


class SymbolicExplanation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    topic: str
    gpu: str
    dtype: str
    ridge_point: float
    parameters: dict[str, float]
    formulas: tuple[Formula, ...]
    crossovers: tuple[Formula, ...]
    notes: tuple[str, ...] = ()

    def crossover(self, name: str) -> Formula:
        for c in self.crossovers:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def explain(self) -> str:
        params = ", ".join(f"{k} = {_num(v)}" for k, v in self.parameters.items())
        lines = [
            f"{self.topic} on {self.gpu} ({self.dtype}): ridge point R = peak / bandwidth = "
            f"{self.ridge_point:.4g} FLOP/B",
            f"  at {params}",
            "",
        ]
        for title, items in (("formulas", self.formulas), ("crossovers", self.crossovers)):
            lines.append(f"{title}:")
            for f in items:
                value = f" = {_num(f.value)} {f.unit}".rstrip() if f.value is not None else ""
                lines.append(f"  {f.name}{value}")
                lines += ["      " + row for row in f.pretty.splitlines()]
                if f.note:
                    lines.append(f"    ({f.note})")
            lines.append("")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines).rstrip()


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
        return f"{v:.4g}"
    return f"{v:,.4g}" if abs(v) >= 1000 else f"{v:.4g}"


def _formula(name: str, expr: Any, subs: dict[Any, float] | None = None, unit: str = "",
             note: str = "") -> Formula:  # fmt: skip
    import sympy

    value = None
    if subs is not None:
        v = sympy.N(expr.subs(subs))
        value = float(v) if v.is_real and v.is_finite else None
    return Formula(name=name, expression=sympy.sstr(expr), pretty=sympy.pretty(expr, use_unicode=True),
                   value=value, unit=unit, note=note)  # fmt: skip


def _ridge(g: GPUSpec, dtype: str) -> tuple[float, float, float]:
    peak = g.peak_flops(dtype, "tensor") or g.peak_flops(dtype, "vector")
    if not peak:
        raise SpecError(f"{g.id} has no {dtype} rate in its spec")
    bw = g.memory_bandwidth_bytes_per_s
    return peak / bw, peak, bw


def explain_symbolic(
    topic: Topic | str,
    gpu: GPUSpec | str = "h100",
    *,
    model: Any = None,
    dtype: str = "bf16",
    gpus: int = 8,
    context: int = 0,
    size: int = 4096,
    calibration: Any = "none",
) -> SymbolicExplanation:
    """Formulas and solved crossovers for ``topic`` on ``gpu``. ``model`` (decode, attention)
    takes widths from a model preset; ``size`` is the default matrix side / hidden size;
    ``context`` the decode context; ``gpus`` the all-reduce rank count."""
    from gpumodel._validators import _show, check_int, check_name

    g = get_gpu(gpu)
    if not isinstance(dtype, str) or dtype not in BYTES_PER_ELEMENT:
        raise SpecError(f"unknown dtype {_show(dtype)}")
    check_int(gpus, "gpus", le=10**6)
    check_int(size, "size")
    check_int(context, "context", ge=0)
    # checked whatever the topic uses (an unknown model or calibration is never ignored)
    if model is not None:
        from gpumodel.llm.models import get_model

        get_model(model)
    if calibration is not None:
        from gpumodel.calibration import resolve

        resolve(calibration, g)
    key = check_name(topic, "topic").strip().lower().replace("-", "").replace("_", "")
    if key == "gemm":
        return _gemm(g, dtype, size)
    if key == "attention":
        return _attention(g, dtype, model)
    if key == "decode":
        return _decode(g, dtype, model, context, size)
    if key in ("allreduce", "collective"):
        return _allreduce(g, dtype, gpus, calibration)
    raise SpecError(f"unknown topic '{topic}'; choose from {', '.join(TOPICS)}")


# ---------------------------------------------------------------------------------------------


def _gemm(g: GPUSpec, dtype: str, size: int) -> SymbolicExplanation:
    import sympy

    M, N, K, b, R, n = sympy.symbols("M N K b R n", positive=True)
    ridge, peak, bw = _ridge(g, dtype)
    beta = BYTES_PER_ELEMENT[dtype]
    # NVIDIA "Matrix Multiplication Background": FLOPs 2MNK, bytes (MK + KN + MN) * b
    flops = 2 * M * N * K
    nbytes = b * (M * K + K * N + M * N)
    ai = flops / nbytes
    vals = {M: size, N: size, K: size, b: beta, R: ridge}
    square = sympy.solve(sympy.Eq(ai.subs({M: n, N: n, K: n}), R), n)[0]
    skinny = sympy.solve(sympy.Eq(ai.subs({N: K}), R), M)[0]
    limit = sympy.limit(skinny, K, sympy.oo)
    return SymbolicExplanation(
        topic="gemm", gpu=g.id, dtype=dtype, ridge_point=ridge,
        parameters={"M": size, "N": size, "K": size, "b": beta, "R": ridge},
        formulas=(
            _formula("FLOPs", flops, vals, "FLOP"),
            _formula("bytes (each operand once)", nbytes, vals, "B"),
            _formula("arithmetic intensity", sympy.simplify(ai), vals, "FLOP/B"),
        ),
        crossovers=(
            _formula("square GEMM side n where AI = R", square, vals, "",
                     "M = N = K = n: compute-bound above it"),
            _formula("rows M where a K x K weight GEMM turns compute-bound", skinny,
                     vals, "rows", f"N = K = {size}; decode's batch of tokens is M"),
            _formula("same, K -> infinity", limit, vals, "rows",
                     "weights dominate the bytes: M* = R b / 2"),
        ),
        notes=(f"peak {peak / 1e12:.4g} TFLOP/s ({dtype}), bandwidth {bw / 1e12:.4g} TB/s",),
    )  # fmt: skip


def _attention(g: GPUSpec, dtype: str, model: Any) -> SymbolicExplanation:
    import sympy

    from gpumodel.llm.models import get_model

    Bt, H, G, s, d, b, c, R = sympy.symbols("B H G s d b c R", positive=True)
    ridge, peak, bw = _ridge(g, dtype)
    beta = BYTES_PER_ELEMENT[dtype]
    heads, kv, hd, label = 32, 32, 128, "32 heads, no GQA, head_dim 128"
    if model is not None:
        spec = get_model(model)
        heads, kv, hd = spec.heads, spec.kv_heads, spec.head_dim
        label = f"{spec.id}: {heads} heads, {kv} KV heads, head_dim {hd}"
    # gpumodel.ops.Attention (flash): 4*B*H*s^2*d*c matmul FLOPs (c = 1/2 causal);
    # bytes = Q in + O out + K, V in = b*(2*B*H*s*d + 2*B*G*s*d) (Dao et al. 2022)
    flops = 4 * Bt * H * s**2 * d * c
    flash_bytes = b * (2 * Bt * H * s * d + 2 * Bt * G * s * d)
    naive_bytes = flash_bytes + 4 * b * Bt * H * s**2 * c  # scores written, read twice, + PV read
    ai = sympy.simplify(flops / flash_bytes)
    ai_naive = sympy.simplify(flops / naive_bytes)
    vals = {Bt: 1, H: heads, G: kv, s: 4096, d: hd, b: beta, c: sympy.Rational(1, 2), R: ridge}
    s_star = sympy.solve(sympy.Eq(ai, R), s)[0]
    full = {**vals, c: 1}
    naive_limit = sympy.limit(ai_naive, s, sympy.oo)
    return SymbolicExplanation(
        topic="attention", gpu=g.id, dtype=dtype, ridge_point=ridge,
        parameters={"B": 1, "H": heads, "G": kv, "s": 4096, "d": hd, "b": beta, "c": 0.5,
                    "R": ridge},
        formulas=(
            _formula("FLOPs (QK^T and PV)", flops, vals, "FLOP", "c = 1/2 causal, 1 full"),
            _formula("bytes, flash (Q, K, V in, O out)", flash_bytes, vals, "B"),
            _formula("arithmetic intensity, flash", ai, vals, "FLOP/B",
                     "independent of batch and head_dim"),
            _formula("arithmetic intensity, naive (score matrix in HBM)", ai_naive, vals,
                     "FLOP/B"),
        ),
        crossovers=(
            _formula("sequence length s* where causal flash attention turns compute-bound",
                     s_star, vals, "tokens", label),
            _formula("same, non-causal (c = 1)", s_star, full, "tokens"),
            _formula("naive attention AI as s -> infinity", naive_limit, vals, "FLOP/B",
                     "below the ridge it never turns compute-bound"
                     if float(naive_limit.subs(vals)) < ridge else ""),
        ),
        notes=(f"ridge uses the {dtype} tensor peak {peak / 1e12:.4g} TFLOP/s and "
               f"{bw / 1e12:.4g} TB/s; softmax FLOPs (vector units) are left out",),
    )  # fmt: skip


def decode_layer_shape(model: Any = None, size: int = 4096) -> dict[str, float]:
    """P: weights one layer reads (GEMM parameters; every expert of an MoE layer, as at large
    batch), F: weights one token multiplies (F = P when dense; top_k experts for MoE),
    A: GEMM input + output elements per token, H, G, d: heads, KV heads, head_dim. Without a
    model: a GPT layer of hidden ``size`` (12 h^2 weights; q,k,v,o,up,down in+out = 16 h)."""
    if model is None:
        h = float(size)
        return {"P": 12 * h * h, "F": 12 * h * h, "A": 16 * h, "H": size / 128,
                "G": size / 128, "d": 128.0, "label": 0.0}  # fmt: skip
    from gpumodel.llm.layers import decoder_layer
    from gpumodel.llm.models import get_model
    from gpumodel.ops import Gemm

    spec = get_model(model)
    layer = decoder_layer(spec, 1, 1, 1, fusion="unfused", kv_cache="none")
    gemms = [(e.op, e.name.startswith("expert_")) for e in layer if isinstance(e.op, Gemm)]
    experts, top_k = (spec.moe.experts, spec.moe.top_k) if spec.moe else (1, 1)
    p = sum(op.n * op.k * (experts if ex else 1) for op, ex in gemms)
    f = sum(op.n * op.k * (top_k if ex else 1) for op, ex in gemms)
    a = sum((op.n + op.k) * (top_k if ex else 1) for op, ex in gemms)
    return {"P": float(p), "F": float(f), "A": float(a), "H": float(spec.heads),
            "G": float(spec.kv_heads), "d": float(spec.head_dim), "label": 1.0}  # fmt: skip


def _decode(g: GPUSpec, dtype: str, model: Any, context: int, size: int) -> SymbolicExplanation:
    import sympy

    Bt, P, F, A, H, G, d, c, b, R = sympy.symbols("B P F A H G d c b R", positive=True)
    ridge = _ridge(g, dtype)[0]
    beta = BYTES_PER_ELEMENT[dtype]
    shape = decode_layer_shape(model, size)
    label = (f"{model if isinstance(model, str) else getattr(model, 'id', 'model')}"
             if shape["label"] else f"GPT layer, hidden {size}")  # fmt: skip
    moe = shape["F"] != shape["P"]
    # one decoder layer, B tokens: every GEMM weight read once (P*b), each token's GEMM
    # inputs and outputs (A*b), and the K, V cache of c tokens per sequence (2*G*d*c*b);
    # FLOPs 2 per weight a token uses (F; = P for a dense layer) + attention 4*H*d*c (QK^T, PV)
    flops = 2 * Bt * (F if moe else P) + 4 * Bt * H * d * c
    nbytes = b * (P + Bt * A + 2 * Bt * G * d * c)
    ai = flops / nbytes
    vals = {P: shape["P"], F: shape["F"], A: shape["A"], H: shape["H"], G: shape["G"],
            d: shape["d"], c: context, b: beta, R: ridge, Bt: 1}  # fmt: skip
    b_star = sympy.solve(sympy.Eq(ai, R), Bt)[0]
    b_star_c0 = sympy.simplify(b_star.subs(c, 0))
    b_limit = sympy.limit(b_star_c0.subs(F, P), P, sympy.oo)
    crossovers = [
        _formula("decode batch B* where the layer stops being weight-bound (no KV cache)",
                 b_star_c0, vals, "tokens", label),
        _formula("same, dense weights dominating (F = P -> infinity)", b_limit, vals, "tokens",
                 "R b / 2: the GEMM ridge in tokens"),
    ]  # fmt: skip
    notes = [f"P = {shape['P']:.4g} weights and A = {shape['A']:.4g} activation elements per "
             f"token in one layer ({label})"]  # fmt: skip
    if moe:
        notes.append(f"MoE: a token multiplies F = {shape['F']:.4g} of the P weights (its top-k "
                     "experts); at the crossover batch every expert is active, so all P are read")  # fmt: skip
    if context:
        at_c = sympy.N(b_star.subs(vals))
        if at_c.is_real and at_c > 0:
            crossovers.append(_formula(f"B* at context {context}", b_star, vals, "tokens"))
        else:  # the denominator 2P + 4Hdc - RbA - 2RbGdc is not positive
            notes.append(f"at context {context} the KV-cache reads keep the layer memory-bound "
                         "at every batch")  # fmt: skip
            crossovers.append(_formula(f"B* at context {context}", b_star, None, "tokens",
                                       "never: memory-bound at any batch"))  # fmt: skip
    return SymbolicExplanation(
        topic="decode", gpu=g.id, dtype=dtype, ridge_point=ridge,
        parameters={"P": shape["P"], **({"F": shape["F"]} if moe else {}), "A": shape["A"],
                    "H": shape["H"], "G": shape["G"], "d": shape["d"], "c": context, "b": beta,
                    "R": ridge, "B": 1},
        formulas=(
            _formula("FLOPs of one layer", flops, vals, "FLOP"),
            _formula("bytes of one layer", nbytes, vals, "B"),
            _formula("arithmetic intensity", ai, vals, "FLOP/B"),
        ),
        crossovers=tuple(crossovers), notes=tuple(notes),
    )  # fmt: skip


def allreduce_alpha_busbw(g: GPUSpec, gpus: int, dtype: str = "bf16",
                          calibration: Any = "none") -> tuple[float, float]:  # fmt: skip
    """(alpha, busbw) read off the collective model: alpha = time of a 1-byte all-reduce,
    busbw = its bus bandwidth at 4 GB (the large-message plateau)."""
    from gpumodel.ops.collectives import AllReduce
    from gpumodel.predict import predict

    tiny = predict(AllReduce(bytes=1, gpus=gpus, dtype=dtype), g, calibration)  # type: ignore[arg-type]
    big = predict(AllReduce(bytes=4e9, gpus=gpus, dtype=dtype), g, calibration)  # type: ignore[arg-type]
    return tiny.time_s, float(big.details["busbw_bytes_per_s"])


def _allreduce(g: GPUSpec, dtype: str, gpus: int, calibration: Any) -> SymbolicExplanation:
    import sympy

    S, n, alpha, busbw = sympy.symbols("S n alpha busbw", positive=True)
    if gpus < 2:
        raise SpecError("an all-reduce needs at least 2 GPUs (--gpus)")
    a_val, bus_val = allreduce_alpha_busbw(g, gpus, dtype, calibration)
    # nccl-tests doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n for all-reduce, so the
    # bandwidth term of t = alpha + S * 2(n-1)/n / busbw
    factor = 2 * (n - 1) / n
    t = alpha + S * factor / busbw
    s_star = sympy.solve(sympy.Eq(alpha, S * factor / busbw), S)[0]
    vals = {n: gpus, alpha: a_val, busbw: bus_val, S: 1 << 20}
    ridge = _ridge(g, dtype)[0]
    return SymbolicExplanation(
        topic="allreduce", gpu=g.id, dtype=dtype, ridge_point=ridge,
        parameters={"n": gpus, "alpha": a_val, "busbw": bus_val, "S": float(1 << 20)},
        formulas=(
            _formula("time", t, vals, "s", "alpha-beta form of the collective model"),
            _formula("bus factor", factor, vals, "", "nccl-tests: busbw = algbw x 2(n-1)/n"),
        ),
        crossovers=(
            _formula("message size S* where bandwidth time equals the latency floor", s_star,
                     vals, "B", "below it the all-reduce is latency-bound"),
        ),
        notes=(f"alpha = {a_val * 1e6:.3g} us (1-byte all-reduce) and busbw = "
               f"{bus_val / 1e9:.4g} GB/s (4 GB all-reduce) from gpumodel's collective model "
               f"on {gpus} x {g.id}",),
    )  # fmt: skip
