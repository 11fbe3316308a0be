"""A method's geometry: the slots of a ratio budget follow the prompt, the prefill's query rows and moments, the
budget caps (the slots and entries held are the storage policy's, ``tests/test_policies.py``)."""

from __future__ import annotations

import pytest

import snapstream_core as ss
from tests.method_matrix import IDS, METHODS


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
def test_query_rows_and_moments_the_selection_reads(method, T):
    """What the prefill keeps for the selection (the slots and entries held are the storage policy's:
    ``tests/test_policies.py`` checks them against a real prefill)."""
    scorer = method.scorer_method() if hasattr(method, "scorer_method") else method  # adakv reads its scorer's
    window = min(scorer.window, T) if hasattr(scorer, "window") else int(scorer.method == "tova")
    assert method.query_rows(T) == (window if method.needs_selection(T) else 0)
    expected_moments = scorer.sinks if scorer.method == "expected_attention" and method.needs_selection(T) else None
    assert method.query_moments(T) == expected_moments


def test_every_method_declares_what_its_budget_caps():
    from snapstream_core.methods import METHODS
    from snapstream_core.methods.base import BUDGET_CAPS

    caps = {name: cls.budget_cap for name, cls in METHODS.items()}
    assert all(cap in BUDGET_CAPS for cap in caps.values()), caps
    assert caps["none"] == "none" and caps["snapkv"] == "prompt" and caps["streaming_llm"] == "cache"
