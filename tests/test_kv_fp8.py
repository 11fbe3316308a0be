"""FP8 E4M3 K/V storage (``compression.kv_dtype=fp8_e4m3``) in the eager cache and the engine's rows: the codes
stored are the quantized prompt, the bytes are a quarter of the fp32 cache plus the scales (exactly what
``KVFormat`` states, which the planner reads), stacked on eviction the savings multiply, and the tokens do not
depend on the rows, the decode path (``generate`` or the engine) or compilation."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch._dynamo.testing import CompileCounter
from transformers import DynamicCache

import snapstream_core as ss
from snapstream_core.engine import Engine, EngineItem
from snapstream_core.generate import generate
from snapstream_core.quant.fp8 import FP8_MAX, fp8_decode, fp8_encode
from tests.decode_method_checks import GREEDY, SAMPLED, run
from tests.method_matrix import ALL, ALL_IDS, prompts

LENGTHS = (40, 70, 120)


def fp8(method_cls, scale=None, **knobs):
    return method_cls(kv_dtype="fp8_e4m3", kv_scale=scale, **knobs)


def row_bytes(method, model, T: int) -> int:
    """What ``KVFormat`` says one sample's row of this method holds (tiny_llama: 2 layers, 2 KV heads, D 16)."""
    c = model.config
    slots = method.slots(T, GREEDY.max_new_tokens)
    return method.kv_format.row_bytes(slots, c.num_hidden_layers, c.num_key_value_heads,
                                      c.hidden_size // c.num_attention_heads, 4)


def kv_peaks(method, model, rows: int):
    ps = prompts(LENGTHS)
    eng = Engine(model, method, GREEDY, eos=[], rows=rows)
    items = [EngineItem(p, 7 + i, (0,), GREEDY.max_new_tokens, tag=i) for i, p in enumerate(ps)]
    tokens, kv = {}, {}
    for ended in eng.run(items):
        for f in ended:
            tokens[f.item.tag] = f.tokens
            kv[f.item.tag] = f.kv["kv_bytes_peak"]
    return tokens, kv, eng


@pytest.mark.parametrize("scale", ["tensor", "head", "one"])
def test_prefill_stores_the_quantized_prompt(tiny_model, scale):
    """After the prefill every layer holds the E4M3 codes of the prompt's K/V at the row's scales (amax / 448 of the
    prompt, per row or per head; 1.0 for ``one``), and its reads are those codes dequantized."""
    ids = torch.tensor([prompts((50,))[0]])
    plain = DynamicCache()
    with torch.no_grad():
        tiny_model(ids, past_key_values=plain)
    cache = ss.make_cache(tiny_model, fp8(ss.NoCompression, scale))
    ss.attach(tiny_model)
    with torch.no_grad():
        tiny_model(ids, past_key_values=cache)
    for layer, ref in zip(cache.layers, plain.layers):
        for stored, scale_t, full in ((layer.keys, layer.k_scale, ref.keys), (layer.values, layer.v_scale, ref.values)):
            amax = full.abs().amax(dim=(2, 3), keepdim=True)
            want = {"tensor": amax.amax(dim=1, keepdim=True) / FP8_MAX, "head": amax / FP8_MAX,
                    "one": torch.ones(1, 1, 1, 1)}[scale]
            assert stored.dtype == torch.uint8 and torch.equal(scale_t, want)
            assert torch.equal(stored, fp8_encode(full, want))
            err = (fp8_decode(stored, want, torch.float32) - full).abs()
            assert err.max() > 0  # it is quantized, not the fp32 cache
            if scale != "one":
                assert bool((err <= full.abs() * 2**-4 + want * 2**-9).all())  # E4M3: 3 mantissa bits


def test_bytes_are_a_quarter_plus_scales_at_1_and_4_rows(tiny_model):
    """fp32 tiny_llama: a fp8 sample holds its slots at 1 byte per element plus 2 fp32 scales per layer (tensor) or
    per layer and KV head (head), the same at 1 and 4 rows, as KVFormat states; the tokens at 1 and 4 rows agree."""
    _, full_kv, _ = kv_peaks(ss.NoCompression(), tiny_model, 4)
    for scale, scales in (("tensor", 2 * 2 * 4), ("head", 2 * 2 * 2 * 4)):
        method = fp8(ss.NoCompression, scale)
        one, kv1, _ = kv_peaks(method, tiny_model, 1)
        four, kv4, _ = kv_peaks(method, tiny_model, 4)
        assert one == four and kv1 == kv4
        for i, T in enumerate(LENGTHS):
            assert kv4[i] == row_bytes(method, tiny_model, T) == full_kv[i] // 4 + scales


def test_stacked_on_eviction_the_savings_multiply(tiny_model):
    """R-KV at a budget in fp8: the slots of R-KV's budget at a quarter of the bytes (+ scales); its compactions
    score the dequantized K/V and move the codes; rows 1 and 4 agree."""
    rkv = ss.RKV(budget=24, window=4, interval=8)
    _, auto_kv, _ = kv_peaks(rkv, tiny_model, 4)
    _, full_kv, _ = kv_peaks(ss.NoCompression(), tiny_model, 4)
    method = fp8(ss.RKV, budget=24, window=4, interval=8)
    one, kv1, _ = kv_peaks(method, tiny_model, 1)
    four, kv4, eng = kv_peaks(method, tiny_model, 4)
    assert one == four and kv1 == kv4 and eng.compactor.calls >= 2
    for i, T in enumerate(LENGTHS):
        assert kv4[i] == auto_kv[i] // 4 + 2 * 2 * 4 == row_bytes(method, tiny_model, T)
        assert kv4[i] < full_kv[i] // 4  # both savings: eviction's and fp8's


@pytest.mark.parametrize("method", [fp8(ss.NoCompression), fp8(ss.SnapStream, "head", prompt_budget=48, recent=8),
                                    fp8(ss.SnapKV, prompt_budget=48)], ids=["none", "snapstream-head", "snapkv"])
def test_generate_equals_the_engine(tiny_model, method):
    """The eager cache (transformers' generate) and the engine's FP8 rows decode the same tokens."""
    ps = prompts(LENGTHS)
    engine, _ = run(tiny_model, method, ps, GREEDY, rows=4)
    out = generate(tiny_model, [ps[0]], method, GREEDY, eos_token_ids=[], pad_token_id=0)
    assert out.tokens[0][0] == engine[0, 0]


def test_compiled_equals_eager(tiny_model):
    """The compiled decode step and compaction (FP8 rows, R-KV) give the eager tokens, sampled."""
    torch._dynamo.reset()
    method = fp8(ss.RKV, budget=24, window=4, interval=8)
    ps = prompts(LENGTHS)
    eager, _ = run(tiny_model, method, ps, SAMPLED)
    counter = CompileCounter()
    compiled, eng = run(tiny_model, method, ps, SAMPLED, compile=True, compile_backend=counter)
    assert compiled == eager and eng.compactor.calls >= 2 and counter.frame_count == 2
    torch._dynamo.reset()


@pytest.mark.parametrize("method", ALL, ids=ALL_IDS)
def test_every_method_stores_fp8(tiny_model, method):
    """Every registered method (each storage policy: append, ring, compacting, ragged) runs in fp8 on the engine:
    rows 1 and 4 agree, and a sample's bytes are what KVFormat states for the method's slots."""
    if method.kv_format.kind != "auto":  # a method with a format of its own (kivi) refuses fp8 on top
        pytest.skip(f"{method.method} stores {method.kv_format.kind}")
    quantized = replace(method, kv_dtype="fp8_e4m3", kv_scale="head")
    one, kv1, _ = kv_peaks(quantized, tiny_model, 1)
    four, kv4, _ = kv_peaks(quantized, tiny_model, 4)
    assert one == four and kv1 == kv4
    for i, T in enumerate(LENGTHS):
        assert kv4[i] == row_bytes(quantized, tiny_model, T)


@pytest.mark.slow
@pytest.mark.parametrize("method", [fp8(ss.NoCompression), fp8(ss.RKV, "head", budget=24, window=4, interval=8)],
                         ids=["none", "rkv-head"])
def test_inductor_compiled_equals_eager(tiny_model, method):
    """With inductor itself (the CPU C++ codegen of the FP8 conversions, the step and the compaction), the tokens
    are the eager ones (about a minute: ``make test-all``)."""
    torch._dynamo.reset()
    ps = prompts(LENGTHS)
    eager, _ = run(tiny_model, method, ps, SAMPLED)
    compiled, _ = run(tiny_model, method, ps, SAMPLED, compile=True)
    assert compiled == eager
    torch._dynamo.reset()
