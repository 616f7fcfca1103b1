"""Measure NCCL all-reduce, all-gather and reduce-scatter on every local GPU, fit, report.

    PYTHONPATH=$PWD python3 validation/experiments/collectives_device.py --out DIR [--max-bytes 4GiB]
    python3 validation/experiments/collectives_device.py --from DIR/collectives_measurements.json --out DIR2

Writes into DIR: collectives_measurements.json (raw records), collectives_calibration.yaml
(``parameters.collectives`` + ``errors`` to merge into validation/results/<gpu>/calibration.yaml)
and collectives_report.md (errors against the issue's targets, every measurement). One process
per GPU through torch.distributed (NCCL); NVLink multicast stays off (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 in every process). With one GPU it
says so and exits 0 with an empty result. About a minute on 2 x H200.
"""

from __future__ import annotations

import os

os.environ.update(
    {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
)

import argparse
import json
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:  # run from a checkout without PYTHONPATH
    sys.path.insert(0, str(_ROOT))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_ROOT), os.environ.get("PYTHONPATH")) if p
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--min-bytes", default="1KiB")
    ap.add_argument("--max-bytes", default="4GiB")
    ap.add_argument("--step", type=int, default=2, help="size multiplier between points (2 or 4)")
    ap.add_argument("--gpus", type=int, default=None, help="ranks (default: all local GPUs)")
    ap.add_argument("--gpu", default=None, help="spec id (default: from the device name)")
    ap.add_argument("--calibration", default=None, help="existing calibration YAML to update")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument(
        "--from",
        dest="source",
        default=None,
        help="re-fit a saved collectives_measurements.json instead of measuring",
    )
    args = ap.parse_args(argv)

    from gpumodel.units import parse_quantity
    from gpumodel.validate.families.collectives import SAFE_ENV, refit, run_collectives_validation

    assert all(os.environ.get(k) == v for k, v in SAFE_ENV.items())
    if args.source:
        summary = refit(args.source, args.out, gpu=args.gpu, calibration_file=args.calibration)
    else:
        summary = run_collectives_validation(
            args.out,
            gpu=args.gpu,
            min_bytes=int(parse_quantity(args.min_bytes, "bytes")),
            max_bytes=int(parse_quantity(args.max_bytes, "bytes")),
            step=args.step,
            world=args.gpus,
            calibration_file=args.calibration,
        )
    print(json.dumps(summary, indent=1, default=str))
    if summary.get("measured", 0) == 0:
        return 0
    return 1 if args.strict and not summary.get("passed") else 0


if __name__ == "__main__":
    sys.exit(main())
