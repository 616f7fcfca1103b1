#!/usr/bin/env python3
"""Score the in-graph condition on every committed unseen kernel run (a score, nothing fitted).

kernels_unseen.py times GEMMs, convolutions and SDPA calls under 100 us a second way: the
back-to-back loop captured in a CUDA graph and replayed (records of condition
``in-workload-graph``). Each is predicted in-workload (what the scorer priced them as before
2026-11-28) and in-graph, with the H100's shipped calibration (carried to the H200), and with
the host profile measured in the same device call where the run has one (its
``graph_replay_per_kernel_s``), else the reference host. Prints a markdown table: median
|error|, p90 |error| and the signed median per GPU, family and host.

    python validation/experiments/in_graph_rescore.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation" / "unseen"))

from evaluate import RESULTS, calibration, emit_report, kernel_op, stats_cell  # noqa: E402

import gpumodel as gm  # noqa: E402


def scores() -> dict[tuple[str, str, str], dict[str, list[float]]]:
    out: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for path in sorted(RESULTS.glob("unseen-h*/unseen.json")):
        gpu = "h200" if "h200" in path.parent.name else "h100"
        cal = calibration(f"{gpu}-sxm", "h100-sxm")
        host = path.parent / "host-before.yaml"
        host_arg = str(host) if host.exists() else None
        for r in json.loads(path.read_text())["records"]:
            if r.get("condition") != "in-workload-graph" or not r.get("time_s_median"):
                continue
            op, measured = kernel_op(r), r["time_s_median"]
            key = (gpu, r["family"], "same call's profile" if host_arg else "reference host")
            row = out.setdefault(key, {"in-workload": [], "in-graph": [], "runs": []})
            row["in-workload"].append(gm.predict(op, gpu, cal).time_s / measured - 1)
            row["in-graph"].append(gm.predict(op, gpu, cal, condition="in-graph",
                                              host=host_arg).time_s / measured - 1)  # fmt: skip
            if path.parent.name not in row["runs"]:
                row["runs"].append(path.parent.name)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    lines = ["| GPU | family | host | n | in-workload | in-graph | runs |",
             "|---|---|---|---:|---|---|---|"]  # fmt: skip
    for (gpu, family, host), row in sorted(scores().items()):
        lines.append(f"| {gpu} | {family} | {host} | {len(row['in-graph'])} | "
                     f"{stats_cell(row['in-workload'])} | {stats_cell(row['in-graph'])} | "
                     f"{', '.join(row['runs'])} |")  # fmt: skip
    text = ("Median |error| (p90), signed median; H100 calibration (carried to the H200).\n\n"
            + "\n".join(lines) + "\n")  # fmt: skip
    return emit_report(text, args.out)


if __name__ == "__main__":
    sys.exit(main())
