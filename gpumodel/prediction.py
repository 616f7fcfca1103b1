"""The result of a prediction: a frozen value made of named terms that explain() can show."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpumodel.accuracy import Accuracy
from gpumodel.units import format_number, format_quantity, format_time

Bound = Literal["memory", "compute", "issue", "latency", "launch", "network"]


def accuracy_line(acc: Accuracy | None) -> str:
    """The explanation's line on how wrong predictions like this one measured."""
    if acc is None:
        return ("  expected error: not measured for this op, GPU and calibration (the unseen "
                "sets cover H100 and H200 kernels and HF steps; docs/validation.md)")
    return f"  expected error: {acc.summary()}"


def drift_range_line(time_range_s: tuple[float, float], drift: str | None) -> str:
    """The explain() line of a time's range under the host's measured drift (``drift``: the
    profile's 'p10-p90' factors as text)."""
    lo, hi = time_range_s
    return (f"  range {format_time(lo)} - {format_time(hi)}: the host at the p10 and p90 of its "
            f"measured drift ({drift} x its median time)")  # fmt: skip


class Term(BaseModel):
    """One named contribution to a prediction (a time, a factor or a rate)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    name: str
    value: float
    unit: Literal["s", "x", "B/s", "FLOP/s", "B", "FLOP", "FLOP/B", ""] = "s"
    note: str = ""

    def pretty(self) -> str:
        if self.unit == "s":
            v = format_time(self.value)
        elif self.unit == "x":
            v = f"{self.value:.3g}x"
        elif self.unit in ("B/s", "FLOP/s", "B", "FLOP"):
            v = format_quantity(self.value, self.unit)
        else:
            v = f"{self.value:.4g} {self.unit}".strip()
        return f"{self.name} = {v}" + (f"  ({self.note})" if self.note else "")


class KernelPrediction(BaseModel):
    """The time of one kernel of an op, with the terms that make it."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    name: str
    time_s: float
    bound: Bound
    flops: float
    bytes: float
    launches: int = 1
    terms: tuple[Term, ...] = ()


class Prediction(BaseModel):
    """What an op costs on a GPU, and why.

    ``time_s`` is the predicted wall time of the op on the device (sum over its kernels).
    ``attainable_flops`` and ``ridge_point`` refer to the execution unit that carries most of
    the op's FLOPs (``unit``/``dtype``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    op: str
    gpu: str
    calibration: str
    time_s: float
    flops: float
    bytes: float
    arithmetic_intensity: float
    unit: str
    dtype: str
    peak_flops: float
    bandwidth_bytes_per_s: float
    ridge_point: float
    attainable_flops: float
    bound: Bound
    flops_by_unit: dict[str, float] = Field(default_factory=dict)
    terms: tuple[Term, ...] = ()
    kernels: tuple[KernelPrediction, ...] = ()
    advice: tuple[str, ...] = ()
    details: dict[str, Any] = Field(default_factory=dict)
    # the condition priced: "in-workload" (back to back, sustained clock, dirty L2),
    # "isolated" (one call after a clean L2 at the boost clock) or "in-graph" (in-workload,
    # replayed from a CUDA graph); "" where it does not apply
    condition: str = ""
    # an eager call priced with a host profile that measured its drift: the time with the
    # host at the p10 and p90 of its speeds (gpumodel.predict.eager_floor)
    time_range_s: tuple[float, float] | None = None
    host_drift: str | None = None
    # how wrong predictions like this one measured, where a set covers them (gpumodel.accuracy)
    accuracy: Accuracy | None = None

    @property
    def achieved_flops(self) -> float:
        return self.flops / self.time_s if self.time_s > 0 else 0.0

    @property
    def roofline_time_s(self) -> float:
        """Pure-roofline lower bound on datasheet peaks."""
        compute = self.flops / self.peak_flops if self.peak_flops else 0.0
        # a one-GPU collective moves nothing and has no link: no bandwidth term (#20)
        memory = self.bytes / self.bandwidth_bytes_per_s if self.bandwidth_bytes_per_s else 0.0
        return max(compute, memory)

    def roofline_disagrees(self) -> str | None:
        """The datasheet roofline's bound where the model's differs (compute-bound on its
        kernels' rates, padded tiles and calibrated efficiencies, at an intensity below the
        datasheet ridge; or the reverse), else None."""
        if self.bound not in ("compute", "memory") or not self.ridge_point or not self.flops:
            return None
        roof = "memory" if self.arithmetic_intensity < self.ridge_point else "compute"
        return roof if roof != self.bound else None

    def roofline_fields(self) -> dict[str, Any]:
        """The seed article's roofline summary: bottleneck, peak achievable, max utilisation."""
        memory_bound = self.arithmetic_intensity < self.ridge_point
        achievable = self.attainable_flops
        return {
            "bottleneck": "memory bandwidth" if memory_bound else "compute",
            "peak_achievable_flops": achievable,
            "max_utilization_pct": 100.0 * achievable / self.peak_flops if self.peak_flops else 0,
            "optimization_direction": (
                "raise arithmetic intensity: fuse ops, reuse data on chip, use larger tiles or "
                "batches, lower precision to move fewer bytes"
                if memory_bound
                else "raise compute efficiency: tensor cores, lower precision, aligned shapes, "
                "fuller waves"
            ),
        }

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["achieved_flops"] = self.achieved_flops
        data["roofline_time_s"] = self.roofline_time_s
        data["roofline"] = self.roofline_fields()
        return data

    def explain(self) -> str:
        """Which roof, why, and what would help, in plain text."""
        lines = [
            f"{self.op} on {self.gpu}: {format_time(self.time_s)}, {self.bound}-bound "
            f"(calibration: {self.calibration}"
            + (f"; condition: {self.condition})" if self.condition else ")"),
            f"  work: {format_quantity(self.flops, 'FLOP')} and {format_quantity(self.bytes, 'B')}"
            f" -> arithmetic intensity {format_number(self.arithmetic_intensity)} FLOP/B",
            f"  roof: {self.unit} {self.dtype} peak {format_quantity(self.peak_flops, 'FLOP/s')}, "
            f"memory {format_quantity(self.bandwidth_bytes_per_s, 'B/s')}, ridge point "
            f"{format_number(self.ridge_point)} FLOP/B -> attainable "
            f"{format_quantity(self.attainable_flops, 'FLOP/s')}",
        ]
        roof = self.roofline_disagrees()
        if roof:
            lines.append(
                f"  {self.bound}-bound on its kernels' rates (calibrated efficiencies, padded "
                f"tiles: the terms below), where the datasheet roofline at this intensity says "
                f"{roof}")  # fmt: skip
        if self.time_s > 0 and self.flops:
            lines.append(
                f"  achieved: {format_quantity(self.achieved_flops, 'FLOP/s')} "
                f"({100 * self.achieved_flops / self.peak_flops:.3g}% of peak)"
                if self.peak_flops
                else ""
            )
        lines.append("  terms:")
        lines += [f"    {t.pretty()}" for t in self.terms]
        if len(self.kernels) > 1:
            lines.append("  kernels:")
            for k in self.kernels:
                lines.append(f"    {k.name}: {format_time(k.time_s)} ({k.bound})")
                lines += [f"      {t.pretty()}" for t in k.terms]
        if self.time_range_s is not None:
            lines.append(drift_range_line(self.time_range_s, self.host_drift))
        lines.append(accuracy_line(self.accuracy))
        if self.advice:
            lines.append("  what would help:")
            lines += [f"    - {a}" for a in self.advice]
        return "\n".join(line for line in lines if line)
