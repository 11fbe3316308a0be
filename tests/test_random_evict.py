"""``compression=random``: seeded by the sample, the prompt always kept, the decoded tokens kept at random.

At the compaction (``compact_rows``, the engine's own call, over replayed decodes): after every compaction a row
holds its whole prompt, its last ``window`` tokens and, of the decoded tokens before the window, the ones of highest
:func:`priorities` among all it ever held there (a uniformly random subset); a sample keeps the same tokens alone in
one row or in row 2 of four beside other samples; another key keeps other tokens. Through the engine on
``tiny_llama``: the same tokens in 1 and 4 rows (greedy and sampled), the full cache's tokens when the budget is never
reached, and the compiled compaction's tokens equal to the eager one's."""

from __future__ import annotations

import pytest
import torch

from snapstream_core.engine.compact import compact_rows
from snapstream_core.engine.noise import sample_key
from snapstream_core.methods import METHODS
from snapstream_core.methods.random_evict import RandomEvict, priorities
from tests.decode_method_checks import (
    GREEDY,
    SAMPLED,
    compiled_equals_eager,
    roomy_budget_is_the_full_cache,
    rows_1_and_4_agree,
)

METHOD = RandomEvict(budget=24, interval=8, window=4)
L, H_KV, D = 2, 3, 4


def replay(method: RandomEvict, keys: list[int], T: int, steps: int) -> list[torch.Tensor]:
    """Rows of sample keys ``keys``, each a ``T``-token prompt then ``steps`` decoded tokens, compacted by
    ``compact_rows`` when ``method.compacts`` -> after each compaction the held positions (L, R, H_kv, kept)."""
    R = len(keys)
    S = method.slots(T, steps + 1)
    gen = torch.Generator().manual_seed(0)
    k_slots = [torch.randn(R, H_KV, S, D, generator=gen) for _ in range(L)]
    v_slots = [torch.randn(R, H_KV, S, D, generator=gen) for _ in range(L)]
    visible = torch.zeros(L, R, H_KV, S, dtype=torch.bool)
    visible[..., :T] = True
    pos = torch.arange(S).expand(L, R, H_KV, S).clone()
    held, out = T, []
    for p in range(T, T + steps):
        pos[..., held], visible[..., held] = p, True
        held += 1
        if method.compacts(T, p - T + 1):
            kept = compact_rows(method, k_slots, v_slots, visible, pos, None, torch.full((R,), T),
                                torch.full((R,), p), torch.ones(R, dtype=torch.bool), D**-0.5, None,
                                torch.tensor(keys))
            held = int(kept[0])
            assert held == method.tokens_held(T, p - T + 1)
            out.append(pos[..., :held].clone())
    return out


def test_each_compaction_keeps_the_prompt_the_window_and_the_highest_priorities():
    T, steps, key = 10, 60, sample_key(0, 7, 3)
    method = METHOD
    rounds = replay(method, [key], T, steps)
    assert len(rounds) >= 5
    n_random = method.cap(T) - T - method.window
    for held in rounds:
        last = int(held.max())
        for layer in range(L):
            for h in range(H_KV):
                got = set(held[layer, 0, h].tolist())
                assert set(range(T)) <= got  # the prompt, always
                window = set(range(last - method.window + 1, last + 1))
                assert window <= got
                # every decoded token before the window ever held competes: the top n_random by priority
                candidates = torch.arange(T, last - method.window + 1)
                prio = priorities(torch.tensor([key]), layer, candidates.expand(1, H_KV, -1))[0, h]
                best = set(candidates[prio.argsort(descending=True)[:n_random]].tolist())
                assert got - set(range(T)) - window == best


def test_a_sample_keeps_the_same_tokens_alone_or_beside_others_and_another_key_keeps_others():
    T, steps = 10, 60
    key = sample_key(0, 7, 3)
    alone = replay(METHOD, [key], T, steps)
    beside = replay(METHOD, [sample_key(0, 5, 0), sample_key(1, 7, 3), key, sample_key(0, 7, 4)], T, steps)
    assert all(torch.equal(a[:, 0], b[:, 2]) for a, b in zip(alone, beside))
    other = beside[-1][:, 3]
    assert not torch.equal(alone[-1][:, 0], other)
    # per layer and KV head, its own draw
    last = alone[-1][:, 0].sort(dim=-1).values
    assert not torch.equal(last[0], last[1]) and not torch.equal(last[0, 0], last[0, 1])


def test_priorities_use_no_global_rng_and_are_spread():
    state = torch.get_rng_state()
    prio = priorities(torch.tensor([11, 12]), 0, torch.arange(4096).expand(2, 1, 4096))
    assert torch.equal(torch.get_rng_state(), state)
    assert 0.48 < float(prio.mean()) < 0.52 and float(prio.min()) > 0 and float(prio.max()) < 1
    assert not torch.equal(prio[0], prio[1])


def test_the_prompt_cannot_be_unprotected():
    with pytest.raises(ValueError, match=r"^compression.protect_prompt: random keeps the prompt"):
        RandomEvict(protect_prompt=False)
    assert METHODS["random"] is RandomEvict and RandomEvict.policy == "compacting"


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_one_row_and_four_rows_give_the_same_tokens(tiny_model, sampling):
    rows_1_and_4_agree(tiny_model, METHOD, (13, 20), sampling)


def test_a_budget_never_reached_gives_the_full_caches_tokens(tiny_model):
    roomy_budget_is_the_full_cache(tiny_model, METHOD, (13, 20))


def test_the_compiled_compaction_gives_the_eager_tokens(tiny_model):
    compiled_equals_eager(tiny_model, METHOD, (13, 20))
