"""Write ``tests/data/h2o_compaction.pt``: the tokens the official H2O keeps, its code run unmodified on a trace of
the embedded model, for ``tests/test_h2o_fidelity.py``.

Usage (FMInference/H2O checked out outside ours; ``fetch`` gives a git dir: ``git --git-dir=G archive HEAD
h2o_hf/utils_real_drop | tar -x -C DIR``)::

    python -m bench.h2o_fixture --h2o DIR [--out tests/data/h2o_compaction.pt]

The reference: ``h2o_hf/utils_real_drop/modify_llama.py`` (FMInference/H2O ac75c2a), ``H2OKVCache_LayerWise``,
loaded by path. ``H2OLlamaAttention.forward`` hands it each forward's softmax weights, ``softmax(q k^T / sqrt(D) +
causal mask, float32)``; they are computed here the same way from the trace. The reference is written for multi-head
attention (its ``hh_score`` has one row per head and indexes the keys with it), so with the trace's grouped-query
attention (9 query heads, 3 KV heads) it is given each KV head's weights averaged over its query heads, as
KVCache-Factory's ``H2OKVCluster`` reduces them (``_reduce_group_scores``, ``gqa_score_agg='mean'``).

The trace: the post-RoPE keys and queries of two layers of SmolLM2-135M-Instruct over ``bench.decode_fixture``'s
text (its ``capture``), stored in float16 (both sides compute from the same float32 copy). The decode is replayed with
teacher forcing: the prompt's ``PROMPT`` tokens in one forward (the reference's first call: the scores seeded with
the prompt's attention, the cache cut when it holds more than ``hh_size + recent_size``), then one token per step.
Two schedules: ``every_step`` calls the reference after every token as its forward does (``interval=1``);
``interval`` calls it at the positions ``p % INTERVAL == 0`` of the other decode methods and only
``_update_hh_score`` (the reference's own accumulation) at the others. The values carry each entry's position, so the
values the reference keeps are the kept positions, in its order.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import math
import sys
from pathlib import Path

import torch

log = logging.getLogger(__name__)

PROMPT, TOKENS, WINDOW, INTERVAL = 40, 200, 8, 16
SCHEDULES = {"every_step": (24, 1), "interval": (40, INTERVAL)}  # name: (hh_size, interval); recent_size = WINDOW


def reference_class(h2o_dir: Path):
    """``H2OKVCache_LayerWise``, its source unmodified."""
    path = h2o_dir / "h2o_hf" / "utils_real_drop" / "modify_llama.py"
    spec = importlib.util.spec_from_file_location("h2o_ref_modify_llama", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.H2OKVCache_LayerWise


def weights(queries: torch.Tensor, keys: torch.Tensor, first: int) -> torch.Tensor:
    """(1, H_kv, q, n): ``H2OLlamaAttention.forward``'s softmax weights of the queries at positions ``first..``
    (queries (H, q, D)) over the keys (H_kv, n, D), causal, averaged over each KV head's query heads."""
    H, q, D = queries.shape
    H_kv, n, _ = keys.shape
    group = H // H_kv
    logits = torch.matmul(queries, keys.repeat_interleave(group, dim=0).transpose(1, 2)) / math.sqrt(D)
    mask = torch.full((q, n), torch.finfo(logits.dtype).min)
    mask.masked_fill_(torch.arange(n)[None, :] <= (first + torch.arange(q))[:, None], 0)
    probs = torch.softmax(logits + mask, dim=-1, dtype=torch.float32)
    return probs.view(H_kv, group, q, n).mean(dim=1)[None]


def replay(make, keys: torch.Tensor, queries: torch.Tensor, hh_size: int, interval: int) -> torch.Tensor:
    """(cuts, H_kv, hh_size + WINDOW) int16: the positions held after each call that cut the cache, in the
    reference's order."""
    H_kv, N, D = keys.shape
    cache = make(hh_size=hh_size, recent_size=WINDOW)
    pos = torch.arange(N, dtype=torch.float32)[None, :, None].expand(H_kv, N, D)
    k, v = keys[None, :, :PROMPT], pos[None, :, :PROMPT]
    rounds = []

    def call(attn):
        nonlocal k, v
        held = k.shape[2]
        k, v = cache((k, v), attn)
        if k.shape[2] < held:
            rounds.append(v[0, :, :, 0].short())  # positions < TOKENS

    call(weights(queries[:, :PROMPT], keys[:, :PROMPT], 0))
    for p in range(PROMPT, N):
        k = torch.cat([k, keys[None, :, p : p + 1]], dim=2)
        v = torch.cat([v, pos[None, :, p : p + 1]], dim=2)
        held = v[0, :, :, 0].long()  # (H_kv, n): the positions whose keys the query at p attends to
        attn = weights(queries[:, p : p + 1], keys.gather(1, held[..., None].expand(H_kv, -1, D)), p)
        if p % interval == 0:
            call(attn)
        else:
            cache._update_hh_score(attn)
    return torch.stack(rounds)


def main(argv: list[str] | None = None) -> None:
    from bench.decode_fixture import LAYERS, TEXT, capture

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--h2o", type=Path, required=True, help="checkout of FMInference/H2O (ac75c2a)")
    parser.add_argument("--out", type=Path, default=Path("tests/data/h2o_compaction.pt"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    make = reference_class(args.h2o)
    trace = capture(TOKENS)
    fixture = {"params": dict(prompt=PROMPT, tokens=TOKENS, window=WINDOW, layers=LAYERS, schedules=SCHEDULES,
                              text=TEXT, reference="FMInference/H2O ac75c2a h2o_hf/utils_real_drop/modify_llama.py"),
               "layers": {}}
    for layer, (keys, queries) in trace.items():
        keys16, queries16 = keys.half(), queries.half()
        keys, queries = keys16.float(), queries16.float()
        entry = {"keys": keys16, "queries": queries16}
        for name, (hh_size, interval) in SCHEDULES.items():
            entry[name] = replay(make, keys, queries, hh_size, interval)
            log.info("layer %d, %s: %d cuts", layer, name, len(entry[name]))
        fixture["layers"][layer] = entry
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(fixture, args.out)
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
