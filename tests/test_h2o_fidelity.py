"""H2O keeps the tokens the official H2O keeps (``tests/data/h2o_compaction.pt``, written by ``bench/h2o_fixture.py``
from FMInference/H2O's ``H2OKVCache_LayerWise`` run unmodified on a trace of the embedded model): the whole
teacher-forced decode replayed on our own state -- the prompt's attention summed at prefill
(:func:`prompt_attention`), each step's weights added (:func:`step_attention`, what the decode step's attention
adds), the engine's compaction (:func:`compact_rows`, which moves the sums with the slots) on the method's schedule --
keeps, at every cut and on every KV head of both traced layers, the positions the reference keeps. Two schedules:
after every token (``interval=1``, the reference's own, the prompt cut at prefill) and every 16 tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from snapstream_core.engine.compact import compact_rows
from snapstream_core.methods.base import PrefillView
from snapstream_core.methods.decode_scores import prompt_attention, step_attention
from snapstream_core.methods.h2o import H2O

FIXTURE = Path(__file__).parent / "data" / "h2o_compaction.pt"


def replay(method: H2O, keys: torch.Tensor, queries: torch.Tensor, T: int) -> list[torch.Tensor]:
    """keys (L, H_kv, N, D), queries (L, H, N, D), the traced layers as the layers of one engine row -> the held
    positions (L, H_kv, kept) after every compaction that dropped tokens (the prompt cut first, when there is one)."""
    L, H_kv, N, D = keys.shape
    scale = D**-0.5
    S = method.slots(T, N - T + 1)
    k_slots = [keys.new_zeros(1, H_kv, S, D) for _ in range(L)]
    v_slots = [keys.new_zeros(1, H_kv, S, D) for _ in range(L)]
    visible = torch.zeros(L, 1, H_kv, S, dtype=torch.bool)
    pos = torch.zeros(L, 1, H_kv, S, dtype=torch.long)
    attn_sum = torch.zeros(L, 1, H_kv, S)
    cuts = []
    for layer in range(L):
        q, k = queries[layer][None, :, :T], keys[layer][None, :, :T]
        idx = torch.arange(T).expand(1, H_kv, T)
        summed = prompt_attention(q, k, scale)
        if method.needs_selection(T):
            view = PrefillView(query=q[:, :, :0], keys=k, key_valid=torch.ones(1, T, dtype=torch.bool),
                               scaling=scale, attn_sum=summed)
            idx = method.select(view).indices
        n = idx.shape[-1]
        k_slots[layer][:, :, :n] = k.gather(2, idx[..., None].expand(1, H_kv, n, D))
        pos[layer, :, :, :n] = idx
        attn_sum[layer, :, :, :n] = summed.gather(-1, idx)
        visible[layer, :, :, :n] = True
    held = n
    if held < T:
        cuts.append(pos[:, 0, :, :held].clone())
    for p in range(T, N):
        for layer in range(L):
            k_slots[layer][0, :, held] = keys[layer][:, p]
            pos[layer, 0, :, held] = p
            visible[layer, 0, :, held] = True
            attn_sum[layer] += step_attention(queries[layer][None, :, p : p + 1], k_slots[layer], visible[layer],
                                              scale)
        held += 1
        steps = p - T + 1
        if method.compacts(T, steps):
            kept = int(compact_rows(method, k_slots, v_slots, visible, pos, None, torch.tensor([T]),
                                    torch.tensor([p]), torch.tensor([True]), scale, None, None, attn_sum)[0])
            assert kept == method.tokens_held(T, steps)
            assert not attn_sum[:, :, :, kept:].any()  # freed slots start again from zero
            if kept < held:
                cuts.append(pos[:, 0, :, :kept].clone())
            held = kept
    return cuts


@pytest.mark.parametrize("schedule", ["every_step", "interval"])
def test_a_replayed_decode_keeps_what_the_reference_keeps(schedule):
    fx = torch.load(FIXTURE)
    p = fx["params"]
    hh_size, interval = p["schedules"][schedule]
    method = H2O(budget=hh_size + p["window"], interval=interval, window=p["window"])
    layers = list(p["layers"])
    keys = torch.stack([fx["layers"][i]["keys"].float() for i in layers])
    queries = torch.stack([fx["layers"][i]["queries"].float() for i in layers])
    ours = replay(method, keys, queries, p["prompt"])
    assert method.needs_selection(p["prompt"]) == (schedule == "every_step")
    for li, layer in enumerate(layers):
        reference = fx["layers"][layer][schedule]  # (cuts, H_kv, kept), the reference's (position) order
        assert len(ours) == reference.shape[0] >= 10
        for c, cut in enumerate(ours):
            got = cut[li].sort(dim=-1).values
            assert torch.equal(got, reference[c].long().sort(dim=-1).values), f"layer {layer} cut {c}"
