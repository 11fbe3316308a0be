"""What both sides of the kvpress cross-check share; needs torch and transformers only (any version from 5.0).

Imported as ``bench.kvpress_check.common`` on our side and as ``common`` by ``theirs.py`` (run as a script from this
folder in kvpress's environment).
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import torch

JOB = "job.json"


def read_job(folder: Path) -> dict:
    return json.loads((Path(folder) / JOB).read_text())


def load_model(model_dir: str):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").eval()


def keep_ratio(n_tokens: int, n_keep: int) -> float:
    """The ``compression_ratio`` both sides use to keep ``n_keep`` of ``n_tokens`` (kvpress's ``int(T * (1 - r))``
    is ``n_keep``; PyramidKV reads the float ``T * (1 - r)`` itself, so ours is built with the same ratio)."""
    return 1 - (n_keep + 0.5) / n_tokens


def selected_positions(scores: torch.Tensor, n_keep: int) -> list[list[int]]:
    """Sorted positions of the ``n_keep`` highest scores of each head: scores (H_kv, T) -> H_kv lists."""
    return [sorted(row.tolist()) for row in scores.topk(n_keep, dim=-1).indices]


@torch.no_grad()
def timed_run(model, ids: torch.Tensor, cache, steps: int, prefill_ctx=None, decode_ctx=None) -> dict:
    """Prefill ``ids`` (1, T) into ``cache``, then ``steps`` greedy decode steps, each a plain forward with explicit
    positions T, T+1, ... (kvpress's own pipeline loop; a compressed cache is shorter than the positions).

    ``prefill_ctx``/``decode_ctx``: context managers around each phase (kvpress's ``press(model)``).
    Returns prefill seconds, decode ms per step, the greedy tokens and the KV length per layer at the end.
    """
    T = ids.shape[-1]
    t0 = time.perf_counter()
    with prefill_ctx or contextlib.nullcontext():
        out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    token = out.logits[:, -1].argmax(-1, keepdim=True)
    t1 = time.perf_counter()
    tokens = [int(token)]
    kv_after_prefill = _kv_len(cache)
    with decode_ctx or contextlib.nullcontext():
        for i in range(steps):
            pos = torch.tensor([[T + i]], device=ids.device)
            out = model(input_ids=token, past_key_values=cache, position_ids=pos, use_cache=True)
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(int(token))
    t2 = time.perf_counter()
    return {
        "prefill_s": t1 - t0,
        "decode_ms_per_token": 1000 * (t2 - t1) / steps,
        "tokens": tokens,
        "kv_after_prefill": kv_after_prefill,
        "kv_final": _kv_len(cache),
    }


def _kv_len(cache) -> int:
    layer = cache.layers[0]
    if hasattr(layer, "tokens_held"):
        return int(layer.tokens_held())
    return int(layer.keys.shape[-2])
