"""Storage policies, checked for every registered method (``tests/method_matrix.py`` builds the cases from the
registry) and a test-only ragged one (``tests/ragged_method.py``): the method states no geometry its policy owns,
the prefilled layers and the engine's rows hold what the policy says, 1 and 4 rows give the same tokens, a method
that drops nothing gives the full cache's tokens, and the memory model plans the bytes the engine allocates (the
padding of ragged heads included, beside the tokens they hold)."""

from __future__ import annotations

import pytest
import torch

import snapstream_core as ss
from snapstream_core.engine import Engine, EngineItem
from snapstream_core.generate import generate
from snapstream_core.memory import Arch, row_terms
from snapstream_core.methods import METHODS as REGISTRY
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.policies import POLICIES, RaggedPolicy, RingPolicy
from snapstream_core.prefill import prefill_prompt
from tests.method_matrix import ALL, ALL_IDS, prompts, roomy
from tests.ragged_method import HeadCounts

CASES = [*ALL, HeadCounts(prompt_budget=64)]
CASE_IDS = [*ALL_IDS, "head_counts"]
# What a policy owns: no registered class (nor a base between it and CompressionMethod) may define these.
GEOMETRY = ("footprint", "tokens_held", "peak_tokens", "mean_tokens_held", "slots", "prefill_slots")
NEW = 12
LENGTHS = (40, 130)


def engine_tokens(model, method, ps, rows, new=NEW):
    eng = Engine(model, method, ss.SamplingConfig(max_new_tokens=new), eos=[], rows=rows)
    items = [EngineItem(p, 7 + i, (0, 1), new, tag=i) for i, p in enumerate(ps)]
    got = {(f.item.tag, f.sample_idx): f for ended in eng.run(items) for f in ended}
    return {k: f.tokens for k, f in got.items()}, got, eng


# ---------------------------------------------------------------------------------------------------- no model
def test_no_method_restates_what_its_policy_owns():
    for name, cls in REGISTRY.items():
        assert cls.policy in POLICIES, name
        for klass in cls.__mro__[: cls.__mro__.index(CompressionMethod)]:
            assert not set(GEOMETRY) & set(vars(klass)), (name, klass.__name__)


@pytest.mark.parametrize("method", CASES, ids=CASE_IDS)
def test_geometry_is_the_policys_and_a_row_holds_its_peak(method):
    for T in (1, 2, 3, 13, 40, 64, 100, 300):
        policy = method.storage(T)
        assert isinstance(policy, POLICIES[method.storage_kind])
        assert policy.prefill_slots >= policy.kept == method.kept(T)
        for new in (1, 2, 9, 40):
            held = [method.tokens_held(T, k) for k in range(new)]
            # every entry held fits the row (the old StreamingLLM footprint of a prompt shorter than its sinks did
            # not: 32 entries in 29 slots)
            peak = method.peak_tokens(T, new - 1)  # a compaction's step attends before it compacts: above max(held)
            assert method.footprint(T, new - 1) <= method.slots(T, new) >= peak >= max(held)
            assert peak == max(held) or policy.name == "compacting"
            assert method.mean_tokens_held(T, new) == pytest.approx(
                sum(method.tokens_held(T, k) for k in range(1, new + 1)) / new)
        if isinstance(policy, RingPolicy):
            assert method.slots(T, 10) == method.slots(T, 10_000) == policy.n_frozen + policy.ring


def test_ragged_policy_allocates_its_padding_and_holds_its_counts():
    p = RaggedPolicy(300, 64, cap=76)
    assert (p.tokens_held(5), p.prefill_slots, p.slots(6), p.padding(6)) == (69, 76, 81, 12)
    with pytest.raises(ValueError, match="cap"):
        RaggedPolicy(300, 64, cap=63)
    m = HeadCounts(prompt_budget=64)
    assert (m.kept(300), m.slots(300, 6), m.kept(70), m.slots(70, 6)) == (64, 81, 70, 75)


# ---------------------------------------------------------------------------------------------------- tiny_llama
@pytest.mark.parametrize("method", CASES, ids=CASE_IDS)
def test_prefilled_layers_hold_what_the_policy_says(tiny_model, method):
    cfg = tiny_model.config
    L, H_kv, D = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    fmt = method.kv_format  # how an entry is stored (float32 here, or kivi's codes)
    G = fmt.group_size or 1  # an entry's bytes: those of G entries over G (kivi's key groups hold G tokens)
    slot_bytes = (fmt.layer_bytes(2 * G, 1, D, 4) - fmt.layer_bytes(G, 1, D, 4)) // G
    for (ids,) in (prompts((T,)) for T in LENGTHS):
        T = len(ids)
        cache, _ = prefill_prompt(tiny_model, torch.tensor([ids]), method)
        policy = method.storage(T)
        assert issubclass(method.layer_class(), policy.layer_class())  # the policy's layer, or its format's subclass
        assert all(type(layer) is method.layer_class() for layer in cache.layers)
        if method.compresses:
            assert all(layer.n_frozen == policy.frozen for layer in cache.layers) or policy.name == "ragged"
        stored = [layer.keys.shape[-2] for layer in cache.layers]
        held = [layer.held_entries() for layer in cache.layers]
        assert max(stored) == policy.prefill_slots  # what the memory model plans for a compressed layer
        assert sum(held) == policy.kept * L * H_kv  # the mean over layers and heads is the policy's
        row = cache.stats.as_row()
        assert row["kv_tokens_total_after_prefill"] == sum(held)
        assert row["kv_held_bytes_after_prefill"] == sum(held) * slot_bytes
        assert row["kv_bytes_after_prefill"] == sum(fmt.layer_bytes(n, H_kv, D, 4) for n in stored)
        if isinstance(policy, RaggedPolicy) and method.needs_selection(T):  # padding is allocated, not held
            counts = torch.stack([layer.counts[0] for layer in cache.layers])  # (L, H_kv)
            padded = bool((counts < policy.prefill_slots).any())
            assert (row["kv_held_bytes_after_prefill"] < row["kv_bytes_after_prefill"]) == padded
            if isinstance(method, HeadCounts):
                assert len(set(counts.flatten().tolist())) == L * H_kv  # every layer and head its own count
            valid = torch.stack([layer.valid[0].sum(-1) for layer in cache.layers])
            assert torch.equal(valid, counts)  # the padding slots are not valid


@pytest.mark.parametrize("method", CASES, ids=CASE_IDS)
def test_one_and_four_rows_give_the_same_tokens_and_rows_hold_the_policys_entries(tiny_model, method):
    ps = prompts(LENGTHS)
    one, finished, eng1 = engine_tokens(tiny_model, method, ps, rows=1)
    four, _, eng4 = engine_tokens(tiny_model, method, ps, rows=4)
    assert one == four and len(one) == 4
    # the last sample decoded in the one-row engine still lies in its row: the entries each layer and head hold
    T, n = len(ps[-1]), len(one[1, 1])
    visible = eng1.cache.visible[:, 0].sum(-1)  # (L, H_kv)
    assert visible.float().mean().item() == method.tokens_held(T, n - 1)
    assert int(visible.max()) <= eng1.cache.slots == method.slots(T, NEW)
    # the memory model's row is the row the engine allocates (ragged padding included)
    arch = Arch.of(tiny_model.config, 4)
    assert eng4.cache.nbytes_per_row() == row_terms(arch, method.slots(T, NEW), NEW, fmt=method.kv_format)["kv"]
    if method.storage_kind != "compacting":
        assert finished[1, 1].kv["kv_tokens_peak"] == method.peak_tokens(T, n - 1)
    if isinstance(method, HeadCounts):  # the eager path (generate) decodes the ragged cache alike
        for i, p in enumerate(ps):
            out = generate(tiny_model, [p], method, ss.SamplingConfig(max_new_tokens=NEW), eos_token_ids=[],
                           pad_token_id=0)
            assert out.tokens[0][0] == one[i, 0]
            assert out.stats["kv_tokens_peak"] == method.peak_tokens(len(p), NEW - 1)


@pytest.mark.parametrize("method", CASES, ids=CASE_IDS)
def test_a_method_that_drops_nothing_gives_the_full_caches_tokens(tiny_model, method):
    if method.kv_format.quantized:
        pytest.skip(f"{method.kv_format.label} keeps every token but not in the model's dtype: not the full cache")
    method = roomy(method)
    ps = prompts(LENGTHS)
    assert all(method.keeps_all(len(p), NEW) for p in ps) or not method.compresses  # none: the reference itself
    got, _, _ = engine_tokens(tiny_model, method, ps, rows=2)
    full, _, _ = engine_tokens(tiny_model, ss.NoCompression(), ps, rows=2)
    assert got == full


def test_a_ragged_cache_in_a_left_padded_batch_equals_each_prompt_alone(tiny_model):
    method = HeadCounts(prompt_budget=64)
    ps = prompts((300, 120, 50, 220), seed=4)
    sampling = ss.SamplingConfig(max_new_tokens=NEW)
    batch = generate(tiny_model, ps, method, sampling, eos_token_ids=[], pad_token_id=0)
    for i, p in enumerate(ps):
        alone = generate(tiny_model, [p], method, sampling, eos_token_ids=[], pad_token_id=0)
        assert batch.tokens[i][0] == alone.tokens[0][0], i
