"""The PyTorch engine: the context torch families measure on (the L2 flush before each repeat,
adaptive repeats timed by ``timing.time_torch``), the float64 checks, and the engine's setup and
teardown around a run (gpumodel.validate.runner). Without PyTorch (or without a GPU it can see)
``start`` says why and the runner records it as unavailable.

Timing: ``timing.time_torch`` (torch.cuda.Event on PyTorch's current stream, a busy-wait ahead
of each start event, median of adaptive repeats); working sets under 4x the L2 size are
flushed before each repeat, so every record is a cold-cache ("cold") measurement. Every point
is checked against a float64 reference computed through PyTorch on a sample of its output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

TORCH_MISSING = {"family": "torch", "what": "all", "reason": "PyTorch not importable"}


# --------------------------------------------------------------------------- context


class Ctx:
    def __init__(self, torch: Any, quick: bool):
        self.torch = torch
        self.quick = quick
        props = torch.cuda.get_device_properties(0)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 50 << 20) or (50 << 20))
        clock_khz = getattr(props, "clock_rate", None)
        self.sm_clock_hz = float(clock_khz) * 1e3 if clock_khz else 2.0e9
        self._flush: Any = None
        self.user_flags: dict[str, bool] = {}  # torch's flags when the run began (close restores)

    @property
    def reps(self) -> dict[str, Any]:
        base = {"sm_clock_hz": self.sm_clock_hz}
        if self.quick:
            return {**base, "min_repeats": 5, "max_repeats": 30, "target_s": 0.01}
        return {**base, "min_repeats": 5, "max_repeats": 50, "target_s": 0.02}

    def cold(self, footprint_bytes: int) -> Callable[[], None] | None:
        if footprint_bytes >= 4 * self.l2_bytes:
            return None
        if self._flush is None:
            from gpumodel.validate.timing import torch_l2_flusher

            self._flush = torch_l2_flusher(self.l2_bytes)
        return self._flush

    def time(self, fn: Callable[[], Any], footprint_bytes: int) -> tuple[float, float, int]:
        from gpumodel.validate.timing import time_torch

        return time_torch(fn, flush=self.cold(footprint_bytes), **self.reps)


class CheckError(RuntimeError):
    """A measured point computed the wrong result; it is reported, never recorded."""


def check_close(got: Any, ref: Any, tol: float, what: str) -> float:
    """Norm-wise relative error of ``got`` against the float64 ``ref``; CheckError above tol."""
    torch = torch_module()
    got = got.double()
    if not bool(torch.isfinite(got).all()):
        raise CheckError(f"wrong result: {what}: non-finite output")
    denom = float(ref.norm()) or 1.0
    err = float((got - ref).norm()) / denom
    if err > tol:
        raise CheckError(f"wrong result: {what}: rel err {err:.2e} > {tol:.0e}")
    return err


def torch_module() -> Any:
    import torch

    return torch


def dtype_of(torch: Any, name: str) -> Any:
    return {"bf16": torch.bfloat16, "fp32": torch.float32, "tf32": torch.float32}[name]


def tolerance(name: str) -> float:
    return {"bf16": 2e-2, "fp32": 2e-5, "tf32": 5e-3}[name]


def set_cudnn_tf32(torch: Any, on: bool) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cudnn.allow_tf32 = on


# (module, attribute) of the torch flags a run changes: cuDNN's benchmark mode and TF32, and
# cuBLAS's TF32 (the conditions stage times TF32 GEMMs through it)
USER_FLAGS = (("cudnn", "benchmark"), ("cudnn", "allow_tf32"), ("cuda.matmul", "allow_tf32"))


def _flag_owner(torch: Any, path: str) -> Any:
    owner = torch.backends
    for part in path.split("."):
        owner = getattr(owner, part, None)
    return owner


def saved_flags(torch: Any) -> dict[str, bool]:
    """The user's torch flags that a measurement run changes, as they are now."""
    out = {}
    for path, name in USER_FLAGS:
        owner = _flag_owner(torch, path)
        if owner is not None and hasattr(owner, name):
            out[f"{path}.{name}"] = bool(getattr(owner, name))
    return out


def restore_flags(torch: Any, flags: dict[str, bool]) -> None:
    """Put back what ``saved_flags`` read (TF32 setters warn on newer torch: silenced)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key, value in flags.items():
            path, name = key.rsplit(".", 1)
            setattr(_flag_owner(torch, path), name, value)


@contextmanager
def user_settings_kept(torch: Any) -> Iterator[None]:
    """Inside the block a measurement may set torch's flags as it needs; the caller's come
    back when it ends, however it ends."""
    flags = saved_flags(torch)
    try:
        yield
    finally:
        restore_flags(torch, flags)


# --------------------------------------------------------------------------- engine


def start(quick: bool) -> Ctx | list[dict[str, Any]]:
    """The context of a PyTorch run, or the unavailable rows saying why there is none."""
    try:
        import torch
    except Exception:
        return [dict(TORCH_MISSING)]
    if not torch.cuda.is_available():
        return [{"family": "torch", "what": "all", "reason": "PyTorch sees no CUDA GPU"}]
    ctx = Ctx(torch, quick)
    ctx.user_flags = saved_flags(torch)
    # cuDNN convolutions as users who tune them run them: benchmark mode times cuDNN's
    # algorithms at each new shape and keeps the fastest. It is set before the run's first
    # convolution because PyTorch keeps one cuDNN plan per shape for the process, whichever mode
    # chose it (aten/src/ATen/native/cudnn/Conv_v8.cpp, run_single_conv: the plan cache is looked
    # up before the benchmark flag), so turning it on after a convolution changes nothing
    torch.backends.cudnn.benchmark = True
    return ctx


def release(ctx: Ctx) -> None:
    ctx.torch.cuda.empty_cache()


def sync(ctx: Ctx) -> None:
    ctx.torch.cuda.synchronize()


def close(ctx: Ctx) -> None:
    """After the run: torch's flags as found (``USER_FLAGS``), the flush buffer and cached
    memory freed."""
    restore_flags(ctx.torch, ctx.user_flags)
    ctx._flush = None
    ctx.torch.cuda.empty_cache()
