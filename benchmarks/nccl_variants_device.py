"""Why do all-gather and reduce-scatter reach a lower bus bandwidth than all-reduce on 2 GPUs?

Measures the three collectives at 64 MiB, 256 MiB and 1 GiB on every local GPU (the harness of
``gpumodel validate --collectives``) under NCCL settings that test one explanation each:

- default: what ``validate --collectives`` measures;
- ``NCCL_PROTO=Simple``: the protocol NCCL's cost model expects at these sizes;
- ``NCCL_MIN_NCHANNELS=32``: more channels (thread blocks) than NCCL picks;
- ``NCCL_BUFFSIZE=16 MiB``: 4x larger pipeline steps (a per-step cost would shrink);
- ``NCCL_ALGO=Ring`` with ``NCCL_NTHREADS=512``: pins the algorithm and block size.

NVLink multicast stays off (``NCCL_NVLS_ENABLE=0`` etc. must be set by the caller). Writes one
JSON line per variant and size to stdout and ``--out``. Run on a multi-GPU machine:
``python benchmarks/nccl_variants_device.py --out nccl-variants.json``.
"""

from __future__ import annotations

import argparse
import json
import os

from gpumodel.validate.collectives_runner import measure

VARIANTS = {
    "default": {},
    "proto-simple": {"NCCL_PROTO": "Simple"},
    "min-32-channels": {"NCCL_MIN_NCHANNELS": "32"},
    "buffsize-16MiB": {"NCCL_BUFFSIZE": str(16 << 20)},
    "ring-512-threads": {"NCCL_ALGO": "Ring", "NCCL_NTHREADS": "512"},
}
SIZES = (64 << 20, 256 << 20, 1 << 30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    for key in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        if key not in os.environ:
            raise SystemExit(f"set {key} (NVLink multicast must stay off on this host)")
    rows = []
    for name, env in VARIANTS.items():
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            records, info = measure(SIZES, batches=3)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        for r in records:
            row = {"variant": name, "collective": r["op"]["op"], "bytes": r["op"]["bytes"],
                   "gpus": r["op"]["gpus"], "time_s": r["time_s"],
                   "busbw_GBps": r["meta"]["busbw"] / 1e9, "nccl": info.get("nccl")}  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
