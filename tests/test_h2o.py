"""``compression=h2o`` in the engine on ``tiny_llama``: the prompt's accumulated attention the prefill records and the
running sum the decode step adds to equal the model's own eager attention weights summed over every query (averaged
over each KV head's query heads); the same tokens in 1 and 4 rows (greedy and sampled, one prompt cut at prefill);
the full cache's tokens when the budget is never reached; the compiled compaction's tokens equal the eager one's.
The kept tokens against the official H2O: ``tests/test_h2o_fidelity.py``."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import DynamicCache

from snapstream_core.methods import METHODS
from snapstream_core.methods.h2o import H2O
from snapstream_core.prefill import prefill_prompt
from tests.decode_method_checks import (
    GREEDY,
    SAMPLED,
    compiled_equals_eager,
    roomy_budget_is_the_full_cache,
    rows_1_and_4_agree,
    run,
)
from tests.method_matrix import prompts

METHOD = H2O(budget=24, interval=8, window=4)


def eager_sums(model, ids: list[int]) -> list[torch.Tensor]:
    """Per layer (H_kv, N): the model's eager softmax weights on each of the ``ids`` tokens, summed over the prompt
    forward's queries and one decode forward per later token, averaged over each KV head's query heads."""
    cfg = model.config
    group = cfg.num_attention_heads // cfg.num_key_value_heads
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            cache = DynamicCache()
            out = model(input_ids=torch.tensor([ids[:1]]), past_key_values=cache, output_attentions=True)
            sums = [a[0].sum(1) for a in out.attentions]  # (H, 1)
            for i in range(1, len(ids)):
                out = model(input_ids=torch.tensor([[ids[i]]]), position_ids=torch.tensor([[i]]),
                            past_key_values=cache, output_attentions=True)
                sums = [torch.cat([s, s.new_zeros(s.shape[0], 1)], -1) + a[0, :, 0] for s, a in
                        zip(sums, out.attentions)]
    finally:
        model.set_attn_implementation(before)
    return [s.view(-1, group, s.shape[-1]).mean(1) for s in sums]


@pytest.mark.parametrize("chunk", [None, 7], ids=["one_chunk", "chunks_of_7"])
def test_the_prefill_records_the_prompts_attention_summed_over_its_queries(tiny_model, chunk):
    (p,) = prompts((30,))
    cache, _ = prefill_prompt(tiny_model, torch.tensor([p]), replace(METHOD, budget=64), chunk_size=chunk)
    # one forward over the prompt equals token-by-token decoding's causal weights
    for layer, want in zip(cache.layers, eager_sums(tiny_model, p)):
        torch.testing.assert_close(layer.prompt_attention[0], want, rtol=1e-4, atol=1e-5)


def test_the_decode_step_adds_its_attention_to_the_running_sum(tiny_model):
    roomy = replace(METHOD, budget=64)  # never compacts: slot s holds position s
    (p,) = prompts((13,))
    tokens, eng = run(tiny_model, roomy, [p], rows=1, check_every=1)
    seq = p + tokens[0, 0][:-1]  # the last token drawn is never fed back
    assert eng.compactor.calls == 0
    for layer, want in enumerate(eager_sums(tiny_model, seq)):
        got = eng.batch.attn_sum[layer, 0]
        torch.testing.assert_close(got[:, : len(seq)], want, rtol=1e-4, atol=1e-5)
        assert not got[:, len(seq) :].any()


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_one_row_and_four_rows_give_the_same_tokens(tiny_model, sampling):
    assert METHOD.needs_selection(30)  # the second prompt is cut at prefill
    rows_1_and_4_agree(tiny_model, METHOD, (13, 30), sampling)


def test_a_budget_never_reached_gives_the_full_caches_tokens(tiny_model):
    roomy_budget_is_the_full_cache(tiny_model, METHOD, (13, 30))


def test_the_compiled_step_and_compaction_give_the_eager_tokens(tiny_model):
    compiled_equals_eager(tiny_model, METHOD, (13, 30))


def test_registered_with_its_policy():
    assert METHODS["h2o"] is H2O and H2O.policy == "compacting" and H2O.accumulates_attention
