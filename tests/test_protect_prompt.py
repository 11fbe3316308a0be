"""``compression.protect_prompt=true`` is TriAttention's ``protect_prefill``: the prompt is kept and only the decode
segment is scored, so the prompt's keys change no decoded token's score (the attention's softmax and R-KV's
redundancy both run over the decoded tokens before the window). Without it the prompt competes and its keys do
change them. (Against the reference's kept tokens: ``tests/test_decode_fidelity.py``, ``rkv_protect``.)"""

from __future__ import annotations

import pytest
import torch

from snapstream_core.methods.decode_base import CompactView
from snapstream_core.methods.rkv import RKV
from snapstream_core.methods.snapkv_decode import SnapKVDecode

T, HELD, S, H, H_KV, D, W = 12, 40, 48, 4, 2, 8, 4


def view(keys: torch.Tensor, queries: torch.Tensor) -> CompactView:
    return CompactView(
        keys=keys, values=keys, positions=torch.arange(S).expand(1, H_KV, S), valid=(torch.arange(S) < HELD)
        .expand(1, H_KV, S), held=torch.tensor([HELD]), prompt_len=torch.tensor([T]), queries=queries,
        scaling=D**-0.5, inv_freq=None, layer_idx=0)


@pytest.mark.parametrize("cls", [RKV, SnapKVDecode], ids=["rkv", "snapkv_decode"])
def test_the_prompts_keys_change_no_decoded_score_when_it_is_protected(cls):
    gen = torch.Generator().manual_seed(0)
    keys = torch.randn(1, H_KV, S, D, generator=gen)
    queries = torch.randn(1, H, W, D, generator=gen)
    other = keys.clone()
    other[:, :, :T] = torch.randn(1, H_KV, T, D, generator=gen) * 3
    decoded = slice(T, HELD - W)
    protected = cls(budget=32, interval=8, window=W, protect_prompt=True)
    a, b = protected.compact_scores(view(keys, queries)), protected.compact_scores(view(other, queries))
    torch.testing.assert_close(a[..., decoded], b[..., decoded], rtol=0, atol=0)
    competing = cls(budget=32, interval=8, window=W)
    a, b = competing.compact_scores(view(keys, queries)), competing.compact_scores(view(other, queries))
    assert not torch.allclose(a[..., decoded], b[..., decoded])
