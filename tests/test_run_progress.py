"""A run's progress moves while a batch decodes: the engine reports the tokens prefilled and decoded so far (without
changing a token), the sample cache's backend passes that on, and the bar shows it before any sample ends."""

from __future__ import annotations

import snapstream_core as ss
from evals.execute.backends.base import Backend
from evals.execute.caching import CachingBackend
from evals.execute.expected import Work
from evals.execute.progress import token_counts
from snapstream_core.engine import Engine, EngineItem
from snapstream_core.methods.snapkv import SnapKV
from tests.method_matrix import prompts

GREEDY = ss.SamplingConfig(max_new_tokens=20)


def _run(model, watch):
    eng = Engine(model, SnapKV(prompt_budget=16, window=4), GREEDY, eos=[], rows=4)
    eng.on_progress = watch
    items = [EngineItem(p, 7 + i, (0, 1), GREEDY.max_new_tokens, tag=i) for i, p in enumerate(prompts((13, 30)))]
    seen, tokens = [], {}
    for ended in eng.run(items):
        seen.append(("ended", len(ended)))
        tokens.update({(f.item.tag, f.sample_idx): f.tokens for f in ended})
    return tokens, seen


def test_the_engine_reports_prefill_and_decoded_tokens_before_any_sample_ends(tiny_model):
    calls = []
    tokens, seen = _run(tiny_model, lambda prefilled, decoded: calls.append((prefilled, decoded)))
    plain, _ = _run(tiny_model, None)
    assert tokens == plain and len(tokens) == 4  # the callback changes no output
    assert calls[0] == (13, 0) and calls[1] == (13 + 30, 0)  # each item's prompt, once whatever its samples
    before_first_end = calls[: calls.index(max(calls, key=lambda c: c[1]))]
    assert [d for _, d in calls] == sorted(d for _, d in calls)  # counts only grow
    assert len({d for _, d in before_first_end}) > 10  # it moved at every step while all 4 rows decoded as one batch
    assert calls[-1] == (43, 4 * 20 - 4)  # 4 samples x 19 steps after each one's first token (no eos)


class _Inner(Backend):
    model = "the loaded model"

    def __init__(self):
        self.watched = None

    def generate(self, requests):
        return []

    def watch(self, callback):
        self.watched = callback


def test_the_sample_cache_backend_shows_the_inner_model_and_passes_the_watch_on():
    inner = _Inner()
    wrapped = CachingBackend(lambda: inner, cache=None)
    assert wrapped.model == "the loaded model"  # the cost line measures it (it was hidden behind the cache)
    wrapped.watch(print)
    assert inner.watched is print


def test_the_bar_shows_the_counts_against_what_the_run_expects():
    assert token_counts(4200, 37, Work(6, 12_600, 6, 160)) == "prefill 4,200/12,600 tok, decode 37/960 tok"
    assert token_counts(5, 7, None) == "prefill 5 tok, decode 7 tok"


def test_the_bar_moves_with_the_counts_before_a_sample_ends():
    from types import SimpleNamespace

    from evals.execute.progress import Progress

    spec = SimpleNamespace(task=SimpleNamespace(name="aime24"), compression_tag="snapstream", log_every=0)
    with Progress(SimpleNamespace(spec=spec, run_id="r"), total=3, expected=Work(3, 300, 3, 320)) as progress:
        progress.on_tokens(300, 12)
        assert progress.bar.n == 0 and progress.bar.postfix == "prefill 300/300 tok, decode 12/960 tok"
