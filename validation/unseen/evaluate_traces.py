#!/usr/bin/env python3
"""Score trace calibration on the unseen whole steps (issue #18 item 5). Scores, never fits.

For every torch.profiler trace that `steps_unseen.py` recorded, calibrate from that trace alone
(`gm.calibrate_from_trace`: with the traced point's unprofiled step time as `step_ms`; with it
and the host profile of the trace's machine as `host`, as a user who ran `gpumodel validate
--host-only` there gives both; with the host profile alone) and predict:

- the other points of the traced workload (same model, runtime, phase or policy) on the same
  GPU, with the trace's host and kernel-family fit;
- the same workload's points measured on the other GPU, the calibration carried there
  (`gm.load_calibration(cal, for_gpu=...)`) and that machine's host profile, measured in the
  same device call as its points;
- as a baseline, every one of those points with the shipped calibration and the host profile
  measured in the same call, no trace.

Errors are (predicted - measured) / measured against each point's median over interleaved
rounds (hf-eager decode: over the rounds after the first, whose steps run at new KV
lengths; ``evaluate.steady_s``); the measured spread (p10-p90 of the pooled steps) is printed
beside them. Training points also score the peak allocated memory. Writes a markdown report.

usage (from the checkout, gpumodel importable):
       PYTHONPATH=. python validation/unseen/evaluate_traces.py validation/results/steps-h100 \
           validation/results/steps-h200 --out validation/results/trace-calibration-errors.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from evaluate import model_arg, peak_memory_defect, quantile, steady_s, usable_host_profile
from evaluate import rel_error as rel

import gpumodel as gm
from gpumodel.diagnose.gpus import gpu_from_device_name
from gpumodel.tracecal import GRAPH_RUNTIMES

SCHEMA = "gpumodel-steps-unseen/1"
# the calibrations each point is predicted with, in the report's column order
VARIANTS = (
    "baseline (shipped + measured host)",
    "trace, --step-ms",
    "trace, --step-ms --host",
    "trace, no --step-ms",
)
# with --datasheet: what a user whose GPU has no calibration gets (no `gpumodel validate` run)
DATASHEET_VARIANTS = (
    "datasheet (no calibration) + measured host",
    "trace on the datasheet, --step-ms",
)
MODEL_OF = {
    "llama-3-8b": "llama-3-8b",
    "gpt2-small": "gpt2-small",
    "tinyllama-1.1b": "tinyllama-1.1b",
}


@dataclass
class Machine:
    """The results of one device call: its GPU, its measured host profile, points and traces."""

    root: Path
    gpu: str
    host: Path | None
    records: list[dict] = field(default_factory=list)
    traces: list[dict] = field(default_factory=list)
    # a harness defect of its peak memory stated beside the data (annotations.json): not scored
    peak_defect: str | None = None


def load_machine(root: Path) -> Machine:
    results = [p for p in sorted(root.rglob("*.json")) if _schema(p) == SCHEMA]
    if not results:
        raise SystemExit(f"error: {root}: no {SCHEMA} results")
    hosts = sorted(root.rglob("host*.yaml"))
    first = json.loads(results[0].read_text())
    env = first["env"]
    spec = gpu_from_device_name(env["gpu"], env.get("sm_count"), env.get("gpu_memory_bytes"))
    if spec is None:
        raise SystemExit(f"error: {root}: no spec for the device {env['gpu']!r}")
    gpu = spec.id
    m = Machine(root=root, gpu=gpu, host=hosts[0] if hosts else None,
                peak_defect=peak_memory_defect(root))  # fmt: skip
    for p in results:
        doc = json.loads(p.read_text())
        m.records += [r for r in doc["records"] if r.get("step_s")]
        m.traces += [dict(t, dir=str(root)) for t in doc.get("traces", [])]
    return m


def _schema(path: Path) -> str | None:
    try:
        return json.loads(path.read_text()).get("schema")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None


def workload_key(r: dict) -> tuple:
    """Points of one workload: model, runtime and phase (inference) or policy (training), and
    HF's experts implementation (mixture-of-experts models)."""
    return (r["workload"], r["runtime"], r["phase"], r.get("policy"), r.get("experts"))


def point_key(r: dict) -> tuple:
    return (*workload_key(r), r["batch"], r["seq"], r.get("context", 0))


def predict(r: dict, gpu: str, calibration, host) -> tuple[float, float | None]:
    """Predicted step time (s) and, for training, allocated peak bytes."""
    model = MODEL_OF.get(r["workload"]) or model_arg(r["workload"])
    if r["phase"] == "train":
        res = gm.predict_training_step(model, gpu, 1, micro_batch=r["batch"], global_batch=r["batch"],
                                       seq=r["seq"], policy=r["policy"], fusion="unfused",
                                       recompute="none", calibration=calibration,
                                       host=host)  # fmt: skip
        return res.time_s, res.memory.allocated_bytes
    kw = {"seq": r["seq"]} if r["phase"] == "prefill" else {"context": r["context"]}
    if r.get("experts"):  # HF's experts_implementation: "eager" is the loop
        kw["experts"] = "loop" if r["experts"] == "eager" else r["experts"]
    res = gm.predict_inference(model, gpu, r["phase"], batch=r["batch"], runtime=r["runtime"],
                               calibration=calibration, host=host, allow_oversubscribe=True,
                               **kw)  # fmt: skip
    return res.time_s, None


def summary(errs: list[float]) -> str:
    if not errs:
        return "- | - | 0"
    a = [abs(e) for e in errs]
    return f"{100 * statistics.median(a):.1f}% | {100 * quantile(a, 0.9):.1f}% | {len(a)}"


def evaluate(machines: list[Machine], datasheet: bool = False) -> str:
    names = VARIANTS + (DATASHEET_VARIANTS if datasheet else ())
    lines = ["# Trace calibration on the unseen whole steps", "",
             "Generated by `validation/unseen/evaluate_traces.py` (scores only; nothing here was "
             "fitted to these points). |error| median, p90, n.", ""]  # fmt: skip
    table = ["| trace | predicted on | calibration | step time: median | p90 | n | peak memory: "
             "median | p90 | n |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    detail = ["", "## Every point", "",
              "| trace | GPU | point | measured ms (p10-p90) | baseline | trace, --step-ms | "
              "trace, --step-ms --host | trace (--host) |"
              + (" datasheet | trace on the datasheet |" if datasheet else ""),
              "|---|---|---|---|---:|---:|---:|---:|" + ("---:|---:|" if datasheet else "")]  # fmt: skip
    # issue 18's done-when figures: every other point of the four traced workloads together,
    # per run whose traces were calibrated, GPU predicted on and variant
    pooled: dict[tuple[str, str, str], list[float]] = {}
    for m in machines:
        for t in m.traces:
            path = Path(t["dir"]) / t["file"]
            name = f"{Path(t['dir']).name}/{t['file'].removesuffix('.json.gz')}"
            traced = next((r for r in m.records if _same_point(r, t["point"])), None)
            if traced is None or not path.is_file():
                lines.append(f"- {name}: traced point or file missing; skipped")
                continue
            wl = workload_key(traced)
            model = MODEL_OF.get(traced["workload"]) or model_arg(traced["workload"])
            step_ms = steady_s(traced) * 1e3
            # a graph runtime's trace records no shapes: the traced step is named, as a user
            # names it (--batch --context --phase; ignored for an eager trace)
            step = ({"batch": traced["batch"], "context": traced["context"],
                     "phase": traced["phase"]}
                    if traced.get("runtime") in GRAPH_RUNTIMES else {})  # fmt: skip
            cal_ms = gm.calibrate_from_trace(path, gpu=m.gpu, model=model, step_ms=step_ms,
                                             **step)  # fmt: skip
            # with the host profile of the trace's machine: its profiler cost per event
            # (profiler_event_s, where it has one) and, for an eager inference trace whose host
            # the step time does not settle, its speed; else the defaults
            own_host = str(usable_host_profile(m.host)) if m.host else None
            cal_ms_host = gm.calibrate_from_trace(path, gpu=m.gpu, model=model, step_ms=step_ms,
                                                  host=own_host, **step)  # fmt: skip
            cal_no = gm.calibrate_from_trace(path, gpu=m.gpu, model=model, host=own_host, **step)
            cals = [cal_ms, cal_ms_host, cal_no]
            if datasheet:
                cals.append(gm.calibrate_from_trace(path, gpu=m.gpu, model=model,
                                                    step_ms=step_ms, calibration="none", **step))  # fmt: skip
            for target in machines:
                pts = [r for r in target.records if workload_key(r) == wl
                       and not (target is m and point_key(r) == point_key(traced))]  # fmt: skip
                if not pts:
                    continue
                host = str(usable_host_profile(target.host)) if target.host else None
                variants = {VARIANTS[0]: ("shipped", host)}
                if datasheet:
                    variants[DATASHEET_VARIANTS[0]] = ("none", host)
                traced_variants = VARIANTS[1:] + DATASHEET_VARIANTS[1:] * datasheet
                for variant, cal in zip(traced_variants, cals, strict=True):
                    if target is m:
                        variants[variant] = (cal, None)  # the trace's own host
                    else:
                        variants[variant] = (_carry(cal, target.gpu), host)
                errs: dict[str, tuple[list[float], list[float]]] = {}
                rows: dict[tuple, dict[str, float]] = {}
                for variant, (cal, h) in variants.items():
                    e_t, e_m = errs.setdefault(variant, ([], []))
                    for r in pts:
                        c = None if cal == "shipped" else cal
                        t_s, mem = predict(r, target.gpu, c, h)
                        e = rel(t_s, steady_s(r))
                        e_t.append(e)
                        rows.setdefault(point_key(r), {})[variant] = e
                        if (mem is not None and r.get("peak_allocated_bytes")
                                and not target.peak_defect):  # fmt: skip
                            e_m.append(rel(mem, r["peak_allocated_bytes"]))
                for variant, (e_t, e_m) in errs.items():
                    pooled.setdefault((Path(t["dir"]).name, target.gpu, variant), []).extend(e_t)
                    table.append(f"| {name} | {target.gpu} ({target.root.name}) | {variant} | "
                                 f"{summary(e_t)} | {summary(e_m)} |")  # fmt: skip
                for r in pts:
                    st = r["step_s"]
                    e = rows[point_key(r)]
                    detail.append(
                        f"| {name} | {target.gpu} | b{r['batch']} s{r['seq']} "
                        f"c{r.get('context', 0)} | {st['median'] * 1e3:.2f} ({st['p10'] * 1e3:.2f}-"
                        f"{st['p90'] * 1e3:.2f}) | "
                        + " | ".join(f"{100 * e.get(k, float('nan')):+.1f}%" for k in names)
                        + " |"
                    )  # fmt: skip
    pool = ["", "## Pooled over each run's traces", "",
            "Every other point of the traced workloads together (issue 18's done-when figures: "
            "same GPU, and the other GPU from this GPU's traces).", "",
            "| traces of | predicted on | calibration | step time: median | p90 | n |",
            "|---|---|---|---:|---:|---:|"]  # fmt: skip
    pool += [f"| {run} | {gpu} | {variant} | {summary(e)} |"
             for (run, gpu, variant), e in pooled.items()]  # fmt: skip
    return "\n".join(lines + table + pool + detail) + "\n"


def _same_point(r: dict, key: dict) -> bool:
    return all(r.get(k) == v for k, v in key.items())


def _carry(cal, gpu: str):
    """The calibration as a user carries it: saved, then loaded for the other GPU."""
    with tempfile.TemporaryDirectory() as d:
        path = cal.save(Path(d) / "trace.yaml")
        return gm.load_calibration(path, for_gpu=gpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="steps result directories, one per GPU")
    ap.add_argument("--out", type=Path, help="markdown report (default: stdout)")
    ap.add_argument("--datasheet", action="store_true",
                    help="also score a GPU with no calibration: the datasheet, and the trace "
                    "fitted on it")  # fmt: skip
    args = ap.parse_args()
    text = evaluate([load_machine(d) for d in args.dirs], datasheet=args.datasheet)
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text)


if __name__ == "__main__":
    main()
