"""Check gpumodel's occupancy model against the driver on the local GPU; write the result as JSON.

Usage (from the checkout root, on a machine with a CUDA GPU, CuPy and pydantic):

    python3 validation/experiments/occupancy_check_device.py --out results/occupancy_check.json

The spec is chosen from the device name ('H100' -> h100-sxm, 'H200' -> h200-sxm, ...) unless
``--spec`` names one (an id, or a path to a spec YAML file). Exit status: 0 when the check ran
(even with mismatches, which the JSON lists), 1 with ``--strict`` and any mismatch, 2 when it
could not run; the JSON is written in every case.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import traceback
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _load_spec(value: str | None):
    if value is None:
        return None
    path = Path(value)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        from gpumodel.specs import load_spec_file

        return load_spec_file(path)
    return value  # a spec id, resolved by run_occupancy_check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--spec", default=None, help="spec id or YAML path (default: by name)")
    parser.add_argument("--quick", action="store_true", help="a quarter of the variants")
    parser.add_argument("--strict", action="store_true", help="exit 1 if any mismatch")
    parser.add_argument("--verbose", action="store_true", help="print each variant")
    args = parser.parse_args(argv)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "script": "validation/experiments/occupancy_check_device.py",
    }
    status = 0
    try:
        from gpumodel.validate.occupancy_check import run_occupancy_check

        progress = (lambda msg: print(msg, flush=True)) if args.verbose else None
        result = run_occupancy_check(_load_spec(args.spec), progress, quick=args.quick)
    except Exception as exc:  # record why it could not run, then fail
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        status = 2
    result = {**meta, **result}
    out.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")

    if status:
        print(f"occupancy check could not run: {result['error']} (details in {out})")
        return status
    print(
        f"{result['device']} vs spec {result['spec_id']}: {result['combinations']} combinations, "
        f"{result['n_mismatches']} mismatches, {result['n_driver_errors']} driver errors, "
        f"{len(result['variant_errors'])} variant errors, {result['seconds']} s"
    )
    if result["spec_vs_device_mismatches"]:
        print(f"spec fields that differ from the device: {result['spec_vs_device_mismatches']}")
    for m in result["mismatches"][:5]:
        print(f"  mismatch: {m}")
    print(f"wrote {out}")
    return 1 if args.strict and result["n_mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
