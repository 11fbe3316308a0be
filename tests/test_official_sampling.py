"""Sampling as the official harnesses sample: ``gen.top_k=0`` applies no top-k warper (vLLM's default, which
open-r1, lighteval and lcb_runner rely on); only ``top_k > 0`` does. Checked on the scores ``generate`` really used."""

from __future__ import annotations

import pytest
import torch

from snapstream_core.generate import SamplingConfig

VOCAB = 1000  # tests/conftest.py tiny_config


def processed_scores(model, sampling: SamplingConfig) -> torch.Tensor:
    """(steps, VOCAB) scores after the logits processors, from the real ``model.generate``."""
    torch.manual_seed(0)
    gc = sampling.generation_config(sampling.max_new_tokens, eos=[], pad=0)
    gc.return_dict_in_generate = True
    gc.output_scores = True
    ids = torch.randint(1, VOCAB, (1, 12))
    out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gc)
    return torch.cat(out.scores)


def test_top_k_zero_applies_no_top_k_warper(tiny_model):
    sampling = SamplingConfig(max_new_tokens=3, temperature=0.6, top_p=0.95, top_k=0)
    kept = torch.isfinite(processed_scores(tiny_model, sampling)).sum(-1)
    # random weights: near-flat logits, so top-p 0.95 keeps far more than transformers' default top-k of 50
    assert (kept > 50).all(), kept
    assert sampling.warper_names() == "temperature=0.6,top_p=0.95"


def test_top_k_positive_applies_top_k(tiny_model):
    sampling = SamplingConfig(max_new_tokens=3, temperature=0.6, top_p=0.95, top_k=7)
    kept = torch.isfinite(processed_scores(tiny_model, sampling)).sum(-1)
    assert (kept <= 7).all() and (kept >= 1).all(), kept
    assert sampling.warper_names() == "temperature=0.6,top_k=7,top_p=0.95"


@pytest.mark.parametrize("top_k", [0, 7])
def test_generation_config_and_first_token_warpers_agree(tiny_model, top_k):
    """The logits processors transformers builds from our GenerationConfig are the ones ``warpers()`` builds for the
    shared first token of ``n`` samples (same classes, same order)."""
    sampling = SamplingConfig(max_new_tokens=3, temperature=0.6, top_p=0.95, top_k=top_k)
    gc = tiny_model._prepare_generation_config(sampling.generation_config(3, eos=[], pad=0))[0]
    built = tiny_model._get_logits_processor(generation_config=gc, input_ids_seq_length=12, device="cpu")
    warper_types = [type(p).__name__ for p in built if type(p).__name__.endswith("LogitsWarper")]
    assert warper_types == [type(p).__name__ for p in sampling.warpers()]
    assert ("TopKLogitsWarper" in warper_types) == (top_k > 0)


def test_greedy_records_greedy():
    assert SamplingConfig(temperature=0.0).warper_names() == "greedy"
