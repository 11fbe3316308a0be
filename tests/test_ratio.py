"""``compression.ratio``: keep a share of each prompt (kvpress's ``compression_ratio`` = the share dropped),
instead of a fixed ``prompt_budget``: exact cache sizes on tiny_llama, the one-of-two rule, the minimum, and its
place in the run identity and rows."""

from __future__ import annotations

import pytest
import torch

import snapstream_core as ss
from evals.record.rows import row_columns
from snapstream_core import compression_from_config
from tests.runner_utils import TINY, compose_cfg

NEW = 12


def held_after(model, method, prompt_len: int, new: int = NEW) -> tuple[int, int]:
    """(tokens held per layer after prefill, after ``new`` greedy decode steps); every layer must agree."""
    ids = torch.randint(0, 1000, (1, prompt_len), generator=torch.Generator().manual_seed(prompt_len))
    model.set_attn_implementation("sdpa")
    ss.attach(model)
    cache = ss.make_cache(model, method)
    out = model(input_ids=ids, past_key_values=cache)
    after_prefill = {lyr.tokens_held() for lyr in cache.layers}
    token = out.logits[:, -1:].argmax(-1)
    for step in range(new):
        out = model(input_ids=token, position_ids=torch.tensor([[prompt_len + step]]), past_key_values=cache)
        token = out.logits[:, -1:].argmax(-1)
    final = {lyr.tokens_held() for lyr in cache.layers}
    assert len(after_prefill) == len(final) == 1
    assert cache.stats.kv_tokens_peak == max(*after_prefill, *final)
    return after_prefill.pop(), final.pop()


@pytest.mark.parametrize(
    ("method", "prompt_len", "after_prefill", "final"),
    [
        (ss.SnapKV(ratio=0.75, window=16), 300, 75, 75 + NEW),  # int(300 * 0.25)
        (ss.SnapKV(ratio=0.75, window=16), 200, 50, 50 + NEW),  # the share follows each prompt
        (ss.SnapStream(ratio=0.5, window=16, recent=8), 301, 150, 150 + 8),  # int(150.5); the ring is fixed
        (ss.SnapStream(ratio=0.5, window=16, recent=8), 120, 60, 60 + 8),
        (ss.SnapStream(ratio=0.95, window=16, recent=8), 200, 21, 21 + 8),  # int(10) < window + sinks + 1 = 21
    ],
    ids=["snapkv-300", "snapkv-200", "snapstream-301", "snapstream-120", "snapstream-minimum"],
)
def test_exact_cache_sizes_with_a_ratio(tiny_model, method, prompt_len, after_prefill, final):
    assert method.footprint(prompt_len, NEW) == final
    assert held_after(tiny_model, method, prompt_len) == (after_prefill, final)


def test_ratio_zero_keeps_the_whole_prompt_and_is_token_identical(tiny_model):
    from transformers import DynamicCache

    ids = torch.randint(0, 1000, (1, 90), generator=torch.Generator().manual_seed(5))
    tiny_model.set_attn_implementation("sdpa")
    plain = tiny_model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0,
                                past_key_values=DynamicCache(config=tiny_model.config))
    ss.attach(tiny_model)
    method = ss.SnapKV(ratio=0.0, window=16)
    assert not method.needs_selection(90)
    cache = ss.make_cache(tiny_model, method)
    out = tiny_model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0, past_key_values=cache)
    assert torch.equal(out, plain)


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"method": "snapstream", "ratio": 0.5, "prompt_budget": 256}, "compression.ratio: give compression.ratio"),
        ({"method": "snapkv", "ratio": 1.0}, r"compression.ratio: must be a number in \[0, 1\)"),
        ({"method": "snapkv", "ratio": -0.1}, "compression.ratio: must be a number"),
        ({"method": "snapkv", "ratio": True}, "compression.ratio: must be a number"),
        ({"method": "snapkv", "ratio": "half"}, "compression.ratio: must be a number"),
    ],
)
def test_ratio_is_refused_with_one_line(cfg, message):
    with pytest.raises(ValueError, match=message):
        compression_from_config(cfg)


def test_without_either_the_default_budget_applies():
    knobs = compression_from_config({"method": "snapstream"}).knobs()
    assert (knobs["prompt_budget"], knobs["ratio"]) == (ss.SnapKV.DEFAULT_PROMPT_BUDGET, None)


NEEDLE = [*TINY, "task=needle", "task.context_tokens=128", "task.n_items=2", "compression=snapstream",
          "compression.recent=8", "compression.window=16"]


def test_ratio_is_in_the_run_identity_and_the_rows():
    from tests.runner_utils import plan_cfg as plan

    a = plan(compose_cfg([*NEEDLE, "compression.ratio=0.5"]))
    b = plan(compose_cfg([*NEEDLE, "compression.ratio=0.25"]))
    c = plan(compose_cfg([*NEEDLE, "compression.prompt_budget=64"]))
    assert a.identity["compression"]["ratio"] == 0.5 and a.identity["compression"]["prompt_budget"] is None
    assert c.identity["compression"]["ratio"] is None and c.identity["compression"]["prompt_budget"] == 64
    assert len({a.fingerprint, b.fingerprint, c.fingerprint}) == 3
    assert "ratio" in row_columns() and "cr0.5" in str(a.run_dir)


def test_hydra_refuses_both_and_a_batched_ratio():
    from evals.config.spec import check

    with pytest.raises(ValueError, match="compression.ratio: give"):
        check(compose_cfg([*NEEDLE, "compression.ratio=0.5", "compression.prompt_budget=64"]))
    with pytest.raises(ValueError, match="gen.batch_size: compression.ratio .* needs gen.batch_size=1"):
        check(compose_cfg([*NEEDLE, "compression.ratio=0.5", "gen.batch_size=2"]))
