#!/usr/bin/env python3
"""Carry the kernel families one calibration measured and another lacks, from a GPU of the same
architecture (``gm.load_calibration(SOURCE, for_gpu=TARGET)``, what ``--calibration-from``
does), into the target's calibration: per-family efficiency, bandwidth efficiency and fixed
cost. Families the target has are never touched; the target keeps its measurements, and its
environment says what was carried, from which file, when.

usage: python validation/experiments/carry_family.py SOURCE.yaml TARGET.yaml SUBSTRING OUT.yaml
       e.g. h200-sxm/calibration.yaml h100-sxm/calibration.yaml :efficient h100-sxm/calibration.yaml
       (SUBSTRING selects the families by name: ':efficient' for attention:efficient,
       attention_decode:efficient and attention:efficient:backward)
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

FAMILY_TABLES = ("family_efficiency", "family_bandwidth_efficiency", "family_overhead_s",
                 "family_elements_per_sm_cycle")


def main() -> int:
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    import gpumodel as gm
    from gpumodel.calibration import CalibrationParams, read_calibration_file

    source_path, target_path, substring, out_path = sys.argv[1:]
    target = read_calibration_file(target_path, measurements=True)
    source = read_calibration_file(source_path)
    if gm.get_gpu(source.gpu_id).architecture != gm.get_gpu(target.gpu_id).architecture:
        print(f"error: {source.gpu_id} and {target.gpu_id} are not one architecture",
              file=sys.stderr)  # fmt: skip
        return 2
    carried = gm.load_calibration(source, for_gpu=target.gpu_id).parameters
    params = target.parameters.model_dump(mode="json")
    added = []
    for table in FAMILY_TABLES:
        for family, value in getattr(carried, table).items():
            if substring in family and family not in params[table]:
                params[table][family] = value
                added.append(f"{table}.{family}")
    if not added:
        print(f"error: {source_path} has no {substring!r} family that {target_path} lacks",
              file=sys.stderr)  # fmt: skip
        return 2
    families = sorted({a.split(".", 1)[1] for a in added})
    note = (f"{', '.join(families)} carried from {source.gpu_id} ({Path(source_path).name}, "
            f"{source.created:%Y-%m-%d}; same architecture, not measured on this GPU) "
            f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")  # fmt: skip
    environment = {**target.environment, f"carried{substring}": note}
    out = target.model_copy(update={"parameters": CalibrationParams.model_validate(params),
                                    "environment": environment,
                                    "measurements": target.measurements})  # fmt: skip
    out.save(out_path)
    print(f"carried {len(added)} parameters: {', '.join(added)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
