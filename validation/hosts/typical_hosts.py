#!/usr/bin/env python3
"""Build the shipped typical host profile (``specs/hosts/typical.yaml``) from the host profiles
measured on the device machines.

A whole-step prediction with no host given and none measured on the machine it runs on assumes a
shipped profile. Until 2026-11-30 that was ``reference-h100``: the flat 26.6 us per eager call the
model assumed before hosts were measured, two to three times what the measured machines spend
(8-15 us). This script replaces it as the default with the machines' own figures: every host
profile ``gpumodel validate --host-only`` wrote during a device call and that was committed under
``validation/results`` (one per call, 252 of them, H100 and H200 VMs of one cloud), each field
the median over the profiles that measured it. ``spread`` holds the p10 and p90 across the
machines, and ``host_drift`` the p10 and p90 of a machine's HF layer time over the median
machine's: the range of a host-bound step on a machine whose host was not measured. The two
GPUs' machines are pooled: the host is the CPU's and the software's, not the GPU's (the two VM
types' medians differ by 10-14%, less than machines of one type differ from each other).

    python validation/hosts/typical_hosts.py [--before 2026-11-30T10:00:00Z] [--out specs/hosts]

Only profiles measured before ``--before`` count: the later ones (multi-GPU run 9 and the runs
after it) are the check of the profiles built from the earlier ones. The exception: probes no
profile before it had (the SDPA calling patterns of 2026-12-01: ``SDPA_VARIANTS``) take the
median ratio to the ``sdpa`` probe over the later profiles that measured them, times the
typical ``sdpa``, and those profiles' kernel counts (``probe_kernels``); ``notes`` names them. Host profiles are the host
harness's own measurements (the calibration side), not the unseen sets' step times: nothing
here reads a measured step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpumodel._io import atomic_write_text  # noqa: E402
from gpumodel.hostprofile import HOST_COPY_KINDS, HostProfile  # noqa: E402

CUTOFF = "2026-11-30T10:00:00Z"
SCALARS = ("kernel_launch_s", "hf_decoder_layer_s", "hf_model_step_s", "hf_model_layer_s",
           "hf_moe_layer_s", "profiler_event_s", "sdpa_graph_build_s", "graph_replay_s",
           "graph_replay_per_kernel_s", "compiled_step_launch_s")  # fmt: skip


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


#: eager probes added after the cutoff, taken as ratios to ``sdpa`` from the profiles that have them
SDPA_VARIANTS = ("sdpa_forced", "sdpa_mask", "sdpa_backward")


def measured_profiles(before: str, after: str = "") -> list[tuple[Path, dict]]:
    """The committed profiles of GPU machines measured in [``after``, ``before``), one per
    (time, CPU)."""
    seen: set[tuple[str, str]] = set()
    out: list[tuple[Path, dict]] = []
    for path in sorted((ROOT / "validation" / "results").glob("**/host*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("host_profile") != 1:
            continue
        key = (str(data["measured_at"]), str(data["cpu_model"]))
        if (key in seen or not after <= key[0] < before
                or not str(data.get("gpu", "")).startswith("NVIDIA")):  # fmt: skip
            continue
        seen.add(key)
        out.append((path, data))
    return out


def channels_last_conv(data: dict) -> bool:
    """Profiles before 2026-11-25 timed an NCHW conv (four kernels); later ones channels_last."""
    return "channels_last" in str((data.get("shapes") or {}).get("eager_ops", ""))


def sdpa_variants(later: list[tuple[Path, dict]], sdpa_s: float) -> tuple[dict, dict, dict]:
    """(eager figures, probe kernel counts, notes) of ``SDPA_VARIANTS`` from the ``later``
    profiles that measured them: each the median ratio to that profile's ``sdpa`` x ``sdpa_s``;
    the kernels as most of them counted."""
    have = [d for _, d in later if all(d["eager_op_s"].get(k) for k in SDPA_VARIANTS)]
    if not have:
        return {}, {}, {}
    eager = {k: round(sdpa_s * statistics.median(d["eager_op_s"][k] / d["eager_op_s"]["sdpa"]
                                                 for d in have), 12)
             for k in SDPA_VARIANTS}  # fmt: skip
    kernels = {k: int(Counter((d.get("probe_kernels") or {}).get(k) for d in have
                              if (d.get("probe_kernels") or {}).get(k)).most_common(1)[0][0])
               for k in ("sdpa", *SDPA_VARIANTS)}  # fmt: skip
    note = {"sdpa_variants": (f"{', '.join(SDPA_VARIANTS)}: the typical sdpa x the median ratio "
                              f"to sdpa over the {len(have)} later profiles that measured them "
                              f"({min(str(d['measured_at']) for d in have)[:10]}); probe_kernels: "
                              "as most of them counted")}  # fmt: skip
    return eager, kernels, note


def typical(profiles: list[tuple[Path, dict]], before: str,
            later: list[tuple[Path, dict]] = ()) -> dict[str, Any]:  # fmt: skip
    """The typical profile of ``profiles`` as a host-profile mapping (``later``: the profiles
    after them, read for ``SDPA_VARIANTS`` only)."""
    fields: dict[str, list[float]] = defaultdict(list)
    for _, d in profiles:
        for kind, v in d["eager_op_s"].items():
            if v is not None and (kind != "conv" or channels_last_conv(d)):
                fields[f"eager_op_s.{kind}"].append(float(v))
        for name in SCALARS:
            if d.get(name) is not None:
                fields[name].append(float(d[name]))
        for kind in HOST_COPY_KINDS:
            if (d.get("host_copy_s") or {}).get(kind) is not None:
                fields[f"host_copy_s.{kind}"].append(float(d["host_copy_s"][kind]))
    med = {k: statistics.median(v) for k, v in fields.items()}
    spread = {k: [round(quantile(v, 0.1), 9), round(quantile(v, 0.9), 9)]
              for k, v in fields.items() if len(v) >= 5}  # fmt: skip
    layer = fields.get("hf_model_layer_s") or fields["hf_decoder_layer_s"]
    drift = (round(quantile(layer, 0.1) / statistics.median(layer), 3),
             round(quantile(layer, 0.9) / statistics.median(layer), 3))  # fmt: skip

    def mode(key: str) -> Any:
        return Counter(str(d.get(key)) for _, d in profiles).most_common(1)[0][0]

    newest = max(str(d["measured_at"]) for _, d in profiles)
    oldest = min(str(d["measured_at"]) for _, d in profiles)
    shapes = next(d["shapes"] for _, d in sorted(profiles, key=lambda p: str(p[1]["measured_at"]),
                                                 reverse=True) if d.get("shapes"))  # fmt: skip
    gpus = Counter(str(d["gpu"]) for _, d in profiles)
    name = " and ".join(f"{g} ({n})" for g, n in sorted(gpus.items()))
    eager = {
        k.split(".", 1)[1]: round(v, 12) for k, v in med.items() if k.startswith("eager_op_s.")
    }
    copies = {k.split(".", 1)[1]: round(v, 12) for k, v in med.items()
              if k.startswith("host_copy_s.")}  # fmt: skip
    variants, probe_kernels, variant_note = sdpa_variants(list(later), eager["sdpa"])
    eager.update({k: v for k, v in variants.items() if k not in eager})
    return {
        "host_profile": 1, "name": "typical", "measured_at": newest,
        "cpu_model": mode("cpu_model"), "cpu_cores": int(mode("cpu_cores")),
        "python": mode("python"), "torch": mode("torch"), "transformers": mode("transformers"),
        "cuda_driver": mode("cuda_driver"), "gpu": name, "eager_op_s": eager,
        **{n: round(med[n], 12) for n in SCALARS if n in med},
        "hf_decoder_layer_kernels": int(mode("hf_decoder_layer_kernels")),
        "host_copy_s": copies if len(copies) == len(HOST_COPY_KINDS) else None,
        "spread": spread, "host_drift": list(drift), "shapes": shapes,
        **({"probe_kernels": probe_kernels} if probe_kernels else {}),
        "notes": {
            "what": (f"the typical host of a GPU machine: each figure the median over the "
                     f"{len(profiles)} host profiles `gpumodel validate --host-only` measured on "
                     f"VMs of one cloud from {oldest[:10]} to {newest[:10]} (gpu: the machines' "
                     "GPUs, with counts), committed under validation/results; spread: p10 and p90 "
                     "across those machines; host_drift: p10 and p90 of a machine's HF "
                     "decoder-layer host time over the median machine's (what a host-bound step "
                     "varies by from machine to machine)"),
            "built_by": "validation/hosts/typical_hosts.py",
            "profiles_measured_before": before,
            "points": {k: len(v) for k, v in sorted(fields.items())},
            "sources": sorted({str(p.parent.relative_to(ROOT)) for p, _ in profiles}),
            **variant_note,
        },
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default=CUTOFF, help="only profiles measured before this time")
    ap.add_argument("--out", type=Path, default=ROOT / "specs" / "hosts")
    args = ap.parse_args()
    profiles = measured_profiles(args.before)
    if profiles:
        later = measured_profiles("9999", after=args.before)
        profile = HostProfile.model_validate(typical(profiles, args.before, later))  # as read
        head = ("# gpumodel typical host profile, built by validation/hosts/typical_hosts.py from "
                "the host profiles measured\n# on the device machines (notes: how, and from "
                "which runs). Not one machine: the median one.\n")  # fmt: skip
        path = atomic_write_text(args.out / "typical.yaml", head + profile.to_yaml(),
                                 "host profile")  # fmt: skip
        print(
            f"{path.relative_to(ROOT)}: {len(profiles)} profiles, elementwise "
            f"{profile.eager_op_s.elementwise * 1e6:.2f} us, HF layer "
            f"{(profile.hf_model_layer_s or 0) * 1e3:.3f} ms, drift {profile.host_drift}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
