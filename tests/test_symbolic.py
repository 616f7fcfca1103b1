"""Symbolic what-ifs: formulas and crossovers against hand computation."""

from __future__ import annotations

import pytest

from gpumodel.errors import SpecError
from gpumodel.specs import get_gpu
from gpumodel.symbolic import allreduce_alpha_busbw, explain_symbolic

pytest.importorskip("sympy")

# H100 SXM bf16: 989.4 TFLOP/s dense over 3.35 TB/s
R_H100 = 989.4e12 / 3.35e12


def test_gemm_crossovers():
    e = explain_symbolic("gemm", "h100")
    assert e.ridge_point == pytest.approx(R_H100)
    # square: 2 n^3 / (3 n^2 b) = R  ->  n = 3 b R / 2
    assert e.crossovers[0].value == pytest.approx(3 * 2 * R_H100 / 2)
    # N = K = 4096: 2 M K^2 = R b (2 M K + K^2)  ->  M = R b K / (2 (K - R b))
    k = 4096
    assert e.crossovers[1].value == pytest.approx(R_H100 * 2 * k / (2 * (k - 2 * R_H100)))
    assert e.formulas[0].value == 2 * 4096**3 and "2*K*M*N" in e.formulas[0].expression


def test_decode_weight_bound_crossover_llama_3_8b():
    e = explain_symbolic("decode", "h100", model="llama-3-8b")
    # by hand, one layer: weights P and GEMM in+out elements per token A
    h, kv, f = 4096, 1024, 14336
    p = h * (h + 2 * kv) + h * h + 3 * h * f
    a = (h + h) + 2 * (h + kv) + (h + h) + 3 * (h + f)
    b = 2
    assert (e.parameters["P"], e.parameters["A"]) == (p, a)
    assert e.crossovers[0].value == pytest.approx(R_H100 * b * p / (2 * p - R_H100 * b * a))
    # weights dominating: R b / 2 ~ 295 tokens on H100 bf16 (JAX scaling book: ~298)
    assert e.crossovers[1].value == pytest.approx(R_H100) and 290 < e.crossovers[1].value < 300


def test_decode_with_long_context_never_turns_compute_bound():
    e = explain_symbolic("decode", "h100", model="llama-3-8b", context=2048)
    assert e.crossovers[-1].value is None and "never" in e.crossovers[-1].note


def test_attention_crossover():
    e = explain_symbolic("attention", "h100")
    # AI = 2 H s c / (b (H + G)); MHA, bf16, causal c = 1/2  ->  s* = 4 R
    assert e.crossovers[0].value == pytest.approx(4 * R_H100)
    assert e.crossovers[1].value == pytest.approx(2 * R_H100)  # non-causal
    assert e.crossovers[2].value == pytest.approx(128 / 2)  # naive: AI -> d / b
    gqa = explain_symbolic("attention", "h100", model="llama-3-8b")
    assert gqa.crossovers[0].value == pytest.approx(R_H100 * 2 * 40 / (2 * 32 * 0.5))


def test_allreduce_latency_crossover():
    e = explain_symbolic("allreduce", "h100", gpus=8)
    alpha, busbw = allreduce_alpha_busbw(get_gpu("h100"), 8)
    assert e.crossovers[0].value == pytest.approx(alpha * busbw * 8 / (2 * 7))
    assert e.formulas[1].value == pytest.approx(2 * 7 / 8)


def test_pretty_and_errors():
    e = explain_symbolic("gemm", "a100")
    assert "ridge point" in e.explain() and "─" in e.formulas[2].pretty
    with pytest.raises(SpecError, match="unknown topic"):
        explain_symbolic("conv", "h100")
