#!/usr/bin/env python3
"""Score gpumodel against the unseen measurement sets (issues #16 item 6, #17 item 5, #18 item 5).

Reads the kernel sets (``validation/results/unseen-*/unseen.json``, from ``kernels_unseen.py``) and
the whole-step sets (``validation/results/steps-*/steps-*.json``, from ``steps_unseen.py``),
predicts every record with gpumodel's public API and writes a markdown table of the errors.

This script only *scores* the model: nothing here feeds back into a calibration or a default, and
nothing is tuned to these data. Each record is described to gpumodel the way a user would describe
the workload (shape, dtype, runtime, policy); options a newer gpumodel offers (``condition=`` on
``gm.predict``, ``host=`` / ``policy=`` / HF runtime names on the LLM predictors) are passed only
where the installed API has them (found with ``inspect.signature`` / the parameter's ``Literal``),
so the same script scores every version of the model.

Error of one record: ``predicted / measured - 1`` (signed); tables give n, the median and p90 of
``|error|`` and the median signed error (bias: > 0 means the model predicts too slow).

Calibrations (the files in the repository, not the user cache, so that the result is reproducible):
each GPU's own shipped calibration ``validation/results/<gpu>/calibration.yaml``; for H200 data also
the H100 calibration carried over with ``gm.load_calibration(h100, for_gpu="h200-sxm")`` (what
``--calibration-from`` does), the transfer check.

    python validation/unseen/evaluate.py --out validation/results/unseen-errors.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import glob
import inspect
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "validation" / "results"
if str(ROOT) not in sys.path:  # score the gpumodel of this checkout, not an installed one
    sys.path.insert(0, str(ROOT))

# dtype names of the unseen scripts -> gpumodel's
DTYPES = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "fp8_e4m3": "fp8"}
# runtime names of steps_unseen.py -> the generic runtime of gm.predict_inference before HF names.
# HF runs the prefill of a static-cache generation uncompiled (steps_unseen.py records
# "compile: none" for it), so that phase is eager.
RUNTIME_FALLBACK = {("hf-eager", "decode"): "eager", ("hf-eager", "prefill"): "eager",
                    ("hf-eager", "train"): "eager", ("hf-static-compiled", "decode"): "graph",
                    ("hf-static-compiled", "prefill"): "eager"}  # fmt: skip


# --------------------------------------------------------------------------- arithmetic


def quantile(xs: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default), ``q`` in [0, 1]."""
    s = sorted(xs)
    if not s:
        return math.nan
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def rel_error(predicted: float, measured: float) -> float:
    """Signed relative error ``predicted / measured - 1``."""
    if not (measured > 0 and math.isfinite(measured)):
        raise ValueError(f"measured value must be positive and finite, got {measured!r}")
    return predicted / measured - 1.0


def error_stats(errors: list[float]) -> dict[str, float]:
    """n, median and p90 of |error|, median signed error."""
    a = [abs(e) for e in errors]
    return {"n": len(errors),
            "median_abs": statistics.median(a) if a else math.nan,
            "p90_abs": quantile(a, 0.9),
            "median_signed": statistics.median(errors) if errors else math.nan}  # fmt: skip


def stats_cell(errors: list[float]) -> str:
    """``error_stats`` of ``errors`` as one table cell: 'median% (p90%), signed%' ('-' if none)."""
    if not errors:
        return "-"
    s = error_stats(errors)
    return (f"{100 * s['median_abs']:.1f}% ({100 * s['p90_abs']:.1f}%), "
            f"{100 * s['median_signed']:+.1f}%")  # fmt: skip


def score(rows: list[dict], key: Callable[[dict], tuple]) -> dict[tuple, dict[str, float]]:
    """Group rows that carry ``error`` by ``key(row)`` and give each group's ``error_stats``."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        if r.get("error") is None:
            continue
        k = key(r)
        if k is None:
            continue
        groups.setdefault(k, []).append(r["error"])
    return {k: error_stats(v) for k, v in sorted(groups.items(), key=lambda kv: str(kv[0]))}


# --------------------------------------------------------------------------- API probing


def accepts(fn: Callable, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def literal_values(fn: Callable, name: str) -> tuple | None:
    """The values of a ``Literal[...]`` parameter annotation, or None."""
    try:
        hint = typing.get_type_hints(fn).get(name)
    except Exception:
        return None
    if hint is None:
        return None
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)
    for arg in typing.get_args(hint):  # Optional[Literal[...]]
        if typing.get_origin(arg) is typing.Literal:
            return typing.get_args(arg)
    return None


def call_supported(fn: Callable, args: tuple, required: dict, optional: dict) -> Any:
    """``fn(*args, **required, **the optional ones fn accepts)``."""
    kw = dict(required)
    kw.update({k: v for k, v in optional.items() if v is not None and accepts(fn, k)})
    return fn(*args, **kw)


# --------------------------------------------------------------------------- GPUs, calibrations


def gpu_id_of(env: dict) -> str:
    name = str(env.get("gpu") or env.get("gpu_name") or env.get("device_name") or "")
    for tag, gid in (("H200", "h200-sxm"), ("H100", "h100-sxm")):
        if tag in name:
            return gid
    raise ValueError(f"no gpumodel GPU id for device {name!r}")


@functools.cache
def calibration(gpu_id: str, source_gpu: str | None = None):
    """The repository's calibration of ``source_gpu or gpu_id``, carried to ``gpu_id`` if other."""
    import gpumodel as gm

    src = source_gpu or gpu_id
    path = RESULTS / src / "calibration.yaml"
    if not path.exists():
        return None
    if src == gpu_id:
        return gm.load_calibration(str(path))
    return gm.load_calibration(str(path), for_gpu=gpu_id)


def calibration_text(cal) -> str:
    if cal is None:
        return "datasheet only (no calibration file)"
    try:
        from gpumodel.calibration import calibration_label

        text = calibration_label(cal)
    except Exception:
        text = f"{cal.gpu_id} {cal.backend} {cal.created:%Y-%m-%d}"
    return text.replace(str(ROOT) + os.sep, "")


# --------------------------------------------------------------------------- kernels


def kernel_op(rec: dict):
    """The gpumodel op that describes one kernel record (raises for what it cannot describe)."""
    from gpumodel import ops

    fam, s = rec["family"], rec["shape"]
    if fam == "gemm":
        kw = dict(m=s["M"], n=s["N"], k=s["K"], dtype=DTYPES[rec["dtype"]])
        if "transpose_b" in ops.Gemm.model_fields:  # nn.Linear's layout, as the record says
            kw["transpose_b"] = rec.get("layout") == "x@W.T"
        if "fast_accum" in ops.Gemm.model_fields and rec.get("use_fast_accum") is False:
            kw["fast_accum"] = False  # torch._scaled_mm as the record says it was called
        return ops.Gemm(**kw)
    if fam == "conv2d":
        if s["R"] != s["S"]:
            raise ValueError("non-square conv kernel")
        kw = dict(batch=s["N"], in_channels=s["C"], out_channels=s["K"], height=s["H"],
                  width=s["W"], kernel=s["R"], stride=s["stride"], padding=s["pad"],
                  dtype=DTYPES[rec["dtype"]])  # fmt: skip
        if "layout" in ops.Conv2d.model_fields:
            kw["layout"] = rec["layout"]
        return ops.Conv2d(**kw)
    if fam == "sdpa":
        used = rec.get("backend_used") or rec.get("backend_requested")
        # the memory-efficient backend as its own kernel where the API names it (2026-11-28),
        # else as FlashAttention (both fused kernels)
        impls = typing.get_args(ops.Attention.model_fields["impl"].annotation)
        impl = "naive" if used == "math" else used if used in ("cudnn", "efficient") and used in impls else "flash"
        if rec.get("backend_requested") == "default" and "sdpa" in impls:
            impl = "sdpa"  # SDPA's own pick (2026-12-01): a forced backend costs the host more
        return ops.Attention(batch=s["batch"], heads=s["heads"], seq=s["seq_q"],
                             kv_seq=s["seq_kv"] if s["seq_kv"] != s["seq_q"] else None,
                             kv_heads=s.get("kv_heads") if s.get("kv_heads") != s["heads"] else None,
                             head_dim=s["head_dim"], dtype=DTYPES[rec["dtype"]],
                             causal=bool(rec.get("causal")), impl=impl,
                             backward=rec.get("pass") == "backward",
                             **({"mask": True} if rec.get("mask") else {}))  # fmt: skip
    if fam == "copy":
        kw = dict(bytes=s["bytes"], direction=rec["direction"],
                  pinned=rec["host_memory"] == "pinned")  # fmt: skip
        if "fresh_destination" in ops.HostTransfer.model_fields:  # the record's own API says it
            kw["fresh_destination"] = rec["op"] == "Tensor.cpu()"
        return ops.HostTransfer(**kw)
    raise ValueError(f"unknown family {fam!r}")


# The condition measured as an eager PyTorch loop (one torch call after another, no graph): the
# host issues each call, so with a host profile of the same machine its eager cost is a floor.
EAGER_LOOP = "in-workload"
# A host copy timed by wall clock as a user waits for it: a host profile that timed its own 4 KB
# copies (``host_copy_s``, profiles from 2026-11-28) gives its fixed cost.
COPY_WALL = "per-call-wall"
# The same back-to-back loop captured in a CUDA graph and replayed: the API's "in-graph"
# condition where it has one (2026-11-28), with the same call's host profile's GPU time per
# kernel in a replayed graph; an older API prices it in-workload.
GRAPH_LOOP = "in-workload-graph"


def api_has_in_graph() -> bool:
    import importlib

    module = importlib.import_module("gpumodel.predict")  # the module, not gm.predict
    return "in-graph" in getattr(module, "CONDITIONS", ())


def host_prices(rec: dict, host: Path | None) -> bool:
    """Whether the same call's host profile prices this record (an eager loop's call, or a
    wall-clock copy where the profile timed copies, or a graph replay's kernel)."""
    if host is None:
        return False
    if rec["condition"] == GRAPH_LOOP:
        return api_has_in_graph()
    if rec["condition"] == EAGER_LOOP:
        try:
            return kernel_op(rec).host_kind is not None
        except Exception:  # a record gpumodel cannot describe: scored (and failed) bare
            return False
    return rec["condition"] == COPY_WALL and _times_copies(host)


@functools.cache
def _times_copies(host: Path) -> bool:
    import yaml

    return bool((yaml.safe_load(host.read_text()) or {}).get("host_copy_s"))


def kernel_host_profile(path: Path) -> Path | None:
    """The host profile measured in the same device call as an unseen kernel set (``host-before.yaml``
    beside ``unseen.json`` or one folder up), if the API can use one (``gm.predict(host=)``)."""
    import gpumodel as gm

    if not accepts(gm.predict, "host"):
        return None
    for where in (path.parent, path.parent.parent):
        if (where / "host-before.yaml").exists():
            return where / "host-before.yaml"
    return None


def predict_kernel_range(
    rec: dict, gpu_id: str, cal, host: Path | None = None
) -> tuple[float, tuple[float, float] | None]:
    """The predicted time of a kernel record, and the range the prediction gives for its
    host's measured drift (``time_range_s``, where the API has it and a host profile floors
    the call), else None. ``host``: the host profile that floors an eager loop's calls
    (records of the ``EAGER_LOOP`` condition), or a wall-clock copy's fixed cost
    (``COPY_WALL``, where the profile timed copies)."""
    import gpumodel as gm

    op = kernel_op(rec)
    if host_prices(rec, host):
        condition, l2 = CONDITION_OF_METHOD[rec["condition"]]
        p = gm.predict(op, gpu_id, cal, condition=condition, l2=l2, host=str(host))
        return p.time_s, getattr(p, "time_range_s", None)
    return _predict_kernel_bare(rec, op, gpu_id, cal), None


def _predict_kernel_bare(rec: dict, op, gpu_id: str, cal) -> float:
    import gpumodel as gm

    if not accepts(gm.predict, "condition"):
        opt = {"l2": "cold"}  # every unseen condition streams its inputs from memory
        return call_supported(gm.predict, (op, gpu_id, cal), {}, opt).time_s
    # the API's conditions are "isolated" and "in-workload" (docs/kernel-conditions.md); a
    # measurement method maps to one of them and an L2 state: do_bench times back-to-back
    # repetitions after a flush that writes (L2 full of unpaid dirty lines)
    condition, l2 = CONDITION_OF_METHOD.get(rec["condition"], ("in-workload", "cold"))
    if condition == "in-graph" and not api_has_in_graph():
        condition = "in-workload"
    return gm.predict(op, gpu_id, cal, condition=condition, l2=l2).time_s


CONDITION_OF_METHOD = {
    "isolated": ("isolated", "cold"),
    "in-workload": ("in-workload", "cold"),
    "do_bench": ("in-workload", "dirty"),
    "per-call-wall": ("in-workload", "cold"),  # a copy's wall clock, as a user times it
    GRAPH_LOOP: ("in-graph", "cold"),  # inputs rotate over >= 3x the L2, as in-workload
}


def kernel_group(rec: dict) -> str:
    return "/".join(str(x) for x in (rec["family"], rec["dtype"], rec.get("layout"),
                                     rec["condition"]))  # fmt: skip


def kernel_done_when(rec: dict) -> list[str]:
    """The issue's done-when groups a kernel record belongs to."""
    fam, s, g = rec["family"], rec["shape"], []
    if fam == "gemm":
        if s["M"] <= 128:
            g.append(f"GEMM M<=128 {rec['dtype']}")
        if s["N"] % 8 or s["K"] % 8:
            g.append("GEMM misaligned N or K (50257, 1025, 2049, 4097)")
        if rec["dtype"] == "fp8_e4m3":
            g.append("GEMM fp8")
    elif fam == "conv2d":
        g.append(f"conv2d {rec['dtype']} {rec['layout']}")
    elif fam == "copy":
        if 4096 <= s["bytes"] <= 2**30:
            g.append(f"copy 4KB-1GB {rec['direction']} {rec['host_memory']}")
    elif fam == "sdpa":
        kind = ("decode" if rec.get("decode") else "short query" if rec.get("short_query")
                else "masked" if rec.get("mask") else "causal" if rec.get("causal") else "full")  # fmt: skip
        g.append(f"sdpa {kind}"
                 + (" backward" if rec.get("pass") == "backward" else ""))
    return g


def evaluate_kernels(
    paths: list[Path], cal_for: Callable[[str], list[tuple[str, Any]]]
) -> list[dict]:
    """One row per (record, calibration): measured, predicted, error or the reason it failed."""
    rows = []
    for path in paths:
        data = json.loads(path.read_text())
        gpu_id = gpu_id_of(data.get("env") or {})
        host = kernel_host_profile(path)
        for index, rec in enumerate(data.get("records", [])):
            meas = rec.get("time_s_median")
            hosts = [("", None)]
            if host_prices(rec, host):
                hosts.insert(0, (" + host profile", host))
            for (cal_name0, cal), (host_name, host_path) in (
                (c, h) for c in cal_for(gpu_id) for h in hosts
            ):
                cal_name = cal_name0 + host_name
                row = {"source": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
                       "index": index, "gpu": gpu_id, "calibration": cal_name,
                       "group": kernel_group(rec),
                       "done_when": kernel_done_when(rec), "condition": rec["condition"],
                       "measured_s": meas, "predicted_s": None, "error": None, "why": None,
                       "launch_bound": bool(rec.get("launch_bound"))}  # fmt: skip
                try:
                    row["predicted_s"], row["range"] = predict_kernel_range(rec, gpu_id, cal,
                                                                            host_path)  # fmt: skip
                    row["error"] = rel_error(row["predicted_s"], meas)
                except Exception as exc:
                    row["why"] = f"{type(exc).__name__}: {exc}"[:160]
                rows.append(row)
    return rows


# --------------------------------------------------------------------------- steps


def _runtime_arg(fn: Callable, runtime: str, phase: str) -> str:
    allowed = literal_values(fn, "runtime")
    if allowed is None or runtime in allowed:
        return runtime
    return RUNTIME_FALLBACK.get((runtime, phase), runtime)


HOST_PARAMS = ("host", "host_profile")


def host_param() -> str | None:
    """The host-profile parameter of the LLM predictors, if this gpumodel has one."""
    import gpumodel as gm

    fn = gm.predict_inference
    return next((n for n in HOST_PARAMS if accepts(fn, n)), None)


# The first device runs' host profiles timed their HF decoder layer at head_dim 32 over a cache
# that grew every call: torch 2.11 sent that SDPA to cuDNN and rebuilt its plan each call
# (45-63 ms; 1.2 ms without cuDNN). Their other figures stand; that one is left out, with a note.
BAD_LAYER_SETUP = "LlamaDecoderLayer hidden 256"
_FIXED_HOSTS: dict[Path, Path] = {}


def usable_host_profile(path: Path) -> Path:
    """``path``, or a copy without ``hf_decoder_layer_s`` if it was timed by the faulty setup."""
    if BAD_LAYER_SETUP not in path.read_text():
        return path
    if path not in _FIXED_HOSTS:
        import yaml

        data = yaml.safe_load(path.read_text())
        for key in ("hf_decoder_layer_s", "hf_decoder_layer_kernels"):
            data.pop(key, None)
            (data.get("spread") or {}).pop(key, None)
        fixed = Path(tempfile.mkdtemp()) / path.name
        fixed.write_text(yaml.safe_dump(data))
        _FIXED_HOSTS[path] = fixed
    return _FIXED_HOSTS[path]


def model_arg(workload: str) -> str:
    """The model a workload names: a preset of the gpumodel under test, else the model file a
    user wrote for it (``validation/unseen/models/<workload>.yaml``, the fields of the day)."""
    import gpumodel as gm

    try:
        gm.get_model(workload)
        return workload
    except Exception:
        path = Path(__file__).resolve().parent / "models" / f"{workload}.yaml"
        return str(path) if path.is_file() else workload


def call_with_host(fn: Callable, args: tuple, req: dict, opt: dict, host_path: Path | None) -> Any:
    """``call_supported`` with the host profile passed as a path, else as the loaded mapping."""
    name = next((n for n in HOST_PARAMS if accepts(fn, n)), None)
    if name is None or host_path is None:
        return call_supported(fn, args, req, opt)
    host_path = usable_host_profile(host_path)
    try:
        return call_supported(fn, args, req, {**opt, name: str(host_path)})
    except Exception:
        import yaml

        return call_supported(fn, args, req, {**opt, name: yaml.safe_load(host_path.read_text())})


def predict_step(
    rec: dict, gpu_id: str, cal, host_path: Path | None, new_shapes: bool = False
) -> tuple[float, float | None, str, tuple[float, float] | None]:
    """(predicted step seconds, predicted peak bytes or None, the runtime name passed or '-',
    the predicted range under the host's drift or None); ``new_shapes``: the step is the first
    at its attention shapes in the process."""
    import gpumodel as gm

    if rec["phase"] in ("decode", "prefill"):
        fn = gm.predict_inference
        rt = _runtime_arg(fn, rec["runtime"], rec["phase"])
        req = {"phase": rec["phase"], "batch": rec["batch"], "dtype": "bf16", "runtime": rt,
               "calibration": cal}  # fmt: skip
        if rec.get("gpus", 1) > 1:  # tensor parallel (multi_gpu_unseen.py)
            req.update(gpus=rec["gpus"], tp=rec.get("tp") or rec["gpus"])
        if rec["phase"] == "decode":
            req["context"] = rec["context"]
        else:
            req["seq"] = rec["seq"]
        # the HF eager runtime's DynamicCache concatenates; the graph runtimes write in place
        opt = {"kv_cache": "concat" if rec["runtime"] == "hf-eager" else "static"}
        if rec.get("mask") == "padding" and accepts(fn, "gqa"):
            opt["gqa"] = "repeat"  # how a user says "a padded batch" (HF then masks)
        if rec.get("experts") and accepts(fn, "experts"):  # HF's experts_implementation
            opt["experts"] = "loop" if rec["experts"] == "eager" else rec["experts"]
        if new_shapes:
            if not accepts(fn, "new_shapes"):
                raise TypeError("this gpumodel cannot price new attention shapes")
            opt["new_shapes"] = True
        try:
            res = call_with_host(fn, (model_arg(rec["workload"]), gpu_id), req, opt, host_path)
        except Exception:
            # an API whose runtime annotation does not list its names may still reject HF names
            fallback = RUNTIME_FALLBACK.get((rec["runtime"], rec["phase"]))
            if fallback is None or fallback == rt:
                raise
            rt = req["runtime"] = fallback
            res = call_with_host(fn, (model_arg(rec["workload"]), gpu_id), req, opt, host_path)
        return res.step_time_s, None, rt, getattr(res, "time_range_s", None)
    fn = gm.predict_training_step
    # data parallel over ``gpus`` (DDP, multi_gpu_unseen.py): the batch is per GPU
    gpus = rec.get("gpus", 1)
    # the matmuls' dtype: bf16 (amp's autocast, bf16 models) unless the record says (fp32
    # training: fp32, or tf32 with TF32 matmuls on)
    req = {"micro_batch": rec["batch"], "global_batch": rec["batch"] * gpus, "seq": rec["seq"],
           "dtype": rec.get("dtype", "bf16"), "calibration": cal, "recompute": "none"}  # fmt: skip
    opt: dict[str, Any] = {"policy": rec.get("policy"), "fusion": "unfused"}
    if rec.get("dp", 1) > 1:  # PyTorch DDP (ZeRO 0: gpumodel's default is ZeRO-1) or FSDP (3)
        req["zero"] = rec.get("zero", 0)
    rt = "-"
    if accepts(fn, "runtime"):
        rt = _runtime_arg(fn, rec["runtime"], rec["phase"])
        opt["runtime"] = rt
    res = call_with_host(fn, (model_arg(rec["workload"]), gpu_id, gpus), req, opt, host_path)
    mem = getattr(res, "memory", None)
    # like for like: the measured figure is torch.cuda.max_memory_allocated, which holds neither
    # the CUDA context / workspaces (``overhead_bytes``) nor allocator fragmentation; the model's
    # ``allocated_bytes`` is its total without those two (older APIs: the total)
    peak = None
    if mem is not None:
        peak = getattr(mem, "allocated_bytes", None) or getattr(mem, "total_bytes", None)
    return res.step_time_s, peak, rt, getattr(res, "time_range_s", None)


# The decode rounds' first: every step of the first round runs at a KV length the process has
# not run before (each round restarts its cache at ``context``, so later rounds revisit them).
FIRST_ROUND = "decode hf-eager, first round (new KV lengths)"


def _eager_decode_rounds(rec: dict) -> list[list[float]] | None:
    rounds = rec.get("steps_s")
    if rec["phase"] != "decode" or rec["runtime"] != "hf-eager" or not rounds or not rounds[0]:
        return None
    return rounds


def first_round_s(rec: dict) -> float | None:
    """Median of the first round's steps of an hf-eager decode record; None for the rest."""
    rounds = _eager_decode_rounds(rec)
    return None if rounds is None else quantile(rounds[0], 0.5)


def steady_s(rec: dict) -> float | None:
    """The measured steady-state step: for an hf-eager decode record with rounds, the median of
    the steps after the first round (lengths the process has run: the prediction's default),
    else the record's median over all its steps."""
    st = rec.get("step_s")
    rounds = _eager_decode_rounds(rec)
    later = [x for r in (rounds or [])[1:] for x in r]
    if later:
        return quantile(later, 0.5)
    return st["median"] if st else None


def step_done_when(rec: dict) -> list[str]:
    g = []
    if rec.get("mask") == "padding":  # a set of its own, not the groups
        g.append(f"{rec['phase']} {rec['runtime']} padded")
    elif rec["phase"] in ("decode", "prefill"):
        g.append(f"{rec['phase']} {rec['runtime']}")
        if rec["runtime"] == "hf-eager" and rec["phase"] == "decode" and rec["batch"] == 32 \
                and rec["context"] == 4096:  # fmt: skip
            g.append("decode batch-32 x ctx-4096 hf-eager")
    else:
        g.append(f"training time {rec.get('policy')}")
    return g


def peak_memory_defect(run_dir: Path) -> str | None:
    """A harness defect of a run's peak memory, found after it and stated beside its data
    (``annotations.json``, never edited into the data): its peaks are then not scored."""
    notes = run_dir / "annotations.json"
    return json.loads(notes.read_text()).get("peak_memory") if notes.is_file() else None


def evaluate_steps(
    paths: list[Path], cal_for: Callable[[str], list[tuple[str, Any]]]
) -> list[dict]:
    rows = []
    for path in paths:
        data = json.loads(path.read_text())
        if data.get("tiny"):
            continue
        gpu_id = gpu_id_of(data.get("env") or {})
        measured_host = path.parent / data["host_profile"] if data.get("host_profile") else None
        peak_defect = peak_memory_defect(path.parent)
        # with the host profile measured in the same process (where the API takes one), and
        # with the model's default host costs
        hosts = [("", None)]
        if measured_host is not None and host_param() is not None:
            hosts.insert(0, (" + host profile", measured_host))
        for rec in data.get("records", []):
            st = rec.get("step_s")
            for (cal_name0, cal), (host_name, host_path) in (
                (c, h) for c in cal_for(gpu_id) for h in hosts
            ):
                cal_name = cal_name0 + host_name
                base = {"source": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
                        "gpu": gpu_id, "calibration": cal_name,
                        "workload": rec["workload"] + (" padded" if rec.get("mask") else ""),
                        "runtime": rec["runtime"], "phase": rec["phase"],
                        "policy": rec.get("policy"), "batch": rec["batch"], "seq": rec["seq"],
                        "context": rec.get("context"), "status": rec.get("status"),
                        "gpus": rec.get("gpus", 1), "tp": rec.get("tp") or 1,
                        "dp": rec.get("dp") or 1, "zero": rec.get("zero") or 0}  # fmt: skip
                row = {**base, "metric": "time", "group": None, "done_when": step_done_when(rec),
                       "measured": steady_s(rec), "predicted": None,
                       "error": None, "why": None, "runtime_passed": None}  # fmt: skip
                mrow = None
                if rec["phase"] == "train" and rec.get("peak_allocated_bytes"):
                    mrow = {**base, "metric": "peak memory", "group": None,
                            "done_when": [f"training peak memory {rec.get('policy')}"],
                            "measured": rec["peak_allocated_bytes"], "predicted": None,
                            "error": None, "why": None, "runtime_passed": None}  # fmt: skip
                    if peak_defect:
                        rows.append({**mrow, "why": f"not scored: {peak_defect}"[:160]})
                        mrow = None
                if not st:
                    row["why"] = f"not measured ({rec.get('status')}: {rec.get('error')})"[:160]
                else:
                    try:
                        t, peak, rt, rng = predict_step(rec, gpu_id, cal, host_path)
                        row.update(predicted=t, error=rel_error(t, row["measured"]), runtime_passed=rt,
                                   range=rng)  # fmt: skip
                        if mrow is not None:
                            if peak is None:
                                mrow["why"] = "no memory prediction"
                            else:
                                mrow.update(predicted=peak, error=rel_error(peak, mrow["measured"]),
                                            runtime_passed=rt)  # fmt: skip
                    except Exception as exc:
                        row["why"] = f"{type(exc).__name__}: {exc}"[:160]
                        if mrow is not None:
                            mrow["why"] = row["why"]
                rows.append(row)
                if mrow is not None:
                    rows.append(mrow)
                first = first_round_s(rec)
                if first is not None:
                    frow = {**base, "metric": "time, first round", "group": None,
                            "done_when": [FIRST_ROUND + (" padded" if rec.get("mask") else "")],
                            "measured": first, "predicted": None,
                            "error": None, "why": None, "runtime_passed": None}  # fmt: skip
                    try:
                        t, _, rt, rng = predict_step(rec, gpu_id, cal, host_path, new_shapes=True)
                        frow.update(predicted=t, error=rel_error(t, first), runtime_passed=rt,
                                    range=rng)  # fmt: skip
                    except Exception as exc:
                        frow["why"] = f"{type(exc).__name__}: {exc}"[:160]
                    rows.append(frow)
    return rows


# --------------------------------------------------------------------------- report


def _num(v: float | None, unit: float) -> str:
    return "-" if v is None else f"{v * unit:.2f}"


def _pct(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def stats_table(title_cols: list[str], table: dict[tuple, dict[str, float]]) -> str:
    head = "| " + " | ".join(title_cols) + " | n | median abs err | p90 abs err | median signed |"
    sep = "|" + "---|" * len(title_cols) + "---:|---:|---:|---:|"
    lines = [head, sep]
    for k, s in table.items():
        lines.append("| " + " | ".join(str(x) for x in k) + f" | {s['n']} | {_pct(s['median_abs'])}"
                     f" | {_pct(s['p90_abs'])} | {_pct(s['median_signed'])} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _inside(r: dict) -> bool:
    lo, hi = r["range"]
    measured = r["measured"] if "measured" in r else r["measured_s"]  # a step's, a kernel's
    return lo <= measured <= hi


def _range_text(r: dict, fmt: Callable, suffix: str) -> str:
    rng = r.get("range")
    if not rng:
        return "-"
    return f"{fmt(rng[0])}-{fmt(rng[1])}{suffix} ({'in' if _inside(r) else 'out'})"


def range_table(rows: list[dict], what: str = "Whole steps", unit: str = "step") -> str:
    """How many measured steps (or eager kernel loops) fall inside the range the prediction
    gives for the host's measured drift (``time_range_s``: the host at the p10 and p90 of its
    profile's drift), per done-when group; only predictions that gave a range."""
    groups: dict[tuple, list[bool]] = {}
    for r in rows:
        if r.get("range"):
            for g in r["done_when"]:
                key = (r["gpu"], r["calibration"], g, r.get("metric", r.get("condition")))
                groups.setdefault(key, []).append(_inside(r))
    lines = [f"\n## {what}: inside the predicted host-drift range\n",
             f"The prediction's `time_range_s`: the {unit} with the host at the p10 and p90 of "
             "the drift its host profile measured. Where the host drifts during the run as it did "
             f"while the profile measured it, about 80% of host-bound {unit}s fall inside.\n",
             "| gpu | calibration | group | metric | n | inside | share |",
             "|---|---|---|---|---:|---:|---:|"]  # fmt: skip
    for key in sorted(groups):
        ins = groups[key]
        lines.append(f"| {' | '.join(key)} | {len(ins)} | {sum(ins)} | {sum(ins) / len(ins):.0%} |")
    if not groups:
        lines.append("| (no prediction gave a range) | | | | | | |")
    return "\n".join(lines) + "\n"


def git_head() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)  # fmt: skip
        return out.stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def failures(rows: list[dict]) -> str:
    counts: dict[tuple, int] = {}
    for r in rows:
        if r.get("error") is None:
            k = (r["gpu"], r["calibration"], r.get("group") or r.get("workload"), r["why"])
            counts[k] = counts.get(k, 0) + 1
    if not counts:
        return "none\n"
    lines = ["| gpu | calibration | group | n | why |", "|---|---|---|---:|---|"]
    for (g, c, grp, why), n in sorted(counts.items(), key=str):
        lines.append(f"| {g} | {c} | {grp} | {n} | {why} |")
    return "\n".join(lines) + "\n"


def api_notes() -> list[str]:
    import gpumodel as gm

    notes = []
    notes.append("`gm.predict(condition=)`: " + ("passed (the record's condition)" if
                 accepts(gm.predict, "condition") else "not in this API; `l2='cold'` for all"))  # fmt: skip
    for name in ("predict_inference", "predict_training_step"):
        fn = getattr(gm, name)
        have = [
            p for p in (*HOST_PARAMS, "policy", "runtime", "kv_cache", "fusion") if accepts(fn, p)
        ]
        rts = literal_values(fn, "runtime")
        notes.append(f"`gm.{name}`: accepts {', '.join(have) or 'none of host/policy/runtime/kv_cache/fusion'}"
                     + (f"; runtime values {list(rts)}" if rts else ""))  # fmt: skip
    return notes


def report(krows: list[dict], srows: list[dict], kpaths: list[Path], spaths: list[Path],
           cal_names: dict[str, str]) -> str:  # fmt: skip
    out = ["# gpumodel on the unseen sets: prediction errors\n",
           f"Generated {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC by "
           f"`validation/unseen/evaluate.py` at commit `{git_head()}`. The unseen data were never "
           "used to fit or tune the model (validation/unseen/README.md). Error = predicted / "
           "measured - 1; |err| statistics per group.\n",
           "Data: " + ", ".join(f"`{p.relative_to(ROOT)}`" for p in kpaths + spaths) + "\n",
           "Calibrations:\n" + "\n".join(f"- `{k}`: {v}" for k, v in cal_names.items()) + "\n",
           "API used:\n" + "\n".join(f"- {n}" for n in api_notes()) + "\n"]  # fmt: skip
    ok_k = [r for r in krows if r["error"] is not None]
    ok_s = [r for r in srows if r["error"] is not None]
    out.append("## Headline\n")
    head = [dict(r, _w="kernels " + r["condition"]) for r in ok_k]
    head += [dict(r, _w=f"steps {r['metric']}") for r in ok_s]
    out.append(stats_table(["gpu", "calibration", "what"],
                           score(head, lambda r: (r["gpu"], r["calibration"], r["_w"]))))  # fmt: skip
    out.append("\n## Kernels: the issue's done-when groups\n")
    out.append(stats_table(["gpu", "calibration", "group", "condition"],
                           score([dict(r, _g=g) for r in ok_k for g in r["done_when"]],
                                 lambda r: (r["gpu"], r["calibration"], r["_g"], r["condition"]))))  # fmt: skip
    out.append("\n## Kernels: per family / dtype / layout / condition\n")
    out.append(stats_table(["gpu", "calibration", "family/dtype/layout/condition"],
                           score(ok_k, lambda r: (r["gpu"], r["calibration"], r["group"]))))  # fmt: skip
    out.append(
        "\nLaunch-bound records (host enqueue >= 90% of GPU time in the eager loop) only:\n\n"
    )
    out.append(stats_table(["gpu", "calibration", "condition"],
                           score([r for r in ok_k if r["launch_bound"]],
                                 lambda r: (r["gpu"], r["calibration"], r["condition"]))))  # fmt: skip
    if any(r.get("range") for r in ok_k):
        out.append(range_table([r for r in ok_k if r["launch_bound"]],
                               "Launch-bound eager loops", "call"))  # fmt: skip
    out.append("\n## Whole steps: the issue's done-when groups\n")
    out.append(stats_table(["gpu", "calibration", "group", "metric"],
                           score([dict(r, _g=g) for r in ok_s for g in r["done_when"]],
                                 lambda r: (r["gpu"], r["calibration"], r["_g"], r["metric"]))))  # fmt: skip
    out.append(range_table(ok_s))
    out.append("\n## Whole steps: per workload / runtime / phase / policy\n")
    out.append(stats_table(["gpu", "calibration", "workload", "runtime", "phase", "policy", "metric"],
                           score(ok_s, lambda r: (r["gpu"], r["calibration"], r["workload"],
                                 r["runtime"], r["phase"], r["policy"], r["metric"]))))  # fmt: skip
    out.append("\n## Whole steps: every point\n")
    lines = ["| gpu | calibration | workload | runtime (passed) | phase | policy | batch | seq | "
             "metric | measured | predicted | error | host-drift range |",
             "|---|---|---|---|---|---|---:|---:|---|---:|---:|---:|---|"]  # fmt: skip
    for r in srows:
        unit = 1e3 if r["metric"].startswith("time") else 1 / 2**30
        fmt = functools.partial(_num, unit=unit)
        suffix = " ms" if r["metric"].startswith("time") else " GiB"
        lines.append(f"| {r['gpu']} | {r['calibration']} | {r['workload']} | {r['runtime']}"
                     f" ({r['runtime_passed'] or '-'}) | {r['phase']} | {r['policy']} | {r['batch']}"
                     f" | {r['seq']} | {r['metric']} | {fmt(r['measured'])}{suffix} |"
                     f" {fmt(r['predicted'])}{suffix} | "
                     f"{_pct(r['error']) if r['error'] is not None else r['why']} | "
                     f"{_range_text(r, fmt, suffix)} |")  # fmt: skip
    out.append("\n".join(lines) + "\n")
    out.append("\n## Records not predicted\n")
    out.append(failures(krows + srows))
    return "\n".join(out)


def emit_report(text: str, out: Path | None) -> int:
    """A rescoring script's ending: ``text`` printed, and written atomically to ``out`` if
    given; returns the exit code 0."""
    if out:
        atomic_write(out, text)
    print(text)
    return 0


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="markdown report path")
    ap.add_argument(
        "--kernels",
        nargs="*",
        default=None,
        help="unseen.json files (default validation/results/unseen-*/unseen.json)",
    )
    ap.add_argument(
        "--steps",
        nargs="*",
        default=None,
        help="steps-*.json files (default validation/results/steps-*/steps-*.json)",
    )
    ap.add_argument("--json-out", default=None, help="also write every scored row as JSON")
    ap.add_argument(
        "--calibration",
        action="append",
        default=[],
        metavar="GPU=PATH",
        help="also score that GPU's data with this calibration, named 'same machine' (a "
        "validate run on the machine that measured the set, in the same device call)",
    )
    args = ap.parse_args(argv)
    extra: dict[str, Any] = {}
    for item in args.calibration:
        gpu_id, _, path = item.partition("=")
        if not path or not Path(path).is_file():
            print(f"error: --calibration wants GPU=PATH of a file, got {item!r}", file=sys.stderr)
            return 2
        import gpumodel as gm

        extra[gpu_id] = gm.load_calibration(str(Path(path).resolve()))
    res = RESULTS
    kpaths = [Path(p).resolve() for p in (args.kernels if args.kernels is not None else
                                          sorted(glob.glob(str(res / "unseen-*" / "unseen.json"))))]  # fmt: skip
    spaths = [Path(p).resolve() for p in (args.steps if args.steps is not None else
                                          sorted(glob.glob(str(res / "steps-*" / "steps-*.json"))))]  # fmt: skip
    missing = [p for p in kpaths + spaths if not p.is_file()]
    if missing:
        print(f"error: no such file: {missing[0]}", file=sys.stderr)
        return 2
    cal_names: dict[str, str] = {}

    def cal_for(gpu_id: str) -> list[tuple[str, Any]]:
        out = [(f"{gpu_id} own", calibration(gpu_id))]
        if gpu_id != "h100-sxm":
            out.append(("from h100-sxm", calibration(gpu_id, "h100-sxm")))
        if gpu_id in extra:
            out.append(("same machine", extra[gpu_id]))
        for name, cal in out:
            cal_names.setdefault(f"{gpu_id}: {name}", calibration_text(cal))
        return out

    krows = evaluate_kernels(kpaths, cal_for)
    srows = evaluate_steps(spaths, cal_for)
    atomic_write(Path(args.out), report(krows, srows, kpaths, spaths, cal_names))
    if args.json_out:
        atomic_write(Path(args.json_out), json.dumps({"kernels": krows, "steps": srows}, indent=1))
    n_ok = sum(r["error"] is not None for r in krows + srows)
    print(f"{n_ok} of {len(krows) + len(srows)} rows scored -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
