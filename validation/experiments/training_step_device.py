"""A measured LLM training step on one GPU against ``gpumodel.llm.predict_training_step``.

On a GPU machine (``--out DIR``): a Llama-3-8B-width model with few layers (default 4; random
bf16 weights, HF transformers ``LlamaForCausalLM``, SDPA attention, eager PyTorch, no
activation recompute) runs forward + backward with the loss over every token, for several
(micro-batch, sequence) points; CUDA events time the forward alone and forward + backward
(median of ``--reps`` after warm-up), torch.profiler sums the GPU busy time of one step (so a
host-bound step shows). Separately, a fused AdamW step over fp32 master weights of every
parameter is timed. Everything lands in ``DIR/measurements.json``.

Anywhere (``--from measurements.json --out DIR``): predictions with the current gpumodel (the
shipped calibration of that GPU by default), errors, ``DIR/report.md``. The HF model runs its
norms, RoPE and SwiGLU as separate kernels, so the prediction uses ``fusion="unfused"`` (the
Megatron-style default, ``"fused"`` with FlashAttention-2, is shown too); its SDPA calls ran
cuDNN's attention kernels (torch.profiler), hence ``attention="cudnn"``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

POINTS = [(1, 2048), (2, 2048), (4, 2048), (8, 2048), (1, 4096), (2, 4096), (4, 4096)]
PROFILED = (2, 4096)  # the point whose kernels are listed by name
WIDTHS = dict(hidden=4096, heads=32, kv=8, ffn=14336, vocab=128256)  # Llama-3-8B


def _events(torch, fn, warmup: int, reps: int) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    return out


def _kernel_table(torch, fn) -> dict[str, list[float]]:
    """Kernel name -> [calls, total device seconds] of one call of ``fn`` (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    table: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            row = table.setdefault(e.name, [0, 0.0])
            row[0] += 1
            row[1] += (getattr(e, "device_time", None) or e.cuda_time) / 1e6
    return table


def _time_point(torch, model, batch: int, seq: int, args) -> dict:
    """Forward alone and forward + backward of one (micro-batch, sequence) point."""
    ids = torch.randint(0, WIDTHS["vocab"], (batch, seq), device="cuda")

    def forward():
        return model(input_ids=ids, labels=ids).loss

    def step():
        model.zero_grad(set_to_none=True)
        forward().backward()

    step_table = _kernel_table(torch, step)  # GPU busy time: the kernels of one step
    busy = sum(seconds for _, seconds in step_table.values())
    kernels = int(sum(calls for calls, _ in step_table.values()))
    if (batch, seq) == PROFILED:
        profiled = {"forward": _kernel_table(torch, forward), "step": step_table}
    fwd = _events(torch, forward, args.warmup, args.reps)
    total = _events(torch, step, args.warmup, args.reps)
    point = {"batch": batch, "seq": seq, "forward_s": statistics.median(fwd),
             "step_s": statistics.median(total), "step_spread": (max(total) - min(total))
             / statistics.median(total), "gpu_busy_s": busy, "kernels": kernels}  # fmt: skip
    print(f"b={batch} s={seq}: forward {point['forward_s'] * 1e3:.2f} ms, forward+backward "
          f"{point['step_s'] * 1e3:.2f} ms, GPU busy {busy * 1e3:.2f} ms, {kernels} kernels")  # fmt: skip
    if (batch, seq) == PROFILED:
        point["kernels_by_name"] = profiled
    model.zero_grad(set_to_none=True)
    torch.cuda.empty_cache()
    return point


def measure(args) -> dict:
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        hidden_size=WIDTHS["hidden"], intermediate_size=WIDTHS["ffn"],
        num_hidden_layers=args.layers, num_attention_heads=WIDTHS["heads"],
        num_key_value_heads=WIDTHS["kv"], head_dim=WIDTHS["hidden"] // WIDTHS["heads"],
        vocab_size=WIDTHS["vocab"], max_position_embeddings=8192, rope_theta=500000.0,
        tie_word_embeddings=False, attn_implementation="sdpa",
    )  # fmt: skip
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).train()
    params = sum(p.numel() for p in model.parameters())
    result: dict = {
        "environment": {
            "device": torch.cuda.get_device_name(), "gpu_id": args.gpu,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "cuda": torch.version.cuda,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "model": {"layers": args.layers, **WIDTHS, "params": params},
    }  # fmt: skip
    result["points"] = [_time_point(torch, model, batch, seq, args) for batch, seq in POINTS]

    # fused AdamW over fp32 master weights and fp32 gradients of every parameter
    master = [torch.nn.Parameter(p.detach().float()) for p in model.parameters()]
    for p in master:
        p.grad = torch.randn_like(p) * 1e-3
    del model
    torch.cuda.empty_cache()
    opt = torch.optim.AdamW(master, lr=1e-4, fused=True)
    times = _events(torch, opt.step, 3, args.reps)
    result["adamw_fp32"] = {"params": params, "step_s": statistics.median(times)}
    print(f"fused AdamW, {params / 1e9:.2f} B fp32 params: {statistics.median(times) * 1e3:.2f} ms")
    return result


def report(result: dict, calibration: str | None) -> str:
    import gpumodel as gm
    from gpumodel.llm import ModelSpec, predict_training_step

    env, m = result["environment"], result["model"]
    gpu = gm.get_gpu(env["gpu_id"])
    cal = gm.load_calibration(calibration) if calibration else None
    spec = ModelSpec.model_validate({
        "id": f"llama-3-8b-width-{m['layers']}l", "name": "Llama-3-8B widths", "layers": m["layers"],
        "hidden": m["hidden"], "heads": m["heads"], "kv_heads": m["kv"], "head_dim": m["hidden"] // m["heads"],
        "ffn_hidden": m["ffn"], "ffn_kind": "swiglu", "vocab": m["vocab"], "tied_embeddings": False,
        "norm": "rmsnorm", "max_context": 8192,
        "sources": [{"title": "validation/experiments/training_step_device.py: random-weight LlamaConfig"}],
    })  # fmt: skip
    lines = [
        f"# LLM training step, measured vs predicted on {env['device']}",
        "",
        f"{env['date']}; torch {env['torch']}, transformers {env['transformers']}, CUDA "
        f"{env['cuda']}; gpumodel spec `{gpu.id}`. Model: Llama-3-8B widths with {m['layers']} "
        f"layers ({m['params'] / 1e9:.2f} B parameters), random bf16 weights, HF "
        "LlamaForCausalLM, SDPA, eager, loss over every token, no recompute. Times: CUDA events, "
        "median; GPU busy: torch.profiler kernel sum of one step.",
        "",
        "| batch | seq | measured fwd | pred fwd | err | measured fwd+bwd | GPU busy | pred fwd+bwd "
        "(unfused, cuDNN) | err | pred (fused, FA2) | err |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    errs: dict[str, list[float]] = {"forward": [], "step": [], "fused": []}
    ft = gm.format_time
    for p in result["points"]:
        kw = dict(micro_batch=p["batch"], global_batch=p["batch"], seq=p["seq"],
                  recompute="none", calibration=cal)  # fmt: skip
        un = predict_training_step(spec, gpu, 1, fusion="unfused", attention="cudnn", **kw)
        fu = predict_training_step(spec, gpu, 1, fusion="fused", attention="flash", **kw)
        e_f = un.forward_s / p["forward_s"] - 1
        e_s = (un.forward_s + un.backward_s) / p["step_s"] - 1
        e_u = (fu.forward_s + fu.backward_s) / p["step_s"] - 1
        errs["forward"].append(e_f)
        errs["step"].append(e_s)
        errs["fused"].append(e_u)
        lines.append(
            f"| {p['batch']} | {p['seq']} | {ft(p['forward_s'])} | {ft(un.forward_s)} | "
            f"{100 * e_f:+.1f}% | {ft(p['step_s'])} | {ft(p['gpu_busy_s'])} | "
            f"{ft(un.forward_s + un.backward_s)} | {100 * e_s:+.1f}% | "
            f"{ft(fu.forward_s + fu.backward_s)} | {100 * e_u:+.1f}% |"
        )
    lines += [
        "",
        "| prediction | median abs error | max abs error | bias (median) |",
        "|---|---|---|---|",
    ]
    for name, label in (("forward", "forward (unfused, cuDNN attention)"),
                        ("step", "forward + backward (unfused, cuDNN attention)"),
                        ("fused", "forward + backward (fused, FlashAttention-2: Megatron-style)")):  # fmt: skip
        e = errs[name]
        lines.append(f"| {label} | {100 * statistics.median(abs(x) for x in e):.1f}% | "
                     f"{100 * max(abs(x) for x in e):.1f}% | {100 * statistics.median(e):+.1f}% |")  # fmt: skip
    adam = result.get("adamw_fp32")
    if adam:
        pred = gm.predict(gm.ops.AdamW(params=adam["params"]), gpu, cal)
        lines += ["", f"Fused AdamW over {adam['params'] / 1e9:.2f} B fp32 parameters: measured "
                  f"{ft(adam['step_s'])}, predicted {ft(pred.time_s)} "
                  f"({100 * (pred.time_s / adam['step_s'] - 1):+.1f}%; 28 B per parameter)."]  # fmt: skip
    lines += ["", f"Calibration: {cal.label if cal else 'the shipped one for this GPU'}."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--from", dest="from_file", default=None, help="report a saved run (no GPU)")
    ap.add_argument("--gpu", default="h100-sxm", help="gpumodel spec id of the device")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--calibration", default=None, help="calibration file for the predictions")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.from_file:
        result = json.loads(Path(args.from_file).read_text())
    else:
        result = measure(args)
        (out / "measurements.json").write_text(json.dumps(result, indent=2) + "\n")
    try:
        text = report(result, args.calibration)
    except ImportError as exc:  # the device may lack pydantic: report later with --from
        print(f"no report here ({exc}); run with --from {out / 'measurements.json'}")
        return 0
    (out / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
