#!/usr/bin/env python3
"""The DRAM stream's power in the sustained-clock model (gpumodel.model.power), and the tensor
power refitted beside it, for the shipped Hopper calibrations.

1. ``e``, joules per DRAM byte: from the mid-M GEMM fit set (``gemm_launches_device.py --set
   midm2``, H200), the points that ran below the power limit at the maximum clock, as
   ``validate --conditions`` reads its own (``gpumodel.validate.conditions.dram_energies``):
   e = (NVML power - P_static - u x W) / (DRAM bytes / time), W and P_static the shipped
   calibration's.
   The median is printed beside ``DRAM_ENERGY_J_PER_BYTE``; the fit set's in-workload times are
   then scored with and without the term.
2. ``W``, the full tensor-activity power: the shipped calibrations' back-to-back GEMMs (their
   pooled ``validate --conditions`` runs) refitted by ``gpumodel.validate.conditions.
   fit_conditions`` now that each point carries its DRAM stream's power. Only ``power`` changes
   (``tensor_power_w_per_sm`` and the dtype factors; H100's fp8/TF32 factors stay carried from
   the H200's, as shipped), written with ``--write``.

Never scored against the unseen sets.

usage: python validation/fitset/fit_dram_power.py [--write]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "validation" / "results"
FIT_SET = RESULTS / "h200-sxm" / "gemm-midm2-2026-11-29" / "gemm-midm2.json"
POOLED = {  # the runs each shipped calibration's power was fitted on
    "h200-sxm": RESULTS / "h200-sxm" / "conditions-pooled-2026-11-28" / "conditions-measurements.json",
    "h100-sxm": RESULTS / "h100-sxm" / "conditions-pooled-2026-11-27" / "conditions-measurements.json",
}  # fmt: skip


def energy_per_byte(points: list[dict], gpu, cal) -> list[float]:
    """e of each fit-set point that ran unthrottled (see the module docstring)."""
    import gpumodel as gm
    from gpumodel.predict import power_watts
    from gpumodel.validate.conditions import dram_energies

    static_w, full_w = power_watts(cal.parameters, gpu, "bf16")
    records = [(gm.ops.Gemm(m=p["M"], n=p["N"], k=p["K"], dtype="bf16", transpose_b=True),
                {"time_s": p["in_workload_s"], "meta": {"sm_clock_mhz_median": p.get("sm_clock_mhz"),
                                                        "power_w_median": p.get("power_w")}})
               for p in points]  # fmt: skip
    return dram_energies(records, gpu, static_w, full_w)


def fit_set_errors(points: list[dict], energy: float) -> list[float]:
    """predicted / measured - 1 of the fit set's in-workload times with ``energy`` J/B."""
    import gpumodel as gm
    from gpumodel.model import power

    keep = power.DRAM_ENERGY_J_PER_BYTE.get("hopper")
    power.DRAM_ENERGY_J_PER_BYTE["hopper"] = energy
    try:
        return [gm.predict(gm.ops.Gemm(m=p["M"], n=p["N"], k=p["K"], dtype="bf16",
                                       transpose_b=True), "h200", "h200").time_s
                / p["in_workload_s"] - 1 for p in points]  # fmt: skip
    finally:
        power.DRAM_ENERGY_J_PER_BYTE["hopper"] = keep


def refit_power(gpu_id: str, factors_from: dict[str, float] | None):
    """(the shipped calibration, its power refitted on its pooled conditions runs)."""
    import gpumodel as gm
    from gpumodel.calibration import read_calibration_file
    from gpumodel.validate.conditions import fit_conditions

    path = RESULTS / gpu_id / "calibration.yaml"
    cal = read_calibration_file(path, measurements=True)
    gpu = gm.get_gpu(gpu_id)
    data = json.loads(POOLED[gpu_id].read_text())
    idle = cal.parameters.power.static_power_fraction * gpu.tdp_watts
    fitted, report = fit_conditions(data["records"], gpu, cal.parameters, idle_power_w=idle)
    new = fitted.power
    if factors_from is not None:  # carried, as shipped
        new = new.model_copy(update={"tensor_power_dtype_factor": factors_from})
    old = cal.parameters.power
    source = (f"{old.source}; tensor power refitted 2026-11-29 beside each GEMM's DRAM stream "
              "(validation/fitset/fit_dram_power.py)")  # fmt: skip
    new = new.model_copy(update={"source": source})
    held = report["errors"]["gemm back to back (held out): in-workload"]
    return cal, new, held


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="write the refitted power into the "
                    "shipped calibrations")  # fmt: skip
    args = ap.parse_args()
    import gpumodel as gm
    from gpumodel.model.power import DRAM_ENERGY_J_PER_BYTE

    points = json.loads(FIT_SET.read_text())["points"]
    gpu = gm.get_gpu("h200")
    es = energy_per_byte(points, gpu, gm.load_calibration("h200"))
    print(f"e from NVML power: median {statistics.median(es) * 1e12:.0f} pJ/B over {len(es)} "
          f"points ({min(es) * 1e12:.0f}-{max(es) * 1e12:.0f}); shipped "
          f"{DRAM_ENERGY_J_PER_BYTE['hopper'] * 1e12:.0f}")  # fmt: skip
    for e in (0.0, DRAM_ENERGY_J_PER_BYTE["hopper"]):
        err = fit_set_errors(points, e)
        mid = [x for x, p in zip(err, points) if 33 <= p["M"] <= 256]
        print(f"fit set in-workload, e = {e * 1e12:.0f} pJ/B: median |error| "
              f"{statistics.median(map(abs, err)) * 100:.1f}% (M 33-256 "
              f"{statistics.median(map(abs, mid)) * 100:.1f}%, signed "
              f"{statistics.median(mid) * 100:+.1f}%)")  # fmt: skip
    h200_cal, h200_power, held = refit_power("h200-sxm", None)
    out = [(h200_cal, h200_power, held)]
    out.append(refit_power("h100-sxm", h200_power.tensor_power_dtype_factor))
    for cal, new, held in out:
        old = cal.parameters.power
        print(f"{cal.gpu_id}: W {old.tensor_power_w_per_sm * 132:.0f} -> "
              f"{new.tensor_power_w_per_sm * 132:.0f} W; factors {new.tensor_power_dtype_factor}; "
              f"held-out back-to-back GEMMs {held.get('median_abs_pct', float('nan')):.1f}% "
              f"(n {held.get('n')})")  # fmt: skip
        if args.write:
            env = {**cal.environment, "refit:power": "tensor power refitted beside each GEMM's "
                   "DRAM stream (2026-11-29, validation/fitset/fit_dram_power.py)"}  # fmt: skip
            params = cal.parameters.model_copy(update={"power": new})
            cal.model_copy(update={"parameters": params, "environment": env}).save(cal.origin)
            print(f"  wrote {cal.origin}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
