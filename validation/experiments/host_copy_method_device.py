"""How should validate time a host<->device copy, and is a copy's time affine in its size?

Two questions behind the copy misses of issue #16 (validate's wall-clock copies fit 16.5% held
out; pageable host-to-device was 13.6 GB/s at 16 MB and 7.0 GB/s at 256 MB in one run):

1. Method. validate timed each size 30 times after 3 warm-up calls, right after allocating
   its buffers, and called ``.to('cuda', non_blocking=True)`` + synchronize for pinned memory.
   Here every (size, kind, direction) is timed by that recipe and by a steady-state one (20
   warm-up calls, then at least 200 calls or 50 ms), and the pinned host-to-device copy both
   ways (non_blocking + synchronize, and the blocking ``.to('cuda')``), in interleaved rounds
   so that a drifting host moves every variant alike.
2. Shape. Pageable copies go through the driver's pinned staging buffers: the CPU copies the
   source into them. Sizes 4 KB .. 1 GB in 4x steps, plus 32, 64 and 128 MB, show where the
   per-byte cost changes, next to the host's cache sizes (lscpu, sysfs).

Reads only; sets nothing on the GPU.

    python3 validation/experiments/host_copy_method_device.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 32 << 20,
         64 << 20, 128 << 20, 256 << 20, 1 << 30]  # fmt: skip


def host_caches() -> dict[str, str]:
    out = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in sorted(base.glob("index*")):
        try:
            level = (idx / "level").read_text().strip()
            kind = (idx / "type").read_text().strip()
            out[f"L{level} {kind}"] = (idx / "size").read_text().strip()
        except OSError:
            continue
    return out


def lscpu() -> str:
    try:
        return subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except Exception as exc:
        return f"lscpu failed: {exc}"


def timed(fn, sync, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import torch

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    sync = torch.cuda.synchronize
    env = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "cuda": torch.version.cuda, "python": platform.python_version(),
        "cpus": os.cpu_count(), "caches": host_caches(), "lscpu": lscpu(),
    }  # fmt: skip
    print(json.dumps({k: v for k, v in env.items() if k != "lscpu"}), flush=True)
    rows = []
    for rnd in range(args.rounds):
        for nbytes in SIZES:
            for pinned in (True, False):
                host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
                host.fill_(7)
                dev = torch.randint(1, 255, (nbytes,), dtype=torch.uint8, device="cuda")
                dst = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True) if pinned else None
                cases = {("h2d", "to(cuda)"): lambda h=host: h.to("cuda")}
                if pinned:
                    cases[("h2d", "to(cuda, non_blocking)")] = (
                        lambda h=host: h.to("cuda", non_blocking=True))
                    cases[("d2h", "pinned.copy_")] = lambda d=dev, o=dst: o.copy_(d, non_blocking=True)
                else:
                    cases[("d2h", "cpu()")] = lambda d=dev: d.cpu()
                    cases[("d2h", "pageable.copy_")] = lambda d=dev, o=host: o.copy_(d)
                big = nbytes >= 64 << 20
                for (direction, api), fn in cases.items():
                    # validate's recipe before this experiment: 3 warm-up, 30 timed
                    for _ in range(3):
                        fn()
                        sync()
                    v = timed(fn, sync, 4 if big else 30)
                    # steady state: 20 warm-up, then >= 200 calls or >= 50 ms
                    for _ in range(2 if big else 20):
                        fn()
                        sync()
                    n = 4 if big else max(200, int(0.05 / max(statistics.median(v), 1e-6)))
                    s = timed(fn, sync, min(n, 2000))
                    rows.append({"round": rnd, "bytes": nbytes, "pinned": pinned,
                                 "direction": direction, "api": api,
                                 "validate_recipe_s": statistics.median(v),
                                 "steady_s": statistics.median(s),
                                 "steady_p10_s": sorted(s)[len(s) // 10],
                                 "steady_p90_s": sorted(s)[(9 * len(s)) // 10],
                                 "n_steady": len(s)})  # fmt: skip
                    r = rows[-1]
                    print(f"r{rnd} {nbytes:>11d} {'pin' if pinned else 'pag'} {direction} "
                          f"{api:24s} recipe {r['validate_recipe_s'] * 1e6:10.1f} us  steady "
                          f"{r['steady_s'] * 1e6:10.1f} us  ({nbytes / r['steady_s'] / 1e9:6.2f} "
                          "GB/s)", flush=True)  # fmt: skip
                del host, dev, dst
                torch.cuda.empty_cache()
    (out_dir / "host-copy-method.json").write_text(json.dumps({"env": env, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
