#!/usr/bin/env python3
"""Run gpumodel's measurement runners on the local GPU and write the raw records as JSON.

    python3 validation/experiments/run_measurements.py [--quick] [--families a,b] --out FILE.json

Writes {"device": device_info(), "records": [...], "unavailable": [...], "run": {...}}
atomically (temporary file + os.replace) and prints a summary table. Needs CuPy and, for the
torch families, PyTorch; it does not need gpumodel's other dependencies (pydantic etc.): when
the package's __init__ cannot be imported, the runner modules are loaded without it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _import_runners() -> tuple[Any, Any, Any]:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    for name, folder in (("gpumodel", ROOT / "gpumodel"), ("gpumodel.validate", None)):
        try:
            __import__(name)
        except ImportError:
            # The package __init__ pulls in something this machine lacks: load the runner,
            # family and engine modules without it (they need only the standard library, numpy, cupy, torch).
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(folder or ROOT / "gpumodel" / "validate")]
            sys.modules[name] = pkg
    from gpumodel.validate import device_info, families, runner

    return runner, families, device_info


class TextProgress:
    """One line per family, plus a line every ~10% of a family's points."""

    def __init__(self, runner: str):
        self.runner = runner
        self.t0 = time.perf_counter()
        self.last_family = None
        self.last_pct = -1

    def __call__(self, label: str, done: int, total: int) -> None:
        family = label.split()[0]
        pct = int(100 * done / max(1, total))
        if family != self.last_family or pct // 10 != self.last_pct // 10 or done == total:
            dt = time.perf_counter() - self.t0
            print(f"[{self.runner} {dt:6.1f}s] {done:4d}/{total} {label}", flush=True)
            self.last_family = family
            self.last_pct = pct


def _fmt_t(t: float) -> str:
    if t < 1e-3:
        return f"{t * 1e6:8.2f} us"
    if t < 1:
        return f"{t * 1e3:8.3f} ms"
    return f"{t:8.3f} s "


def summary(records: list[dict[str, Any]], unavailable: list[dict[str, Any]]) -> str:
    """Per-family count and min/median time, plus the sanity numbers: peak TFLOP/s per GEMM
    dtype, peak GB/s per bandwidth pattern, launch overheads, latency, host transfer GB/s."""
    lines = []
    fams: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        fams.setdefault(r["family"], []).append(r)
    lines.append(f"{'family':<14}{'count':>7}{'min time':>14}{'median time':>14}")
    for fam, rs in fams.items():
        ts = [r["time_s"] for r in rs]
        lines.append(
            f"{fam:<14}{len(rs):>7}{_fmt_t(min(ts)):>14}{_fmt_t(statistics.median(ts)):>14}"
        )

    gemm = fams.get("gemm", [])
    if gemm:
        lines.append("gemm: best TFLOP/s per dtype (shape)")
        by_dt: dict[str, tuple[float, str]] = {}
        for r in gemm:
            op = r["op"]
            tf = 2 * op["m"] * op["n"] * op["k"] / r["time_s"] / 1e12
            if tf > by_dt.get(op["dtype"], (0.0, ""))[0]:
                by_dt[op["dtype"]] = (tf, f"{op['m']}x{op['n']}x{op['k']}")
        for dt, (tf, shape) in by_dt.items():
            lines.append(f"  {dt:<6}{tf:9.1f} TFLOP/s  ({shape})")

    for fam, key in (("poly", "poly"), ("poly_fma", "poly_fma")):
        rs = fams.get(fam, [])
        if rs:
            best = max(rs, key=lambda r: r["op"]["flops"] / r["time_s"])
            lines.append(
                f"{key}: best {best['op']['flops'] / best['time_s'] / 1e12:.1f} TFLOP/s "
                f"(k={best['meta']['k']}, n={best['meta']['n']})"
            )

    bw = fams.get("bandwidth", [])
    if bw:
        lines.append("bandwidth: max GB/s per pattern and cache state (bytes)")
        best_bw: dict[tuple[str, str], tuple[float, int]] = {}
        for r in bw:
            key = (r["meta"]["pattern"], r["meta"]["cache"])
            gbs = r["op"]["bytes"] / r["time_s"] / 1e9
            if gbs > best_bw.get(key, (0.0, 0))[0]:
                best_bw[key] = (gbs, r["op"]["bytes"])
        for (pattern, cache), (gbs, nbytes) in sorted(best_bw.items()):
            lines.append(f"  {pattern:<6}{cache:<5}{gbs:9.1f} GB/s  ({nbytes} B)")
    cp = fams.get("copy", [])
    if cp:
        best = max(cp, key=lambda r: r["meta"]["moved_bytes"] / r["time_s"])
        lines.append(
            f"copy (cudaMemcpy d2d): max {best['meta']['moved_bytes'] / best['time_s'] / 1e9:.1f}"
            f" GB/s moved ({best['op']['bytes']} B per buffer, {best['meta']['cache']})"
        )
    for r in fams.get("launch", []):
        lines.append(f"launch {r['meta']['mode']:<13}{_fmt_t(r['time_s'])}")
    lat = fams.get("latency", [])
    if lat:
        parts = [
            f"{r['meta']['working_set_bytes'] >> 10}K:{r['meta']['cycles_per_load']:.0f}"
            for r in lat
        ]
        lines.append("latency cycles/load: " + " ".join(parts))
    ht = fams.get("host_transfer", [])
    if ht:
        best_ht: dict[tuple[str, bool], float] = {}
        for r in ht:
            key2 = (r["op"]["direction"], r["op"]["pinned"])
            best_ht[key2] = max(best_ht.get(key2, 0.0), r["op"]["bytes"] / r["time_s"] / 1e9)
        lines.append(
            "host transfer max GB/s: "
            + ", ".join(
                f"{d} {'pinned' if p else 'pageable'} {g:.1f}"
                for (d, p), g in sorted(best_ht.items())
            )
        )
    if unavailable:
        lines.append(f"unavailable: {len(unavailable)}")
        for u in unavailable[:15]:
            lines.append(f"  {u['family']}: {u['what']}: {u['reason'][:150]}")
    return "\n".join(lines)


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer points (under a minute)")
    ap.add_argument("--families", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args(argv)

    runner, registry, device_info = _import_runners()
    families = {f.strip() for f in args.families.split(",") if f.strip()} or None
    known = set(registry.names("cupy")) | set(registry.names("torch"))
    if families and families - known:
        ap.error(f"unknown families {sorted(families - known)}; known: {sorted(known)}")

    t0 = time.perf_counter()
    try:
        info = device_info.device_info()
    except Exception as exc:  # DeviceError: no CuPy or no GPU; one line, exit 2
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"device: {info['device_name']} (cc {info['compute_capability']}, {info['sm_count']} SMs, "
        f"L2 {info['l2_bytes'] >> 20} MiB), driver {info['driver_version']}, "
        f"CUDA runtime {info['cuda_runtime_version']}, cupy {info['cupy_version']}, "
        f"torch {info['torch_version']}",
        flush=True,
    )
    records, unavailable = runner.run("cupy", families, args.quick, TextProgress("cupy"))
    t_cupy = time.perf_counter() - t0
    trecs, tunav = runner.run("torch", families, args.quick, TextProgress("torch"))
    records += trecs
    unavailable += tunav
    wall = time.perf_counter() - t0
    data = {
        "device": info,
        "records": records,
        "unavailable": unavailable,
        "run": {
            "mode": "quick" if args.quick else "full",
            "families": sorted(families) if families else None,
            "wall_s": round(wall, 2),
            "cupy_wall_s": round(t_cupy, 2),
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    }
    write_json_atomic(Path(args.out), data)
    print(summary(records, unavailable))
    print(
        f"{len(records)} records, {len(unavailable)} unavailable, wall {wall:.1f} s "
        f"(cupy {t_cupy:.1f} s) -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
