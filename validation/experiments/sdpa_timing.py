"""Timing helpers shared by the SDPA device experiments (sdpa_dtypes_device.py,
sdpa_wide_head_device.py, ...): a back-to-back loop timed by CUDA events, the same calls replayed
from a CUDA graph, the kernel names one call
launches, and shell output for the environment notes. Standalone: imports nothing from gpumodel.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess

LOOP_S = 0.05  # GPU time of one timed round
ROUNDS = 5


def experiment_args() -> argparse.Namespace:
    """The SDPA experiments' command line: ``--out FILE.json`` and ``--tiny`` (a code-path run)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true")
    return ap.parse_args()


def loop_time_s(torch, fn) -> float:
    """Median over ROUNDS of (CUDA-event time of n calls back to back) / n (the unseen harness's
    in-workload condition, written here on its own)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    one_s = max(start.elapsed_time(end) / 1e3, 1e-6)
    n = max(3, min(2000, int(LOOP_S / one_s)))
    times = []
    for _ in range(ROUNDS):
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / n)
    return statistics.median(times)


def graph_time_s(torch, fn) -> float:
    """Median over ROUNDS of one replay of a CUDA graph holding n calls of ``fn``, / n: the GPU
    time without eager launch gaps (a decode kernel of 10 us is shorter than its launch)."""
    one_s = loop_time_s(torch, fn)
    n = max(3, min(500, int(LOOP_S / one_s)))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(ROUNDS):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / n)
    return statistics.median(times)


def gpu_events(torch, fn) -> list:
    """The GPU events (kernels, memsets, copies) of one call of ``fn`` after a warm-up call,
    as torch.profiler lists them."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [ev for ev in prof.events() if "CUDA" in str(getattr(ev, "device_type", ""))]


def kernel_names(torch, fn) -> list[str]:
    """The distinct GPU kernels one call of ``fn`` launches (torch.profiler), first 10."""
    names: list[str] = []
    for ev in gpu_events(torch, fn):
        if ev.name not in names:
            names.append(ev.name[:160])
    return names[:10]


def measure(torch, call, rec: dict, records: list, kernels: bool = True,
            eager: bool = False) -> None:  # fmt: skip
    """Time one call into ``rec``: the kernels it launches (``kernels``), its back-to-back
    loop (``eager``, as ``eager_s``) and its graph replay (``graph_s``); a refusal is recorded
    as the finding it is (``error``). ``rec`` is appended to ``records`` and printed."""
    try:
        with torch.no_grad():
            call()
            if kernels:
                rec["kernels"] = kernel_names(torch, call)
            if eager:
                rec["eager_s"] = loop_time_s(torch, call)
            rec["graph_s"] = graph_time_s(torch, call)
    except Exception as exc:  # a refusal is a finding
        rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
    records.append(rec)
    print(json.dumps({k: v for k, v in rec.items() if k != "kernels"}), flush=True)


def sdpa_call(backend: str, q, k, v, **extra):
    """A call of ``F.scaled_dot_product_attention(q, k, v, **extra)`` with SDPA's default
    dispatch (``backend`` "default") or the named ``SDPBackend`` forced around it."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def call():
        if backend == "default":
            return F.scaled_dot_product_attention(q, k, v, **extra)
        with sdpa_kernel(getattr(SDPBackend, backend)):
            return F.scaled_dot_product_attention(q, k, v, **extra)

    return call


def sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as exc:  # environment notes only
        return f"n/a ({exc!r})"


def write_results(path: str, torch, records: list, started_s: float) -> None:
    """``{"env": ..., "records": records}`` to ``path``: the GPU, driver, CPU and library versions
    of this machine, and the seconds since ``started_s``."""
    import json
    import platform
    import time

    env = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "driver": sh(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
           "cpu": sh(["bash", "-c", "grep -m1 'model name' /proc/cpuinfo"]) or platform.processor(),
           "python": platform.python_version(), "elapsed_s": round(time.time() - started_s, 1)}  # fmt: skip
    with open(path, "w") as f:
        json.dump({"env": env, "records": records}, f, indent=1)
