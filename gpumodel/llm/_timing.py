"""Time a list of layer ops with the op model, and the host/GPU queue of an eager runtime."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpumodel.calibration import Calibration, resolve
from gpumodel.llm._comm import Collective, collective_kernel
from gpumodel.llm.layers import LayerOp
from gpumodel.predict import predict
from gpumodel.prediction import Bound, KernelPrediction
from gpumodel.specs import GPUSpec


class OpTime(BaseModel):
    """One named op of a step: ``count`` executions per step (layers x per-layer count)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    kind: str
    count: int
    time_s: float
    bound: Bound
    flops: float
    bytes: float
    kernels: int


@dataclass(frozen=True)
class Timed:
    """One LayerOp timed once: its kernels in order (for the launch queue) and totals."""

    entry: LayerOp
    kernels: tuple[KernelPrediction, ...]

    @property
    def time_s(self) -> float:
        return self.entry.count * sum(k.time_s for k in self.kernels)

    @property
    def launches(self) -> int:
        return self.entry.count * sum(k.launches for k in self.kernels)

    def kernel_times(self) -> list[float]:
        """GPU time of each launch, in issue order (``count`` repetitions)."""
        one: list[float] = []
        for k in self.kernels:
            one += [k.time_s / k.launches] * k.launches if k.launches else []
        return one * self.entry.count


class Timer:
    """Times ops on one GPU with one calibration, caching repeated shapes.

    ``op_times`` maps a LayerOp name (``"lm_head"``, ``"q_proj"``, ...) to a measured time of
    one execution in seconds: that op's kernels keep their FLOPs, bytes and launches and are
    scaled to add up to the measurement (to plug measured kernels into the step model)."""

    def __init__(self, gpu: GPUSpec, calibration: Any, op_times: Mapping[str, float] | None = None):
        self.gpu = gpu
        self.calibration: Calibration | None = resolve(calibration, gpu)
        self.op_times = dict(op_times or {})
        self._cache: dict[Any, tuple[KernelPrediction, ...]] = {}

    @property
    def label(self) -> str:
        return self.calibration.label if self.calibration else "none (datasheet only)"

    def kernels(self, entry: LayerOp) -> tuple[KernelPrediction, ...]:
        key = (entry.op, entry.l2)
        if key not in self._cache:
            if isinstance(entry.op, Collective):
                self._cache[key] = (collective_kernel(entry.op, self.gpu, self.calibration),)
            else:
                cal = self.calibration if self.calibration is not None else "none"
                self._cache[key] = predict(entry.op, self.gpu, cal, l2=entry.l2).kernels
        kernels = self._cache[key]
        measured = self.op_times.get(entry.name)
        if measured is None:
            return kernels
        total = sum(k.time_s for k in kernels)
        scale = measured / total if total > 0 else 0.0
        return tuple(
            k.model_copy(
                update={"time_s": k.time_s * scale if total > 0 else measured / len(kernels)}
            )
            for k in kernels
        )

    def time(self, entry: LayerOp) -> Timed:
        return Timed(entry, self.kernels(entry))

    def time_all(self, entries: Iterable[LayerOp]) -> list[Timed]:
        return [self.time(e) for e in entries]


def summarize(groups: Sequence[tuple[list[Timed], int]]) -> list[OpTime]:
    """Per-name totals over (timed ops, repetitions) groups, in first-seen order."""
    out: dict[str, dict[str, Any]] = {}
    for timed, reps in groups:
        for t in timed:
            row = out.setdefault(t.entry.name, {
                "name": t.entry.name, "kind": t.entry.kind, "count": 0, "time_s": 0.0,
                "flops": 0.0, "bytes": 0.0, "kernels": 0, "_bound": {},
            })  # fmt: skip
            n = reps * t.entry.count
            row["count"] += n
            row["time_s"] += reps * t.time_s
            row["flops"] += n * sum(k.flops for k in t.kernels)
            row["bytes"] += n * sum(k.bytes for k in t.kernels)
            row["kernels"] += reps * t.launches
            for k in t.kernels:
                row["_bound"][k.bound] = row["_bound"].get(k.bound, 0.0) + n * k.time_s
    result = []
    for row in out.values():
        bounds = row.pop("_bound")
        row["bound"] = max(bounds, key=bounds.__getitem__) if bounds else "latency"
        result.append(OpTime(**row))
    return result


def queue_time(kernel_times: Sequence[float], host_per_kernel_s: float) -> float:
    """Finish time of kernels issued asynchronously by a host that spends ``host_per_kernel_s``
    on each launch: kernel i is issued at (i+1)*host and starts at max(issue, previous end).

    This is the stream queue of eager PyTorch: the CPU runs ahead while kernels are long and
    the GPU idles while a stretch of short kernels outpaces the host. It lies between the two
    simple bounds, ``max(sum(gpu), n * host)`` (aggregate) and ``sum(max(gpu_i, host))``
    (per kernel), and equals the first when all kernels are alike.
    """
    end = 0.0
    for i, g in enumerate(kernel_times):
        end = max(end, (i + 1) * host_per_kernel_s) + g
    return end
