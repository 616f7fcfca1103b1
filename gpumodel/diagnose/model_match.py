"""What a trace says about the model behind it: the shipped preset its GEMM shapes name
(``identify_model``), and the parameter tensors a fused optimizer call updated where the
profiler recorded no tensor lists (``match_optimizer``). Used by ``gpumodel diagnose`` and
``gpumodel calibrate --trace`` alike."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from gpumodel.diagnose.mapping import TORCH_DTYPES, fused_optimizer
from gpumodel.diagnose.parse import Trace
from gpumodel.diagnose.timeline import Timeline

_FUSED_FUNCTOR = re.compile(r"Fused\w*Functor<\s*(c10::BFloat16|c10::Half|float|double)\s*,")


def match_optimizer(tr: Trace, tl: Timeline, model: str | None = None) -> int:
    """Give each fused optimizer call that recorded no tensor lists (``aten::_fused_adamw_``
    in a torch.profiler trace: its TensorList arguments are not recorded) the parameter
    tensors it updated: the ``torch::autograd::AccumulateGrad`` records (one per parameter,
    with its shape and dtype) since the previous optimizer call, i.e. the backward pass that
    produced the gradients; failing those, the model preset's parameter count (``model``, or
    the preset the trace's GEMM shapes name), at the element type the kernel's functor names.
    Returns the number of calls completed so."""
    todo = [i for i in tl.instances if i.mapped is not None and i.mapped.family == "optimizer"
            and i.mapped.op is None and i.node is not None]  # fmt: skip
    if not todo:
        return 0
    grads = sorted((e for e in tr.cpu if e.name == "torch::autograd::AccumulateGrad"
                    and e.has_shapes), key=lambda e: e.ts)  # fmt: skip
    spec_params = None
    done = 0
    prev = float("-inf")
    for inst in sorted(todo, key=lambda i: i.node.ts):  # type: ignore[union-attr]
        node = inst.node
        assert node is not None
        params: list[tuple[int, ...]] = []
        sizes: list[float] = []
        for e in grads:
            if prev < e.ts < node.ts:
                dims, typ = (
                    (e.args.get("Input Dims") or [None])[0],
                    (e.args.get("Input type") or [None])[0],
                )
                if isinstance(dims, list) and typ in TORCH_DTYPES:
                    params.append(tuple(int(d) for d in dims))
                    sizes.append(TORCH_DTYPES[typ][1])
        prev = node.ts
        source = "the step's AccumulateGrad records"
        size = max(sizes) if sizes else None
        if not params:
            if spec_params is None:
                spec_params = _preset_params(tl, model)
            if not spec_params:
                continue
            params, source = [(spec_params,)], "the model preset's parameter count"
        if size is None:
            m = next((_FUSED_FUNCTOR.search(k.name) for k in inst.gpu
                      if _FUSED_FUNCTOR.search(k.name)), None)  # fmt: skip
            size = {"float": 4.0, "double": 8.0}.get(m.group(1), 2.0) if m else 4.0
        inst.mapped = fused_optimizer(inst.name or node.name, params, size, source=source)
        done += 1
    return done


def optimizer_note(calls: int) -> str:
    """What ``match_optimizer`` did, for a report's notes."""
    return (
        f"fused optimizer: {calls} call(s) recorded no tensor lists; their parameter tensors "
        "were taken from the step's AccumulateGrad records (or the model preset)"
    )


def _preset_params(tl: Timeline, model: str | None) -> int | None:
    from gpumodel.llm.models import get_model

    if model is None:
        ops = [
            i.mapped.op for i in tl.instances if i.mapped is not None and i.mapped.op is not None
        ]
        model, _ = identify_model(ops)
    return get_model(model).param_count() if model else None


def identify_model(ops: list[Any]) -> tuple[str | None, str]:
    """The shipped LLM preset whose hidden, FFN and vocabulary widths all appear among the
    trace's GEMM dimensions (a decoder's projections are (hidden x hidden), (hidden x ffn) and
    the LM head (hidden x vocab)); ties go to the preset whose layer count best matches the
    number of FFN GEMMs. Grouped GEMMs (HF's experts) count, and name a mixture-of-experts
    preset only (Mixtral-8x7B and Mistral-7B share their widths). None, with the widths seen,
    when no preset matches."""
    from gpumodel.llm.models import list_models

    dims: set[int] = set()
    ffn_gemms = defaultdict(int)
    grouped = False
    for op in ops:
        family = getattr(op, "family", None)
        if family in ("gemm", "grouped_gemm"):
            grouped |= family == "grouped_gemm"
            n, k = int(getattr(op, "n", 0)), int(getattr(op, "k", 0))
            dims.update((n, k))
            ffn_gemms[(min(n, k), max(n, k))] += 1
    if not dims:
        return None, "model: no GEMM shapes recorded (record_shapes=True names the model)"
    matches = []
    for spec in list_models():
        if (spec.moe is not None) == grouped and {spec.hidden, spec.ffn_hidden, spec.vocab} <= dims:
            pair = (min(spec.hidden, spec.ffn_hidden), max(spec.hidden, spec.ffn_hidden))
            matches.append((abs(ffn_gemms[pair] - spec.layers), spec.id))
    if not matches:
        widest = sorted(dims, reverse=True)[:4]
        return None, (f"model: no shipped preset has its hidden, FFN and vocabulary widths "
                      f"among the GEMM dimensions (widest: {widest}); pass --model")  # fmt: skip
    best = min(matches)[1]
    return best, f"model: {best} (hidden, FFN and vocabulary widths found among the GEMMs)"
