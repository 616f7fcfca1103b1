"""The two conditions a kernel runs under, measured side by side on PyTorch's own kernels.

``isolated``: what the validate harness has always timed: a short batch of calls, each after an
L2 flush that *reads* a buffer (L2 left clean), at the short-burst boost clock.

``in-workload``: what training and inference see: the same kernel back to back for long
enough that the GPU reaches its steady power-limited clock (``BACK_TO_BACK_S``), and after a
flush that *writes* (L2 left holding dirty lines, as a preceding kernel that wrote its output
leaves it; ``triton.testing.do_bench`` flushes by writing zeros).

While each back-to-back loop runs, ``nvidia-smi`` samples the SM clock and the power draw
every 50 ms (reads only: clocks are never set). Every kernel is also timed by
``triton.testing.do_bench`` when Triton is installed (an independent method, never fitted).

Records (one dict per kernel and condition) feed ``gpumodel.model.power.fit_power`` and the
dirty-L2 fit; run on a GPU machine with ``python -m gpumodel.validate.conditions --out F``.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BACK_TO_BACK_S = 2.0  # long enough for the power controller to settle (seen: < 0.5 s on H100)
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
]  # fmt: skip
# decode-sized products (weights stream from DRAM): read-flushed vs write-flushed L2
DECODE: list[tuple[str, int, int, int]] = [
    ("bf16", m, n, 4096) for n in (4096, 14336) for m in (1, 16, 64, 128)
]
# memory-bound work: the clock should stay at its maximum
COPY_BYTES = 1 << 30
# F.conv2d, ResNet-50 shapes: (batch, c_in, c_out, hw, kernel, stride)
CONVS: list[tuple[int, int, int, int, int, int]] = [
    (32, 3, 64, 224, 7, 2), (32, 64, 64, 56, 3, 1), (32, 256, 64, 56, 1, 1),
    (32, 128, 128, 28, 3, 1), (32, 256, 256, 14, 3, 1), (32, 512, 512, 7, 3, 1),
    (128, 64, 64, 56, 3, 1),
]  # fmt: skip
HOST_COPY_BYTES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20, 256 << 20]


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
    import torch

    from gpumodel.validate.timing import time_torch

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
        op = {"op": "gemm", "m": m, "n": n, "k": k, "dtype": dtype}
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

    records += _convs(torch, flush["read"], log, quick)
    records += _host_copies(torch, log, quick)
    src = torch.empty(COPY_BYTES // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    b2b = back_to_back(torch, lambda: dst.copy_(src), 1.0 if quick else BACK_TO_BACK_S)
    records.append({"family": "copy", "condition": "in-workload",
                    "op": {"op": "copy", "bytes": float(COPY_BYTES)},
                    "time_s": b2b.pop("time_s"), "meta": b2b})  # fmt: skip
    log(f"copy 1 GiB back to back: {b2b['sm_clock_mhz_median']} MHz {b2b['power_w_median']} W")
    return {"device": device_facts(torch), "records": records}


def _convs(
    torch: Any, flush: Callable[[], None], log: Callable[[str], None], quick: bool
) -> list[dict[str, Any]]:
    """F.conv2d with cudnn.benchmark on, NCHW and channels_last, fp32 / TF32 / bf16."""
    import torch.nn.functional as F

    from gpumodel.validate.timing import time_torch

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
                      "padding": pad, "dtype": dtype}  # fmt: skip
                meta = {"engine": "torch", "layout": layout, "cudnn_benchmark": True}
                t, spread, _ = time_torch(fn, flush=flush, target_s=0.02, max_repeats=30)
                out.append({"family": "conv2d", "condition": "isolated", "op": op, "time_s": t,
                            "spread": spread, "meta": {**meta, "flush": "read"}})  # fmt: skip
                tb = _do_bench(fn)
                if tb is not None:
                    out.append({"family": "conv2d", "condition": "do_bench", "op": op,
                                "time_s": tb, "meta": {**meta, "flush": "write-zeros",
                                                       "method": "triton.testing.do_bench"}})  # fmt: skip
                log(
                    f"conv2d {batch}x{cin}->{cout} {hw}^2 k{kern}s{stride} {dtype} {layout}: "
                    f"{t * 1e6:.1f} us" + (f" do_bench {tb * 1e6:.1f} us" if tb else "")
                )
    torch.backends.cudnn.allow_tf32 = True
    return out


def _host_copies(torch: Any, log: Callable[[str], None], quick: bool) -> list[dict[str, Any]]:
    """host<->device tensor copies (copy_, what tensor.to(device) runs), pinned and pageable,
    4 KB up, timed by wall clock with the synchronisation a user needs to use the result."""
    from gpumodel.validate.timing import time_host

    out = []
    for nbytes in HOST_COPY_BYTES[::2] if quick else HOST_COPY_BYTES:
        for pinned in (True, False):
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
            dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            for direction in ("h2d", "d2h"):

                def fn(h: Any = host, d: Any = dev, direction: str = direction) -> None:
                    if direction == "h2d":
                        d.copy_(h, non_blocking=True)
                    else:
                        h.copy_(d, non_blocking=True)
                    torch.cuda.synchronize()

                # what a user sees: wall clock around the copy and its synchronisation
                t, spread, _ = time_host(fn, repeats=30, warmup=3)
                op = {"op": "host_transfer", "bytes": float(nbytes), "direction": direction,
                      "pinned": pinned}  # fmt: skip
                out.append({"family": "host_transfer", "condition": "isolated", "op": op,
                            "time_s": t, "spread": spread, "meta": {"engine": "torch", "method": "wall clock"}})  # fmt: skip
                log(f"host copy {nbytes} B {direction} pinned={pinned}: {t * 1e6:.1f} us")
    return out


def device_facts(torch: Any) -> dict[str, Any]:
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
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": str(torch.backends.cudnn.version()),
        "triton": triton_version,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


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
