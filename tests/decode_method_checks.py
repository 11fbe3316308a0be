"""The engine checks every decode-time method's own test file runs (``test_h2o.py``, ``test_random_evict.py``):
its tokens at 1 and 4 rows, against the full cache when the budget is never reached, and compiled against eager.
One copy of the run and the checks; each file passes its method and prompt lengths."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch._dynamo.testing import CompileCounter

import snapstream_core as ss
from snapstream_core.engine import Engine, EngineItem
from tests.method_matrix import prompts

GREEDY = ss.SamplingConfig(max_new_tokens=20)
SAMPLED = ss.SamplingConfig(max_new_tokens=20, temperature=0.8, top_p=0.95)


def run(model, method, ps, sampling=GREEDY, rows=4, samples=(0,), **kw):
    """{(prompt index, sample): tokens} of ``ps`` decoded by a fresh engine, and the engine."""
    eng = Engine(model, method, sampling, eos=[], rows=rows, **kw)
    items = [EngineItem(p, 7 + i, samples, sampling.max_new_tokens, tag=i) for i, p in enumerate(ps)]
    tokens = {}
    for ended in eng.run(items):
        for f in ended:
            tokens[f.item.tag, f.sample_idx] = f.tokens
    return tokens, eng


def rows_1_and_4_agree(model, method, lengths, sampling) -> None:
    ps = prompts(lengths)
    one, _ = run(model, method, ps, sampling, rows=1, samples=(0, 1))
    four, eng = run(model, method, ps, sampling, rows=4, samples=(0, 1))
    assert one == four and len(four) == 4 and eng.compactor.calls >= 2


def roomy_budget_is_the_full_cache(model, method, lengths) -> None:
    roomy = replace(method, budget=100)
    ps = prompts(lengths)
    assert all(roomy.keeps_all(len(p), GREEDY.max_new_tokens) for p in ps)
    got, eng = run(model, roomy, ps)
    full, _ = run(model, ss.NoCompression(), ps)
    assert got == full and eng.compactor.calls == 0


def compiled_equals_eager(model, method, lengths) -> None:
    torch._dynamo.reset()
    counter = CompileCounter()
    ps = prompts(lengths)
    eager, _ = run(model, method, ps, SAMPLED)
    compiled, eng = run(model, method, ps, SAMPLED, compile=True, compile_backend=counter)
    assert compiled == eager and eng.compactor.calls >= 2 and counter.frame_count == 2
    torch._dynamo.reset()
