"""Transformer model presets: a frozen ``ModelSpec`` per model, loaded from YAML with sources.

Shipped presets live in ``specs/models/*.yaml``; users add their own files or directories
(``get_model("my-model.yaml")``, ``list_models(dirs=[...])`` or ``GPUMODEL_MODELS_PATH``).
A file holds the fields of ``ModelSpec``; a typo in a key is an error naming the key.

Parameter counts are exact for the architecture the fields describe (decoder-only, pre-norm):

    attention   h*(H + 2*KV)*d + H*d*h           (+ (H + 2*KV)*d + h biases)
    MLP         SwiGLU 3*h*f, GELU MLP 2*h*f     (+ biases), times experts for MoE, + router h*E
    norms       2 per layer + 1 final, h (RMSNorm) or 2h (LayerNorm) each
    embeddings  V*h tokens (+ n_ctx*h learned positions); LM head V*h unless tied

with h = hidden, H = heads, KV = kv_heads, d = head_dim, f = ffn_hidden, V = vocab.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from gpumodel import _paths
from gpumodel._validators import Checked, NonEmptyStr, SeqTokens, Size
from gpumodel.errors import SpecError, UnknownModelError, UnsupportedError
from gpumodel.specs import find_by_name, index_yaml_dirs, load_yaml_model


class _Frozen(Checked):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


def _count(value: object) -> int | None:
    """``value`` as a positive int when it is one (a whole float too), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer() and 0 < value <= 2**53:
        return int(value)
    return value if isinstance(value, int) and 0 < value <= 2**53 else None


class MoESpec(_Frozen):
    """Sparse mixture of experts: each token goes to ``top_k`` of ``experts`` MLPs.
    ``routing_weights``: the dtype of the top-k weights the experts' outputs are scaled by in
    HF's eager code: ``fp32`` (Mixtral keeps its softmax's fp32; the weighted rows are then
    fp32 until the sum over top_k) or ``model`` (Qwen2-MoE and Qwen3-MoE cast them to the
    model's dtype)."""

    experts: Size = Field(ge=2)
    top_k: Size
    routing_weights: Literal["fp32", "model"] = "fp32"

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.top_k > self.experts:
            raise SpecError(f"top_k ({self.top_k}) exceeds experts ({self.experts})")
        return self


class ModelSource(_Frozen):
    title: str
    url: str | None = None
    note: str | None = None


class ModelSpec(_Frozen):
    """A decoder-only transformer's shape. ``kv_heads`` defaults to ``heads`` (no GQA),
    ``head_dim`` to ``hidden / heads`` and ``ffn_hidden`` to ``4 * hidden``."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-_]*$")
    name: NonEmptyStr
    aliases: tuple[NonEmptyStr, ...] = ()
    layers: Size
    hidden: Size
    heads: Size
    kv_heads: Size
    head_dim: Size
    ffn_hidden: Size
    ffn_kind: Literal["gelu_mlp", "swiglu"] = "swiglu"
    vocab: Size
    tied_embeddings: bool = False
    norm: Literal["layernorm", "rmsnorm"] = "rmsnorm"
    position: Literal["rope", "learned"] = "rope"
    bias: bool = Field(False, description="linear layers carry biases (GPT-2/GPT-3)")
    qkv_bias: bool = Field(False, description="the q, k and v projections alone carry biases "
                           "(Qwen2)")  # fmt: skip
    qk_norm: bool = Field(False, description="RMSNorm over each head's q and k before RoPE "
                          "(Qwen3)")  # fmt: skip
    hf_modules: Literal["llama", "phi3"] = Field(
        "llama", description="how Hugging Face's module code lays a layer out, for the eager and "
        "compiled runtimes: llama (q, k, v, gate and up projections apart: Llama, Mistral, "
        "Qwen2/3) or phi3 (one qkv_proj and one gate_up_proj, SiLU and the product on its "
        "strided halves, RoPE's pass-through torch.cat on q and k)")  # fmt: skip
    max_context: SeqTokens
    sliding_window: Size | None = Field(
        None, description="attention window: keys and KV cache are capped at this length"
    )
    moe: MoESpec | None = None
    attention_dropout: float = Field(
        0.0, ge=0, lt=1, description="dropout_p on the attention probabilities in training "
        "(HF attn_pdrop / attention_dropout); none at inference")  # fmt: skip
    notes: str | None = None
    sources: tuple[ModelSource, ...] = Field(min_length=1)
    origin: str | None = Field(None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: object) -> object:
        if isinstance(data, dict):
            data = dict(data)
            hidden, heads = _count(data.get("hidden")), _count(data.get("heads"))
            if heads and hidden:  # a wrong-typed value gets no default: its own check names it
                data.setdefault("kv_heads", heads)
                if "head_dim" not in data and hidden % heads:
                    raise SpecError(f"hidden ({hidden}) is not a multiple of heads ({heads}): "
                                    "give head_dim")  # fmt: skip
                data.setdefault("head_dim", hidden // heads)
            if hidden:
                data.setdefault("ffn_hidden", 4 * hidden)
        return data

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.heads % self.kv_heads:
            raise SpecError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        return self

    # -- sizes ------------------------------------------------------------------------------

    def check_context(self, tokens: int, what: str = "context") -> int:
        """``tokens`` where the model attends over that many, else the one-line error: its
        positions (learned, or RoPE as trained) end at ``max_context``. A context-extended
        variant is a model YAML with a larger max_context."""
        if tokens > self.max_context:
            raise UnsupportedError(f"{what} {tokens} exceeds {self.id}'s max_context "
                                   f"{self.max_context}")  # fmt: skip
        return tokens

    @property
    def q_dim(self) -> int:
        """Width of the query projection, heads * head_dim (equals hidden for most models)."""
        return self.heads * self.head_dim

    @property
    def hf_layout(self) -> str:
        """What HF's modules launch beyond Llama's: "qwen3" (q/k norms), "phi3", "moe" (a
        mixture of experts in place of the MLP) or "llama"."""
        if self.qk_norm:
            return "qwen3"
        return "moe" if self.moe is not None and self.hf_modules == "llama" else self.hf_modules

    def llama_layout(self, moe: bool = False) -> ModelSpec:
        """The same model laid out as HF's Llama modules (no q/k norms, projections apart, a
        dense MLP of one expert's size); ``moe=True`` keeps its experts (HF's Mixtral)."""
        update: dict = {"qk_norm": False, "hf_modules": "llama"}
        if not moe:
            update["moe"] = None
        return self.model_copy(update=update)

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def norm_params(self) -> int:
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    def attention_params(self) -> int:
        h, q, kv = self.hidden, self.q_dim, self.kv_dim
        weights = h * (q + 2 * kv) + q * h
        biases = (q + 2 * kv + h) if self.bias else (q + 2 * kv) if self.qkv_bias else 0
        return weights + biases + (2 * self.head_dim if self.qk_norm else 0)

    def mlp_params(self) -> int:
        """One expert's (or the dense layer's) MLP."""
        h, f = self.hidden, self.ffn_hidden
        if self.ffn_kind == "swiglu":
            return 3 * h * f + ((2 * f + h) if self.bias else 0)
        return 2 * h * f + ((f + h) if self.bias else 0)

    def router_params(self) -> int:
        return self.hidden * self.moe.experts if self.moe else 0

    def layer_params(self, active: bool = False) -> int:
        """Parameters of one decoder layer; ``active``: only the top_k experts a token uses."""
        experts = 1 if self.moe is None else (self.moe.top_k if active else self.moe.experts)
        return (
            self.attention_params()
            + experts * self.mlp_params()
            + self.router_params()
            + 2 * self.norm_params
        )

    def embedding_params(self) -> int:
        """Token table plus learned position table (the input side)."""
        pos = self.max_context * self.hidden if self.position == "learned" else 0
        return self.vocab * self.hidden + pos

    def lm_head_params(self) -> int:
        """Separate output projection; 0 when tied to the token embedding."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    def param_count(self, active: bool = False) -> int:
        """Total parameters (``active=True``: those one token uses, for MoE)."""
        return (
            self.layers * self.layer_params(active)
            + self.norm_params
            + self.embedding_params()
            + self.lm_head_params()
        )

    def matmul_param_count(self, active: bool = True) -> int:
        """Parameters that take part in a matrix product per token: every layer's weights (the
        ``top_k`` experts for MoE) plus the LM head (the tied table when tied). The input
        embedding gather and the position table do no FLOPs. This is the N of 2N forward and
        6N training FLOPs per token."""
        return self.layers * self.layer_params(active) + self.norm_params + self.vocab * self.hidden

    def kv_cache_bytes_per_token(self, bytes_per_element: float = 2.0) -> float:
        """K and V of every layer for one token: ``2 * L * kv_heads * head_dim * bytes``."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * bytes_per_element

    def attended(self, context: int) -> int:
        """Keys a query attends to (and KV-cache length) at ``context``: capped by the window."""
        from gpumodel.ops.base import at_most  # numpy arrays of contexts too (the sweeps)

        return at_most(context, self.sliding_window) if self.sliding_window else context

    def summary(self) -> dict[str, object]:
        data = self.model_dump(mode="json", exclude={"sources", "notes"})
        data["params"] = self.param_count()
        if self.moe:
            data["active_params"] = self.param_count(active=True)
        data["kv_cache_bytes_per_token_bf16"] = self.kv_cache_bytes_per_token(2.0)
        return data


# ---------------------------------------------------------------------------------------------
# loading


def load_model_file(path: str | Path) -> ModelSpec:
    """Parse and validate one model YAML file; errors name the file and the field."""
    return load_yaml_model(path, ModelSpec, "model")


def model_dirs(extra: Iterable[str | Path] = ()) -> list[Path]:
    """Shipped presets, then ``GPUMODEL_MODELS_PATH`` (os.pathsep-separated), then ``extra``."""
    dirs = [_paths.models_dir()]
    env = os.environ.get("GPUMODEL_MODELS_PATH", "")
    dirs += [Path(p) for p in env.split(os.pathsep) if p]
    return dirs + [Path(p) for p in extra]


class ModelLibrary:
    """All model presets on the search path, by id and alias (later directories win)."""

    def __init__(self, dirs: Iterable[Path]):
        self.models, self.aliases = index_yaml_dirs(dirs, load_model_file, "models")

    def get(self, name: str) -> ModelSpec:
        model = find_by_name(name, self.models, self.aliases)
        if model is None:
            raise UnknownModelError(name, list(self.models) + list(self.aliases))
        return model


@lru_cache(maxsize=16)
def _library(dirs: tuple[str, ...]) -> ModelLibrary:
    return ModelLibrary(Path(d) for d in dirs)


def _lib(dirs: Iterable[str | Path]) -> ModelLibrary:
    from gpumodel._validators import check_paths

    return _library(tuple(str(d) for d in model_dirs(check_paths(dirs, "model dirs"))))


def get_model(name_or_path: str | Path | ModelSpec, dirs: Iterable[str | Path] = ()) -> ModelSpec:
    """A model by id or alias (case-insensitive), or from a YAML file path.

    >>> get_model("llama-2-7b").param_count()
    6738415616
    """
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    from gpumodel._validators import check_name

    text = check_name(name_or_path, "model")
    if text.endswith((".yaml", ".yml")) or Path(text).is_file():
        return load_model_file(text)
    return _lib(dirs).get(text)


def list_models(dirs: Iterable[str | Path] = ()) -> list[ModelSpec]:
    lib = _lib(dirs)
    return [lib.models[k] for k in sorted(lib.models)]
