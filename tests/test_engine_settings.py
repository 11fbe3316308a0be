"""Per-request settings: each row draws with its own temperature, top-k, top-p, max_new_tokens and seed,
the same draws as before, with no read from the device in the decode loop; one engine and one compiled step serve
several runs (a task's follow-up calls) while their rows fit."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter

import snapstream_core as ss
from bench.host_reads import HostReads
from snapstream_core.engine import Engine, EngineItem, sample_key
from snapstream_core.engine.noise import RowSampling, pick_rows, pick_tokens, uniforms, uniforms_at
from snapstream_core.sampling import SamplingConfig
from tests.method_matrix import prompts

SETTINGS = [SamplingConfig(temperature=0.8, top_p=0.9), SamplingConfig(temperature=0.6, top_k=20),
            SamplingConfig(temperature=1.0, top_k=50, top_p=0.95), SamplingConfig(), SamplingConfig(temperature=1.3),
            SamplingConfig(temperature=0.6, top_p=0.95), SamplingConfig(temperature=0.7, top_k=3000)]


def survivors_reference(logits, sampling, keys, steps):
    """The draws of the engine's previous sampler: transformers' warpers on all rows, then the noise of the C
    largest filtered entries, C the most survivors of any row (read back to the host)."""
    if not sampling.do_sample:
        return logits.argmax(-1)
    filtered = sampling.warpers()(None, logits)
    V = logits.shape[-1]
    if sampling.top_k or sampling.top_p < 1.0:
        C = int((filtered > float("-inf")).sum(-1).max())
        if C < V:
            values, index = filtered.topk(max(C, 1), dim=-1)
            scores = values - torch.log(-torch.log(uniforms_at(keys, steps, index)))
            best = scores.max(-1, keepdim=True).values
            return torch.where(scores == best, index, V).min(-1).values
    return (filtered - torch.log(-torch.log(uniforms(keys, steps, V)))).argmax(-1)


def random_logits(R, V=5000, seed=1):
    logits = torch.randn(R, V, generator=torch.Generator().manual_seed(seed)) * 3
    logits[:8, 100:110] = logits[:8, 100:101]  # exact ties among the largest
    logits[:8, 100:110] += 20
    return logits


def test_each_row_draws_with_its_own_settings_the_previous_samplers_tokens():
    """Rows of mixed settings (greedy among them) in one batch: every row's token is the one the previous sampler
    drew for that row with its settings alone, at every step."""
    R = 63
    logits = random_logits(R)
    per_row = [SETTINGS[r % len(SETTINGS)] for r in range(R)]
    rows = RowSampling.of(per_row)
    keys = torch.tensor([sample_key(5, 9, i) for i in range(R)])
    for step in range(3):
        steps = torch.full((R,), step)
        got = pick_rows(logits, rows, keys, steps)
        for r in range(R):
            want = survivors_reference(logits[r : r + 1], per_row[r], keys[r : r + 1], steps[r : r + 1])
            assert int(got[r]) == int(want), (r, per_row[r])


@pytest.mark.parametrize("cfg", SETTINGS, ids=lambda c: c.warper_names())
def test_one_setting_for_all_rows_draws_the_previous_samplers_tokens_with_no_host_read(cfg):
    R = 16
    logits = random_logits(R, seed=2)
    keys = torch.tensor([sample_key(1, 2, i) for i in range(R)])
    steps = torch.arange(R)
    with HostReads(cuda=False) as reads:
        got = pick_tokens(logits, cfg, keys, steps)
    assert reads.count == 0
    assert torch.equal(got, survivors_reference(logits, cfg, keys, steps))


def test_the_counter_sees_the_reads_it_counts():
    x = torch.arange(4)
    with HostReads(cuda=False) as reads:
        x.tolist(), x[0].item(), bool(x[1] > 0)
    assert reads.count == 3


def items_with_settings(ps):
    """Three requests with their own settings, max_new_tokens and seed."""
    return [
        EngineItem(ps[0], 10, (0, 1), 9, tag=0, sampling=SamplingConfig(temperature=0.8, top_p=0.9)),
        EngineItem(ps[1], 11, (0,), 5, tag=1),  # the engine's settings (greedy)
        EngineItem(ps[2], 12, (0, 2), 12, tag=2, sampling=SamplingConfig(temperature=0.6, top_k=20), seed=7),
    ]


def collect(engine, items):
    return {(f.item.tag, f.sample_idx): f.tokens for batch in engine.run(items) for f in batch}


def test_per_request_settings_in_one_engine_give_each_request_its_own_tokens(tiny_model):
    """Requests of different settings share the rows; each sample's tokens are those it gets in an engine of its
    own settings, and no decode step reads the device (top-p on)."""
    ps = prompts((60, 90, 40))
    items = items_with_settings(ps)
    reads = HostReads(cuda=False)
    engine = Engine(tiny_model, ss.NoCompression(), SamplingConfig(max_new_tokens=4), eos=[], rows=4,
                    step_context=lambda: reads)
    together = collect(engine, items)
    assert reads.count == 0 and engine.stats.counts.steps > 0
    for it in items:
        alone = Engine(tiny_model, ss.NoCompression(), it.sampling or SamplingConfig(), eos=[], rows=4,
                       seed=it.seed or 0)
        single = collect(alone, [EngineItem(it.ids, it.key, it.sample_idx, it.max_new_tokens, tag=it.tag)])
        assert {k: v for k, v in together.items() if k[0] == it.tag} == single
    assert [len(together[(0, 0)]), len(together[(1, 0)]), len(together[(2, 2)])] == [9, 5, 12]


def test_one_engine_and_one_graph_serve_follow_up_runs_that_fit(tiny_model):
    """A first run, then follow-up runs of one shorter request each with other settings (LongBench-v2 CoT's answer
    calls): the rows are allocated once and the compiled step (eager backend) is traced once."""
    torch._dynamo.reset()
    counter = CompileCounter()
    ps = prompts((120, 90, 40))
    engine = Engine(tiny_model, ss.SnapStream(prompt_budget=64, recent=8), SamplingConfig(max_new_tokens=12), eos=[],
                    rows=4, compile=True, compile_backend=counter)
    collect(engine, items_with_settings(ps))
    for i, p in enumerate(prompts((30, 50))):
        collect(engine, [EngineItem(p, 20 + i, (0,), 4, sampling=SamplingConfig(temperature=0.5, top_p=0.8))])
    assert engine.stats.kv_allocations == 1 and engine.stats.compiles == 1 and counter.frame_count == 1
    torch._dynamo.reset()
