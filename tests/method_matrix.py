"""The method matrix the generation tests run on ``tiny_llama`` (every method, budgets that compress 40-300-token
prompts and rings that wrap within a few new tokens, and the ratio variants whose budget follows the prompt; the
prompt scorers once each, two with a decode ring and one with a ratio), and the random prompts they feed it."""

from __future__ import annotations

import torch

import snapstream_core as ss

METHODS = [
    ss.NoCompression(),
    ss.SnapKV(prompt_budget=64),
    ss.StreamingLLM(sinks=4, recent=28),
    ss.SnapStream(prompt_budget=64, recent=8),
    ss.SnapKV(ratio=0.5),
    ss.SnapStream(ratio=0.5, recent=8),
    ss.Knorm(prompt_budget=64),
    ss.TOVA(prompt_budget=64, recent=8),
    ss.KeyDiff(ratio=0.5),
    ss.ExpectedAttention(prompt_budget=64, recent=8),
]
IDS = [m.method + ("-ratio" if getattr(m, "ratio", None) else "") for m in METHODS]


def prompts(lengths, seed=0) -> list[list[int]]:
    """Token id lists of the given lengths, ids in [1, 1000), reproducible from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 1000, (n,), generator=gen).tolist() for n in lengths]
