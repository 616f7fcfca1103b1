#!/usr/bin/env python3
"""Refit one kernel family of a shipped calibration from new measurements of that family.

The shipped file keeps everything else: its other families' measurements and parameters, and
the sections merged into it after its fit (conditions, host copies). The family's records that
the new run measured again are replaced by the new ones (the others stay), the whole
measurement set is refitted with `gpumodel validate --from-measurements`, and only the
parameters whose names carry the family's name (and the errors of its report groups) are taken
from the refit. It refuses when the refit moved any
other fitted parameter, which would mean the families were not independent.

FAMILY ``all`` refits every family from the shipped file's own measurements (NEW_RUN.yaml is then
the shipped file too): every fitted parameter and error is the refit's, the merged-in sections are
kept. That is how a shipped calibration is brought to what a changed fit makes of its data.

usage: python validation/experiments/refit_family.py SHIPPED.yaml NEW_RUN.yaml FAMILY OUT.yaml
       e.g. validation/results/h100-sxm/calibration.yaml conv-calibration.yaml conv2d cal.yaml
            validation/results/h200-sxm/calibration.yaml (the same) all cal.yaml
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

# fitted scalars of a family whose names do not carry the family's name
FAMILY_SCALARS = {"conv2d": ("conv_half_fill_tiles_per_sm",)}
# the kernel families of a record family whose names do not carry the record family's name,
# and the start of its report groups' names
KERNEL_FAMILIES = {"norm": ("layernorm", "rmsnorm", "softmax")}
GROUP_NAMES = {"norm": "layer/RMS norm"}


def flat(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def op_key(record: dict) -> str:
    return json.dumps([record["family"], record["op"]], sort_keys=True)


def in_shipped_order(shipped: list[dict], fresh: list[dict], remeasured: set[str]) -> list[dict]:
    """``shipped`` with the records whose op ``fresh`` measured again replaced by the fresh ones,
    one for one in place (an op measured twice, e.g. by two backends, keeps both places); the
    fresh records left over at the end."""
    by_key: dict[str, list[dict]] = {}
    for r in fresh:
        by_key.setdefault(op_key(r), []).append(r)
    out = []
    for r in shipped:
        key = op_key(r)
        if key not in remeasured:
            out.append(r)
        elif by_key.get(key):
            out.append(by_key[key].pop(0))
    return out + [r for rs in by_key.values() for r in rs]


def main() -> int:
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    from gpumodel.calibration import CalibrationParams, FamilyError, read_calibration_file

    shipped_path, new_path, family, out_path = sys.argv[1:]
    shipped = read_calibration_file(shipped_path, measurements=True)
    new = read_calibration_file(new_path, measurements=True)
    every = family == "all"
    fresh = [r for r in new.measurements if every or r["family"] == family]
    if not fresh:
        print(f"error: {new_path} has no {family} measurements", file=sys.stderr)
        return 2
    # a record the new run measured again (same op) is replaced; one it did not measure stays
    # (validate's point list has shrunk over time: the shipped fit may hold points it no longer
    # times, and dropping them would refit those families on less data)
    remeasured = {op_key(r) for r in fresh}
    kept = [r for r in shipped.measurements
            if not every and (r["family"] != family or op_key(r) not in remeasured)]  # fmt: skip
    # the measurements in the shipped file's order: records measured again take the place of
    # the first old one, new ones go at the end (the fit's held-out split follows the order)
    ordered = fresh if every else in_shipped_order(shipped.measurements, fresh, remeasured)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "measurements.json"
        raw.write_text(json.dumps({"device": shipped.environment, "records": ordered,
                                   "unavailable": shipped.unavailable}))  # fmt: skip
        refit_path = Path(tmp) / "refit.yaml"
        subprocess.run([sys.executable, "-m", "gpumodel", "validate", "--from-measurements",
                        str(raw), "--gpu", shipped.gpu_id, "--no-progress",
                        "--out", str(refit_path)], check=False)  # fmt: skip
        refit = read_calibration_file(refit_path)
    params = shipped.parameters.model_dump(mode="json")
    old, fitted = flat(params), flat(refit.parameters.model_dump(mode="json"))
    if every:  # what the refit set; what it leaves unset was merged in after a fit
        ours = {k for k in fitted if fitted[k] is not None}
    else:
        names = KERNEL_FAMILIES.get(family, (family,))
        ours = {k for k in fitted if any(n in k.split(".")[-1] for n in names)
                or k in FAMILY_SCALARS.get(family, ())}  # fmt: skip
    # a refit from measurements leaves the sections merged in after a fit (conditions, host
    # copies) unset: those are kept as shipped
    moved = [k for k in fitted
             if k not in ours and k in old and fitted[k] is not None and fitted[k] != old[k]]  # fmt: skip
    if moved:
        print(f"error: the refit moved parameters outside {family}: {moved[:8]}", file=sys.stderr)
        return 1
    for key in sorted(ours):
        *path, leaf = key.split(".")
        node = params
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = fitted[key]
    # a report group is named in words: "attention ...", "strided elementwise (...)"
    words = GROUP_NAMES.get(family, family.replace("_", " "))
    errors = {**shipped.errors,
              **{g: FamilyError.model_validate(e.model_dump()) for g, e in refit.errors.items()
                 if every or g.startswith((family, words))}}  # fmt: skip
    now = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M}"
    what = (f"every family from its own measurements ({now} UTC), the merged-in sections as "
            "shipped") if every else (
            f"{family} from {Path(new_path).name} ({new.created:%Y-%m-%d %H:%M} UTC), the rest "
            "as shipped")  # fmt: skip
    environment = {**shipped.environment, "refit": what}
    merged = shipped.model_copy(update={"parameters": CalibrationParams.model_validate(params),
                                        "errors": errors, "environment": environment,
                                        "measurements": ordered})  # fmt: skip
    merged.save(out_path)
    changed = {k: (old.get(k), fitted[k]) for k in sorted(ours) if old.get(k) != fitted[k]}
    print(f"{len(shipped.measurements) - len(kept)} {family} records replaced by {len(fresh)}, "
          f"{sum(r['family'] == family for r in kept)} kept; {len(changed)} parameters changed:")  # fmt: skip
    for k, (a, b) in changed.items():
        print(f"  {k}: {a} -> {b}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
