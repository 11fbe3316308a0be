"""Compaction in the engine (``rkv``, ``snapkv_decode``) on ``tiny_llama``: the tokens of a plain transformers
decode compacted by hand at the same points, the same tokens in 1 or 4 rows (greedy and sampled, prompts that
compact at different steps), the full cache's tokens when the budget is never reached, the entries held per step
against ``tokens_held`` (the sawtooth) and ``kv_tokens_peak``, and one compiled graph for the decode step plus one
for the compaction across rounds."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter
from transformers import AttentionInterface, DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

import snapstream_core as ss
from snapstream_core.engine import Engine, EngineItem
from snapstream_core.methods.decode_base import CompactView, compact_order
from snapstream_core.methods.rkv import RKV
from snapstream_core.methods.snapkv_decode import SnapKVDecode
from tests.method_matrix import prompts

METHODS = [RKV(budget=24, interval=8, window=4), SnapKVDecode(budget=24, interval=8, window=4)]
IDS = ["rkv", "snapkv_decode"]
GREEDY = ss.SamplingConfig(max_new_tokens=26)
SAMPLED = ss.SamplingConfig(max_new_tokens=26, temperature=0.8, top_p=0.95)


def run(model, method, ps, sampling=GREEDY, rows=4, samples=(0,), engine_cls=Engine, **kw):
    """{(item, sample): tokens}, {(item, sample): kv figures}, and the engine."""
    eng = engine_cls(model, method, sampling, eos=[], rows=rows, **kw)
    items = [EngineItem(p, 7 + i, samples, sampling.max_new_tokens, tag=i) for i, p in enumerate(ps)]
    tokens, kv = {}, {}
    for ended in eng.run(items):
        for f in ended:
            tokens[f.item.tag, f.sample_idx] = f.tokens
            kv[f.item.tag, f.sample_idx] = f.kv
    return tokens, kv, eng


def _compact_by_hand(method, cache, recorded, T: int, S: int) -> None:
    """Each layer of a plain cache keeps ``compact_order`` of its held entries (batch 1), scored with the last
    ``query_window`` queries recorded. At a decode compaction the entries are laid out in ``S`` slots as the
    engine's rows hold them (``topk`` breaks ties by the length it is given: docs/engine.md)."""
    for i, layer in enumerate(cache.layers):
        _, H_kv, held, D = layer.keys.shape
        queries = torch.cat(recorded[i], dim=2)[:, :, -method.query_window :]
        pad = max(S - held, 0)
        keys = torch.cat([layer.keys, layer.keys.new_zeros(1, H_kv, pad, D)], dim=2)
        view = CompactView(
            keys=keys, values=keys, positions=torch.zeros(1, H_kv, held + pad, dtype=torch.long),
            valid=(torch.arange(held + pad) < held).expand(1, H_kv, held + pad), held=torch.tensor([held]),
            prompt_len=torch.tensor([T]), queries=queries, scaling=D**-0.5, inv_freq=None, layer_idx=i)
        order, kept = compact_order(method, view)
        idx = order[..., : int(kept)][..., None].expand(-1, -1, -1, D)
        layer.keys, layer.values = layer.keys.gather(2, idx), layer.values.gather(2, idx)


def reference_decode(model, method, ids: list[int], new: int) -> list[int]:
    """Greedy decode with a plain ``DynamicCache`` and plain SDPA, compacted by hand: after the prompt's full
    attention when it is cut (``T >= budget``), and after the token at position p is written and attended when
    ``method.compacts``."""
    recorded: dict[int, list[torch.Tensor]] = {}

    def record(module, query, key, value, attention_mask, **kwargs):
        recorded.setdefault(module.layer_idx, []).append(query)
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("decode_reference", record)
    AttentionMaskInterface.register("decode_reference", sdpa_mask)
    before = model.config._attn_implementation
    model.set_attn_implementation("decode_reference")
    try:
        T = len(ids)
        cache = DynamicCache()
        logits = model(input_ids=torch.tensor([ids]), past_key_values=cache).logits[0, -1]
        if method.needs_selection(T):
            _compact_by_hand(method, cache, recorded, T, S=0)
        out = [int(logits.argmax())]
        for k in range(1, new):
            pos = T + k - 1
            logits = model(input_ids=torch.tensor([[out[-1]]]), position_ids=torch.tensor([[pos]]),
                           past_key_values=cache).logits[0, -1]
            if method.compacts(T, k):
                _compact_by_hand(method, cache, recorded, T, S=method.slots(T, new))
            out.append(int(logits.argmax()))
        return out
    finally:
        model.set_attn_implementation(before)


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_engine_tokens_equal_a_plain_decode_compacted_by_hand(tiny_model, method):
    ps = prompts((13, 30))  # the second is cut at prefill; first compactions at different steps
    got, _, eng = run(tiny_model, method, ps)
    assert eng.compactor.calls >= 5
    for i, p in enumerate(ps):
        assert got[i, 0] == reference_decode(tiny_model, method, p, GREEDY.max_new_tokens), i


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_one_row_and_four_rows_give_the_same_tokens(tiny_model, sampling):
    method = METHODS[0]  # decode-time SnapKV shares every step but the scores (test_decode_fidelity.py)
    """Four rows hold both items' samples at once, due at different steps (compacted together, masked by row)."""
    ps = prompts((13, 30))
    one, _, _ = run(tiny_model, method, ps, sampling, rows=1, samples=(0, 1))
    four, _, eng = run(tiny_model, method, ps, sampling, rows=4, samples=(0, 1))
    assert one == four and len(four) == 4 and eng.compactor.calls >= 4


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_a_budget_never_reached_gives_the_full_caches_tokens(tiny_model, method):
    from dataclasses import replace

    roomy = replace(method, budget=100)
    ps = prompts((13, 30))
    assert all(roomy.keeps_all(len(p), GREEDY.max_new_tokens) for p in ps)
    got, _, eng = run(tiny_model, roomy, ps)
    full, _, _ = run(tiny_model, ss.NoCompression(), ps)
    assert got == full and eng.compactor.calls == 0


class Recording(Engine):
    """Records row 0's entries held after each step, before and after its compaction."""

    def _compact(self, busy):
        held = lambda: int(self.cache.visible[0, 0, 0].sum())  # noqa: E731
        self.trace.append(held())
        super()._compact(busy)
        self.trace.append(held())


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_entries_held_follow_the_sawtooth_and_the_peak_is_recorded(tiny_model, method):
    (p,) = prompts((13,))
    Recording.trace = []
    _, kv, eng = run(tiny_model, method, [p], engine_cls=Recording)
    T, steps = len(p), GREEDY.max_new_tokens - 1
    expected = []
    for k in range(1, steps + 1):
        expected += [method.tokens_held(T, k - 1) + 1, method.tokens_held(T, k)]
    assert Recording.trace == expected
    assert kv[0, 0]["kv_tokens_peak"] == max(Recording.trace) == method.peak_tokens(T, steps)
    assert max(Recording.trace) == method.budget + method.interval == eng.cache.slots
    assert min(Recording.trace[24:]) == method.budget  # compacted back to the budget


def test_one_graph_for_the_step_and_one_for_the_compaction(tiny_model):
    method = METHODS[0]
    torch._dynamo.reset()
    counter = CompileCounter()
    ps = prompts((13, 30))
    eager, _, _ = run(tiny_model, method, ps)
    compiled, _, eng = run(tiny_model, method, ps, compile=True, compile_backend=counter)
    assert compiled == eager
    assert eng.compactor.calls >= 5 and counter.frame_count == 2
    torch._dynamo.reset()
