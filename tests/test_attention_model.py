"""The fused attention kernels as they run: the softmax's exponentials on the special function
units, head dims padded to the widths the kernels are built for, the causal diagonal tile, and
SDPA's memory-efficient backend as its own family. Expected values worked by hand."""

import pytest

import gpumodel as gm
from gpumodel.ops import Attention
from gpumodel.ops.attention import CAUSAL_DIAGONAL_EXTRA_TILES


def test_sfu_rate_is_16_exponentials_per_sm_per_clock_where_sourced():
    # H100 SXM: 132 SMs x 1980 MHz x 16 = 4.182e12 exp/s; no rate without a sourced figure
    assert gm.get_gpu("h100").peak_flops("fp32", "sfu") == pytest.approx(132 * 1.98e9 * 16)
    assert gm.get_gpu("a100").peak_flops("fp32", "sfu") == pytest.approx(108 * 1.41e9 * 16)
    assert gm.get_gpu("mi300x").peak_flops("fp32", "sfu") is None
    assert gm.get_gpu("b200").peak_flops("fp32", "sfu") is None
    assert gm.get_gpu("h100").peak_flops("bf16", "sfu") is None


def test_one_exponential_per_score_on_the_sfus_the_other_four_flops_on_the_lanes():
    op = Attention(batch=2, heads=8, seq=1024, head_dim=128)  # not causal: 2*8*1024*1024 scores
    scores = 2 * 8 * 1024 * 1024
    p = gm.predict(op, "h100", "none")
    assert p.flops_by_unit["sfu:fp32"] == scores
    assert p.flops_by_unit["vector:bf16"] == 4 * scores
    assert p.flops_by_unit["tensor:bf16"] == 4 * scores * 128
    # where no SFU rate is known, all five softmax FLOPs stay on the lanes
    amd = gm.predict(op, "mi300x", "none")
    assert "sfu:fp32" not in amd.flops_by_unit
    assert amd.flops_by_unit["vector:fp32"] == 5 * scores  # no packed bf16 lane rate listed
    # datasheet roofline on the H100: exponentials 2^24 / 4.182e12 = 4.01 us of the kernel
    sfu = next(t for t in p.kernels[0].terms if t.name == "compute time (sfu fp32)")
    assert sfu.value == pytest.approx(scores / (132 * 1.98e9 * 16), rel=1e-9)


@pytest.mark.parametrize(("impl", "head_dim", "padded"), [
    ("flash", 64, 64), ("flash", 80, 96), ("flash", 96, 96), ("flash", 200, 256),
    ("cudnn", 64, 64), ("cudnn", 80, 128), ("cudnn", 96, 128), ("cudnn", 128, 128),
    ("efficient", 40, 64), ("efficient", 112, 128), ("efficient", 160, 160),
])  # fmt: skip
def test_head_dim_runs_at_the_kernels_built_width(impl, head_dim, padded):
    """FlashAttention-2 rounds to 32 (256 above 192); cuDNN's Hopper kernels are 64 or 128
    wide; xFormers' memory-efficient kernels 64 or 128, unpadded above."""
    p = gm.predict(Attention(seq=2048, heads=16, head_dim=head_dim, impl=impl), "h100", "none")
    terms = {t.name: t.value for t in p.kernels[0].terms}
    assert terms.get("tile quantization (K)", 1.0) == pytest.approx(head_dim / padded)


def test_causal_kernels_pay_for_their_diagonal_tiles():
    """4 x 16 heads x 4096 causal: exact scores 64 x 4096 x 4096 / 2; each of the 32 query
    tiles of a head adds FlashAttention-2's CAUSAL_DIAGONAL_EXTRA_TILES tiles of 128 x 128
    scores."""
    op = Attention(batch=4, heads=16, seq=4096, head_dim=64, causal=True, impl="flash")
    exact = 64 * 4096 * 4096 / 2
    extra = 64 * 32 * 128 * 128 * CAUSAL_DIAGONAL_EXTRA_TILES["flash"]
    assert op.scores == exact
    assert op.computed_scores == exact + extra
    kernel = op.kernels(gm.get_gpu("h100"))[0]
    assert kernel.flops[0].flops == 4 * (exact + extra) * 64  # priced: the tiles computed
    p = gm.predict(op, "h100", "none")  # reported: the scores needed, half the full op's
    assert p.flops_by_unit["tensor:bf16"] == pytest.approx(4 * exact * 64)
    full = gm.predict(op.model_copy(update={"causal": False}), "h100", "none")
    assert p.flops == pytest.approx(full.flops / 2)
    # decode (one query row) adds one row of the tile, not 128
    one = Attention(batch=1, heads=1, seq=1, kv_seq=4096, causal=True, impl="flash")
    assert one.computed_scores - one.scores == CAUSAL_DIAGONAL_EXTRA_TILES["flash"] * 128
    # cuDNN's kernel pays its own
    cudnn = Attention(batch=4, heads=16, seq=4096, head_dim=64, causal=True, impl="cudnn")
    assert cudnn.computed_scores == exact + extra / CAUSAL_DIAGONAL_EXTRA_TILES["flash"] * (
        CAUSAL_DIAGONAL_EXTRA_TILES["cudnn"])
    # the naive path computes the whole score matrix already
    naive = Attention(seq=4096, causal=True, impl="naive")
    assert naive.computed_scores == naive.scores


def test_speed_of_light_counts_exact_scores_on_the_busiest_unit():
    """H100, 1 x 16 heads x 1024 x 64, causal: exact scores 8,388,608 -> tensor 2.147 GFLOP at
    the 1.98 GHz roof (132 x 4096 x 1.98e9 = 1.0705e15 FLOP/s) = 2.006 us; the exponentials,
    8,388,608 / 4.182e12 = 2.006 us on their own pipe; the speed of light is the larger, not
    the sum."""
    op = Attention(batch=1, heads=16, seq=1024, head_dim=64, causal=True)
    sol = gm.speed_of_light(op, "h100")
    scores = 16 * 1024 * 1024 / 2
    tensor = 4 * scores * 64 / (132 * 4096 * 1.98e9)
    sfu = scores / (132 * 1.98e9 * 16)
    memory = 4 * 16 * 1024 * 64 * 2 / (132 * 128 * 1.98e9)  # Q, K, V, O from L2 at most
    assert sol.time_s == pytest.approx(max(tensor, sfu, memory), rel=1e-9)


def test_memory_efficient_backend_is_its_own_family():
    assert Attention(seq=512, impl="efficient").family == "attention:efficient"
    assert Attention(seq=1, kv_seq=512, impl="efficient").family == "attention_decode:efficient"
    assert (Attention(seq=512, impl="efficient", backward=True).family
            == "attention:efficient:backward")  # fmt: skip


def test_cudnn_and_memory_efficient_kernels_run_64_query_blocks_one_per_sm():
    """132 heads of 64 queries fill the H100's 132 SMs once; 133 need a second wave for one
    block: tail efficiency 133 / 264."""
    def tail(heads: int, impl: str) -> float:
        p = gm.predict(Attention(heads=heads, seq=64, head_dim=64, impl=impl), "h100", "none")
        return next(t.value for t in p.kernels[0].terms if t.name == "tail efficiency")

    for impl in ("cudnn", "efficient"):
        assert tail(132, impl) == pytest.approx(1.0)
        assert tail(133, impl) == pytest.approx(133 / 264)


def test_shipped_causal_diagonals_are_the_fits_choice_locally():
    """Each kernel's shipped diagonal beats its neighbours 0.25 tile either side on validate's
    points (validation/fitset/fit_attention_causal.py runs the whole grid, 0-3 tiles)."""
    import sys

    from gpumodel._paths import validation_dir

    sys.path.insert(0, str(validation_dir() / "fitset"))
    import fit_attention_causal as fit

    sets = [fit.attention_records(path) for path in fit.FIT_SETS]
    at = {step: fit.mean_log_errors({i: x + step for i, x in CAUSAL_DIAGONAL_EXTRA_TILES.items()},
                                    sets)
          for step in (-0.25, 0.0, 0.25)}  # fmt: skip
    for impl in CAUSAL_DIAGONAL_EXTRA_TILES:
        assert at[0.0][impl] <= min(at[-0.25][impl], at[0.25][impl]), (impl, at)

