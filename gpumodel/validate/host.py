"""Measure this machine's host side (the CPU work PyTorch does per op, launch, graph replay) and
write it as a host profile YAML.

Why: an eager PyTorch step of a small or decoding model is bound by the host, and the host is
not a constant (issue #17: the same HF Llama-3-8B eager decode step ran 21.9 ms on one H100
machine and 32.4 ms on another). A prediction of such a step needs the figures of the host it
runs on; this module measures them.

The file format (schema version 1) is the contract with ``gpumodel.hostprofile`` (the loader):

    host_profile: 1
    name, measured_at (ISO 8601 UTC), cpu_model, cpu_cores, python, torch, transformers,
    cuda_driver, gpu
    eager_op_s: {matmul, elementwise, reduction, norm, view, cat, copy, index, sdpa,
                 optimizer_step, conv, scaled_mm, sdpa_forced, sdpa_mask,
                 sdpa_backward}            # host seconds per call, medians
    probe_kernels: {sdpa, sdpa_forced, sdpa_mask, sdpa_backward}  # launches per probe call
    kernel_launch_s, hf_decoder_layer_s, hf_decoder_layer_kernels, hf_model_step_s,
    hf_model_layer_s, graph_replay_s, graph_replay_per_kernel_s, compiled_step_launch_s,
    profiler_event_s, sdpa_graph_build_s
    spread: {key: [p10, p90]}               # eager ops as "eager_op_s.<kind>"
    host_drift: [p10, p90]                  # the host's speed over the measurement, as
                                            # factors of its median (see below)

Method: each figure is sampled ``repeats`` times, the samples of all figures interleaved (one
round measures every figure once) so that drift of a shared machine spreads over all of them;
each sample is the host (perf_counter) time of ``calls`` back-to-back calls divided by the
number of ops they issue, with no synchronisation inside the timed loop. The figure is the
median of its samples; p10 and p90 go to ``spread``. Two figures are measured after the
interleaved rounds, in this order, because each leaves the process slower at eager ops and a
user's eager step has run neither: the torch.compile'd step's launch, then the profiler's cost
per event (``measure_host_samples``).

A shared machine's host is not one speed: HF eager decode steps on one H100 VM sat at ~28, ~41
and ~55 ms in turn, each for seconds (validation/results/steps-h100-run7). ``host_drift`` says
how far: the p10 and p90 of the larger HF model's forward time (the call most like a whole
step), over the rounds and the window below, divided by their median. A prediction scales its
host term by them for the range a host-bound step should fall in
(``InferenceResult.time_range_s``). After the rounds, ``window_s`` seconds of the two HF models
alone sample the host's speed over a longer stretch, and every host figure of the rounds is
set to the median speed over both (``to_window_speed``).

A whole HF model costs the host more than its layers timed one at a time: on an H200 machine
whose decoder layer timed 607 us alone, a Llama-3-8B eager decode step took 24.0 ms, 750 us per
layer, and its trace spent ~1 ms before the first layer's first projection (embedding, rotary
tables, mask; validation/results/steps-h200-run4). So two small Llama models of
``HF_MODEL_LAYERS`` decoder layers are timed whole, one decode forward each over a DynamicCache
(cut back after each call), as a user calls them: the slope over their layer counts is the host time per
layer inside a model (``hf_model_layer_s``), the intercept the model's own per step
(``hf_model_step_s``), both from the samples of one round. ``profiler_event_s`` is what
torch.profiler (CPU + CUDA activities, ``record_shapes=True``) adds to the host per event it
records (cpu_op and CUDA runtime events, counted as ``gpumodel calibrate --trace`` counts
them): the smaller model's forward profiled against not, over the events one forward records.

``sdpa_graph_build_s`` is what an attention call costs the host the first time the process
sees its shapes when SDPA runs cuDNN (what torch prefers on compute capability 9.0 and 10.0):
torch caches one built cuDNN graph per problem, keyed by batch, heads and both sequence
lengths (aten/src/ATen/native/cudnn/MHA.cpp), so an eager decode step at a KV length it has
not run before builds one (~50 ms on an H100 VM, torch 2.11: validation/results/h100-sxm/
host-gap-2026-11-25). Measured under ``sdpa_kernel(CUDNN_ATTENTION)`` (so on any GPU cuDNN
attention runs on) as the smaller model's decode forward at a new KV length minus the same
forward at a length it has run.

torch is imported inside ``measure_host_samples`` only; the aggregation and the writer are pure
and need no torch (they are unit-tested on a CPU-only machine).
"""

from __future__ import annotations

import datetime as _dt
import inspect
import math
import os
import platform
import re
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpumodel.errors import DeviceError, SpecError
from gpumodel.hostprofile import (
    HOST_COPY_KINDS,
    HOST_COPY_PROBE_BYTES,
    HOST_SIDE_FIELDS,
    SDPA_BACKWARD_PROBE_SHAPE,
    SDPA_PROBE_SHAPE,
)

HOST_PROFILE_SCHEMA = 1

#: Eager op kinds, in file order (a key of ``eager_op_s`` each).
EAGER_OP_KINDS: tuple[str, ...] = (
    "matmul",
    "elementwise",
    "reduction",
    "norm",
    "view",
    "cat",
    "copy",
    "index",
    "sdpa",
    "optimizer_step",
    "conv",
    "scaled_mm",
    "sdpa_forced",
    "sdpa_mask",
    "sdpa_backward",
)
#: The SDPA probes, whose kernels the profile counts (``probe_kernels``).
SDPA_PROBE_KINDS = ("sdpa", "sdpa_forced", "sdpa_mask", "sdpa_backward")

#: The conv probe's shapes (bf16, channels_last, batch 1; small maps so that the GPU time of each
#: stays under its host time): in channels, out channels, map side, kernel side.
CONV_PROBE_SHAPES: tuple[tuple[int, int, int, int], ...] = (
    (64, 64, 16, 3), (128, 128, 16, 1), (256, 256, 8, 3), (512, 128, 8, 1),
)  # fmt: skip
CONV_PROBE_LABELS = tuple(f"{c}->{k} {hw}x{hw} {r}x{r}" for c, k, hw, r in CONV_PROBE_SHAPES)

#: What the eager op probes run (a profile's ``shapes.eager_ops``; ``HostProfile.probe_launches``
#: reads the conv part).
EAGER_OPS_PROBES = (
    "64x64 bf16 (optimizer_step: fused AdamW over 8 fp32 64x64 params; sdpa: q 1x8x1x64, k/v "
    "1x8x128x64, the default dispatch; sdpa_forced: the same call inside sdpa_kernel([every "
    "backend]) (the context's cost, the same kernel); sdpa_mask: with a 1x1x1x128 bool "
    "attn_mask; sdpa_backward: torch.autograd.grad of a 1x8x128x64 q/k/v call on its retained "
    "graph; conv: F.conv2d channels_last, batch 1, cuDNN plans chosen in cudnn.benchmark "
    f"mode, mean over {', '.join(CONV_PROBE_LABELS)}; scaled_mm: torch._scaled_mm fp8 e4m3, "
    "unit scales, bf16 out)"
)

#: Scalar timing figures (seconds), in file order.
SCALAR_KEYS: tuple[str, ...] = (
    "kernel_launch_s",
    "hf_decoder_layer_s",
    "hf_model_step_s",
    "hf_model_layer_s",
    "graph_replay_s",
    "graph_replay_per_kernel_s",
    "compiled_step_launch_s",
    "profiler_event_s",
    "sdpa_graph_build_s",
)

#: The figures sampled in the interleaved rounds that are host time (so scale with the
#: vCPU's speed; ``to_window_speed``): every eager op kind and the profile's host-side fields
#: (``HOST_SIDE_FIELDS``) except those derived from the HF models over rounds and window, or
#: measured after them.
ROUND_HOST_KEYS: tuple[str, ...] = (
    *(f"eager_op_s.{k}" for k in EAGER_OP_KINDS),
    *(k for k in HOST_SIDE_FIELDS if k not in ("hf_model_step_s", "hf_model_layer_s",
                                               "profiler_event_s", "compiled_step_launch_s",
                                               "hf_moe_layer_s")),
)  # fmt: skip

#: The optional figure of HF MoE decoder layers inside a model (``_hf_moe_models``).
MOE_LAYER_KEY = "hf_moe_layer_s"

#: Longest ``window_s`` (seconds) a host measurement takes.
MAX_WINDOW_S = 3600.0

#: Decoder-layer counts of the two small HF Llama models whose decode forwards give the
#: model's own host time per step (intercept) and per layer (slope).
HF_MODEL_LAYERS: tuple[int, int] = (2, 10)

NO_TORCH_MESSAGE = "measuring the host needs PyTorch: pip install torch (a CUDA build)"
NO_CUDA_MESSAGE = (
    "measuring the host needs a CUDA GPU that PyTorch sees (torch.cuda.is_available())"
)


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1) by linear interpolation between order statistics.

    Same definition as numpy.percentile's default ("linear", Hyndman & Fan type 7).
    """
    if not values:
        raise SpecError("quantile of no values")
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(samples: Sequence[float]) -> tuple[float, float, float]:
    """(median, p10, p90) of finite, non-negative samples; SpecError otherwise."""
    vals = [float(v) for v in samples]
    if not vals:
        raise SpecError("no samples")
    if any(not math.isfinite(v) or v < 0 for v in vals):
        raise SpecError(f"samples must be finite and >= 0, got {vals}")
    return quantile(vals, 0.5), quantile(vals, 0.1), quantile(vals, 0.9)


def _sig(x: float, digits: int = 5) -> float:
    """x rounded to ``digits`` significant figures (the file stays readable; timings are not
    that precise anyway)."""
    return float(f"{x:.{digits}g}")


def build_profile(
    samples: Mapping[str, Sequence[float] | None],
    meta: Mapping[str, Any],
    counts: Mapping[str, int | None] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The host-profile dict (schema 1) from raw samples.

    ``samples`` maps ``"eager_op_s.<kind>"`` and each of SCALAR_KEYS to the list of per-sample
    seconds, or to None where that figure could not be measured (no transformers, no CUDA
    graphs): it is then written as null. Every key must be present; unknown keys are refused.
    ``meta`` holds name, measured_at, cpu_model, cpu_cores, python, torch, transformers,
    cuda_driver, gpu. ``counts`` holds hf_decoder_layer_kernels. ``extra`` adds fields after
    the schema's own (method, hostname, ...). Optional ``samples["host_drift"]``: per-round
    seconds of the most step-like call, written as ``host_drift`` [p10/median, p90/median].
    """
    expected = {f"eager_op_s.{k}" for k in EAGER_OP_KINDS} | set(SCALAR_KEYS)
    copies = [f"host_copy_s.{k}" for k in HOST_COPY_KINDS]  # optional: CUDA hosts only
    missing = sorted(expected - set(samples))
    unknown = sorted(set(samples) - expected - {"host_drift", MOE_LAYER_KEY, *copies})
    if missing or unknown:
        raise SpecError(f"host samples: missing {missing}, unknown {unknown}")
    meta_keys = ("name", "measured_at", "cpu_model", "cpu_cores", "python", "torch",
                 "transformers", "cuda_driver", "gpu")  # fmt: skip
    absent = [k for k in meta_keys if k not in meta]
    if absent:
        raise SpecError(f"host profile metadata lacks {absent}")

    medians: dict[str, float | None] = {}
    spread: dict[str, list[float]] = {}
    for key in sorted(expected):
        vals = samples[key]
        if vals is None:
            medians[key] = None
            continue
        med, p10, p90 = summarize(vals)
        medians[key] = _sig(med)
        spread[key] = [_sig(p10), _sig(p90)]

    profile: dict[str, Any] = {"host_profile": HOST_PROFILE_SCHEMA}
    for k in meta_keys:
        profile[k] = meta[k]
    profile["eager_op_s"] = {k: medians[f"eager_op_s.{k}"] for k in EAGER_OP_KINDS}
    for k in SCALAR_KEYS:
        profile[k] = medians[k]
        if k == "hf_decoder_layer_s":
            profile["hf_decoder_layer_kernels"] = (counts or {}).get("hf_decoder_layer_kernels")
    if (counts or {}).get("probe_kernels"):
        profile["probe_kernels"] = dict(counts["probe_kernels"])  # type: ignore[index]
    moe = samples.get(MOE_LAYER_KEY)  # optional: transformers with grouped experts
    if moe:
        med, p10, p90 = summarize(moe)
        profile[MOE_LAYER_KEY] = _sig(med)
        spread[MOE_LAYER_KEY] = [_sig(p10), _sig(p90)]
    copy_vals = [samples.get(k) for k in copies]
    profile["host_copy_s"] = None
    if all(copy_vals):
        profile["host_copy_s"] = {}
        for kind, key, vals in zip(HOST_COPY_KINDS, copies, copy_vals):
            med, p10, p90 = summarize(vals)  # type: ignore[arg-type]
            profile["host_copy_s"][kind] = _sig(med)
            spread[key] = [_sig(p10), _sig(p90)]
    profile["spread"] = {k: spread[k] for k in sorted(spread)}
    drift = samples.get("host_drift")
    if drift:
        med, p10, p90 = summarize(drift)
        if med > 0:
            profile["host_drift"] = [_sig(p10 / med, 3), _sig(p90 / med, 3)]
    for k, v in (extra or {}).items():
        if k in profile:
            raise SpecError(f"extra field {k!r} would overwrite a schema field")
        profile[k] = v
    return profile


def profile_yaml(profile: Mapping[str, Any]) -> str:
    """YAML text of a host profile: schema fields in order, ``spread`` pairs on one line."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _seq(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
        flow = all(isinstance(x, (int, float)) for x in data)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)

    _Dumper.add_representer(list, _seq)
    header = (
        "# gpumodel host profile: host (CPU) seconds per call on this machine, measured by\n"
        "# `gpumodel validate --host-only` (gpumodel/validate/host.py). Medians over\n"
        "# interleaved repeats; spread: [p10, p90] of the same samples.\n"
    )
    return header + yaml.dump(dict(profile), Dumper=_Dumper, sort_keys=False, width=100)


def write_host_profile(profile: Mapping[str, Any], path: str | Path) -> Path:
    """Write the profile atomically (temp file in the same directory, then rename)."""
    from gpumodel._io import atomic_write_text

    return atomic_write_text(path, profile_yaml(profile), "host profile", mkdir=True,
                             replaces_input=True)  # the same day's profile measured again


def default_profile_path(name: str) -> Path:
    """Where ``gpumodel validate`` keeps a measured host profile: the user cache."""
    from gpumodel.calibration import cache_dir

    return cache_dir() / "hosts" / f"{name}.yaml"


# ----------------------------------------------------------------------------- metadata


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, platform.processor() elsewhere)."""
    from gpumodel.hostprofile import local_cpu_model

    return local_cpu_model() or platform.processor() or platform.machine() or "unknown"


def cuda_driver_version() -> str | None:
    """NVIDIA driver version from NVML or nvidia-smi; None if neither answers."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = out.stdout.strip().splitlines()
    return line[0].strip() if out.returncode == 0 and line else None


def host_metadata(torch_module: Any, device: str) -> dict[str, Any]:
    """name, measured_at, cpu_model, ... for the profile header."""
    from importlib import metadata

    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    host = socket.gethostname() or "host"
    try:
        transformers_version: str | None = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        transformers_version = None
    on_cuda = device == "cuda"
    return {
        "name": f"measured-{re.sub(r'[^A-Za-z0-9_.-]', '-', host)}-{now:%Y%m%d}",
        "measured_at": now.isoformat().replace("+00:00", "Z"),
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": str(torch_module.__version__),
        "transformers": transformers_version,
        "cuda_driver": cuda_driver_version() if on_cuda else None,
        "gpu": torch_module.cuda.get_device_name() if on_cuda else "none (cpu)",
    }


# ----------------------------------------------------------------------------- measurement


def _import_torch() -> Any:
    try:
        import torch
    except Exception as exc:  # ImportError or a broken install failing at import
        raise DeviceError(NO_TORCH_MESSAGE) from exc
    return torch


def measure_host_samples(
    device: str = "cuda",
    repeats: int = 9,
    calls: int = 200,
    compile_step: bool = True,
    progress: Callable[[str], None] | None = None,
    window_s: float = 0.0,
) -> tuple[dict[str, list[float] | None], dict[str, int | None], dict[str, Any]]:
    """Raw samples of every figure, interleaved over ``repeats`` rounds, then ``window_s``
    seconds of the two small HF models alone (``to_window_speed``).

    Returns (samples, counts, notes). ``device="cpu"`` runs the eager parts on the CPU (for
    tests and smoke runs; CUDA-only figures are None there).
    """
    if device not in ("cuda", "cpu"):
        raise SpecError(f"device must be 'cuda' or 'cpu', got {device!r}")
    if repeats < 3 or calls < 1 or not 0 <= window_s <= MAX_WINDOW_S:
        raise SpecError(f"need repeats >= 3, calls >= 1 and a window of 0-{MAX_WINDOW_S:g} s, "
                        f"got {repeats}, {calls}, {window_s}")  # fmt: skip
    torch = _import_torch()
    if device == "cuda" and not torch.cuda.is_available():
        raise DeviceError(NO_CUDA_MESSAGE)
    say = progress or (lambda _msg: None)
    on_cuda = device == "cuda"
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)

    torch.manual_seed(0)
    notes: dict[str, Any] = {}
    # name -> (fn, ops issued per call, calls per sample)
    bench: dict[str, tuple[Callable[[], Any], int, int]] = {}
    _eager_ops(torch, device, calls, bench)
    if on_cuda:
        bench["graph_replay_s"] = (_graph(torch, 20).replay, 1, calls)
        _host_copy_probes(torch, max(10, calls // 4), bench)
    layer = _hf_decoder_layer(torch, device, notes)
    if layer is not None:
        bench["hf_decoder_layer_s"] = (layer[0], 1, max(10, calls // 4))
    models = {n: _hf_model(torch, device, n) for n in HF_MODEL_LAYERS} if layer else {}
    for n, fn in models.items():
        bench[f"hf_model.{n}"] = (fn, 1, max(5, calls // (2 * n)))
    moe = _hf_moe_models(torch, device, notes) if layer else {}
    for n, fn in moe.items():
        bench[f"hf_moe_model.{n}"] = (fn, 1, max(5, calls // (2 * n)))
    say(f"host: warming up {len(bench)} figures")
    for fn, _, _ in bench.values():
        for _ in range(3):
            fn()
    sync()

    samples: dict[str, list[float] | None] = {k: [] for k in bench}
    gap_graphs = (_graph(torch, 10), _graph(torch, 110)) if on_cuda else None
    gap_samples: list[float] = []
    build = _sdpa_graph_build(torch, device, models[HF_MODEL_LAYERS[0]], notes) if models else None
    build_samples: list[float] = []
    for r in range(repeats):
        for name, (fn, per_call, n) in bench.items():
            samples[name].append(host_s_per_call(fn, n, sync) / per_call)  # type: ignore[union-attr]
        if gap_graphs is not None:
            gap_samples.append(_graph_gap(torch, *gap_graphs, 10, 110))
        if build is not None:
            build_samples.append(build())
        say(f"host: round {r + 1}/{repeats}")
    window: tuple[list[float], list[float]] = ([], [])
    if models and window_s > 0:
        say(f"host: {window_s:g} s of the HF models alone (the host's speed over a window)")
        pair = [bench[f"hf_model.{n}"] for n in HF_MODEL_LAYERS]
        end = time.perf_counter() + window_s
        while time.perf_counter() < end or not window[0]:
            for got, (fn, _, n) in zip(window, pair):
                got.append(host_s_per_call(fn, n, sync))

    if layer is not None:
        counts = {"hf_decoder_layer_kernels": layer[1]() if on_cuda else None}
    else:
        counts = {"hf_decoder_layer_kernels": None}
    if on_cuda:  # kernels only: a memset costs the host a fraction of a launch
        counts["probe_kernels"] = {kind: _count_kernels(torch, bench[f"eager_op_s.{kind}"][0], 5)
                                   for kind in SDPA_PROBE_KINDS
                                   if f"eager_op_s.{kind}" in bench}  # fmt: skip
    out: dict[str, list[float] | None] = {}
    for kind in EAGER_OP_KINDS:
        out[f"eager_op_s.{kind}"] = samples.get(f"eager_op_s.{kind}")  # scaled_mm: fp8 GPUs
    for key in SCALAR_KEYS:
        out[key] = samples.get(key)
    for kind in HOST_COPY_KINDS:
        out[f"host_copy_s.{kind}"] = samples.get(f"host_copy_s.{kind}")
    per_sample = {k: v[2] for k, v in bench.items()}
    # Each of the two below leaves the process issuing eager ops slower, so they come after the
    # eager rounds, the profiler last (a user's eager step has run neither):
    # - torch.compile(reduce-overhead): the HF layer timed 686-702 us in a process that had
    #   compiled first, 605-626 us in one that had not (H200 VM,
    #   validation/results/h200-sxm/profile-order-2026-11-25);
    # - torch.profiler keeps CUPTI attached (unless TEARDOWN_CUPTI=1): +16-27% per eager decode
    #   step after one session (validation/results/h200-sxm/process-state-2026-11-25).
    compiled = _compiled_step(torch, notes) if (on_cuda and compile_step) else None
    out["compiled_step_launch_s"] = None
    if compiled is not None:
        say("host: the torch.compile'd step")
        per_sample["compiled_step_launch_s"] = n = max(10, calls // 4)
        for _ in range(3):
            compiled()
        sync()
        out["compiled_step_launch_s"] = [host_s_per_call(compiled, n, sync) for _ in range(repeats)]
    out["graph_replay_per_kernel_s"] = gap_samples if gap_graphs is not None else None
    out["sdpa_graph_build_s"] = build_samples if build is not None else None
    if models:
        lo, hi = HF_MODEL_LAYERS
        small, big = samples[f"hf_model.{lo}"], samples[f"hf_model.{hi}"]
        assert small is not None and big is not None
        notes["window"] = {"seconds": window_s, **to_window_speed(out, big, window[1])}
        small, big = small + window[0], big + window[1]
        out["hf_model_step_s"], out["hf_model_layer_s"] = model_step_and_layer(small, big, lo, hi)
        if moe:  # rounds only, at the window's speed (to_window_speed's factor)
            speed = notes["window"]["speed_factor"]
            pair = (samples[f"hf_moe_model.{n}"] for n in HF_MODEL_LAYERS)
            layers = model_step_and_layer(*pair, lo, hi)[1]  # type: ignore[arg-type]
            out[MOE_LAYER_KEY] = [v * speed for v in layers]
        out["host_drift"] = list(big)
        say("host: the profiler's cost per event")
        out["profiler_event_s"] = [
            _profiler_event_cost(torch, models[lo], max(10, calls // (2 * lo)), sync)
            for _ in range(3)
        ]
    notes["conv_probe"] = _conv_probe_note(samples)
    notes["repeats"] = repeats
    notes["calls_per_sample"] = per_sample
    return out, counts, notes


def _conv_probe_note(samples: Mapping[str, list[float] | None]) -> dict[str, Any]:
    """Median host microseconds a call per conv probe shape (rounds, before any window
    rescaling), and the earlier profiles' single heuristic-planned shape against the profile's
    figure (the mean over the shapes): how much the probe change moved it on this machine."""
    us = {k.removeprefix("conv_shape."): _sig(quantile(v, 0.5) * 1e6, 4)
          for k, v in samples.items() if k.startswith("conv_shape.") and v}  # fmt: skip
    figure = samples.get("eager_op_s.conv")
    note: dict[str, Any] = {"host_us_per_call": us}
    if figure and us.get("heuristic 64x14x14 3x3"):
        note["heuristic_single_over_figure"] = _sig(
            us["heuristic 64x14x14 3x3"] / (quantile(figure, 0.5) * 1e6), 4)
    return note


def to_window_speed(
    samples: dict[str, list[float] | None], rounds_big: Sequence[float], window_big: Sequence[float]
) -> dict[str, Any]:
    """Rescale, in place, the host-side samples taken in the rounds (``ROUND_HOST_KEYS``) to
    the host's median speed over the rounds and the window together; return what was done.

    Why: a VM's vCPU runs at a speed that changes within seconds (a pure-Python loop and the
    Llama-3-8B eager decode step slowed together, 21-40 ms per step on one H100 VM; the small
    HF models tracked the 8B step within 4% at its median; validation/results/h100-sxm/
    host-modes-2026-11-25), so ~30 s of rounds can sample a fast or a slow stretch. The larger
    HF model, timed in every round and through the window, is the speed reference: factor =
    median(rounds + window) / median(rounds) of its forward time. A window of 60 s put the
    profile's median within 5% (p90) of a 100 s run's; 37 s of rounds alone, 9%."""
    if not window_big:
        return {"samples": 0, "speed_factor": 1.0}
    both = [*rounds_big, *window_big]
    factor = quantile(both, 0.5) / quantile(rounds_big, 0.5)
    for key in ROUND_HOST_KEYS:
        vals = samples.get(key)
        if vals is not None:
            samples[key] = [v * factor for v in vals]
    return {"samples": len(window_big), "speed_factor": _sig(factor, 4)}


def model_step_and_layer(
    small: Sequence[float], big: Sequence[float], small_layers: int, big_layers: int
) -> tuple[list[float], list[float]]:
    """Per round, the host seconds of a model's own work per step (intercept) and per decoder
    layer (slope) from the forward times of a ``small_layers`` and a ``big_layers`` model:
    slope = (big - small) / (big_layers - small_layers), intercept = small - small_layers x
    slope; a round whose noise would make either negative gives 0 there."""
    if len(small) != len(big) or not small or big_layers <= small_layers:
        raise SpecError("model samples: one per round for each model, and more layers in big")
    slopes = [max((b - a) / (big_layers - small_layers), 0.0) for a, b in zip(small, big)]
    steps = [max(a - small_layers * k, 0.0) for a, k in zip(small, slopes)]
    return steps, slopes


def measure_host_profile(
    device: str = "cuda",
    repeats: int = 9,
    calls: int = 200,
    compile_step: bool = True,
    progress: Callable[[str], None] | None = None,
    window_s: float = 0.0,
) -> dict[str, Any]:
    """Measure this machine and return the host-profile dict (write it with write_host_profile).
    ``window_s``: seconds of the host's speed sampled after the rounds (``to_window_speed``)."""
    t0 = time.perf_counter()
    samples, counts, notes = measure_host_samples(device, repeats, calls, compile_step, progress,
                                                  window_s)  # fmt: skip
    torch = _import_torch()
    meta = host_metadata(torch, device)
    extra = {
        "hostname": socket.gethostname(),
        "cuda_runtime": getattr(torch.version, "cuda", None),
        "os_kernel": platform.release(),
        "device": device,
        "method": {
            "repeats": notes.pop("repeats"),
            "window": notes.pop("window", None),
            "calls_per_sample": notes.pop("calls_per_sample"),
            "timer": "time.perf_counter around back-to-back calls, no sync inside; "
            "graph_replay_per_kernel_s from CUDA events (slope 10 vs 110 kernels)",
            "seconds_taken": round(time.perf_counter() - t0, 2),
        },
        "shapes": {
            "eager_ops": EAGER_OPS_PROBES,
            "hf_decoder_layer": "LlamaDecoderLayer hidden 1024, 8 heads x 128, 2 kv heads, ffn "
            "2816, bf16, sdpa, batch 1, 1 new token over a 128-token DynamicCache (cropped back "
            "after each call)",
            "hf_moe_model": f"MixtralForCausalLM of {HF_MODEL_LAYERS} layers shaped as "
            "hf_model's with 8 experts of ffn 2816, top-2, transformers' grouped experts: "
            "hf_moe_layer_s is the slope",
            "hf_model": f"LlamaForCausalLM of {HF_MODEL_LAYERS} such layers, vocab 1000, "
            "bf16, batch 1, one decode forward over a 128-token DynamicCache (cropped back "
            "after each call); profiler_event_s: the smaller one under torch.profiler (CPU + CUDA, "
            "record_shapes=True) against without",
            "host_copy": f"{HOST_COPY_PROBE_BYTES} B uint8, each call followed by "
            "torch.cuda.synchronize(): pinned and pageable .to('cuda'), pinned.copy_(cuda), "
            "cuda.cpu()",
            "compiled_step": "torch.compile(mode='reduce-overhead') Linear(256,256)-SiLU-"
            "Linear(256,256), bf16, input 64x256",
            "sdpa_graph_build": f"the {HF_MODEL_LAYERS[0]}-layer hf_model under cuDNN "
            "attention, one synchronised decode forward over a cache that grows from 1024 "
            "tokens (a new KV length each call) minus one over the 128-token cache cut back",
        },
    }
    if notes:
        extra["notes"] = notes
    return build_profile(samples, meta, counts, extra)


def _eager_ops(torch: Any, device: str, calls: int, bench: dict) -> None:
    """Register the eager op kinds (fn, ops per call, calls per sample) in ``bench``."""
    import torch.nn.functional as F

    dt = torch.bfloat16
    a = torch.randn(64, 64, device=device, dtype=dt)
    b = torch.randn(64, 64, device=device, dtype=dt)
    w = torch.ones(64, device=device, dtype=dt)
    bias = torch.zeros(64, device=device, dtype=dt)
    at = a.t()  # non-contiguous
    idx = torch.arange(0, 64, 2, device=device)
    kv = torch.zeros(1, 8, 160, 64, device=device, dtype=dt)
    new = torch.randn(1, 8, 1, 64, device=device, dtype=dt)
    n, h, s, kv_len, d = SDPA_PROBE_SHAPE
    q = torch.randn(n, h, s, d, device=device, dtype=dt)
    k = torch.randn(n, h, kv_len, d, device=device, dtype=dt)
    v = torch.randn(n, h, kv_len, d, device=device, dtype=dt)
    one = torch.zeros(1, device=device)
    convs, single = _conv_probes(torch, device, dt)
    params = [torch.randn(64, 64, device=device, requires_grad=True) for _ in range(8)]
    for p in params:
        p.grad = torch.randn_like(p)
    fused = device == "cuda"
    opt = torch.optim.AdamW(params, lr=1e-4, fused=fused, foreach=None if fused else False)

    def index() -> None:
        a.index_select(0, idx)
        kv[:, :, 130:131] = new

    ops: dict[str, tuple[Callable[[], Any], int]] = {
        "matmul": (lambda: torch.matmul(a, b), 1),
        "elementwise": (lambda: (a + b, a * b, F.silu(a)), 3),
        "reduction": (lambda: (a.sum(-1), a.mean(-1)), 2),
        "norm": (lambda: F.layer_norm(a, (64,), w, bias), 1),
        "view": (lambda: (a.view(16, 256), a.transpose(0, 1), a.reshape(4096)), 3),
        "cat": (lambda: torch.cat([a, b]), 1),
        "copy": (lambda: (a.to(torch.float32), at.contiguous()), 2),
        "index": (index, 2),
        "sdpa": (lambda: F.scaled_dot_product_attention(q, k, v), 1),
        **_sdpa_variant_probes(torch, q, k, v),
        "optimizer_step": (opt.step, 1),
        "conv": (lambda: [F.conv2d(x, f, padding=pad) for x, f, pad in convs], len(convs)),
    }
    if device == "cuda" and torch.cuda.get_device_capability() >= (8, 9):  # fp8 tensor cores
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm requires
        scale = torch.ones((), device=device)
        ops["scaled_mm"] = (lambda: torch._scaled_mm(a8, b8, scale, scale, out_dtype=dt), 1)
    for kind, (fn, per) in ops.items():
        n = max(10, calls // 4) if kind == "optimizer_step" else calls
        bench[f"eager_op_s.{kind}"] = (fn, per, n)
    bench["kernel_launch_s"] = (lambda: one.add_(1.0), 1, calls)
    # beside the profile's figure, not in it: each probe shape alone, and the single shape that
    # profiles before 2026-11-28 timed, on the plan cuDNN's heuristic picks (notes.conv_probe)
    for (x, f, pad), label in zip(convs, CONV_PROBE_LABELS):
        bench[f"conv_shape.{label}"] = (lambda x=x, f=f, pad=pad: F.conv2d(x, f, padding=pad), 1,
                                        calls)  # fmt: skip
    bench["conv_shape.heuristic 64x14x14 3x3"] = (lambda: F.conv2d(*single, padding=1), 1, calls)


def _sdpa_variant_probes(torch: Any, q: Any, k: Any, v: Any) -> dict[str, tuple[Callable[[], Any], int]]:
    """The SDPA calls beside the default one (``sdpa_forced``, ``sdpa_mask``,
    ``sdpa_backward``; see ``EAGER_OPS_PROBES``), each one call per op; no ``sdpa_forced``
    where torch has no ``sdpa_kernel`` (before 2.3: the profile then stands in ``sdpa``)."""
    import torch.nn.functional as F

    mask = torch.ones(1, 1, 1, k.shape[2], dtype=torch.bool, device=q.device)
    probes: dict[str, tuple[Callable[[], Any], int]] = {
        "sdpa_mask": (lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), 1)}
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        sdpa_kernel = None
    if sdpa_kernel is not None:
        # every backend allowed: the context's own cost around the default's kernel
        every = [be for be in SDPBackend.__members__.values() if be.name != "ERROR"]

        def forced() -> Any:
            with sdpa_kernel(every):
                return F.scaled_dot_product_attention(q, k, v)

        probes["sdpa_forced"] = (forced, 1)

    leaves = [torch.randn(SDPA_BACKWARD_PROBE_SHAPE, device=q.device, dtype=q.dtype,
                          requires_grad=True) for _ in range(3)]  # fmt: skip
    with torch.enable_grad():
        out = F.scaled_dot_product_attention(*leaves)
    grad_out = torch.randn_like(out)

    def backward() -> Any:
        return torch.autograd.grad(out, leaves, grad_out, retain_graph=True)

    probes["sdpa_backward"] = (backward, 1)
    return probes


def _host_copy_probes(torch: Any, calls: int, bench: dict) -> None:
    """Register the 4 KB host<->device copies of ``host_copy_s`` in ``bench``: the calls
    validate's host-copy family times (``gpumodel.validate.conditions.copy_calls``), each with
    its ``synchronize``: ``.to('cuda')`` of a pinned and a pageable tensor, ``pinned.copy_(dev)``
    and ``dev.cpu()`` (a new pageable tensor). Host buffers hold data (never-written pages all
    map the kernel's zero page). Like every figure here, a round's sample is the mean of
    back-to-back calls."""
    from gpumodel.validate.conditions import copy_calls

    pinned = torch.full((HOST_COPY_PROBE_BYTES,), 7, dtype=torch.uint8).pin_memory()
    pageable = torch.full((HOST_COPY_PROBE_BYTES,), 7, dtype=torch.uint8)
    dev = torch.empty(HOST_COPY_PROBE_BYTES, dtype=torch.uint8, device="cuda")
    of_pinned, of_pageable = copy_calls(torch, pinned, dev), copy_calls(torch, pageable, dev)
    fns = {"h2d_pinned": of_pinned["to_device"], "h2d_pageable": of_pageable["to_device"],
           "d2h_pinned": of_pinned["into_host"], "d2h_pageable": of_pageable["new_host"]}  # fmt: skip
    for kind in HOST_COPY_KINDS:
        bench[f"host_copy_s.{kind}"] = (fns[kind], 1, calls)


def _conv_probes(torch: Any, device: str, dt: Any) -> tuple[list[tuple[Any, Any, int]], tuple]:
    """The conv probe's (input, filter, padding) per shape, each with its cuDNN plan chosen by
    ``cudnn.benchmark`` (the setting convolutional training and inference run with, and the one
    validate times under), and the one shape earlier profiles timed, planned by the heuristic.

    Why several shapes, planned in benchmark mode: one call's host time depends on the shape
    and the plan, and profiles before 2026-11-28 timed one 64-channel 14x14 3x3 layer on the
    heuristic's plan. The change was neutral where it was measured: on an H100 VM that single
    shape ran at 0.97-0.99 of this mean, and the unseen convolutions scored the same with
    either (validation/results/unseen-h100-run17). PyTorch keeps one plan per shape for the
    process and looks it up before it reads the flag (aten/src/ATen/native/cudnn/Conv_v8.cpp,
    run_single_conv), so the plans are made here, once, and the user's flag is restored."""
    import torch.nn.functional as F

    cl = torch.channels_last

    def conv(c: int, k: int, hw: int, r: int) -> tuple[Any, Any, int]:
        x = torch.randn(1, c, hw, hw, device=device, dtype=dt).to(memory_format=cl)
        f = (torch.randn(k, c, r, r, device=device, dtype=dt) / (c * r * r) ** 0.5).to(
            memory_format=cl)
        return x, f, r // 2

    single = conv(64, 64, 14, 3)[:2]
    flag = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = False
        F.conv2d(*single, padding=1)
        torch.backends.cudnn.benchmark = True
        convs = [conv(*shape) for shape in CONV_PROBE_SHAPES]
        for x, f, pad in convs:
            F.conv2d(x, f, padding=pad)
    finally:
        torch.backends.cudnn.benchmark = flag
    return convs, single


def _graph(torch: Any, n_kernels: int) -> Any:
    """A CUDA graph of ``n_kernels`` in-place adds on a 1-element tensor."""
    x = torch.zeros(1, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            x.add_(1.0)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n_kernels):
            x.add_(1.0)
    g._keep = x  # keep the captured tensor alive with the graph
    g.replay()
    torch.cuda.synchronize()
    return g


def _graph_gap(torch: Any, g_small: Any, g_big: Any, n_small: int, n_big: int) -> float:
    """GPU seconds per kernel inside a replayed graph: slope of replay time over kernel count."""
    reps = 20
    times = []
    for g in (g_small, g_big):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    return max(0.0, (times[1] - times[0]) / (n_big - n_small))


def _llama_config(layers: int) -> Any:
    """The small Llama config of the layer and model benchmarks (transformers imported here)."""
    from transformers import LlamaConfig

    # Llama's head_dim (128): at head_dim 32 torch 2.11 routes SDPA to cuDNN, whose plan is
    # rebuilt for every new cache length (~50 ms a call on an H100), which is not host overhead
    heads, kv_heads, head_dim = 8, 2, 128
    return LlamaConfig(hidden_size=heads * head_dim, intermediate_size=2816,
                       num_attention_heads=heads, num_key_value_heads=kv_heads,
                       head_dim=head_dim, num_hidden_layers=layers, vocab_size=1000,
                       attn_implementation="sdpa")  # fmt: skip


def _ready(torch: Any, module: Any, device: str) -> Any:
    """``module`` in bf16 on ``device``, eval mode, weights drawn (a module built outside
    from_pretrained holds uninitialised memory)."""
    with torch.no_grad():
        for param in module.parameters():
            param.normal_(0.0, 0.02)
    return module.to(device=device, dtype=torch.bfloat16).eval()


def _filled_cache(torch: Any, cfg: Any, layers: int, ctx: int, device: str) -> Any:
    from transformers import DynamicCache

    shape = (1, cfg.num_key_value_heads, ctx, cfg.head_dim)
    kv = torch.randn(*shape, device=device, dtype=torch.bfloat16)
    cache = DynamicCache(config=cfg)
    for i in range(layers):
        cache.update(kv.clone(), kv.clone(), i)
    return cache


def _cache_arg(forward: Callable[..., Any]) -> str:
    """transformers 5.2x renamed the cache argument of layers and models from past_key_values
    to cache (the old name warns)."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def _hf_decoder_layer(torch: Any, device: str, notes: dict) -> tuple[Callable, Callable] | None:
    """(call, kernel_counter) for one HF LlamaDecoderLayer decode forward; None without
    transformers."""
    try:
        from transformers.models.llama.modeling_llama import (
            LlamaDecoderLayer,
            LlamaRotaryEmbedding,
        )
    except Exception as exc:
        notes["hf_decoder_layer"] = f"not measured: transformers unavailable ({exc})"
        return None
    cfg = _llama_config(1)
    layer = _ready(torch, LlamaDecoderLayer(cfg, layer_idx=0), device)
    rope = LlamaRotaryEmbedding(cfg).to(device)
    hidden = torch.randn(1, 1, cfg.hidden_size, device=device, dtype=torch.bfloat16)
    ctx = 128
    pos = torch.tensor([[ctx]], device=device)
    pe = rope(hidden, pos)
    cache = _filled_cache(torch, cfg, 1, ctx, device)
    cache_arg = _cache_arg(layer.forward)

    @torch.no_grad()
    def call() -> None:
        # one new token over a 128-token cache, then the cache cut back (a view): every call
        # sees the same shapes, as the layers of one decode step do
        layer(hidden, attention_mask=None, position_ids=pos, use_cache=True,
              position_embeddings=pe, **{cache_arg: cache})  # fmt: skip
        cache.crop(-1)  # drop the token just added

    def count_kernels() -> int:
        return _count_kernels(torch, call, 5)

    return call, count_kernels


def _hf_moe_models(torch: Any, device: str, notes: dict) -> dict[int, Callable[[], Any]]:
    """Decode forwards of two small HF Mixtral models (``HF_MODEL_LAYERS`` layers) under
    transformers' grouped experts (its default on CUDA): the MoE layer's host time inside a
    model, whose Python (sort, gather, histogram, masks around two grouped GEMMs) per-op costs
    under-price. Empty where transformers has no grouped experts (before 5.x)."""
    try:
        from transformers import MixtralConfig, MixtralForCausalLM
    except Exception as exc:
        notes["hf_moe_model"] = f"not measured: transformers has no Mixtral ({exc})"
        return {}
    calls = {}
    for n in HF_MODEL_LAYERS:
        base = _llama_config(n)
        cfg = MixtralConfig(hidden_size=base.hidden_size, intermediate_size=base.intermediate_size,
                            num_attention_heads=base.num_attention_heads,
                            num_key_value_heads=base.num_key_value_heads,
                            head_dim=base.head_dim, num_hidden_layers=n, vocab_size=1000,
                            num_local_experts=8, num_experts_per_tok=2,
                            attn_implementation="sdpa")  # fmt: skip
        model = _ready(torch, MixtralForCausalLM(cfg), device)
        if getattr(model.config, "_experts_implementation", None) != "grouped_mm":
            notes["hf_moe_model"] = "not measured: transformers runs no grouped experts here"
            return {}
        calls[n] = _decode_call(torch, model, cfg, n, device)
    return calls


def _decode_call(
    torch: Any, model: Any, cfg: Any, layers: int, device: str, ctx: int = 128, crop: bool = True
) -> Callable[[], Any]:
    """One decode forward of ``model`` over a ``ctx``-token DynamicCache (cut back after each
    call where ``crop``: every call then sees the same shapes)."""
    cache = _filled_cache(torch, cfg, layers, ctx, device)
    ids = torch.tensor([[1]], device=device)
    arg = _cache_arg(model.forward)

    @torch.no_grad()
    def call() -> None:
        model(input_ids=ids, use_cache=True, **{arg: cache})
        if crop:
            cache.crop(-1)  # drop the token just added

    return call


def _hf_model(
    torch: Any, device: str, layers: int, ctx: int = 128, crop: bool = True
) -> Callable[[], Any]:
    """One decode forward of a small HF LlamaForCausalLM of ``layers`` decoder layers, as a
    user's decode loop calls it: one new token over a 128-token DynamicCache, which is then cut
    back (two slicing views per layer, under 1% of a layer's host time). A cache left to grow
    made every call of these small models ~60 ms on an H100 (torch 2.11 rebuilt its cuDNN
    attention plan for each new length), which is no host overhead of a real step: a
    Llama-3-8B decode step's 32 cuDNN attention calls took 130-180 us each in its trace."""
    from transformers import LlamaForCausalLM

    cfg = _llama_config(layers)
    model = _ready(torch, LlamaForCausalLM(cfg), device)
    return _decode_call(torch, model, cfg, layers, device, ctx, crop)


def _sdpa_graph_build(
    torch: Any, device: str, crop_call: Callable[[], Any], notes: dict
) -> Callable[[], float] | None:
    """A sampler of ``sdpa_graph_build_s``: host seconds of one decode forward of the small
    2-layer HF Llama over a cache that grows (a KV length the process has not run) minus one
    over the cache cut back (``crop_call``, a length it has), each the host time of one call
    (``host_s_per_call``): the first holds the graph build, the second what every call costs; under
    ``sdpa_kernel(CUDNN_ATTENTION)``, so any GPU cuDNN attention runs on measures it. The HF
    path, not a bare SDPA call: HF's q/k/v layouts and GQA are part of the graph's key (a bare
    call with 8 K/V heads read 59 ms where the decode steps of the same process paid ~45).
    None without CUDA or where cuDNN attention cannot run."""
    if device != "cuda":
        return None
    from torch.nn.attention import SDPBackend, sdpa_kernel

    grow_call = _hf_model(torch, device, HF_MODEL_LAYERS[0], ctx=1024, crop=False)

    def timed(fn: Callable[[], Any]) -> float:
        def under_cudnn() -> None:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                fn()

        return host_s_per_call(under_cudnn, 1, torch.cuda.synchronize)

    try:
        timed(grow_call)
        timed(crop_call)
        timed(crop_call)
    except Exception as exc:  # no cuDNN attention on this GPU or build (RuntimeError, ...)
        notes["sdpa_graph_build_s"] = f"not measured: cuDNN attention unavailable ({exc})"[:300]
        return None

    def sample() -> float:
        return max(timed(grow_call) - timed(crop_call), 0.0)

    return sample


def host_s_per_call(fn: Callable[[], Any], calls: int, sync: Callable[[], None]) -> float:
    """Host seconds per call of ``calls`` back-to-back calls of ``fn``: synchronised before,
    timed (perf_counter) without synchronising inside, then synchronised after the clock stops,
    so the figure is what the host spends issuing, not what the GPU spends running."""
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    sync()
    return (t1 - t0) / calls


def _profiler_event_cost(
    torch: Any, fn: Callable[[], Any], calls: int, sync: Callable[[], None]
) -> float:
    """Host seconds torch.profiler adds per recorded event while ``fn`` runs: ``calls`` calls
    timed without and then under the profiler (CPU + CUDA activities, record_shapes=True, as
    users record steps), the difference over the cpu_op and CUDA runtime events recorded."""
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    from gpumodel.diagnose.parse import RUNTIME_CATS

    plain = host_s_per_call(fn, calls, sync)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    warm = 2
    with profile(activities=acts, record_shapes=True) as prof:
        for _ in range(warm):
            fn()
        profiled = host_s_per_call(fn, calls, sync)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.json"
        prof.export_chrome_trace(str(path))
        raw = json.loads(path.read_text(encoding="utf-8")).get("traceEvents", [])
    # the events `calibrate --trace` charges the profiler for (gpumodel.tracecal._host_side)
    events = sum(1 for e in raw if e.get("cat") == "cpu_op" or e.get("cat") in RUNTIME_CATS)
    per_call = events / (calls + warm)
    return max(profiled - plain, 0.0) / per_call if per_call else 0.0


def _count_kernels(torch: Any, fn: Callable[[], Any], n_calls: int) -> int:
    """GPU kernels ``fn`` launches per call, from a torch.profiler trace of ``n_calls`` calls."""
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    from gpumodel._io import gunzip, loads_json, max_input_bytes, read_bytes

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n_calls):
            fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.json"
        prof.export_chrome_trace(str(path))
        limit = max_input_bytes()
        raw = read_bytes(path, "profiler trace", limit)
    if raw[:2] == b"\x1f\x8b":
        raw, _ = gunzip(raw, path, "profiler trace", limit)
    events = loads_json(raw.decode("utf-8"), path, "profiler trace").get("traceEvents", [])
    kernels = sum(1 for e in events if e.get("cat") == "kernel")
    return round(kernels / n_calls)


def _compiled_step(torch: Any, notes: dict) -> Callable[[], Any] | None:
    """A torch.compile(mode='reduce-overhead') small MLP, one call per step; None on failure."""
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.SiLU(),
                              torch.nn.Linear(256, 256)).to("cuda", torch.bfloat16)  # fmt: skip
    x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    try:
        cm = torch.compile(mlp, mode="reduce-overhead")
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(4):
                torch.compiler.cudagraph_mark_step_begin()
                cm(x)
        torch.cuda.synchronize()
        notes["compile_s"] = round(time.perf_counter() - t0, 2)
    except Exception as exc:  # inductor needs a C compiler and triton; say why it is missing
        notes["compiled_step"] = f"not measured: {type(exc).__name__}: {exc}"[:300]
        return None

    @torch.no_grad()
    def step() -> None:
        torch.compiler.cudagraph_mark_step_begin()
        cm(x)

    return step
