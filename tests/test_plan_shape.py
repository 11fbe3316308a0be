"""The ``shape:`` block of each model YAML (what the planner reads instead of the weights) equals the model: the
loaded one for the CPU models, transformers' Llama architecture for the 8B ones (built on the meta device: no
download, no memory)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from evals.config.shape import ModelShape, shape_from_model
from tests.runner_utils import compose_cfg


def _shape(name: str) -> ModelShape:
    return shape_from_model(OmegaConf.to_container(compose_cfg([f"model={name}"]).model, resolve=True))


def _of(model, dtype: str) -> ModelShape:
    c = model.config
    return ModelShape(
        n_params=sum(p.numel() for p in model.parameters()),
        n_layers=c.num_hidden_layers, hidden=c.hidden_size, intermediate=c.intermediate_size,
        n_heads=c.num_attention_heads, n_kv_heads=c.num_key_value_heads,
        head_dim=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
        vocab=c.vocab_size, max_positions=c.max_position_embeddings, dtype=dtype,
    )


def test_tiny_llama_shape_is_the_model_load_model_builds():
    from evals.config.models import load_model

    cfg = compose_cfg(["model=tiny_llama"]).model
    model, _ = load_model(cfg)
    assert _shape("tiny_llama") == _of(model, cfg.dtype)


def test_smollm2_shape_is_the_embedded_models_config():
    import torch
    from transformers import AutoConfig, LlamaForCausalLM

    from evals.config.models import embedded_dir

    config = AutoConfig.from_pretrained(str(embedded_dir()))
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    assert _shape("smollm2_135m") == _of(model, "float32")


@pytest.mark.parametrize("name", ["llama31_8b_instruct", "r1_distill_llama_8b"])
def test_8b_shapes_are_llama_3_1_8b(name):
    """Llama-3.1-8B's config.json values (both models share the architecture); n_params counted by transformers."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072,
                         tie_word_embeddings=False)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    shape = _shape(name)
    assert shape == _of(model, "bfloat16")
    assert shape.kv_bytes_per_token == 128 * 1024


def test_a_model_without_shape_is_one_line():
    with pytest.raises(ValueError, match=r"^model\.shape: x has no shape block"):
        shape_from_model({"name": "x", "dtype": "bfloat16"})
    with pytest.raises(ValueError, match=r"^model\.shape\.n_layers: must be an integer >= 1"):
        ModelShape(n_params=1, n_layers=0, hidden=1, intermediate=1, n_heads=1, n_kv_heads=1, head_dim=1, vocab=1,
                   max_positions=1, dtype="float32")
