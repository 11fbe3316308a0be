"""A method owns its geometry: the slots of a decode row, the prefill's query rows and the tokens held, for every
method and ratio variant, equal to what a real prefill and decode on ``tiny_llama`` leave in the cache."""

from __future__ import annotations

import pytest
import torch

import snapstream_core as ss
from snapstream_core.prefill import prefill_prompt
from tests.method_matrix import IDS, METHODS, prompts


def test_ratio_slots_follow_the_prompt_not_an_unbounded_one():
    """``snapstream`` with ``ratio``: the slots of a 1,000-token prompt, not of 2**40 tokens (tera-bytes)."""
    m = ss.SnapStream(ratio=0.75, recent=256)
    assert m.slots(1000, 4096) == 250 + 256
    assert m.slots(128_000, 32_768) == 32_000 + 256
    assert ss.SnapKV(ratio=0.75).slots(1000, 100) == 250 + 99
    assert ss.NoCompression().slots(1000, 100) == 1099
    assert ss.StreamingLLM(sinks=4, recent=60).slots(10, 100) == 4 + 60


@pytest.mark.parametrize("method", METHODS, ids=IDS)
@pytest.mark.parametrize("T", [40, 130])
def test_geometry_matches_the_prefilled_cache(tiny_model, method, T):
    (ids,) = prompts((T,))
    cache, _ = prefill_prompt(tiny_model, torch.tensor([ids]), method)
    layer = cache.layers[0]
    assert layer.tokens_held() == method.kept(T) == method.tokens_held(T, 0)
    assert layer.keys.shape[-2] == method.prefill_slots(T)
    if method.compresses:
        assert layer.n_frozen == method.frozen(T)
    assert method.slots(T, 10) >= method.tokens_held(T, 9)  # a row holds every token fed back
    if method.ring is not None:
        assert method.slots(T, 10) == method.slots(T, 10_000)
    window = min(method.window, T) if hasattr(method, "window") else int(method.method == "tova")
    assert method.query_rows(T) == (window if method.needs_selection(T) else 0)
    expected_moments = method.sinks if method.method == "expected_attention" and method.needs_selection(T) else None
    assert method.query_moments(T) == expected_moments


def test_every_method_declares_what_its_budget_caps():
    from snapstream_core.methods import METHODS
    from snapstream_core.methods.base import BUDGET_CAPS

    caps = {name: cls.budget_cap for name, cls in METHODS.items()}
    assert all(cap in BUDGET_CAPS for cap in caps.values()), caps
    assert caps["none"] == "none" and caps["snapkv"] == "prompt" and caps["streaming_llm"] == "cache"
