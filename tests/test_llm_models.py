"""Model presets: parameter counts against published numbers, loading, errors."""

from __future__ import annotations

import pytest

from gpumodel.errors import SpecError, UnknownModelError
from gpumodel.llm import get_model, list_models, load_model_file

# Published parameter counts; each test tolerance is stated next to the number.
PUBLISHED = {
    # HF model card openai-community/gpt2: "the smallest version of GPT-2, with 124M parameters"
    "gpt2-small": (124e6, 0.01),
    # Llama 2 paper (Touvron et al. 2023) Table 1 "7B"; HF meta-llama/Llama-2-7b-hf: 6.74B
    "llama-2-7b": (6.74e9, 0.01),
    # HF meta-llama/Llama-2-13b-hf: 13.0B (paper Table 1: 13B)
    "llama-2-13b": (13.0e9, 0.01),
    # HF meta-llama/Llama-2-70b-hf: 69.0B (the paper's nominal "70B" is 1.5% off)
    "llama-2-70b": (69.0e9, 0.01),
    # HF meta-llama/Meta-Llama-3-8B: 8.03B
    "llama-3-8b": (8.03e9, 0.01),
    # HF meta-llama/Meta-Llama-3-70B: 70.6B
    "llama-3-70b": (70.6e9, 0.01),
    # HF meta-llama/Llama-3.1-8B and -70B model cards: 8.03B and 70.6B (Llama 3's architectures)
    "llama-3.1-8b": (8.03e9, 0.01),
    "llama-3.1-70b": (70.6e9, 0.01),
    # Llama 3 Herd paper: 405B; HF meta-llama/Llama-3.1-405B: 406B
    "llama-3-405b": (405e9, 0.01),
    # HF mistralai/Mistral-7B-v0.1: 7.24B
    "mistral-7b": (7.24e9, 0.01),
    # Mistral AI, "Mixtral of experts" (Dec 2023): 46.7B total
    "mixtral-8x7b": (46.7e9, 0.01),
    # LLaMA paper (Touvron et al. 2023a) Table 2: 65.2B
    "llama-65b": (65.2e9, 0.01),
    # Brown et al. 2020, Table 2.1: 175.0B
    "gpt-3-175b": (175.0e9, 0.01),
    # Zhang et al. 2024 (TinyLlama): "1.1B"
    "tinyllama-1.1b": (1.1e9, 0.01),
    # HF model cards: Qwen/Qwen2.5-7B "Number of Parameters: 7.61B", Qwen/Qwen3-8B "8.2B",
    # microsoft/Phi-3-mini-4k-instruct "3.8B parameters"
    "qwen2.5-7b": (7.61e9, 0.01),
    "qwen3-8b": (8.2e9, 0.01),
    "phi-3-mini": (3.8e9, 0.01),
    # HF model card Qwen/Qwen3-30B-A3B: "Number of Parameters: 30.5B in total"
    "qwen3-30b-a3b": (30.5e9, 0.01),
}


@pytest.mark.parametrize("model_id", sorted(PUBLISHED))
def test_param_count_matches_published(model_id):
    published, tolerance = PUBLISHED[model_id]
    count = get_model(model_id).param_count()
    assert abs(count - published) / published <= tolerance


def test_exact_counts_from_configs():
    # arithmetic on the HF config.json values, no rounding (see models.py for the formula)
    assert get_model("llama-2-7b").param_count() == 6_738_415_616
    assert get_model("gpt2-small").param_count() == 124_439_808
    assert get_model("llama-3-8b").param_count() == 8_030_261_248
    # 2 x 32000 x 2048 + 22 x (2 x 2048^2 + 2 x 2048 x 256 + 3 x 2048 x 5632 + 2 x 2048) + 2048
    assert get_model("tinyllama-1.1b").param_count() == 1_100_048_384


def test_mixtral_active_params():
    # Mistral AI blog: "only uses 12.9B parameters per token"
    m = get_model("mixtral-8x7b")
    assert abs(m.param_count(active=True) - 12.9e9) / 12.9e9 < 0.01


def test_every_preset_has_sources_and_is_listed():
    models = list_models()
    assert {m.id for m in models} == set(PUBLISHED)
    assert all(m.sources and m.sources[0].title for m in models)


def test_aliases_and_case():
    assert get_model("Llama3-8B").id == "llama-3-8b"
    # Llama 3.1 is its own preset, not an alias of Llama 3: its context is 128K, not 8K
    assert (get_model("llama-3.1-8b").id, get_model("llama-3.1-8b").max_context) == (
        "llama-3.1-8b", 131072)  # fmt: skip
    assert get_model("llama-3-8b").max_context == 8192
    assert get_model("mixtral").moe.top_k == 2


def test_unknown_model_lists_close_matches():
    with pytest.raises(UnknownModelError, match="did you mean llama-3-8b"):
        get_model("llama-3-9b")
    with pytest.raises(LookupError):
        get_model("nothing-like-it")


def test_user_file_defaults_and_typos(tmp_path):
    good = tmp_path / "mine.yaml"
    good.write_text("id: mine\nname: Mine\nlayers: 2\nhidden: 256\nheads: 4\nvocab: 1000\n"
                    "max_context: 512\nsources: [{title: made up}]\n")  # fmt: skip
    m = get_model(str(good))
    assert (m.kv_heads, m.head_dim, m.ffn_hidden) == (4, 64, 1024)
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text() + "hiden: 12\n")
    with pytest.raises(SpecError, match="hiden: unknown key"):
        load_model_file(bad)


def test_a_head_width_that_does_not_divide_is_asked_for(tmp_path):
    """hidden 4095 over 32 heads would floor head_dim to 127 and price a different model: a
    file must say its head_dim then (Gemma-style models do: 8 heads x 256 over hidden 2048)."""
    base = ("id: odd\nname: Odd\nlayers: 2\nvocab: 1000\nmax_context: 512\n"
            "sources: [{title: made up}]\n")  # fmt: skip
    odd = tmp_path / "odd.yaml"
    odd.write_text(base + "hidden: 4095\nheads: 32\n")
    with pytest.raises(SpecError, match=r"hidden \(4095\) is not a multiple of heads \(32\)"):
        load_model_file(odd)
    odd.write_text(base + "hidden: 4095\nheads: 32\nhead_dim: 128\n")
    assert load_model_file(odd).q_dim == 4096


def test_user_directory_on_the_search_path(tmp_path):
    (tmp_path / "x.yaml").write_text(
        "id: extra-model\nname: X\nlayers: 1\nhidden: 64\nheads: 2\nvocab: 10\nmax_context: 8\n"
        "sources: [{title: t}]\n"
    )
    assert get_model("extra-model", dirs=[tmp_path]).hidden == 64
    assert "extra-model" in {m.id for m in list_models(dirs=[tmp_path])}


def test_gqa_validation():
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        get_model("llama-3-8b").model_validate(
            {**get_model("llama-3-8b").model_dump(), "kv_heads": 5}
        )
