"""AdaKV and PyramidKV, the ragged selections: AdaKV's one top-k over all KV heads of a layer with its safeguard,
PyramidKV's per-layer budgets (kvpress 0.5.5's formula), the slots past a head's count not valid, the same tokens at
1 and 4 decode rows through the runner, and the full cache's tokens when nothing is dropped. Their kept positions
against kvpress itself: ``tests/test_kvpress_twins.py``."""

from __future__ import annotations

import json

import pytest
import torch

from evals.run import run
from snapstream_core.api import compression_from_config
from snapstream_core.generate import generate
from snapstream_core.methods import METHODS, AdaKV, NoCompression, PyramidKV
from snapstream_core.methods.base import PrefillView
from snapstream_core.prefill import prefill_prompt
from snapstream_core.sampling import SamplingConfig
from tests.method_matrix import prompts
from tests.runner_utils import TINY, compose_cfg


def knorm_view(norms: torch.Tensor) -> PrefillView:
    """A view whose keys have the given L2 norms (H_kv, T): Knorm scores ``-norm``."""
    H, T = norms.shape
    keys = torch.zeros(1, H, T, 4)
    keys[..., 0] = norms
    return PrefillView(query=torch.zeros(1, 2 * H, 1, 4), keys=keys, key_valid=torch.ones(1, T, dtype=torch.bool),
                       scaling=0.5, values=keys.clone(), layer_idx=0, n_layers=2)


def kept_sets(sel) -> list[set[int]]:
    return [set(sel.indices[0, h, : int(sel.counts[0, h])].tolist()) for h in range(sel.counts.shape[1])]


def test_adakv_keeps_one_top_k_over_all_heads_and_each_heads_safeguard():
    """Head 0's keys all score above head 1's: the layer's H_kv * n kept go to head 0, but for head 1's best
    ``int(n * alpha_safeguard)`` (kvpress ``AdaKVPress.compress``)."""
    T, n = 20, 8
    norms = torch.stack([torch.arange(T, dtype=torch.float) + 1, torch.arange(T, dtype=torch.float) + 100])
    view = knorm_view(norms)
    sel = AdaKV(scorer="knorm", prompt_budget=n, alpha_safeguard=0.25).select(view)  # n_safe = 2
    assert sel.counts.tolist() == [[14, 2]] and sel.n_keep == sel.indices.shape[-1] == 14
    assert kept_sets(sel) == [set(range(14)), {0, 1}]  # head 0's 14 best, head 1's own 2 best
    assert sel.indices[0, 0].tolist() == sorted(sel.indices[0, 0].tolist())  # position order
    # no safeguard: one top-k over the heads, head 1 keeps nothing
    bare = AdaKV(scorer="knorm", prompt_budget=n, alpha_safeguard=0.0).select(view)
    assert bare.counts.tolist() == [[16, 0]] and kept_sets(bare)[0] == set(range(16))
    # kvpress 0.5.5: a safeguard that rounds to 0 still keeps one token per head
    tiny = AdaKV(scorer="knorm", prompt_budget=n, alpha_safeguard=0.01).select(view)
    assert tiny.counts.tolist() == [[15, 1]]
    # the full safeguard is a per-head top-n (kvpress's ScorerPress)
    full = AdaKV(scorer="knorm", prompt_budget=n, alpha_safeguard=1.0).select(view)
    assert full.counts.tolist() == [[8, 8]] and kept_sets(full) == [set(range(8))] * 2


def test_adakv_ranks_with_any_prompt_scorer_and_refuses_anything_else_in_one_line():
    assert AdaKV(scorer="expected_attention", n_future=64).knobs()["n_future"] == 64
    assert AdaKV(scorer="expected_attention").knobs()["sinks"] == 4  # the scorer's default, recorded
    assert "window" not in AdaKV(scorer="tova").knobs()
    refusals = {
        (("scorer", "rkv"),): r"^compression\.scorer: adakv ranks tokens with a prompt scorer, one of snapkv",
        (("scorer", "knorm"), ("window", 16)): r"^compression\.window: adakv's scorer knorm does not read it",
        (("alpha_safeguard", 1.5),): r"^compression\.alpha_safeguard: must be a number in \[0, 1\]",
        (("prompt_budget", 16),): r"^compression\.prompt_budget: must exceed window \+ sinks",
        (("ratio", 0.5), ("prompt_budget", 64)): r"^compression\.ratio: give compression\.ratio",
        (("positions", "in_cache"),): r"^compression\.positions: adakv keeps a different count per KV head",
    }
    for knobs, message in refusals.items():
        with pytest.raises(ValueError, match=message) as err:
            compression_from_config({"method": "adakv", **dict(knobs)})
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"^compression\.beta: must be an integer >= 1"):
        compression_from_config({"method": "pyramidkv", "beta": 0})


def test_pyramidkv_budgets_decrease_with_depth_to_the_same_mean():
    """kvpress 0.5.5 ``PyramidKVPress.get_layer_budget``: min = m / beta, max = 2 m - min, layer l of L keeps
    round(max - l (max - min) / (L - 1)); clamped at T - window; SnapKV's budget when min < window."""
    m = PyramidKV(prompt_budget=1024, window=32, beta=20)
    budgets = [m.layer_budget(3000, layer, 32) for layer in range(32)]
    assert budgets[0] == round(2 * 1024 - 1024 / 20) == 1997 and budgets[-1] == round(1024 / 20) == 51
    assert all(a > b for a, b in zip(budgets, budgets[1:])) and sum(budgets) == 1024 * 32
    # held: the mean budget; allocated: every layer padded to layer 0's (the ragged policy)
    assert m.kept(3000) == 1024 and m.tokens_held(3000, 5) == 1029
    assert budgets[0] <= m.kept_cap(3000) == m.prefill_slots(3000) == 2048 and m.slots(3000, 10) == 2048 + 9
    caps = [m.kept_cap(t) for t in range(1, 4000, 7)]  # the rows are sized for the longest prompt: never falls
    assert caps == sorted(caps)
    clamped = [m.layer_budget(1200, layer, 2) for layer in range(2)]  # max = T - window = 1168, min = 2048 - 1168
    assert clamped == [1168, 880]
    flat = PyramidKV(prompt_budget=256, window=32, beta=20)  # 256 / 20 < 32: kvpress falls back to SnapKV's budget
    assert {flat.layer_budget(3000, layer, 32) for layer in range(32)} == {256}
    ratio = PyramidKV(ratio=0.5, window=32, beta=4)  # the float T * (1 - ratio), as kvpress: 1000.5 here
    assert ratio.layer_budget(2001, 0, 2) == round(2 * 1000.5 - 1000.5 / 4)


@pytest.mark.parametrize("method", [AdaKV(prompt_budget=48, window=8), AdaKV(scorer="keydiff", prompt_budget=48),
                                    PyramidKV(prompt_budget=48, window=8, beta=2)], ids=["adakv", "adakv-keydiff",
                                                                                         "pyramidkv"])
def test_a_ragged_layer_holds_its_counts_and_its_padding_is_not_valid(tiny_model, method):
    T = 130
    (ids,) = prompts((T,))
    cache, _ = prefill_prompt(tiny_model, torch.tensor([ids]), method)
    held = [layer.valid[0].sum(-1).tolist() for layer in cache.layers]  # (L, H_kv) valid slots
    for layer in cache.layers:
        assert layer.keys.shape[-2] == method.prefill_slots(T)  # every layer: the policy's padded slots
        for h in range(layer.valid.shape[1]):  # a head's valid slots: distinct positions, first in its storage
            n = int(layer.valid[0, h].sum())
            assert layer.valid[0, h, :n].all() and len(set(layer.pos[0, h, :n].tolist())) == n
    if method.method == "adakv":  # H_kv * n per layer, shared unevenly between the heads
        assert all(sum(counts) == 2 * 48 for counts in held) and any(len(set(c)) > 1 for c in held)
    else:  # one budget per layer, decreasing with depth
        assert held == [[method.layer_budget(T, i, 2)] * 2 for i in range(2)] and held[0][0] > held[1][0]


@pytest.mark.parametrize("knobs", [["compression=adakv", "compression.scorer=tova", "compression.prompt_budget=64"],
                                   ["compression=pyramidkv", "compression.prompt_budget=64",
                                    "compression.window=16", "compression.beta=4"]], ids=["adakv-tova", "pyramidkv"])
def test_needle_on_tiny_llama_is_the_same_at_1_and_4_rows(tmp_path, knobs):
    base = [*TINY, "task=needle", "task.context_tokens=256", "task.n_items=3", "gen.max_new_tokens=8", *knobs]
    got = {}
    for rows in (1, 4):
        out = run(compose_cfg([*base, f"gen.rows={rows}", f"hydra.run.dir={tmp_path / str(rows)}"]),
                  tmp_path / str(rows))
        lines = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
        got[rows] = {r["item_id"]: (r["completion"], r["gen_tokens"]) for r in lines}
        assert all(r["prompt_tokens"] > 200 for r in lines)  # the budget of 64 compresses every prompt
    assert len(got[1]) == 3 and got[1] == got[4]


@pytest.mark.parametrize("name", ["adakv", "pyramidkv"])
def test_a_budget_that_keeps_everything_gives_the_full_cache_tokens(tiny_model, name):
    ps = prompts((40, 90))
    method = METHODS[name](prompt_budget=128)
    greedy = SamplingConfig(max_new_tokens=10)
    assert method.keeps_all(90, 10) and not method.needs_selection(90)
    for p in ps:
        full = generate(tiny_model, [p], NoCompression(), greedy, eos_token_ids=[], pad_token_id=0).tokens[0][0]
        assert generate(tiny_model, [p], method, greedy, eos_token_ids=[], pad_token_id=0).tokens[0][0] == full


@pytest.mark.parametrize("method", [AdaKV(prompt_budget=48, window=8), PyramidKV(prompt_budget=48, window=8, beta=2)],
                         ids=["adakv", "pyramidkv"])
def test_engine_tokens_equal_generate_at_every_row_count(tiny_model, method):
    """The engine's rows (the prefix padded to the method's slots, the padding hidden) decode what ``generate``
    decodes on the compressed cache, whatever the row count."""
    from tests.test_engine import engine_run

    ps = prompts((40, 90, 130))
    greedy = SamplingConfig(max_new_tokens=10)
    ref = [generate(tiny_model, [p], method, greedy, eos_token_ids=[], pad_token_id=0).tokens[0][0] for p in ps]
    for rows in (1, 4):
        got, _ = engine_run(tiny_model, method, greedy, ps, [(0,)] * 3, rows=rows)
        assert [got[(i, 0)][0] for i in range(3)] == ref, rows
