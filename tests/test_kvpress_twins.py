"""Each prompt scorer, AdaKV (on SnapKV) and PyramidKV keep exactly the positions of their kvpress 0.5.5 twins on the
embedded SmolLM2, on every layer and KV head, through the engine's prefill (``prefill_prompt``), without kvpress:
``tests/data/kvpress_kept.json`` holds what kvpress's presses kept on a 320-token prompt (written by
``bench/kvpress_check/fixture.py`` in kvpress's own environment; AdaKV's a count per head, PyramidKV's a count per
layer). The 3,083-token comparison with timings is ``make kvpress-check``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import snapstream_core as ss
from snapstream_core.prefill import prefill_prompt

FIXTURE = json.loads((Path(__file__).parent / "data" / "kvpress_kept.json").read_text())


def ours(name: str) -> ss.CompressionMethod:
    meta = FIXTURE["meta"]
    n = meta["n_keep"]
    snapkv = dict(window=meta["window"], kernel=meta["kernel"], pooling="avg", gqa_agg="mean", sinks=0)
    if name == "snapkv":
        return ss.SnapKV(prompt_budget=n, **snapkv)
    if name == "adakv":  # kvpress's AdaKVPress(SnapKVPress(...)) at its default alpha_safeguard
        return ss.METHODS[name](scorer="snapkv", prompt_budget=n, alpha_safeguard=0.2, **snapkv)
    if name == "pyramidkv":  # kvpress's budgets read the float T * (1 - compression_ratio): the same ratio
        return ss.METHODS[name](ratio=meta["compression_ratio"], beta=meta["pyramid_beta"], **snapkv)
    return ss.METHODS[name](prompt_budget=n)


def held(layer) -> list[str]:
    """Each KV head's valid slots (a ragged layer's padding left out) as the hex mask of their positions."""
    valid = layer.valid[0] if layer.valid is not None else torch.ones_like(layer.pos[0], dtype=torch.bool)
    return [format(sum(1 << p for p in pos[v].tolist()), "x") for pos, v in zip(layer.pos[0], valid, strict=True)]


@pytest.mark.parametrize("name", list(FIXTURE["kept"]))
def test_kept_positions_equal_kvpress_on_every_layer_and_head(smollm2, name):
    model, _ = smollm2
    ids = torch.tensor([FIXTURE["ids"]])
    cache, _ = prefill_prompt(model, ids, ours(name), chunk_size=96)  # chunked: the running moments are summed
    got = [held(layer) for layer in cache.layers]
    theirs = FIXTURE["kept"][name]
    differ = [(i, h) for i, layer in enumerate(theirs) for h, mask in enumerate(layer) if got[i][h] != mask]
    assert len(got) == len(theirs) and not differ, differ
