"""The measured families of ``gpumodel validate``, one module each, registered in ``FAMILIES``.

Each module holds one family's whole story: its points, how a point is measured on its engine
(CuPy, PyTorch or numpy), the fit of the parameters it informs and its report rows (see
``base.Family``). The runner, the fit and the report iterate over this list; none of them names
a family. ``FAMILIES`` is in measurement order (the CuPy families, then PyTorch's, then the CPU
ones); the fit runs in each family's ``fit_order`` and the report lists groups by ``order``.

NCCL collectives (``collectives``) are validated by their own multi-process driver and calibrate
a separate fragment (``gpumodel validate --collectives``); they are not in this list.

Importing this package imports no GPU library and nothing heavier than the standard library.
"""

from __future__ import annotations

from gpumodel.validate.families.attention import ATTENTION
from gpumodel.validate.families.bandwidth import BANDWIDTH
from gpumodel.validate.families.base import Family, Group, make_record
from gpumodel.validate.families.conv import CONV2D
from gpumodel.validate.families.copy import COPY
from gpumodel.validate.families.elementwise import ELEMENTWISE, REDUCTION
from gpumodel.validate.families.expand_copy import EXPAND_COPY
from gpumodel.validate.families.gemm import GEMM
from gpumodel.validate.families.host_link import HOST_TRANSFER
from gpumodel.validate.families.latency import LATENCY
from gpumodel.validate.families.launch import LAUNCH
from gpumodel.validate.families.norm import NORM
from gpumodel.validate.families.numpy_cpu import NUMPY_GEMM, NUMPY_STREAM
from gpumodel.validate.families.optimizer import ADAMW
from gpumodel.validate.families.poly import POLY, POLY_FMA
from gpumodel.validate.families.strided import STRIDED_ELEMENTWISE

FAMILIES: list[Family] = [
    # CuPy
    POLY, POLY_FMA, BANDWIDTH, COPY, GEMM, LAUNCH, HOST_TRANSFER, LATENCY,
    # PyTorch
    ATTENTION, CONV2D, NORM, EXPAND_COPY, STRIDED_ELEMENTWISE, ADAMW, ELEMENTWISE, REDUCTION,
    # numpy (CPU)
    NUMPY_STREAM, NUMPY_GEMM,
]  # fmt: skip


def registry() -> list[Family]:
    """The registered families (read at call time, so a family added to FAMILIES counts)."""
    return list(FAMILIES)


def by_name(name: str | None) -> Family | None:
    return next((f for f in FAMILIES if f.name == name), None)


def names(engine: str | None = None) -> list[str]:
    """Family names, in measurement order; only ``engine``'s when given."""
    return [f.name for f in FAMILIES if engine is None or f.engine == engine]


def groups() -> dict[str, tuple[object, float | None, float | None]]:
    """Report groups in table order: name -> (selector, median tolerance %, p90 tolerance %)."""
    out = sorted((g for f in FAMILIES for g in f.groups), key=lambda g: g.order)
    return {g.name: (g.select, g.median_pct, g.p90_pct) for g in out}


__all__ = ["FAMILIES", "Family", "Group", "by_name", "groups", "make_record", "names", "registry"]
