"""cuBLAS's split-K and an eager GEMM call's host time (gpumodel.model.splitk).

The rule is checked by hand (wave occupancy on 132 SMs), against a committed profiler trace of
an eager Llama-3-8B decode, against the H200 fit set it was not fitted on, and the shipped
constants against the fit of their committed H100 fit set."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel.model import splitk
from gpumodel.model.quantization import wave_efficiency
from gpumodel.model.splitk import split_k
from gpumodel.ops import Gemm
from tests.conftest import uniform_host

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "validation/results"
H100_SMS = 132  # specs/h100-sxm.yaml


def test_wave_occupancy_of_split_tiles_by_hand():
    # s slices of K run as many tiles as a batch of s products: 64 tiles of 32x64 -> 128
    assert wave_efficiency(8, 4096, (32, 64), H100_SMS) == pytest.approx(64 / 132)
    assert wave_efficiency(8, 4096, (32, 64), H100_SMS, batch=2) == pytest.approx(128 / 132)
    # 172 tiles: two waves, the second part-full
    assert wave_efficiency(8, 11008, (32, 64), H100_SMS) == pytest.approx(172 / 264)


def test_the_rule_by_hand():
    # Llama-3-8B q projection at batch 8: 1 x 64 tiles fill 64/132 of one wave; two K slices
    # (2048 each) fill 128/132, more than 1.3x: split
    assert split_k(8, 4096, 4096, "bf16", H100_SMS)
    # its gate projection: 224 tiles, 224/264 busy; two slices give 448/528, the same: no split
    assert not split_k(8, 14336, 4096, "bf16", H100_SMS)
    # 8 tiles would gain from any split, but K = 4095 cannot be cut into two slices of >= 2048;
    # K = 4096 can
    assert not split_k(8, 512, 4095, "bf16", H100_SMS)
    assert split_k(8, 512, 4096, "bf16", H100_SMS)
    # dtypes the rule does not model never split
    assert not split_k(8, 1024, 8192, "fp32", H100_SMS)
    assert not split_k(8, 1024, 8192, "tf32", H100_SMS)


def test_the_rule_matches_the_eager_decode_trace():
    """The committed eager decode of Llama-3-8B (batch 8, H100) launched one split-K reduction
    per split projection: the rule says q, k, v, o and down split (5 per layer) and gate, up
    and the LM head do not."""
    path = RESULTS / "steps-h100-run20/trace-llama3-8b-decode-eager.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    reductions = sum(1 for e in events if e.get("cat") == "kernel"
                     and "splitKreduce" in e.get("name", ""))  # fmt: skip
    steps = sum(1 for e in events if e.get("cat") == "cpu_op" and e.get("name") == "aten::linear"
                and e["args"].get("Input Dims", [None, None])[1] == [128256, 4096])  # fmt: skip
    h, kv, ffn, vocab = 4096, 1024, 14336, 128256
    layer = [(h, h), (kv, h), (kv, h), (h, h), (ffn, h), (ffn, h), (h, ffn)]  # (N, K) each
    per_layer = sum(split_k(8, n, k, "bf16", H100_SMS) for n, k in layer)
    assert per_layer == 5
    assert not split_k(8, vocab, h, "bf16", H100_SMS)
    assert steps >= 1 and reductions == steps * 32 * per_layer


def _fit_module():
    sys.path.insert(0, str(ROOT / "validation/fitset"))
    import fit_gemm_launches

    return fit_gemm_launches


def test_shipped_rule_is_the_fit_of_its_committed_fit_set():
    got = _fit_module().fit()
    assert tuple(got["tile"]) == (splitk.TILE_M, splitk.TILE_N)
    assert got["min_k"] == splitk.MIN_K_PER_SPLIT
    assert got["gain"] == splitk.SPLIT_GAIN
    assert got["host_factor"] == splitk.SPLIT_HOST_FACTOR


def test_the_rule_carries_to_the_h200_fit_set_it_was_not_fitted_on():
    """The H200's own fit set (same SM count, same cuBLAS): 278 of 292 bf16/fp16 shapes and
    40 of 40 fp8 ones agree with the profiler's kernel lists."""
    fit = _fit_module()
    pts = fit.points(RESULTS / "h200-sxm/gemm-launches-2026-11-28/gemm-launches.json")
    for group, least in ((("bf16", "fp16"), 0.94), (("fp8",), 1.0)):
        mine = [p for p in pts if p["model_dtype"] in group]
        agree = sum(split_k(p["M"], p["N"], p["K"], p["model_dtype"], H100_SMS) == p["split"]
                    for p in mine)  # fmt: skip
        assert agree / len(mine) >= least


def test_an_eager_split_call_costs_the_factor_on_the_host():
    host = uniform_host(10e-6)
    kv = Gemm(m=1, n=1024, k=4096, dtype="bf16", transpose_b=True)
    big_m = Gemm(m=2048, n=1024, k=4096, dtype="bf16", transpose_b=True)
    assert kv.host_call_factor(gm.get_gpu("h100-sxm")) == splitk.SPLIT_HOST_FACTOR
    assert big_m.host_call_factor(gm.get_gpu("h100-sxm")) == 1.0
    p = gm.predict(kv, "h100-sxm", host=host)
    dispatch = {t.name: t for t in p.terms}["eager dispatch"]
    assert dispatch.value == pytest.approx(10e-6 * splitk.SPLIT_HOST_FACTOR)
    assert "splits K" in dispatch.note
    assert p.time_s == pytest.approx(10e-6 * splitk.SPLIT_HOST_FACTOR)  # the host binds
    # a batch of products (bmm) is not priced by the rule
    assert Gemm(m=1, n=1024, k=4096, batch=4).host_call_factor(gm.get_gpu("h100-sxm")) == 1.0


def test_an_fp8_product_is_a_scaled_mm_call():
    measured = uniform_host(10e-6).model_copy(update={"eager_op_s": uniform_host(
        10e-6).eager_op_s.model_copy(update={"scaled_mm": 16e-6})})  # fmt: skip
    op = Gemm(m=64, n=5120, k=2048, dtype="fp8", transpose_b=True)  # no split (K too short)
    assert op.host_kind == "scaled_mm"
    assert Gemm(m=64, n=5120, k=2048).host_kind == "matmul"
    p = gm.predict(op, "h100-sxm", host=measured)
    assert {t.name: t for t in p.terms}["eager dispatch"].value == pytest.approx(16e-6)
    # a profile that did not time _scaled_mm stands in its matmul figure, and says so
    old = gm.predict(op, "h100-sxm", host=uniform_host(10e-6))
    term = {t.name: t for t in old.terms}["eager dispatch"]
    assert term.value == pytest.approx(10e-6)
    assert "scaled_mm not measured" in term.note
