"""validate = measure (a backend) -> calibrate (fit half, score the other half) -> report."""

from __future__ import annotations

import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpumodel.calibrate import calibrate, failures
from gpumodel.calibration import Calibration, atomic_write_text
from gpumodel.errors import DeviceError, GpumodelError, SpecError
from gpumodel.specs import GPUSpec, get_gpu, list_gpus
from gpumodel.validate.tasks import Progress


def gpu_for_device_name(name: str) -> GPUSpec:
    """Match a device name as the driver reports it ('NVIDIA H100 80GB HBM3') to a spec."""
    low = name.lower()
    candidates = []
    for spec in list_gpus():
        if spec.vendor == "cpu":
            continue
        keys = [spec.id, *spec.aliases]
        for key in keys:
            bare = key.replace("-", " ")
            if bare in low or key in low:
                candidates.append((len(key), spec))
    if "h100" in low and ("hbm3" in low or "sxm" in low):
        return get_gpu("h100-sxm")
    if "h100" in low and "nvl" in low:
        return get_gpu("h100-nvl")
    if "h100" in low and "pcie" in low:
        return get_gpu("h100-pcie")
    if not candidates:
        raise GpumodelError(f"no spec matches device '{name}': pass --gpu ID (see `specs list`)")
    return max(candidates, key=lambda c: c[0])[1]


def measure(
    backend: str, quick: bool, families: set[str] | None, progress: Progress | None
) -> tuple[dict[str, Any], list[dict], list[dict]]:
    """Run the backend's engines over the registered families: (device info, records,
    unavailable)."""
    from gpumodel.validate import runner

    seconds: dict[str, float] = {}
    if backend == "numpy":
        from gpumodel.validate.numpy_engine import device_info as numpy_device

        records, unavailable = runner.run("numpy", families, quick, progress, seconds)
        return {**numpy_device(), **_measuring_seconds(seconds)}, records, unavailable
    if backend != "cupy":
        raise GpumodelError(f"unknown backend '{backend}'; use cupy or numpy")
    from gpumodel.validate.device_info import device_info

    info = device_info()  # raises DeviceError with install advice when no GPU/CuPy
    records, unavailable = runner.run("cupy", families, quick, progress, seconds)
    more, more_unavailable = runner.run("torch", families, quick, progress, seconds)
    info = {**info, **_measuring_seconds(seconds)}
    return info, records + more, unavailable + more_unavailable


def _measuring_seconds(seconds: dict[str, float]) -> dict[str, str]:
    """The run's wall seconds per family, for the calibration's environment: the total and the
    families, slowest first ('conv2d 34.1, attention 33.0, ...')."""
    ranked = sorted(seconds.items(), key=lambda kv: -kv[1])
    return {"seconds_measuring": f"{sum(seconds.values()):.1f}",
            "seconds_by_family": ", ".join(f"{k} {v:.1f}" for k, v in ranked)}  # fmt: skip


def run_seconds(env: dict[str, str]) -> dict[str, Any]:
    """Where a validate run's time went, from its calibration's environment: measuring_s,
    by_family_s (slowest first), fitting_s and fit_workers, each where the run recorded it."""
    out: dict[str, Any] = {}
    if "seconds_measuring" in env:
        out["measuring_s"] = float(env["seconds_measuring"])
        pairs = [part.strip().rsplit(" ", 1) for part in env.get("seconds_by_family", "").split(",")]
        out["by_family_s"] = {name: float(s) for name, s in (p for p in pairs if len(p) == 2)}
    if "seconds_fitting" in env:
        out["fitting_s"] = float(env["seconds_fitting"])
        out["fit_workers"] = int(env.get("fit_workers", "1"))
    return out


def timing_line(env: dict[str, str]) -> str | None:
    """'measured in 114.9 s (conv2d 34.1 s, attention 33.0 s, gemm 19.7 s), fitted in 28.3 s
    on 16 workers' from a calibration's environment; None where the run did not record it."""
    t = run_seconds(env)
    if "fitting_s" not in t:
        return None
    head = ""
    if "measuring_s" in t:
        top = [f"{name} {s:.1f} s" for name, s in list(t["by_family_s"].items())[:3]]
        head = f"measured in {t['measuring_s']:.1f} s" + (f" ({', '.join(top)})" if top else "")
        head += ", "
    n = t["fit_workers"]
    return f"{head}fitted in {t['fitting_s']:.1f} s on {n} worker{'s' if n != 1 else ''}"


def build_calibration(
    gpu: GPUSpec, info: dict[str, Any], records: list[dict], unavailable: list[dict], backend: str
) -> tuple[Calibration, list[str]]:
    import time

    from gpumodel.parallel import fit_workers

    began = time.perf_counter()
    params, errors, skipped = calibrate(records, gpu)
    env = {k: str(v) for k, v in info.items() if v is not None and not isinstance(v, (dict, list))}
    env.setdefault("python", platform.python_version())
    env["seconds_fitting"] = f"{time.perf_counter() - began:.1f}"
    env["fit_workers"] = str(fit_workers())
    cal = Calibration(
        gpu_id=gpu.id,
        device_name=str(info.get("device_name") or info.get("name") or gpu.name),
        created=datetime.now(timezone.utc).replace(microsecond=0),
        backend=backend,  # type: ignore[arg-type]
        environment=env,
        parameters=params,
        errors=errors,
        unavailable=[{k: str(v) for k, v in u.items()} for u in unavailable],
        measurements=records,
    )
    return cal, skipped


def run_validate(
    backend: str = "cupy",
    quick: bool = False,
    gpu: str | None = None,
    families: set[str] | None = None,
    progress: Progress | None = None,
    from_measurements: str | None = None,
    workers: str | int | None = None,
) -> tuple[Calibration, list[str], list[str]]:
    """Measure (or load raw measurements), calibrate, and return (calibration, failures, notes).
    ``families`` picks what to measure (names as ``validate --families`` lists them); a re-fit
    from saved measurements fits everything they hold, so the two are not combined.
    ``workers`` (a count or 'auto') fits independent parts in that many processes; None: the
    ``GPUMODEL_FIT_WORKERS`` environment variable, else serial (gpumodel.parallel)."""
    from contextlib import nullcontext

    from gpumodel.parallel import workers_scope

    check_validate_args(backend, families, from_measurements)
    scope = workers_scope(workers) if workers is not None else nullcontext()
    with scope:  # a bad worker count fails here, before any measuring
        return _run_validate(backend, quick, gpu, families, progress, from_measurements)


def _run_validate(
    backend: str, quick: bool, gpu: str | None, families: set[str] | None,
    progress: Progress | None, from_measurements: str | None,
) -> tuple[Calibration, list[str], list[str]]:  # fmt: skip
    info, records, unavailable = load_or_measure(
        backend, quick, from_measurements, families, progress
    )
    if gpu:
        spec = get_gpu(gpu)
    elif backend == "numpy" and not from_measurements:
        spec = get_gpu("cpu-numpy")
    else:
        spec = gpu_for_device_name(str(info.get("device_name") or info.get("name") or ""))
    cal, skipped = build_calibration(spec, info, records, unavailable,
                                     "numpy" if backend == "numpy" else "cupy")  # fmt: skip
    if from_measurements and Path(from_measurements).suffix in (".yaml", ".yml"):
        cal = _keep_unfitted(cal, from_measurements)
    return cal, failures(cal.errors), skipped


#: environment key of a re-fit calibration: what it kept from the file it was re-fitted from
CARRIED_KEY = "kept_from_source"


def _keep_unfitted(cal: Calibration, source_path: str) -> Calibration:
    """``cal``, re-fitted from the measurements a calibration file carries, with every
    parameter that fit left unset taken from that file: what was merged into it after its run
    (the power behaviour and dirty-L2 fraction of ``validate --conditions``, the host copies'
    wall clock, families fitted by the experiments under validation/) is not in those
    measurements, and dropping it silently changed predictions (an H100 4096^3 bf16 GEMM 213
    -> 181 us, its sustained clock gone). What was kept is named in the environment."""
    from gpumodel.calibration import CalibrationParams, read_calibration_file

    source = read_calibration_file(source_path).parameters.model_dump(mode="json")
    merged, kept = carry_unset(cal.parameters.model_dump(mode="json"), source)
    if not kept:
        return cal
    entries: dict[str, int] = {}  # "family_efficiency (12 entries), power, ..."
    for name in kept:
        top, _, below = name.partition(".")
        entries[top] = entries.get(top, 0) + bool(below)
    what = ", ".join(f"{k} ({n} entries)" if n else k for k, n in entries.items())
    env = {**cal.environment, CARRIED_KEY: f"{Path(source_path).name}: {what}"}
    return cal.model_copy(update={"parameters": CalibrationParams.model_validate(merged),
                                  "environment": env})  # fmt: skip


def carry_unset(
    fitted: dict[str, Any], source: dict[str, Any], prefix: str = ""
) -> tuple[dict[str, Any], list[str]]:
    """``fitted`` with each key it lacks or holds None taken from ``source`` (nested dicts key
    by key), and the dotted names of what was taken."""
    out, kept = dict(fitted), []
    for key, value in source.items():
        mine = fitted.get(key)
        if value is None:
            continue
        if mine is None:
            out[key] = value
            kept.append(f"{prefix}{key}")
        elif isinstance(mine, dict) and isinstance(value, dict):
            out[key], below = carry_unset(mine, value, f"{prefix}{key}.")
            kept += below
    return out, kept


BACKENDS = ("cupy", "numpy")


def check_validate_args(
    backend: Any, families: set[str] | None, from_measurements: str | None
) -> None:
    """The boundary of a validate run: a known backend, known family names, no family choice
    on a re-fit (it would be ignored)."""
    from gpumodel._validators import check_choice
    from gpumodel.parallel import check_fit_workers
    from gpumodel.validate.families import names

    check_choice(backend, "backend", BACKENDS)
    check_fit_workers()
    if families is None:
        return
    if from_measurements:
        raise SpecError("--families picks what to measure; a re-fit from saved measurements "
                        "fits all they hold (leave out --families)")  # fmt: skip
    known = tuple(names())
    for name in sorted(families):
        check_choice(name, "family", known)


def load_or_measure(
    backend: str,
    quick: bool,
    from_measurements: str | None,
    families: set[str] | None = None,
    progress: Progress | None = None,
) -> tuple[dict[str, Any], list[dict], list[dict]]:
    """(device info, records, unavailable) from a raw measurements file or a fresh run."""
    if from_measurements:
        data = _read_measurements(from_measurements)
        # the report then says the fit was made from saved measurements, not a fresh run
        device = {**data["device"], "fitted_from_measurements": Path(from_measurements).name}
        return device, data["records"], data.get("unavailable", [])
    return measure(backend, quick, families, progress)


def _read_measurements(path: str) -> dict[str, Any]:
    """A raw measurements JSON, or a calibration YAML (it carries its run's measurements)."""
    if Path(path).suffix in (".yaml", ".yml"):
        from gpumodel.calibration import read_calibration_file

        cal = read_calibration_file(path, measurements=True)
        if not cal.measurements:
            raise GpumodelError(f"{path}: this calibration holds no measurements")
        return {"device": dict(cal.environment), "records": cal.measurements,
                "unavailable": cal.unavailable}  # fmt: skip
    from gpumodel._io import read_json

    data = read_json(path, "measurements")
    if not isinstance(data, dict) or "records" not in data or "device" not in data:
        raise GpumodelError(f"{path}: expected a JSON object with 'device' and 'records'")
    return data


def write_outputs(cal: Calibration, out: Path, report_dir: Path | None, plot: bool,
                  skipped: list[str], fails: list[str]) -> list[Path]:  # fmt: skip
    """Write the calibration (atomic) and, when asked, the markdown report and plot."""
    from gpumodel.validate.report import markdown_report, plot_validation

    written = [cal.save(out, replaces_input=True)]  # a re-run replaces its calibration
    if report_dir is not None:
        from gpumodel._io import make_dir

        make_dir(report_dir, "report directory")
        md = report_dir / "report.md"
        atomic_write_text(md, markdown_report(cal, skipped, fails))
        written.append(md)
        if plot:
            written.append(plot_validation(cal, report_dir / "validation.png"))
    return written


__all__ = ["DeviceError", "run_validate", "write_outputs"]
