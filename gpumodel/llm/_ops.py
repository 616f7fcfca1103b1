"""One op the LLM layers need that the op library has no single class for: a short sequence of
memory-bound elementwise kernels ("passes") over the same tensor.

Eager PyTorch runs an unfused RMSNorm or rotary embedding as one kernel per aten op, each
reading and writing the whole tensor (HF transformers' ``LlamaRMSNorm``: to(fp32), pow, mean,
add, rsqrt, mul, to(bf16), mul by weight = 8 kernels). ``Passes`` keeps each kernel's bytes
and FLOPs so the time model sees every trip to DRAM and every launch. Its op family is
``elementwise`` so a calibrated elementwise efficiency applies; a pass marked ``strided`` runs
PyTorch's non-vectorised kernel instead and is priced as ``StridedElementwise`` is.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpumodel.ops.base import (
    Dtype,
    FlopPart,
    KernelWork,
    Op,
    at_least,
    build,
    is_array,
    vector_unit,
)
from gpumodel.ops.simple import strided_kernel
from gpumodel.specs import GPUSpec


class Pass(BaseModel):
    """One kernel over ``fraction * n`` elements moving ``bytes_per_element`` each (reads plus
    writes) and doing ``flops_per_element``."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    name: str
    fraction: float = Field(1.0, gt=0)
    bytes_per_element: float = Field(ge=0)
    flops_per_element: float = Field(0.0, ge=0)
    # PyTorch's non-vectorised path: "cast" (dtype-casting copy), "broadcast" (broadcast or
    # transposed operands), "cat" (torch.cat of non-contiguous views) or "view_cat" (a cat of
    # a whole-row strided view); None: a vectorised contiguous kernel (a stream)
    strided: Literal["cast", "broadcast", "cat", "view_cat"] | None = None
    written_per_element: float | None = Field(None, ge=0)
    # a contiguous kernel's share of the elementwise family's DRAM rate (KernelWork's)
    bandwidth_fraction: float = Field(1.0, gt=0, le=1)


class Passes(Op):
    """``len(passes)`` kernels over a tensor of ``n`` elements, in order."""

    op_name: ClassVar[str] = "elementwise"
    name: str
    n: int = Field(gt=0)
    dtype: Dtype = "bf16"
    passes: tuple[Pass, ...] = Field(min_length=1)

    def kernels(self, gpu: GPUSpec) -> list[KernelWork]:
        unit, dt = vector_unit(gpu, self.dtype)
        out = []
        for p in self.passes:
            elements = at_least(p.fraction * self.n, 1.0)
            nbytes = elements * p.bytes_per_element
            flops = elements * p.flops_per_element
            if p.strided is not None:
                parts = (FlopPart(unit, dt, flops),) if p.flops_per_element else ()
                written = (p.bytes_per_element / 2 if p.written_per_element is None
                           else p.written_per_element)  # fmt: skip
                out.append(strided_kernel(f"{self.name}: {p.name}", p.strided, elements,
                                          p.bytes_per_element, written, parts))  # fmt: skip
                continue
            out.append(
                KernelWork(
                    name=f"{self.name}: {p.name}",
                    flops=(FlopPart(unit, dt, flops),) if p.flops_per_element else (),
                    bytes=nbytes,
                    working_set_bytes=nbytes,
                    threads=elements.astype("int64") if is_array(elements) else int(elements),
                    bandwidth_fraction=p.bandwidth_fraction,
                )
            )
        return out

    def label(self) -> str:
        return f"{self.name}(n={self.n}, {len(self.passes)} kernels, dtype={self.dtype})"


def passes(name: str, n: int, dtype: str, *steps: tuple, bandwidth_fraction: float = 1.0) -> Passes:
    """``passes("rope", n, "bf16", ("mul cos", 1, 4, 1), ...)``: (name, fraction, bytes/elem,
    flops/elem[, strided kind, bytes written/elem]) per kernel; ``bandwidth_fraction``: each
    contiguous kernel's share of the elementwise family's rate (``Pass``)."""
    return build(
        Passes,
        name=name,
        n=n,
        dtype=dtype,  # type: ignore[arg-type]
        passes=tuple(
            build(
                Pass,
                name=s[0],
                fraction=s[1],
                bytes_per_element=s[2],
                flops_per_element=s[3],
                strided=s[4] if len(s) > 4 else None,
                written_per_element=s[5] if len(s) > 5 else None,
                bandwidth_fraction=bandwidth_fraction,
            )
            for s in steps
        ),
    )
