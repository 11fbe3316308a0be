"""The core under plain ``model.generate``: equivalence with a DynamicCache, exact cache sizes, batches, n samples."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import DynamicCache

import snapstream_core as ss
from snapstream_core.generate import SamplingConfig, generate
from tests import method_matrix as matrix

PROMPT_LEN, NEW = 300, 24


def unlimited_methods(prompt_len: int, new: int):
    total = prompt_len + new
    return [
        ss.NoCompression(),
        ss.SnapKV(prompt_budget=total),
        ss.StreamingLLM(sinks=4, recent=total),
        ss.SnapStream(prompt_budget=total, recent=new),
        ss.SnapStream(prompt_budget=total, recent=new, positions="in_cache"),
        ss.Knorm(prompt_budget=total),
        ss.TOVA(prompt_budget=total, recent=new),
        ss.KeyDiff(ratio=0.0),
        ss.ExpectedAttention(prompt_budget=total, recent=new),
    ]


def plain_generate(model, impl, ids, new):
    model.set_attn_implementation(impl)
    cache = DynamicCache(config=model.config)
    return model.generate(ids, max_new_tokens=new, do_sample=False, past_key_values=cache, pad_token_id=0)


def compressed_generate(model, impl, ids, new, method):
    model.set_attn_implementation(impl)
    ss.attach(model)
    cache = ss.make_cache(model, method)
    out = model.generate(ids, max_new_tokens=new, do_sample=False, past_key_values=cache, pad_token_id=0)
    return out, cache


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_unlimited_budget_is_token_identical_on_tiny_llama(tiny_model, impl):
    ids = torch.randint(0, 1000, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(1))
    ref = plain_generate(tiny_model, impl, ids, NEW)
    for method in unlimited_methods(PROMPT_LEN, NEW):
        out, _ = compressed_generate(tiny_model, impl, ids, NEW, method)
        assert torch.equal(out, ref), method


# eager attention on SmolLM2 with the slow tests (11 s; tiny_llama checks it every time): make test under 10 minutes
@pytest.mark.parametrize("impl", ["sdpa", pytest.param("eager", marks=pytest.mark.slow)])
def test_unlimited_budget_is_token_identical_on_smollm2(smollm2, impl):
    model, tok = smollm2
    text = "Write a short story about a lighthouse keeper who finds a message in a bottle. " * 6
    ids = tok(text, return_tensors="pt")["input_ids"]
    ref = plain_generate(model, impl, ids, 12)
    for method in unlimited_methods(ids.shape[1], 12):
        out, _ = compressed_generate(model, impl, ids, 12, method)
        assert torch.equal(out, ref), method
    model.set_attn_implementation("sdpa")


def test_compression_changes_the_output_when_it_drops_tokens(tiny_model):
    ids = torch.randint(0, 1000, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(1))
    ref = plain_generate(tiny_model, "sdpa", ids, NEW)
    out, _ = compressed_generate(tiny_model, "sdpa", ids, NEW, ss.StreamingLLM(sinks=4, recent=28))
    assert not torch.equal(out, ref)


@pytest.mark.parametrize(
    "method,after_prefill,bound",
    [
        (ss.SnapKV(prompt_budget=64), 64, 64 + NEW),
        (ss.StreamingLLM(sinks=4, recent=60), 64, 64),
        (ss.SnapStream(prompt_budget=64, recent=16), 64, 64 + 16),
        (ss.SnapStream(prompt_budget=512, recent=16), PROMPT_LEN, PROMPT_LEN + 16),
    ],
    ids=["snapkv", "streaming_llm", "snapstream", "snapstream-short-prompt"],
)
def test_exact_cache_sizes_and_no_reallocation(tiny_model, method, after_prefill, bound):
    ids = torch.randint(0, 1000, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(2))
    tiny_model.set_attn_implementation("sdpa")
    ss.attach(tiny_model)
    cache = ss.make_cache(tiny_model, method)
    tiny_model(input_ids=ids, past_key_values=cache)  # prefill + selection, layer by layer
    layer = cache.layers[0]
    for lyr in cache.layers:
        assert lyr.tokens_held() == after_prefill
        assert lyr.keys.shape[1] == tiny_model.config.num_key_value_heads  # KV heads, never repeated
    ptrs = [lyr.keys.data_ptr() for lyr in cache.layers]
    held = []
    token = ids[:, -1:]
    for step in range(NEW):
        position = torch.tensor([[PROMPT_LEN + step]])
        out = tiny_model(input_ids=token, position_ids=position, past_key_values=cache)
        token = out.logits[:, -1:].argmax(-1)
        held.append(max(lyr.tokens_held() for lyr in cache.layers))
        if method.ring is not None:
            assert [lyr.keys.data_ptr() for lyr in cache.layers] == ptrs  # the ring is written in place
    assert max(held) <= bound
    assert held[-1] == min(bound, after_prefill + NEW)
    assert cache.stats.kv_tokens_peak == max(held)
    assert layer.get_seq_length() == PROMPT_LEN + NEW  # positions keep counting the logical sequence


def test_prefill_peak_is_one_full_layer_plus_the_compressed_others(tiny_model):
    ids = torch.randint(0, 1000, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(3))
    ss.attach(tiny_model)
    method = ss.SnapStream(prompt_budget=64, recent=16)
    cache = ss.make_cache(tiny_model, method)
    tiny_model(input_ids=ids, past_key_values=cache)
    cfg = tiny_model.config
    per_token = 2 * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * 4  # K+V, fp32
    n_layers = cfg.num_hidden_layers
    assert cache.stats.kv_bytes_after_prefill == n_layers * (64 + 16) * per_token
    assert cache.stats.prefill_bytes_peak == PROMPT_LEN * per_token + (n_layers - 1) * (64 + 16) * per_token


def test_a_cache_without_its_attention_function_refuses_to_decode(tiny_model):
    tiny_model.set_attn_implementation("sdpa")  # not attached
    cache = ss.make_cache(tiny_model, ss.SnapKV(prompt_budget=64))
    ids = torch.randint(0, 1000, (1, 100))
    with pytest.raises(RuntimeError, match="attach"):
        tiny_model.generate(ids, max_new_tokens=3, past_key_values=cache, pad_token_id=0)


# every method generate() runs (built from the registry) but the ratio budgets (a left-padded batch shares the
# budget of its padded length: the runner runs them one prompt at a time), the ragged ones (they refuse a padded
# batch: test_a_ragged_method_refuses_a_left_padded_batch) and kivi (its groups start at slot 0: it refuses one too,
# test_kivi_cache.py), and positions=in_cache once per class that has a ring
FIXED = [m for m in matrix.METHODS if getattr(m, "ratio", None) is None and m.storage_kind != "ragged"
         and m.kv_format.kind != "kivi"]
RAGGED = [m for m in matrix.METHODS if m.storage_kind == "ragged"]
METHODS = [*FIXED, *{type(m): replace(m, positions="in_cache") for m in FIXED if m.storage_kind == "ring"}.values()]


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize("method", METHODS, ids=lambda m: f"{m.method}-{m.positions}")
def test_each_row_of_a_left_padded_batch_equals_the_prompt_alone(tiny_model, impl, method):
    tiny_model.set_attn_implementation(impl)
    gen = torch.Generator().manual_seed(4)
    prompts = [torch.randint(1, 1000, (n,), generator=gen).tolist() for n in (300, 120, 50, 220)]
    sampling = SamplingConfig(max_new_tokens=20)
    batch = generate(tiny_model, prompts, method, sampling, eos_token_ids=[], pad_token_id=0)
    for i, prompt in enumerate(prompts):
        alone = generate(tiny_model, [prompt], method, sampling, eos_token_ids=[], pad_token_id=0)
        assert batch.tokens[i][0] == alone.tokens[0][0], i
    tiny_model.set_attn_implementation("sdpa")


def test_n_greedy_samples_from_one_prefill_equal_a_single_generation(tiny_model):
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(1, 1000, (n,), generator=gen).tolist() for n in (200, 90)]
    method = ss.SnapStream(prompt_budget=64, recent=16)
    one = generate(tiny_model, prompts, method, SamplingConfig(max_new_tokens=15), eos_token_ids=[], pad_token_id=0)
    three = generate(
        tiny_model, prompts, method, SamplingConfig(max_new_tokens=15, n=3), eos_token_ids=[], pad_token_id=0
    )
    for i in range(2):
        assert three.tokens[i] == [one.tokens[i][0]] * 3
    assert three.stats["kv_tokens_peak"] <= 64 + 16


def test_n_sampled_completions_differ_and_respect_the_footprint(tiny_model):
    torch.manual_seed(0)
    prompt = torch.randint(1, 1000, (150,), generator=torch.Generator().manual_seed(6)).tolist()
    method = ss.SnapStream(prompt_budget=64, recent=8)
    sampling = SamplingConfig(max_new_tokens=12, n=4, temperature=1.0, top_p=0.95)
    out = generate(tiny_model, [prompt], method, sampling, eos_token_ids=[], pad_token_id=0)
    assert len(out.tokens[0]) == 4 and all(len(t) == 12 for t in out.tokens[0])
    assert len({tuple(t) for t in out.tokens[0]}) > 1
    assert out.stats["kv_tokens_peak"] == 64 + 8


def test_eos_cuts_the_completion_and_sets_the_finish_reason(tiny_model):
    prompt = torch.randint(1, 1000, (40,), generator=torch.Generator().manual_seed(7)).tolist()
    free = generate(tiny_model, [prompt], ss.NoCompression(), SamplingConfig(max_new_tokens=10), eos_token_ids=[],
                    pad_token_id=0)
    eos = free.tokens[0][0][4]
    cut = generate(tiny_model, [prompt], ss.NoCompression(), SamplingConfig(max_new_tokens=10),
                   eos_token_ids=[eos], pad_token_id=0)
    first = free.tokens[0][0].index(eos)
    assert cut.tokens[0][0] == free.tokens[0][0][: first + 1]
    assert cut.finish_reasons[0][0] == "stop" and free.finish_reasons[0][0] == "length"


@pytest.mark.parametrize("method", RAGGED, ids=lambda m: m.method)
def test_a_ragged_method_refuses_a_left_padded_batch_in_one_line(tiny_model, method):
    """Its budgets follow each row's own length, so a padded row would be cut unlike the prompt alone: refused."""
    prompts = [[5] * 300, [7] * 120]
    with pytest.raises(ValueError, match=f"compression.method: {method.method} budgets each row by its own length"):
        generate(tiny_model, prompts, method, SamplingConfig(max_new_tokens=2), eos_token_ids=[], pad_token_id=0)
