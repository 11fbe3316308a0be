"""What a run will cost, said before it generates: its prompts' prefill and its new tokens at most, each divided by
this device's speed measured now.

Both speeds are measured once the weights are loaded, on the loaded model itself, timed on the wall clock (so a busy
machine reads as the busy machine it is): decoding from a few decode-shaped forwards (one new token per row, ``rows``
rows as the engine holds them) after one warm-up; prefill from one forward of a prompt-sized input (up to
:data:`PREFILL_PROBE` tokens). The estimate is an upper bound of the decode time (every sample runs to
``gen.max_new_tokens``) plus the prefill of every item's prompt (each item is prefilled once, whatever its samples),
and is printed, as one line, when it exceeds :data:`SHOWN_S`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

SHOWN_S = 60.0  # a run that may take longer than this says so before it starts
TIMED_STEPS = 3
CPU_MIN_ROWS = 4  # the engine's CPU forward holds at least this many rows (docs/engine.md)
PREFILL_PROBE = 512  # prompt tokens of the timed prefill forward, at most (longer prompts: scaled by their length)


def _sync(device: Any) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def decode_tokens_per_s(model: Any, rows: int, steps: int = TIMED_STEPS) -> float:
    """Tokens per second of ``rows`` rows decoding one token each per forward, from ``steps`` timed forwards of
    ``input_ids: (rows, 1)`` after one warm-up (no cache: a lower bound of the step's cost at long contexts)."""
    import torch

    device = next(model.parameters()).device
    ids = torch.zeros((rows, 1), dtype=torch.long, device=device)
    with torch.inference_mode():
        model(input_ids=ids, use_cache=False)
        _sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            model(input_ids=ids, use_cache=False)
        _sync(device)
    return rows * steps / max(time.perf_counter() - start, 1e-9)


def prefill_tokens_per_s(model: Any, tokens: int) -> float:
    """Prompt tokens per second of one forward of ``input_ids: (1, tokens)`` (``tokens`` capped at
    :data:`PREFILL_PROBE`), timed once (the model is warm from :func:`decode_tokens_per_s`)."""
    import torch

    device = next(model.parameters()).device
    ids = torch.zeros((1, max(1, min(tokens, PREFILL_PROBE))), dtype=torch.long, device=device)
    with torch.inference_mode():
        start = time.perf_counter()
        model(input_ids=ids, use_cache=False)
        _sync(device)
    return ids.shape[1] / max(time.perf_counter() - start, 1e-9)


def duration(seconds: float) -> str:
    """``7 min 37 s``, ``2 h 05 min``, ``45 s``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


@dataclass(frozen=True)
class Work:
    """What a run has left to generate: ``items`` prompts of ``prompt_tokens`` tokens in all (each prefilled once),
    ``samples`` samples of up to ``max_new_tokens`` new tokens each."""

    items: int
    prompt_tokens: int
    samples: int
    max_new_tokens: int


@dataclass(frozen=True)
class Speeds:
    """Measured now on ``device``: prompt tokens/s of one prefill, new tokens/s of ``rows`` rows decoding."""

    prefill: float
    decode: float
    rows: int
    device: str


def cost_line(work: Work, speeds: Speeds) -> str | None:
    """The line printed before a run generates, or None when prefill and decoding take at most :data:`SHOWN_S`."""
    if work.samples <= 0 or speeds.decode <= 0 or speeds.prefill <= 0:
        return None
    prefill_s = work.prompt_tokens / speeds.prefill
    decode_s = work.samples * work.max_new_tokens / speeds.decode
    if prefill_s + decode_s <= SHOWN_S:
        return None
    return (f"expected: up to {duration(prefill_s + decode_s)} on {speeds.device}, measured now = prefill of "
            f"{work.items} prompt(s), {work.prompt_tokens:,} tokens ÷ {speeds.prefill:,.0f} tokens/s "
            f"({duration(prefill_s)}) + {work.samples} sample(s) x up to {work.max_new_tokens} new tokens "
            f"(gen.max_new_tokens) ÷ {speeds.decode:.3g} tokens/s with {speeds.rows} row(s) ({duration(decode_s)}); "
            f"task.limit or gen.max_new_tokens shorten it")


def announce(backend: Any, work: Work, rows: Any) -> str | None:
    """Measure the loaded model's prefill and decode speeds and log :func:`cost_line`, when the backend holds a
    model. Returns the line."""
    model = getattr(backend, "model", None)
    if model is None or work.samples <= 0:
        return None
    device = next(model.parameters()).device
    held = rows if isinstance(rows, int) and rows > 0 else 1
    if device.type == "cpu":
        held = max(held, CPU_MIN_ROWS)
    useful = min(held, work.samples)  # rows beyond the samples decode nothing useful
    decode = decode_tokens_per_s(model, held) * useful / held
    prefill = prefill_tokens_per_s(model, work.prompt_tokens // max(work.items, 1)) if work.prompt_tokens else 1.0
    line = cost_line(work, Speeds(prefill, decode, useful, str(device)))
    if line:
        log.info(line)
    return line
