"""Why do all-gather and reduce-scatter reach a lower bus bandwidth than all-reduce on 2 GPUs?

Measures the three collectives at 64 MiB, 256 MiB and 1 GiB on every local GPU (the harness of
``gpumodel validate --collectives``) under NCCL settings that test one explanation each:

- default: what ``validate --collectives`` measures;
- ``NCCL_PROTO=Simple``: the protocol NCCL's cost model expects at these sizes;
- ``NCCL_MIN_NCHANNELS=32``: more channels (thread blocks) than NCCL picks;
- ``NCCL_BUFFSIZE=16 MiB``: 4x larger pipeline steps (a per-step cost would shrink);
- ``NCCL_ALGO=Ring`` with ``NCCL_NTHREADS=512``: pins the algorithm and block size.

``--channels 4,8,16,24,32`` instead pins NCCL to each channel count in turn
(``NCCL_MIN_NCHANNELS`` = ``NCCL_MAX_NCHANNELS``) at 256 MiB, 1 GiB and 4 GiB, and writes the
datasheet model's prediction for that count beside each measurement (``gm.ops.AllGather(...,
channels=k)``): a test of the ring's receive-only step (its time ~ 1/channels) on data the model
never saw.

NVLink multicast stays off (``NCCL_NVLS_ENABLE=0`` etc. must be set by the caller). Writes one
JSON line per variant and size to stdout and ``--out``. Run on a multi-GPU machine:
``python validation/experiments/nccl_variants_device.py --out nccl-variants.json``.
"""

from __future__ import annotations

import argparse
import json
import os

from gpumodel.validate.families.collectives import measure

VARIANTS = {
    "default": {},
    "proto-simple": {"NCCL_PROTO": "Simple"},
    "min-32-channels": {"NCCL_MIN_NCHANNELS": "32"},
    "buffsize-16MiB": {"NCCL_BUFFSIZE": str(16 << 20)},
    "ring-512-threads": {"NCCL_ALGO": "Ring", "NCCL_NTHREADS": "512"},
}
SIZES = (64 << 20, 256 << 20, 1 << 30)
CHANNEL_SIZES = (256 << 20, 1 << 30, 4 << 30)


def channel_variants(counts: str) -> dict[str, dict[str, str]]:
    """``"8,24"`` -> {"channels-8": {NCCL_MIN_NCHANNELS: 8, NCCL_MAX_NCHANNELS: 8}, ...}."""
    return {f"channels-{k}": {"NCCL_MIN_NCHANNELS": k, "NCCL_MAX_NCHANNELS": k}
            for k in (c.strip() for c in counts.split(",")) if k}  # fmt: skip


def predicted_s(row: dict, gpu: str) -> float | None:
    """The datasheet model's time for a channel-sweep row (None for other variants)."""
    import gpumodel as gm
    from gpumodel.ops.collectives import collective_op

    if not row["variant"].startswith("channels-"):
        return None
    k = int(row["variant"].split("-")[1])
    op = collective_op(row["collective"], bytes=row["bytes"], gpus=row["gpus"], channels=k)
    return gm.predict(op, gpu, "none").time_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--channels", help="comma-separated channel counts to sweep instead")
    ap.add_argument("--gpu", default="h200", help="spec for the model's predictions")
    args = ap.parse_args()
    variants, sizes = (
        (channel_variants(args.channels), CHANNEL_SIZES) if args.channels else (VARIANTS, SIZES)
    )
    for key in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        if key not in os.environ:
            raise SystemExit(f"set {key} (NVLink multicast must stay off on this host)")
    rows = []
    for name, env in variants.items():
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            records, info = measure(sizes, batches=3)
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
            pred = predicted_s(row, args.gpu)
            if pred is not None:
                row["predicted_s"] = pred
                row["error_pct"] = (pred - row["time_s"]) / row["time_s"] * 100
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
