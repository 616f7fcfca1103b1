"""Convolutions: PyTorch's F.conv2d over every distinct ResNet-50 convolution, bf16, TF32 and
fp32, channels-last and NCHW, with ``torch.backends.cudnn.benchmark`` on from the run's first
convolution (``torch_engine.start``): cuDNN runs the algorithm its benchmark found fastest for
each shape, as in a tuned training or inference job. It fits per kernel family the compute and
bandwidth efficiency and the floor; NCHW layout transposes last.

Runs before 2026-11-27 timed cuDNN's heuristic choice (benchmark off, PyTorch's default): on an
H100 the same fp32 3x3 layers ran 1.3-1.4x slower than with benchmark mode for 14x14 maps
(e.g. 256 channels, batch 32: 250 us against 177 us), and the same time elsewhere
(validation/results/h100-sxm/cudnn-benchmark-2026-11-27).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpumodel.validate.families.base import Family, Group, make_record
from gpumodel.validate.torch_engine import Ctx as _Ctx
from gpumodel.validate.torch_engine import check_close as _check_close
from gpumodel.validate.torch_engine import dtype_of as _dtype
from gpumodel.validate.torch_engine import set_cudnn_tf32 as _set_conv_tf32
from gpumodel.validate.torch_engine import tolerance as _tol

if TYPE_CHECKING:
    from gpumodel.calibrate import Point
    from gpumodel.calibration import CalibrationParams
    from gpumodel.specs import GPUSpec


# The distinct convolutions of ResNet-50 (torchvision v1.5: stride on the 3x3 of each stage's
# first block): (in_channels, out_channels, input height = width, kernel, stride, padding).
RESNET50_CONVS: tuple[tuple[int, int, int, int, int, int], ...] = (
    (3, 64, 224, 7, 2, 3),  # stem
    # stage 1, 56x56
    (64, 64, 56, 1, 1, 0),
    (64, 64, 56, 3, 1, 1),
    (64, 256, 56, 1, 1, 0),  # expand, also the downsample (stride 1)
    (256, 64, 56, 1, 1, 0),
    # stage 2
    (256, 128, 56, 1, 1, 0),
    (128, 128, 56, 3, 2, 1),
    (128, 512, 28, 1, 1, 0),
    (256, 512, 56, 1, 2, 0),  # downsample
    (512, 128, 28, 1, 1, 0),
    (128, 128, 28, 3, 1, 1),
    # stage 3
    (512, 256, 28, 1, 1, 0),
    (256, 256, 28, 3, 2, 1),
    (256, 1024, 14, 1, 1, 0),
    (512, 1024, 28, 1, 2, 0),  # downsample
    (1024, 256, 14, 1, 1, 0),
    (256, 256, 14, 3, 1, 1),
    # stage 4
    (1024, 512, 14, 1, 1, 0),
    (512, 512, 14, 3, 2, 1),
    (512, 2048, 7, 1, 1, 0),
    (1024, 2048, 14, 1, 2, 0),  # downsample
    (2048, 512, 7, 1, 1, 0),
    (512, 512, 7, 3, 1, 1),
)


def conv2d_op(
    batch: int,
    in_channels: int,
    out_channels: int,
    height: int,
    width: int,
    kernel: int,
    stride: int,
    padding: int,
    dtype: str,
    layout: str = "channels_last",
) -> dict[str, Any]:
    return {
        "op": "conv2d",
        "batch": int(batch),
        "in_channels": int(in_channels),
        "out_channels": int(out_channels),
        "height": int(height),
        "width": int(width),
        "kernel": int(kernel),
        "stride": int(stride),
        "padding": int(padding),
        "dtype": dtype,
        "layout": layout,
    }


def conv_points(
    quick: bool,
) -> list[tuple[tuple[int, int, int, int, int, int], int, str, str]]:
    """(shape, batch, dtype, layout) points: every ResNet-50 convolution at batches 1, 8, 32
    and 128 in bf16 and TF32 channels-last and in plain fp32 NCHW (CUDA cores), and at 1 and
    32 where a layout transpose wraps a kernel those points fit (bf16/TF32 in PyTorch's
    default NCHW, fp32 channels-last): one image leaves most SMs idle, which the fit must
    see. (The full run stays under 5 minutes on an H100: benchmarks/validate-full-run.md.)"""
    if quick:
        pts = [(shape, 32, "bf16", "channels_last") for shape in RESNET50_CONVS]
        pts += [(shape, 128, "bf16", "channels_last") for shape in RESNET50_CONVS[::4]]
        pts += [(shape, 32, "tf32", "channels_last") for shape in RESNET50_CONVS[::3]]
        pts += [(shape, 32, "bf16", "nchw") for shape in RESNET50_CONVS[::3]]
        pts += [(shape, 32, "fp32", layout) for shape in RESNET50_CONVS[::4]
                for layout in ("nchw", "channels_last")]  # fmt: skip
        return pts
    pts = [
        (shape, batch, dtype, layout)
        for dtype, layout in (("bf16", "channels_last"), ("tf32", "channels_last"),
                              ("fp32", "nchw"))
        for shape in RESNET50_CONVS
        for batch in (1, 8, 32, 128)
    ]  # fmt: skip
    # NCHW tensor-core kernels are the channels-last ones between layout transposes, and
    # cuDNN runs fp32 channels-last as the NCHW kernel between transposes (the model prices it
    # so): both need only the two ends of the SM-fill range
    pts += [(shape, batch, dtype, layout)
            for dtype, layout in (("bf16", "nchw"), ("tf32", "nchw"), ("fp32", "channels_last"))
            for shape in RESNET50_CONVS for batch in (1, 32)]  # fmt: skip
    return pts


# --------------------------------------------------------------------------- measure


def _conv_point(
    ctx: _Ctx, shape: tuple[int, int, int, int, int, int], batch: int, dtype: str, layout: str
) -> list[dict[str, Any]]:
    torch = ctx.torch
    import torch.nn.functional as F

    cin, cout, hw, r, stride, pad = shape
    dt = _dtype(torch, dtype)
    _set_conv_tf32(torch, dtype == "tf32")
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    x = torch.randn(batch, cin, hw, hw, device="cuda", dtype=dt).to(memory_format=fmt)
    w = (torch.randn(cout, cin, r, r, device="cuda", dtype=dt) / (cin * r * r) ** 0.5).to(
        memory_format=fmt
    )

    def fn() -> Any:
        return F.conv2d(x, w, stride=stride, padding=pad)

    out = fn()
    torch.cuda.synchronize()
    ref = F.conv2d(x[:1].double(), w.double(), stride=stride, padding=pad)
    err = _check_close(out[:1], ref, _tol(dtype), "conv2d image 0")
    hout = out.shape[-1]
    esize = 2 if dtype == "bf16" else 4
    footprint = esize * (x.numel() + w.numel() + batch * cout * hout * hout)
    del out, ref
    t, spread, reps = ctx.time(fn, footprint)
    meta = {
        "layout": layout,
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cache": "cold",
        "rel_err": err,
        "out_hw": int(hout),
    }
    op = conv2d_op(batch, cin, cout, hw, hw, r, stride, pad, dtype, layout)
    return [make_record("conv2d", op, t, reps, spread, meta)]


# --------------------------------------------------------------------------- fit


def _compute(family: str) -> bool:
    """Kernel families with compute-bound kernels (all but the NCHW layout transposes)."""
    from gpumodel.ops.matmul import LAYOUT_TRANSPOSE_FAMILY

    return family.startswith("conv2d") and family != LAYOUT_TRANSPOSE_FAMILY


# candidate tiles per SM at half rate (gpumodel.model.scheduling.fill_efficiency); None: no
# fill term (the model before it)
HALF_FILL_GRID: tuple[float | None, ...] = (None, 0.15, 0.3, 0.45, 0.7, 1.0)


def _fit_with_fill(
    half_fill: float | None, pts: list[Point], gpu: GPUSpec, params: CalibrationParams
) -> tuple[float, CalibrationParams]:
    """The family fit at one SM-fill constant: (log error on ``pts``, parameters)."""
    from gpumodel.calibrate import fit_kernel_families, measured_times, predict_points
    from gpumodel.fitting import log_loss
    from gpumodel.ops.matmul import LAYOUT_TRANSPOSE_FAMILY

    start = params.model_copy(update={"conv_half_fill_tiles_per_sm": half_fill})
    # the layout transposes move bytes no faster than a plain copy does; what they
    # take beyond it is their per-element work (gpumodel.ops.matmul._transpose)
    fitted = fit_kernel_families(pts, gpu, start, compute=_compute,
                                 last=(LAYOUT_TRANSPOSE_FAMILY,),
                                 memory_roof={LAYOUT_TRANSPOSE_FAMILY: "copy"})  # fmt: skip
    return log_loss(predict_points(pts, gpu, fitted), measured_times(pts)), fitted


# candidates whose log error is within this share of the best one's are a tie: the 0.3 and
# 0.45 fits of both shipped runs sit 0.1-0.4% apart, and refitting the GEMM dtypes under them
# (the convolutions' kernels take their efficiency) flipped the choice back and forth, moving the
# fp32 convolutions' held-out error by 3 points (2026-11-28)
HALF_FILL_TIE = 0.005


def fit(fam: dict[str, list[Point]], gpu: GPUSpec, params: CalibrationParams) -> CalibrationParams:
    """Per kernel family the efficiencies and floor, for each candidate SM-fill constant; the
    constant whose fit has the least log error on the fitted points is kept, the first in grid
    order among those within ``HALF_FILL_TIE`` of it. The candidates are independent fits, run
    in worker processes where there are cores for them (gpumodel.parallel). NCHW convolutions
    are fitted last: their layout transposes wrap a compute kernel whose family the
    channels-last points fit first."""
    from gpumodel.parallel import map_independent

    pts = fam.get("conv2d", [])
    if not pts:
        return params
    fits = map_independent(_fit_with_fill, [(h, pts, gpu, params) for h in HALF_FILL_GRID])
    least = min(loss for loss, _ in fits)
    best = next(i for i, (loss, _) in enumerate(fits) if loss <= least * (1 + HALF_FILL_TIE))
    return fits[best][1]


def adapt_row(row: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """Records before the op named its layout carry it in their meta."""
    if row.get("op") == "conv2d" and "layout" not in row:
        row["layout"] = meta.get("layout", "channels_last")  # records before the op said so
    return row


def _label(shape: tuple[int, ...], batch: int, dtype: str, layout: str) -> str:
    cin, cout, hw, r, s, _ = shape
    return f"conv2d {dtype} {layout} n={batch} {cin}->{cout} {hw}x{hw} k{r} s{s}"


CONV2D = Family(
    name="conv2d",
    engine="torch",
    points=conv_points,
    label=_label,
    measure=_conv_point,
    fit=fit,
    fit_order=7.4,
    adapt_row=adapt_row,
    groups=(
        Group(
            "conv2d (cuDNN)",
            lambda p: p.family == "conv2d" and p.op.dtype != "fp32",
            10.0,
            None,
            order=20,
        ),
        # cudnn.benchmark's fp32 choices (implicit GEMM, Winograd, FFT) are reported apart
        Group(
            "conv2d fp32 (cuDNN, CUDA cores)",
            lambda p: p.family == "conv2d" and p.op.dtype == "fp32",
            10.0,
            None,
            order=20.5,
        ),
    ),
)
