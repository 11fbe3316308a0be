"""Each prompt scorer keeps exactly the positions of its kvpress 0.5.5 twin on the embedded SmolLM2, through the
engine's prefill (``prefill_prompt``), without kvpress: ``tests/data/kvpress_kept.json`` holds what kvpress's presses
kept on a 320-token prompt (written by ``bench/kvpress_check/fixture.py`` in kvpress's own environment). The
3,083-token comparison with timings is ``make kvpress-check``."""

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
    if name == "snapkv":
        return ss.SnapKV(prompt_budget=n, window=meta["window"], kernel=meta["kernel"], pooling="avg",
                         gqa_agg="mean", sinks=0)  # fmt: skip
    return ss.METHODS[name](prompt_budget=n)


@pytest.mark.parametrize("name", list(FIXTURE["kept"]))
def test_kept_positions_equal_kvpress_on_every_layer_and_head(smollm2, name):
    model, _ = smollm2
    ids = torch.tensor([FIXTURE["ids"]])
    cache, _ = prefill_prompt(model, ids, ours(name), chunk_size=96)  # chunked: the running moments are summed
    got = [[format(sum(1 << p for p in row.tolist()), "x") for row in layer.pos[0]] for layer in cache.layers]
    theirs = FIXTURE["kept"][name]
    differ = [(i, h) for i, layer in enumerate(theirs) for h, mask in enumerate(layer) if got[i][h] != mask]
    assert len(got) == len(theirs) and not differ, differ
