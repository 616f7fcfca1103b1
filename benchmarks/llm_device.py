"""Measure a Llama-style model on the GPU and compare with gpumodel.predict_inference.

Runs on the GPU machine (torch + transformers; nothing is downloaded: the model is built from a
LlamaConfig with random weights). Llama-3-8B's widths with fewer layers (default 4), bf16, SDPA
attention, eager PyTorch, Hugging Face DynamicCache:

    python3 benchmarks/llm_device.py --out /tmp/llm [--layers 4] [--quick] [--no-graph]

What it measures (CUDA events around each step, after warm-up; median and p90 of the reps):
  * host cost of eager PyTorch: a loop of tiny aten ops (one kernel each), and a tiny-width
    model of the same depth (GPU time negligible) whose decode step time / predicted kernels is
    the host cost per kernel of an HF model; a CUDA graph of tiny kernels for the GPU-side cost;
    kernel counts of a decode and a prefill step from torch.profiler vs the model's count
  * a micro-calibration: bf16 GEMM efficiency (8192^3), weight-streaming GEMM bandwidth
    (16 x 14336 x 4096), device copy bandwidth
  * prefill at several (batch, seq) and decode at several (batch, context)
  * optionally decode replayed from a manually captured CUDA graph with a StaticCache

Predictions, for each measured point: "default" (whatever calibration gpumodel finds for this
GPU, else the datasheet, and the default host cost) and "calibrated" (the micro-calibration and
the measured host cost, passed as a Calibration). Writes measurements.json and report.md
(median and p90 |error| for prefill and decode) to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PREFILL = [(1, 128), (1, 512), (1, 2048), (1, 4096), (4, 512), (4, 2048), (8, 1024)]
DECODE = [(1, 128), (1, 1024), (1, 4096), (8, 512), (8, 2048), (32, 1024), (64, 2048)]
QUICK_PREFILL = [(1, 512), (4, 2048)]
QUICK_DECODE = [(1, 1024), (8, 2048)]

GPU_IDS = [  # torch device name fragment -> gpumodel spec id
    ("H100 NVL", "h100-nvl"), ("H100 PCIe", "h100-pcie"), ("H100", "h100-sxm"),
    ("H200", "h200-sxm"), ("B200", "b200"), ("A100-SXM4-80GB", "a100-sxm4-80gb"),
    ("A100-PCIE-40GB", "a100-pcie-40gb"), ("L40S", "l40s"), ("L4", "l4"), ("A10G", "a10g"),
]  # fmt: skip


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def timed(torch, fn, warmup: int, reps: int, before=None) -> list[float]:
    """Seconds per call from CUDA events, after warm-up; ``before`` runs untimed each rep."""
    for _ in range(warmup):
        if before:
            before()
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        if before:
            before()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1e3)
    return out


def count_kernels(torch, fn) -> int | None:
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    except Exception:  # the profiler's availability varies; the count is optional
        return None


def llama_config(transformers, layers: int, hidden: int, heads: int, kv: int, ffn: int,
                 vocab: int, ctx: int):  # fmt: skip
    cfg = transformers.LlamaConfig(
        hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, head_dim=hidden // heads,
        vocab_size=vocab, max_position_embeddings=ctx, rope_theta=500000.0,
        tie_word_embeddings=False, attn_implementation="sdpa",
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    return cfg


def build(torch, transformers, cfg):
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = transformers.LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    return model.to(torch.bfloat16).eval()


def spec_for(model_spec_cls, cfg, name: str):
    return model_spec_cls.model_validate({
        "id": name, "name": name, "layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size,
        "heads": cfg.num_attention_heads, "kv_heads": cfg.num_key_value_heads,
        "head_dim": cfg.hidden_size // cfg.num_attention_heads,
        "ffn_hidden": cfg.intermediate_size, "ffn_kind": "swiglu", "vocab": cfg.vocab_size,
        "tied_embeddings": False, "norm": "rmsnorm", "max_context": cfg.max_position_embeddings,
        "sources": [{"title": "benchmarks/llm_device.py: random-weight LlamaConfig"}],
    })  # fmt: skip


class Runner:
    """Prefill and decode steps of one HF model."""

    def __init__(self, torch, model, vocab: int):
        self.torch, self.model, self.vocab = torch, model, vocab

    def ids(self, batch: int, seq: int):
        return self.torch.randint(0, self.vocab, (batch, seq), device="cuda")

    def prefill_fn(self, batch: int, seq: int):
        ids = self.ids(batch, seq)
        return lambda: self.model(input_ids=ids, use_cache=True, logits_to_keep=1)

    def decode_fns(self, batch: int, context: int):
        """(step, reset): step decodes one token at ``context`` keys; reset crops the cache."""
        out = self.model(input_ids=self.ids(batch, context - 1), use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        tok = self.ids(batch, 1)

        def step():
            return self.model(input_ids=tok, past_key_values=cache, use_cache=True,
                              logits_to_keep=1)  # fmt: skip

        def reset():
            cache.crop(context - 1)

        return step, reset


def host_loop(torch, n: int = 2000) -> float:
    """Host seconds per tiny aten op (x.add_(1) on one element), GPU never the bottleneck."""
    x = torch.zeros(1, device="cuda")
    for _ in range(200):
        x.add_(1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n


def graph_kernel_cost(torch, n: int = 200) -> float | None:
    """GPU seconds per tiny kernel replayed back to back from a CUDA graph."""
    try:
        x = torch.zeros(1, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                x.add_(1)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                x.add_(1)
        times = timed(torch, g.replay, 3, 10)
        return statistics.median(times) / n
    except Exception:  # graph capture unsupported here: leave the GPU-side floor uncalibrated
        return None


def micro_calibration(torch, gm, gpu) -> dict:
    """GEMM efficiency, weight-streaming bandwidth efficiency and copy bandwidth efficiency."""
    peak = gpu.peak_flops("bf16", "tensor")
    bw = gpu.memory_bandwidth_bytes_per_s
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t = statistics.median(timed(torch, lambda: a @ b, 3, 10))
    gemm_eff = 2 * n**3 / t / peak
    m, nn, k = 16, 14336, 4096
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(k, nn, device="cuda", dtype=torch.bfloat16)
    t_small = statistics.median(timed(torch, lambda: x @ w, 5, 30))
    small_bytes = 2 * (m * k + k * nn + m * nn)
    # flash attention (SDPA) on its own, reported but not fed into the calibration: the op
    # model's attention family efficiency would also scale the memory-bound decode kernel
    q = torch.randn(1, 32, 4096, 128, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(1, 8, 4096, 128, device="cuda", dtype=torch.bfloat16)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    try:
        t_attn = statistics.median(
            timed(torch, lambda: sdpa(q, kv, kv, is_causal=True, enable_gqa=True), 3, 10)
        )
    except Exception:  # enable_gqa needs torch >= 2.5
        t_attn = None
    attn_flops = 4 * 32 * 4096 * 4096 * 128 * 0.5
    src = torch.empty(int(1e9) // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    t_copy = statistics.median(timed(torch, lambda: dst.copy_(src), 3, 10))
    copy_eff = 2 * src.numel() * 2 / t_copy / bw
    a = b = x = w = src = dst = q = kv = None  # free before the model is built
    torch.cuda.empty_cache()
    return {
        "gemm_bf16_efficiency": gemm_eff,
        "gemm_8192_s": t,
        "weight_gemm_s": t_small,
        "weight_gemm_bandwidth_efficiency": small_bytes / t_small / bw,
        "copy_bandwidth_efficiency": copy_eff,
        "sdpa_causal_gqa_4096_s": t_attn,
        "sdpa_causal_gqa_4096_efficiency": attn_flops / t_attn / peak if t_attn else None,
    }


def make_calibration(gm, gpu, device_name: str, micro: dict, host_s: float,
                     kernel_s: float | None):  # fmt: skip
    from gpumodel.calibration import Calibration, CalibrationParams, GemmParams

    overhead = kernel_s if kernel_s is not None else None
    # the weight GEMM's time includes one kernel's fixed cost; take it out of the bandwidth
    t_bw = micro["weight_gemm_s"] - (overhead or 0.0)
    m, nn, k = 16, 14336, 4096
    small_eff = 2 * (m * k + k * nn + m * nn) / max(t_bw, 1e-9) / gpu.memory_bandwidth_bytes_per_s
    params = CalibrationParams(
        dram_efficiency=min(1.5, micro["copy_bandwidth_efficiency"]),
        kernel_overhead_s=overhead,
        launch_host_s=host_s,
        gemm={"bf16": GemmParams(efficiency=min(1.5, micro["gemm_bf16_efficiency"]),
                                 small_m_bandwidth_efficiency=min(1.5, small_eff))},
    )  # fmt: skip
    return Calibration(
        gpu_id=gpu.id, device_name=device_name, created=datetime.now(timezone.utc),
        backend="synthetic", environment={"source": "benchmarks/llm_device.py (torch)"},
        parameters=params,
    )  # fmt: skip


def try_graph_decode(torch, transformers, model, cfg, batch: int, context: int) -> dict:
    """Decode replayed from a CUDA graph captured around the HF forward with a StaticCache."""
    import inspect

    cls = transformers.StaticCache
    accepted = inspect.signature(cls.__init__).parameters
    kwargs = {"config": cfg, "max_cache_len": context + 8, "device": "cuda",
              "dtype": torch.bfloat16, "max_batch_size": batch, "batch_size": batch}  # fmt: skip
    cache = cls(**{k: v for k, v in kwargs.items() if k in accepted})
    ids = torch.randint(0, cfg.vocab_size, (batch, context - 1), device="cuda")
    pos = torch.arange(context - 1, device="cuda")
    model(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True,
          logits_to_keep=1)  # fmt: skip
    tok = torch.randint(0, cfg.vocab_size, (batch, 1), device="cuda")
    step_pos = torch.tensor([context - 1], device="cuda")

    def step():
        return model(input_ids=tok, past_key_values=cache, cache_position=step_pos,
                     use_cache=True, logits_to_keep=1)  # fmt: skip

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    times = timed(torch, g.replay, 3, 20)
    return {"batch": batch, "context": context, "median_s": statistics.median(times),
            "p90_s": pct(times, 0.9)}  # fmt: skip


def err(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas


def summary(rows: list[dict], key: str) -> dict:
    errs = [abs(r[key]) for r in rows if r.get(key) is not None]
    if not errs:
        return {"n": 0}
    return {"n": len(errs), "median_abs_pct": statistics.median(errs), "p90_abs_pct": pct(errs, 0.9),
            "bias_pct": statistics.mean(r[key] for r in rows if r.get(key) is not None)}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for measurements.json and report.md")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--gpu", default=None, help="gpumodel spec id (default: from the device name)")
    ap.add_argument("--quick", action="store_true", help="two prefill and two decode points")
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph decode")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()

    import torch
    import transformers

    import gpumodel as gm
    from gpumodel.llm import ModelSpec, predict_inference

    device_name = torch.cuda.get_device_name()
    gpu_id = args.gpu or next((i for frag, i in GPU_IDS if frag in device_name), None)
    if gpu_id is None:
        print(f"unknown device {device_name!r}: pass --gpu SPEC_ID", file=sys.stderr)
        return 2
    gpu = gm.get_gpu(gpu_id)
    env = {"device": device_name, "gpu_id": gpu.id, "torch": torch.__version__,
           "transformers": transformers.__version__, "cuda": str(torch.version.cuda),
           "python": platform.python_version(), "host": platform.processor() or platform.machine(),
           "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}  # fmt: skip
    print(json.dumps(env), flush=True)
    result: dict = {"environment": env, "errors": []}
    torch.backends.cuda.matmul.allow_tf32 = False

    with torch.inference_mode():
        # -- host and launch costs ------------------------------------------------------------
        host_op = host_loop(torch)
        kernel_gpu = graph_kernel_cost(torch)
        tiny_cfg = llama_config(transformers, args.layers, 64, 4, 1, 128, 128, 8192)
        tiny = build(torch, transformers, tiny_cfg)
        tiny_spec = spec_for(ModelSpec, tiny_cfg, "tiny-llama")
        tr = Runner(torch, tiny, tiny_cfg.vocab_size)
        step, reset = tr.decode_fns(1, 128)
        tiny_decode = statistics.median(timed(torch, step, 5, 30, reset))
        tiny_pred = predict_inference(tiny_spec, gpu, "decode", batch=1, context=128,
                                      calibration="none")  # fmt: skip
        host_per_kernel = tiny_decode / tiny_pred.kernels_per_step
        reset()
        decode_kernels = count_kernels(torch, step)
        prefill_kernels = count_kernels(torch, tr.prefill_fn(1, 128))
        tiny_prefill_pred = predict_inference(tiny_spec, gpu, "prefill", batch=1, seq=128,
                                              calibration="none")  # fmt: skip
        result["host"] = {
            "aten_op_host_s": host_op,
            "graph_kernel_gpu_s": kernel_gpu,
            "tiny_model_decode_step_s": tiny_decode,
            "tiny_model_predicted_kernels_decode": tiny_pred.kernels_per_step,
            "tiny_model_profiled_kernels_decode": decode_kernels,
            "tiny_model_predicted_kernels_prefill": tiny_prefill_pred.kernels_per_step,
            "tiny_model_profiled_kernels_prefill": prefill_kernels,
            "host_per_kernel_s": host_per_kernel,
        }
        print(json.dumps(result["host"]), flush=True)
        del tiny, tr
        torch.cuda.empty_cache()

        micro = micro_calibration(torch, gm, gpu)
        result["micro_calibration"] = micro
        print(json.dumps(micro), flush=True)
        cal = make_calibration(gm, gpu, device_name, micro, host_per_kernel, kernel_gpu)
        result["calibration"] = cal.model_dump(mode="json")

        # -- the model --------------------------------------------------------------------------
        cfg = llama_config(transformers, args.layers, 4096, 32, 8, 14336, 128256, 8192)
        model = build(torch, transformers, cfg)
        spec = spec_for(ModelSpec, cfg, f"llama-3-8b-{args.layers}l")
        run = Runner(torch, model, cfg.vocab_size)
        result["model"] = spec.model_dump(mode="json", exclude={"sources"})

        def predictions(phase: str, batch: int, seq: int | None, context: int | None,
                        **kw) -> dict:  # fmt: skip
            d = predict_inference(spec, gpu, phase, batch=batch, seq=seq, context=context, **kw)
            c = predict_inference(spec, gpu, phase, batch=batch, seq=seq, context=context,
                                  calibration=cal, **kw)  # fmt: skip
            return {"pred_default_s": d.step_time_s, "pred_calibrated_s": c.step_time_s,
                    "pred_gpu_s": c.gpu_time_s, "pred_kernels": c.kernels_per_step,
                    "pred_bound": c.bound, "default_calibration": d.calibration}  # fmt: skip

        rows_p = []
        for batch, seq in QUICK_PREFILL if args.quick else PREFILL:
            try:
                times = timed(torch, run.prefill_fn(batch, seq), 3, args.reps)
            except Exception as exc:
                result["errors"].append(f"prefill {batch}x{seq}: {exc!r}")
                torch.cuda.empty_cache()
                continue
            row = {"batch": batch, "seq": seq, "median_s": statistics.median(times),
                   "p90_s": pct(times, 0.9), **predictions("prefill", batch, seq, None)}  # fmt: skip
            row["err_default_pct"] = err(row["pred_default_s"], row["median_s"])
            row["err_calibrated_pct"] = err(row["pred_calibrated_s"], row["median_s"])
            rows_p.append(row)
            print(json.dumps(row), flush=True)
        rows_d = []
        for batch, context in QUICK_DECODE if args.quick else DECODE:
            try:
                step, reset = run.decode_fns(batch, context)
                times = timed(torch, step, 3, args.reps * 2, reset)
            except Exception as exc:
                result["errors"].append(f"decode {batch}x{context}: {exc!r}")
                torch.cuda.empty_cache()
                continue
            row = {"batch": batch, "context": context, "median_s": statistics.median(times),
                   "p90_s": pct(times, 0.9), **predictions("decode", batch, 1, context)}  # fmt: skip
            row["err_default_pct"] = err(row["pred_default_s"], row["median_s"])
            row["err_calibrated_pct"] = err(row["pred_calibrated_s"], row["median_s"])
            rows_d.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
        rows_g = []
        if not args.no_graph:
            for batch, context in [(1, 1024), (8, 2048)]:
                if time.time() - t_start > 240:
                    result["errors"].append("graph decode skipped: time budget")
                    break
                try:
                    row = try_graph_decode(torch, transformers, model, cfg, batch, context)
                except Exception as exc:
                    result["errors"].append(f"graph decode {batch}x{context}: {exc!r}")
                    result["graph_traceback"] = traceback.format_exc(limit=3)
                    break
                row.update(predictions("decode", batch, 1, context, runtime="graph",
                                       fusion="unfused", kv_cache="static"))  # fmt: skip
                row["err_default_pct"] = err(row["pred_default_s"], row["median_s"])
                row["err_calibrated_pct"] = err(row["pred_calibrated_s"], row["median_s"])
                rows_g.append(row)
                print(json.dumps(row), flush=True)

    result["prefill"], result["decode"], result["decode_graph"] = rows_p, rows_d, rows_g
    result["summary"] = {
        "prefill": {"default": summary(rows_p, "err_default_pct"),
                    "calibrated": summary(rows_p, "err_calibrated_pct")},
        "decode": {"default": summary(rows_d, "err_default_pct"),
                   "calibrated": summary(rows_d, "err_calibrated_pct")},
        "decode_graph": {"default": summary(rows_g, "err_default_pct"),
                         "calibrated": summary(rows_g, "err_calibrated_pct")},
    }  # fmt: skip
    result["wall_s"] = time.time() - t_start
    (out / "measurements.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "report.md").write_text(report(result))
    print(report(result))
    return 0


def report(r: dict) -> str:
    env, host, micro, s = r["environment"], r["host"], r["micro_calibration"], r["summary"]
    model = r["model"]
    lines = [
        f"# LLM inference: measured vs predicted on {env['device']}",
        "",
        f"{env['date']}; torch {env['torch']}, transformers {env['transformers']}, CUDA "
        f"{env['cuda']}; gpumodel spec `{env['gpu_id']}`. Model: Llama-3-8B widths with "
        f"{model['layers']} layers (hidden {model['hidden']}, {model['heads']} heads, "
        f"{model['kv_heads']} KV heads, FFN {model['ffn_hidden']}, vocab {model['vocab']}), "
        "random bf16 weights, SDPA attention, eager PyTorch, HF DynamicCache, logits for the "
        "last token only. Times: CUDA events, median of the reps after warm-up.",
        "",
        "## Accuracy (|predicted - measured| / measured)",
        "",
        "| phase | prediction | n | median | p90 | bias |",
        "|---|---|---|---|---|---|",
    ]
    for phase in ("prefill", "decode", "decode_graph"):
        for kind in ("default", "calibrated"):
            v = s[phase][kind]
            if v.get("n"):
                lines.append(f"| {phase} | {kind} | {v['n']} | {v['median_abs_pct']:.1f}% | "
                             f"{v['p90_abs_pct']:.1f}% | {v['bias_pct']:+.1f}% |")  # fmt: skip
    lines += [
        "",
        "Targets (issue 6): median <= 15% for prefill, <= 20% for decode. *default*: the "
        "calibration gpumodel finds for this GPU (or the datasheet) and the default host cost "
        "per kernel; *calibrated*: the micro-calibration below passed as a Calibration.",
        "",
        "## Host and launch costs",
        "",
        f"- tiny aten op (x.add_ on one element), host time per op: "
        f"{host['aten_op_host_s'] * 1e6:.2f} us",
        "- tiny kernel replayed from a CUDA graph, GPU time per kernel: "
        + (f"{host['graph_kernel_gpu_s'] * 1e6:.2f} us" if host["graph_kernel_gpu_s"] else "n/a"),
        f"- tiny-width model ({model['layers']} layers) decode step: "
        f"{host['tiny_model_decode_step_s'] * 1e3:.2f} ms for "
        f"{host['tiny_model_predicted_kernels_decode']} predicted kernels -> "
        f"**{host['host_per_kernel_s'] * 1e6:.2f} us of host time per kernel** (launch_host_s)",
        f"- kernels per decode step: predicted {host['tiny_model_predicted_kernels_decode']}, "
        f"profiled {host['tiny_model_profiled_kernels_decode']}; per prefill step: predicted "
        f"{host['tiny_model_predicted_kernels_prefill']}, profiled "
        f"{host['tiny_model_profiled_kernels_prefill']}",
        "",
        "## Micro-calibration",
        "",
        f"- bf16 GEMM 8192^3: {100 * micro['gemm_bf16_efficiency']:.1f}% of the datasheet peak",
        f"- weight-streaming GEMM 16x14336x4096: "
        f"{100 * micro['weight_gemm_bandwidth_efficiency']:.1f}% of the datasheet bandwidth",
        f"- device copy 1 GB: {100 * micro['copy_bandwidth_efficiency']:.1f}% of the datasheet "
        "bandwidth",
        "- SDPA flash attention, causal, 32 heads / 8 KV heads, 4096 x 128 (reported only): "
        + (
            f"{100 * micro['sdpa_causal_gqa_4096_efficiency']:.1f}% of the datasheet peak"
            if micro.get("sdpa_causal_gqa_4096_efficiency")
            else "n/a"
        ),
        "",
        "## Prefill",
        "",
        "| batch | seq | measured | p90 | default | err | calibrated | err | bound |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r["prefill"]:
        lines.append(_row(row, f"{row['batch']} | {row['seq']}"))
    lines += ["", "## Decode (one token)", "",
              "| batch | context | measured | p90 | default | err | calibrated | err | bound |",
              "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in r["decode"]:
        lines.append(_row(row, f"{row['batch']} | {row['context']}"))
    if r["decode_graph"]:
        lines += ["", "## Decode replayed from a CUDA graph (StaticCache)", "",
                  "| batch | context | measured | p90 | default | err | calibrated | err | bound |",
                  "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for row in r["decode_graph"]:
            lines.append(_row(row, f"{row['batch']} | {row['context']}"))
    if r["errors"]:
        lines += ["", "## Skipped", ""] + [f"- {e}" for e in r["errors"]]
    lines += ["", f"Wall time {r['wall_s']:.0f} s.", ""]
    return "\n".join(lines)


def _row(row: dict, key: str) -> str:
    ms = 1e3
    return (f"| {key} | {row['median_s'] * ms:.3f} ms | {row['p90_s'] * ms:.3f} ms | "
            f"{row['pred_default_s'] * ms:.3f} ms | {row['err_default_pct']:+.1f}% | "
            f"{row['pred_calibrated_s'] * ms:.3f} ms | {row['err_calibrated_pct']:+.1f}% | "
            f"{row['pred_bound']} |")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
