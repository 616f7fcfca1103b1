"""Test of a candidate explanation for the 2-GPU all-gather / reduce-scatter shortfall (#5).

Hypothesis ("ring drain"): NCCL's ring ends every chunk loop with a step that sends nothing
(src/device/all_gather.h ``directRecv``, reduce_scatter.h ``recvReduceCopy``, all_reduce.h
``directRecv``). When each GPU has its own process (NCCL logs ``directMode 0``) that step copies
the received chunk from NCCL's buffer into the output while the link idles; with one link step
per loop (all-gather, reduce-scatter on 2 GPUs) against two (all-reduce) it would cost them more.
When one process drives every GPU (``directMode 1``, "P2P/direct pointer") the peer writes
all-gather and all-reduce data straight into the output, so their last step is only a wait;
reduce-scatter's (never direct) still copies. Prediction: from one process per GPU to one
process for all GPUs, all-gather's busbw rises and reduce-scatter's does not.

Outcome on 2 x H200 (2026-11-22, ``validation/results/h200-sxm-x2/drain-test/``): all-gather
did not rise (243 / 269 / 290 GB/s per process vs 243 / 269 / 284 in one process at 256 MiB /
1 GiB / 4 GiB), all-reduce stayed within 0.5%, reduce-scatter stayed or fell (227 / 263 / 298
vs 227 / 262 / 276). The copy is not what slows all-gather: the hypothesis is refuted, and the
model does not carry a drain term. A copy-engine
peer copy reached 395 GB/s one way and 391 GB/s each way both ways (0.87-0.88 of 450 GB/s).

Measures both ways at 256 MiB - 4 GiB (bf16 / bytes, out of place):
- one process per GPU: torch.distributed, the harness of ``validate --collectives``;
- one process for all GPUs: CuPy's NCCL binding (``NcclCommunicator.initAll``), CUDA events.
Also a copy-engine peer copy (``cudaMemcpyPeerAsync``) one way and both ways at once.

NVLink multicast must stay off (``NCCL_NVLS_ENABLE=0`` etc., checked). Writes ``--out``/*.json.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

SIZES = (256 << 20, 1 << 30, 4 << 30)
SAFE = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
FACTOR = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5}  # busbw / algbw, 2 GPUs


def one_process(sizes=SIZES, reps: int = 5) -> list[dict]:
    """CuPy NCCL, every GPU in this process (directMode 1). Median of ``reps`` timed batches."""
    import cupy as cp
    from cupy.cuda import nccl

    n = cp.cuda.runtime.getDeviceCount()
    comms = nccl.NcclCommunicator.initAll(n)
    rows = []
    for nbytes in sizes:
        bufs = []
        for d in range(n):
            with cp.cuda.Device(d):
                full = cp.zeros(nbytes // 2, dtype=cp.float16)
                part = cp.zeros(nbytes // 2 // n, dtype=cp.float16)
                full2 = cp.zeros(nbytes // 2, dtype=cp.float16)
                bufs.append((full, part, full2, cp.cuda.Stream(non_blocking=True)))
        calls = {
            "all_reduce": lambda c, b: c.allReduce(b[0].data.ptr, b[2].data.ptr, b[0].size,
                                                   nccl.NCCL_FLOAT16, nccl.NCCL_SUM, b[3].ptr),
            "all_gather": lambda c, b: c.allGather(b[1].data.ptr, b[0].data.ptr, b[1].size,
                                                   nccl.NCCL_FLOAT16, b[3].ptr),
            "reduce_scatter": lambda c, b: c.reduceScatter(b[0].data.ptr, b[1].data.ptr,
                                                           b[1].size, nccl.NCCL_FLOAT16,
                                                           nccl.NCCL_SUM, b[3].ptr),
        }  # fmt: skip
        for name, call in calls.items():

            def launch(times: int, call=call, bufs=bufs) -> None:
                for _ in range(times):
                    nccl.groupStart()
                    for d in range(n):
                        with cp.cuda.Device(d):
                            call(comms[d], bufs[d])
                    nccl.groupEnd()

            launch(3)
            for d in range(n):
                bufs[d][3].synchronize()
            per_call = []
            k = max(3, int(0.05 * 300e9 / nbytes))
            for _ in range(reps):
                with cp.cuda.Device(0):
                    a, b = cp.cuda.Event(), cp.cuda.Event()
                    a.record(bufs[0][3])
                launch(k)
                with cp.cuda.Device(0):
                    b.record(bufs[0][3])
                    b.synchronize()
                for d in range(n):
                    bufs[d][3].synchronize()
                per_call.append(cp.cuda.get_elapsed_time(a, b) / 1e3 / k)
            t = sorted(per_call)[len(per_call) // 2]
            rows.append({"mode": "one process (directMode 1)", "collective": name,
                         "bytes": nbytes, "gpus": n, "time_s": t,
                         "busbw_GBps": nbytes / t * FACTOR[name] / 1e9})  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
        del bufs
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def per_process(sizes=SIZES) -> list[dict]:
    """torch.distributed, one process per GPU (directMode 0): the validate harness."""
    from gpumodel.validate.families.collectives import measure

    records, _ = measure(sizes, batches=5)
    rows = [{"mode": "one process per GPU (directMode 0)", "collective": r["op"]["op"],
             "bytes": r["op"]["bytes"], "gpus": r["op"]["gpus"], "time_s": r["time_s"],
             "busbw_GBps": r["meta"]["busbw"] / 1e9} for r in records]  # fmt: skip
    for r in rows:
        print(json.dumps(r), flush=True)
    return rows


def peer_copies(nbytes: int = 1 << 30, reps: int = 10) -> list[dict]:
    """Copy-engine peer copies GPU0 -> GPU1, and both ways at once."""
    import cupy as cp

    src, dst, streams = [], [], []
    for d in (0, 1):
        with cp.cuda.Device(d):
            src.append(cp.empty(nbytes, dtype=cp.uint8))
            dst.append(cp.empty(nbytes, dtype=cp.uint8))
            streams.append(cp.cuda.Stream(non_blocking=True))
    rows = []
    for both in (False, True):
        pairs = [(0, 1), (1, 0)] if both else [(0, 1)]
        for timed in (False, True):
            with cp.cuda.Device(0):
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record(streams[0])
            for _ in range(reps if timed else 2):
                for s, t in pairs:
                    cp.cuda.runtime.memcpyPeerAsync(dst[t].data.ptr, t, src[s].data.ptr, s,
                                                    nbytes, streams[s].ptr)  # fmt: skip
            for st in streams:
                st.synchronize()
            with cp.cuda.Device(0):
                b.record(streams[0])
                b.synchronize()
        # the event pair brackets stream 0 only; both streams were synchronised before b
        t = cp.cuda.get_elapsed_time(a, b) / 1e3 / reps
        rows.append({"peer_copy": "both directions" if both else "one direction",
                     "bytes": nbytes, "time_s": t, "GBps_per_direction": nbytes / t / 1e9})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="folder for the JSON results")
    args = ap.parse_args()
    missing = [k for k in SAFE if k not in os.environ]
    if missing:
        raise SystemExit(f"set {', '.join(missing)} (NVLink multicast must stay off on this host)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list] = {}
    for name, fn in (("per_process", per_process), ("one_process", one_process),
                     ("peer_copies", peer_copies)):  # fmt: skip
        try:
            results[name] = fn()
        except Exception as exc:  # a missing engine must not lose the other measurements
            results[name] = [{"error": f"{type(exc).__name__}: {exc}"}]
            print(f"{name}: {type(exc).__name__}: {exc}", flush=True)
        (out / "nccl-drain.json").write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
