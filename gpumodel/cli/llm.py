"""LLM commands: ``infer``, ``memory``, ``plan train``, ``plan serve``, ``models list|show``.

gpumodel infer --model llama-3-8b --gpu h100 --phase decode --batch 8 --context 2048
gpumodel memory --model llama-2-70b --gpu h100 --batch 1 --seq 4096 --train --zero 3 --dp 8
gpumodel plan train --model llama-2-70b --tokens 2T --gpu h100 --gpus 1024
gpumodel plan serve --model llama-3-8b --gpu l4,a100,h100 --prompt 1024 --output 256 --rate 50/s
gpumodel models list
"""

from __future__ import annotations

import re
from typing import Any

import typer

import gpumodel as gm
from gpumodel.cli._app import app, console, fail, print_json, split_list
from gpumodel.cli.common import calibration_for
from gpumodel.units import format_count, format_quantity, format_time, parse_count


def _llm():
    """gpumodel.llm, imported when a command runs (keeps `gpumodel --help` and predict fast)."""
    import gpumodel.llm

    return gpumodel.llm


plan_app = typer.Typer(help="Capacity plans: training time and cost, serving fleet and cost.",
                       no_args_is_help=True)  # fmt: skip
models_app = typer.Typer(help="Transformer model presets.", no_args_is_help=True)
app.add_typer(plan_app, name="plan")
app.add_typer(models_app, name="models")

# Choices and ranges are checked here (GpumodelError: one line, exit 2), not by typer.
PHASES = ("prefill", "decode")
# Runtimes by name (gpumodel.llm.runtimes; "eager"/"graph" are the old names); one default.
RUNTIMES = ("hf-eager", "hf-static-compiled", "fused-graph", "eager", "graph")
DEFAULT_RUNTIME = "fused-graph"  # = gpumodel.llm.runtimes.DEFAULT_RUNTIME (a test pins it)
RUNTIME_HELP = (
    "hf-eager (HF transformers, eager, DynamicCache), hf-static-compiled (HF + "
    "StaticCache + torch.compile reduce-overhead) or fused-graph (vLLM/TensorRT-LLM "
    f"style); default {DEFAULT_RUNTIME}"
)
INFER_RUNTIME_HELP = RUNTIME_HELP + (
    ", or the runtime a trace calibration (--calibration from `calibrate --trace`) ran in"
)
HOST_HELP = (
    "host profile: a name (`gpumodel validate --host-only` writes 'local') or a YAML "
    "file; default: the local one if measured, else typical (the median measured machine)"
)
POLICIES = ("amp", "bf16", "mixed", "fp32")  # gpumodel.llm.memory.Policy
ATTENTION = ("flash", "cudnn", "efficient", "naive")
RECOMPUTE = ("none", "selective", "full")
FUSION = ("fused", "unfused")
KV_CACHE = ("static", "concat")


def _choice(value: str | None, option: str, choices: tuple[str, ...]) -> Any:
    if value is not None and value not in choices:
        fail(f"{option}: '{value}' is not one of {', '.join(choices)}")
    return value


def _at_least(option: str, value: int | None, low: int = 1) -> None:
    if value is not None and value < low:
        fail(f"{option} must be at least {low}, got {value}")


def _out(text: str) -> None:
    console().print(text, highlight=False, markup=False)


def _warn(message: str | None) -> None:
    """One line on stderr when the command ends without an error (``_app.warn``)."""
    from gpumodel.cli._app import warn

    warn(message)


def _plt():
    from gpumodel.cli.roofline import require_matplotlib

    return require_matplotlib()


def parse_rate(text: str) -> float:
    """'50/s', '50', '3000/min', '1e5/h' -> requests per second."""
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(?:(?:req(?:uests)?)?\s*/\s*(s|sec|min|m|h|hr|hour))?\s*",
                     text)  # fmt: skip
    if not m:
        fail(f"--rate: expected a rate like '50/s' or '3000/min', got {text!r}")
    try:
        value = float(m.group(1))
    except ValueError:
        fail(f"--rate: {text!r} is not a number")
    per = {None: 1, "s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600, "hr": 3600, "hour": 3600}
    rate = value / per[m.group(2)]
    if rate <= 0:
        fail(f"--rate must be positive, got {text!r}")
    return rate


def _seconds(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    try:
        return gm.parse_quantity(text, "seconds")
    except gm.UnitError as exc:
        fail(f"{what}: {exc}")
    return None


# ---------------------------------------------------------------------------------------------
# infer


@app.command()
def infer(
    model: str = typer.Option(..., help="model preset id/alias or a model YAML file"),
    gpu: str = typer.Option("h100", help="GPU id or alias"),
    phase: str = typer.Option("decode", help="prefill or decode"),
    batch: int = typer.Option(1, help="sequences per step (per replica)"),
    seq: int = typer.Option(
        None, help="new tokens per sequence (prefill: prompt length; default 2048, or --context "
        "where given; decode: query tokens a step, default 1; e.g. 4 to verify 3 speculative "
        "tokens: TPOT is then the step / 4, every token kept)"),
    context: int = typer.Option(None, help="tokens attended to (decode: KV-cache length)"),
    dtype: str = typer.Option("bf16", help="weights and activations dtype"),
    gpus: int = typer.Option(None, help="GPUs in total (replicas of --tp GPUs; default: --tp, "
                             "else 1)"),
    tp: int = typer.Option(None, help="tensor-parallel size (default: --gpus)"),
    runtime: str = typer.Option(None, help=INFER_RUNTIME_HELP),
    attention: str = typer.Option(
        None,
        help="flash, cudnn, efficient (SDPA's memory-efficient kernel, what an explicit mask "
        "runs off H100/H200/B200) or naive (default: the runtime's own: cudnn for hf-eager and "
        "hf-static-compiled decode on H100/H200/B200, where torch's SDPA runs it; else flash)",
    ),
    fusion: str = typer.Option(None, help="expert: override the runtime's fusion"),
    kv_cache: str = typer.Option(None, help="expert: override the runtime's KV cache"),
    gqa: str = typer.Option(
        None,
        help="expert: native (K/V read at kv_heads) or repeat (HF repeat_kv, as with a "
        "padding mask)",
    ),
    experts: str = typer.Option(
        None,
        help="mixture of experts under hf-eager: grouped_mm (transformers 5's default: one "
        "grouped GEMM per projection) or loop (experts_implementation='eager', transformers 4)",
    ),
    host: str = typer.Option(None, help=HOST_HELP),
    host_us: float = typer.Option(None, help="expert: host cost per kernel in us (eager)"),
    allow_oversubscribe: bool = typer.Option(
        False, "--allow-oversubscribe", help="predict a step even if its memory does not fit"
    ),
    new_shapes: bool = typer.Option(
        False,
        "--new-shapes",
        help="price the first step at its attention shapes in the process (a decode step at a "
        "new KV length): hf-eager on H100/H200/B200 pays torch's cuDNN attention graph build",
    ),
    calibration: str = typer.Option(None, help="'none', a calibration file, or a GPU id"),
    calibration_from: str = typer.Option(
        None, help="carry another GPU's calibration (id or file) to this one"
    ),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    plot: str = typer.Option(None, help="write the per-op time breakdown to FILE.png/.svg"),
) -> None:
    """Time of one prefill or decode step of an LLM: TTFT/TPOT, tokens/s, per-op breakdown.

    Default runtime: fused-graph, or the one a trace calibration (--calibration) ran in. A step
    whose memory does not fit exits 2 (needs N GB, has M GB; what fits) unless
    --allow-oversubscribe."""
    _choice(phase, "--phase", PHASES)
    _choice(runtime, "--runtime", RUNTIMES)
    _choice(attention, "--attention", ATTENTION)
    _choice(fusion, "--fusion", (*FUSION, "compiled"))
    _choice(kv_cache, "--kv-cache", KV_CACHE)
    _choice(gqa, "--gqa", ("native", "repeat"))
    _choice(experts, "--experts", ("grouped_mm", "loop"))
    if experts is not None and _llm().get_model(model).moe is None:
        fail(f"--experts is how HF runs a mixture of experts; {model} is a dense model")
    # --gpus defaults to --tp (one replica of the tensor-parallel group), in the library
    for opt, v in (("--batch", batch), ("--seq", seq), ("--context", context), ("--tp", tp),
                   ("--gpus", gpus)):  # fmt: skip
        _at_least(opt, v)
    r = _llm().predict_inference(
        model, gpu, phase=phase, batch=batch, seq=seq, context=context, dtype=dtype,  # type: ignore[arg-type]
        gpus=gpus, tp=tp, runtime=runtime,  # type: ignore[arg-type]
        calibration=calibration_for(gm.get_gpu(gpu), calibration, calibration_from),
        attention=attention, fusion=fusion, kv_cache=kv_cache, gqa=gqa,  # type: ignore[arg-type]
        host_per_kernel_s=host_us * 1e-6 if host_us is not None else None, host=host,
        allow_oversubscribe=allow_oversubscribe, new_shapes=new_shapes,
        experts=experts or "grouped_mm",  # type: ignore[arg-type]
    )  # fmt: skip
    _warn(r.host_warning)
    if plot:
        _plot_ops(r, plot)
    if as_json:
        print_json(r.to_dict())
    else:
        text = r.explain()
        _out(text.replace(f"\n  warning: {r.host_warning}", "") if r.host_warning else text)
    if plot and not as_json:
        _out(f"wrote {plot}")


def _plot_ops(r: Any, path: str) -> None:
    plt = _plt()
    ops = sorted(r.breakdown, key=lambda o: o.time_s)
    fig, ax = plt.subplots(figsize=(8, max(3.0, 0.28 * len(ops) + 1.2)))
    colors = {"compute": "tab:red", "memory": "tab:blue", "launch": "tab:gray",
              "network": "tab:green", "latency": "tab:olive", "issue": "tab:orange"}  # fmt: skip
    ax.barh([o.name for o in ops], [o.time_s * 1e3 for o in ops],
            color=[colors.get(o.bound, "tab:purple") for o in ops])  # fmt: skip
    ax.set_xlabel("GPU time per step (ms), colour = bound")
    ax.set_title(f"{r.model} {r.phase} on {r.gpu}: step {format_time(r.time_s)} "
                 f"(host overhead {format_time(r.host_overhead_s)})", fontsize=9)  # fmt: skip
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    from gpumodel._io import save_figure

    save_figure(fig, path)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# memory


@app.command()
def memory(
    model: str = typer.Option(..., help="model preset id/alias or a model YAML file"),
    gpu: str = typer.Option("h100", help="GPU id or alias"),
    batch: int = typer.Option(1, help="sequences (training: micro-batch)"),
    seq: int = typer.Option(
        None, "--seq", "--context", help="context length (KV cache) / training sequence "
        "(default: 2048, or the model's max_context if shorter)"),
    dtype: str = typer.Option("bf16"),
    phase: str = typer.Option(
        None,
        help="prefill (peak of a batch x seq prompt) or decode (steady state at context "
        "seq; default); --train: the training peak",
    ),
    train: bool = typer.Option(False, "--train", help="training memory (states + activations)"),
    policy: str = typer.Option(None, help="training precision policy: amp, bf16, mixed or "
                               "fp32 (an fp32 model, no autocast; --dtype fp32 or tf32)"),
    fusion: str = typer.Option(
        "fused",
        help="training: fused (Megatron-style kernels) or unfused (eager HF: with "
        "--policy, activations as autograd saves them)",
    ),
    zero: int = typer.Option(0, help="ZeRO stage (training)"),
    dp: int = typer.Option(1, help="data-parallel size (ZeRO partitions over it)"),
    tp: int = typer.Option(1, help="tensor-parallel size"),
    pp: int = typer.Option(1, help="pipeline-parallel size"),
    recompute: str = typer.Option("none", help="activation recompute"),
    sequence_parallel: bool = typer.Option(
        None,
        "--sequence-parallel/--no-sequence-parallel",
        help="default: on when training with --tp > 1",
    ),
    attention: str = typer.Option("flash"),
    accumulation: int = typer.Option(
        1,
        help="training: micro-batches per optimizer step (above 1 an eager step's gradients "
        "live through the next forward)",
    ),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    plot: str = typer.Option(None, help="write the memory breakdown to FILE.png/.svg"),
) -> None:
    """Memory per GPU: weights, gradients, optimizer, activations, KV cache; does it fit?"""
    _choice(recompute, "--recompute", RECOMPUTE)
    _choice(attention, "--attention", ATTENTION)
    _choice(phase, "--phase", PHASES)
    _choice(policy, "--policy", POLICIES)
    _choice(fusion, "--fusion", FUSION)
    if train and phase is not None:
        fail("--phase is for inference; --train is the training peak")
    if policy is not None and not train:
        fail("--policy is a training precision policy: add --train")
    for opt, v in (("--batch", batch), ("--seq", seq), ("--dp", dp), ("--tp", tp), ("--pp", pp),
                   ("--accumulation", accumulation)):  # fmt: skip
        _at_least(opt, v)
    if accumulation != 1 and not train:
        fail("--accumulation is a training option: add --train")
    for opt, given in (("--recompute", recompute != "none"), ("--fusion", fusion != "fused"),
                       ("--sequence-parallel", sequence_parallel is not None)):  # fmt: skip
        if given and not train:
            fail(f"{opt} shapes training activations: add --train (inference memory does not "
                 "depend on it)")  # fmt: skip
    if not train and (zero != 0 or dp != 1):
        fail("--zero and --dp shard training states: add --train (an inference replica's "
             "memory per GPU does not depend on how many there are)")
    if zero not in (0, 1, 2, 3):
        fail(f"--zero must be 0, 1, 2 or 3, got {zero}")
    kw: dict[str, Any] = dict(dtype=dtype, train=train, tp=tp, pp=pp, dp=dp, zero=zero,
                              recompute=recompute, sequence_parallel=sequence_parallel,
                              attention=attention, policy=policy, accumulation=accumulation,
                              phase=None if train else (phase or "decode"))  # fmt: skip
    if policy is not None and fusion == "unfused":  # as plan train / predict_training_step
        kw["activation_model"] = "hf-eager"
    m = _llm().memory(model, gpu, batch=batch, seq=seq, **kw)
    seq = m.seq  # the library's default where none was given
    largest_batch = _llm().max_batch(model, gpu, seq=seq, limit=1 << 16, **kw)
    longest = _llm().max_context(model, gpu, batch=batch, **kw)
    if plot:
        _plot_memory(m, plot)
    if as_json:
        print_json({**m.to_dict(), "max_batch": largest_batch, "max_context": longest})
        return
    _out(m.explain())
    _out(f"  largest batch at seq {seq}: {largest_batch}; longest context at batch {batch}: "
         f"{longest} (model max {_llm().get_model(model).max_context})")  # fmt: skip
    if not m.fits:
        from gpumodel.llm.memory import what_fits

        _out(f"  {what_fits(model, gpu, batch=batch, seq=seq, **kw)}")
    if plot:
        _out(f"wrote {plot}")


def _plot_memory(m: Any, path: str) -> None:
    plt = _plt()
    parts = {k: v / 1e9 for k, v in m.components().items() if v}
    fig, ax = plt.subplots(figsize=(7, 2.6))
    left = 0.0
    for name, gb in parts.items():
        ax.barh([m.gpu], [gb], left=left, label=f"{name} {gb:.1f} GB")
        left += gb
    ax.axvline(m.capacity_bytes / 1e9, color="black", linestyle="--",
               label=f"capacity {m.capacity_bytes / 1e9:.0f} GB")  # fmt: skip
    ax.set_xlabel("GB per GPU")
    ax.set_title(f"{m.model} {m.mode}: {m.message()}", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3)
    fig.tight_layout()
    from gpumodel._io import save_figure

    save_figure(fig, path)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# plan train / plan serve


@plan_app.command("train")
def plan_train(
    model: str = typer.Option(..., help="model preset id/alias or a model YAML file"),
    tokens: str = typer.Option(..., help="training tokens, e.g. 2T or 1.4e12"),
    gpu: str = typer.Option("h100", help="GPU id or alias"),
    gpus: str = typer.Option(
        None,
        help="GPUs in total: a number, a list '64,256' or a range '8-512' / "
        "'8:512:x2' / '8:64:+8'; default: searched (1 to 65536) for --days / --budget",
    ),
    days: float = typer.Option(None, help="deadline in days: the cheapest plan that meets it"),
    budget: str = typer.Option(None, help="budget in $, e.g. 2e6 or 2M: the fastest within it"),
    price: str = typer.Option(
        None, help="$ per GPU-hour: '2.49', or per GPU 'h100=2.49' (default: the spec's price)"
    ),
    mfu: float = typer.Option(None, help="assume this MFU (0-1) instead of deriving it"),
    tp: int = typer.Option(None, help="tensor-parallel size (default: searched)"),
    pp: int = typer.Option(None, help="pipeline-parallel size (default: searched)"),
    zero: int = typer.Option(1, help="ZeRO stage"),
    micro_batch: int = typer.Option(1, help="sequences per micro-batch"),
    global_batch: int = typer.Option(None, help="sequences per step (default ~4M tokens)"),
    seq: int = typer.Option(None, help="sequence length (default: model context, <= 8192)"),
    virtual_stages: int = typer.Option(
        1, help="model chunks per pipeline stage: Megatron's interleaved 1F1B (bubble (pp-1)/v "
        "micro-batch slots), on each layout that takes it (pp > 1, micro-batches a multiple of "
        "pp); 1: plain 1F1B"),
    recompute: str = typer.Option("selective"),
    fusion: str = typer.Option(
        "fused", help="fused (Megatron-style kernels) or unfused (eager HF)"
    ),
    attention: str = typer.Option(
        None,
        help="flash (FlashAttention-2), cudnn (SDPA's cuDNN) or efficient (SDPA's "
        "memory-efficient kernel, what an explicit mask runs off H100/H200/B200); default: what the step "
        "runs (cudnn for --fusion unfused on an H100, H200 or B200, else flash)",
    ),
    dtype: str = typer.Option("bf16"),
    policy: str = typer.Option(
        None,
        help="precision policy: amp (fp32 weights + bf16 autocast), bf16, fp32 (no autocast; "
        "--dtype fp32 or tf32) or mixed "
        "(Megatron: bf16 weights, fp32 master + moments; the default accounting)",
    ),
    host: str = typer.Option(None, help=HOST_HELP),
    calibration: str = typer.Option(None, help="'none', a calibration file, or a GPU id"),
    calibration_from: str = typer.Option(
        None, help="carry another GPU's calibration (id or file) to this one"
    ),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    as_csv: bool = typer.Option(False, "--csv", help="the table as CSV"),
    plot: str = typer.Option(None, help="write the scaling curve (days, MFU vs GPUs) to FILE"),
    html: str = typer.Option(None, "--html", help="also write a self-contained HTML report"),
) -> None:
    """Days, GPU-hours and dollars to train a model on D tokens; how many GPUs for a deadline.

    With one --gpus count: the plan for that count. Otherwise (a list or range of counts, or
    none: 1 to 65536 searched) the fastest layout (tp x pp x dp) that fits at each count, the
    time/cost frontier, and the answer: the cheapest plan within --days, the fastest within
    --budget (neither: the frontier is the answer). Prices: the spec's (provider, date and
    source in a footnote) or --price. Example:
    gpumodel plan train --model llama-2-7b --tokens 1T --gpu h100 --days 30
    """
    from gpumodel.cli.plan import parse_counts, training_search_table
    from gpumodel.cli.tables import show

    _choice(recompute, "--recompute", RECOMPUTE)
    _choice(fusion, "--fusion", FUSION)
    _choice(attention, "--attention", ("flash", "cudnn", "efficient"))
    _choice(policy, "--policy", POLICIES)
    for opt, v in (("--tp", tp), ("--pp", pp), ("--micro-batch", micro_batch),
                   ("--global-batch", global_batch), ("--seq", seq),
                   ("--virtual-stages", virtual_stages)):  # fmt: skip
        _at_least(opt, v)
    if zero not in (0, 1, 2, 3):
        fail(f"--zero must be 0, 1, 2 or 3, got {zero}")
    n_tokens = parse_count(tokens)
    counts = parse_counts(gpus, "--gpus") if gpus is not None else None
    prices = gm.parse_prices(price) if price is not None else None
    usd_budget = _budget(budget)
    cal = calibration_for(gm.get_gpu(gpu), calibration, calibration_from)
    common: dict[str, Any] = dict(tp=tp, pp=pp, zero=zero, micro_batch=micro_batch,
                                  global_batch=global_batch, seq=seq, dtype=dtype,
                                  recompute=recompute, price=prices, fusion=fusion,
                                  attention=attention, calibration=cal, policy=policy,
                                  host=host, virtual_stages=virtual_stages)  # fmt: skip
    if fusion == "unfused":  # eager HF steps: the host decides; say which one is assumed
        _warn(gm.load_host(host).mismatch())
    if counts is not None and len(counts) == 1 and days is None and usd_budget is None:
        p = _llm().plan_training(model, gpu, counts[0], n_tokens, mfu=mfu, **common)
        if plot:
            _plot_scaling(model, gpu, counts[0], n_tokens, {**common, "mfu": mfu}, plot)
        wrote = _html_report(p, html)
        if as_json:
            print_json(p.to_dict())
        elif as_csv:
            _plan_csv(p)
        else:  # the host warning went to stderr once already
            w = p.step.host_warning if p.step is not None else None
            _out(p.explain().replace(f"\n  warning: {w}", "") if w else p.explain())
        if plot and not (as_json or as_csv):
            _out(f"wrote {plot}")
        if wrote and not (as_json or as_csv):
            _out(wrote)
        return
    if mfu is not None:
        fail("--mfu takes one --gpus count (the search derives MFU from the step model)")
    from gpumodel.llm.planning import search_training

    s = search_training(model, gpu, n_tokens, days=days, budget=usd_budget, gpus=counts,
                        **common)  # fmt: skip
    if plot:
        _plot_search(s, plot)
    wrote = _html_report(s, html)
    if as_json:
        print_json(s.to_dict())
        return
    show(training_search_table(s), as_csv)
    if plot and not as_csv:
        _out(f"wrote {plot}")
    if wrote and not as_csv:
        _out(wrote)


def _html_report(plan: Any, path: str | None) -> str | None:
    """--html: the plan as a self-contained page (gpumodel.report), written before anything is
    printed; returns the "wrote" line to print after the table."""
    if not path:
        return None
    from gpumodel.report import write_report

    return f"wrote {write_report('plan', plan, path)}"


def _budget(text: str | None) -> float | None:
    if text is None:
        return None
    value = parse_count(text.strip().lstrip("$").strip())
    if not value > 0:
        fail(f"--budget must be positive, got {text!r}")
    return value


def _plan_csv(p: Any) -> None:
    from gpumodel.cli.tables import write_csv

    keys = ["model", "gpu", "gpus", "tokens", "seq", "mfu", "mfu_source", "days", "gpu_hours",
            "usd_per_gpu_hour", "cost_usd", "price_source"]  # fmt: skip
    data = p.to_dict()
    tp = p.step.tp if p.step else None
    pp = p.step.pp if p.step else None
    cal = p.step.calibration if p.step else None
    write_csv([*keys, "tp", "pp", "calibration"], [[data[k] for k in keys] + [tp, pp, cal]])


def _plot_search(s: Any, path: str) -> None:
    plt = _plt()
    xs = [o.gpus for o in s.options]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.loglog(xs, [o.days for o in s.options], "o-", label="days")
    front = [o for o in s.options if o.frontier]
    ax.loglog([o.gpus for o in front], [o.days for o in front], "s", color="tab:green",
              label="frontier")  # fmt: skip
    if s.choice is not None:
        ax.loglog([s.choice.gpus], [s.choice.days], "*", color="tab:red", markersize=14,
                  label="choice")  # fmt: skip
    ax.set_xlabel("GPUs")
    ax.set_ylabel("days")
    ax.set_title(f"{s.model} on {format_count(s.tokens)} tokens, {s.gpu}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    from gpumodel._io import save_figure

    save_figure(fig, path)  # temp file + rename, like every other plot
    plt.close(fig)


def _plot_scaling(model: str, gpu: str, gpus: int, tokens: float, kw: dict, path: str) -> None:
    plt = _plt()
    counts = sorted({max(1, gpus // 8), max(1, gpus // 4), max(1, gpus // 2), gpus, gpus * 2,
                     gpus * 4})  # fmt: skip
    xs, days, mfus = [], [], []
    for n in counts:
        try:
            p = _llm().plan_training(model, gpu, n, tokens, **{**kw, "global_batch": None})
        except gm.GpumodelError:
            continue
        xs.append(n)
        days.append(p.days)
        mfus.append(100 * p.mfu)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.loglog(xs, days, "o-", label="days")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("days")
    ax2 = ax.twinx()
    ax2.plot(xs, mfus, "s--", color="tab:orange", label="MFU %")
    ax2.set_ylabel("MFU %")
    ax.set_title(f"{model} on {format_count(tokens)} tokens, {gpu}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    from gpumodel._io import save_figure

    save_figure(fig, path)
    plt.close(fig)


@plan_app.command("serve")
def plan_serve(
    model: str = typer.Option(..., help="model preset id/alias or a model YAML file"),
    gpu: str = typer.Option("l4,a100,h100", help="GPU ids, comma-separated, side by side"),
    prompt: int = typer.Option(1024, help="prompt tokens per request"),
    output: int = typer.Option(256, help="output tokens per request"),
    rate: str = typer.Option("1/s", help="requests per second: '50/s', '3000/min'"),
    slo: str = typer.Option(
        "chat",
        help="default targets: chat = TTFT <= 450 ms and TPOT <= 40 ms (MLPerf "
        "Inference's interactive Llama-2-70B scenario); server = 2 s and 200 ms (MLPerf's "
        "Llama-2-70B server scenario); none",
    ),
    ttft: str = typer.Option(
        None, help="time-to-first-token target, e.g. 500ms (replaces --slo's)"
    ),
    tpot: str = typer.Option(
        None, help="time-per-output-token target, e.g. 50ms (replaces --slo's)"
    ),
    latency: str = typer.Option(None, help="end-to-end latency target, e.g. 20s"),
    price: str = typer.Option(
        None, help="$ per GPU-hour: '2.49' for every GPU or 'h100=2.49,h200=3.10' (default: specs)"
    ),
    dtype: str = typer.Option("bf16"),
    runtime: str = typer.Option(DEFAULT_RUNTIME, help=RUNTIME_HELP),
    host: str = typer.Option(None, help=HOST_HELP),
    calibration: str = typer.Option(None, help="'none', a calibration file, or a GPU id"),
    calibration_from: str = typer.Option(
        None, help="carry this GPU's calibration (id or file) to every GPU: like for like"
    ),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    as_csv: bool = typer.Option(False, "--csv", help="the table as CSV"),
    plot: str = typer.Option(
        None, help="write $ per 1M prompt + output tokens per GPU to FILE.png/.svg"),
    html: str = typer.Option(None, "--html", help="also write a self-contained HTML report"),
) -> None:
    """GPUs, latency and $ per 1M tokens to serve a request rate, side by side per GPU.

    Without --ttft/--tpot the targets are --slo's (default chat: TTFT <= 450 ms, TPOT <= 40 ms,
    MLPerf Inference's interactive Llama-2-70B constraints); a GPU that misses them is never
    the best buy."""
    from gpumodel.cli.plan import serving_table
    from gpumodel.cli.tables import show

    _choice(runtime, "--runtime", RUNTIMES)
    _choice(slo, "--slo", ("chat", "server", "none"))
    _at_least("--prompt", prompt)
    _at_least("--output", output, 0)
    names = split_list(gpu)
    if not names:
        fail("--gpu needs at least one GPU id, e.g. --gpu l4,a100,h100")
    p = _llm().plan_serving(
        model, names, prompt=prompt, output=output, rate=parse_rate(rate), dtype=dtype,
        runtime=runtime, ttft_slo_s=_seconds(ttft, "--ttft"),  # type: ignore[arg-type]
        tpot_slo_s=_seconds(tpot, "--tpot"), latency_slo_s=_seconds(latency, "--latency"),
        price=gm.parse_prices(price) if price is not None else None, calibration=calibration,
        calibration_from=calibration_from, slo=slo, host=host,
    )  # fmt: skip
    _warn(gm.load_host(host).mismatch())
    if plot:
        _plot_serving(p, plot)
    wrote = _html_report(p, html)
    if as_json:
        print_json(p.to_dict())
        return
    show(serving_table(p), as_csv)
    if plot and not as_csv:
        _out(f"wrote {plot}")
    if wrote and not as_csv:
        _out(wrote)


def _plot_serving(p: Any, path: str) -> None:
    plt = _plt()
    ok = [o for o in p.options
          if o.feasible and o.usd_per_million_prompt_and_output_tokens is not None]  # fmt: skip
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar([o.gpu for o in ok], [o.usd_per_million_prompt_and_output_tokens for o in ok],
           color=["tab:green" if o.best else "tab:blue" for o in ok])  # fmt: skip
    ax.set_ylabel("$ per 1M prompt + output tokens")
    ax.set_title(f"{p.model}: {p.rate_per_s:g} req/s", fontsize=9)
    fig.tight_layout()
    from gpumodel._io import save_figure

    save_figure(fig, path)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# models


@models_app.command("list")
def models_list(
    as_json: bool = typer.Option(False, "--json"),
    as_csv: bool = typer.Option(False, "--csv", help="the table as CSV"),
) -> None:
    """Model presets with their sizes."""
    models = _llm().list_models()
    if as_csv:
        from gpumodel.cli.tables import write_records

        write_records([m.summary() for m in models])
        return
    if as_json:
        print_json([m.summary() for m in models])
        return
    from rich.table import Table

    table = Table(title="model presets")
    for col in ("id", "name", "params", "layers", "hidden", "heads/kv", "ffn", "vocab", "context"):
        table.add_column(col)
    for m in models:
        params = f"{m.param_count() / 1e9:.3g}B"
        if m.moe:
            params += f" ({m.param_count(active=True) / 1e9:.3g}B active)"
        table.add_row(m.id, m.name, params, str(m.layers), str(m.hidden),
                      f"{m.heads}/{m.kv_heads}", f"{m.ffn_hidden} {m.ffn_kind}", str(m.vocab),
                      str(m.max_context))  # fmt: skip
    console().print(table)


@models_app.command("show")
def models_show(
    name: str = typer.Argument(..., help="model id, alias or YAML file"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """One model preset: shape, parameter count by part, KV cache per token, sources."""
    m = _llm().get_model(name)
    data = {**m.summary(), "sources": [s.model_dump() for s in m.sources]}
    if as_json:
        print_json(data)
        return
    lines = [f"{m.id}: {m.name}"]
    for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "ffn_kind",
                "vocab", "tied_embeddings", "norm", "position", "bias", "qkv_bias", "qk_norm",
                "hf_modules", "max_context", "sliding_window"):  # fmt: skip
        value = getattr(m, key)
        if value is not None:
            lines.append(f"  {key:<16} {value}")
    if m.moe:
        lines.append(f"  {'moe':<16} {m.moe.experts} experts, top-{m.moe.top_k}")
    lines += [
        f"  parameters       {m.param_count():,} ({m.param_count() / 1e9:.4g}B)",
        f"    per layer      {m.layer_params():,}"
        + (f" ({m.layer_params(active=True):,} active)" if m.moe else ""),
        f"    embeddings     {m.embedding_params():,}; LM head {m.lm_head_params():,}"
        + (" (tied)" if m.tied_embeddings else ""),
        f"  KV cache         {format_quantity(m.kv_cache_bytes_per_token(2.0), 'B')} per token "
        "(bf16)",
        "  sources:",
    ]  # fmt: skip
    for s in m.sources:
        lines.append(f"    - {s.title}" + (f" <{s.url}>" if s.url else ""))
        if s.note:
            lines.append(f"      {s.note}")
    _out("\n".join(lines))
