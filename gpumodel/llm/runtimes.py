"""Runtimes by name: what a framework launches per layer and per step, and what its host costs.

A user knows the runtime they run, not the fusion/cache/GQA flags behind it. Each runtime is a
documented kernel list (``kernel_list`` prints it for a model) and a host rule:

``hf-eager``  Hugging Face transformers, eager PyTorch, ``DynamicCache`` (``model.generate`` or
    ``model(...)`` in a loop, no padding mask). Per layer, 40 kernels: RMSNorm as 8 aten
    kernels in fp32 (to fp32, pow, mean, + eps, rsqrt, mul, to bf16, * weight); q, k, v GEMMs;
    RoPE as 5 kernels on q and 5 on k (mul cos, neg, cat, mul sin, add); ``torch.cat`` of the
    whole K and of the whole V cache (DynamicLayer.update: reads and writes the full cache
    every step); SDPA with ``enable_gqa`` (no mask: K/V read at ``kv_heads``); o GEMM;
    residual add; RMSNorm (8); gate GEMM, SiLU, up GEMM, mul, down GEMM; residual add. Per
    step: embedding, the position ids and cos/sin tables (11), final RMSNorm (8), LM head.
    Checked against a torch.profiler trace (validation/kernel_lists/hf-eager-cpu-trace.json:
    40 per layer, by kind). With a padding mask (``gqa="repeat"``, expert) HF builds the mask
    (7 kernels per step), turns it into a bias (1 per layer) and ``repeat_kv`` materialises
    K and V at every query head (expand + reshape: 2 copies per layer). Host: every kernel
    costs the host profile's eager cost of its op kind (matmul, sdpa, cat, copy, reduction,
    elementwise, ...) plus the views around it, or, when the profile measured it, one HF
    decoder layer's host time per layer; the GPU waits on the host when the host is slower
    (``queue_time``).
``hf-static-compiled``  HF + ``StaticCache`` + ``torch.compile(mode="reduce-overhead")`` (what
    HF documents for fast generation). Inductor keeps the three q/k/v and the gate/up GEMMs and
    fuses each pointwise chain into one kernel: residual add + RMSNorm, RoPE (q and k), the
    write positions and the StaticLayer ``index_copy_`` of K and of V, ``repeat_kv``'s two
    copies (a mask is always built with a StaticCache; streamed at memory speed), mask bias,
    SDPA, SiLU*mul: 18 per layer, as an H200 trace counted them (docs/llm-runtimes.md). Per step: the cos/sin tables (2),
    the mask (1), final add + RMSNorm, LM head. One CUDA graph per step: host = the compiled
    call's launch (guards + graph replay), then the GPU runs the graph.
``fused-graph``  A serving engine (vLLM, TensorRT-LLM style): fused QKV GEMM, one kernel per
    norm, RoPE, cache write and SiLU*mul, flash attention on K/V at ``kv_heads``, paged or
    static KV, all in one CUDA graph: host = one graph replay. Checked on a PyTorch/Triton
    engine of that structure (validation/unseen/fused_engine.py; no vLLM on the device): its
    traced kernels are these plus in-call split-K reductions and split-KV combines.

In every runtime the kernels of a step run back to back: each non-GEMM kernel pays the host
profile's in-graph per-kernel GPU time (``graph_replay_per_kernel_s``) instead of the
isolated-kernel floor of the calibration (``gpumodel.llm._timing.in_stream``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from gpumodel.errors import SpecError, UnsupportedError
from gpumodel.llm.layers import GQA, Fusion, KVCache
from gpumodel.ops.attention import CUDNN_SDPA_PREFERRED_CC

RuntimeName = Literal["hf-eager", "hf-static-compiled", "fused-graph"]
RUNTIME_NAMES: tuple[str, ...] = ("hf-eager", "hf-static-compiled", "fused-graph")
# One default across `infer`, `plan serve` and the library: what a served model runs on.
DEFAULT_RUNTIME: RuntimeName = "fused-graph"
# The names before runtimes had names (kept so existing calls work).
LEGACY_RUNTIMES = {"eager": "hf-eager", "graph": "fused-graph"}

# Views (no kernel, host time only) one HF Llama decoder layer issues in eager decode, counted
# in a torch.profiler trace (transformers 5.24, torch 2.13; validation/kernel_lists/
# hf_trace_check.py, top-level aten ops of a 2-layer minus a 1-layer model): q/k/v .view (3) +
# .transpose (3), rotate_half's two slices on q and on k (4), cos/sin .unsqueeze (2), the
# attention output .transpose + .reshape (2) and the MLP input reshape (1) = 15.
HF_VIEWS_PER_LAYER = 15

# HF transformers' own tensor parallelism (``from_pretrained`` with the model's TP plan) wraps
# every sharded projection in hooks that move its input and output between plain tensors and
# DTensors in Python. Host time of those hooks per projection, over the host profile's eager
# ``elementwise`` op: fitted by validation/fitset/fit_tp_hooks.py on 2 x H200 (Llama-3-8B
# hf-eager decode and prefill, each tensor-parallel-2 step paired with its one-GPU twin timed
# right after it in the same process: validation/results/h200-sxm-x2/tp-eager-fit-2026-12-01;
# the tensor-parallel step took 1.81x its twin's host, 17-19 ms more a step, where the
# collectives at their measured cost explain 1.6 ms): 7.3, the median over 44 host-bound rounds
# (a hook pair ~56 us on that VM). transformers 5.17, torch 2.11.
HF_TP_HOOKS_OVER_ELEMENTWISE = 7.3


@dataclass(frozen=True)
class Runtime:
    """A runtime's kernel choices and host rule."""

    name: str
    fusion: Fusion
    kv_cache: KVCache
    gqa: GQA
    host: Literal["eager", "compiled-graph", "graph"]
    summary: str


RUNTIMES: dict[str, Runtime] = {
    "hf-eager": Runtime("hf-eager", "unfused", "concat", "native", "eager",
                        "HF transformers, eager PyTorch, DynamicCache (cat), SDPA enable_gqa"),
    "hf-static-compiled": Runtime(
        "hf-static-compiled", "compiled", "static", "repeat", "compiled-graph",
        "HF + StaticCache + torch.compile(mode='reduce-overhead'): one CUDA graph per step"),
    "fused-graph": Runtime("fused-graph", "fused", "static", "native", "graph",
                           "vLLM/TensorRT-LLM style: fused kernels, static/paged KV, one graph"),
}  # fmt: skip




def runtime_attention(rt: Runtime, compute_capability: str | None, attention: str | None) -> str:
    """The attention kernel a step of ``rt`` runs: ``attention`` where one is named,
    else the runtime's own. The HF runtimes call torch's SDPA, which runs cuDNN's fused
    attention first on the GPUs of ``CUDNN_SDPA_PREFERRED_CC``, in decode and prefill alike
    (the kernel names of validation/results/unseen-h200-run16's default backend). Decode: one
    query per sequence goes to cuDNN's 16-row-tile kernel, memory-bound (batch 64 x context
    4096: 8.11 ms at 4.2 TB/s on an H200, 11.59 ms at 2.97 TB/s on an H100), where
    FlashAttention-2's 128-row decode tile is compute-bound and priced 54% / 11% slower
    (validation/results/h200-sxm/decode-breakdown-2026-11-27). Fused-graph engines run
    FlashAttention-style kernels of their own."""
    if attention is not None:
        return attention
    if pre_ampere(compute_capability):
        return "efficient"
    hf = rt.name in ("hf-eager", "hf-static-compiled")
    return "cudnn" if hf and compute_capability in CUDNN_SDPA_PREFERRED_CC else "flash"


def pre_ampere(compute_capability: str | None) -> bool:
    """A GPU without FlashAttention-2 or cuDNN's attention (compute capability below 8.0,
    ``ops.attention.SDPA_MIN_CC``): SDPA, and engines such as vLLM (through xFormers), run the
    memory-efficient kernel there."""
    return compute_capability is not None and float(compute_capability) < 8.0


def training_attention(fusion: str, compute_capability: str | None, attention: str | None) -> str:
    """The attention kernel a training step runs: ``attention`` where one is named; an eager HF
    step (``fusion="unfused"``) calls torch's SDPA, which runs cuDNN's kernels on the GPUs of
    ``CUDNN_SDPA_PREFERRED_CC`` (cudnn_generated_fort_native_sdpa forward, cudnn::fusion
    backward kernels in the H100 training fit set's traces, validation/results/
    train-fitset-h100); fused (Megatron-style) steps run FlashAttention."""
    if attention is not None:
        return attention
    if pre_ampere(compute_capability):
        return "efficient"
    eager_cudnn = fusion == "unfused" and compute_capability in CUDNN_SDPA_PREFERRED_CC
    return "cudnn" if eager_cudnn else "flash"


def sdpa_graph_build_s(
    rt: Runtime, compute_capability: str | None, attention: str, build_s: float, new_shapes: bool
) -> float:
    """Host seconds one step spends building cuDNN attention graphs: ``build_s`` (the host
    profile's ``graph_build_s``) when the step runs its attention at shapes the process has not
    run before (``new_shapes``: an eager decode step at a new KV length, a prefill at a new
    prompt shape), the step issues SDPA eagerly (``hf-eager``, ``hf-static-compiled``'s
    prefill) and SDPA runs cuDNN there (``attention="cudnn"``, or the default on a GPU where
    torch prefers cuDNN). torch keeps one built graph per shape (batch, heads, both lengths;
    aten/src/ATen/native/cudnn/MHA.cpp), and a step's layers share one shape: one build per
    step. Graph runtimes replay a graph captured at fixed shapes: none."""
    if not new_shapes or rt.host != "eager" or attention == "naive":
        return 0.0
    cudnn = attention == "cudnn" or compute_capability in CUDNN_SDPA_PREFERRED_CC
    return build_s if cudnn else 0.0


def get_runtime(name: str | None) -> Runtime:
    """The runtime called ``name`` (``None``: the default; "eager"/"graph": the old names)."""
    from gpumodel._validators import _show

    key = name if name is None or not isinstance(name, str) else LEGACY_RUNTIMES.get(name, name)
    key = DEFAULT_RUNTIME if key is None else key
    if not isinstance(key, str) or key not in RUNTIMES:
        raise SpecError(f"runtime must be one of {', '.join(RUNTIME_NAMES)}, got {_show(name)}")
    return RUNTIMES[key]


def traced_runtime(calibration: Any) -> RuntimeName | None:
    """The named runtime a trace calibration (``calibrate --trace``) was recorded in: its
    identified runtime, a training step's (``train-hf-eager``) as the runtime of its forward;
    None for any other calibration, or a trace of a runtime without a name here
    (``compiled-eager``)."""
    trace = getattr(calibration, "trace", None)
    if trace is None:
        return None
    name = trace.runtime.removeprefix("train-")
    return name if name in RUNTIMES else None  # type: ignore[return-value]


def for_phase(rt: Runtime, phase: str) -> Runtime:
    """The runtime a step of ``phase`` runs in: ``hf-static-compiled`` prefills uncompiled (HF
    compiles the one-token decoding step; the prompt goes through the eager model into the
    StaticCache), so its prefill is eager kernels: ``index_copy_`` into the cache, SDPA with
    ``enable_gqa`` (43 kernels per layer; a torch.profiler trace of transformers 5.24 shows 45
    on a fresh cache, whose K and V the first update allocates with ``zeros``)."""
    if rt.name == "hf-static-compiled" and phase == "prefill":
        return Runtime(rt.name, "unfused", "static", "native", "eager",
                       rt.summary + "; prefill uncompiled (eager, into the StaticCache)")  # fmt: skip
    return rt


def check_eager_options(
    rt: Runtime, phase: str, new_shapes: bool, host_per_kernel_s: Any, host_per_step_s: Any
) -> None:  # fmt: skip
    """Options that price an eager step's host side are an error on a step that replays a
    graph (``rt`` already ``for_phase``): they would change nothing."""
    if rt.host == "eager":
        return
    step = f"{rt.name}'s {phase} replays a graph captured at fixed shapes"
    if host_per_kernel_s is not None or host_per_step_s is not None:
        raise SpecError(f"host_per_kernel_s / host_per_step_s (--host-us) price an eager step's "
                        f"host; {step} (graph_launch_s sets its launch)")  # fmt: skip
    if new_shapes:
        raise SpecError(f"new_shapes (--new-shapes) prices the cuDNN attention graphs eager SDPA "
                        f"builds at new shapes; {step}: use runtime hf-eager")  # fmt: skip


def check_hf_tensor_parallel(rt: Runtime, model_id: str, kv_heads: int, tps: Any) -> None:
    """The HF runtimes shard a model with HF transformers' own TP plan, which splits each of
    k_proj's and v_proj's output features evenly over the ranks: a rank's share must be whole
    K/V heads (vLLM replicates heads where there are fewer than ranks; HF cannot, and its
    attention fails reshaping a part of a head)."""
    if not rt.name.startswith("hf-"):
        return
    bad = sorted({int(t) for t in np.atleast_1d(tps) if int(t) > 1 and kv_heads % int(t)})
    if bad:
        raise UnsupportedError(
            f"{rt.name}: HF transformers' tensor parallelism splits K/V heads, it cannot "
            f"replicate them: {model_id} has {kv_heads} K/V heads, tp={bad[0]} does not divide "
            f"them (use a tp that divides {kv_heads}, or runtime fused-graph)")  # fmt: skip


def kernel_flags(
    rt: Runtime, fusion: str | None, kv_cache: str | None, gqa: str | None, phase: str
) -> tuple[str, str, str]:  # fmt: skip
    """(fusion, kv_cache, gqa) of a ``phase`` step: the runtime's, with the expert overrides
    given. With the kernels overridden, an HF model decoding into a StaticCache builds a mask,
    so SDPA gets ``repeat_kv``'d K/V unless ``gqa`` says otherwise. Its prefill into the empty
    cache does not: causal SDPA with ``enable_gqa``, the same cuDNN kernel as a DynamicCache's
    (an H200 trace of Llama-3-8B, transformers 5.17: no ``repeat_kv`` copies, attention 1.57
    against 1.67 ms a step at batch 2 x 1024; validation/results/h200-sxm/
    static-prefill-trace-2026-11-30)."""
    if gqa is None:
        hf_static = phase != "prefill" and (fusion or rt.fusion) in ("unfused", "compiled") and (
            kv_cache or rt.kv_cache) == "static"  # fmt: skip
        gqa = rt.gqa if fusion is None and kv_cache is None else (
            "repeat" if hf_static else rt.gqa)  # fmt: skip
    return fusion or rt.fusion, kv_cache or rt.kv_cache, gqa


def resolve_step(
    runtime: str, phase: str, compute_capability: str | None, attention: str | None = None,
    fusion: str | None = None, kv_cache: str | None = None, gqa: str | None = None,
) -> tuple[Runtime, str, str, str, str]:  # fmt: skip
    """What a ``phase`` step of the named ``runtime`` runs: (the runtime for that phase, its
    attention kernel, fusion, kv_cache, gqa), the expert overrides applied where given."""
    rt = get_runtime(runtime)
    kernel = runtime_attention(rt, compute_capability, attention)
    rt = for_phase(rt, phase)
    return (rt, kernel, *kernel_flags(rt, fusion, kv_cache, gqa, phase))


def host_kind(layer_kind: str, kernel_name: str) -> str:
    """The host profile's op kind (a key of ``eager_op_s``) of one eager kernel."""
    if layer_kind == "gemm" or " @ " in kernel_name:  # "inv_freq @ positions": a bmm
        return "matmul"
    if layer_kind == "attention":
        return "sdpa"
    if layer_kind == "embedding":
        return "index"
    if layer_kind == "comm":  # a torch.distributed call (tensor parallelism's all-reduces)
        return "collective"
    step = kernel_name.lower().rsplit(": ", 1)[-1]  # the pass ("mul cos"), or the whole name
    words = step.replace("(", " ").replace(")", " ").split()
    if "cat" in words:
        return "cat"
    if any(w.startswith("index") for w in words) or "gather" in words:
        return "index"
    if step.startswith(("to ", "logits.float", "grad.to", "expand copy", "copy")) or step.endswith(
        " to dtype"
    ):
        return "copy"
    if any(w in words for w in ("mean", "softmax", "topk", "sum", "log_softmax")):
        return "reduction"
    if layer_kind == "norm" and ":" not in kernel_name:
        return "norm"
    return "elementwise"


def trace_kernel_kind(name: str) -> str:
    """The op kind (``host_kind``'s vocabulary) of a GPU kernel, from its name in a
    torch.profiler trace (PyTorch, cuBLAS/nvjet, cuDNN and flash kernel names)."""
    n = name.lower()
    if "catarray" in n:
        return "cat"
    if n.startswith("nvjet") or any(w in n for w in ("gemm", "gemv", "xmma", "cutlass", "cublas",
                                                      "splitk")):  # fmt: skip
        return "matmul"
    if any(w in n for w in ("sdpa", "flash", "fmha", "attention", "cudnn")):
        return "sdpa"
    if "multi_tensor_apply" in n or "adam" in n:
        return "optimizer_step"
    if "layer_norm" in n or "gammabeta" in n or "rms_norm" in n:
        return "norm"
    if "copy" in n:
        return "copy"
    if any(w in n for w in ("index", "gather", "scatter", "embedding")):
        return "index"
    if any(w in n for w in ("reduce_kernel", "softmax")):
        return "reduction"
    return "elementwise"


def trace_kernel_counts(path: str) -> list[dict[str, int]]:
    """Kernels per profiled step of a torch.profiler chrome trace (gzip or plain JSON), by kind:
    each kernel is charged to the ``ProfilerStep#N`` whose CPU range holds the runtime call
    that launched it (matched by ``correlation``), so warm-up kernels still running in the
    first active step are not counted. One dict per step, in step order; key ``"total"`` too."""
    import bisect
    import gzip
    import json

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        events = json.load(fh)
    events = events["traceEvents"] if isinstance(events, dict) else events
    steps = sorted((e["ts"], e["ts"] + e.get("dur", 0), e["name"]) for e in events
                   if e.get("cat") == "user_annotation"
                   and str(e.get("name", "")).startswith("ProfilerStep#"))  # fmt: skip
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in events
                 if e.get("cat") in ("cuda_runtime", "cuda_driver")
                 and "correlation" in e.get("args", {})}  # fmt: skip
    starts = [s[0] for s in steps]
    counts: list[dict[str, int]] = [{"total": 0} for _ in steps]
    for e in events:
        if e.get("cat") != "kernel":
            continue
        ts = launch_ts.get(e.get("args", {}).get("correlation"))
        if ts is None:
            continue
        i = bisect.bisect_right(starts, ts) - 1
        if i < 0 or ts > steps[i][1]:
            continue
        kind = trace_kernel_kind(e["name"])
        counts[i][kind] = counts[i].get(kind, 0) + 1
        counts[i]["total"] += 1
    return counts
