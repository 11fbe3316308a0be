"""SnapKV selection against a plain, obviously-correct re-statement of the algorithm (loops, no vectorisation)."""

from __future__ import annotations

import math

import pytest
import torch

from snapstream_core import SnapStream, StreamingLLM, keep_indices, snapkv_scores
from snapstream_core.methods.base import PrefillView


def reference_scores(q_win, keys, scaling, kernel, pooling, gqa_agg, key_valid):
    """SnapKV written out: for every (row, query head, window query) a causal softmax over the valid keys; votes
    summed over the window; per query head 1-D pooling with padding k//2; then the group aggregate per KV head."""
    B, H, w, D = q_win.shape
    H_kv, T = keys.shape[1], keys.shape[2]
    G = H // H_kv
    P = T - w
    out = torch.zeros(B, H_kv, P, dtype=torch.float64)
    for b in range(B):
        for kv in range(H_kv):
            pooled_heads = []
            for g in range(G):
                h = kv * G + g
                votes = [0.0] * P
                for i in range(w):
                    qpos = T - w + i
                    logits = []
                    for t in range(T):
                        if t <= qpos and bool(key_valid[b, t]):
                            logits.append(float(q_win[b, h, i].double() @ keys[b, kv, t].double()) * scaling)
                        else:
                            logits.append(-math.inf)
                    m = max(logits)
                    if m == -math.inf:
                        continue  # a padded query attends to nothing
                    exps = [math.exp(x - m) if x != -math.inf else 0.0 for x in logits]
                    z = sum(exps)
                    for t in range(P):
                        votes[t] += exps[t] / z
                pooled = []
                for t in range(P):
                    window = [votes[j] if 0 <= j < P else None for j in range(t - kernel // 2, t + kernel // 2 + 1)]
                    if pooling == "max":
                        pooled.append(max(v for v in window if v is not None))
                    else:
                        pooled.append(sum(v for v in window if v is not None) / kernel)  # zero padding counted
                pooled_heads.append(pooled)
            for t in range(P):
                vals = [ph[t] for ph in pooled_heads]
                out[b, kv, t] = sum(vals) / G if gqa_agg == "mean" else max(vals)
            for t in range(P):
                if not bool(key_valid[b, t]):
                    out[b, kv, t] = -math.inf
    return out


SHAPES = [  # (B, H, H_kv, T, w, D)
    (1, 4, 2, 40, 8, 8),
    (2, 6, 3, 33, 5, 4),
    (1, 2, 2, 20, 4, 16),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("pooling", ["max", "avg"])
@pytest.mark.parametrize("gqa_agg", ["mean", "max"])
def test_snapkv_scores_equal_the_reference(shape, pooling, gqa_agg):
    B, H, H_kv, T, w, D = shape
    g = torch.Generator().manual_seed(hash(shape) % 1000)
    q = torch.randn(B, H, w, D, generator=g)
    k = torch.randn(B, H_kv, T, D, generator=g)
    valid = torch.ones(B, T, dtype=torch.bool)
    if B > 1:
        valid[1, :7] = False  # left padding on the second row
    kernel = 5
    ours = snapkv_scores(q, k, D**-0.5, kernel=kernel, pooling=pooling, gqa_agg=gqa_agg, key_valid=valid)
    ref = reference_scores(q, k, D**-0.5, kernel, pooling, gqa_agg, valid)
    assert ours.shape == (B, H_kv, T - w)
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(ours), finite)
    torch.testing.assert_close(ours.double()[finite], ref[finite], rtol=1e-5, atol=1e-7)


def test_selection_keeps_window_sinks_and_top_scores():
    torch.manual_seed(0)
    B, H, H_kv, T, D = 1, 4, 2, 64, 8
    q = torch.randn(B, H, T, D)
    k = torch.randn(B, H_kv, T, D)
    valid = torch.ones(B, T, dtype=torch.bool)
    method = SnapStream(prompt_budget=24, window=8, kernel=3, sinks=2, recent=4)
    sel = method.select(PrefillView(query=q, keys=k, key_valid=valid, scaling=D**-0.5))
    idx = keep_indices(sel.scores, sel.n_keep, sel.n_frozen, valid)
    assert idx.shape == (B, H_kv, 24)
    ref = reference_scores(q[:, :, -8:], k, D**-0.5, 3, "max", "mean", valid)
    for kv in range(H_kv):
        kept = set(idx[0, kv].tolist())
        assert set(range(T - 8, T)) <= kept  # the observation window
        assert {0, 1} <= kept  # the sinks
        prefix = ref[0, kv].clone()
        prefix[:2] = -math.inf
        best = set(prefix.topk(14).indices.tolist())
        assert kept == best | {0, 1} | set(range(T - 8, T))
        assert idx[0, kv].tolist() == sorted(kept)  # frozen prefix in position order


def _tied_scores(B: int, H_kv: int, T: int) -> torch.Tensor:
    """Scores drawn from 5 values, so that every cutoff falls inside an exact tie."""
    return torch.randint(0, 5, (B, H_kv, T), generator=torch.Generator().manual_seed(3)).float()


def test_exact_ties_are_broken_as_torch_topk_breaks_them():
    # kvpress's ScorerPress keeps scores.topk(n_kept).indices; a tie at the cutoff must go the same way.
    scores = _tied_scores(1, 3, 200)
    valid = torch.ones(1, 200, dtype=torch.bool)
    for n_keep in (3, 50, 150):  # both of topk's CPU paths (partial sort when 64 * k <= T, else nth_element)
        idx = keep_indices(scores, n_keep, n_keep, valid)
        for kv in range(3):
            assert set(idx[0, kv].tolist()) == set(scores[0, kv].topk(n_keep).indices.tolist())


def test_a_left_padded_row_keeps_in_ties_what_it_keeps_alone():
    alone = _tied_scores(1, 2, 150)
    pad = 37
    scores = torch.cat([torch.full((1, 2, pad), float("-inf")), alone], dim=-1)
    other = _tied_scores(1, 2, 150 + pad)
    batch = torch.cat([scores, other])  # row 0 left-padded, row 1 full length
    valid = torch.ones(2, 150 + pad, dtype=torch.bool)
    valid[0, :pad] = False
    for n_keep, n_frozen in ((60, 60), (60, 20)):
        mine = keep_indices(alone, n_keep, n_frozen, torch.ones(1, 150, dtype=torch.bool))
        padded = keep_indices(batch, n_keep, n_frozen, valid)
        assert torch.equal(padded[0] - pad, mine[0])  # the same tokens, frozen and ring alike
        assert torch.equal(padded[1], keep_indices(other, n_keep, n_frozen, valid[1:])[0])


def test_padding_is_never_preferred_and_goes_first_in_the_ring():
    valid = torch.tensor([[False, False, True, True, True, True]])
    method = StreamingLLM(sinks=1, recent=4)
    view = PrefillView(query=torch.zeros(1, 2, 6, 4), keys=torch.zeros(1, 1, 6, 4), key_valid=valid, scaling=1.0)
    sel = method.select(view)
    idx = keep_indices(sel.scores, sel.n_keep, sel.n_frozen, valid)
    # 5 kept: the first valid token frozen; the ring holds one pad (oldest, overwritten first), then 3, 4, 5.
    assert idx[0, 0].tolist() == [2, 0, 3, 4, 5]


def test_streaming_prompt_budget_sets_recent():
    assert StreamingLLM(sinks=4, prompt_budget=256).recent == 252
    assert StreamingLLM(sinks=4, recent=60).prompt_budget == 64


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(prompt_budget=16, window=32), "prompt_budget"),
        (dict(kernel=4), "kernel"),
        (dict(pooling="median"), "pooling"),
        (dict(gqa_agg="sum"), "gqa_agg"),
        (dict(positions="relative"), "positions"),
        (dict(recent=0), "recent"),
    ],
)
def test_knobs_are_validated_on_construction(kwargs, field):
    with pytest.raises(ValueError, match=f"compression.{field}"):
        SnapStream(**kwargs)
