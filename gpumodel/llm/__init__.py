"""Transformer LLMs on the op model: presets, layers, inference, memory, training, serving.

import gpumodel as gm
m = gm.get_model("llama-3-8b")
gm.predict_inference(m, "h100", phase="decode", batch=8, context=2048).time_per_output_token_s
gm.fits("llama-2-70b", "h100", batch=1, seq=4096, strict=True)   # InfeasibleError
gm.plan_training("llama-2-70b", "h100", gpus=1024, tokens=2e12).days
gm.plan_serving("llama-3-8b", ["l4", "a100", "h100"], rate=50).best
"""

from __future__ import annotations

from gpumodel.llm.inference import InferenceResult, predict_inference
from gpumodel.llm.layers import LayerOp, ModelOps, decoder_layer, model_ops
from gpumodel.llm.memory import (
    MemoryBreakdown,
    activation_bytes_per_layer,
    fits,
    max_batch,
    max_context,
    memory,
    model_state_bytes,
)
from gpumodel.llm.models import ModelSpec, MoESpec, get_model, list_models, load_model_file
from gpumodel.llm.runtimes import DEFAULT_RUNTIME, RUNTIME_NAMES, RUNTIMES, Runtime, get_runtime
from gpumodel.llm.serving import ServingOption, ServingPlan, plan_serving
from gpumodel.llm.training import (
    TrainingPlan,
    TrainingStep,
    model_flops_per_token,
    plan_training,
    predict_training_step,
)

__all__ = [
    "DEFAULT_RUNTIME",
    "RUNTIMES",
    "RUNTIME_NAMES",
    "InferenceResult",
    "LayerOp",
    "MemoryBreakdown",
    "MoESpec",
    "ModelOps",
    "ModelSpec",
    "Runtime",
    "ServingOption",
    "ServingPlan",
    "TrainingPlan",
    "TrainingStep",
    "activation_bytes_per_layer",
    "decoder_layer",
    "fits",
    "get_model",
    "get_runtime",
    "list_models",
    "load_model_file",
    "max_batch",
    "max_context",
    "memory",
    "model_flops_per_token",
    "model_ops",
    "model_state_bytes",
    "plan_serving",
    "plan_training",
    "predict_inference",
    "predict_training_step",
]
