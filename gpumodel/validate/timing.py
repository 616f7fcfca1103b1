"""Shared GPU timing helpers for the validation runners.

How one measurement is taken (``time_cuda`` for CuPy work, ``time_torch`` for PyTorch work):

1. Warm-up calls, untimed: run-time compilation, cuBLAS/cuDNN handle creation and first-touch
   allocation stay out of the numbers. Then one iteration is enqueued behind a busy-wait to learn
   how long the host takes to *enqueue* one timed iteration (flush, two events, the work).
2. One timed probe call gives the device time per call; the repeat count is then chosen so the
   timed calls add up to about ``target_s`` (clamped to ``min_repeats``..``max_repeats``).
3. A batch: one busy-wait kernel (``spin``) long enough for the host to enqueue every repeat of
   the batch, then per repeat an optional L2 flush (``flush``), start event, the work, stop
   event; one synchronisation reads every interval. The busy-wait keeps the GPU occupied while
   Python enqueues, so the repeats then run back to back on the device and each interval holds
   device time only, not Python or launch overhead (the trick nvbench calls a blocking kernel).
   A busy-wait per repeat is not enough: with one Python launch costing ~7 us, the host barely
   keeps ahead and some intervals catch it (seen on an H100 as a bimodal spread for 5 us work).
4. Result: median of the intervals, spread = (p90 - p10) / median, and the repeat count. A
   batch with spread above ``NOISY_SPREAD`` is retaken (up to ``RETAKES`` times) and the
   steadiest kept: interference on a shared host shows as a bimodal batch.

Heavy imports (cupy, torch) happen inside the functions that need them.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from gpumodel.errors import SpecError

_SPIN_MIN_S = 50e-6
_SPIN_MAX_S = 0.5


# --------------------------------------------------------------------------- pure helpers


def summarize(times_s: Sequence[float]) -> tuple[float, float]:
    """(median, spread) of repeated timings; spread = (p90 - p10) / median."""
    if not times_s:
        raise SpecError("no timings to summarize")
    import numpy as np

    arr = np.asarray(times_s, dtype=float)
    med = float(np.median(arr))
    p10, p90 = (float(x) for x in np.percentile(arr, [10.0, 90.0]))
    spread = (p90 - p10) / med if med > 0 else 0.0
    return med, spread


def choose_repeats(
    estimate_s: float, *, target_s: float, min_repeats: int, max_repeats: int
) -> int:
    """Repeats so the timed calls add up to about ``target_s``, within [min, max]."""
    if min_repeats < 1 or max_repeats < min_repeats:
        raise SpecError(f"bad repeat bounds {min_repeats}..{max_repeats}")
    if not math.isfinite(estimate_s) or estimate_s <= 0:
        return max_repeats
    return int(min(max_repeats, max(min_repeats, math.ceil(target_s / estimate_s))))


def spin_seconds(host_iter_s: float, repeats: int) -> float:
    """Busy-wait queued ahead of a batch of ``repeats`` timed iterations: long enough for the
    host to enqueue all of them (1.5x its measured time per iteration, plus 50 us), so the GPU
    never runs dry between them; at most 0.5 s."""
    return min(_SPIN_MAX_S, max(_SPIN_MIN_S, 1.5 * host_iter_s * repeats + 50e-6))


def log_sizes(lo: int, hi: int, per_octave: int, multiple: int = 1) -> list[int]:
    """Sizes from lo to hi (inclusive), ``per_octave`` points per doubling, each rounded to a
    multiple of ``multiple``; sorted, no duplicates."""
    if lo <= 0 or hi < lo or per_octave < 1 or multiple < 1:
        raise SpecError("bad size range")
    octaves = math.log2(hi / lo)
    count = round(octaves * per_octave) + 1
    out: set[int] = set()
    for i in range(count):
        x = lo * 2.0 ** (i / per_octave)
        v = max(multiple, round(x / multiple) * multiple)
        out.add(min(v, max(multiple, (hi // multiple) * multiple)))
    return sorted(out)


def log_ints(lo: int, hi: int, count: int) -> list[int]:
    """About ``count`` log-spaced integers from lo to hi inclusive (duplicates removed)."""
    if lo < 1 or hi < lo or count < 2:
        raise SpecError("bad integer range")
    ratio = (hi / lo) ** (1.0 / (count - 1))
    return sorted({round(lo * ratio**i) for i in range(count)} | {lo, hi})


# --------------------------------------------------------------------------- CuPy side

_KERNELS: dict[str, Any] = {}


def _timing_kernels() -> dict[str, Any]:
    """spin_ns, l2_flush_read and empty_kernel from validation/kernels/timing.cu (compiled once
    per process)."""
    if not _KERNELS:
        import cupy

        from gpumodel._paths import kernels_dir

        src = (kernels_dir() / "timing.cu").read_text()
        mod = cupy.RawModule(code=src, options=("-std=c++17",))
        for name in ("spin_ns", "l2_flush_read", "empty_kernel"):
            _KERNELS[name] = mod.get_function(name)
    return _KERNELS


def spin(seconds: float) -> None:
    """Queue a one-thread busy-wait of ``seconds`` on the current CuPy stream."""
    import numpy as np

    _timing_kernels()["spin_ns"]((1,), (1,), (np.int64(int(seconds * 1e9)),))


def l2_flusher(l2_bytes: int, *, factor: int = 3, sm_count: int = 132) -> Callable[[], None]:
    """A callable that evicts L2 by *reading* a buffer of ``factor`` x the L2 size.

    Reading rather than writing: a written flush buffer leaves L2 full of dirty lines, and their
    write-back would be charged to the timed kernel that evicts them.
    """
    import cupy
    import numpy as np

    nbytes = max(factor * int(l2_bytes), 64 << 20)
    n4 = nbytes // 16
    buf = cupy.empty(n4 * 4, dtype=cupy.float32)
    cupy.cuda.runtime.memset(buf.data.ptr, 0x3F, n4 * 16)  # written once, here (0.747f)
    sink = cupy.zeros(1, dtype=cupy.float32)
    kern = _timing_kernels()["l2_flush_read"]
    grid = (int(sm_count) * 8,)
    n4_arg = np.int64(n4)

    def flush() -> None:
        kern(grid, (256,), (buf, n4_arg, sink))

    flush.nbytes = nbytes  # type: ignore[attr-defined]
    return flush


def _measure(
    fn: Callable[[], Any],
    *,
    flush: Callable[[], None] | None,
    min_repeats: int,
    max_repeats: int,
    target_s: float,
    warmup: int,
    use_spin: bool,
    new_event: Callable[[], Any],
    record: Callable[[Any], None],
    elapsed_s: Callable[[Any, Any], float],
    spin_for: Callable[[float], None] | None,
    sync: Callable[[], None],
) -> tuple[float, float, int]:
    """The event-timing procedure of the module docstring, for any event API."""
    for _ in range(max(1, warmup)):
        if flush is not None:
            flush()
        fn()
    sync()
    spinning = use_spin and spin_for is not None
    host_iter_s = 0.0
    if spinning:
        # host time to enqueue one timed iteration, taken while the GPU is kept busy
        assert spin_for is not None
        spin_for(2e-3)
        a, b = new_event(), new_event()
        t0 = time.perf_counter()
        if flush is not None:
            flush()
        record(a)
        fn()
        record(b)
        host_iter_s = time.perf_counter() - t0
        sync()

    def batch(n: int) -> list[float]:
        events = [(new_event(), new_event()) for _ in range(n)]
        gc_was_enabled = gc.isenabled()
        gc.disable()  # no collector pause while the host races the spin
        try:
            if spinning:
                assert spin_for is not None
                spin_for(spin_seconds(host_iter_s, n))
            for a, b in events:
                if flush is not None:
                    flush()
                record(a)
                fn()
                record(b)
        finally:
            if gc_was_enabled:
                gc.enable()
        sync()
        return [elapsed_s(a, b) for a, b in events]

    probe = batch(1)[0]
    n = choose_repeats(probe, target_s=target_s, min_repeats=min_repeats, max_repeats=max_repeats)
    med, spread = steadiest(lambda: summarize(batch(n)))
    return med, spread, n


# A batch whose repeats spread wider than this (p90 - p10 over the median) caught interference
# (a shared host, a clock change): seen on an H100 as a bimodal 103/221 us RMS norm, spread
# 0.85, where the other runs measured 103 us with spread < 0.05. Such a batch is retaken.
NOISY_SPREAD = 0.3
RETAKES = 2


def steadiest(
    take: Callable[[], tuple[float, float]], noisy: float = NOISY_SPREAD, retakes: int = RETAKES
) -> tuple[float, float]:
    """(median, spread) of the steadiest of up to ``1 + retakes`` batches: a batch with spread
    above ``noisy`` is retaken (nvbench's rule: measure until the noise is low enough)."""
    best = take()
    for _ in range(retakes):
        if best[1] <= noisy:
            break
        best = min(best, take(), key=lambda ms: ms[1])
    return best


def time_cuda(
    fn: Callable[[], Any],
    *,
    flush: Callable[[], None] | None = None,
    min_repeats: int = 5,
    max_repeats: int = 50,
    target_s: float = 0.02,
    warmup: int = 2,
    use_spin: bool = True,
) -> tuple[float, float, int]:
    """Device time of ``fn`` (work queued on the current CuPy stream), timed with CUDA events.

    Returns (median seconds, spread, repeats). ``flush`` runs before every call, outside the
    timed interval (cold-cache measurement); without it the calls run back to back on the same
    data (hot). ``use_spin=False`` for work that blocks the host (pageable copies).
    """
    import cupy

    stream = cupy.cuda.get_current_stream()
    return _measure(
        fn,
        flush=flush,
        min_repeats=min_repeats,
        max_repeats=max_repeats,
        target_s=target_s,
        warmup=warmup,
        use_spin=use_spin,
        new_event=cupy.cuda.Event,
        record=lambda ev: ev.record(stream),
        elapsed_s=lambda a, b: cupy.cuda.get_elapsed_time(a, b) * 1e-3,
        spin_for=spin,
        sync=stream.synchronize,
    )


def time_host(fn: Callable[[], Any], *, repeats: int, warmup: int = 2) -> tuple[float, float, int]:
    """Host wall-clock time of ``fn`` (which must synchronise itself if it queues device work)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    med, spread = summarize(times)
    return med, spread, repeats


# --------------------------------------------------------------------------- PyTorch side


def torch_l2_flusher(l2_bytes: int, *, factor: int = 3) -> Callable[[], None]:
    """Evict L2 on PyTorch's current stream by reading (summing) a buffer of factor x L2."""
    import torch

    nbytes = max(factor * int(l2_bytes), 64 << 20)
    buf = torch.rand(nbytes // 4, device="cuda", dtype=torch.float32)

    def flush() -> None:
        buf.sum()

    flush.nbytes = nbytes  # type: ignore[attr-defined]
    return flush


def time_torch(
    fn: Callable[[], Any],
    *,
    flush: Callable[[], None] | None = None,
    min_repeats: int = 5,
    max_repeats: int = 50,
    target_s: float = 0.02,
    warmup: int = 2,
    use_spin: bool = True,
    sm_clock_hz: float = 2.0e9,
) -> tuple[float, float, int]:
    """``time_cuda`` for PyTorch work: torch.cuda.Event on PyTorch's current stream, and
    torch.cuda._sleep (a busy-wait counted in SM cycles) as the spin."""
    import torch

    stream = torch.cuda.current_stream()
    sleep = getattr(torch.cuda, "_sleep", None)

    def spin_for(seconds: float) -> None:
        assert sleep is not None
        sleep(int(seconds * sm_clock_hz))

    return _measure(
        fn,
        flush=flush,
        min_repeats=min_repeats,
        max_repeats=max_repeats,
        target_s=target_s,
        warmup=warmup,
        use_spin=use_spin,
        new_event=lambda: torch.cuda.Event(enable_timing=True),
        record=lambda ev: ev.record(stream),
        elapsed_s=lambda a, b: a.elapsed_time(b) * 1e-3,
        spin_for=spin_for if sleep is not None else None,
        sync=stream.synchronize,
    )
