"""What ``backend=vllm`` sends for one sample and how it reads the answer: pure functions, no vllm, no torch.

One vLLM request per sample (``n=1``), seeded by :func:`sample_seed` from (``gen.seed``, item id, sample index), so a
sample's draw depends on its key alone, not on which requests share a call (vLLM's float arithmetic may still vary
with the batch: docs/vllm.md)."""

from __future__ import annotations

import hashlib
from typing import Any

from snapstream_core.sampling import SamplingConfig

SEED_BITS = 62  # vLLM seeds a torch.Generator (int64)


def sample_seed(seed: int, item_id: str, sample_idx: int) -> int:
    """The vLLM seed of one sample: a hash of (``gen.seed``, item id, sample index), below ``2**62``."""
    digest = hashlib.sha256(f"{int(seed)}\0{item_id}\0{int(sample_idx)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (1 << SEED_BITS)


def sampling_params(sampling: SamplingConfig, max_new_tokens: int, eos: list[int], stop: tuple[str, ...],
                    seed: int, logprobs: int | None = None) -> dict[str, Any]:
    """``vllm.SamplingParams`` keywords for one sample: our ``gen.*`` (temperature 0 = greedy, ``top_k`` 0 = off, as
    in vLLM), the same end tokens as the hf backend (``eos``), the stop strings (vLLM stops at them; the harness cuts
    the text as the hf backend does) and ``logprobs`` top log-probabilities per step (the engine check)."""
    params: dict[str, Any] = {
        "n": 1, "temperature": float(sampling.temperature), "top_p": float(sampling.top_p),
        "top_k": int(sampling.top_k), "max_tokens": int(max_new_tokens), "seed": int(seed),
        "stop_token_ids": list(eos), "stop": list(stop), "detokenize": bool(stop),  # text only to find stop strings
        "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "min_p": 0.0, "min_tokens": 0,
    }
    if logprobs is not None:
        params["logprobs"] = int(logprobs)
    return params


def kv_figures(prompt_tokens: int, gen_tokens: int, bytes_per_token: int | None) -> dict[str, int | None]:
    """The full cache's KV figures of one sample as the hf backend reports them for ``compression=none``: the
    tokens held at the last step (the prompt and every generated token but the last) and their bytes (K and V of
    every layer, ``bytes_per_token``); vLLM's paged pool, reserved up front, is larger (``backend.*``, meta.json)."""
    held = prompt_tokens + max(gen_tokens - 1, 0)
    nbytes = None if bytes_per_token is None else held * bytes_per_token
    return {"kv_tokens_peak": held, "kv_bytes_peak": nbytes, "kv_bytes_final": nbytes}


def kv_bytes_per_token(shape: dict[str, Any], dtype: str) -> int | None:
    """K and V bytes of one token over all layers from ``model.shape`` (None when the shape is not given)."""
    try:
        n_layers, kv_heads, head_dim = int(shape["n_layers"]), int(shape["n_kv_heads"]), int(shape["head_dim"])
    except (KeyError, TypeError, ValueError):
        return None
    return 2 * n_layers * kv_heads * head_dim * (4 if dtype == "float32" else 2)
