"""``prefill_prompt``: the layer-major chunked prefill leaves the same compressed cache and last logits as the
one-pass forward (bit-identical with one chunk, allclose and the same greedy tokens with many), for every method."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

import snapstream_core as ss
from snapstream_core.prefill import DEFAULT_CHUNK, layer_major, prefill_prompt
from tests.method_matrix import ALL, ALL_IDS
from tests.ragged_method import HeadCounts

T, NEW = 300, 12
REGISTERED = [*ALL, HeadCounts(prompt_budget=64)]
REGISTERED_IDS = [*ALL_IDS, "head_counts"]

METHODS = {
    "none": ss.NoCompression(),
    "snapkv": ss.SnapKV(prompt_budget=64, window=8),
    "snapkv_sinks": ss.SnapKV(prompt_budget=64, window=8, sinks=4),
    "streaming_llm": ss.StreamingLLM(sinks=4, recent=60),
    "streaming_llm_in_cache": ss.StreamingLLM(sinks=4, recent=60, positions="in_cache"),
    "snapstream": ss.SnapStream(prompt_budget=64, window=8, recent=16),
    "snapstream_in_cache": ss.SnapStream(prompt_budget=64, window=8, recent=16, positions="in_cache"),
    "snapstream_within_budget": ss.SnapStream(prompt_budget=400, window=8, recent=16),
}


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 1000, (1, T), generator=torch.Generator().manual_seed(1))


def one_pass(model, ids, method):
    """Today's prefill in ``generate`` (the eager n > 1 and compiled paths): one forward, last logits only."""
    ss.attach(model)
    cache = ss.make_cache(model, method)
    n = ids.shape[1]
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=torch.arange(n)[None],
                    past_key_values=cache, logits_to_keep=1)
    return cache, out.logits[:, -1, :].float()


def layer_state(layer) -> dict:
    layer.flush_positions()
    return {
        "keys": layer.keys, "values": layer.values, "valid": layer.valid, "pos": layer.pos,
        "next_pos": getattr(layer, "next_pos", None), "n_frozen": layer.n_frozen, "filled": layer.filled,
        "seen": layer.seen, "aligned": layer.aligned, "has_invalid": layer.has_invalid, "pending": layer.pending,
    }


def assert_same_cache(a, b, *, exact: bool):
    assert len(a.layers) == len(b.layers)
    for la, lb in zip(a.layers, b.layers):
        sa, sb = layer_state(la), layer_state(lb)
        assert sa.keys() == sb.keys()
        for name, x in sa.items():
            y = sb[name]
            if isinstance(x, torch.Tensor) and x.is_floating_point() and not exact:
                torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5, msg=name)
            elif isinstance(x, torch.Tensor):
                assert y is not None and x.shape == y.shape and torch.equal(x, y), (la.layer_idx, name)
            else:
                assert x == y, (la.layer_idx, name)


def greedy_after(model, cache, logits, prompt_len: int, new: int) -> list[int]:
    """``new`` greedy tokens decoded from a prefilled cache, as ``generate``'s n > 1 path continues."""
    first = logits.argmax(-1, keepdim=True)
    mask = torch.ones(1, prompt_len + 1, dtype=torch.long)
    out = model.generate(input_ids=first, attention_mask=mask, past_key_values=cache, max_new_tokens=new - 1,
                         do_sample=False, pad_token_id=0)
    return out[0].tolist()


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("name", list(METHODS))
def test_one_chunk_is_bit_identical_to_one_pass(tiny_model, ids, name, impl):
    method = METHODS[name]
    tiny_model.set_attn_implementation(impl)
    try:
        ref_cache, ref_logits = one_pass(tiny_model, ids, method)
        for chunk in (None, T):
            cache, logits = prefill_prompt(tiny_model, ids, method, chunk_size=chunk)
            assert logits.dtype == torch.float32 and logits.shape == (1, tiny_model.config.vocab_size)
            assert torch.equal(logits, ref_logits)
            assert_same_cache(cache, ref_cache, exact=True)
            assert cache.stats.as_row() == ref_cache.stats.as_row()
            assert cache.get_seq_length() == T
    finally:
        tiny_model.set_attn_implementation("sdpa")


@pytest.mark.parametrize("chunk", [1, 7, 64, 299])
@pytest.mark.parametrize("name", list(METHODS))
def test_chunked_equals_one_pass_up_to_rounding(tiny_model, ids, name, chunk):
    """Chunks of 1 and 7 tokens split SnapKV's 8-query window over several chunks."""
    method = METHODS[name]
    ref_cache, ref_logits = one_pass(tiny_model, ids, method)
    cache, logits = prefill_prompt(tiny_model, ids, method, chunk_size=chunk)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-5)
    assert_same_cache(cache, ref_cache, exact=False)  # the same tokens kept, in the same slots
    assert greedy_after(tiny_model, cache, logits, T, NEW) == greedy_after(tiny_model, ref_cache, ref_logits, T, NEW)


@pytest.mark.parametrize("method", REGISTERED, ids=REGISTERED_IDS)
def test_every_registered_method_chunked_equals_one_pass(tiny_model, ids, method):
    """The registry's methods (``tests/method_matrix.py``) and a ragged one: chunks of 7 tokens leave the cache of
    the one-pass forward (the variants above check the rest on a few methods)."""
    ref_cache, ref_logits = one_pass(tiny_model, ids, method)
    cache, logits = prefill_prompt(tiny_model, ids, method, chunk_size=7)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-5)
    assert_same_cache(cache, ref_cache, exact=False)


@pytest.mark.parametrize("chunk", [None, 50])
def test_full_cache_tokens_equal_plain_transformers(tiny_model, ids, chunk):
    plain = tiny_model.generate(ids, max_new_tokens=NEW, do_sample=False, pad_token_id=0,
                                past_key_values=DynamicCache(config=tiny_model.config))
    cache, logits = prefill_prompt(tiny_model, ids, ss.NoCompression(), chunk_size=chunk)
    assert greedy_after(tiny_model, cache, logits, T, NEW) == plain[0, T:].tolist()


def test_query_rows_is_the_window_or_nothing():
    assert METHODS["snapkv"].query_rows(T) == 8
    assert METHODS["snapkv"].query_rows(5) == 0  # within budget: no selection
    assert METHODS["snapstream_within_budget"].query_rows(T) == 0
    assert METHODS["streaming_llm"].query_rows(T) == 0  # scores by position
    assert METHODS["none"].query_rows(T) == 0


def test_bad_arguments_name_the_knob(tiny_model, ids):
    with pytest.raises(ValueError, match="gen.prefill_chunk"):
        prefill_prompt(tiny_model, ids, ss.NoCompression(), chunk_size=0)
    with pytest.raises(ValueError, match="gen.prefill_chunk"):
        prefill_prompt(tiny_model, ids, ss.NoCompression(), chunk_size=True)
    with pytest.raises(ValueError, match=r"\(1, T\)"):
        prefill_prompt(tiny_model, ids.repeat(2, 1), ss.NoCompression())
    assert DEFAULT_CHUNK >= T


def test_other_architectures_fall_back_to_one_forward(ids, caplog):
    """A decoder that is not a ``LlamaModel`` (here Mistral) gets one forward with ``logits_to_keep=1``."""
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    config = MistralConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=None)
    model = MistralForCausalLM(config).eval()
    model.set_attn_implementation("sdpa")
    assert not layer_major(model)
    method = METHODS["snapstream"]
    ref_cache, ref_logits = one_pass(model, ids, method)
    with caplog.at_level("WARNING", logger="snapstream_core.prefill"):
        cache, logits = prefill_prompt(model, ids, method, chunk_size=16)
    assert "one-pass prefill" in caplog.text
    assert torch.equal(logits, ref_logits)
    assert_same_cache(cache, ref_cache, exact=True)


def test_smollm2_chunked_prefill_keeps_greedy_tokens(smollm2):
    """The real model: a 400-token prompt in 3 chunks decodes the same greedy tokens as in one chunk."""
    model, tok = smollm2
    assert layer_major(model)
    text = " ".join(f"Item {i} is stored in box {i * 7 % 101}." for i in range(80)) + " Which box holds item 42?"
    ids = torch.tensor([tok(text)["input_ids"][:400]])
    n = ids.shape[1]
    method = ss.SnapStream(prompt_budget=128, recent=16)
    ref_cache, ref_logits = prefill_prompt(model, ids, method)
    cache, logits = prefill_prompt(model, ids, method, chunk_size=160)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-3, atol=1e-3)
    for a, b in zip(cache.layers, ref_cache.layers):
        assert torch.equal(a.pos, b.pos)  # the same prompt tokens kept
    assert greedy_after(model, cache, logits, n, 8) == greedy_after(model, ref_cache, ref_logits, n, 8)
