"""``triattention`` in the engine on ``tiny_llama``: the tokens of a plain transformers decode compacted by hand at
the reference's slack-trigger points, the same tokens in 1 or 4 rows (greedy and sampled), the full cache's tokens
when the cache never reaches ``budget + interval``, ``kv_tokens_peak`` and the entries held per step equal to the
method's sawtooth, and one compiled graph for the step plus one for the compaction across rounds."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter
from transformers import DynamicCache

import snapstream_core as ss
from snapstream_core.calibration import save_stats
from snapstream_core.methods import TriAttention
from snapstream_core.methods.decode_base import CompactView, compact_orders
from snapstream_core.rope import rope_inv_freq
from tests.method_matrix import prompts
from tests.test_decode_engine import Recording, run

LENGTHS = (13, 18)  # first compactions at steps 19 and 14 (the cache reaches 24 + 8 entries), then every 8
GREEDY = ss.SamplingConfig(max_new_tokens=30)  # compaction calls at steps 14, 19, 22 and 27
SAMPLED = ss.SamplingConfig(max_new_tokens=30, temperature=0.8, top_p=0.95)


@pytest.fixture(scope="module")
def method(tmp_path_factory):
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, 8, 2, generator=g)
    q_mean = torch.complex(q[..., 0], q[..., 1])
    path = save_stats(tmp_path_factory.mktemp("calib") / "tiny.safetensors", q_mean, q_mean.abs() * 1.3,
                      n_kv_heads=2, rope_theta=10000.0, rope_type="default")
    return TriAttention(budget=24, interval=8, calibration=str(path))


def reference_decode(model, method: TriAttention, ids: list[int], new: int) -> list[int]:
    """Greedy decode with a plain ``DynamicCache``, compacted by hand after the token that fills the cache to
    ``budget + interval`` is written and attended: every layer's entries, with their positions, through
    :func:`compact_orders` (batch 1, no padding slots)."""
    T = len(ids)
    cache = DynamicCache()
    logits = model(input_ids=torch.tensor([ids]), past_key_values=cache).logits[0, -1]
    H_kv = cache.layers[0].keys.shape[1]
    positions = [torch.arange(T).expand(1, H_kv, T) for _ in cache.layers]
    inv_freq = rope_inv_freq(model)
    out = [int(logits.argmax())]
    for k in range(1, new):
        pos = T + k - 1
        logits = model(input_ids=torch.tensor([[out[-1]]]), position_ids=torch.tensor([[pos]]),
                       past_key_values=cache).logits[0, -1]
        positions = [torch.cat([p, torch.full((1, H_kv, 1), pos)], dim=2) for p in positions]
        if method.compacts(T, k):
            held = positions[0].shape[2]
            views = [CompactView(keys=layer.keys, values=layer.values, positions=positions[i],
                                 valid=torch.ones(1, H_kv, held, dtype=torch.bool), held=torch.tensor([held]),
                                 prompt_len=torch.tensor([T]), queries=None, scaling=0.25, inv_freq=inv_freq,
                                 layer_idx=i) for i, layer in enumerate(cache.layers)]
            for i, (order, kept) in enumerate(compact_orders(method, views)):
                idx = order[..., : int(kept)]
                layer = cache.layers[i]
                gather = idx[..., None].expand(-1, -1, -1, layer.keys.shape[-1])
                layer.keys, layer.values = layer.keys.gather(2, gather), layer.values.gather(2, gather)
                positions[i] = positions[i].gather(2, idx)
        out.append(int(logits.argmax()))
    return out


def test_engine_tokens_equal_a_plain_decode_compacted_by_hand(tiny_model, method):
    ps = prompts(LENGTHS)
    got, _, eng = run(tiny_model, method, ps, GREEDY)
    assert eng.compactor.calls >= 4
    for i, p in enumerate(ps):
        assert got[i, 0] == reference_decode(tiny_model, method, p, GREEDY.max_new_tokens), i


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_one_row_and_four_rows_give_the_same_tokens(tiny_model, method, sampling):
    ps = prompts(LENGTHS)
    one, _, _ = run(tiny_model, method, ps, sampling, rows=1, samples=(0, 1))
    four, _, eng = run(tiny_model, method, ps, sampling, rows=4, samples=(0, 1))
    assert one == four and len(four) == 4 and eng.compactor.calls >= 4


def test_a_budget_never_reached_gives_the_full_caches_tokens(tiny_model, method):
    from dataclasses import replace

    roomy = replace(method, budget=64)
    ps = prompts(LENGTHS)
    assert all(roomy.keeps_all(len(p), GREEDY.max_new_tokens) for p in ps)
    got, _, eng = run(tiny_model, roomy, ps, GREEDY)
    full, _, _ = run(tiny_model, ss.NoCompression(), ps, GREEDY)
    assert got == full and eng.compactor.calls == 0


def test_entries_held_follow_the_sawtooth_and_the_peak_is_recorded(tiny_model, method):
    (p,) = prompts((13,))
    Recording.trace = []
    _, kv, eng = run(tiny_model, method, [p], GREEDY, engine_cls=Recording)
    T, steps = len(p), GREEDY.max_new_tokens - 1
    expected = []
    for k in range(1, steps + 1):
        expected += [method.tokens_held(T, k - 1) + 1, method.tokens_held(T, k)]
    assert Recording.trace == expected
    assert kv[0, 0]["kv_tokens_peak"] == max(Recording.trace) == method.peak_tokens(T, steps) == eng.cache.slots
    assert max(Recording.trace) == method.budget + method.interval and min(Recording.trace[2 * 19:]) == method.budget


def test_one_graph_for_the_step_and_one_for_the_compaction(tiny_model, method):
    """A fresh method (its calibration not read yet) compiles: the engine reads the file before tracing."""
    from dataclasses import replace

    torch._dynamo.reset()
    counter = CompileCounter()
    ps = prompts(LENGTHS)
    eager, _, _ = run(tiny_model, method, ps, GREEDY)
    compiled, _, eng = run(tiny_model, replace(method), ps, GREEDY, compile=True, compile_backend=counter)
    assert compiled == eager
    assert eng.compactor.calls >= 4 and counter.frame_count == 2
    torch._dynamo.reset()
