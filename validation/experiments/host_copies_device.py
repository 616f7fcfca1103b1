"""validate's host copies alone, as ``gpumodel validate --conditions`` times them, for a run
beside the unseen copy family in the same device call (the other conditions families are not
re-measured: their records would take ~3 minutes and change nothing here).

Writes ``{"device": facts, "records": [...]}`` in the shape of conditions-measurements.json,
with the host's CPU and cache facts added; ``fit`` merges the fitted host link into a
calibration (its other parameters kept), the "same machine" calibration of the scoring.

    python3 validation/experiments/host_copies_device.py measure --out host-copies.json
    python3 validation/experiments/host_copies_device.py fit host-copies.json \
        --calibration validation/results/h100-sxm/calibration.yaml --out same-machine.yaml
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for _p in (ROOT, Path(__file__).resolve().parent):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


def measure(out: Path) -> None:
    import torch
    from host_copy_method_device import host_caches, lscpu

    from gpumodel.validate.conditions import _host_copies, device_facts

    facts = device_facts(torch)
    facts["host_caches"] = host_caches()
    facts["lscpu"] = lscpu()
    t0 = time.perf_counter()
    records = _host_copies(torch, print, quick=False)
    data = {"device": facts, "records": records, "wall_s": time.perf_counter() - t0}
    out.write_text(json.dumps(data, indent=1))
    print(f"wrote {out}: {len(records)} records, {data['wall_s']:.0f} s")


def fit(measurements: Path, calibration: Path, out: Path) -> None:
    import gpumodel as gm
    from gpumodel.calibration import read_calibration_file
    from gpumodel.validate.conditions import fit_host_wall

    data = json.loads(measurements.read_text())
    pts = [(gm.ops.from_row(dict(r["op"])), r) for r in data["records"]
           if r["family"] == "host_transfer" and r["condition"] == "isolated"]  # fmt: skip
    host_wall, first_touch, _ = fit_host_wall(pts)
    cal = read_calibration_file(str(calibration), measurements=True)
    params = cal.parameters.model_copy(update={"host_wall": host_wall,
                                               "pageable_first_touch_s_per_byte": first_touch})  # fmt: skip
    # the base calibration's raw measurements stay with it: this file holds its parameters
    cal.model_copy(update={"parameters": params, "measurements": []}).save(str(out))
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", required=True)
    f = sub.add_parser("fit")
    f.add_argument("measurements")
    f.add_argument("--calibration", required=True)
    f.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.cmd == "measure":
        measure(Path(args.out))
    else:
        fit(Path(args.measurements), Path(args.calibration), Path(args.out))


if __name__ == "__main__":
    main()
