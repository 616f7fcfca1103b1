#!/usr/bin/env python3
"""Score the training model on the training-step FIT set (``train_fitset.py``'s data).

Unlike ``validation/unseen/evaluate.py`` this set may be fitted to: it is where the training
model's structure and constants are checked while it is being changed. Each record is predicted
with ``gm.predict_training_step`` (eager HF: ``fusion="unfused"``, no recompute, the record's
policy), the GPU's shipped calibration and the host profile measured in the same device call,
for a ModelSpec built from the config the script recorded.

    PYTHONPATH=. python validation/fitset/evaluate_fitset.py validation/results/train-fitset-h100 \
        [--out validation/results/train-fitset-h100/errors.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import gpumodel as gm  # noqa: E402
from gpumodel.llm.models import ModelSpec  # noqa: E402

GPUS = {"H100": "h100", "H200": "h200"}


def spec_from_config(name: str, cfg: dict) -> ModelSpec:
    """A ModelSpec from a recorded HF config (GPT2Config or LlamaConfig)."""
    src = ({"title": "the HF config train_fitset.py built (train-fitset.json)"},)
    if cfg.get("model_type") == "gpt2":
        h, heads = cfg["n_embd"], cfg["n_head"]
        return ModelSpec(id=name, name=name, layers=cfg["n_layer"], hidden=h, heads=heads,
                         kv_heads=heads, head_dim=h // heads, ffn_hidden=cfg.get("n_inner") or 4 * h,
                         ffn_kind="gelu_mlp", vocab=cfg["vocab_size"], tied_embeddings=True,
                         norm="layernorm", position="learned", bias=True,
                         max_context=cfg["n_positions"], attention_dropout=cfg.get("attn_pdrop", 0),
                         sources=src)  # fmt: skip
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    return ModelSpec(id=name, name=name, layers=cfg["num_hidden_layers"], hidden=h, heads=heads,
                     kv_heads=cfg["num_key_value_heads"],
                     head_dim=cfg.get("head_dim") or h // heads,
                     ffn_hidden=cfg["intermediate_size"], ffn_kind="swiglu",
                     vocab=cfg["vocab_size"], tied_embeddings=bool(cfg.get("tie_word_embeddings")),
                     norm="rmsnorm", position="rope", bias=False,
                     max_context=cfg["max_position_embeddings"],
                     attention_dropout=cfg.get("attention_dropout", 0), sources=src)  # fmt: skip


def rows(data_dir: Path, trace: dict | None = None) -> list[dict]:
    """One row per measured point. ``trace``: calibrate from that trace record (its traced
    point's unprofiled median as ``step_ms``) and predict the other points of the same model and
    policy with it (the trace's host, no host profile)."""
    doc = json.loads((data_dir / "train-fitset.json").read_text())
    gpu_name = doc["env"].get("gpu") or ""
    gpu = next((v for k, v in GPUS.items() if k in gpu_name), None)
    if gpu is None:
        raise SystemExit(f"error: no GPU spec for '{gpu_name}'")
    cal = ROOT / "validation" / "results" / f"{gpu}-sxm" / "calibration.yaml"
    host = data_dir / "host.yaml"
    specs = {n: spec_from_config(n, m["config"]) for n, m in doc["models"].items()}
    calibration, host_arg = str(cal), str(host) if host.exists() else None
    if trace is not None:
        p = trace["point"]
        traced = next(r for r in doc["records"] if r["workload"] == p["workload"]
                      and r["policy"] == p["policy"] and r["batch"] == p["batch"]
                      and r["seq"] == p["seq"])  # fmt: skip
        calibration = gm.calibrate_from_trace(data_dir / trace["file"], gpu=gpu,
                                              step_ms=traced["step_s"]["median"] * 1e3)  # fmt: skip
        host_arg = None
    out = []
    for r in doc["records"]:
        st = r.get("step_s")
        if not st:
            continue
        if trace is not None and (r["workload"] != trace["point"]["workload"]
                                  or r["policy"] != trace["point"]["policy"]
                                  or r is traced):  # fmt: skip
            continue
        t = gm.predict_training_step(
            specs[r["workload"]], gpu, 1, micro_batch=r["batch"], global_batch=r["batch"],
            seq=r["seq"], dtype="bf16", recompute="none", fusion="unfused", policy=r["policy"],
            calibration=calibration, host=host_arg,
        )  # fmt: skip
        m = t.memory
        # the 2026-11-24 run kept each run's model and AdamW states alive until the next run's
        # loop released them (before its timed rounds): the peaks are clean, the states
        # figure (taken before that loop) holds them: the memory allocated before the build
        before = r["details"].get("allocated_before_build_bytes") or 0
        peak = r.get("peak_allocated_bytes")
        states = r["details"].get("allocated_after_first_step_bytes")
        out.append({
            "model": r["workload"], "policy": r["policy"], "batch": r["batch"], "seq": r["seq"],
            "measured_s": st["median"], "p10_s": st["p10"], "p90_s": st["p90"],
            "predicted_s": t.time_s, "host_s": t.host_time_s,
            "gpu_s": t.forward_s + t.backward_s + t.optimizer_s,
            "time_err": t.time_s / st["median"] - 1,
            "alloc_measured": peak, "narrow": "narrow" in r["workload"],
            "reserved_measured": r.get("peak_reserved_bytes"),
            "alloc_predicted": m.allocated_bytes, "total_predicted": m.total_bytes,
            "alloc_err": m.allocated_bytes / peak - 1 if peak else None,
            "states_measured": states - before if states is not None else None,
            "states_predicted": m.weights_bytes + m.optimizer_bytes,
        })  # fmt: skip
    return out


def quantile(xs: list[float], q: float) -> float:
    """Linear interpolation between order statistics (as validation/unseen/evaluate.py)."""
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def report(data_dir: Path, rs: list[dict], title: str = "") -> str:
    lines = [title or f"# Training model on the fit set {data_dir.name}", "",
             "| model | policy | batch | seq | measured ms (p10-p90) | predicted ms | host ms | "
             "GPU ms | error | peak alloc GB meas / pred | error | states GB meas / pred |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|---|---:|---|"]  # fmt: skip
    for r in rs:
        am = (r["alloc_measured"] or 0) / 1e9
        sm = (r["states_measured"] or 0) / 1e9
        lines.append(
            f"| {r['model']} | {r['policy']} | {r['batch']} | {r['seq']} | "
            f"{r['measured_s'] * 1e3:.1f} ({r['p10_s'] * 1e3:.1f}-{r['p90_s'] * 1e3:.1f}) | "
            f"{r['predicted_s'] * 1e3:.1f} | {r['host_s'] * 1e3:.1f} | {r['gpu_s'] * 1e3:.1f} | "
            f"{pct(r['time_err'])} | {am:.2f} / {r['alloc_predicted'] / 1e9:.2f} | "
            f"{pct(r['alloc_err'])} | {sm:.2f} / {r['states_predicted'] / 1e9:.2f} |"
        )
    lines += ["", "| policy | n | time median abs err | p90 | peak allocated median abs err |",
              "|---|---:|---:|---:|---:|"]  # fmt: skip
    lines.insert(
        2,
        "Peak allocated: max_memory_allocated less the memory allocated before the "
        "model was built (the previous run's model and AdamW states, kept alive in the "
        "2026-11-24 run). Memory medians leave out the narrow models.\n",
    )
    for pol in sorted({r["policy"] for r in rs}):
        sub = [r for r in rs if r["policy"] == pol]
        te = sorted(abs(r["time_err"]) for r in sub)
        # memory: the narrow models' few MB are workspaces, not the model: left out
        me = [abs(r["alloc_err"]) for r in sub if r["alloc_err"] is not None and not r["narrow"]]
        p90 = quantile(te, 0.9)
        lines.append(f"| {pol} | {len(sub)} | {100 * statistics.median(te):.1f}% | "
                     f"{100 * p90:.1f}% | {100 * statistics.median(me) if me else 0:.1f}% |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    text = report(args.data_dir, rows(args.data_dir))
    doc = json.loads((args.data_dir / "train-fitset.json").read_text())
    for tr in doc.get("traces", []):
        if "error" in tr or not (args.data_dir / tr["file"]).exists():
            continue
        p = tr["point"]
        text += "\n" + report(args.data_dir, rows(args.data_dir, tr),
                              f"## Calibrated from {tr['file']} (b{p['batch']} s{p['seq']}, "
                              "--step-ms), the other points") + "\n"  # fmt: skip
    if args.out:
        tmp = args.out.with_name(f".{args.out.name}.tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
