import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpumodel as gm
from gpumodel.ops import Attention, Conv2d, Elementwise, Gemm, HostTransfer, Kernel
from gpumodel.ops.attention import SOFTMAX_FLOPS_PER_SCORE, WIDE_HEAD_WORK_FACTOR
from gpumodel.ops.matmul import LAYOUT_TRANSPOSE_FAMILY

RESULTS = Path(__file__).resolve().parents[1] / "validation" / "results"


def test_seed_qkt_example_ai_and_bounds():
    """Seed 001: QK^T for batch 32, 16 heads, seq 1024, head_dim 64, fp16 on an A100.
    FLOPs 2*32*16*1024*1024*64 = 68.7e9; bytes Q+K (2*32*16*1024*64*2 B = 134 MB) + scores
    (32*16*1024*1024*2 B = 1074 MB) -> AI = 56.9 FLOP/B."""
    a100 = gm.get_gpu("a100")
    p = gm.predict(Attention(batch=32, heads=16, seq=1024, head_dim=64, dtype="fp16", impl="naive"),
                   a100, "none")  # fmt: skip
    qkt = p.kernels[0]
    assert qkt.name == "QK^T"
    assert qkt.flops == 2 * 32 * 16 * 1024 * 1024 * 64
    assert qkt.flops / qkt.bytes == pytest.approx(56.9, abs=0.05)
    vector_ridge = a100.peak_flops("fp16", "vector") / a100.memory_bandwidth_bytes_per_s  # 38.3
    tensor_ridge = a100.peak_flops("fp16", "tensor") / a100.memory_bandwidth_bytes_per_s  # 153
    assert vector_ridge < 56.9 < tensor_ridge  # compute-bound vs 78 TF, memory-bound vs 312 TF
    assert qkt.bound == "memory"


def test_gemm_work_and_roofline_time():
    h100 = gm.get_gpu("h100")
    p = gm.predict(Gemm(m=2048, n=4096, k=4096, dtype="bf16"), h100, "none")
    assert p.flops == 2 * 2048 * 4096 * 4096
    assert p.bytes == (2048 * 4096 + 4096 * 4096 + 2048 * 4096) * 2
    assert p.ridge_point == pytest.approx(295.3, abs=0.1)
    assert p.bound == "compute"
    # roofline 68.72e9 / 989.4e12 = 69.46 us, plus the 2.5 us default launch floor
    assert p.time_s == pytest.approx(69.46e-6 + 2.5e-6, rel=1e-3)


def test_seed_polynomial_kernel_non_fma_halves_the_roof(tiny):
    n, k = 2**24, 1000
    fma = gm.predict(Kernel(flops=2 * k * n, bytes=8 * n, fma=True, threads=n), tiny, "none")
    mix = gm.predict(Kernel(flops=2 * k * n, bytes=8 * n, fma=False, threads=n), tiny, "none")
    assert fma.bound == mix.bound == "compute"
    # compute time doubles: 2*1000*2^24 / 10e12 = 3.36 ms -> 6.71 ms
    assert mix.time_s - 2.5e-6 == pytest.approx(2 * (fma.time_s - 2.5e-6), rel=1e-9)
    assert fma.arithmetic_intensity == pytest.approx(k / 4)  # the seed's AI = k/4


def test_small_op_is_never_nanoseconds():
    p = gm.predict(Elementwise(op="add", n=1024, dtype="fp32"), "h100", "none")
    assert p.time_s >= 2e-6 and p.bound == "launch"


def test_flash_attention_flops_causal_and_gqa():
    h100 = gm.get_gpu("h100")
    full = gm.predict(Attention(batch=2, heads=32, seq=4096, head_dim=128, impl="flash"), h100,
                      "none")
    causal = gm.predict(
        Attention(batch=2, heads=32, seq=4096, head_dim=128, causal=True, impl="flash"), h100,
        "none"
    )
    mm = 4 * 2 * 32 * 4096 * 4096 * 128
    assert full.flops_by_unit["tensor:bf16"] == mm
    # reported: half the products; priced: plus the diagonal tiles the causal kernel computes
    # whole, 32 query tiles per head x 1.75 tiles of 128 x 128 scores x 4 x 128 FLOP, 64 heads
    assert causal.flops_by_unit["tensor:bf16"] == mm / 2
    kernel = Attention(batch=2, heads=32, seq=4096, head_dim=128, causal=True,
                       impl="flash").kernels(h100)[0]
    assert kernel.flops[0].flops == mm / 2 + 64 * 32 * 1.75 * 128 * 128 * 4 * 128
    mha = gm.predict(Attention(batch=8, heads=32, seq=1, kv_seq=8192, head_dim=128, impl="flash"),
                     h100, "none")
    gqa = gm.predict(
        Attention(batch=8, heads=32, kv_heads=8, seq=1, kv_seq=8192, head_dim=128, impl="flash"),
        h100, "none"
    )
    assert mha.bound == gqa.bound == "memory"
    # decode reads the KV cache: 2 * 8 * kv_heads * 8192 * 128 * 2 B; GQA 8/32 of it
    assert gqa.bytes == pytest.approx(2 * 8 * 32 * 128 * 2 + 2 * 8 * 8 * 8192 * 128 * 2)
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        Attention(seq=16, heads=32, kv_heads=5)


def test_conv2d_as_implicit_gemm():
    stem = Conv2d(batch=1, in_channels=3, out_channels=64, height=224, width=224, kernel=7,
                  stride=2, padding=3)  # fmt: skip
    assert (stem.out_height, stem.out_width) == (112, 112)
    g = stem.as_gemm()
    assert (g.m, g.n, g.k) == (112 * 112, 64, 3 * 49)
    with pytest.raises(ValueError, match="does not fit"):
        Conv2d(batch=1, in_channels=3, out_channels=8, height=2, width=2, kernel=7)


def test_conv_with_unaligned_channels_runs_on_cuda_cores():
    """An RGB stem (3 channels x 2 bytes = 6 bytes, not a multiple of 16) has no tensor-core
    path: it is timed on the FP32 vector roof, 67 TFLOP/s on an H100 SXM, whatever its dtype;
    64 channels x 2 bytes = 128 bytes is aligned and stays on the bf16 tensor roof."""
    h100 = gm.get_gpu("h100")
    stem = Conv2d(batch=8, in_channels=3, out_channels=64, height=224, width=224, kernel=7,
                  stride=2, padding=3, dtype="bf16", layout="channels_last")  # fmt: skip
    assert stem.family == "conv2d:unaligned-channels"
    assert stem.model_copy(update={"dtype": "tf32"}).family == "conv2d:unaligned-channels"
    p = gm.predict(stem, h100, "none")
    assert (p.unit, p.dtype) == ("vector", "fp32")
    assert p.peak_flops == pytest.approx(66.9e12, rel=0.01)
    assert "CUDA-core" in p.explain()
    body = stem.model_copy(update={"in_channels": 64})
    assert body.family == "conv2d:bf16:implicit"
    assert gm.predict(body, h100, "none").unit == "tensor"


def test_conv_kernel_classes():
    """1x1 at stride 1 reads every pixel in order: a plain GEMM. A window (3x3) or a stride
    (ResNet's 1x1 stride-2 downsampling) needs an implicit GEMM that gathers its rows."""

    def family(kernel: int, stride: int, dtype: str = "bf16") -> str:
        return Conv2d(batch=8, in_channels=256, out_channels=512, height=56, width=56,
                      kernel=kernel, stride=stride, dtype=dtype,
                      layout="channels_last").family  # fmt: skip

    assert family(1, 1) == "conv2d:bf16:gemm"
    assert family(1, 2) == "conv2d:bf16:implicit"
    assert family(3, 1, "tf32") == "conv2d:tf32:implicit"


def test_conv_families_per_layout():
    """bf16/TF32 share one compute class across layouts (NCHW adds transposes around it);
    cuDNN's native NCHW kernels (plain 1x1 GEMMs, every fp32 convolution) are their own."""

    def conv(**kw) -> Conv2d:
        base = dict(batch=8, in_channels=64, out_channels=64, height=56, width=56, kernel=3,
                    padding=1)  # fmt: skip
        return Conv2d(**{**base, **kw})

    assert conv().layout == "nchw"  # PyTorch's default memory format
    assert conv(layout="nchw").family == conv(layout="channels_last").family
    # a window at stride 1 is where cuDNN may run Winograd or FFT on CUDA cores
    assert conv(dtype="fp32").family == "conv2d:fp32:nchw:fast"
    # fp32 runs cuDNN's NCHW CUDA-core kernels in either layout (channels-last: transposed)
    assert conv(dtype="fp32", layout="channels_last").family == "conv2d:fp32:nchw:fast"
    assert conv(dtype="fp32", stride=2).family == "conv2d:fp32:nchw:implicit"
    assert conv(dtype="fp32", layout="channels_last", stride=2).family == (
        "conv2d:fp32:nchw:implicit")
    assert conv(dtype="tf32").family == "conv2d:tf32:implicit"  # tensor cores: no fast class
    assert conv(dtype="fp32", kernel=1, padding=0).family == "conv2d:fp32:nchw:gemm"
    assert conv(kernel=1, padding=0).family == "conv2d:bf16:nchw:gemm"
    assert conv(kernel=1, padding=0, layout="channels_last").family == "conv2d:bf16:gemm"
    assert conv(in_channels=3, dtype="fp32").family == "conv2d:fp32:unaligned-channels"
    assert conv(in_channels=3, dtype="tf32").family == "conv2d:unaligned-channels"


def test_nchw_convolution_layout_transposes():
    """NCHW bf16 3x3, batch 32, 64 -> 64 channels at 56x56, padding 1 (output 56x56):
    input and output 32*64*56*56*2 B = 12,845,056 B each, filter 64*64*9*2 B = 73,728 B.
    Each transpose reads and writes its tensor once (2x its bytes) in the transpose family;
    the convolution itself is the channels-last kernel unchanged."""
    h100 = gm.get_gpu("h100")
    nchw = Conv2d(batch=32, in_channels=64, out_channels=64, height=56, width=56, kernel=3,
                  padding=1)  # fmt: skip
    last = nchw.model_copy(update={"layout": "channels_last"})
    ks = nchw.kernels(h100)
    assert [k.family for k in ks] == [LAYOUT_TRANSPOSE_FAMILY, LAYOUT_TRANSPOSE_FAMILY, None,
                                      LAYOUT_TRANSPOSE_FAMILY]  # fmt: skip
    assert [k.bytes for k in ks[:2]] + [ks[3].bytes] == [2 * 12_845_056, 2 * 73_728,
                                                          2 * 12_845_056]  # fmt: skip
    assert ks[2] == last.kernels(h100)[0]
    t_nchw = gm.predict(nchw, h100, "none").time_s
    t_last = gm.predict(last, h100, "none").time_s
    # the transposes move 51.7 MB at no more than the 3.35 TB/s HBM3 peak: >= 15.4 us more
    assert t_nchw - t_last >= 4 * 12_845_056 / 3.35e12
    # no transposes: a plain 1x1 GEMM reads NCHW as it is; fp32 has native NCHW kernels
    one = nchw.model_copy(update={"kernel": 1, "padding": 0})
    assert len(one.kernels(h100)) == 1
    assert len(nchw.model_copy(update={"dtype": "fp32"}).kernels(h100)) == 1
    # a strided 1x1 or an unaligned stem still gathers through the NHWC kernel
    assert len(one.model_copy(update={"stride": 2}).kernels(h100)) == 4
    stem = Conv2d(batch=8, in_channels=3, out_channels=64, height=224, width=224, kernel=7,
                  stride=2, padding=3)  # fmt: skip
    assert len(stem.kernels(h100)) == 4


def test_channels_last_fp32_convolution_runs_the_nchw_kernel_between_transposes():
    """fp32, channels-last, batch 128, 1x1 256 -> 64 on 56x56: cuDNN runs its NCHW fp32 kernel
    between an NHWC->NCHW input transpose (128*256*56*56*4 B = 411,041,792 B) and an
    NCHW->NHWC output transpose (102,760,448 B); a 1x1 filter needs none. The shipped H100
    calibration's own measurements put channels-last at 695.1 us and NCHW at 341.5 us: the
    353.6 us difference is the transposes' 1.03 GB of traffic at 2.9 TB/s, 87% of the
    3.35 TB/s HBM3 peak (no faster than the peak allows, and not far below it)."""
    h100 = gm.get_gpu("h100")
    last = Conv2d(batch=128, in_channels=256, out_channels=64, height=56, width=56, kernel=1,
                  dtype="fp32", layout="channels_last")  # fmt: skip
    nchw = last.model_copy(update={"layout": "nchw"})
    ks = last.kernels(h100)
    assert [k.name for k in ks] == ["NHWC->NCHW input transpose", "conv2d (implicit gemm)",
                                    "NCHW->NHWC output transpose"]  # fmt: skip
    assert [ks[0].bytes, ks[2].bytes] == [2 * 411_041_792, 2 * 102_760_448]
    assert ks[1] == nchw.kernels(h100)[0]
    traffic_s = (ks[0].bytes + ks[2].bytes) / 3.35e12
    assert 1.0 < (695.1e-6 - 341.5e-6) / traffic_s < 1.3
    # a window's filter is transposed too (K x R x S x C -> K x C x R x S)
    window = last.model_copy(update={"kernel": 3, "padding": 1})
    assert [k.name for k in window.kernels(h100)][1] == "filter transpose"
    # an unaligned stem runs in either layout
    stem = last.model_copy(update={"in_channels": 3, "kernel": 7, "stride": 2, "padding": 3})
    assert len(stem.kernels(h100)) == 1
    t = gm.predict(last, h100, condition="isolated")
    assert t.time_s > gm.predict(nchw, h100, condition="isolated").time_s + traffic_s * 0.9


def test_conv_output_channel_tile_quantization():
    """cuDNN's 128-wide output-channel tiles: 64 channels use half of each tile (0.5x), 256
    use all of two (1.0x), 192 use 192 of 256 (0.75x)."""
    h100 = gm.get_gpu("h100")

    def tiled(cout: int) -> float:
        conv = Conv2d(batch=32, in_channels=64, out_channels=cout, height=56, width=56,
                      kernel=3, padding=1, layout="channels_last")  # fmt: skip
        (term,) = [t for t in gm.predict(conv, h100, "none").kernels[0].terms
                   if t.name == "tile quantization (N)"]  # fmt: skip
        return term.value

    assert [tiled(c) for c in (64, 256, 192)] == [0.5, 1.0, 0.75]
    # cuBLAS GEMMs pick their tiles per shape: no fixed-tile term
    g = gm.predict(Gemm(m=4096, n=64, k=4096), h100, "none")
    assert not [t for t in g.kernels[0].terms if t.name.startswith("tile quantization")]


def test_host_transfer_pcie_gen5_line_rate():
    p = gm.predict(HostTransfer(bytes=1e9, direction="h2d"), "h100", "none")
    # Gen5 x16: 32 GT/s * 16 lanes * 128/130 / 8 = 63.0 GB/s per direction
    assert p.kernels[0].terms[0].value == pytest.approx(1e9 / 63.015e9, rel=1e-3)


def test_explain_names_the_padding_fix():
    p = gm.predict(Gemm(m=2048, n=50257, k=768, dtype="bf16"), "h100", "none")
    assert "pad N to 50304" in p.explain()
    assert any("pad N to 50304" in a for a in p.advice)


def test_explain_and_json_show_named_terms():
    p = gm.predict(Gemm(m=64, n=4096, k=4096), "h100", "none")
    names = [t.name for t in p.terms]
    assert {"compute time (tensor bf16)", "memory time", "launch floor"} <= set(names)
    d = p.to_dict()
    assert d["roofline"]["bottleneck"] == "memory bandwidth"
    assert 0 < d["roofline"]["max_utilization_pct"] < 100
    text = p.explain()
    assert "memory time" in text and "launch floor" in text and "memory-bound" in text


def test_unsupported_dtype_is_clear():
    with pytest.raises(gm.UnsupportedError, match="a100-sxm4-80gb has no fp8"):
        gm.predict(Gemm(m=8, n=8, k=8, dtype="fp8"), "a100", "none")


def test_bad_op_values_rejected():
    with pytest.raises(ValueError):
        Gemm(m=0, n=1, k=1)
    with pytest.raises(gm.SpecError, match="unknown op 'gem'"):
        gm.ops.from_row({"op": "gem"})


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 8192), n=st.integers(1, 8192), k=st.integers(1, 8192),
       dtype=st.sampled_from(["bf16", "fp16", "fp32", "tf32", "fp8"]))  # fmt: skip
def test_time_positive_finite_monotone_and_above_roofline(m, n, k, dtype):
    h100 = gm.get_gpu("h100")
    p = gm.predict(Gemm(m=m, n=n, k=k, dtype=dtype), h100, "none")
    assert math.isfinite(p.time_s) and p.time_s > 0
    assert p.time_s >= p.roofline_time_s
    bigger = gm.predict(Gemm(m=m + 64, n=n, k=k, dtype=dtype), h100, "none")
    assert bigger.time_s >= p.time_s


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 2**30), op=st.sampled_from(["add", "relu", "gelu", "copy", "silu"]))
def test_elementwise_monotone(n, op):
    a = gm.predict(Elementwise(op=op, n=n), "a100", "none")
    b = gm.predict(Elementwise(op=op, n=n * 2), "a100", "none")
    assert 0 < a.time_s <= b.time_s


def test_low_occupancy_kernel_is_latency_bound():
    """Little's law on an H100, 256-thread blocks, 8 B per thread (one float in, one out).
    With 255 registers per thread only 1 block (8 warps) fits per SM: 132 x 256 = 33,792 resident
    threads x 8 B / (675 cycles / 1.98 GHz = 341 ns) = 0.79 TB/s < 3.35 TB/s: latency-bound."""
    n = 2**26
    full = gm.ops.Kernel(flops=0, bytes=8 * n, threads=n, threads_per_block=256,
                         registers_per_thread=32)  # fmt: skip
    starved = full.model_copy(update={"registers_per_thread": 255})
    h100 = gm.get_gpu("h100")
    p_full = gm.predict(full, h100, "none")
    p_starved = gm.predict(starved, h100, "none")
    assert p_full.bound == "memory" and p_starved.bound == "latency"
    expected_bw = 132 * 256 * 8 / (675 / 1.98e9)
    assert p_starved.terms[0].value == pytest.approx(8 * n / expected_bw, rel=1e-6)
    assert "Little's law" in p_starved.explain() and "registers" in p_starved.explain()
    with pytest.raises(gm.InfeasibleError, match="cannot run"):
        gm.predict(full.model_copy(update={"shared_mem_per_block": 300 * 1024}), h100, "none")


def test_strided_1x1_conv_reads_a_quarter_of_its_input():
    """ResNet-50 downsampling 1x1 stride-2 conv: input 8x256x56x56 bf16 = 12.85 MB, of which a
    quarter is read; weights 512x256x2 B = 262 KB; output 8x512x28x28x2 B = 6.42 MB."""
    conv = gm.ops.Conv2d(batch=8, in_channels=256, out_channels=512, height=56, width=56,
                         kernel=1, stride=2, layout="channels_last")  # fmt: skip
    k = conv.kernels(gm.get_gpu("h100"))[0]
    assert k.bytes == 2 * (8 * 256 * 56 * 56 / 4 + 512 * 256 + 8 * 512 * 28 * 28)
    assert k.bytes_written == 2 * 8 * 512 * 28 * 28


def test_l2_resident_kernel_waits_on_l2_not_dram():
    """A small kernel whose inputs sit in L2 (l2="warm") pays neither the first DRAM round trip
    nor DRAM latency: its Little's-law limit uses the L2 hit latency. 512 threads x 16 B,
    all in flight at once, take one latency: 285 cycles / 1.98 GHz = 143.9 ns from L2,
    vs the 912 ns loaded DRAM latency when cold."""
    from gpumodel.calibration import CalibrationParams
    from gpumodel.predict import predict_with_params

    h100 = gm.get_gpu("h100")
    params = CalibrationParams(
        l2_bandwidth_bytes_per_s=5e12, dram_first_load_s=0.5e-6, l2_latency_cycles=285.0,
        loaded_dram_latency_s=912e-9, kernel_overhead_s=4e-6,
    )  # fmt: skip
    k = Kernel(flops=0, bytes=8192, bytes_written=8192 / 2, threads=512, threads_per_block=256)

    def terms(l2: str) -> dict[str, float]:
        pred = predict_with_params(k, h100, params, l2=l2)
        return {t.name: t.value for t in pred.kernels[0].terms}

    warm, cold = terms("warm"), terms("cold")
    assert "first DRAM load" not in warm and cold["first DRAM load"] == 0.5e-6
    assert warm["memory time"] == pytest.approx(285 / 1.98e9)
    assert cold["memory time"] == pytest.approx(912e-9)


def test_decode_attention_split_kv_choice_follows_flash_attention_2():
    """FlashAttention-2 (num_splits_heuristic) runs one KV split once batch x heads x query
    blocks >= 0.8 x "SMs", which flash_api.cpp passes as multiProcessorCount * 2: 211.2 on a
    132-SM H100. GQA decode packs heads/kv_heads queries into one block: Llama-3-8B (32 heads,
    8 KV heads) at batch 8 has 64 blocks -> split-KV, at batch 32 has 256 -> one split; MHA at
    batch 8 has 256 -> one split; at tensor parallel 2 (4 KV heads) batch 32 has 128 blocks ->
    split-KV (measured: 6.0 ms a step on 2 x H200 where the one-split kernel's price gave 8.6)."""
    h100 = gm.get_gpu("h100")

    def decode(batch: int, kv_heads: int, heads: int = 32) -> Attention:
        return Attention(batch=batch, heads=heads, kv_heads=kv_heads, seq=1, kv_seq=32768,
                         impl="flash")

    assert decode(8, 8).decode_splits_kv(h100)
    assert not decode(32, 8).decode_splits_kv(h100)
    assert not decode(8, 32).decode_splits_kv(h100)
    assert decode(6, 32).decode_splits_kv(h100)  # 192 blocks < 211.2
    assert not decode(7, 32).decode_splits_kv(h100)  # 224 blocks
    assert decode(32, 4, heads=16).decode_splits_kv(h100)  # 128 blocks
    (kw,) = decode(32, 8).kernels(h100)
    assert kw.family == "attention_decode:one-split"
    assert decode(8, 8).kernels(h100)[0].family is None  # the op's own: attention_decode


def test_one_split_decode_computes_padded_query_tiles():
    """The regular flash kernel's 128-row query tile holds the 4 queries of a K/V head (GQA 4):
    4/128 of its math is useful; with MHA 1/128. Batch 8 x 32 heads (MHA) and batch 32 x 8 KV
    heads (GQA 4) both compute 256 blocks x 128 rows x 32768 keys x 128 x 4 = 550 GFLOP of
    tiles: measured 1545 and 1554 us on an H100, 1543 and 1550 us on an H200. The padded work
    is priced, the exact FLOPs reported, and so are the exponentials (one per score)."""
    h100 = gm.get_gpu("h100")
    mha = Attention(batch=8, heads=32, seq=1, kv_seq=32768, impl="flash")
    gqa = Attention(batch=32, heads=32, kv_heads=8, seq=1, kv_seq=32768, impl="flash")
    for op, useful in ((mha, 1 / 128), (gqa, 4 / 128)):
        (k,) = op.kernels(h100)
        products, *softmax = k.flops
        assert products.flops == pytest.approx(256 * 128 * 32768 * 128 * 4)
        assert products.useful == pytest.approx(useful)
        assert k.min_flops_fraction == pytest.approx(useful)
        sfu = next(part for part in softmax if part.unit == "sfu")
        assert sfu.flops == pytest.approx(256 * 128 * 32768)  # every row's exponentials
        p = gm.predict(op, h100, "none")
        scores = op.batch * op.heads * 32768  # one query per head: the real work
        assert p.flops == pytest.approx(scores * (4 * 128 + SOFTMAX_FLOPS_PER_SCORE))
        # the loads run under the products: no imperfect-overlap term
        assert not [t for t in p.kernels[0].terms if t.name == "overlap factor"]


def test_one_split_decode_tile_rows_follow_the_launch_template():
    """FlashAttention-2's head-dim-256 kernel runs 64-row tiles where an SM holds 192 KiB of
    shared memory (H100: 228 KiB) or a block cannot opt in to 128 KiB (L40S: 99 KiB), 128-row
    tiles on an A100 (164 KiB an SM, 163 KiB a block); 128 rows at head dim 128 everywhere. MHA
    decode, one query per block: 1/64 or 1/128 of the products useful, and the 128-row kernel
    above head dim 128 (8 warps) does the wide prefill's work per product."""
    def useful(gpu: str, head_dim: int) -> float:
        op = Attention(batch=64, heads=32, seq=1, kv_seq=1024, head_dim=head_dim, impl="flash")
        (k,) = op.kernels(gm.get_gpu(gpu))
        assert k.family == "attention_decode:one-split"
        return k.flops[0].useful

    wide = WIDE_HEAD_WORK_FACTOR["flash forward"]  # the 128-row 8-warp kernel's work
    assert useful("h100", 256) == pytest.approx(1 / 64)
    assert useful("l40s", 256) == pytest.approx(1 / 64)
    assert useful("a100", 256) == pytest.approx(1 / (128 * wide))
    assert useful("h100", 128) == pytest.approx(1 / 128)
    assert useful("h100", 192) == pytest.approx(1 / (128 * wide))


def test_one_split_decode_carries_from_h100_to_h200_as_measured():
    """The one-split decode kernel is bound by its padded products on both GPUs (same SMs and
    clocks, 1.43x the DRAM rate on the H200): validate measured its 12 points at the same
    times on each. Carried from the H100's calibration to the H200 it is priced within 6% of
    every H200 measurement (it was 13-19% fast when its fit was free to call it memory-bound)."""
    import yaml

    h200 = gm.get_gpu("h200")
    cal = gm.load_calibration(str(RESULTS / "h100-sxm" / "calibration.yaml"), for_gpu="h200-sxm")
    doc = yaml.safe_load((RESULTS / "h200-sxm" / "calibration.yaml").read_text())
    errors = []
    for m in doc["measurements"]:
        o = m.get("op") or {}
        if (o.get("op") != "attention" or o.get("seq") != 1
                or (m.get("meta") or {}).get("backend") != "flash"):  # fmt: skip
            continue
        op = Attention(**{k: v for k, v in o.items() if k != "op"})
        if op.decode_splits_kv(h200):
            continue
        errors.append(gm.predict(op, h200, cal, condition="isolated").time_s / m["time_s"] - 1)
    assert len(errors) == 12
    assert max(abs(e) for e in errors) < 0.06


def test_few_row_norm_is_a_chain_of_dependent_loads():
    """PyTorch's layer/RMS norm kernel runs one 128-thread block per row, each thread with one
    4-element load in flight. 8 rows of 8192 bf16 on an H100: 8 x 128 = 1,024 threads x 8 B =
    8 KiB in flight per DRAM latency (675 cycles / 1.98 GHz = 341 ns) = 24.0 GB/s, so reading
    x (8 x 8192 x 2 B = 131,072 B) takes 5.45 us; the weight loads in the same iterations as x
    and adds no round trip, and the write of y does not wait. Many rows fill the GPU and
    stream at the DRAM rate instead."""
    h100 = gm.get_gpu("h100")
    few = gm.predict(gm.ops.RMSNorm(rows=8, hidden=8192), h100, "none")
    memory = next(t for t in few.terms if t.name == "memory time")
    limit = 8 * 128 * 8 / (675 / 1.98e9)
    assert memory.value == pytest.approx(8 * 8192 * 2 / limit, rel=1e-6)
    assert few.bound == "latency" and "Little's law" in memory.note
    # the input a previous kernel just wrote (l2="warm") waits on L2: 280 cycles, the published
    # Hopper pointer-chase midpoint (270-290), with no calibration needed
    warm = gm.predict(gm.ops.RMSNorm(rows=8, hidden=8192), h100, "none", l2="warm")
    memory = next(t for t in warm.terms if t.name == "memory time")
    limit = 8 * 128 * 8 / (280 / 1.98e9)
    assert memory.value == pytest.approx(8 * 8192 * 2 / limit, rel=1e-6)
    many = gm.predict(gm.ops.LayerNorm(rows=65536, hidden=4096), h100, "none")
    assert many.bound == "memory"
    # the geometry is the block-per-row kernel's; softmax keeps one thread per element
    k = gm.ops.RMSNorm(rows=8, hidden=8192).kernels(h100)[0]
    assert (k.threads, k.threads_per_block, k.bytes_in_flight_per_thread) == (1024, 128, 8)
    assert gm.ops.Softmax(rows=8, cols=8192).kernels(h100)[0].threads_per_block is None


def test_expand_copy_is_its_own_family():
    """HF repeat_kv of K for 8 KV heads -> 32 heads, batch 8, 2048 positions, head_dim 128 in
    bf16: writes 8 x 32 x 2048 x 128 x 2 B = 134.2 MB, reads a quarter of that; a batch row
    builds it; the calibrated family is its own, not the elementwise one."""
    op = gm.ops.from_row({"op": "expand_copy", "n": 8 * 32 * 2048 * 128, "repeat": 4})
    (k,) = op.kernels(gm.get_gpu("h100"))
    assert k.bytes_written == 8 * 32 * 2048 * 128 * 2
    assert k.bytes == pytest.approx(k.bytes_written * 1.25)
    from gpumodel.calibration import CalibrationParams
    from gpumodel.predict import predict_with_params

    slow = CalibrationParams(family_bandwidth_efficiency={"expand_copy": 0.33, "elementwise": 0.9})
    t = predict_with_params(op, gm.get_gpu("h100"), slow).time_s
    assert t == pytest.approx(k.bytes / (3.35e12 * 0.33) + 2.5e-6, rel=0.02)


def test_issue_bound_kernel_runs_at_its_elements_per_sm_cycle():
    """A calibrated 2 elements per SM-cycle: 2^28 output elements on an H100 (132 SMs x
    1.98 GHz) take 2^28 / (132 x 1.98e9 x 2) = 513.5 us, while its 2^28 x 2.5 B = 671 MB stream
    needs only 200 us at 3.35 TB/s: the slower one is the time (no overlap penalty: the stream
    runs far below DRAM's rate). H200 has the same SMs and clock -> the same time although its
    HBM is 1.43x faster; an A100 (108 SMs x 1.41 GHz) takes 132 x 1.98 / (108 x 1.41) = 1.716x
    as long. Without a calibration the datasheet has no instruction count: roofline only."""
    from gpumodel.calibration import CalibrationParams
    from gpumodel.predict import predict_with_params

    op = gm.ops.ExpandCopy(n=2**28, repeat=4)
    params = CalibrationParams(family_elements_per_sm_cycle={"expand_copy": 2.0},
                               family_bandwidth_efficiency={"expand_copy": 1.0},
                               family_overhead_s={"expand_copy": 0.0}, overlap_exponent=1.2)  # fmt: skip
    h100 = predict_with_params(op, gm.get_gpu("h100"), params)
    assert h100.time_s == pytest.approx(2**28 / (132 * 1.98e9 * 2), rel=1e-9)
    assert h100.time_s == pytest.approx(513.5e-6, rel=1e-3)
    assert h100.bound == "issue"
    assert any("more bandwidth will not help" in a for a in h100.advice)
    issue = next(t for t in h100.terms if t.name == "SM issue time")
    assert "2 elements per SM-cycle" in issue.note
    memory = next(t for t in h100.terms if t.name == "memory time")
    assert memory.value == pytest.approx(2**28 * 2.5 / 3.35e12, rel=1e-9)
    h200 = predict_with_params(op, gm.get_gpu("h200"), params)
    assert h200.time_s == pytest.approx(h100.time_s, rel=1e-9)
    a100 = predict_with_params(op, gm.get_gpu("a100"), params)
    assert a100.time_s / h100.time_s == pytest.approx(132 * 1.98 / (108 * 1.41), rel=1e-3)
    datasheet = gm.predict(op, "h100", "none")
    assert not any(t.name == "SM issue time" for t in datasheet.terms)
    assert datasheet.bound == "memory"


def test_cudnn_attention_is_its_own_calibrated_family():
    """SDPA's cuDNN backend does the flash work (Q, K, V read once, O written once) in its own
    kernels: family attention:cudnn (decode: attention_decode:cudnn). Saved records of the
    cuDNN backend that still say impl=flash are read as cuDNN; the math backend stays
    reported, not fitted."""
    from gpumodel.calibrate import points_from_records

    h100 = gm.get_gpu("h100")
    flash = gm.ops.Attention(batch=2, heads=32, seq=4096, causal=True)
    cudnn = flash.model_copy(update={"impl": "cudnn"})
    assert (flash.family, cudnn.family) == ("attention", "attention:cudnn")
    assert gm.ops.Attention(seq=1, kv_seq=4096, impl="cudnn").family == "attention_decode:cudnn"
    (kf,), (kc,) = flash.kernels(h100), cudnn.kernels(h100)
    assert kc.bytes == kf.bytes == 2 * (2 * 2 * 32 * 4096 * 128 * 2)
    # the same exact scores; each kernel computes its own causal diagonal tiles on top
    assert kc.min_flops_fraction * kc.total_flops == pytest.approx(
        kf.min_flops_fraction * kf.total_flops)
    rec = {"family": "attention", "op": {**flash.to_row()}, "time_s": 1e-4,
           "meta": {"backend": "cudnn"}}  # fmt: skip
    math = {**rec, "meta": {"backend": "math"}}
    points, skipped = points_from_records([rec, math])
    assert [p.op.impl for p in points] == ["cudnn"]
    assert skipped == ["attention backend math (reported, not fitted)"]


def test_layout_transposes_run_at_a_rate_the_sms_set():
    """cuDNN's layout transposes count their elements, and validate pins their memory roof at
    the plain copy's efficiency (gpumodel.validate.families.conv.fit): what they take beyond a
    copy is per-element work. Fitted on each GPU's own measurements, that rate agrees within
    5% between the H100 (3.35 TB/s) and the H200 (4.8 TB/s), the same SMs at the same clock;
    so a transpose carried from the H100 to the H200 is no faster than on the H100."""
    from gpumodel.ops.matmul import LAYOUT_TRANSPOSE_FAMILY as T

    h100 = gm.load_calibration("h100-sxm").parameters
    h200 = gm.load_calibration("h200-sxm").parameters
    for p in (h100, h200):
        assert p.family_bandwidth_efficiency[T] == pytest.approx(
            p.family_bandwidth_efficiency["copy"], rel=1e-12)
    r100, r200 = (p.family_elements_per_sm_cycle[T] for p in (h100, h200))
    assert r200 == pytest.approx(r100, rel=0.05)
    conv = Conv2d(batch=128, in_channels=256, out_channels=64, height=56, width=56, kernel=1,
                  stride=2, dtype="bf16", layout="nchw")  # fmt: skip
    (tin,) = [k for k in conv.kernels(gm.get_gpu("h100")) if k.name.startswith("NCHW->NHWC")]
    assert tin.elements == 128 * 256 * 56 * 56
    carried = gm.load_calibration("h100-sxm", for_gpu="h200-sxm")
    on_h100 = gm.predict(conv, "h100-sxm", condition="isolated").kernels[0].time_s
    on_h200 = gm.predict(conv, "h200-sxm", carried, condition="isolated").kernels[0].time_s
    assert on_h200 == pytest.approx(on_h100, rel=0.02)


def test_a_host_copy_is_roofed_by_the_host_link_not_hbm():
    """A host copy's table and explanation show the link it crosses: PCIe 5.0 x16 per direction
    is 32 GT/s x 16 lanes x 128/130 / 8 = 63.0 GB/s (the H100 SXM spec's host link), and its
    roofline time is the bytes over that rate (was HBM's 3.35 TB/s: 19.6 ns for 64 KiB)."""
    gpu = gm.get_gpu("h100")
    p = gm.predict(gm.ops.HostTransfer(bytes=65536), gpu)
    link = 32e9 * 16 * 128 / 130 / 8
    assert p.bandwidth_bytes_per_s == pytest.approx(link, rel=1e-3)
    assert p.roofline_time_s == pytest.approx(65536 / link, rel=1e-3)
    assert "memory 63 GB/s" in p.explain()
    # a kernel's memory roof stays HBM
    g = gm.predict(gm.ops.Gemm(m=4096, n=4096, k=4096, dtype="bf16"), gpu)
    assert g.bandwidth_bytes_per_s == gpu.memory_bandwidth_bytes_per_s


def test_format_number_writes_thousands_out():
    from gpumodel.units import format_number

    assert [format_number(x) for x in (1062.4, 295.3, 2731.0, 0.0, 2.5e6)] == [
        "1,062", "295", "2,731", "0", "2.5e+06"]


def test_fp32_rows_are_their_own_family_and_fall_back_to_the_bf16_one():
    """Autocast runs norms and softmax in fp32: those kernels are calibrated apart
    (``layernorm:fp32``, ``softmax:long-rows:fp32``); a calibration that never measured them
    prices them as the bf16 family and says so."""
    from gpumodel.calibration import CalibrationParams
    from gpumodel.predict import predict_with_params

    h100 = gm.get_gpu("h100")
    ln32 = gm.ops.LayerNorm(rows=4096, hidden=1024, dtype="fp32")
    assert ln32.family == "layernorm:fp32"
    assert gm.ops.LayerNorm(rows=4096, hidden=1024, dtype="bf16").family == "layernorm"
    assert gm.ops.Softmax(rows=8, cols=8192, dtype="fp32").family == "softmax:long-rows:fp32"
    bf16_only = CalibrationParams(family_bandwidth_efficiency={"layernorm": 0.5},
                                  family_overhead_s={"layernorm": 2e-6})  # fmt: skip
    p = predict_with_params(ln32, h100, bf16_only)
    (note,) = [t.note for t in p.kernels[0].terms if t.name == "nearest calibrated family"]
    assert "no layernorm:fp32 in this calibration: priced as layernorm" in note
    # 4096 x 1024 x 4 B read and written = 33.6 MB at half of 3.35 TB/s, plus the 2 us floor
    assert p.time_s == pytest.approx(2 * 4096 * 1024 * 4 / (0.5 * 3.35e12) + 2e-6, rel=0.02)
    both = bf16_only.model_copy(update={
        "family_bandwidth_efficiency": {"layernorm": 0.5, "layernorm:fp32": 0.25},
        "family_overhead_s": {"layernorm": 2e-6, "layernorm:fp32": 2e-6}})  # fmt: skip
    p = predict_with_params(ln32, h100, both)
    assert not [t for t in p.kernels[0].terms if t.name == "nearest calibrated family"]
    assert p.time_s == pytest.approx(2 * 4096 * 1024 * 4 / (0.25 * 3.35e12) + 2e-6, rel=0.02)


@pytest.mark.parametrize(("cols", "dtype", "reads", "dram_passes"), [
    (1024, "fp32", 1, 2),  # a warp per row
    (9216, "fp32", 1, 2),  # 9 values per thread of 1024, in registers
    (12_000, "fp32", 1, 2),  # 48,000 B in shared memory (PyTorch takes 49,152 - 128)
    # read three times; the H100's 264 rows in flight (132 SMs x 2 blocks of 1024 threads)
    # fit half its 50 MiB L2 up to 99 KiB per row, and then the re-reads come from L2
    (12_256, "fp32", 3, 2),  # 49,024 B: not less than the 49,024 B it takes
    (10_001, "bf16", 3, 2),  # past registers, and not whole 16-byte vectors
    (32_000, "bf16", 3, 2),  # 64,000 B x 264 = 16.9 MB
    (50_257, "fp32", 3, 4),  # 201,028 B x 264 = 53 MB: every read from DRAM
    (128_256, "fp32", 3, 4), (24_504, "bf16", 1, 2),
])  # fmt: skip
def test_softmax_rows_no_block_holds_are_read_three_times(cols, dtype, reads, dram_passes):
    """PyTorch's softmax keeps a long row on chip (registers up to 9 values per thread of a
    1024-thread block, else shared memory) or reads it in each of its three passes (SoftMax.cu
    ``cunn_SoftMaxForward``), from L2 while the rows in flight fit half of it, else from DRAM:
    a family of its own that falls back to the long-row family with those bytes where a
    calibration never measured it. The speed of light leaves the re-reads out."""
    from gpumodel.calibration import CalibrationParams
    from gpumodel.predict import predict_with_params
    from gpumodel.sol import speed_of_light

    h100 = gm.get_gpu("h100")
    op = gm.ops.Softmax(rows=65536, cols=cols, dtype=dtype)
    assert op.reads_per_element == reads
    size, n = (4 if dtype == "fp32" else 2), 65536 * cols
    (k,) = op.kernels(h100)
    assert k.bytes == size * n * dram_passes and k.bytes_written == size * n
    assert k.reread_bytes == size * n * (dram_passes - 2)
    where = {2: "from L2", 4: "each from DRAM"}[dram_passes]
    assert (len(k.notes) == 1 and where in k.notes[0]) if reads == 3 else not k.notes
    # x read once and y written, less the two L2-fulls it may hold, at 3.35 TB/s
    dram_floor_s = (2 * size * n - 2 * 50 * 2**20) / 3.35e12
    assert speed_of_light(op, h100).time_s == pytest.approx(dram_floor_s, rel=1e-9)
    assert (":spill" in op.family) == (reads == 3)
    if reads == 1:
        return
    fam = op.family.replace(":spill", "")
    params = CalibrationParams(family_bandwidth_efficiency={fam: 0.5},
                               family_overhead_s={fam: 2e-6})  # fmt: skip
    p = predict_with_params(op, h100, params)
    (note,) = [t.note for t in p.kernels[0].terms if t.name == "nearest calibrated family"]
    assert f"no {op.family} in this calibration: priced as {fam}" in note
    expected = size * n * dram_passes / (0.5 * 3.35e12) + 2e-6
    assert p.time_s == pytest.approx(expected, rel=0.02)


def test_shipped_fp32_norm_families_take_the_copy_roof():
    """The fp32 row families fit their per-element rate under the plain copy's measured
    bandwidth (validate's norm fit): an fp32 layer norm ran the same time on an H100 and an
    H200, bound by its per-element work, so their memory roof is the copy's, not a fitted one."""
    for gpu in ("h100", "h200"):
        params = gm.load_calibration(gpu).parameters
        roof = params.family_bandwidth_efficiency["copy"]
        for fam in ("layernorm:fp32", "rmsnorm:fp32", "softmax:fp32", "softmax:long-rows:fp32"):
            assert params.family_bandwidth_efficiency[fam] == pytest.approx(roof, rel=0.05)
            assert params.family_elements_per_sm_cycle[fam] > 0


def test_a_bound_the_datasheet_roofline_would_not_give_says_so(capsys):
    """Flash decode computes 128-row query tiles for one query (AI ~1 FLOP/B of useful work,
    far below the ridge): compute-bound on its kernel's rates, memory-bound on the datasheet
    roofline. The table and the explanation name both instead of contradicting the numbers."""
    from gpumodel.cli import main
    from gpumodel.ops import Attention

    p = gm.predict(Attention(batch=8, heads=32, seq=1, kv_seq=4096, impl="flash"), "h200")
    assert p.arithmetic_intensity < p.ridge_point and p.bound == "compute"
    assert p.roofline_disagrees() == "memory"
    assert "where the datasheet roofline at this intensity says memory" in p.explain()
    assert main(["predict", "attention", "--batch", "8", "--seq", "1", "--kv-seq", "4096",
                 "--impl", "flash", "--gpu", "h200"]) == 0  # fmt: skip
    assert "compute (roofline: memory)" in capsys.readouterr().out
    big = gm.predict(gm.ops.Gemm(m=8192, n=8192, k=8192), "h100")
    assert big.bound == "compute" and big.roofline_disagrees() is None


def test_a_few_queries_against_a_cache_run_decode_kernels():
    """FlashAttention-2 splits the keys at any query length when batch x heads x ceil(queries /
    64) blocks leave the GPU idle (flash_api.cpp set_params_splitkv), so 2-64 queries against a
    cache cost about what one does: on an H200 1 x 32 heads x 2K keys took 15.4-17.6 us at 1-64
    queries forced to flash (validation/results/h200-sxm/sdpa-short-query-2026-12-01), where the
    model had priced 2 queries as a prefill of one 128-row tile per head, 4.5x slower. With
    enough blocks the regular kernel runs one tile per head (16 x 32 heads: 113-120 us at 1-128
    queries)."""
    h200 = gm.get_gpu("h200")

    def flash(batch, seq, kv_seq=2048):
        return Attention(batch=batch, heads=32, seq=seq, kv_seq=kv_seq, impl="flash")

    one = gm.predict(flash(1, 1), h200, "none").time_s
    for seq in (2, 8, 64):
        (k,) = flash(1, seq).kernels(h200)
        assert k.family == "attention_decode" and flash(1, seq).host_launches(h200) == 2
        assert gm.predict(flash(1, seq), h200, "none").time_s < 1.5 * one
    assert flash(16, 4, 1024).kernels(h200)[0].family == "attention_decode:one-split"
    # a square prefill keeps the prefill kernel
    assert Attention(batch=1, heads=32, seq=128, impl="flash").kernels(h200)[0].family is None


def test_short_query_unseen_set_from_the_h100_calibration():
    """The unseen short-query set (speculative verification and chunked prefill against a
    cache, measured after these rules were written on the fit set: unseen-h200-run43), replayed
    from a CUDA graph, every backend: priced from the H100's calibration within 10% median
    (53% before, when a few queries were a prefill)."""
    import json
    import statistics

    cal = gm.load_calibration(str(RESULTS / "h100-sxm" / "calibration.yaml"), for_gpu="h200-sxm")
    impls = {"default": "sdpa", "flash": "flash", "cudnn": "cudnn", "efficient": "efficient"}
    errors = []
    for r in json.loads((RESULTS / "unseen-h200-run43" / "unseen.json").read_text())["records"]:
        if not r.get("short_query") or r["condition"] != "in-workload-graph":
            continue
        s = r["shape"]
        op = Attention(batch=s["batch"], heads=s["heads"], kv_heads=s["kv_heads"], seq=s["seq_q"],
                       kv_seq=s["seq_kv"], head_dim=s["head_dim"],
                       impl=impls[r["backend_requested"]])  # fmt: skip
        t = gm.predict(op, "h200", cal, condition="in-graph").time_s
        errors.append(abs(t / r["time_s_median"] - 1))
    assert len(errors) >= 20
    assert statistics.median(errors) < 0.10
