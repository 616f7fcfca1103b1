"""The two conditions a kernel runs under, measured side by side on PyTorch's own kernels.

``isolated``: what the validate harness has always timed: a short batch of calls, each after an
L2 flush that *reads* a buffer (L2 left clean), at the short-burst boost clock.

``in-workload``: what training and inference see: the same kernel back to back for long
enough that the GPU reaches its steady power-limited clock (``BACK_TO_BACK_S``).

``l2="dirty"`` (an L2 state, not a condition): after a flush that *writes*, L2 holds dirty
lines whose write-back nobody has paid for and the timed kernel pays it
(``triton.testing.do_bench`` flushes by writing zeros). In a real step the writer paid for its
own output bytes, so predictions of whole steps keep ``l2="cold"``.

While each back-to-back loop runs, ``nvidia-smi`` samples the SM clock and the power draw
every 50 ms (reads only: clocks are never set). Every kernel is also timed by
``triton.testing.do_bench`` when Triton is installed (an independent method, never fitted).

Records (one dict per kernel and condition) feed ``fit_conditions`` (no GPU code): the
power-limited clock of tensor-core work (``gpumodel.model.power``, one parameter per
architecture, and the DRAM stream's energy per byte from weight-streaming GEMMs that stay under
the limit, ``DRAM_POWER``) and the dirty-L2 write-back fraction, each fitted on half the points
and scored on the other half, like every family of ``gpumodel validate``. Run on a GPU machine
with ``gpumodel validate --conditions --out CAL.yaml --report DIR``, or measure only with
``python -m gpumodel.validate.conditions --out F``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MIN_BACK_TO_BACK_S = 150e-6  # shorter kernels: the Python loop's gaps show in the timing
STATIC_POWER_FRACTION_DEFAULT = 0.1  # H100: 70 W idle of a 700 W limit (nvidia-smi -q)
IDLE_MAX_FRACTION = 0.2  # an "idle" power reading above this share of the limit is not idle
# long enough for the power controller to settle (seen: < 0.5 s on H100), timing the second half
BACK_TO_BACK_S = 1.2
SAMPLE_MS = 50
QUERY = "clocks.sm,clocks.mem,power.draw,clocks_event_reasons.active"

# torch.matmul / torch._scaled_mm products: (dtype, m, n, k)
GEMMS: list[tuple[str, int, int, int]] = [
    *[("bf16", s, s, s) for s in (1024, 2048, 3072, 4096, 6144, 8192)],
    ("bf16", 8192, 14336, 4096), ("bf16", 8192, 4096, 14336), ("bf16", 16384, 8192, 1024),
    *[("fp16", s, s, s) for s in (2048, 4096, 8192)],
    *[("tf32", s, s, s) for s in (2048, 4096, 8192)],
    *[("fp32", s, s, s) for s in (2048, 4096)],
    *[("fp8", s, s, s) for s in (2048, 4096, 8192)],
    # each tensor-core dtype off the squares too, for the per-dtype power of the sustained clock
    *[(dt, m, n, k) for dt in ("fp16", "tf32", "fp8")
      for m, n, k in ((3072, 3072, 3072), (6144, 6144, 6144), (8192, 11008, 4096),
                      (8192, 4096, 11008), (16384, 8192, 1024))],
]  # fmt: skip
# decode-sized products (weights stream from DRAM): read-flushed vs write-flushed L2
DECODE: list[tuple[str, int, int, int]] = [
    ("bf16", m, n, 4096) for n in (4096, 14336) for m in (1, 16, 64, 128)
]
# products that stream 470 MB of weights at full bandwidth with little tensor work, back to
# back: the DRAM stream's power, read off NVML where they stay under the limit at the maximum
# clock (gpumodel.model.power; an H200: 91 pJ/B)
DRAM_POWER: list[tuple[str, int, int, int]] = [("bf16", m, 28672, 8192) for m in (16, 32, 48)]
# a point counts for it when its median SM clock is within this share of the maximum and its
# median power this far under the limit
DRAM_POWER_MIN_CLOCK, DRAM_POWER_MAX_LIMIT = 0.985, 0.965
# memory-bound work: the clock should stay at its maximum
COPY_BYTES = 1 << 30
# F.conv2d, ResNet-50 shapes: (batch, c_in, c_out, hw, kernel, stride)
CONVS: list[tuple[int, int, int, int, int, int]] = [
    (32, 3, 64, 224, 7, 2), (32, 64, 64, 56, 3, 1), (32, 256, 64, 56, 1, 1),
    (32, 128, 128, 28, 3, 1), (32, 256, 256, 14, 3, 1), (32, 512, 512, 7, 3, 1),
    (128, 64, 64, 56, 3, 1),
]  # fmt: skip
HOST_COPY_BYTES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 32 << 20,
                   64 << 20, 128 << 20, 256 << 20]  # fmt: skip
# torch.bmm: (dtype, batch, m, n, k) (attention-like batched products)
BMMS: list[tuple[str, int, int, int, int]] = [
    ("bf16", 32, 2048, 2048, 128), ("bf16", 64, 1024, 128, 1024), ("fp16", 16, 4096, 4096, 64),
    ("tf32", 32, 1024, 1024, 128),
]  # fmt: skip
# F.scaled_dot_product_attention, bf16: (batch, heads, seq, head_dim, causal)
SDPAS: list[tuple[int, int, int, int, bool]] = [
    (8, 16, 1024, 64, False), (8, 16, 2048, 128, True), (4, 32, 4096, 128, False),
    (4, 32, 4096, 128, True), (16, 16, 512, 64, True), (2, 16, 8192, 128, True),
]  # fmt: skip
# families also run back to back (one kernel each; clock and power recorded): the first of
# each list
B2B_PER_FAMILY = 2


def _smi_sampler(path: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
         "-lms", str(SAMPLE_MS), "-f", path],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def back_to_back(torch: Any, fn: Callable[[], Any], seconds: float = BACK_TO_BACK_S) -> dict:
    """Run ``fn`` back to back for ``seconds``; time the second half with CUDA events and
    read the clock and power samples taken during it."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile("r", suffix=".csv") as log:
        smi = _smi_sampler(log.name)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds / 2:  # settle
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
        t_half = time.perf_counter() - t0
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        calls = 0
        start.record()
        t1 = time.perf_counter()
        while time.perf_counter() - t1 < seconds / 2:
            for _ in range(5):
                fn()
            calls += 5
            torch.cuda.synchronize()
        stop.record()
        torch.cuda.synchronize()
        smi.terminate()
        smi.wait()
        rows = [r for r in csv.reader(Path(log.name).read_text().splitlines()) if len(r) >= 3]
    # samples of the timed half only (the sampler started with the loop)
    total = time.perf_counter() - t0
    first = int(len(rows) * t_half / total) if total > 0 else 0
    rows = rows[first:] or rows

    def num(col: int) -> list[float]:
        out = []
        for r in rows:
            try:
                out.append(float(r[col]))
            except (ValueError, IndexError):
                pass
        return out

    sm, mem, power = num(0), num(1), num(2)
    return {
        "time_s": start.elapsed_time(stop) / 1e3 / calls,
        "calls": calls,
        "samples": len(sm),
        "sm_clock_mhz_median": statistics.median(sm) if sm else None,
        "sm_clock_mhz_min": min(sm) if sm else None,
        "mem_clock_mhz_median": statistics.median(mem) if mem else None,
        "power_w_median": statistics.median(power) if power else None,
        "clock_event_reasons": sorted({r[3].strip() for r in rows if len(r) > 3}),
    }


def _flushers(torch: Any, l2_bytes: int) -> dict[str, Callable[[], None]]:
    """read: sum a buffer of 3 x L2 (the harness's flush, L2 left clean); write-zeros: what
    do_bench does (zero_ a 256 MB buffer); write-random: copy random data over a 3 x L2
    buffer (dirty lines that do not compress)."""
    n = max(3 * l2_bytes, 256 << 20) // 4
    buf = torch.rand(n, device="cuda", dtype=torch.float32)
    src = torch.rand(n, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    zeros = torch.empty(256 << 18, device="cuda", dtype=torch.float32)
    return {
        "read": lambda: buf.sum(),
        "write-zeros": lambda: zeros.zero_(),
        "write-random": lambda: dst.copy_(src),
    }


def _gemm_row(dtype: str, m: int, n: int, k: int) -> dict[str, Any]:
    """The op of a product ``_gemm_fn`` times: fp8 as ``torch._scaled_mm`` runs it by default,
    without fast accumulation (``Gemm.fast_accum``)."""
    op: dict[str, Any] = {"op": "gemm", "m": m, "n": n, "k": k, "dtype": dtype}
    return {**op, "fast_accum": False} if dtype == "fp8" else op


def adapt_gemm_row(row: dict[str, Any]) -> dict[str, Any]:
    """Records of conditions runs before the op named fp8's accumulation: their products ran
    ``torch._scaled_mm`` with PyTorch's default, ``use_fast_accum=False`` (``_gemm_fn``)."""
    if row.get("op") == "gemm" and row.get("dtype") == "fp8" and "fast_accum" not in row:
        return {**row, "fast_accum": False}
    return row


def _gemm_fn(torch: Any, dtype: str, m: int, n: int, k: int) -> Callable[[], Any]:
    dev = "cuda"
    if dtype == "fp8":
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()  # column-major B
        one = torch.tensor(1.0, device=dev)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32,
           "fp32": torch.float32}[dtype]  # fmt: skip
    a = torch.randn(m, k, device=dev, dtype=tdt)
    b = torch.randn(k, n, device=dev, dtype=tdt)
    tf32 = dtype == "tf32"

    def fn() -> Any:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        return torch.matmul(a, b)

    return fn


def _do_bench(fn: Callable[[], Any]) -> float | None:
    try:
        from triton.testing import do_bench
    except Exception:
        return None
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median")) * 1e-3


def measure(quick: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every kernel of the stage in each condition, with the device's facts; the caller's
    torch flags (cuDNN benchmark mode and TF32, cuBLAS TF32) are as found afterwards."""
    import torch

    from gpumodel.validate.torch_engine import user_settings_kept

    with user_settings_kept(torch):
        return _measure(torch, quick, log)


def _measure(torch: Any, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from gpumodel.validate.timing import time_torch

    started = time.perf_counter()
    seconds: dict[str, float] = {}

    def lap(section: str) -> None:  # wall seconds of each section, in the log
        seconds[section] = time.perf_counter() - started - sum(seconds.values())

    facts = device_facts(torch)  # first: the idle power reading before any work
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    flush = _flushers(torch, l2)
    records: list[dict[str, Any]] = []
    gemms = GEMMS[::3] if quick else GEMMS
    decode = DECODE[::2] if quick else DECODE

    def isolated(fn: Callable[[], Any], how: str = "read") -> tuple[float, float]:
        t, spread, _ = time_torch(fn, flush=flush[how], target_s=0.02, max_repeats=30)
        return t, spread

    for dtype, m, n, k in gemms:
        fn = _gemm_fn(torch, dtype, m, n, k)
        op = _gemm_row(dtype, m, n, k)
        t_iso, spread = isolated(fn)
        b2b = back_to_back(torch, fn, 1.0 if quick else BACK_TO_BACK_S)
        t_bench = _do_bench(fn)
        meta = {"engine": "torch", "kernel": "torch._scaled_mm" if dtype == "fp8"
                else "torch.matmul"}  # fmt: skip
        records.append({"family": "gemm", "condition": "isolated", "op": op, "time_s": t_iso,
                        "spread": spread, "meta": {**meta, "flush": "read"}})  # fmt: skip
        records.append({"family": "gemm", "condition": "in-workload", "op": op,
                        "time_s": b2b.pop("time_s"), "meta": {**meta, "flush": "none", **b2b}})  # fmt: skip
        if t_bench is not None:
            records.append({"family": "gemm", "condition": "do_bench", "op": op,
                            "time_s": t_bench, "meta": {**meta, "flush": "write-zeros",
                                                        "method": "triton.testing.do_bench"}})  # fmt: skip
        tf = 2 * m * n * k
        log(f"gemm {dtype} {m}x{n}x{k}: isolated {tf / t_iso / 1e12:.0f} TFLOP/s, back to back "
            f"{tf / records[-2 if t_bench else -1]['time_s'] / 1e12:.0f} at "
            f"{b2b['sm_clock_mhz_median']} MHz {b2b['power_w_median']} W"
            + (f", do_bench {tf / t_bench / 1e12:.0f}" if t_bench else ""))  # fmt: skip

    for dtype, m, n, k in decode:
        fn = _gemm_fn(torch, dtype, m, n, k)
        op = {"op": "gemm", "m": m, "n": n, "k": k, "dtype": dtype}
        line = f"decode gemm {m}x{n}x{k}:"
        for how in ("read", "write-zeros", "write-random"):
            t, spread = isolated(fn, how)
            records.append({"family": "gemm", "condition": "isolated" if how == "read"
                            else "dirty-l2", "op": op, "time_s": t, "spread": spread,
                            "meta": {"engine": "torch", "flush": how}})  # fmt: skip
            line += f" {how} {t * 1e6:.1f} us"
        t_bench = _do_bench(fn)
        if t_bench is not None:
            records.append({"family": "gemm", "condition": "do_bench", "op": op, "time_s": t_bench,
                            "meta": {"engine": "torch", "flush": "write-zeros",
                                     "method": "triton.testing.do_bench"}})  # fmt: skip
            line += f" do_bench {t_bench * 1e6:.1f} us"
        log(line)
    for dtype, m, n, k in DRAM_POWER[:1] if quick else DRAM_POWER:
        b2b = back_to_back(torch, _gemm_fn(torch, dtype, m, n, k), 1.0 if quick else BACK_TO_BACK_S)
        t = b2b.pop("time_s")
        meta = {"engine": "torch", "flush": "none", "set": "dram-power", **b2b}
        records.append({"family": "gemm", "condition": "in-workload",
                        "op": _gemm_row(dtype, m, n, k), "time_s": t, "meta": meta})  # fmt: skip
        log(f"dram-power gemm {m}x{n}x{k}: {(m * k + k * n) * 2 / t / 1e12:.2f} TB/s at "
            f"{b2b['sm_clock_mhz_median']} MHz {b2b['power_w_median']} W")  # fmt: skip
    lap("gemm")
    records += _bmms(torch, flush["read"], log, quick)
    lap("bmm")
    records += _sdpas(torch, flush["read"], log, quick)
    lap("sdpa")
    records += _convs(torch, flush["read"], log, quick)
    lap("conv2d")
    records += _host_copies(torch, log, quick)
    src = torch.empty(COPY_BYTES // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    b2b = back_to_back(torch, lambda: dst.copy_(src), 1.0 if quick else BACK_TO_BACK_S)
    records.append({"family": "copy", "condition": "in-workload",
                    "op": {"op": "copy", "bytes": float(COPY_BYTES)},
                    "time_s": b2b.pop("time_s"), "meta": b2b})  # fmt: skip
    log(f"copy 1 GiB back to back: {b2b['sm_clock_mhz_median']} MHz {b2b['power_w_median']} W")
    lap("copies")
    log(f"conditions measured in {sum(seconds.values()):.1f} s ("
        + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()) + ")")
    return {"device": facts, "records": records}


def _family_records(
    torch: Any, family: str, op: dict[str, Any], fn: Callable[[], Any], flush: Callable[[], None],
    meta: dict[str, Any], back: bool, quick: bool,
) -> tuple[list[dict[str, Any]], str]:  # fmt: skip
    """One kernel in every condition: isolated (read flush, the harness's timing core), back
    to back with NVML clock and power (when ``back``), and do_bench (independent)."""
    from gpumodel.validate.timing import time_torch

    t, spread, _ = time_torch(fn, flush=flush, target_s=0.02, max_repeats=30)
    out = [{"family": family, "condition": "isolated", "op": op, "time_s": t, "spread": spread,
            "meta": {**meta, "flush": "read"}}]  # fmt: skip
    line = f"isolated {t * 1e6:.1f} us"
    if back:
        b2b = back_to_back(torch, fn, 1.0 if quick else BACK_TO_BACK_S)
        out.append({"family": family, "condition": "in-workload", "op": op,
                    "time_s": b2b.pop("time_s"), "meta": {**meta, "flush": "none", **b2b}})  # fmt: skip
        line += (f", back to back {out[-1]['time_s'] * 1e6:.1f} us at "
                 f"{b2b['sm_clock_mhz_median']} MHz {b2b['power_w_median']} W")  # fmt: skip
    tb = _do_bench(fn)
    if tb is not None:
        out.append({"family": family, "condition": "do_bench", "op": op, "time_s": tb,
                    "meta": {**meta, "flush": "write-zeros", "method": "triton.testing.do_bench"}})  # fmt: skip
        line += f", do_bench {tb * 1e6:.1f} us"
    return out, line


def _bmms(
    torch: Any, flush: Callable[[], None], log: Callable[[str], None], quick: bool
) -> list[dict[str, Any]]:
    """torch.bmm: batched products (TF32 via allow_tf32)."""
    out = []
    for i, (dtype, batch, m, n, k) in enumerate(BMMS[::2] if quick else BMMS):
        tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[dtype]
        a = torch.randn(batch, m, k, device="cuda", dtype=tdt)
        b = torch.randn(batch, k, n, device="cuda", dtype=tdt)

        def fn(a: Any = a, b: Any = b, tf32: bool = dtype == "tf32") -> Any:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            return torch.bmm(a, b)

        op = {"op": "gemm", "m": m, "n": n, "k": k, "dtype": dtype, "batch": batch}
        recs, line = _family_records(torch, "bmm", op, fn, flush,
                                     {"engine": "torch", "kernel": "torch.bmm"},
                                     i < B2B_PER_FAMILY, quick)  # fmt: skip
        out += recs
        log(f"bmm {dtype} {batch}x{m}x{n}x{k}: {line}")
    return out


def sdpa_backend(torch: Any, fn: Callable[[], Any]) -> tuple[str, list[str]]:
    """(gpumodel attention impl, CUDA kernel names) of one SDPA call, read from torch.profiler:
    "cudnn" when a cuDNN kernel ran, "efficient" for the memory-efficient (xFormers) kernel,
    "flash" for FlashAttention-2, else "naive" (separate matmuls, softmax)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events() if str(e.device_type).endswith("CUDA")})
    except Exception as exc:  # a profiler that cannot start must not stop the run
        return "flash", [f"profiler failed: {exc}"]
    low = " ".join(names).lower()
    if "cudnn" in low:
        return "cudnn", names
    if "fmha_cutlass" in low or "efficient_attention" in low:
        return "efficient", names
    if "flash" in low or "fmha" in low:
        return "flash", names
    return "naive", names


def _sdpas(
    torch: Any, flush: Callable[[], None], log: Callable[[str], None], quick: bool
) -> list[dict[str, Any]]:
    """F.scaled_dot_product_attention, bf16 (PyTorch picks its flash backend on Hopper)."""
    import torch.nn.functional as F

    out = []
    for i, (batch, heads, seq, hd, causal) in enumerate(SDPAS[::2] if quick else SDPAS):
        q, k, v = (torch.randn(batch, heads, seq, hd, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))  # fmt: skip

        def fn(q: Any = q, k: Any = k, v: Any = v, causal: bool = causal) -> Any:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        # the backend PyTorch picked decides the kernel gpumodel prices (cuDNN on Hopper)
        impl, names = sdpa_backend(torch, fn)
        op = {"op": "attention", "batch": batch, "heads": heads, "seq": seq, "head_dim": hd,
              "dtype": "bf16", "causal": causal, "impl": impl}  # fmt: skip
        recs, line = _family_records(torch, "attention", op, fn, flush,
                                     {"engine": "torch", "kernel": "F.scaled_dot_product_attention",
                                      "cuda_kernels": names}, i < B2B_PER_FAMILY, quick)  # fmt: skip
        out += recs
        log(f"sdpa {batch}x{heads}x{seq}x{hd} causal={causal}: {line}")
    return out


def _convs(
    torch: Any, flush: Callable[[], None], log: Callable[[str], None], quick: bool
) -> list[dict[str, Any]]:
    """F.conv2d with cudnn.benchmark on, NCHW and channels_last, fp32 / TF32 / bf16."""
    import torch.nn.functional as F

    torch.backends.cudnn.benchmark = True
    out = []
    for batch, cin, cout, hw, kern, stride in CONVS[::3] if quick else CONVS:
        for dtype in ("fp32", "tf32", "bf16"):
            for layout in ("nchw", "channels_last"):
                tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
                fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
                x = torch.randn(batch, cin, hw, hw, device="cuda", dtype=tdt).to(memory_format=fmt)
                w = torch.randn(cout, cin, kern, kern, device="cuda", dtype=tdt).to(
                    memory_format=fmt
                )
                pad = kern // 2
                tf32 = dtype == "tf32"

                def fn(
                    x: Any = x, w: Any = w, pad: int = pad, stride: int = stride, tf32: bool = tf32
                ) -> Any:
                    torch.backends.cudnn.allow_tf32 = tf32
                    return F.conv2d(x, w, stride=stride, padding=pad)

                op = {"op": "conv2d", "batch": batch, "in_channels": cin, "out_channels": cout,
                      "height": hw, "width": hw, "kernel": kern, "stride": stride,
                      "padding": pad, "dtype": dtype, "layout": layout}  # fmt: skip
                meta = {"engine": "torch", "layout": layout, "cudnn_benchmark": True}
                # back to back: the largest ResNet-50 layer of the list, per dtype and layout
                back = (batch, cin, hw) == (128, 64, 56)
                recs, line = _family_records(torch, "conv2d", op, fn, flush, meta, back, quick)
                out += recs
                log(f"conv2d {batch}x{cin}->{cout} {hw}^2 k{kern}s{stride} {dtype} {layout}: "
                    f"{line}")  # fmt: skip
    return out


def copy_calls(torch: Any, host: Any, dev: Any) -> dict[str, Callable[[], None]]:
    """The host<->device copy calls PyTorch code makes between ``host`` (a CPU tensor, pinned or
    pageable) and ``dev`` (a CUDA tensor of the same size), with their default (blocking)
    arguments, each followed by the ``torch.cuda.synchronize()`` a user waits on:
    ``"to_device"`` ``host.to('cuda')``, ``"into_host"`` ``host.copy_(dev)`` (into memory that
    exists), ``"new_host"`` ``dev.cpu()`` (a new pageable tensor each call). The host-copy family
    here and the host profile's 4 KB copies (``validate.host``) both time these."""
    sync = torch.cuda.synchronize

    def to_device() -> None:
        host.to("cuda")
        sync()

    def into_host() -> None:
        host.copy_(dev)
        sync()

    def new_host() -> None:
        dev.cpu()
        sync()

    return {"to_device": to_device, "into_host": into_host, "new_host": new_host}


def _host_copies(torch: Any, log: Callable[[str], None], quick: bool) -> list[dict[str, Any]]:
    """Host<->device copies as PyTorch code makes them, 4 KB up: the plain calls with their
    default (blocking) arguments, ``host.to('cuda')``, ``pinned.copy_(dev)`` and ``dev.cpu()``
    (a new pageable tensor each call), at the largest size also a pageable ``copy_`` into memory
    that exists (which tells the link from the first touch of new pages), each timed by wall
    clock with a ``torch.cuda.synchronize()`` after it, as a user times a copy. Sizes between
    16 and 256 MB find where a pageable source stops staying in the host's caches. Host buffers
    hold data: never-written pages all read the kernel's one zero page, which made the first
    runs' pageable host-to-device copies of 256 MB look 2x faster than a user's filled
    tensor."""
    from torch.utils.benchmark import Timer

    from gpumodel.validate.timing import time_host

    sizes = HOST_COPY_BYTES[::2] if quick else HOST_COPY_BYTES
    out = []
    for nbytes in sizes:
        for pinned in (True, False):
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
            host.fill_(7)  # every page written (and so backed by its own memory)
            dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            calls = copy_calls(torch, host, dev)
            cases: list[tuple[str, bool, str, Callable[[], None]]] = [
                ("h2d", False, "Tensor.to('cuda')", calls["to_device"])]
            if pinned:
                cases.append(("d2h", False, "pinned.copy_(cuda_tensor)", calls["into_host"]))
            else:
                cases.append(("d2h", True, "Tensor.cpu()", calls["new_host"]))
                if nbytes == sizes[-1]:
                    cases.append(("d2h", False, "pageable.copy_(cuda_tensor)", calls["into_host"]))
            for direction, fresh, api, fn in cases:
                op = {"op": "host_transfer", "bytes": float(nbytes), "direction": direction,
                      "pinned": pinned, "fresh_destination": fresh}  # fmt: skip
                meta = {"engine": "torch", "method": "wall clock", "api": api}
                # what a user sees: wall clock around the call and its synchronisation
                t, spread, _ = time_host(fn, repeats=100 if nbytes <= 1 << 20 else 30
                                         if nbytes <= 16 << 20 else 8, warmup=10)  # fmt: skip
                out.append({"family": "host_transfer", "condition": "isolated", "op": op,
                            "time_s": t, "spread": spread, "meta": meta})  # fmt: skip
                # the independent method for host copies: torch.utils.benchmark (do_bench
                # times device events, which miss the host side a user waits for)
                ti = Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.05)
                out.append({"family": "host_transfer", "condition": "do_bench", "op": op,
                            "time_s": float(ti.median), "meta": {**meta, "flush": "none",
                            "method": "torch.utils.benchmark"}})  # fmt: skip
                log(f"host copy {nbytes} B {api} pinned={pinned}: {t * 1e6:.1f} us, "
                    f"torch.utils.benchmark {ti.median * 1e6:.1f} us")  # fmt: skip
            del host, dev, calls
    return out


def device_facts(torch: Any) -> dict[str, Any]:
    idle = subprocess.run(["nvidia-smi", "--query-gpu=power.draw", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    q = "name,clocks.max.sm,clocks.max.mem,power.limit,power.default_limit,driver_version"
    out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    try:
        import triton

        triton_version = triton.__version__
    except Exception:
        triton_version = None
    return {
        "nvidia_smi": out,
        "idle_power_w": idle,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": str(torch.backends.cudnn.version()),
        "triton": triton_version,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# --------------------------------------------------------------------------- fit (no GPU)


def _key(op: dict[str, Any]) -> str:
    return json.dumps(op, sort_keys=True)


def _split(items: list[Any], work: Callable[[Any], float]) -> tuple[list[Any], list[Any]]:
    """Alternate in order of work: even -> fit, odd -> held out (as gpumodel.calibrate)."""
    ordered = sorted(items, key=work)
    return ordered[0::2], ordered[1::2]


def _stats(pred: list[float], meas: list[float]) -> dict[str, float]:
    from gpumodel.fitting import error_stats

    return error_stats(pred, meas) if meas else {"n": 0}


# dtypes whose products set the reference full-activity power; each other tensor dtype with
# MIN_DTYPE_POWER_POINTS fit points gets its own factor (PowerParams.tensor_power_dtype_factor)
REFERENCE_POWER_DTYPES = ("bf16", "fp16")
MIN_DTYPE_POWER_POINTS = 2


def _fit_w(points: list[tuple[Any, ...]], limit_w: float, static_w: float) -> float:
    """``fit_full_power`` over back-to-back points (op, activity, measured ratio, isolated s,
    back-to-back s, DRAM power W)."""
    from gpumodel.model.power import fit_full_power

    return fit_full_power([t[1] for t in points], [t[2] for t in points], limit_w, static_w,
                          [t[5] for t in points])  # fmt: skip


def _fit_power(
    points: list[tuple[Any, float, float, float, float]], limit_w: float, static_w: float
) -> tuple[float, dict[str, float]]:
    """(full tensor-activity W of the 16-bit products, {dtype: its W / that}) from back-to-back
    points (op, activity, measured ratio, ...). fp8 products draw more per unit of tensor
    activity: five H200 runs pooled (torch._scaled_mm without fast accumulation, its promotion
    priced) throttled as if at 1.16x the 16-bit products' power, TF32 at 0.89x."""
    ref = [t for t in points if t[0].dtype in REFERENCE_POWER_DTYPES]
    full_w = _fit_w(ref or points, limit_w, static_w)
    if not ref or full_w <= 0:
        return full_w, {}
    return full_w, dtype_power_factors(points, full_w, limit_w, static_w)


def dtype_power_factors(
    points: list[tuple[Any, float, float, float, float]],
    full_w: float,
    limit_w: float,
    static_w: float,
) -> dict[str, float]:
    """{dtype: its full-activity power / ``full_w``} for each tensor dtype outside
    ``REFERENCE_POWER_DTYPES`` with ``MIN_DTYPE_POWER_POINTS`` back-to-back points
    (op, activity, measured ratio, ...): the W that fits that dtype's points alone."""
    factors: dict[str, float] = {}
    for dtype in sorted({t[0].dtype for t in points} - set(REFERENCE_POWER_DTYPES)):
        own = [t for t in points if t[0].dtype == dtype]
        if len(own) >= MIN_DTYPE_POWER_POINTS and (w := _fit_w(own, limit_w, static_w)) > 0:
            factors[dtype] = w / full_w
    return factors


def fit_dram_energy(
    points: list[tuple[Any, dict[str, Any]]], gpu: Any, static_w: float, full_w: float
) -> float | None:
    """Joules per DRAM byte from weight-streaming GEMMs run back to back: the median of
    ``dram_energies``; None when no point qualifies (the architecture's constant then stands)."""
    es = [e for e in dram_energies(points, gpu, static_w, full_w) if e > 0]
    return float(statistics.median(es)) if es else None


def dram_energies(
    points: list[tuple[Any, dict[str, Any]]], gpu: Any, static_w: float, full_w: float
) -> list[float]:
    """(power - P_static - u x W) / (DRAM bytes / time) of each (op, record) of a GEMM run back
    to back, with NVML's median power and SM clock in its meta, that stayed at the maximum clock
    and under the limit (``DRAM_POWER_MIN_CLOCK``, ``DRAM_POWER_MAX_LIMIT``); u the tensor
    activity at the measured time."""
    from gpumodel.predict import tensor_activity

    max_mhz = gpu.boost_clock_hz / 1e6
    es = []
    for op, r in points:
        meta = r.get("meta") or {}
        mhz, watts, t = meta.get("sm_clock_mhz_median"), meta.get("power_w_median"), r["time_s"]
        if not (mhz and watts and t > 0) or mhz < DRAM_POWER_MIN_CLOCK * max_mhz:
            continue
        if watts > DRAM_POWER_MAX_LIMIT * gpu.tdp_watts:
            continue
        kw = op.kernels(gpu)[0]
        es.append((watts - static_w - tensor_activity(kw, gpu, t) * full_w) / (kw.bytes / t))
    return es


def power_summary(report: dict[str, Any]) -> str:
    """'full tensor-activity power 1303 W (16-bit products; fp8 x1.16, tf32 x0.894)' from a
    fit's report ('full tensor-activity power 1303 W' without dtype factors)."""
    power = report.get("power") or {}
    factors = power.get("tensor_power_dtype_factor") or {}
    each = ", ".join(f"{d} x{f:.3g}" for d, f in sorted(factors.items()))
    text = f"full tensor-activity power {report['full_tensor_power_w']:.0f} W"
    text = f"{text} (16-bit products; {each})" if each else text
    energy = power.get("dram_energy_j_per_byte")
    return f"{text}, DRAM stream {energy * 1e12:.0f} pJ/B" if energy is not None else text


def fit_conditions(
    records: list[dict[str, Any]],
    gpu: Any,
    params: Any,
    idle_power_w: float | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Fit the in-workload parameters to a conditions run: returns (params with ``power`` and
    ``dirty_l2_writeback_fraction`` set, a report dict of errors per condition and method).

    Power: the sustained-clock ratio of back-to-back tensor-core GEMMs (isolated time / back to
    back time, kernels >= ``MIN_BACK_TO_BACK_S``) against the tensor activity of their
    *predicted* isolated time. Dirty L2: (write-flushed - read-flushed time) over the model's
    time for writing back min(L2, bytes) (``write-random`` flushes: lines that do not
    compress). Half of each set fits, the other half scores."""
    from gpumodel.calibration import PowerParams
    from gpumodel.model.power import dram_power_w
    from gpumodel.ops import from_row
    from gpumodel.predict import dram_energy, predict_with_params, tensor_activity

    def pred(op: Any, p: Any, condition: str = "isolated", l2: str = "cold") -> float:
        return predict_with_params(op, gpu, p, l2=l2, condition=condition).time_s  # type: ignore[arg-type]

    from gpumodel.validate.families.conv import adapt_row

    # conditions runs before the conv op named its layout kept it in the meta only, which
    # merged the NCHW and channels-last records of a shape here (one of them was scored)
    records = [{**r, "op": adapt_gemm_row(adapt_row(dict(r["op"]), r.get("meta") or {}))}
               for r in records]  # fmt: skip
    by: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in records:
        flush = (r.get("meta") or {}).get("flush", "")
        by[(r["family"], _key(r["op"]), f"{r['condition']}|{flush}")] = r
    # a reading taken right after other work (validate's CuPy run) is not idle: above
    # IDLE_MAX_FRACTION of the limit the H100's measured idle share is used instead
    static_fraction = (
        idle_power_w / gpu.tdp_watts
        if idle_power_w and idle_power_w <= IDLE_MAX_FRACTION * gpu.tdp_watts
        else STATIC_POWER_FRACTION_DEFAULT
    )
    base = params.model_copy(update={"power": None, "dirty_l2_writeback_fraction": None})

    # power-limited clock: (op, activity, measured ratio, isolated s, back-to-back s, DRAM W)
    throttle = []
    traffic: dict[Any, float] = {}
    for (fam, key, cond), r in by.items():
        if fam != "gemm" or cond != "in-workload|none" or r["time_s"] < MIN_BACK_TO_BACK_S:
            continue
        iso = by.get((fam, key, "isolated|read"))
        op = from_row(dict(r["op"]))
        kw = op.kernels(gpu)[0]
        if iso is None or not any(part.unit == "tensor" for part in kw.flops):
            continue
        iso_pred = pred(op, base)
        u = tensor_activity(kw, gpu, iso_pred)
        traffic[op] = kw.bytes / iso_pred  # its DRAM stream, at the predicted isolated rate
        # (op, activity, ratio, isolated s, back to back s, the stream's power: set below)
        throttle.append((op, u, iso["time_s"] / r["time_s"], iso["time_s"], r["time_s"], 0.0))
    # alternate in order of work within each dtype, so each keeps half its points to fit
    fit_t, held_t = [], []
    for dtype in sorted({t[0].dtype for t in throttle}):
        own = [t for t in throttle if t[0].dtype == dtype]
        f, h = _split(own, lambda t: t[0].m * t[0].n * t[0].k)
        fit_t, held_t = fit_t + f, held_t + h
    static_w = static_fraction * gpu.tdp_watts
    # the DRAM stream's energy and W, each fitted beside the other (two passes from the
    # architecture's constant; the second moved it by ~4% on an H200)
    stream = [(op, r) for (fam, _, cond), r in by.items() for op in [from_row(dict(r["op"]))]
              if fam == "gemm" and cond == "in-workload|none"
              and (r.get("meta") or {}).get("set") == "dram-power"]  # fmt: skip
    energy = dram_energy(base, gpu)
    fitted_energy = None
    for _ in range(2):
        fit_t = [(*t[:5], float(dram_power_w(energy, traffic[t[0]]))) for t in fit_t]
        full_w, factors = _fit_power(fit_t, gpu.tdp_watts, static_w)
        fitted_energy = fit_dram_energy(stream, gpu, static_w, full_w)
        energy = energy if fitted_energy is None else fitted_energy
    power = None
    streamed = (f"; DRAM energy from {len(stream)} weight-streaming GEMMs"
                if fitted_energy is not None else "")  # fmt: skip
    if full_w > 0:
        power = PowerParams(
            architecture=gpu.architecture,
            tensor_power_w_per_sm=full_w / gpu.sm_count,
            reference_clock_hz=gpu.boost_clock_hz,
            static_power_fraction=static_fraction,
            tensor_power_dtype_factor=factors,
            dram_energy_j_per_byte=fitted_energy,
            source=f"{len(fit_t)} back-to-back tensor-core GEMMs on {gpu.id} "
            f"(gpumodel validate --conditions){streamed}",
        )

    # dirty L2 write-back
    dirty_pts = []
    for (fam, key, cond), r in by.items():
        if cond != "dirty-l2|write-random":
            continue
        iso = by.get((fam, key, "isolated|read"))
        if iso is None:
            continue
        op = from_row(dict(r["op"]))
        one = base.model_copy(update={"dirty_l2_writeback_fraction": 1.0})
        per_unit = pred(op, one, l2="dirty") - pred(op, base, l2="dirty")
        if per_unit > 0:
            dirty_pts.append((op, (r["time_s"] - iso["time_s"]) / per_unit, r, iso))
    fit_d, held_d = _split(dirty_pts, lambda t: t[0].m * t[0].n * t[0].k)
    fraction = float(statistics.median([max(0.0, t[1]) for t in fit_d])) if fit_d else None
    dirty = min(1.0, fraction) if fraction is not None else None
    host_pts = [(from_row(dict(r["op"])), r) for (fam, _, cond), r in by.items()
                if fam == "host_transfer" and cond == "isolated|"]  # fmt: skip
    host_wall, first_touch, held_h = fit_host_wall(host_pts)
    fitted = base.model_copy(update={"power": power, "dirty_l2_writeback_fraction": dirty,
                                     "host_wall": host_wall,
                                     "pageable_first_touch_s_per_byte": first_touch})  # fmt: skip

    report: dict[str, Any] = {
        "power": power.model_dump() if power else None,
        "full_tensor_power_w": full_w,
        "static_power_w": static_w,
        "dirty_l2_writeback_fraction": fitted.dirty_l2_writeback_fraction,
        "errors": {},
    }
    err = report["errors"]
    # back-to-back GEMMs: held-out, and the isolated prediction on them (what the model said)
    held_ops = [t[0] for t in held_t]
    err["gemm back to back (held out): in-workload"] = _stats(
        [pred(o, fitted, "in-workload") for o in held_ops], [t[4] for t in held_t]
    )
    err["gemm back to back (held out): isolated model"] = _stats(
        [pred(o, fitted) for o in held_ops], [t[4] for t in held_t])  # fmt: skip
    err["gemm dirty L2 (held out): l2=dirty"] = _stats(
        [pred(t[0], fitted, l2="dirty") for t in held_d], [t[2]["time_s"] for t in held_d]
    )
    err["gemm dirty L2 (held out): l2=cold"] = _stats(
        [pred(t[0], fitted) for t in held_d], [t[2]["time_s"] for t in held_d])  # fmt: skip
    # every kernel timed by the harness's method and by do_bench (never fitted)
    if held_h:
        # priced by a fit on the other sizes (the shipped parameters fit every size)
        half = fitted.model_copy(update={"host_wall": host_wall_held_out(host_pts)})
        meas_h = [r["time_s"] for _, r in held_h]
        err["host copies, torch wall clock (held out): in-workload"] = _stats(
            [pred(o, half, "in-workload") for o, _ in held_h], meas_h)  # fmt: skip
        err["host copies, torch wall clock (held out): isolated model"] = _stats(
            [pred(o, fitted) for o, _ in held_h], meas_h)  # fmt: skip
    # (record condition|flush, model condition, l2, what the row is called)
    methods = (
        ("isolated|read", "isolated", "cold", "harness (isolated)"),
        ("isolated|", "isolated", "cold", "harness (isolated)"),
        ("isolated|", "in-workload", "cold", "harness (wall clock)"),
        ("in-workload|none", "in-workload", "cold", "back to back"),
        ("do_bench|write-zeros", "in-workload", "dirty", "do_bench"),
        ("do_bench|none", "in-workload", "cold", "torch.utils.benchmark"),
    )
    for family in sorted({r["family"] for r in records}):
        for cond, condition, l2, what in methods:
            rs = [r for (f, _, c), r in by.items() if f == family and c == cond]
            if not rs:
                continue
            ops = [from_row(dict(r["op"])) for r in rs]
            label = condition + (f", l2={l2}" if l2 != "cold" else "")
            err[f"{family}: {what} vs {label}"] = _stats(
                [pred(o, fitted, condition, l2) for o in ops], [r["time_s"] for r in rs])  # fmt: skip
    report["nvml"] = nvml_by_family(records)
    report["points"] = {
        "throttle": [{"op": t[0].label(), "activity": t[1], "ratio": t[2],
                      "predicted_ratio": pred(t[0], fitted) / pred(t[0], fitted, "in-workload"),
                      "held_out": t in held_t} for t in throttle],
        "dirty": [{"op": t[0].label(), "fraction": t[1], "held_out": t in held_d}
                  for t in dirty_pts],
    }  # fmt: skip
    return fitted, report


def fit_host_wall(
    points: list[tuple[Any, dict[str, Any]]],
) -> tuple[Any, float | None, list[Any]]:
    """Host<->device copies as the user waits for them (wall clock, synchronised): per
    direction and memory kind, a copy curve (``gpumodel.fitting.fit_copy_curve``: fixed cost,
    the link's rate, a slower rate for large pageable sources). The returned parameters fit
    every size; the held-out pairs are every other size (in order of size), for the held-out
    error, which ``host_wall_held_out`` prices with a fit on the other sizes alone. Copies into
    a new pageable tensor above ``FIRST_TOUCH_MIN_BYTES`` fit apart: their time beyond the
    link's is the first touch of new pages, per byte (median). Returns (HostLinkParams or None,
    first-touch seconds per byte or None, held-out (op, record) pairs)."""
    fields, first_touch = _host_wall_fields(points)
    from gpumodel.calibration import HostLinkParams

    held = [pair for pts in _copy_groups(points).values() for pair in _split(pts, _bytes)[1]]
    return (HostLinkParams(**fields) if fields else None), first_touch, held


def host_wall_held_out(points: list[tuple[Any, dict[str, Any]]]) -> Any:
    """Host-link parameters fitted on every other size only (the complement of
    ``fit_host_wall``'s held-out pairs): what scores them."""
    from gpumodel.calibration import HostLinkParams

    fit = [pair for pts in _copy_groups(points).values() for pair in _split(pts, _bytes)[0]]
    fields, _ = _host_wall_fields(fit)
    return HostLinkParams(**fields) if fields else None


def _bytes(pair: tuple[Any, dict[str, Any]]) -> float:
    return float(pair[0].bytes)


def _touches(op: Any) -> bool:
    from gpumodel.predict import FIRST_TOUCH_MIN_BYTES

    return bool(op.fresh_destination) and op.bytes > FIRST_TOUCH_MIN_BYTES


def _copy_groups(points: list[tuple[Any, dict[str, Any]]]) -> dict[tuple[str, bool], list[Any]]:
    groups: dict[tuple[str, bool], list[Any]] = {}
    for op, r in points:
        if not _touches(op):
            groups.setdefault((op.direction, op.pinned), []).append((op, r))
    return groups


def _host_wall_fields(
    points: list[tuple[Any, dict[str, Any]]],
) -> tuple[dict[str, float], float | None]:
    import numpy as np

    from gpumodel.fitting import fit_copy_curve
    from gpumodel.validate.families.host_link import copy_curve_fields

    fields: dict[str, float] = {}
    curves = {}
    for (direction, pinned), pts in sorted(_copy_groups(points).items()):
        curve = fit_copy_curve([op.bytes for op, _ in pts], [r["time_s"] for _, r in pts],
                               step=not pinned)
        if curve is not None:
            curves[(direction, pinned)] = curve
            fields.update(copy_curve_fields(direction, pinned, curve))
    into_new = curves.get(("d2h", False))
    extra = [(r["time_s"] - into_new.time_s(op.bytes)) / op.bytes
             for op, r in points if _touches(op) and into_new is not None]  # fmt: skip
    first_touch = float(np.median(extra)) if extra and np.median(extra) > 0 else None
    return fields, first_touch


def nvml_by_family(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """SM clock and power seen while each family ran back to back (medians over its kernels'
    sample medians; reads only)."""
    out: dict[str, dict[str, Any]] = {}
    for fam in sorted({r["family"] for r in records}):
        rs = [r["meta"] for r in records if r["family"] == fam and r["condition"] == "in-workload"
              and (r.get("meta") or {}).get("sm_clock_mhz_median") is not None]  # fmt: skip
        if rs:
            out[fam] = {
                "kernels": len(rs),
                "sm_clock_mhz": statistics.median(m["sm_clock_mhz_median"] for m in rs),
                "sm_clock_mhz_min": min(m.get("sm_clock_mhz_min") or 0 for m in rs),
                "power_w": statistics.median(m["power_w_median"] for m in rs
                                             if m.get("power_w_median") is not None),
                "reasons": sorted({x for m in rs for x in m.get("clock_event_reasons", [])}),
            }  # fmt: skip
    return out


def conditions_markdown(
    report: dict[str, Any], facts: dict[str, Any], gpu_id: str,
    held_out: dict[str, Any] | None = None,
) -> str:  # fmt: skip
    """The conditions section of a validation report; ``held_out``: validate's own held-out
    errors per family (the calibration's ``errors``), shown first for comparison."""
    lines = [
        f"# Conditions: isolated vs in-workload on {gpu_id}",
        "",
        f"Device: {facts.get('nvidia_smi', '?')}; idle power {facts.get('idle_power_w', '?')} W;"
        f" torch {facts.get('torch')}, CUDA {facts.get('cuda')}, cuDNN {facts.get('cudnn')}, "
        f"Triton {facts.get('triton')}; measured {facts.get('date')}.",
        "",
        *_pooled_lines(facts.get("pooled_from")),
        "Isolated: the harness's timing (short batch, L2 flushed by a read before each call). "
        "In-workload: back to back for 2 s (steady power-limited clock; SM clock and power "
        "sampled by nvidia-smi every 50 ms). Dirty L2: after a flush that writes. "
        "do_bench: triton.testing.do_bench (flushes by writing zeros; never fitted).",
        "",
        f"Fitted: {power_summary(report)} at the max "
        f"clock (static {report['static_power_w']:.0f} W); dirty-L2 write-back fraction "
        f"{report['dirty_l2_writeback_fraction']}.",
        "",
    ]
    if held_out:
        lines += ["Validate's own held-out points (CuPy harness, isolated, the calibration's "
                  "fit), beside PyTorch's kernels timed by the harness and by an independent "
                  "method below:", "", "| family (held out) | n | median | p90 |",
                  "|---|---:|---:|---:|"]  # fmt: skip
        for name, e in held_out.items():
            lines.append(f"| {name} | {e['n']} | {e['median_abs_pct']:.1f}% | "
                         f"{e['p90_abs_pct']:.1f}% |")  # fmt: skip
        lines.append("")
    lines += ["| set | n | median | p90 | bias |", "|---|---:|---:|---:|---:|"]
    for name, e in report["errors"].items():
        if e.get("n"):
            lines.append(f"| {name} | {e['n']} | {e['median_abs_pct']:.1f}% | "
                         f"{e['p90_abs_pct']:.1f}% | {e['bias_pct']:+.1f}% |")  # fmt: skip
    if report.get("nvml"):
        lines += ["", "SM clock and power while each family ran back to back (nvidia-smi, "
                  "NVML reads every 50 ms; clocks never set):", "",
                  "| family | kernels | SM clock (median) | SM clock (min) | power |",
                  "|---|---:|---:|---:|---:|"]  # fmt: skip
        for fam, v in report["nvml"].items():
            lines.append(f"| {fam} | {v['kernels']} | {v['sm_clock_mhz']:.0f} MHz | "
                         f"{v['sm_clock_mhz_min']:.0f} MHz | {v['power_w']:.0f} W |")  # fmt: skip
    lines += ["", "Back-to-back GEMMs (speed ratio isolated / back to back):", "",
              "| op | tensor activity | measured ratio | model ratio | held out |",
              "|---|---:|---:|---:|---|"]  # fmt: skip
    for t in report["points"]["throttle"]:
        lines.append(f"| {t['op']} | {t['activity']:.2f} | {t['ratio']:.3f} | "
                     f"{t['predicted_ratio']:.3f} | {'yes' if t['held_out'] else 'fit'} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def run_conditions(
    out_dir: Path, calibration_file: str | None = None,
    from_file: str | list[str] | None = None, quick: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """``gpumodel validate --conditions``: measure (or load ``from_file``: one saved run, or
    several machines' runs pooled by ``pool_measurements``), fit, write
    conditions-measurements.json and conditions-report.md into ``out_dir``; with
    ``calibration_file``, merge the fitted parameters into it (its other parameters and raw
    measurements are kept)."""
    import gpumodel as gm
    from gpumodel.calibration import (
        CalibrationParams,
        atomic_write_text,
        read_calibration_file,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [from_file] if isinstance(from_file, str) else list(from_file or [])
    if files:
        datas = [_read_conditions_file(f) for f in files]
        data = datas[0] if len(datas) == 1 else pool_measurements(datas, files)
        if len(datas) > 1:  # the pooled run, from which the calibration re-fits alone
            atomic_write_text(out_dir / "conditions-measurements.json",
                              json.dumps(data, indent=1))  # fmt: skip
    else:
        t0 = time.perf_counter()
        data = measure(quick)
        data["wall_s"] = time.perf_counter() - t0
        atomic_write_text(out_dir / "conditions-measurements.json", json.dumps(data, indent=1))
    facts = data["device"]
    gpu = _device_gpu(data)
    cal = read_calibration_file(calibration_file, measurements=True) if calibration_file else None
    if cal is None:
        found = gm.calibration.default_calibration(gpu)
        params = found.parameters if found else CalibrationParams()
    else:
        params = cal.parameters
    idle = facts.get("idle_power_w")
    fitted, report = fit_conditions(data["records"], gpu, params,
                                    float(idle) if idle else None)  # fmt: skip
    held = {k: v.model_dump() for k, v in cal.errors.items()} if cal is not None else None
    atomic_write_text(out_dir / "conditions-report.md",
                      conditions_markdown(report, facts, gpu.id, held))  # fmt: skip
    atomic_write_text(out_dir / "conditions-fit.json", json.dumps(report, indent=1))
    if cal is not None and calibration_file:
        cal.model_copy(update={"parameters": fitted}).save(calibration_file, replaces_input=True)
    return {"gpu": gpu.id, "wall_s": data.get("wall_s"), **{k: v for k, v in report.items()
                                                           if k != "points"}}  # fmt: skip


def _pooled_lines(pooled: list[dict[str, Any]] | None) -> list[str]:
    """The runs a pooled fit took its points from (the device line above is the first's)."""
    if not pooled:
        return []
    runs = [f"`{p['path']}` ({p['records']} points, {p.get('date')})" for p in pooled]
    return [f"Pooled from {len(pooled)} runs, the median of each point over the runs that "
            "measured it: " + "; ".join(runs) + ".", ""]  # fmt: skip


def _read_conditions_file(path: str) -> dict[str, Any]:
    from gpumodel._io import read_json
    from gpumodel.errors import GpumodelError

    data = read_json(path, "conditions measurements")
    if not isinstance(data, dict) or not isinstance(data.get("device"), dict):
        raise GpumodelError(f"{path}: expected the conditions measurements JSON that "
                            "validate --conditions writes (an object with 'device')")  # fmt: skip
    if not isinstance(data.get("records"), list):
        raise GpumodelError(f"{path}: no 'records' list in these conditions measurements")
    for i, r in enumerate(data["records"]):
        ok = (isinstance(r, dict) and isinstance(r.get("family"), str)
              and isinstance(r.get("op"), dict) and isinstance(r.get("condition"), str)
              and isinstance(r.get("time_s"), (int, float)) and not isinstance(r["time_s"], bool)
              and math.isfinite(r["time_s"]) and r["time_s"] > 0)  # fmt: skip
        if not ok:
            raise GpumodelError(f"{path}: record {i} is not a measured point (family, op, "
                                "condition and a finite time_s > 0)")  # fmt: skip
    return data


def _device_gpu(data: dict[str, Any]) -> Any:
    """The spec of the GPU a conditions run measured (its nvidia-smi name)."""
    from gpumodel.validate.pipeline import gpu_for_device_name

    return gpu_for_device_name(str(data["device"].get("nvidia_smi", "")).split(",")[0])


def pool_measurements(datas: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """Several machines' conditions runs of one GPU type as one: each measured point (family,
    op, condition, flush) takes the median of its times over the runs that measured it, so
    the fit describes the typical machine of the pool rather than one machine's host. The
    point's other fields (NVML readings) are those of the run at that median (the lower one
    of an even count); ``meta.pooled_times_s`` keeps every run's time. Runs of different
    GPUs refuse to pool."""
    from gpumodel.errors import GpumodelError
    from gpumodel.validate.families.conv import adapt_row

    gpus = {_device_gpu(d).id for d in datas}
    if len(gpus) > 1:
        raise GpumodelError(f"cannot pool conditions runs of different GPUs: {sorted(gpus)}")
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for d in datas:
        for r in d["records"]:
            meta = r.get("meta") or {}
            op = adapt_row(dict(r["op"]), meta)
            key = (r["family"], _key(op), r["condition"], str(meta.get("flush", "")))
            groups.setdefault(key, []).append({**r, "op": op})
    records = []
    for rs in groups.values():
        rs = sorted(rs, key=lambda r: float(r["time_s"]))
        times = [float(r["time_s"]) for r in rs]
        at = rs[(len(rs) - 1) // 2]
        meta = {**(at.get("meta") or {}), "pooled_times_s": times}
        records.append({**at, "time_s": statistics.median(times), "meta": meta})
    idle = [float(d["device"]["idle_power_w"]) for d in datas if d["device"].get("idle_power_w")]
    device = {
        **datas[0]["device"],
        "idle_power_w": statistics.median(idle) if idle else None,
        "pooled_from": [{"file": Path(n).name, "path": str(n), "date": d["device"].get("date"),
                         "nvidia_smi": d["device"].get("nvidia_smi"),
                         "records": len(d["records"])} for n, d in zip(names, datas)],
    }  # fmt: skip
    return {"device": device, "records": records}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    data = measure(args.quick)
    data["wall_s"] = time.perf_counter() - t0
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {args.out} ({len(data['records'])} records, {data['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
