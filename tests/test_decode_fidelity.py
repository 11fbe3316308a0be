"""Compaction equals the official R-KV and decode-time SnapKV functions: kept positions per round, per (row, KV
head), in the reference's order (``tests/data/decode_compaction.pt``, written by ``bench/decode_fixture.py`` from
the official code run unmodified on a trace of the embedded model; rows are two of its layers). ``rkv_protect`` is
``compression.protect_prompt=true`` against TriAttention's ``protect_prefill`` (its R-KV baseline): the prompt kept
and only the decode segment scored."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from snapstream_core.methods.decode_base import CompactView, compact_order
from snapstream_core.methods.rkv import RKV
from snapstream_core.methods.snapkv_decode import SnapKVDecode

FIXTURE = Path(__file__).parent / "data" / "decode_compaction.pt"
NAMES = ["rkv", "snapkv_decode", "rkv_protect"]


def _load(name: str):
    fx = torch.load(FIXTURE)
    p = fx["params"]
    common = dict(budget=p["budget"], interval=p["interval"], window=p["window"], kernel=p["kernel"])
    if name == "rkv_protect":
        method = RKV(mix_lambda=p["mix_lambda"], protect_prompt=True, **{**common, "budget": p["protect_budget"]})
    else:
        method = RKV(mix_lambda=p["mix_lambda"], **common) if name == "rkv" else SnapKVDecode(**common)
    layers = list(p["layers"])
    keys = torch.stack([fx["layers"][i]["keys"].float() for i in layers])  # (R, H_kv, N, D), rows = layers
    queries = torch.stack([fx["layers"][i]["queries"].float() for i in layers])  # (R, H, N, D)
    rounds = [fx["layers"][i][name] for i in layers]  # per row: [(before, kept)] per round
    return method, keys, queries, rounds, p["prompt"]


def _compact(method, keys, queries, pos: torch.Tensor, held: int, prompt: int) -> torch.Tensor:
    """Compact rows holding the tokens at ``pos`` (R, H_kv, S) in slot order (first ``held`` slots) -> the kept
    positions (R, H_kv, kept) in slot order. The query ring: the last ``query_window`` tokens held."""
    R, H_kv, S = pos.shape
    D = keys.shape[-1]
    slots = keys.gather(2, pos[..., None].expand(R, H_kv, S, D))
    last = int(pos[0, 0, :held].max())
    view = CompactView(
        keys=slots, values=slots, positions=pos, valid=(torch.arange(S) < held).expand(R, H_kv, S),
        held=torch.full((R,), held), prompt_len=torch.full((R,), prompt),
        queries=queries[:, :, last - method.query_window + 1 : last + 1], scaling=D**-0.5, inv_freq=None,
        layer_idx=0,
    )
    order, kept = compact_order(method, view)
    return pos.gather(2, order)[:, :, : int(kept[0])]


@pytest.mark.parametrize("name", NAMES)
def test_each_round_keeps_what_the_reference_keeps(name):
    """From the reference's own cache (its slot order) at every round: the same kept positions, same order."""
    method, keys, queries, rounds, prompt = _load(name)
    S = method.budget + method.interval
    R, H_kv = keys.shape[:2]
    assert len(rounds[0]) >= 8
    for k in range(len(rounds[0])):
        before = torch.stack([row[k][0] for row in rounds])
        held = before.shape[-1]
        pos = torch.zeros(R, H_kv, S, dtype=torch.long)
        pos[:, :, :held] = before
        ours = _compact(method, keys, queries, pos, held, prompt)
        for r in range(R):
            assert torch.equal(ours[r], rounds[r][k][1]), f"round {k} row {r}"


@pytest.mark.parametrize("name", NAMES)
def test_a_replayed_decode_follows_the_reference(name):
    """The whole teacher-forced decode on our own state (slots written on the method's schedule, compacted when
    ``method.compacts``): every round's kept positions equal the reference's, and ``tokens_held`` is the count."""
    method, keys, queries, rounds, prompt = _load(name)
    R, H_kv, N, _ = keys.shape
    S = method.budget + method.interval
    pos = torch.zeros(R, H_kv, S, dtype=torch.long)
    pos[:, :, :prompt] = torch.arange(prompt)
    held, k = prompt, 0
    for p in range(prompt, N):
        pos[:, :, held] = p
        held += 1
        if method.compacts(prompt, p - prompt + 1):
            kept = _compact(method, keys, queries, pos, held, prompt)
            held = kept.shape[-1]
            assert held == method.tokens_held(prompt, p - prompt + 1)
            for r in range(R):
                assert torch.equal(kept[r], rounds[r][k][1]), f"round {k} row {r}"
            pos[:, :, :held] = kept
            k += 1
    assert k == len(rounds[0])
