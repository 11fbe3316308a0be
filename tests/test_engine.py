"""The decode engine: same tokens as one-at-a-time generation for every method, greedy and sampled, with rows that
really retire (EOS forced at different steps); independent of the row count, of neighbours and of resume."""

from __future__ import annotations

import pytest
import torch

import snapstream_core as ss
from snapstream_core.engine import Engine, EngineItem, Scheduler, Ticket, sample_key
from snapstream_core.engine.noise import _mix, _mix_int, _signed, pick_tokens, uniforms
from snapstream_core.engine.step import EngineError
from snapstream_core.generate import generate
from snapstream_core.prefill import prefill_prompt
from snapstream_core.sampling import SamplingConfig
from tests.method_matrix import IDS, METHODS
from tests.method_matrix import prompts as matrix_prompts

NEW = 18
SAMPLED = SamplingConfig(max_new_tokens=NEW, temperature=0.8, top_p=0.9, top_k=50)


def prompts(lengths=(40, 90, 130), seed=0):
    return matrix_prompts(lengths, seed)


def engine_run(model, method, sampling, ps, samples, *, rows, eos=(), seed=0, first=0, **kw):
    """{(item, sample): (tokens, reason)} and the engine, for items ``ps`` (numbered from ``first``, noise key
    ``100 + number``) with sample indices ``samples[i]``."""
    eng = Engine(model, method, sampling, eos=list(eos), rows=rows, seed=seed, **kw)
    items = [EngineItem(p, 100 + first + i, tuple(samples[i]), sampling.max_new_tokens, tag=first + i)
             for i, p in enumerate(ps)]
    got = {}
    for ended in eng.run(items):
        for f in ended:
            assert (f.item.tag, f.sample_idx) not in got
            got[(f.item.tag, f.sample_idx)] = (f.tokens, f.finish_reason)
    return got, eng


def one_at_a_time(model, method, sampling, ids, key, sample_idx, eos, seed=0):
    """The reference: one sample alone, eager, on the compressed cache that prefill_prompt leaves (no slot buffers),
    drawing from the same per-sample noise. Its forwards hold the sample in 4 identical rows, as the engine's CPU
    forwards hold at least 4 (the CPU matrix kernels give a row other bits at 1-3 rows than at 4 or more)."""
    cache, logits = prefill_prompt(model, torch.tensor([ids]), method)
    cache.batch_repeat_interleave(4)
    k = torch.tensor([sample_key(seed, key, sample_idx)])
    toks, step = [], 0
    tok = pick_tokens(logits, sampling, k, torch.tensor([0]))
    while True:
        toks.append(int(tok))
        if int(tok) in eos or len(toks) == sampling.max_new_tokens:
            return toks, "stop" if int(tok) in eos else "length"
        out = model(input_ids=tok[:, None].expand(4, 1), position_ids=torch.tensor([[len(ids) + step]] * 4),
                    past_key_values=cache, use_cache=True)
        step += 1
        tok = pick_tokens(out.logits[:1, -1, :].float(), sampling, k, torch.tensor([step]))


def forced_eos(refs: list[list[int]]) -> list[int]:
    """EOS ids taken from greedy outputs at different steps, so that samples end at different lengths."""
    return sorted({refs[0][3], refs[1][9]})


# ---------------------------------------------------------------------------------------------------- scheduler


def test_scheduler_refills_retired_rows_in_order_and_counts_waste():
    s = Scheduler(rows=2)
    s.add(Ticket(0, i, 10) for i in range(3))
    s.add([Ticket(1, 0, 10)])
    assert s.assign() == [(0, Ticket(0, 0, 10)), (1, Ticket(0, 1, 10))]
    assert s.assign() == [] and s.item_pending(0)
    for _ in range(4):
        s.stepped()
    assert s.retire(1, kept_steps=3) == Ticket(0, 1, 10)
    assert s.assign() == [(1, Ticket(0, 2, 10))] and not s.item_pending(0)
    s.stepped(rows=1)
    s.retire(0, kept_steps=4)
    s.retire(1, kept_steps=1)
    assert s.assign() == [(0, Ticket(1, 0, 10))] and s.busy_rows() == [0] and not s.done
    s.retire(0, kept_steps=0)
    assert s.done
    assert (s.counts.steps, s.counts.row_steps, s.counts.used, s.counts.wasted) == (5, 9, 8, 1)
    with pytest.raises(RuntimeError):
        s.retire(0, kept_steps=0)
    with pytest.raises(ValueError, match="gen.rows"):
        Scheduler(rows=0)


# ---------------------------------------------------------------------------------------------------- noise


def test_noise_hash_is_splitmix64_bit_for_bit():
    xs = [0, 1, 2**63 - 1, 12345678901234567, 2**64 - 5]
    got = _mix(torch.tensor([_signed(x) for x in xs])).tolist()
    assert got == [_signed(_mix_int(x)) for x in xs]


def test_noise_depends_only_on_key_and_step():
    keys = torch.tensor([sample_key(0, 7, i) for i in range(4)])
    steps = torch.tensor([0, 5, 5, 9])
    u = uniforms(keys, steps, 1000)
    assert u.min() > 0 and u.max() < 1 and abs(u.mean().item() - 0.5) < 0.02
    for r in range(4):  # alone, in another batch order: the same numbers
        assert torch.equal(uniforms(keys[r : r + 1], steps[r : r + 1], 1000)[0], u[r])
    assert not torch.equal(u[1], u[2])  # other sample, same step
    assert sample_key(0, 7, 1) != sample_key(1, 7, 1) != sample_key(0, 8, 1)


def test_gumbel_max_draws_from_the_filtered_softmax():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).expand(20000, 4).contiguous()
    keys = torch.tensor([sample_key(3, 1, i) for i in range(20000)])
    cfg = SamplingConfig(temperature=1.0, top_p=0.8)  # keeps the first two: 0.5 / 0.8, 0.3 / 0.8
    counts = torch.bincount(pick_tokens(logits, cfg, keys, torch.zeros(20000, dtype=torch.long)), minlength=4)
    share = counts.float() / 20000
    assert counts[2:].sum() == 0
    assert abs(share[0].item() - 0.625) < 0.015


# ---------------------------------------------------------------------------------------------------- engine


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_greedy_tokens_equal_generate_with_rows_retiring(tiny_model, method):
    ps = prompts()
    plain = [generate(tiny_model, [p], method, SamplingConfig(max_new_tokens=NEW), eos_token_ids=[],
                      pad_token_id=0).tokens[0][0] for p in ps]
    eos = forced_eos(plain)
    ref = [generate(tiny_model, [p], method, SamplingConfig(max_new_tokens=NEW), eos_token_ids=eos,
                    pad_token_id=0).tokens[0][0] for p in ps]
    assert len({len(r) for r in ref}) > 1  # samples do end at different steps
    greedy = SamplingConfig(max_new_tokens=NEW)
    for rows in (1, 2, 5):
        got, eng = engine_run(tiny_model, method, greedy, ps, [(0, 1)] * 3, rows=rows, eos=eos)
        assert {k: v[0] for k, v in got.items()} == {(i, s): ref[i] for i in range(3) for s in (0, 1)}, rows


@pytest.mark.parametrize("method", METHODS, ids=IDS)
def test_sampled_tokens_equal_one_at_a_time_and_every_row_count(tiny_model, method):
    ps = prompts()
    free = {(i, s): one_at_a_time(tiny_model, method, SAMPLED, p, 100 + i, s, set())[0]
            for i, p in enumerate(ps) for s in range(3)}
    eos = sorted({free[(0, 0)][3], free[(1, 1)][9], free[(2, 2)][14]})
    ref = {k: one_at_a_time(tiny_model, method, SAMPLED, ps[k[0]], 100 + k[0], k[1], set(eos)) for k in free}
    assert len({len(t) for t, _ in ref.values()}) > 2
    assert len({tuple(t) for t, _ in ref.values()}) > 6  # samples differ
    for rows in (1, 3, 6):
        got, _ = engine_run(tiny_model, method, SAMPLED, ps, [range(3)] * 3, rows=rows, eos=eos)
        assert got == ref, rows


def test_resume_and_neighbours_do_not_change_a_sample(tiny_model):
    method = ss.SnapStream(prompt_budget=64, recent=8)
    ps = prompts()
    full, _ = engine_run(tiny_model, method, SAMPLED, ps, [range(4)] * 3, rows=3)
    resumed, _ = engine_run(tiny_model, method, SAMPLED, ps[1:], [(1, 3), range(4)], rows=2, first=1)
    assert resumed == {k: full[k] for k in [(1, 1), (1, 3)] + [(2, s) for s in range(4)]}
    alone, _ = engine_run(tiny_model, method, SAMPLED, ps[2:], [(2,)], rows=1, first=2)
    assert alone[(2, 2)] == full[(2, 2)]


def test_another_seed_draws_other_samples(tiny_model):
    method = ss.NoCompression()
    a, _ = engine_run(tiny_model, method, SAMPLED, prompts()[:1], [range(3)], rows=3, seed=0)
    b, _ = engine_run(tiny_model, method, SAMPLED, prompts()[:1], [range(3)], rows=3, seed=1)
    assert a != b


def test_max_new_tokens_one_and_first_token_eos(tiny_model):
    method = ss.SnapKV(prompt_budget=64)
    ps = prompts()
    one, _ = engine_run(tiny_model, method, SamplingConfig(max_new_tokens=1), ps, [(0,)] * 3, rows=2)
    assert all(len(t) == 1 and r == "length" for t, r in one.values())
    eos = [one[(1, 0)][0][0]]
    got, _ = engine_run(tiny_model, method, SamplingConfig(max_new_tokens=NEW), ps, [(0,)] * 3, rows=2, eos=eos)
    assert got[(1, 0)] == (eos, "stop")


def test_a_failed_compile_stops_the_run_naming_the_stage_and_the_way_out(tiny_model):
    def broken(gm, inputs):
        raise RuntimeError("no compiler here")

    method = ss.StreamingLLM(sinks=4, recent=28)
    with pytest.raises(EngineError, match=r"decode step \(compile\).*no compiler here.*gen.compile=false"):
        engine_run(tiny_model, method, SAMPLED, prompts(), [range(2)] * 3, rows=2, compile=True,
                   compile_backend=broken)


def test_out_of_memory_is_never_swallowed_and_says_what_is_held(tiny_model, monkeypatch):
    def oom(*args):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    eng = Engine(tiny_model, ss.NoCompression(), SAMPLED, eos=[], rows=2, planned_bytes=3 * 2**30)
    monkeypatch.setattr(eng.step_fn, "fn", oom)
    with pytest.raises(EngineError, match=r"decode step \(eager\): out of memory \(decode rows hold .* GiB; "
                                          r"planned peak 3.00 GiB"):
        list(eng.run([EngineItem(p, i, (0,), NEW) for i, p in enumerate(prompts())]))


def test_one_kv_allocation_per_run_with_prompts_of_growing_length(tiny_model):
    method = ss.NoCompression()
    ps = prompts((40, 90, 130, 200))
    got, eng = engine_run(tiny_model, method, SamplingConfig(max_new_tokens=NEW), ps, [(0, 1)] * 4, rows=2)
    assert len(got) == 8
    assert eng.stats.kv_allocations == 1
    assert eng.cache.slots == method.slots(200, NEW)  # sized once, for the longest prompt
    assert eng.stats.prefills == 4


def test_each_item_is_prefilled_once_when_its_samples_start_together(tiny_model):
    method = ss.SnapStream(prompt_budget=64, recent=8)
    _, eng = engine_run(tiny_model, method, SAMPLED, prompts((90,)), [range(6)], rows=6)
    assert eng.stats.prefills == 1
    _, eng = engine_run(tiny_model, method, SAMPLED, prompts(), [range(3)] * 3, rows=2)
    assert eng.stats.prefills == 3 and eng.stats.kv_allocations == 1


def test_a_prompt_longer_than_planned_is_refused_in_one_line(tiny_model):
    eng = Engine(tiny_model, ss.NoCompression(), SAMPLED, eos=[], rows=2)
    items = [EngineItem(p, i, (0,), NEW) for i, p in enumerate(prompts((40, 90)))]
    with pytest.raises(EngineError, match="prompt of 90 tokens is longer than the 64"):
        list(eng.run(items, max_prompt_tokens=64))
    assert eng.stats.kv_allocations == 1 and eng.stats.prefills == 1  # the first item, never a second buffer


def test_a_ratio_method_allocates_the_slots_of_its_prompts(tiny_model):
    """``snapstream`` with ``ratio`` sized its rows for a 2**40-token prompt (tera-bytes): now its longest prompt."""
    method = ss.SnapStream(ratio=0.75, recent=8, window=8)
    _, eng = engine_run(tiny_model, method, SAMPLED, prompts(), [(0,)] * 3, rows=2)
    assert eng.cache.slots == method.slots(130, NEW) == int(130 * 0.25) + 8


def test_appending_rows_read_only_their_filled_blocks(tiny_model):
    method = ss.NoCompression()
    greedy = SamplingConfig(max_new_tokens=NEW)
    got, eng = engine_run(tiny_model, method, greedy, prompts((40, 90, 300)), [(0,)] * 3, rows=1, read_block=16)
    full, every = engine_run(tiny_model, method, greedy, prompts((40, 90, 300)), [(0,)] * 3, rows=1,
                             read_block=None)
    assert got == full
    assert every.stats.read_share == 1.0 and eng.stats.read_share < 0.7


def test_batched_rows_compiled_trace_give_the_greedy_tokens(tiny_model):
    method = ss.SnapStream(prompt_budget=64, recent=8)
    ps = prompts()
    greedy = SamplingConfig(max_new_tokens=NEW)
    ref, _ = engine_run(tiny_model, method, greedy, ps, [(0,)] * 3, rows=1)
    got, eng = engine_run(tiny_model, method, greedy, ps, [(0,)] * 3, rows=2, compile=True, compile_backend="eager",
                          check_every=4)
    assert got == ref and eng.stats.compiled


def test_in_cache_positions_are_refused_naming_the_knob(tiny_model):
    with pytest.raises(ValueError, match="in_cache"):
        Engine(tiny_model, ss.SnapStream(prompt_budget=64, recent=8, positions="in_cache"), SAMPLED, eos=[], rows=1)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_decode_attention_matches_sdpa_on_the_slots():
    from snapstream_core.engine.attention import flex_decode_attention, resolve_attention

    gen = torch.Generator().manual_seed(0)
    B, H_kv, G, S, D = 3, 2, 3, 70, 16
    q, k, v = (torch.randn(*shape, generator=gen) for shape in ((B, H_kv, G, D), (B, H_kv, S, D), (B, H_kv, S, D)))
    visible = torch.rand(B, H_kv, S, generator=gen) > 0.4
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visible[:, :, None, :], scale=0.3)
    torch.testing.assert_close(flex_decode_attention(q, k, v, visible, 0.3), ref)
    assert resolve_attention("auto", "cpu", True) is None and resolve_attention("auto", "cuda", False) is None
    assert resolve_attention("auto", "cuda", True) is flex_decode_attention
    with pytest.raises(ValueError, match="attention"):
        resolve_attention("flash", "cuda", True)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_engine_with_flex_attention_gives_the_greedy_tokens(tiny_model):
    method = ss.SnapKV(prompt_budget=64)
    greedy = SamplingConfig(max_new_tokens=NEW)
    ref, _ = engine_run(tiny_model, method, greedy, prompts(), [(0,)] * 3, rows=2)
    got, _ = engine_run(tiny_model, method, greedy, prompts(), [(0,)] * 3, rows=2, attention="flex")
    assert got == ref


def test_smollm2_greedy_equals_transformers_generate_and_sampled_rows_agree(smollm2):
    from transformers import DynamicCache

    model, tok = smollm2
    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id]
    questions = ["What is 2+2? Reply with the number only.", "Name three colours of the rainbow, one per line.",
                 "Say yes."]
    ps = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True,
                                  return_dict=False) for q in questions]
    ref = []
    for p in ps:
        out = model.generate(torch.tensor([p]), max_new_tokens=24, do_sample=False, eos_token_id=eos,
                             pad_token_id=eos[0], past_key_values=DynamicCache(config=model.config))
        ref.append(out[0, len(p):].tolist())
    assert len({len(r) for r in ref}) > 1 and any(r[-1] in eos for r in ref)  # rows end at different steps
    greedy = SamplingConfig(max_new_tokens=24)
    got, _ = engine_run(model, ss.NoCompression(), greedy, ps, [(0,)] * 3, rows=2, eos=eos)
    assert [got[(i, 0)][0] for i in range(3)] == ref
    sampled = SamplingConfig(max_new_tokens=16, temperature=0.7, top_p=0.95)
    method = ss.SnapStream(prompt_budget=24, recent=8, window=8)
    one, _ = engine_run(model, method, sampled, ps, [range(3)] * 3, rows=1, eos=eos)
    many, _ = engine_run(model, method, sampled, ps, [range(3)] * 3, rows=4, eos=eos)
    assert one == many and len({tuple(t) for t, _ in one.values()}) > 3


def test_stop_strings_end_samples_as_generate_does(tiny_model, smollm2):
    _, tok = smollm2  # its tokenizer decodes the tiny model's ids (< 1000)
    method = ss.StreamingLLM(sinks=4, recent=28)
    ps = prompts()
    greedy = SamplingConfig(max_new_tokens=NEW)
    plain, _ = engine_run(tiny_model, method, greedy, ps, [(0,)] * 3, rows=2)
    stop = [tok.decode(plain[(1, 0)][0][6:8]).strip() or "x"]
    ref = generate(tiny_model, ps, method, greedy, eos_token_ids=[], pad_token_id=0, stop_strings=stop, tokenizer=tok)
    eng = Engine(tiny_model, method, greedy, eos=[], rows=2, stop_strings=stop, tokenizer=tok)
    got = {}
    for ended in eng.run([EngineItem(p, i, (0,), NEW, tag=i) for i, p in enumerate(ps)]):
        got.update({f.item.tag: (f.tokens, f.finish_reason) for f in ended})
    assert got[1][1] == "stop" and len(got[1][0]) < NEW
    ref1 = [generate(tiny_model, [p], method, greedy, eos_token_ids=[], pad_token_id=0, stop_strings=stop,
                     tokenizer=tok) for p in ps]
    assert [got[i] for i in range(3)] == [(r.tokens[0][0], r.finish_reasons[0][0]) for r in ref1]
    assert ref.tokens[1][0] == got[1][0]


@pytest.mark.parametrize("cfg", [SamplingConfig(temperature=0.8, top_p=0.9), SamplingConfig(temperature=0.6, top_k=20),
                                 SamplingConfig(temperature=1.0, top_k=50, top_p=0.95)], ids=["top_p", "top_k", "both"])
def test_sampling_over_the_survivors_draws_the_whole_vocabulary_tokens(cfg):
    """The survivors-only noise picks, on random logits (ties included), the token of the whole-vocabulary
    Gumbel-max with the same noise."""
    gen = torch.Generator().manual_seed(1)
    R, V = 64, 5000
    logits = torch.randn(R, V, generator=gen) * 3
    logits[:8, 100:110] = logits[:8, 100:101]  # exact ties among the largest
    logits[:8, 100:110] += 20
    keys = torch.tensor([sample_key(5, 9, i) for i in range(R)])
    for step in range(4):
        steps = torch.full((R,), step)
        filtered = cfg.warpers()(None, logits)
        whole = (filtered - torch.log(-torch.log(uniforms(keys, steps, V)))).argmax(-1)
        assert torch.equal(pick_tokens(logits, cfg, keys, steps), whole)


@pytest.mark.parametrize("method", [ss.NoCompression(), ss.SnapStream(prompt_budget=64, recent=8)],
                         ids=["none", "snapstream"])
def test_a_rows_logits_are_the_same_bits_in_every_cpu_step_of_its_rows(tiny_model, method):
    """The eager CPU step runs rows ``[0, hi)`` as forwards over the fixed row blocks of this machine
    (``row_blocks``): a row's logits do not depend on how many rows (4 to 8) share the step or which neighbours."""
    from snapstream_core.engine.row_blocks import blocks, held_rows, row_block
    from snapstream_core.engine.rows import RowCache
    from snapstream_core.engine.step import decode_step

    ps = prompts((120, 60, 90, 30, 200, 75, 50, 110))
    prefixes = [prefill_prompt(tiny_model, torch.tensor([p]), method) for p in ps]
    S = max(method.slots(len(p), 4) for p in ps)
    B = row_block(tiny_model, 8)
    held = held_rows(8, B)
    out = {}
    for M in (4, 5, 8):
        rows = RowCache.empty(held, S, prefixes[0][0])
        slots = [(lambda b, o, p, _: b + o % p)(*rows.load(r, prefixes[r][0])) for r in range(M)] + [0] * (held - M)
        toks = torch.tensor([[int(prefixes[r][1].argmax())] for r in range(M)] + [[0]] * (held - M))
        pos = torch.tensor([[len(p)] for p in ps[:M]] + [[0]] * (held - M))
        with torch.no_grad():
            out[M] = torch.cat([decode_step(tiny_model, rows.view(end, S, lo), toks[lo:end], pos[lo:end],
                                            torch.tensor(slots[lo:end]))[0] for lo, end in blocks(M, held, B)])
    assert torch.equal(out[4][:4], out[5][:4]) and torch.equal(out[4][:4], out[8][:4])
    assert torch.equal(out[5][4], out[8][4])


def test_the_row_block_keeps_every_row_position_exact_on_this_machine(tiny_model):
    """``row_block``: every product of 4..B rows of each of the model's linear shapes gives each row position the
    bits it gets in the smallest product that holds it; ``held_rows`` and ``blocks`` keep every forward >= 4 rows."""
    from snapstream_core.engine.row_blocks import MIN_CPU_ROWS, blocks, held_rows, linear_weights, row_block

    B = row_block(tiny_model, 16)
    assert MIN_CPU_ROWS <= B <= 16
    for (k, n, dtype), weight in linear_weights(tiny_model).items():
        w, x = torch.randn(n, k, dtype=dtype), torch.randn(B, k, dtype=dtype)
        assert weight.shape == (n, k)
        ref = torch.nn.functional.linear(x[:MIN_CPU_ROWS], w)
        for m in range(MIN_CPU_ROWS, B + 1):
            got = torch.nn.functional.linear(x[:m], w)
            assert torch.equal(got[:MIN_CPU_ROWS], ref)
    for rows in range(1, 40):
        for block in range(MIN_CPU_ROWS, 17):
            held = held_rows(rows, block)
            assert held >= max(rows, MIN_CPU_ROWS)
            for hi in range(1, held + 1):
                parts = blocks(hi, held, block)
                assert parts[0][0] == 0 and parts[-1][1] >= hi and all(e <= held for _, e in parts)
                assert all(e - lo >= MIN_CPU_ROWS and lo % block == 0 and e - lo <= block for lo, e in parts)
