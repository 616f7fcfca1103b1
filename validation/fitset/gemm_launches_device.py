"""Fit set: what one eager PyTorch GEMM call costs the host, and which kernels it launches.

For a grid of GEMM shapes chosen apart from the unseen set's (validation/unseen/
kernels_unseen.py: its N and K are 768, 1024, 4096, 6144, 14336, 28672, 50257, 128256 and its
squares 256-8192; none of them is here), on the local GPU:

- host seconds per call of ``torch.matmul(x, W.t())`` / ``torch.matmul(A, B)`` (fp32 with TF32
  off, TF32, fp16, bf16) and ``torch._scaled_mm`` (fp8 e4m3, bf16 out), issued back to back
  without synchronising (a loop short enough that the launch queue never fills, so the host's
  time is what is timed), each beside the host profile's own probe (a 64x64 bf16 matmul, and a
  64x64 fp8 _scaled_mm) timed right before it, so a ratio cancels the vCPU's drift;
- the kernels one call launches (torch.profiler, after every host loop: the profiler's CUPTI
  slows eager calls made after it), by name.

The model's question: which products cuBLAS splits along K with a separate reduction kernel
(``cublasLt::splitKreduce_kernel``), a second launch the host pays for. Never scored against;
the unseen set is measured by its own script.

``--set misaligned``: products with N or K not a multiple of 16 bytes (sizes 16k+1, 8k-1 and
odd ones apart from the unseen set's 1025, 2049, 4097 and 50257), each timed on the GPU alone
(a CUDA graph of back-to-back calls, replayed) beside its kernels: which kernels cuBLAS falls
back to, and their tile, for the misaligned model's wave quantization.

``--set lmhead``: nn.Linear-style ``x @ W.T`` products whose N is odd, as a language model's head
over a vocabulary of odd size (N = 32001, 50277; K = 512-4096; M = 1-512), timed and listed the
same way: at which M cuBLAS changes kernel for a misaligned output, and how fast each streams
the weights. The unseen set's head (N = 50257, K = 768) is not among them.

``--set midm`` (2026-11-29, seventh session): bf16 ``x @ W.T`` products of M = 32-512, between the
decode GEMV and the compute-bound prefill, over weights of 67-470 MB (more than the L2, so the
back-to-back calls of the graph stream them as a step does): Llama-3-70B's projections at tensor
parallel 2, Llama-2-13B's and Qwen2.5-7B's MLP. Timed and listed as the LM-head set. None of the
unseen set's N or K.

``--set midm2`` (2026-11-29, eighth session): the midm shapes and five more (Llama-2-7B's MLP,
Qwen2.5-7B's gate+up, Llama-3-70B's down projection at tensor parallel 4) at M = 16-1024, each
timed as a workload runs it beside the CUDA-graph replay: back-to-back eager calls rotating over
enough weight copies that the weights streamed exceed the L2 four times, the output of each call
left dirty in L2 for the next, events around chunks of calls after a warm-up (the median chunk);
the kernels listed with their launch grids (the profiler's ``grid``: output tiles x K splits),
and NVML's SM clock and power read after each point's loop. Why: the graph replay of one
weight matrix let a part of it stay in L2 and ran too briefly for the power limit, so its
mid-M times disagreed with the unseen set's in-workload ones (docs/validation.md, seventh
session).

usage: python3 validation/fitset/gemm_launches_device.py --out FILE.json [--quick]
                                                        [--set eager|misaligned|lmhead|midm|midm2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

LAUNCH_NAMES = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC",
                "cudaMemsetAsync")


def grid(quick: bool) -> list[dict]:
    """The shapes: bf16 densely, the other dtypes on a coarser grid, a few A@B squares."""
    ms = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]
    ns = [512, 2048, 3072, 5120, 8192, 11008, 16384]
    ks = [2048, 5120, 8192]
    coarse_m, coarse_n, coarse_k = [1, 4, 16, 64, 256, 1024], [2048, 5120, 11008], [2048, 8192]
    if quick:
        ms, ns, ks = [1, 16, 256], [2048, 11008], [2048]
        coarse_m, coarse_n, coarse_k = [1, 256], [2048], [2048]
    pts = [dict(dtype="bf16", M=m, N=n, K=k, layout="x@W.T") for m in ms for n in ns for k in ks]
    for dt in ("fp16", "fp32", "tf32", "fp8_e4m3"):
        pts += [dict(dtype=dt, M=m, N=n, K=k, layout="x@W.T")
                for m in coarse_m for n in coarse_n for k in coarse_k]  # fmt: skip
    for dt in ("bf16", "fp32", "fp8_e4m3"):
        pts += [dict(dtype=dt, M=s, N=s, K=s, layout="A@B") for s in (384, 768, 1536, 3072)]
    return pts


def misaligned_grid(quick: bool) -> list[dict]:
    """Misaligned products: squares, N-only and K-only misalignment, both layouts, over a range
    of sizes whose tile counts sit at different points of their waves."""
    sizes = [513, 769, 1153, 1537, 1793, 2305, 3073, 3583, 5121, 6143]
    if quick:
        sizes = [769, 3073]
    pts = []
    for dt in ("bf16", "fp16", "tf32", "fp32"):
        for s in sizes:
            pts.append(dict(dtype=dt, M=s, N=s, K=s, layout="A@B"))
            pts.append(dict(dtype=dt, M=s - s % 512, N=s, K=3072, layout="A@B"))
            pts.append(dict(dtype=dt, M=2048, N=s, K=2048, layout="x@W.T"))
    return pts


def lmhead_grid(quick: bool) -> list[dict]:
    """Odd-vocabulary heads: x @ W.T with W of N x K, N odd, over the M of decode and prefill."""
    ms = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
    ns, ks = [32001, 50277], [512, 1024, 2048, 4096]
    if quick:
        ms, ns, ks = [1, 4, 16, 128], [32001], [1024]
    return [dict(dtype=dt, M=m, N=n, K=k, layout="x@W.T")
            for dt in ("bf16", "fp16", "tf32", "fp32") for n in ns for k in ks for m in ms]


def midm_grid(quick: bool) -> list[dict]:
    """bf16 x @ W.T between decode and prefill: (N, K) of weights larger than the L2."""
    ms = [32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512]
    nks = [(5120, 8192), (8192, 4096), (28672, 8192), (8192, 14336),  # Llama-3-70B, tp 2
           (15360, 5120), (27648, 5120), (5120, 13824),  # Llama-2-13B
           (37888, 3584), (3584, 18944)]  # Qwen2.5-7B's MLP  # fmt: skip
    if quick:
        ms, nks = [64, 128], nks[:2]
    return [dict(dtype="bf16", M=m, N=n, K=k, layout="x@W.T") for n, k in nks for m in ms]


def midm2_grid(quick: bool) -> list[dict]:
    """The midm shapes and five more, at M = 16-1024."""
    ms = [16, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024]
    more = [(11008, 4096), (4096, 11008), (22016, 4096),  # Llama-2-7B's MLP (gate+up fused)
            (18944, 3584),  # Qwen2.5-7B's gate / up
            (8192, 7168)]  # Llama-3-70B's down projection at tensor parallel 4  # fmt: skip
    nks = [(p["N"], p["K"]) for p in midm_grid(False) if p["M"] == 32] + more
    if quick:
        ms, nks = [64, 192], nks[:2]
    return [dict(dtype="bf16", M=m, N=n, K=k, layout="x@W.T") for n, k in nks for m in ms]


def in_workload_per_call(
    torch, p: dict, l2_bytes: int, warm_s: float = 0.15, timed_s: float = 0.35, chunks: int = 7
) -> dict:
    """GPU seconds per call of ``p`` run back to back as a workload runs it (see ``--set
    midm2``): the median over ``chunks`` chunks, with the SM clock (MHz) and power (W) NVML
    reads right after."""  # fmt: skip
    m, n, k = p["M"], p["N"], p["K"]
    w_bytes = n * k * 2
    sets = max(2, min(-(-4 * l2_bytes // w_bytes), (2 << 30) // w_bytes))
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    fns = [lambda x=x, w=w: torch.matmul(x, w.t()) for x, w in zip(xs, ws)]
    torch.cuda.synchronize()
    t0, calls = time.perf_counter(), 0
    while time.perf_counter() - t0 < warm_s:
        fns[calls % sets]()
        calls += 1
        if calls % 64 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    est = (time.perf_counter() - t0) / calls
    per_chunk = max(2 * sets, int(timed_s / chunks / est))
    events = [torch.cuda.Event(enable_timing=True) for _ in range(chunks + 1)]
    events[0].record()
    for c in range(chunks):
        for i in range(per_chunk):
            fns[i % sets]()
        events[c + 1].record()
    torch.cuda.synchronize()
    times = [events[c].elapsed_time(events[c + 1]) * 1e-3 / per_chunk for c in range(chunks)]
    out = {"in_workload_s": statistics.median(times), "in_workload_spread":
           (max(times) - min(times)) / statistics.median(times), "weight_sets": sets,
           "calls_per_chunk": per_chunk}  # fmt: skip
    try:
        out["sm_clock_mhz"] = torch.cuda.clock_rate()
        out["power_w"] = torch.cuda.power_draw() / 1000.0
    except Exception as e:  # no pynvml: recorded, not fatal
        out["nvml"] = repr(e)[:120]
    return out


def gpu_per_call(torch, fn, calls: int = 20, reps: int = 5) -> float:
    """GPU seconds per call: ``calls`` back-to-back calls captured in a CUDA graph, replayed
    ``reps`` times between CUDA events; the median replay over ``calls``."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3 / calls)
    return statistics.median(times)


def make_call(torch, p: dict):
    """A zero-argument function running one product of point ``p``."""
    dev, m, n, k = "cuda", p["M"], p["N"], p["K"]
    dts = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
           "tf32": torch.float32, "fp8_e4m3": torch.bfloat16}  # fmt: skip
    dt = dts[p["dtype"]]
    a = torch.randn(m, k, device=dev, dtype=dt)
    w = torch.randn(n, k, device=dev, dtype=dt) if p["layout"] == "x@W.T" else None
    b = w.t() if w is not None else torch.randn(k, n, device=dev, dtype=dt)
    if p["dtype"] == "fp8_e4m3":
        f8 = torch.float8_e4m3fn
        a8 = a.to(f8)
        # _scaled_mm wants B column-major: W (N,K) row-major seen as (K,N), as nn.Linear holds it
        b8 = (w if w is not None else b.t().contiguous()).to(f8).t()
        one = torch.ones((), device=dev)
        return lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b)


def host_per_call(torch, fn, calls: int) -> float:
    """Host seconds per call of ``calls`` back-to-back calls (no sync inside the loop)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls


def kernels_per_call(torch, calls: dict, reps: int = 3, grids: dict | None = None) -> dict:
    """{point index: kernel names of one call} from one torch.profiler session; ``grids``, a
    dict, gets {point index: the launch grid of each of those kernels}."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i, fn in calls.items():
            with record_function(f"gm:{i}"):
                for _ in range(reps):
                    fn()
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    marks = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"][3:])) for e in events
                   if e.get("cat") == "user_annotation" and e.get("name", "").startswith("gm:"))  # fmt: skip
    corr_to_point = {}
    for e in events:
        # cuBLASLt's nvjet kernels go through the driver API (cuLaunchKernelEx)
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("name") in LAUNCH_NAMES:
            for t0, t1, i in marks:
                if t0 <= e["ts"] <= t1:
                    corr_to_point[e["args"]["correlation"]] = i
                    break
    names: dict[int, list[str]] = {i: [] for i in calls}
    launch_grids: dict[int, list] = {i: [] for i in calls}
    gpu = (e for e in events if e.get("cat") in ("kernel", "gpu_memset"))
    for e in sorted(gpu, key=lambda e: e["ts"]):
        i = corr_to_point.get(e["args"].get("correlation"))
        if i is not None:
            names[i].append(e["name"])
            launch_grids[i].append(e["args"].get("grid"))
    if grids is not None:
        grids.update({i: v[: len(v) // reps] if len(v) % reps == 0 else v
                      for i, v in launch_grids.items()})  # fmt: skip
    return {i: v[: len(v) // reps] if len(v) % reps == 0 else v for i, v in names.items()}


def kernels_of_points(
    torch, pts: list[dict], calls: dict, grids: dict | None = None
) -> list[list[str]]:
    """The kernels one call of each point launches, in one profiler session; each call sets
    the TF32 flag its point needs (``grids``: as ``kernels_per_call``)."""
    wrapped = {}
    for i, p in enumerate(pts):
        def run(fn=calls[i], tf32=p["dtype"] == "tf32"):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            fn()
        wrapped[i] = run
    names = kernels_per_call(torch, wrapped, grids=grids)
    return [names[i] for i in range(len(pts))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--set", choices=("eager", "misaligned", "lmhead", "midm", "midm2"),
                    default="eager")  # fmt: skip
    args = ap.parse_args()
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    if args.set in ("misaligned", "lmhead", "midm", "midm2"):
        return misaligned(torch, args)
    pts = grid(args.quick)
    probe_a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    probe_b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    probe8 = make_call(torch, dict(dtype="fp8_e4m3", M=64, N=64, K=64, layout="x@W.T"))
    probes = {"matmul": lambda: torch.matmul(probe_a, probe_b), "scaled_mm": probe8}
    t_start = time.time()
    calls = {}
    for i, p in enumerate(pts):
        torch.backends.cuda.matmul.allow_tf32 = p["dtype"] == "tf32"
        fn = calls[i] = make_call(torch, p)
        for _ in range(3):
            fn()
        probe = probes["scaled_mm" if p["dtype"] == "fp8_e4m3" else "matmul"]
        for _ in range(3):
            probe()
        n = 100 if 2 * p["M"] * p["N"] * p["K"] < 2e10 else 20
        rounds = [(host_per_call(torch, probe, n), host_per_call(torch, fn, n)) for _ in range(5)]
        p["probe_host_s"] = statistics.median(r[0] for r in rounds)
        p["host_s"] = statistics.median(r[1] for r in rounds)
        p["ratio_to_probe"] = statistics.median(r[1] / r[0] for r in rounds)
        p["calls_per_loop"] = n
    t_host = time.time()
    # the profiler after every host loop
    for p, names in zip(pts, kernels_of_points(torch, pts, calls)):
        p["kernels"] = names
        p["kernels_per_call"] = len(names)
    probe_names = kernels_per_call(torch, {0: probes["matmul"], 1: probes["scaled_mm"]})
    doc = {
        "what": "eager GEMM host cost and kernels per call (fit set)",
        "script": "validation/fitset/gemm_launches_device.py",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cublas_note": "torch's bundled cuBLAS/cuBLASLt",
        "python": sys.version.split()[0],
        "host": platform.node(),
        "probe_kernels": {"matmul": probe_names[0], "scaled_mm": probe_names[1]},
        "seconds": {"host_loops": round(t_host - t_start, 1),
                    "profiler": round(time.time() - t_host, 1)},
        "points": pts,
    }
    write(doc, args.out)
    split = sum(1 for p in pts if p["kernels_per_call"] > 1)
    print(f"{len(pts)} shapes; {split} launch more than one kernel; "
          f"host loops {doc['seconds']['host_loops']} s, profiler {doc['seconds']['profiler']} s")
    return 0


def write(doc: dict, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def misaligned(torch, args) -> int:
    """GPU time per call and kernels of the misaligned or the LM-head set."""
    grids = {"misaligned": misaligned_grid, "lmhead": lmhead_grid, "midm": midm_grid,
             "midm2": midm2_grid}  # fmt: skip
    pts = grids[args.set](args.quick)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    t0 = time.time()
    chunk = 18  # the operands of a chunk live at once (the LM-head set's weights reach 0.8 GB)
    for lo in range(0, len(pts), chunk):
        part = pts[lo : lo + chunk]
        calls = {}
        for i, p in enumerate(part):
            torch.backends.cuda.matmul.allow_tf32 = p["dtype"] == "tf32"
            calls[i] = make_call(torch, p)
            p["gpu_s"] = gpu_per_call(torch, calls[i])
            if args.set == "midm2":
                p.update(in_workload_per_call(torch, p, l2))
        launch = {}
        for i, (p, names) in enumerate(zip(part, kernels_of_points(torch, part, calls, launch))):
            p["kernels"] = names
            if args.set == "midm2":
                p["grids"] = launch[i]
        del calls
        torch.cuda.empty_cache()
    write({"what": f"{args.set} GEMMs: GPU time per call (CUDA graph"
                   + (", and in-workload: back to back over rotating weights" if args.set ==
                      "midm2" else "") + ") and kernels (fit set)",
           "script": f"validation/fitset/gemm_launches_device.py --set {args.set}",
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "python": sys.version.split()[0],
           "host": platform.node(), "seconds": round(time.time() - t0, 1),
           "points": pts}, args.out)  # fmt: skip
    print(f"{len(pts)} {args.set} shapes in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
