"""Memory: ZeRO model states, Korthikanti activations, KV cache, fits and the largest batch."""

from __future__ import annotations

import re

import pytest

from gpumodel.errors import InfeasibleError
from gpumodel.llm import (
    activation_bytes_per_layer,
    fits,
    max_batch,
    max_context,
    memory,
    model_state_bytes,
)


def test_zero_paper_figure_1():
    # Rajbhandari et al. 2020 (ZeRO), Figure 1: 7.5B parameters, Nd = 64, K = 12:
    # baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB
    got = [round(sum(model_state_bytes(7.5e9, zero, 64)) / 1e9, 1) for zero in range(4)]
    assert got == [120.0, 31.4, 16.6, 1.9]


def test_zero_bytes_per_parameter():
    # ZeRO-1 4 + 12/Nd, ZeRO-2 2 + 14/Nd, ZeRO-3 16/Nd bytes per parameter
    nd = 8
    assert sum(model_state_bytes(1, 1, nd)) == pytest.approx(4 + 12 / nd)
    assert sum(model_state_bytes(1, 2, nd)) == pytest.approx(2 + 14 / nd)
    assert sum(model_state_bytes(1, 3, nd)) == pytest.approx(16 / nd)


def test_korthikanti_activations():
    # Korthikanti et al. 2022, Table 2: s b h (34 + 5 a s / h) without parallelism
    s, b, h, a = 2048, 1, 4096, 32
    assert activation_bytes_per_layer(s, b, h, a, flash=False) == s * b * h * (34 + 5 * a * s / h)
    # tensor + sequence parallel: s b h / t (34 + 5 a s / h)
    assert activation_bytes_per_layer(s, b, h, a, t=8, sequence_parallel=True, flash=False) == (
        s * b * h / 8 * (34 + 5 * a * s / h)
    )
    # tensor parallel only: s b h (10 + 24/t + 5 a s / (h t))
    assert activation_bytes_per_layer(s, b, h, a, t=8, flash=False) == pytest.approx(
        s * b * h * (10 + 24 / 8 + 5 * a * s / (h * 8))
    )
    # flash attention (and selective recompute) drop the 5 a s^2 b term; full recompute 2 s b h
    assert activation_bytes_per_layer(s, b, h, a) == 34 * s * b * h
    assert activation_bytes_per_layer(s, b, h, a, recompute="full") == 2 * s * b * h


def test_inference_kv_cache_in_memory():
    m = memory("llama-2-7b", "h100", batch=4, seq=2048)
    assert m.kv_cache_bytes == 4 * 2048 * 524288
    assert m.weights_bytes == 6_738_415_616 * 2 and m.optimizer_bytes == 0


def test_infeasible_message():
    with pytest.raises(InfeasibleError, match=r"needs \d+\.\d GB, has 80\.0 GB") as info:
        fits("llama-2-70b", "h100", batch=1, seq=4096, strict=True)
    assert info.value.needed > info.value.available == 80e9
    ok = fits("llama-2-70b", "h100", batch=1, seq=4096, tp=2)
    assert ok.fits and re.fullmatch(r"needs \d+\.\d GB, has 80\.0 GB", ok.message())


def test_infeasible_message_counts_terabytes_as_tb():
    # Llama-3-405B's KV cache: 126 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 516,096 B a
    # token; x 1000 x 100,000 tokens = 51.61 TB, beside 811.7 GB of bf16 weights: 52.42 TB
    m = memory("llama-3-405b", "h100", batch=1000, seq=100_000)
    assert m.kv_cache_bytes == 1000 * 100_000 * 126 * 8 * 128 * 2 * 2
    assert re.fullmatch(r"needs 52\.4\d TB, has 80\.0 GB", m.message())


def test_max_batch_and_context_are_the_edge():
    b = max_batch("llama-3-8b", "h100", seq=4096)
    assert b > 1
    assert memory("llama-3-8b", "h100", batch=b, seq=4096).fits
    assert not memory("llama-3-8b", "h100", batch=b + 1, seq=4096).fits
    assert max_context("llama-3-8b", "h100", batch=1) == 8192  # the model's own limit binds
    assert max_batch("llama-2-70b", "h100", seq=4096) == 0


def test_training_memory_with_zero_and_parallelism():
    base = memory("llama-2-70b", "h100", batch=1, seq=4096, train=True, tp=8, dp=8, zero=0)
    z3 = memory("llama-2-70b", "h100", batch=1, seq=4096, train=True, tp=8, dp=8, zero=3,
                recompute="full")  # fmt: skip
    psi = 68_976_648_192 / 8
    assert base.weights_bytes + base.gradients_bytes + base.optimizer_bytes == pytest.approx(
        16 * psi
    )
    assert z3.weights_bytes + z3.gradients_bytes + z3.optimizer_bytes == pytest.approx(16 * psi / 8)
    assert z3.sequence_parallel and z3.activations_bytes < base.activations_bytes
    assert z3.fits and not base.fits
