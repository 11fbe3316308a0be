"""The one memory model (snapstream_core.memory) against tensor allocations tracked on CPU: a job's peak (a decode
row set held while the next item is prefilled) within 15% of the tracked peak and never below it; the card
arithmetic the planner budgets with. The sampling terms: tests/test_sampling_terms.py; every decode-time method's
compaction: tests/test_compaction_memory.py."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

import snapstream_core as ss
from bench.live_bytes import LiveBytes
from bench.planner_terms import run_file
from snapstream_core.engine import Engine, EngineItem
from snapstream_core.memory import (
    GIB,
    SORT_SCRATCH_BYTES_PER_ENTRY,
    Arch,
    budget_bytes,
    card_usable_bytes,
    job_terms,
    max_rows,
)
from snapstream_core.methods import DecodeMethod, TriAttention
from tests.conftest import tiny_config

SAMPLED = ss.SamplingConfig(max_new_tokens=24, temperature=0.6, top_p=0.95)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = LlamaForCausalLM(tiny_config(num_hidden_layers=3, vocab_size=4096)).eval()
    m.set_attn_implementation("sdpa")
    return m


def _triattention(tmp_path, config):
    return TriAttention(budget=1030, interval=8, calibration=run_file("calibration", Arch.of(config, 4), tmp_path))


METHODS = {
    "none": lambda tmp, config: ss.NoCompression(),
    "snapstream": lambda tmp, config: ss.SnapStream(prompt_budget=256, window=16, recent=32),
    "rkv": lambda tmp, config: ss.RKV(budget=256, interval=8),
    "snapkv_decode": lambda tmp, config: ss.SnapKVDecode(budget=256, interval=8),
    "triattention": _triattention,  # keeps the 1024-token prompt; compacts after 14 and 22 new tokens
}


@pytest.mark.parametrize("name", list(METHODS))
def test_job_peak_bounds_the_tracked_engine_peak_within_15_percent(model, name, tmp_path):
    """Two items of T tokens, R samples each, in R engine rows: the second item is prefilled while the rows of the
    first are allocated, the peak the model's ``job`` sums."""
    method = METHODS[name](tmp_path, model.config)
    T, R, G = 1024, 4, SAMPLED.max_new_tokens
    gen = torch.Generator().manual_seed(0)
    items = [EngineItem(torch.randint(0, 4096, (T,), generator=gen).tolist(), i, tuple(range(R)), G)
             for i in range(2)]
    engine = Engine(model, method, SAMPLED, eos=[], rows=R)
    with LiveBytes() as mem:
        done = sum(len(batch) for batch in engine.run(items))
    assert done == 2 * R
    if method.budget_cap == "cache" and method.method != "streaming_llm":
        assert engine.compactor.calls >= 2 and engine.cache.slots == method.budget + method.interval
    a = Arch.of(model.config, 4)
    slots = engine.cache.slots  # what the engine allocated per row
    scratch = method.compaction_scratch(a, slots) if isinstance(method, DecodeMethod) else 0
    terms = job_terms(a, 0, R, slots=slots, max_new=G, T=T, prefill_slots=method.prefill_slots(T),
                      window=method.query_rows(T), chunk=4096, compact_scratch=scratch, **method.row_memory(T, slots))
    # top-p's sort scratch (inside one op, untracked): the first draw's, and the rows' when their draw is the peak
    unseen = (1 + (R if terms["draw"] else 0)) * a.vocab * SORT_SCRATCH_BYTES_PER_ENTRY
    estimate = sum(terms.values())
    assert mem.peak <= estimate - unseen <= 1.15 * mem.peak, (mem.peak, terms)


def test_an_80_gb_card_allocates_about_79_gib_and_the_budget_keeps_a_margin():
    assert 79.0 * GIB < card_usable_bytes(80) < 79.2 * GIB
    assert budget_bytes(card_usable_bytes(80)) <= 77 * GIB


def test_max_rows_is_the_largest_row_count_that_fits():
    a = Arch(n_layers=32, hidden=4096, intermediate=14336, n_heads=32, n_kv_heads=8, head_dim=128, vocab=128_256,
             dtype_bytes=2)
    job = dict(slots=2048, max_new=32768, T=400, prefill_slots=2048, window=32, chunk=4096)
    weights, budget = 16 * 10**9, 70 * GIB
    n = max_rows(a, weights, budget, **job)
    assert sum(job_terms(a, weights, n, **job).values()) <= budget < sum(job_terms(a, weights, n + 1, **job).values())
    assert max_rows(a, weights, weights, **job) == 0
