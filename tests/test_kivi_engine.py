"""``compression=kivi`` in the decode engine (``snapstream_core.engine.kivi_rows.KiviRowCache``, chosen by
``row_cache_class``): a row decodes as the eager ``KiviLayer`` does, step for step and bit for bit, whatever the
other rows hold; the engine's tokens equal ``generate``'s at 1 and 4 rows; a sample's KV bytes are
``KVFormat.row_bytes``; compiled equals eager."""

from __future__ import annotations

import pytest
import torch

import snapstream_core as ss
from snapstream_core.cache import CompressedCache
from snapstream_core.engine import Engine, EngineItem
from snapstream_core.engine.kivi_rows import STATE, KiviRowCache
from snapstream_core.engine.row_caches import row_cache_class
from snapstream_core.generate import SamplingConfig, generate
from snapstream_core.methods import Kivi
from tests.method_matrix import prompts

GREEDY = SamplingConfig(max_new_tokens=24)
SAMPLED = SamplingConfig(max_new_tokens=24, temperature=0.8, top_p=0.95)


def prefilled(method, k, v) -> CompressedCache:
    """A one-layer KIVI cache holding the prefill of (1, H, T, D) keys/values, as the attention function leaves it."""
    cache = CompressedCache(method, 1)
    layer = cache.layers[0]
    layer.update(k, v)
    T = k.shape[2]
    layer.finish_prefill(k.new_empty(1, k.shape[1], 0, k.shape[-1]), torch.ones(1, T, dtype=torch.bool),
                         torch.arange(T)[None], 1.0)
    return cache


@pytest.mark.parametrize("T, bits", [(5, 2), (16, 4), (37, 2)])
def test_a_row_decodes_as_the_eager_layer_bit_for_bit(T, bits):
    """Random K/V through the eager layer and through row 1 of three rows (the others decode other tokens): every
    step returns the same keys/values on the row's slots, and the stored codes, scales, minima and rings agree."""
    method = Kivi(bits=bits, group_size=8, residual=16)
    g = torch.Generator().manual_seed(T)
    H, D, steps, S = 2, 16, 45, 90
    k0, v0 = torch.randn(1, H, T, D, generator=g), torch.randn(1, H, T, D, generator=g)
    eager = prefilled(method, k0, v0)
    rows = KiviRowCache.empty(3, S, eager)
    assert row_cache_class(method.kv_format) is KiviRowCache
    others = (prefilled(method, k0 * 2, v0), prefilled(method, k0[:, :, :3], v0[:, :, :3]))
    for r, prefix in ((0, others[0]), (1, eager), (2, others[1])):
        n = prefix.layers[0].keys.shape[2]
        assert rows.load(r, prefix) == (n, 0, 1 << 62, n)  # slot n next, never wrapping
    written = torch.tensor([T, T, 3])
    for step in range(steps):
        k, v = torch.randn(3, H, 1, D, generator=g), torch.randn(3, H, 1, D, generator=g)
        rows.write_slot = written
        rows.mark_written()
        K, V = rows.update(k, v, 0)
        ek, ev = eager.layers[0].update(k[1:2], v[1:2])
        n = T + step + 1
        assert torch.equal(K[1, :, :n], ek[0]) and torch.equal(V[1, :, :n], ev[0]), step
        assert int(rows.visible[0, 1, 0].sum()) == n
        written = written + 1
    layer = eager.layers[0]
    for name, got in zip(STATE, rows._layer(0)):
        want = getattr(layer, name)[0]
        assert torch.equal(got[1, :, : want.shape[1]], want), name


@pytest.mark.parametrize("bits", [2, 4])
def test_engine_tokens_equal_generate_at_1_and_4_rows(tiny_model, bits):
    method = Kivi(bits=bits, group_size=8, residual=16)
    ps = prompts((40, 13, 70), seed=bits)
    ref = [generate(tiny_model, [p], method, GREEDY, eos_token_ids=[], pad_token_id=0).tokens[0][0] for p in ps]
    full = [generate(tiny_model, [p], ss.NoCompression(), GREEDY, eos_token_ids=[], pad_token_id=0).tokens[0][0]
            for p in ps]
    assert (ref != full) == (bits == 2)  # 2 bits change tokens of the random tiny model, 4 bits not these
    for rows in (1, 4):
        eng = Engine(tiny_model, method, GREEDY, eos=[], rows=rows)
        got = {f.item.tag: f.tokens for ended in eng.run([EngineItem(p, i, (0,), 24, tag=i)
                                                          for i, p in enumerate(ps)]) for f in ended}
        assert isinstance(eng.cache, KiviRowCache)
        assert [got[i] for i in range(3)] == ref, rows


def test_sampled_rows_1_and_4_agree_and_a_samples_bytes_are_the_formula(tiny_model):
    method = Kivi(bits=2, group_size=8, residual=16)
    ps = prompts((40, 25), seed=7)
    items = [EngineItem(p, 3 + i, (0, 1, 2), 24, tag=i) for i, p in enumerate(ps)]
    runs = {}
    for rows in (1, 4):
        eng = Engine(tiny_model, method, SAMPLED, eos=[], rows=rows)
        runs[rows] = {(f.item.tag, f.sample_idx): f for ended in eng.run(items) for f in ended}
    assert {k: f.tokens for k, f in runs[1].items()} == {k: f.tokens for k, f in runs[4].items()}
    assert {k: f.kv for k, f in runs[1].items()} == {k: f.kv for k, f in runs[4].items()}  # the same bytes too
    cfg = tiny_model.config
    L, H, D = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    fmt = method.kv_format
    for (tag, _), f in runs[4].items():
        T = len(ps[tag])
        assert f.kv["kv_bytes_peak"] == f.kv["kv_bytes_final"] == fmt.row_bytes(method.slots(T, 24), L, H, D, 4)
        assert f.kv["kv_bytes_after_prefill"] == fmt.row_bytes(T, L, H, D, 4)  # the eager prefix: the same formula
    assert eng.cache.nbytes_per_row() == fmt.row_bytes(eng.cache.slots, L, H, D, 4)
    assert eng.cache.bytes_for(57) == fmt.row_bytes(57, L, H, D, 4)


def test_engine_tokens_equal_generate_on_smollm2(smollm2):
    model, tok = smollm2
    method = Kivi(bits=2, group_size=32, residual=32)
    ids = tok("A short note on lighthouses: their keepers, lamps and lenses, and the storms they saw. " * 3)[
        "input_ids"][:60]
    sampling = SamplingConfig(max_new_tokens=20)
    ref = generate(model, [ids], method, sampling, eos_token_ids=[], pad_token_id=0).tokens[0][0]
    eng = Engine(model, method, sampling, eos=[], rows=2)
    got = [f.tokens for ended in eng.run([EngineItem(ids, 0, (0,), 20)]) for f in ended]
    assert got == [ref]


@pytest.mark.slow
def test_inductor_compiled_tokens_equal_eager(tiny_model):
    """The decode step with KIVI rows compiles whole (``fullgraph=True``) under inductor; the same tokens."""
    method = Kivi(bits=2, group_size=8, residual=16)
    ps = prompts((40, 21))
    out = {}
    for compiled in (False, True):
        torch._dynamo.reset()
        eng = Engine(tiny_model, method, GREEDY, eos=[], rows=2, compile=compiled, compile_backend="inductor")
        out[compiled] = {f.item.tag: f.tokens for ended in eng.run([EngineItem(p, i, (0,), 24, tag=i)
                                                                    for i, p in enumerate(ps)]) for f in ended}
    torch._dynamo.reset()
    assert out[True] == out[False]


@pytest.mark.parametrize("dtype, bound", [(torch.bfloat16, 1.05), (torch.float32, 1.0)])
def test_a_steps_dequantized_read_is_about_the_formula(dtype, bound):
    """The tensor memory one layer's update allocates at its peak (tracked: the dequantized K/V and the float32
    buffer they are computed in) against ``KVFormat.read_bytes``, what the planner counts for the step's read:
    within 5% above it in bf16 (the scales' float32 copies), below it in float32 (the buffer is the output)."""
    from tests.alloc_tracker import AllocTracker

    method = Kivi(bits=2, group_size=32, residual=128)
    H, D, T, S, R = 8, 128, 1000, 2048, 2
    k, v = torch.randn(1, H, T, D, dtype=dtype), torch.randn(1, H, T, D, dtype=dtype)
    rows = KiviRowCache.empty(R, S, prefilled(method, k, v))
    for r in range(R):
        rows.load(r, prefilled(method, k, v))
    rows.write_slot = torch.full((R,), T)
    rows.mark_written()
    new = torch.randn(R, H, 1, D, dtype=dtype)
    with AllocTracker() as tracker:
        out = rows.update(new, new, 0)
        del out
    planned = method.kv_format.read_bytes(S, H, D, dtype.itemsize) * R
    assert 0.75 * planned < tracker.peak <= bound * planned, (tracker.peak, planned)
