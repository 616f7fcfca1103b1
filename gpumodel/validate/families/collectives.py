"""Measure NCCL collectives on the local GPUs, fit alpha and bus bandwidth, score the model.

One process per GPU through PyTorch's distributed package (NCCL backend, ``mp.spawn``, TCP
rendezvous on 127.0.0.1). Timing follows nccl-tests (``src/common.cu``): warm-up calls, then
back-to-back calls between two CUDA events, time per call = interval / calls, the slowest rank
counts (max over ranks); a few such batches give a median and a spread. Sizes are nccl-tests
sizes (``bytes`` of ``gpumodel.ops.collectives``): the buffer for all-reduce, the gathered output
for all-gather, the input for reduce-scatter.

Records: ``{"family": "collective", "op": {"op": "all_reduce", "bytes": S, "gpus": n,
"dtype": "bf16"}, "time_s": t, "repeats": calls, "spread": s, "meta": {"algbw": ..., "busbw":
...}}``; ``op`` is a batch row of gpumodel.ops.

NVLink multicast (NVLS) stays off in every process started here: it can take a shared host's
GPUs out of service. ``SAFE_ENV`` is set when this module is imported and again in each spawned
worker before anything CUDA is touched.
"""

from __future__ import annotations

import os

SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
os.environ.update(SAFE_ENV)

import json  # noqa: E402
import math  # noqa: E402
import socket  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterable, Sequence  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from gpumodel.calibration import CalibrationParams, CollectiveParams  # noqa: E402
from gpumodel.errors import GpumodelError, SpecError  # noqa: E402
from gpumodel.model import comm  # noqa: E402
from gpumodel.specs import GPUSpec  # noqa: E402

MEASURED = ("all_reduce", "all_gather", "reduce_scatter")
DTYPE = "bf16"
ELEMENT_BYTES = 2
MIN_BYTES = 1024
MAX_BYTES = 4 * 2**30
# targets (issue 5): calibrated median <= 10 % at every size; datasheet median <= 25 % >= 64 MB
CALIBRATED_TOLERANCE_PCT = 10.0
SPEC_TOLERANCE_PCT = 25.0
SPEC_MIN_BYTES = 64 * 2**20

Progress = Callable[[str], None]


# ---------------------------------------------------------------------------------------------
# pure helpers


def message_sizes(
    min_bytes: int = MIN_BYTES, max_bytes: int = MAX_BYTES, step: int = 2
) -> list[int]:
    """min_bytes, min_bytes*step, ... up to max_bytes (nccl-tests ``-b -e -f``)."""
    if min_bytes <= 0 or max_bytes < min_bytes or step < 2:
        raise SpecError("need 0 < min_bytes <= max_bytes and step >= 2")
    out, s = [], int(min_bytes)
    while s <= max_bytes:
        out.append(s)
        s *= step
    return out


def element_count(collective: str, nbytes: int, world: int) -> int:
    """Elements of the nccl-tests-size buffer, a multiple of ``world`` where it is split."""
    count = max(1, nbytes // ELEMENT_BYTES)
    if collective in ("all_gather", "reduce_scatter"):
        count = max(world, (count // world) * world)
    return count


def iterations(estimate_s: float, target_s: float = 0.03, lo: int = 3, hi: int = 200) -> int:
    """Calls per timed batch so that a batch lasts about ``target_s`` (fewer at large sizes)."""
    if not math.isfinite(estimate_s) or estimate_s <= 0:
        return hi
    return int(min(hi, max(lo, math.ceil(target_s / estimate_s))))


def make_record(collective: str, nbytes: int, world: int, time_s: float, calls: int,
                spread: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """One measurement in the validation record format, with nccl-tests algbw and busbw."""
    alg = nbytes / time_s if time_s > 0 else math.inf
    return {
        "family": "collective",
        "op": {"op": collective, "bytes": int(nbytes), "gpus": int(world), "dtype": DTYPE},
        "time_s": float(time_s),
        "repeats": int(calls),
        "spread": float(spread),
        "meta": {"algbw": alg, "busbw": alg * comm.bus_factor(collective, world), **(extra or {})},
    }


def _key(record: dict[str, Any]) -> str:
    return f"{record['op']['op']}@{record['op']['gpus']}"


def fit_alpha_busbw(
    sizes: Sequence[float], times: Sequence[float], factor: float, iters: int = 60
) -> tuple[float, float]:
    """Fit ``t = alpha + S * factor / busbw`` to measured times; returns (alpha_s, busbw).

    Robust and relative: iteratively reweighted least squares for the L1 norm of the relative
    residuals (t_pred - t) / t, so the fitted line follows most sizes closely and lets the few
    mid-size points where NCCL switches protocol or channel count be off, instead of bending the
    latency floor and the bandwidth plateau to split the difference. Starts from the L2 fit.
    """
    x = np.asarray(sizes, dtype=float) * factor
    t = np.asarray(times, dtype=float)
    if len(t) == 0 or np.any(t <= 0):
        raise SpecError("need positive times")
    if len(t) == 1 or np.ptp(x) == 0:
        return float(np.min(t)), math.inf

    def solve(w: np.ndarray) -> tuple[float, float]:
        design = np.stack([w / t, w * x / t], axis=1)
        (a, c), *_ = np.linalg.lstsq(design, w, rcond=None)
        if a < 0:  # no floor: fit through the origin
            a = 0.0
            c = float(np.sum(w * w * x / t) / np.sum((w * x / t) ** 2))
        if c <= 0:  # no slope: a pure floor
            return float(np.median(t)), 0.0
        return float(a), float(c)

    w = np.ones_like(t)
    a, c = solve(w)
    for _ in range(iters):
        r = np.abs((a + c * x - t) / t)
        w_new = 1.0 / np.sqrt(np.maximum(r, 1e-4))  # sqrt: the weights enter squared
        a2, c2 = solve(w_new)
        if abs(a2 - a) <= 1e-12 + 1e-9 * a and abs(c2 - c) <= 1e-9 * max(c, 1e-30):
            a, c = a2, c2
            break
        a, c = a2, c2
    return a, (1.0 / c if c > 0 else math.inf)


def smooth_time(sizes, alpha: float, busbw: float, factor: float, k: float):
    """``(alpha^k + (S factor / busbw)^k)^(1/k)``: k = 1 is the alpha-beta line; k < 1 lifts
    the middle sizes, where NCCL runs fewer channels and smaller protocols than at the plateau."""
    x = np.asarray(sizes, dtype=float) * factor / busbw
    big = np.maximum(np.maximum(x, alpha), 1e-300)
    return big * ((alpha / big) ** k + (x / big) ** k) ** (1.0 / k)


def fit_smooth(
    sizes: Sequence[float], times: Sequence[float], factor: float
) -> tuple[float, float, float]:
    """Diagnostic: (alpha, busbw, k) of ``smooth_time`` minimising the mean |relative error|,
    by grid search around the alpha-beta fit. Not stored in calibrations (CollectiveParams has
    no field for k); the report shows whether it would help."""
    a0, b0 = fit_alpha_busbw(sizes, times, factor)
    t = np.asarray(times, dtype=float)
    best = (math.inf, a0, b0, 1.0)
    if not math.isfinite(b0) or a0 <= 0:
        return a0, b0, 1.0
    for k in np.arange(0.4, 1.01, 0.05):
        for fa in np.geomspace(0.25, 2.0, 25):
            for fb in np.geomspace(0.7, 2.5, 25):
                pred = smooth_time(sizes, a0 * fa, b0 * fb, factor, float(k))
                err = float(np.mean(np.abs(pred - t) / t))
                if err < best[0]:
                    best = (err, a0 * fa, b0 * fb, float(k))
    return best[1], best[2], best[3]


def link_bandwidth(gpu: GPUSpec) -> float | None:
    """Per-direction bandwidth of the GPU's own scale-up link (NVLink), else PCIe."""
    ic = gpu.interconnect
    if ic is None:
        return None
    if ic.nvlink is not None:
        return ic.nvlink.per_direction_bytes_per_s
    if ic.infinity_fabric_bandwidth_bytes_per_s:
        return ic.infinity_fabric_bandwidth_bytes_per_s / 2
    return ic.pcie.per_direction_bytes_per_s


def fit_collectives(
    records: Iterable[dict[str, Any]], gpu: GPUSpec | None = None
) -> dict[str, CollectiveParams]:
    """Alpha (small-message floor) and bus bandwidth (large-message plateau) per collective and
    GPU count, keyed ``"all_reduce@2"`` as ``CalibrationParams.collectives`` expects. With
    ``gpu``, also the link efficiency: busbw / the GPU's per-direction NVLink bandwidth."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("family") == "collective" and r["op"]["gpus"] > 1 and r["time_s"] > 0:
            groups.setdefault(_key(r), []).append(r)
    link = link_bandwidth(gpu) if gpu is not None else None
    out: dict[str, CollectiveParams] = {}
    for key, rows in sorted(groups.items()):
        name, n = rows[0]["op"]["op"], rows[0]["op"]["gpus"]
        sizes = [float(r["op"]["bytes"]) for r in rows]
        times = [float(r["time_s"]) for r in rows]
        alpha, bus = fit_alpha_busbw(sizes, times, comm.bus_factor(name, n))
        if not math.isfinite(bus):
            continue
        out[key] = CollectiveParams(
            gpus=n, alpha_s=alpha, bus_bandwidth_bytes_per_s=bus,
            link_efficiency=bus / link if link else None,
        )  # fmt: skip
    return out


def _as_calibration(params: dict[str, CollectiveParams] | None, label: str) -> Any:
    if params is None:
        return None
    return SimpleNamespace(parameters=CalibrationParams(collectives=params), label=label)


def predict_records(
    records: Iterable[dict[str, Any]], params: dict[str, CollectiveParams] | None, gpu: GPUSpec
) -> list[float]:
    """Predicted time of each record's op: from the datasheet (``params`` None) or calibrated."""
    from gpumodel.ops.collectives import collective_op

    cal = _as_calibration(params, "fitted collectives")
    out = []
    for r in records:
        op = collective_op(r["op"]["op"], **{k: v for k, v in r["op"].items() if k != "op"})
        out.append(op.predict_on(gpu, cal).time_s)
    return out


def _stats(pred: Sequence[float], meas: Sequence[float]) -> dict[str, float]:
    p = np.asarray(pred, dtype=float)
    m = np.asarray(meas, dtype=float)
    rel = (p - m) / m * 100.0
    if len(m) == 0:
        return {"n": 0, "median_abs_pct": math.nan, "p90_abs_pct": math.nan, "bias_pct": math.nan}
    return {
        "n": len(m),
        "median_abs_pct": float(np.median(np.abs(rel))),
        "p90_abs_pct": float(np.percentile(np.abs(rel), 90)),
        "bias_pct": float(np.median(rel)),
    }


def collective_errors(
    records: Iterable[dict[str, Any]],
    params: dict[str, CollectiveParams] | None,
    gpu: GPUSpec,
    min_bytes: float = 0.0,
) -> dict[str, dict[str, float]]:
    """|pred - meas| / meas per collective (keyed "all_reduce@2"): n, median, p90 (percent) and
    the signed median bias, for the datasheet model (``params`` None) or a calibration."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("family") == "collective" and r["op"]["bytes"] >= min_bytes:
            groups.setdefault(_key(r), []).append(r)
    return {
        key: _stats(predict_records(rows, params, gpu), [r["time_s"] for r in rows])
        for key, rows in sorted(groups.items())
    }


def split_alternate(records: Sequence[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """(fit, held out): every other size of each collective, in size order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(_key(r), []).append(r)
    fit: list[dict] = []
    held: list[dict] = []
    for rows in groups.values():
        rows = sorted(rows, key=lambda r: r["op"]["bytes"])
        fit += rows[0::2]
        held += rows[1::2]
    return fit, held


def evaluate(records: Sequence[dict[str, Any]], gpu: GPUSpec) -> dict[str, Any]:
    """Fit on every other size, score on the rest; datasheet error >= 64 MiB; final fit on all."""
    fit_rows, held = split_alternate(records)
    half = fit_collectives(fit_rows, gpu)
    final = fit_collectives(records, gpu)
    cal_held = collective_errors(held, half, gpu)
    cal_all = collective_errors(records, final, gpu)
    spec_large = collective_errors(records, None, gpu, min_bytes=SPEC_MIN_BYTES)
    spec_all = collective_errors(records, None, gpu)
    smooth = _smooth_diagnostic(fit_rows, held)
    verdict = {}
    for key in final:
        c = cal_held.get(key, {}).get("median_abs_pct", math.nan)
        s = spec_large.get(key, {}).get("median_abs_pct", math.nan)
        verdict[key] = {
            "calibrated_ok": bool(c <= CALIBRATED_TOLERANCE_PCT),
            "datasheet_ok": bool(s <= SPEC_TOLERANCE_PCT) if not math.isnan(s) else None,
        }
    passed = all(
        v["calibrated_ok"] and v["datasheet_ok"] is not False for v in verdict.values()
    ) and bool(verdict)
    return {
        "params": final, "params_half": half, "calibrated_held_out": cal_held,
        "calibrated_in_sample": cal_all, "datasheet_large": spec_large, "datasheet_all": spec_all,
        "verdict": verdict, "passed": passed, "smooth": smooth,
    }  # fmt: skip


def _smooth_diagnostic(fit_rows: list[dict], held: list[dict]) -> dict[str, dict[str, float]]:
    """Held-out error of the 3-parameter ``smooth_time`` curve, per collective (diagnostic)."""
    out = {}
    groups: dict[str, tuple[list[dict], list[dict]]] = {}
    for r in fit_rows:
        groups.setdefault(_key(r), ([], []))[0].append(r)
    for r in held:
        groups.setdefault(_key(r), ([], []))[1].append(r)
    for key, (fr, hr) in sorted(groups.items()):
        if len(fr) < 3 or not hr:
            continue
        name, n = fr[0]["op"]["op"], fr[0]["op"]["gpus"]
        f = comm.bus_factor(name, n)
        a, b, k = fit_smooth([r["op"]["bytes"] for r in fr], [r["time_s"] for r in fr], f)
        pred = smooth_time([r["op"]["bytes"] for r in hr], a, b, f, k)
        out[key] = {"alpha_s": float(a), "busbw": float(b), "k": float(k),
                    **_stats(list(pred), [r["time_s"] for r in hr])}  # fmt: skip
    return out


# ---------------------------------------------------------------------------------------------
# outputs


def interconnect(spec: GPUSpec, world: int) -> str:
    """The in-node link kind ``world`` ranks of ``spec`` use (the system calibration's key)."""
    from gpumodel.ops.collectives import AllReduce

    return AllReduce(bytes=1, gpus=max(int(world), 2)).topology(spec).intra.kind


def calibration_fragment(
    result: dict[str, Any], info: dict[str, Any], spec: GPUSpec | None = None
) -> str:
    """A system calibration (GPU, GPU count, link) holding parameters.collectives and the
    collective errors: found by predictions where ``gpumodel.calibration`` looks, and mergeable
    into a device calibration file."""
    from gpumodel._io import dump_yaml
    from gpumodel.calibration import END_MARKER
    from gpumodel.specs import get_gpu

    gpu = spec if spec is not None else get_gpu(info["gpu_id"])

    params = {k: v.model_dump() for k, v in result["params"].items()}
    errors = {}
    for key, st in result["calibrated_held_out"].items():
        spec = result["datasheet_large"].get(key, {})
        errors[f"collective:{key}"] = {
            "n": st["n"], "median_abs_pct": st["median_abs_pct"], "p90_abs_pct": st["p90_abs_pct"],
            "bias_pct": st["bias_pct"],
            "datasheet_median_abs_pct": spec.get("median_abs_pct"),
            "tolerance_pct": CALIBRATED_TOLERANCE_PCT,
        }  # fmt: skip
    head = (
        "# gpumodel validate --collectives: fitted NCCL collectives (merge into a calibration\n"
        "# file: `parameters.collectives` and `errors`). Errors: calibrated = held-out sizes\n"
        "# (fit on every other size); datasheet_median_abs_pct = spec-only model, >= 64 MiB.\n"
        f"# device: {info.get('device_name')} x {info.get('world')}, torch "
        f"{info.get('torch')}, NCCL {info.get('nccl')}\n"
    )
    world = int(info.get("world") or 2)
    created = info.get("measured_on") or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    env = {k: str(info[k]) for k in ("torch", "nccl", "cuda", "driver") if info.get(k)}
    env.update({k: str(v) for k, v in (info.get("env") or {}).items()})
    body = {
        "gpu_id": gpu.id,
        "device_name": str(info.get("device_name")),
        "created": created,
        "backend": "torch",
        "system": {"gpus": world, "interconnect": interconnect(gpu, world)},
        "environment": env,
        "parameters": {"collectives": params},
        "errors": errors,
    }
    return head + dump_yaml(body) + END_MARKER


def markdown_report(records: Sequence[dict[str, Any]], result: dict[str, Any],
                    info: dict[str, Any], gpu: GPUSpec) -> str:  # fmt: skip
    """The report: environment, fitted parameters, errors against targets, every measurement."""
    from gpumodel.units import format_quantity as fq
    from gpumodel.units import format_time as ft

    pct = lambda v: "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}%"  # noqa: E731
    lines = [
        "# NCCL collectives: measured vs model",
        "",
        f"Device: {info.get('device_name')} x {info.get('world')} (spec `{gpu.id}`), torch "
        f"{info.get('torch')}, NCCL {info.get('nccl')}, CUDA {info.get('cuda')}. "
        f"Environment: {', '.join(f'{k}={v}' for k, v in SAFE_ENV.items())}.",
        f"Sizes {fq(info.get('min_bytes', 0), 'B', binary=True)} to "
        f"{fq(info.get('max_bytes', 0), 'B', binary=True)}, x{info.get('step')} steps; "
        "time per call = max over ranks of (CUDA-event interval of back-to-back calls / calls), "
        "median of batches (nccl-tests style). Measured in "
        f"{info.get('elapsed_s', 0):.0f} s.",
        "",
    ]
    if info.get("refitted_from"):
        lines += [
            f"Re-fitted on {info['refitted_on']} from the saved `{info['refitted_from']}` by this "
            "version of the model (no new measurements).",
            "",
        ]
    lines += [
        "## Fitted parameters (t = alpha + S x bus factor / busbw)",
        "",
        "| collective | alpha | busbw | link efficiency (of NVLink per direction) |",
        "|---|---|---|---|",
    ]
    for key, p in result["params"].items():
        eff = f"{p.link_efficiency:.3f}" if p.link_efficiency else "-"
        lines.append(
            f"| {key} | {ft(p.alpha_s)} | {fq(p.bus_bandwidth_bytes_per_s, 'B/s')} | {eff} |"
        )
    lines += [
        "",
        f"## Error |pred - meas| / meas (targets: calibrated median <= "
        f"{CALIBRATED_TOLERANCE_PCT:g}% over all sizes, held out; datasheet median <= "
        f"{SPEC_TOLERANCE_PCT:g}% at >= 64 MiB)",
        "",
        "| collective | calibrated held-out median / p90 / bias | calibrated in-sample median "
        "| datasheet >= 64 MiB median / bias | datasheet all sizes median | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for key in result["params"]:
        c = result["calibrated_held_out"].get(key, {})
        ci = result["calibrated_in_sample"].get(key, {})
        s = result["datasheet_large"].get(key, {})
        sa = result["datasheet_all"].get(key, {})
        v = result["verdict"][key]
        ok = "PASS" if v["calibrated_ok"] and v["datasheet_ok"] is not False else "FAIL"
        lines.append(
            f"| {key} | {pct(c.get('median_abs_pct'))} / {pct(c.get('p90_abs_pct'))} / "
            f"{pct(c.get('bias_pct'))} | {pct(ci.get('median_abs_pct'))} | "
            f"{pct(s.get('median_abs_pct'))} / {pct(s.get('bias_pct'))} | "
            f"{pct(sa.get('median_abs_pct'))} | {ok} |"
        )
    lines += ["", f"Overall: {'PASS' if result['passed'] else 'FAIL'}", ""]
    if result.get("smooth"):
        lines += [
            "Diagnostic, not used by predictions: a smooth transition "
            "t = (alpha^k + (S f / busbw)^k)^(1/k) fitted the same way (k = 1 is the line):",
            "",
            "| collective | alpha | busbw | k | held-out median / p90 |",
            "|---|---|---|---|---|",
        ]
        for key, d in result["smooth"].items():
            lines.append(f"| {key} | {ft(d['alpha_s'])} | {fq(d['busbw'], 'B/s')} | "
                         f"{d['k']:.2f} | {pct(d['median_abs_pct'])} / {pct(d['p90_abs_pct'])} |")  # fmt: skip
        lines.append("")
    lines += ["## Measurements", "",
              "| collective | size | time | algbw | busbw | datasheet pred | calibrated pred | spread |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    spec_pred = predict_records(records, None, gpu)
    cal_pred = predict_records(records, result["params"], gpu)
    for r, sp, cp in zip(records, spec_pred, cal_pred):
        m = r["meta"]
        lines.append(
            f"| {_key(r)} | {fq(r['op']['bytes'], 'B', binary=True)} | {ft(r['time_s'])} | "
            f"{fq(m['algbw'], 'B/s')} | {fq(m['busbw'], 'B/s')} | {ft(sp)} | {ft(cp)} | "
            f"{100 * r['spread']:.1f}% |"
        )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# measuring (PyTorch + NCCL, one process per GPU)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world: int, port: int, plan: dict[str, Any], out_path: str) -> None:
    """One rank: init NCCL, run every (collective, size), rank 0 writes the records."""
    os.environ.update(SAFE_ENV)  # before anything touches CUDA or NCCL in this process
    import warnings
    from datetime import timedelta

    # torch >= 2.12 renames all_gather_into_tensor / reduce_scatter_tensor; the old names work
    warnings.filterwarnings("ignore", category=FutureWarning)

    import torch
    import torch.distributed as dist

    backend = plan.get("backend", "nccl")
    kwargs: dict[str, Any] = {
        "backend": backend, "init_method": f"tcp://127.0.0.1:{port}", "rank": rank,
        "world_size": world, "timeout": timedelta(seconds=180),
    }  # fmt: skip
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        try:
            dist.init_process_group(**kwargs, device_id=device)
        except TypeError:  # torch < 2.3 has no device_id
            dist.init_process_group(**kwargs)
    else:  # gloo on CPU: exercises this code path in tests, no GPU needed
        device = torch.device("cpu")
        dist.init_process_group(**kwargs)
    records: list[dict[str, Any]] = []
    try:
        for collective in plan["collectives"]:
            for nbytes in plan["sizes"]:
                rec = _measure_one(torch, dist, device, collective, nbytes, world, plan)
                if nbytes >= 256 * 2**20:
                    torch.cuda.empty_cache()  # the buffers died with _measure_one
                if rank == 0:
                    records.append(rec)
                    print(
                        f"{collective:>15} {nbytes:>12d} B  {rec['time_s'] * 1e6:12.2f} us  "
                        f"busbw {rec['meta']['busbw'] / 1e9:8.2f} GB/s  calls {rec['repeats']}",
                        flush=True,
                    )
        if rank == 0:
            Path(out_path).write_text(json.dumps(records), encoding="utf-8")
    finally:
        dist.destroy_process_group()


def _measure_one(torch: Any, dist: Any, device: Any, collective: str, nbytes: int, world: int,
                 plan: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    count = element_count(collective, nbytes, world)
    size = count * ELEMENT_BYTES
    dt = torch.bfloat16 if device.type == "cuda" else torch.float16  # gloo: no bf16 sums
    if collective == "all_reduce":
        buf = torch.zeros(count, dtype=dt, device=device)

        def call() -> None:
            dist.all_reduce(buf)
    elif collective == "all_gather":
        inp = torch.zeros(count // world, dtype=dt, device=device)
        out = torch.empty(count, dtype=dt, device=device)

        def call() -> None:
            dist.all_gather_into_tensor(out, inp)
    elif collective == "reduce_scatter":
        inp = torch.zeros(count, dtype=dt, device=device)
        out = torch.empty(count // world, dtype=dt, device=device)

        def call() -> None:
            dist.reduce_scatter_tensor(out, inp)
    else:
        raise SpecError(f"not measured: {collective}")

    def slowest(values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [float(v) for v in t.tolist()]

    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(plan["warmup"]):
        call()
    sync()
    dist.barrier()
    sync()
    t0 = time.perf_counter()
    call()
    sync()
    estimate = slowest([time.perf_counter() - t0])[0]
    calls = iterations(estimate, plan["target_s"], plan["min_calls"], plan["max_calls"])
    for _ in range(min(calls, plan["warmup"])):
        call()
    if cuda:
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
    batch_times, wall = [], []
    for _ in range(plan["batches"]):
        dist.barrier()
        sync()
        w0 = time.perf_counter()
        if cuda:
            start.record()
        for _ in range(calls):
            call()
        if cuda:
            stop.record()
            stop.synchronize()
        w = (time.perf_counter() - w0) / calls
        wall.append(w)
        batch_times.append(start.elapsed_time(stop) / 1e3 / calls if cuda else w)
    per_batch = slowest(batch_times)
    wall = slowest(wall)
    med = float(np.median(per_batch))
    spread = (max(per_batch) - min(per_batch)) / med if med > 0 else 0.0
    return make_record(collective, size, world, med, calls, spread,
                       {"batches_s": per_batch, "wall_per_call_s": float(np.median(wall)),
                        "requested_bytes": int(nbytes)})  # fmt: skip


def torch_environment() -> dict[str, Any]:
    """GPU count and names, torch/NCCL/CUDA versions; {'gpus': 0, 'reason': ...} without them."""
    try:
        import torch
    except Exception as exc:  # ImportError or a broken CUDA build
        return {"gpus": 0, "reason": f"PyTorch is not importable ({exc.__class__.__name__})"}
    if not torch.cuda.is_available():
        return {"gpus": 0, "reason": "PyTorch sees no CUDA GPU", "torch": torch.__version__}
    if not torch.distributed.is_available() or not torch.distributed.is_nccl_available():
        return {"gpus": 0, "reason": "this PyTorch build has no NCCL backend"}
    n = torch.cuda.device_count()
    try:
        v = torch.cuda.nccl.version()
        nccl = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception:
        nccl = "unknown"
    return {
        "gpus": n,
        "device_name": torch.cuda.get_device_name(0),
        "device_names": [torch.cuda.get_device_name(i) for i in range(n)],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
    }


def measure(
    sizes: Sequence[int],
    collectives: Sequence[str] = MEASURED,
    world: int | None = None,
    *,
    target_s: float = 0.03,
    batches: int = 3,
    warmup: int = 5,
    min_calls: int = 3,
    max_calls: int = 200,
    backend: str = "nccl",
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Measure ``collectives`` at ``sizes`` over ``world`` local GPUs (default: all of them).

    Returns (records, info). Fewer than 2 GPUs: no records, ``info["reason"]`` says why.
    ``backend="gloo"`` runs ``world`` CPU processes instead (to test this code without GPUs).
    """
    if backend == "gloo":
        import torch

        info = {"gpus": world or 2, "device_name": "cpu (gloo)", "torch": torch.__version__}
    else:
        info = torch_environment()
    n = info.get("gpus", 0)
    world = n if world is None else world
    if n < 2 or world < 2:
        info.setdefault("reason", f"collectives need >= 2 GPUs; found {n}")
        info["world"] = min(world, n)
        return [], info
    if world > n:
        raise SpecError(f"asked for {world} GPUs, found {n}")
    import torch.multiprocessing as mp

    plan = {"sizes": [int(s) for s in sizes], "collectives": list(collectives),
            "target_s": target_s, "batches": batches, "warmup": warmup,
            "min_calls": min_calls, "max_calls": max_calls, "backend": backend}  # fmt: skip
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpumodel-nccl-") as tmp:
        out = Path(tmp) / "records.json"
        mp.spawn(_worker, args=(world, _free_port(), plan, str(out)), nprocs=world, join=True)
        records = json.loads(out.read_text(encoding="utf-8"))
    info.update({"world": world, "elapsed_s": time.perf_counter() - t0,
                 "measured_on": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})  # fmt: skip
    return records, info


def gpu_spec_for(name: str) -> GPUSpec:
    """The spec matching a device name ('NVIDIA H200' -> h200-sxm)."""
    try:
        from gpumodel.validate.pipeline import gpu_for_device_name

        return gpu_for_device_name(name)
    except ImportError:
        from gpumodel.specs import get_gpu

        low = name.lower().replace("nvidia", "").strip()
        return get_gpu(low.split()[0])


def run_collectives_validation(
    out_dir: str | Path,
    *,
    gpu: str | GPUSpec | None = None,
    min_bytes: int = MIN_BYTES,
    max_bytes: int = MAX_BYTES,
    step: int = 2,
    world: int | None = None,
    calibration_file: str | Path | None = None,
    progress: Progress | None = print,
    backend: str = "nccl",
    **measure_kwargs: Any,
) -> dict[str, Any]:
    """Measure, fit, score and write ``collectives_measurements.json``,
    ``collectives_calibration.yaml`` and ``collectives_report.md`` into ``out_dir``.

    With ``calibration_file`` (an existing calibration YAML), its ``parameters.collectives`` and
    the ``collective:*`` errors are replaced by the new fit. ``backend="gloo"`` measures CPU
    processes instead of GPUs (tests). Returns a summary dict.
    """
    from gpumodel.calibration import atomic_write_text
    from gpumodel.specs import get_gpu

    out = Path(out_dir)
    from gpumodel._io import make_dir

    make_dir(out)
    sizes = message_sizes(min_bytes, max_bytes, step)
    records, info = measure(sizes, MEASURED, world, backend=backend, **measure_kwargs)
    info.update({"min_bytes": min_bytes, "max_bytes": max_bytes, "step": step,
                 "env": dict(SAFE_ENV)})  # fmt: skip
    meas_path = out / "collectives_measurements.json"
    if not records:
        reason = info.get("reason", "no measurements")
        atomic_write_text(meas_path, json.dumps({"info": info, "records": []}, indent=1) + "\n")
        if progress:
            progress(f"collectives: {reason}; nothing measured (wrote {meas_path})")
        return {"measured": 0, "reason": reason, "written": [str(meas_path)], "passed": None}
    atomic_write_text(meas_path, json.dumps({"info": info, "records": records}, indent=1) + "\n")
    try:
        spec = get_gpu(gpu) if gpu is not None else gpu_spec_for(str(info.get("device_name")))
    except GpumodelError as exc:
        raise GpumodelError(
            f"{exc}; the measurements are saved in {meas_path}: re-fit them with "
            f"`validation/experiments/collectives_device.py --from {meas_path} --gpu ID --out DIR`"
        ) from None
    info["gpu_id"] = spec.id
    return _fit_and_write(records, info, spec, out, [str(meas_path)], calibration_file, progress)


def refit(
    measurements: str | Path,
    out_dir: str | Path,
    *,
    gpu: str | GPUSpec | None = None,
    calibration_file: str | Path | None = None,
    progress: Progress | None = print,
) -> dict[str, Any]:
    """Fit, score and write the outputs again from a saved ``collectives_measurements.json``
    (no GPU needed)."""
    from gpumodel._io import read_json
    from gpumodel.specs import get_gpu

    data = read_json(measurements, "collectives measurements")
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise GpumodelError(f"{measurements}: expected a JSON object with a 'records' list")
    records, info = data["records"], data.get("info", {})
    if not records:
        return {"measured": 0, "reason": info.get("reason", "no records"), "passed": None}
    info = {**info, "refitted_from": Path(measurements).name,
            "refitted_on": datetime.now(timezone.utc).strftime("%Y-%m-%d")}  # fmt: skip
    name = gpu if gpu is not None else info.get("gpu_id")
    spec = get_gpu(name) if name else gpu_spec_for(str(info.get("device_name")))
    out = Path(out_dir)
    from gpumodel._io import make_dir

    make_dir(out)
    return _fit_and_write(records, info, spec, out, [], calibration_file, progress)


def _fit_and_write(
    records: list[dict[str, Any]],
    info: dict[str, Any],
    spec: GPUSpec,
    out: Path,
    written: list[str],
    calibration_file: str | Path | None,
    progress: Progress | None,
) -> dict[str, Any]:
    from gpumodel.calibration import atomic_write_text

    result = evaluate(records, spec)
    info = {**info, "gpu_id": spec.id}
    frag = out / "collectives_calibration.yaml"
    atomic_write_text(frag, calibration_fragment(result, info, spec))
    report = out / "collectives_report.md"
    atomic_write_text(report, markdown_report(records, result, info, spec))
    written = [*written, str(frag), str(report)]
    if calibration_file is not None:
        written.append(str(merge_into_calibration(calibration_file, result)))
    summary = {
        "measured": len(records),
        "gpu": spec.id,
        "world": info.get("world"),
        "params": {k: v.model_dump() for k, v in result["params"].items()},
        "calibrated_held_out": result["calibrated_held_out"],
        "datasheet_large": result["datasheet_large"],
        "passed": result["passed"],
        "written": written,
    }
    if progress:
        for key, st in result["calibrated_held_out"].items():
            sp = result["datasheet_large"].get(key, {}).get("median_abs_pct", math.nan)
            progress(f"{key}: calibrated held-out median {st['median_abs_pct']:.1f}%, "
                     f"datasheet >= 64 MiB median {sp:.1f}%")  # fmt: skip
        progress(f"collectives: {'PASS' if result['passed'] else 'FAIL'}; wrote "
                 + ", ".join(written))  # fmt: skip
    return summary


def merge_into_calibration(path: str | Path, result: dict[str, Any]) -> Path:
    """Replace ``parameters.collectives`` and the ``collective:*`` errors of a calibration file;
    everything else it holds (its raw measurements included) is kept."""
    from gpumodel.calibration import FamilyError, read_calibration_file

    cal = read_calibration_file(path, measurements=True)
    errors = {k: v for k, v in cal.errors.items() if not k.startswith("collective:")}
    for key, st in result["calibrated_held_out"].items():
        spec = result["datasheet_large"].get(key, {})
        errors[f"collective:{key}"] = FamilyError(
            n=st["n"], median_abs_pct=st["median_abs_pct"], p90_abs_pct=st["p90_abs_pct"],
            bias_pct=st["bias_pct"], datasheet_median_abs_pct=spec.get("median_abs_pct"),
            tolerance_pct=CALIBRATED_TOLERANCE_PCT,
        )  # fmt: skip
    # validated (model_copy would store the fitted values unchecked)
    params = type(cal.parameters).model_validate(
        {**cal.parameters.model_dump(), "collectives": dict(result["params"])}
    )
    return cal.model_copy(update={"parameters": params, "errors": errors}).save(
        path, replaces_input=True)  # fmt: skip


__all__ = [
    "MEASURED",
    "SAFE_ENV",
    "calibration_fragment",
    "collective_errors",
    "evaluate",
    "fit_alpha_busbw",
    "fit_collectives",
    "make_record",
    "markdown_report",
    "measure",
    "merge_into_calibration",
    "message_sizes",
    "predict_records",
    "refit",
    "run_collectives_validation",
]
